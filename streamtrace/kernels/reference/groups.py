"""Plain-Python twin of ``streamtrace.kernels.groups``."""
from __future__ import annotations

__all__ = ["group_batch_py", "flows_kept_py", "keep_groups_py"]

NO_T0, NO_T1 = 2 ** 63 - 1, -2 ** 63


def group_batch_py(rcls, rec, vbits, starts, ends, base, seq0, size, ext) -> tuple[list, list, list]:
    """What ``group_batch`` writes for one batch (lists of ints; ``rec``
    rows of 6 ints, ``vbits`` a list or None; ``ext`` [ts_min, ts_max, end, written] changed in place):
    ``(groups, flow keys, flow ts)``, each group the 19 ints of its summary, from its events one by one."""
    groups, fkeys, fts = [], [], []
    for a in range(0, len(rcls), size):
        idx = range(a, min(len(rcls), a + size))
        out0 = ext[2]
        written = [j for j in idx if rcls[j] & 3]
        bits = {j: (rec[j][0] & 255) | (vbits[j] if vbits else 0) for j in written}
        timed = [j for j in written if bits[j] & 3 != 1]
        pids = list(dict.fromkeys(rec[j][5] for j in written))
        for j in written:
            ext[2] = rec[j][3]
        ext[3] += len(written)
        for j in timed:
            ext[0] = min(ext[0], rec[j][1])
            ext[1] = max(ext[1], min(rec[j][1], rec[j][2]))
            if bits[j] & 3 == 3:
                fkeys.append(-1 - rec[j][4] if bits[j] & 8 else rec[j][4])
                fts.append(rec[j][1])

        def mask(flag):
            return sum(1 << (j - a) for j in written if flag is None or bits[j] & flag)

        t0 = [rec[j][1] for j in timed]
        t1 = [rec[j][2] for j in timed]
        groups.append([seq0 + a, len(idx), base + starts[a], base + ends[idx[-1]], out0, ext[2], mask(None),
                       mask(16), mask(32), len(written) - len(timed), len(timed), min(t0, default=NO_T0),
                       max(t0, default=NO_T1), min(t1, default=NO_T0), max(t1, default=NO_T1),
                       sum(bits[j] & 3 == 3 for j in timed), (pids + [-1, -1])[0], (pids + [-1, -1])[1],
                       int(len(pids) > 2)])
    return groups, fkeys, fts


def flows_kept_py(nflow, fkeys, kept_keys) -> list[int]:
    """What ``flows_kept`` writes: per group, 1 when each of its flow
    events' keys is a kept one."""
    kept, out, f = set(kept_keys), [], 0
    for n in nflow:
        out.append(int(all(k in kept for k in fkeys[f:f + n])))
        f += n
    return out


def keep_groups_py(groups, kinds, shift_ns, state: dict) -> dict:
    """What ``keep_groups`` does to a decision (``state``: ``{"run":
    [start, end] or None, "prev_end", "runs", "dropped", "pids", "kept", "gone", "gone_missing",
    "gone_negdur", "first"}``, changed in place and returned) for groups of kind 1 (kept) / 2
    (dropped) / 0 (empty), event by event as ``keep_rows_py``
    would with their rows."""
    for g, k in zip(groups, kinds):
        if k == 0:
            continue
        start, state["prev_end"] = state["prev_end"] + 1, g[5]
        events = [j for j in range(g[1]) if g[6] >> j & 1]
        if k == 1:
            state["kept"] += len(events)
            state["pids"].update(p for p in g[16:18] if p >= 0)
            state["run"] = [start, g[5]] if state["run"] is None else [state["run"][0], g[5]]
            if g[10]:
                t = g[11] + shift_ns
                state["first"] = t if state["first"] is None else min(state["first"], t)
        else:
            state["dropped"].update(g[0] + j for j in events)
            state["gone"] += len(events)
            state["gone_missing"] += sum(g[7] >> j & 1 for j in events)
            state["gone_negdur"] += sum(g[8] >> j & 1 for j in events)
            if state["run"] is not None:
                state["runs"].append((state["run"][0], start - 1))
                state["run"] = None
    return state
