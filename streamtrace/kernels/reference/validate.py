"""Plain-Python twins of :mod:`streamtrace.kernels.validate`'s order-dependent kernels: the whole
set of records at once, grouped in dicts, instead of sorted chunks with carried state.  (The twin
of :func:`~streamtrace.kernels.validate.event_fields` is production code:
:func:`streamtrace.trace.validate.fields_from_dict`.)"""
from __future__ import annotations

from .nesting import count_bad_nesting_py

__all__ = ["nesting_py", "flows_py"]

_NO_RANK = (0, 1)     # ABSENT, NULL kinds


def nesting_py(tkind, pidv, tidv, start, end, view) -> list:
    """``[(bad, tracks) for view V_IN, V_OUT]`` of X records in any order (sequences of ints):
    per track and view, the slices sorted by start then end descending, counted by
    :func:`count_bad_nesting_py`."""
    out = []
    for v in range(2):
        tracks = {}
        for k, p, t, s, e, w in zip(tkind, pidv, tidv, start, end, view):
            if w >> v & 1:
                tracks.setdefault((k, p, t), []).append((s, e))
        bad = 0
        for sl in tracks.values():
            sl.sort(key=lambda x: (x[0], -x[1]))
            bad += count_bad_nesting_py([a for a, _ in sl], [b for _, b in sl])
        out.append((bad, len(tracks)))
    return out


def flows_py(kinds, catv, idv, ph, rankk, rankv, view) -> list:
    """``[[keys, unmatched, duplicate, cross-rank] for view V_IN, V_OUT]`` of flow-end records in
    file order (``ph``: 2 = s, 3 = f): per key, the ends counted and (in V_IN) each end's rank
    compared with the key's first end's, as the original dict-based validate did."""
    out = []
    for v in range(2):
        recs = {}
        for k, c, i, p, rk, rv, w in zip(kinds, catv, idv, ph, rankk, rankv, view):
            if not w >> v & 1:
                continue
            rank = None if rk in _NO_RANK else (rk, rv)
            rec = recs.setdefault((k, c, i), [0, 0, rank, False])
            rec[0 if p == 2 else 1] += 1
            if v == 0 and rank is not None and rec[2] is not None and rank != rec[2]:
                rec[3] = True
        out.append([len(recs), sum(1 for r in recs.values() if r[0] == 0 or r[1] == 0),
                    sum(1 for r in recs.values() if r[0] > 1 or r[1] > 1), sum(1 for r in recs.values() if r[3])])
    return out
