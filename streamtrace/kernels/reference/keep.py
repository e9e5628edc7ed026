"""Plain-Python twin of ``streamtrace.kernels.keep``."""
from __future__ import annotations

__all__ = ["keep_rows_py"]


def keep_rows_py(rows, lo, hi, kept_keys, shift_ns) -> dict:
    """What ``keep_rows`` decides for ALL of a rank's rows (list of
    6-int lists), in one call: ``{"runs": [(start, end)], "dropped": set of seq, "pids": set,
    "kept", "gone", "gone_missing", "gone_negdur", "first"}`` — event by event, a run being a maximal
    list of kept neighbours."""
    keys = set(kept_keys)
    out = {"runs": [], "dropped": set(), "pids": set(), "kept": 0, "gone": 0, "gone_missing": 0,
           "gone_negdur": 0, "first": None}
    run, prev_end = None, -1
    for bits_seq, t0, t1, end, flow, pid in rows:
        bits, seq = bits_seq & 255, bits_seq >> 8
        start, prev_end = prev_end + 1, end
        cls = bits & 3
        keep = cls == 1 or (t1 >= lo and t0 <= hi)
        if keep and cls == 3:
            keep = (-1 - flow if bits & 8 else flow) in keys
        if keep:
            out["kept"] += 1
            out["pids"].add(pid)
            run = [start, end] if run is None else [run[0], end]
            if cls >= 2:
                t = t0 + shift_ns
                out["first"] = t if out["first"] is None else min(out["first"], t)
        else:
            out["dropped"].add(seq)
            out["gone"] += 1
            out["gone_missing"] += bool(bits & 16)
            out["gone_negdur"] += bool(bits & 32)
            if run is not None:
                out["runs"].append(tuple(run))
                run = None
    if run is not None:
        out["runs"].append(tuple(run))
    return out
