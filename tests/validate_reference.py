"""The plain-Python reference of ``streamtrace validate`` (its implementation before the columnar
rewrite): a Python loop over decoded events, every X slice kept per (pid, tid) track and every
flow in a dict (GPU activities, issue 33, on a track of their own).  The tests check ``streamtrace.validate.check.validate`` against it.

One change from that implementation: a flow's ``cat`` goes through ``_h`` as ``pid``/``tid``/``id``
do (a list or object ``cat`` made it raise ``TypeError: unhashable type``)."""
from __future__ import annotations

import numpy as np

from streamtrace.kernels.nesting import count_bad_nesting, sort_track
from streamtrace.kernels.reference import count_bad_nesting_py
from streamtrace.trace.reader import TraceReader

PROBLEMS = ("missing_field", "negative_dur", "duplicate_flow", "cross_rank_flow", "bad_nesting")
NOTICES = ("unmatched_flow", "gpu_stream_overlap")      # and repaired_event: the reader's repairs
# a GPU activity's X slices are a track of their own, their overlaps a notice (issue 33, class 8)
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")


def validate_py(path, salvage=False) -> dict:
    """Validate one trace file; the same report as ``streamtrace.validate.check.validate``."""
    problems = dict.fromkeys(PROBLEMS, 0)
    tracks = {}
    flows = {}     # (cat, id) -> [n_start, n_finish, rank or None, cross]
    r = TraceReader(path, salvage=salvage)
    n = 0
    for b in r.raw_batches():
        flags = b.flags.tolist()
        ts, dur = b.ts_ns.tolist(), b.dur_ns.tolist()
        for i, ev in enumerate(b.events):
            n += 1
            if not isinstance(ev, dict):
                problems["missing_field"] += 1
                continue
            ph = ev.get("ph")
            if ph is None or "pid" not in ev or "tid" not in ev or not flags[i] & 1 or flags[i] & 4:
                problems["missing_field"] += 1
                continue
            if ph == "X":
                if not flags[i] & 2 or flags[i] & 8 or dur[i] < 0:
                    problems["negative_dur"] += 1
                    continue
                gpu = isinstance(ev.get("cat"), str) and ev["cat"] in GPU_CATS
                tracks.setdefault((gpu, _h(ev["pid"]), _h(ev["tid"])), []).append((ts[i], ts[i] + dur[i]))
            elif ph in ("s", "f"):
                k = (_h(ev.get("cat")), _h(ev.get("id")))
                args = ev.get("args")
                rank = args.get("rank") if isinstance(args, dict) else None
                rec = flows.get(k)
                if rec is None:
                    rec = flows[k] = [0, 0, rank, False]
                rec[0 if ph == "s" else 1] += 1
                if rank is not None and rec[2] is not None and rank != rec[2]:
                    rec[3] = True
    if not r.has_events:            # {}, "traceEvents": null, an object, a number (issue 19)
        problems = {"no_trace_events": 1, **problems}
    notices = dict.fromkeys(NOTICES, 0)
    for rec in flows.values():
        if rec[0] == 0 or rec[1] == 0:
            notices["unmatched_flow"] += 1
        if rec[0] > 1 or rec[1] > 1:
            problems["duplicate_flow"] += 1
        if rec[3]:
            problems["cross_rank_flow"] += 1
    for (gpu, _, _), t in tracks.items():
        s, e = sort_track(np.asarray([a for a, _ in t], np.int64), np.asarray([b for _, b in t], np.int64))
        (notices if gpu else problems)["gpu_stream_overlap" if gpu else "bad_nesting"] += int(count_bad_nesting(s, e) if len(s) > 200 else count_bad_nesting_py(s, e))
    if r.repaired:
        notices["repaired_event"] = r.repaired
    return {"path": str(path), "events": n, "problems": problems, "notices": notices, "ok": not any(problems.values()),
            "tracks": len(tracks), "flows": len(flows), "warnings": r.warnings}


def _h(v):
    return v if isinstance(v, (int, str, float)) or v is None else repr(v)
