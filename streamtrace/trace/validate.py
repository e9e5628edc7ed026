"""``streamtrace validate``: check what Perfetto's JSON importer relies on, in one
streaming pass.

Problems counted (any makes the check fail): the document is not valid JSON
(reported as an error), events missing ``ph``/``ts``/``pid``/``tid``, ``X`` events
with a missing or negative ``dur``, a flow ``(cat, id)`` with more than one ``s``
or ``f`` end (ids colliding, as in a naive multi-rank merge: Perfetto then binds
arrows to the wrong events), flows joining events of two ranks (``args.rank``),
and ``X`` slices that overlap their enclosing slice on the same (pid, tid) track
without nesting in it.  Notices (reported, not failing): flow ends without a
partner. ``X`` events with a missing or negative
``dur``, flow ``s``/``f`` ends without their partner (matched by ``(cat, id)``),
flows joining events of two ranks (``args.rank``), and ``X`` slices that overlap
their enclosing slice on the same (pid, tid) track without nesting in it.
"""
from __future__ import annotations

import numpy as np

from ..kernels.nesting import count_bad_nesting, sort_track
from .reader import TraceReader

PROBLEMS = ("missing_field", "negative_dur", "duplicate_flow", "cross_rank_flow", "bad_nesting")
# Reported but not failing: Kineto itself writes lone ``f`` ends for runtime calls
# that launched nothing, and Perfetto ignores them.
NOTICES = ("unmatched_flow",)


class _Track:
    __slots__ = ("s", "e")

    def __init__(self):
        self.s = []
        self.e = []


def validate(path, salvage=False) -> dict:
    """Validate one trace file.

    Returns ``{"path", "events", "problems": {name: count}, "notices": {name: count},
    "ok": bool, "tracks", "flows", "warnings"}``.  Raises :class:`~streamtrace.errors.TraceError` when the file is
    not readable JSON (truncated, corrupt gzip, invalid UTF-8)."""
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
                key = (_h(ev["pid"]), _h(ev["tid"]))
                t = tracks.get(key)
                if t is None:
                    t = tracks[key] = _Track()
                t.s.append(ts[i])
                t.e.append(ts[i] + dur[i])
            elif ph in ("s", "f"):
                k = (ev.get("cat"), _h(ev.get("id")))
                args = ev.get("args")
                rank = args.get("rank") if isinstance(args, dict) else None
                rec = flows.get(k)
                if rec is None:
                    rec = flows[k] = [0, 0, rank, False]
                rec[0 if ph == "s" else 1] += 1
                if rank is not None and rec[2] is not None and rank != rec[2]:
                    rec[3] = True
    notices = dict.fromkeys(NOTICES, 0)
    for rec in flows.values():
        if rec[0] == 0 or rec[1] == 0:
            notices["unmatched_flow"] += 1
        if rec[0] > 1 or rec[1] > 1:
            problems["duplicate_flow"] += 1
        if rec[3]:
            problems["cross_rank_flow"] += 1
    for t in tracks.values():
        s, e = sort_track(np.asarray(t.s, np.int64), np.asarray(t.e, np.int64))
        problems["bad_nesting"] += int(count_bad_nesting(s, e))
    return {"path": str(path), "events": n, "problems": problems, "notices": notices, "ok": not any(problems.values()),
            "tracks": len(tracks), "flows": len(flows), "warnings": r.warnings}


def _h(v):
    return v if isinstance(v, (int, str, float)) or v is None else repr(v)
