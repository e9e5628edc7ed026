"""``events.ingest``: which rows of a trace are stored, under which key, against a plain-Python reading of
the same events (json.loads of the file, the rules of ``ingest``'s docstring)."""
from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.events.ingest import ingest
from streamtrace.events.store import MemoryStore

GPU_CATS = frozenset({"kernel", "gpu_memcpy"})
TAG = {"kernel": "gpu", "gpu_memcpy": "gpu", "gpu_user_annotation": "gpuanno", "cuda_sync": "gpusync"}

event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "i", "B"]), "pid": st.integers(-2, 3), "tid": st.integers(0, 3)},
    optional={"cat": st.sampled_from(["kernel", "gpu_memcpy", "cpu_op", "gpu_user_annotation", "cuda_sync",
                                      "Trace", ""]),
              "name": st.sampled_from(["mm", "nccl:all_reduce", "a\u00e9", ""]),
              "ts": st.integers(-10 ** 6, 10 ** 9), "dur": st.integers(-3, 10 ** 4),
              "args": st.fixed_dictionaries({}, optional={"rank": st.integers(0, 3)})})


def _expected(events) -> dict:
    """``{(tag, rank, pid, tid): [(ts_ns, dur_ns), ...]}`` in file order, from the events as dicts: complete
    events with a ts and a dur >= 0; GPU categories, GPU annotations and cuda_sync under their tags; every
    other category (or none) but ``Trace`` as a CPU event when its pid is >= 0, cuda_sync events too."""
    out: dict = {}
    for ev in events:
        if ev["ph"] != "X" or "ts" not in ev or ev.get("dur", -1) < 0:
            continue
        cat = ev.get("cat")
        rank = ev.get("args", {}).get("rank", -1)
        tags = [TAG[cat]] if cat in TAG else []
        if cat != "Trace" and cat not in GPU_CATS and cat != "gpu_user_annotation" and ev["pid"] >= 0:
            tags.append("cpu")
        for tag in tags:
            out.setdefault((tag, rank, ev["pid"], ev["tid"]), []).append((ev["ts"] * 1000, ev["dur"] * 1000))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(event, max_size=60))
def test_stored_rows_are_the_complete_events_by_kind_and_thread(tmp_path_factory, events):
    """Every complete, timed event is stored under its kind's key (none lost: a first batch whose events
    carry no cat and no name, the string table still empty, included), in file order; the rest are not."""
    path = tmp_path_factory.mktemp("ingest") / "rank_0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    store = MemoryStore(chunk_events=7)
    ingest(path, store, GPU_CATS)
    got = {}
    for key in store.keys():
        rows = np.concatenate(list(store.blocks(key)))
        got[key] = list(zip(rows["ts"].tolist(), rows["dur"].tolist()))
    assert got == _expected(events)


def test_events_without_cat_or_name_are_stored(tmp_path):
    """Found in review: a trace whose first events have neither ``cat`` nor ``name`` (no string read yet)
    failed with an IndexError; its events are CPU events like any other."""
    path = tmp_path / "rank_0.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}))
    store = MemoryStore()
    ingest(path, store, GPU_CATS)
    assert store.keys() == [("cpu", -1, 1, 1)]
