"""Checker.reports(out_filter=...): events recorded as written (V_OUT) and dropped afterwards by a
time filter give the reports of a checker that never recorded them in V_OUT (merge's one-pass
``--steps`` / ``--window``).  The expected side accounts each event in the views it keeps, with
no filter; the dropped events' counts come from a checker that accounts only them."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.kernels import validate as KV
from streamtrace.validate.check import Checker, ValidateOptions, gather_ranges
from streamtrace.validate.merged import rank_validation, split_reports, split_validation
from streamtrace.validate.ordered import OutFilter

ids = st.one_of(st.integers(0, 3), st.sampled_from(["a", None]))
event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "X", "s", "f", "i", None])},
    optional={"pid": st.one_of(st.integers(0, 2), st.sampled_from(["p", None])),
              "tid": st.one_of(st.integers(0, 2), st.just(None)),
              "ts": st.one_of(st.integers(0, 40), st.sampled_from([1.5, 2.25, None, "7"])),
              "dur": st.one_of(st.integers(-3, 30), st.sampled_from([0, 0, 0.5, None, "3"])),
              "cat": st.sampled_from(["ac2g", "kernel", "cpu_op"]), "id": ids,
              "args": st.fixed_dictionaries({}, optional={"rank": st.integers(0, 1)})})

whole = st.fixed_dictionaries(          # the common case: every field there
    {"ph": st.just("X"), "pid": st.integers(0, 1), "tid": st.integers(0, 1), "ts": st.integers(0, 40),
     "dur": st.integers(-1, 30), "cat": st.sampled_from(["cpu_op", "kernel"])})
flow = st.fixed_dictionaries(
    {"ph": st.sampled_from(["s", "f"]), "pid": st.integers(0, 1), "tid": st.integers(0, 1), "ts": st.integers(0, 40),
     "id": st.integers(0, 3), "cat": st.just("ac2g"), "args": st.fixed_dictionaries({"rank": st.integers(0, 1)})})
events_of = st.lists(st.one_of(whole, whole, flow, event), min_size=1, max_size=40)


def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def kept_by_window(ev, lo, hi, coin) -> bool:
    """Merge's window rule for an ``X`` event with a numeric ``ts`` (ns: the trace's us * 1000),
    ``dur`` read as 0 when absent or not a number; any other event: ``coin``."""
    if ev["ph"] != "X" or not number(ev.get("ts")):
        return coin
    ts = round(ev["ts"] * 1000)
    dur = round(ev["dur"] * 1000) if number(ev.get("dur")) else 0
    return ts + max(dur, 0) >= lo and ts <= hi


def fields(events) -> np.ndarray:
    """The fields of ``events`` as the checker reads their JSON bytes."""
    parts = [json.dumps(e).encode() for e in events]
    starts = np.cumsum([0] + [len(p) for p in parts[:-1]]).astype(np.int64)
    ends = (starts + [len(p) for p in parts]).astype(np.int64)
    with Checker() as chk:
        return chk.read(b"".join(parts), starts, ends, 0, "t.json").copy()


def account(chk, f, view, cuts, out_pid):
    for a, b in zip([0] + cuts, cuts + [len(f)]):
        chk.account(f[a:b], view if np.isscalar(view) else view[a:b], out_pid=out_pid)


ns = [0, 0, 0, 1, -1, 500]      # a window end's ns past a whole us


def the_cuts(n, k):
    return sorted({n * i // k for i in range(1, k)})


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(events_of, st.integers(-5, 45), st.integers(-1, 45), st.sampled_from(ns),
       st.sampled_from(ns), st.data(), st.integers(1, 6), st.integers(1, 4), st.booleans(), st.booleans())
def test_filter_after_the_fact_is_never_recording(tmp_path, events, lo, width, lo_ns, hi_ns, data, rows, batches,
                                                  out_pid, short):
    lo, hi = lo * 1000 + lo_ns, (lo + width) * 1000 + hi_ns      # often on an event's start or end
    coins = data.draw(st.lists(st.booleans(), min_size=len(events), max_size=len(events)))
    kept = np.array([kept_by_window(e, lo, hi, c) for e, c in zip(events, coins)])
    f = fields(events)
    opt = ValidateOptions(sort_rows=rows, spill_dir=str(tmp_path))
    cuts = the_cuts(len(f), batches)
    with Checker(opt) as want:
        account(want, f, np.where(kept, KV.V_IN | KV.V_OUT, KV.V_IN), cuts, out_pid)
        expected = want.reports()
    with Checker(opt) as gone:                   # the dropped events' share of the V_OUT counters
        gone.account(f[~kept], KV.V_OUT, out_pid=out_pid)
    dropped = ~kept
    if short:                                    # seq past the array's end: kept
        dropped = dropped[:int(np.flatnonzero(dropped)[-1]) + 1] if dropped.any() else None
    filt = OutFilter(lo, hi, dropped, gone.events[1], gone.missing[1], gone.negdur[1])
    with Checker(opt) as chk:
        account(chk, f, KV.V_IN | KV.V_OUT, cuts, out_pid)
        assert chk.reports(out_filter=filt) == expected
    keep = tmp_path / "parked.val"               # merge --window: handed over (pickled) to the deciding task
    with Checker(opt, keep=str(keep)) as parked:
        account(parked, f, KV.V_IN | KV.V_OUT, cuts, out_pid)
        handed = pickle.loads(pickle.dumps(parked.hand_over()))
    with Checker.take_over(handed, opt) as chk:
        assert chk.reports(out_filter=filt) == expected
    assert not list(tmp_path.glob("parked.val*"))
    if batches > 1:                              # split ranges: sorted runs per range, then merged
        logs = []
        for i, (a, b) in enumerate(zip([0] + cuts, cuts + [len(f)])):
            part = Checker.for_range(i, opt)
            part.account(f[a:b], KV.V_IN | KV.V_OUT, out_pid=out_pid)
            logs.append(part.save_runs(str(tmp_path / f"{i}.log")))
            part.close()
        with gather_ranges(logs, opt) as chk:
            assert chk.reports(out_filter=filt) == expected


def test_window_edges_and_one_view(tmp_path):
    """Both ends inclusive; a slice dropped from V_OUT still counts in V_IN; report(v, ...)."""
    evs = [{"ph": "X", "pid": 1, "tid": 1, "ts": t, "dur": d} for t, d in ((0, 5), (10, 0), (20, 3), (30, 1))]
    evs += [{"ph": "s", "pid": 1, "tid": 1, "ts": 10, "id": 7, "cat": "ac2g"},
            {"ph": "f", "pid": 1, "tid": 1, "ts": 40, "id": 7, "cat": "ac2g"}]
    f = fields(evs)
    filt = OutFilter(5000, 20000, np.array([0, 0, 0, 1, 0, 1], bool), events=2)    # 4th slice, the f end
    with Checker(ValidateOptions(spill_dir=str(tmp_path))) as chk:
        chk.account(f, KV.V_IN | KV.V_OUT)
        rin, rout = chk.reports(out_filter=filt)
    assert (rin["events"], rin["tracks"], rin["flows"], rin["notices"]["unmatched_flow"]) == (6, 1, 1, 0)
    assert (rout["events"], rout["tracks"], rout["flows"], rout["notices"]["unmatched_flow"]) == (4, 1, 1, 1)
    with Checker(ValidateOptions(spill_dir=str(tmp_path))) as chk:
        chk.account(f, KV.V_IN | KV.V_OUT)
        assert chk.report(1, OutFilter(31001, 40000, None, events=4))["tracks"] == 0


def test_more_dropped_than_written_is_an_error(tmp_path):
    f = fields([{"ph": "i", "pid": 1, "tid": 1, "ts": 1}])
    with Checker(ValidateOptions(spill_dir=str(tmp_path))) as chk:
        chk.account(f, KV.V_IN | KV.V_OUT)
        with pytest.raises(ValueError, match="out filter: 2 dropped of 1 written"):
            chk.reports(out_filter=OutFilter(0, 1, events=2))


def test_split_validation_takes_the_filter(tmp_path):
    """merge's split rank: its ranges' logs replayed with the filter (dropped_seq over the whole rank)."""
    evs = [{"ph": "X", "pid": 1, "tid": 1, "ts": t, "dur": 4} for t in range(0, 40, 3)]
    evs += [{"ph": p, "pid": 1, "tid": 2, "ts": 5, "id": i, "cat": "ac2g"} for i in range(3) for p in "sf"]
    f = fields(evs)
    filt_kept = np.array([kept_by_window(e, 9000, 20000, i % 4 != 0) for i, e in enumerate(evs)])
    with Checker(ValidateOptions(spill_dir=str(tmp_path))) as want:
        want.account(f, np.where(filt_kept, KV.V_IN | KV.V_OUT, KV.V_IN), out_pid=True)
        expected = rank_validation(want.reports(), 99, True)
    parts = []
    for i, (a, b) in enumerate(((0, 7), (7, 15), (15, len(f)))):
        part = Checker.for_range(i)
        part.account(f[a:b], KV.V_IN | KV.V_OUT, out_pid=True)
        parts.append({"parts": part.save_runs(str(tmp_path / f"{i}.val")), "exact": True})
        part.close()
    filt = OutFilter(9000, 20000, ~filt_kept, events=int((~filt_kept).sum()))
    assert split_validation(parts, str(tmp_path), 99, filt) == expected
    assert expected["output"]["notices"]["unmatched_flow"] > 0 and expected["output"]["events"] == 99
    assert not list(tmp_path.glob("*.val"))


def test_a_pending_filter_is_completed_once_after_the_slices(tmp_path):
    """merge's split filter decides the dropped events in a thread while the slices are checked: the
    reports with a pending filter are those with the complete one, which is asked for once; an error
    in it reaches the caller and the logs are still removed."""
    evs = [{"ph": "X", "pid": 1, "tid": 1, "ts": t, "dur": 4} for t in range(0, 40, 3)]
    evs += [{"ph": p, "pid": 1, "tid": 2, "ts": 5 + 20 * (i == 1), "id": i, "cat": "ac2g"} for i in range(3) for p in "sf"]
    f = fields(evs)
    filt_kept = np.array([kept_by_window(e, 9000, 20000, i % 4 != 0) for i, e in enumerate(evs)])
    filt = OutFilter(9000, 20000, ~filt_kept, events=int((~filt_kept).sum()))

    def counters(tag):
        out = []
        for i, (a, b) in enumerate(((0, 7), (7, len(f)))):
            part = Checker.for_range(i)
            part.account(f[a:b], KV.V_IN | KV.V_OUT, out_pid=True)
            out.append(part.save_runs(str(tmp_path / f"{tag}{i}.val")))
            part.close()
        return out
    expected = split_reports(counters("a"), str(tmp_path), filt)
    calls = []
    pending = OutFilter(9000, 20000, pending=lambda: calls.append(1) or filt)
    assert split_reports(counters("b"), str(tmp_path), pending) == expected
    unfiltered = split_reports(counters("u"), str(tmp_path))
    assert calls == [1] and expected[1]["notices"] != unfiltered[1]["notices"]    # the flow ends' view took the drops

    def fails():
        raise RuntimeError("decision failed")
    with pytest.raises(RuntimeError, match="decision failed"):
        split_reports(counters("c"), str(tmp_path), OutFilter(9000, 20000, pending=fails))
    assert not list(tmp_path.glob("*.val"))
