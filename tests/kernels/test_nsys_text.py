"""An Nsight Systems batch's events as text (``streamtrace.merge.nsys.batch_text``, through the
kernel ``streamtrace.kernels.nsys_text.nsys_event_text``) against its plain-Python twin, the event
dicts of ``streamtrace.merge.nsys.event_dicts`` serialised by ``dumps_events`` (orjson): the same
bytes, the same pids noted in the same order, the same flow ends marked and counted (hypothesis)."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamtrace.merge.nsys import batch_text, event_dicts
from streamtrace.trace.nsys import KINDS, ROW_DTYPE
from streamtrace.trace.writer import dumps_events

TIMES = st.one_of(st.integers(-10 ** 4, 10 ** 18),
                  st.sampled_from([0, 1, 999, 1000, 1010, 1100, -1, -1000, -(1 << 63)]))
CORR = st.one_of(st.integers(-1, 50), st.sampled_from([(1 << 40) - 1, 1 << 40, (1 << 62)]))
NAMES = (st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
         | st.sampled_from(['"', "\\", "\n\t", "é€😀"]))


class Export:
    """What the writers ask of an export: its processes and its names."""

    def __init__(self, names: dict, procs: list):
        self._names = names
        self.processes = [SimpleNamespace(key=k, pid=pid, host=host) for k, pid, host in procs]

    def names(self, ids):
        return {int(i): self._names[int(i)] for i in ids}


rows = st.lists(st.tuples(TIMES, TIMES, st.integers(0, len(KINDS) - 1), st.integers(-1, 4), st.integers(0, 2),
                          st.integers(-1, 1 << 33), st.integers(0, 3), st.integers(-1, 40), CORR,
                          st.integers(0, 4), st.integers(-1, 3)),
                min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(rows, st.booleans(), st.booleans(), st.lists(NAMES, min_size=6, max_size=6), st.lists(st.booleans(), min_size=5,
                                                                                            max_size=5))
@example(rows=[(1010, -1, 0, 1, 0, 7, 0, 2, 1 << 40, 0, 0), (1 << 62, 0, 3, -1, 1, 8, 1, -1, 5, 1, 0)], gpu=True,
         default=False, names=["a", "", "b", "c", "d", "e"], done0=[False] * 5)
def test_batch_text_is_the_dicts_serialised(rows, gpu, default, names, done0):
    b = np.zeros(len(rows), ROW_DTYPE)
    for j, (ts, dur, kind, name, proc, tid, dev, stream, corr, rank, flow) in enumerate(rows):
        b[j] = (ts // 2, dur, kind, name, proc, tid, dev, stream, corr, -1)
    rank = np.array([r[9] for r in rows], np.int64)
    shift = np.array([(r[9] - 2) * 1000 for r in rows], np.int64)
    fi = np.array([r[10] if r[8] >= 0 else -1 for r in rows], np.int64)      # a flow starts at a correlated row
    ex = Export({i - 1: n for i, n in enumerate(names)}, [(0, 41, "h0"), (1, 42, "h1"), (2, 43, "h2")])
    own = SimpleNamespace(default=2 if default else None)
    seen = {101: {"rank": 0, "pid": 0}}
    done = np.array(done0, bool)
    want_seen, want_done, want_counts = copy.deepcopy(seen), done.copy(), {"flows": 3}
    want = event_dicts(ex, b, (rank, shift, fi), (own, want_done), gpu, want_seen, want_counts)
    counts = {"flows": 3}
    data, n = batch_text(ex, b, (rank, shift, fi), (own, done), gpu, seen, counts)
    assert data == dumps_events(want) and n == len(want)
    assert list(seen.items()) == list(want_seen.items())
    assert done.tolist() == want_done.tolist() and counts == want_counts


def test_a_name_orjson_refuses_goes_through_the_dicts():
    """A lone surrogate (SQLite text can hold one): the batch falls back to the dicts, whose writer
    escapes it, and the result is still the twin's."""
    b = np.zeros(2, ROW_DTYPE)
    b["name"] = [0, 1]
    b["correlation"] = -1
    ex = Export({0: "ok", 1: "bad\ud800"}, [(0, 41, "h0")])
    rank, z = np.zeros(2, np.int64), np.zeros(0, bool)
    want = event_dicts(ex, b, (rank, rank, rank - 1), (SimpleNamespace(default=None), z), False, {}, {"flows": 0})
    data, n = batch_text(ex, b, (rank, rank, rank - 1), (SimpleNamespace(default=None), z), False, {}, {"flows": 0})
    assert data == dumps_events(want) and n == 2
    assert b"\\ud800" in data


def test_by_hand():
    b = np.zeros(1, ROW_DTYPE)
    b[0] = (1_500_250, 2_000, 0, 5, 0, -1, 1, 7, 9, -1)
    ex = Export({5: 'k"1'}, [(0, 41, "h0")])
    done = np.zeros(1, bool)
    data, n = batch_text(ex, b, (np.array([2]), np.array([1000]), np.array([0])), (SimpleNamespace(default=None), done),
                         True, {}, {"flows": 0})
    uid = (2 << 40) | 9
    assert orjson.loads(b"[" + data + b"]") == [
        {"ph": "X", "cat": "kernel", "name": 'k"1', "pid": 2 * 1000 + 1 + 100 + 1, "tid": 7, "ts": 1501.25, "dur": 2,
         "args": {"rank": 2, "correlation": uid, "raw correlation": 9, "device": 1, "stream": 7}},
        {"ph": "f", "id": uid, "pid": 2102, "tid": 7, "ts": 1501.25, "cat": "ac2g", "name": "ac2g", "args": {"rank": 2},
         "bp": "e"}]
    assert n == 2 and done.tolist() == [True]
