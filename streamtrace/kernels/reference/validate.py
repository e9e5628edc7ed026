"""Plain-Python twins of ``streamtrace.kernels.validate``'s order-dependent kernels: the whole
set of records at once, grouped in dicts, instead of sorted chunks with carried state.  (The twin
of ``event_fields`` is production code:
``streamtrace.validate.check.fields_from_dict``.)"""
from __future__ import annotations

from .nesting import count_bad_nesting_py

__all__ = ["nesting_py", "flows_py", "batch_records_py"]

_NO_RANK = (0, 1)     # ABSENT, NULL kinds
# the field columns and codes of streamtrace.kernels.validate (a twin imports no kernel module)
_PH, _PIDK, _PIDV, _TIDK, _TIDV, _TS, _DUR, _TFLAGS, _CATK, _CATV, _IDK, _IDV, _RANKK, _RANKV = range(14)
_ABSENT, _NULL = 0, 1
_PH_NONE, _PH_X, _PH_S, _PH_F = 0, 1, 2, 3
_HAS_TS, _HAS_DUR, _TS_BAD, _DUR_BAD = 1, 2, 4, 8
_STR = 3
_GPU_TRACK = 64
_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")


def _fnv(text: str) -> int:
    h = 14695981039346656037
    for c in text.encode():
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h - (1 << 64) if h >= 1 << 63 else h


_GPU_HASHES = frozenset(_fnv(c) for c in _GPU_CATS)


def batch_records_py(fields, views, out_pid: bool, seq0: int):
    """``(x_rows, flow_rows, counts)`` of ``streamtrace.kernels.validate.batch_records`` for
    rows of fields (sequences of ints) and view bits: each view of each event classified on its
    own, as the checks define it (a missing field first, then an X event's duration), with the
    pid the view sees (merge's output: null for an absent one); then one record per event holding
    the views it counts in.  ``counts``: ``[[events, missing, negative dur] per view]``."""
    counts = [[0, 0, 0], [0, 0, 0]]
    xs, fls = [], []
    for i, (r, w) in enumerate(zip(fields, views)):
        xv = fv = 0
        for v in (0, 1):
            if not w >> v & 1:
                continue
            pidk = _NULL if (v == 1 and out_pid and r[_PIDK] == _ABSENT) else r[_PIDK]
            counts[v][0] += 1
            has_ts = bool(r[_TFLAGS] & _HAS_TS) and not r[_TFLAGS] & _TS_BAD
            if r[_PH] == _PH_NONE or pidk == _ABSENT or r[_TIDK] == _ABSENT or not has_ts:
                counts[v][1] += 1
                continue
            if r[_PH] == _PH_X:
                has_dur = bool(r[_TFLAGS] & _HAS_DUR) and not r[_TFLAGS] & _DUR_BAD
                if not has_dur or r[_DUR] < 0:
                    counts[v][2] += 1
                else:
                    xv += 1 << v
            elif r[_PH] in (_PH_S, _PH_F):
                fv += 1 << v
        pid = (_NULL, 0) if (out_pid and r[_PIDK] == _ABSENT) else (r[_PIDK], r[_PIDV])
        if xv:
            end = (r[_TS] + r[_DUR] + 2**63) % 2**64 - 2**63          # int64 arithmetic wraps
            gpu = _GPU_TRACK if r[_CATK] == _STR and r[_CATV] in _GPU_HASHES else 0
            xs.append([pid[0] * 8 + r[_TIDK] + gpu, pid[1], r[_TIDV], r[_TS], end, xv])
        if fv:
            key = (_NULL if r[_CATK] == _ABSENT else r[_CATK]) * 8 + (_NULL if r[_IDK] == _ABSENT else r[_IDK])
            fls.append([key, r[_CATV], r[_IDV], seq0 + i, r[_PH], r[_RANKK], r[_RANKV], fv])
    return xs, fls, counts


def nesting_py(tkind, pidv, tidv, start, end, view) -> list:
    """``[(bad, tracks, gpu overlaps) for view V_IN, V_OUT]`` of X records in any order (sequences
    of ints): per track and view, the slices sorted by start then end descending, counted by
    ``count_bad_nesting_py``; a track whose kind has the GPU bit (64) counts in the third."""
    out = []
    for v in range(2):
        tracks = {}
        for k, p, t, s, e, w in zip(tkind, pidv, tidv, start, end, view):
            if w >> v & 1:
                tracks.setdefault((k, p, t), []).append((s, e))
        bad = gpu = 0
        for key, sl in tracks.items():
            sl.sort(key=lambda x: (x[0], -x[1]))
            n = count_bad_nesting_py([a for a, _ in sl], [b for _, b in sl])
            if key[0] & _GPU_TRACK:
                gpu += n
            else:
                bad += n
        out.append((bad, len(tracks), gpu))
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
