"""Point-to-point transfers (pipeline Send / Recv), apart from the group collectives: one row per
sender -> receiver rank pair (``p2p.parquet`` / ``.csv``), from the matched instances of
``streamtrace.aggregate.collectives`` (``collective == "SendRecv"``, ``src`` / ``dst`` set).

Per instance, the sender's kernel starts at ``send_start`` and the receiver's at ``recv_start``
(aligned int64 ns).  Whoever posts first waits for the other: the receiver waited
``max(0, send_start - recv_start)`` (``recv_wait_ns``: in a pipeline the next stage usually posts
its receive early and waits for the previous stage's compute), the sender
``max(0, recv_start - send_start)`` (``send_wait_ns``: the receiver was late).  Per pair:
``count``, ``bytes`` (sum of msg_bytes), ``time_ns`` (sum of the transfer latency: the shorter of
the two kernels), ``recv_wait_ns``, ``send_wait_ns``, ``start_skew_mean_ns`` / ``start_skew_max_ns``
(|send_start - recv_start|), ``busbw_gbps_median`` (GB/s: bytes / latency, bus factor 1), with the
pipeline stages of both ranks (``src_stage``, ``dst_stage``: their positions in their PP group,
-1 without a topology) and ``direction`` (``forward`` when the receiver's stage is later,
``backward`` when earlier, ``""`` unknown).
"""
from __future__ import annotations

import numpy as np

from .folder import P2P, P2P_COLUMNS
from ..events.dataset import write_table



TRANSFER_COLUMNS = ("src", "dst", "latency_ns", "msg_bytes", "send_start_ns", "recv_start_ns")


def p2p_transfers(inst: dict, members: dict) -> dict:
    """Per matched p2p instance (``collective == "SendRecv"`` with src/dst, both sides present), in
    instance order: ``TRANSFER_COLUMNS`` (int64: ranks, ns, bytes), the sender's and the
    receiver's kernel start.  ``members`` belong to ``inst``'s instances (a piece of the job's
    tables will do: the transfers of the pieces, concatenated in order, are the whole job's)."""
    if not len(inst["instance"]):
        return {c: np.zeros(0, np.int64) for c in TRANSFER_COLUMNS}
    sel = np.flatnonzero((inst["collective"] == "SendRecv") & (inst["src"] >= 0))
    send = np.full(len(sel), -1, np.int64)
    recv = np.full(len(sel), -1, np.int64)
    has_s, has_r = np.zeros(len(sel), bool), np.zeros(len(sel), bool)
    pos = np.full(len(inst["instance"]), -1, np.int64)
    pos[sel] = np.arange(len(sel))
    at = pos[np.searchsorted(inst["instance"], members["instance"])]
    for j in np.flatnonzero(at >= 0).tolist():
        k = at[j]
        i, r, t = sel[k], members["rank"][j], members["start_ns"][j]
        if r == inst["src"][i] and not has_s[k]:
            send[k], has_s[k] = t, True
        elif r == inst["dst"][i] and not has_r[k]:
            recv[k], has_r[k] = t, True
    idx = sel[has_s & has_r]
    return {"src": inst["src"][idx].astype(np.int64), "dst": inst["dst"][idx].astype(np.int64),
            "latency_ns": inst["latency_ns"][idx].astype(np.int64), "msg_bytes": inst["msg_bytes"][idx].astype(np.int64),
            "send_start_ns": send[has_s & has_r], "recv_start_ns": recv[has_s & has_r]}


def p2p_rows(tr: dict, topology=None) -> list:
    """Rows per (src, dst) rank pair (module docstring), sorted by src, dst, from
    ``p2p_transfers`` columns."""
    if not len(tr["src"]):
        return []
    o = np.lexsort((tr["dst"], tr["src"]))                 # stable: instance order within a pair
    src, dst = tr["src"][o], tr["dst"][o]
    lat, nbytes = tr["latency_ns"][o], np.maximum(tr["msg_bytes"][o], 0)
    diff_all = tr["send_start_ns"][o] - tr["recv_start_ns"][o]
    cut = np.flatnonzero(np.r_[True, (src[1:] != src[:-1]) | (dst[1:] != dst[:-1]), True])
    out = []
    for a, b in zip(cut[:-1].tolist(), cut[1:].tolist()):
        s, d = int(src[a]), int(dst[a])
        diff = diff_all[a:b]
        with np.errstate(divide="ignore", invalid="ignore"):
            bw = np.where(lat[a:b] > 0, nbytes[a:b] / np.maximum(lat[a:b], 1), np.nan)
        bw = bw[np.isfinite(bw)]
        ss, ds = _stage(topology, s), _stage(topology, d)
        out.append({"src": s, "dst": d, "src_stage": ss, "dst_stage": ds,
                    "direction": "" if ss < 0 or ds < 0 or ss == ds else ("forward" if ds > ss else "backward"),
                    "pp_group": _pp_group(topology, s), "count": int(b - a), "bytes": int(nbytes[a:b].sum()),
                    "time_ns": int(lat[a:b].sum()), "recv_wait_ns": int(np.maximum(diff, 0).sum()),
                    "send_wait_ns": int(np.maximum(-diff, 0).sum()), "start_skew_mean_ns": float(np.abs(diff).mean()),
                    "start_skew_max_ns": int(np.abs(diff).max()),
                    "busbw_gbps_median": float(np.median(bw)) if len(bw) else None})
    return out


def p2p_table(inst: dict, members: dict, topology=None) -> list:
    """Rows per (src, dst) rank pair (module docstring), sorted by src, dst:
    ``p2p_rows`` of ``p2p_transfers``."""
    return p2p_rows(p2p_transfers(inst, members), topology)


def stage_pairs(rows: list) -> list:
    """The ``p2p_table`` rows summed per (src_stage, dst_stage): ``count``, ``bytes``,
    ``time_ns``, ``recv_wait_ns``, ``send_wait_ns``, ``pairs`` (rank pairs), sorted by stages."""
    acc: dict = {}
    for r in rows:
        a = acc.setdefault((r["src_stage"], r["dst_stage"]), {"src_stage": r["src_stage"], "dst_stage": r["dst_stage"],
                                                              "direction": r["direction"], "pairs": 0, "count": 0,
                                                              "bytes": 0, "time_ns": 0, "recv_wait_ns": 0,
                                                              "send_wait_ns": 0})
        a["pairs"] += 1
        for k in ("count", "bytes", "time_ns", "recv_wait_ns", "send_wait_ns"):
            a[k] += r[k]
    return [acc[k] for k in sorted(acc)]


def _stage(topology, rank) -> int:
    if topology is None or topology.group_of("pp", rank) is None:
        return -1
    return topology.stage_of(rank)


def _pp_group(topology, rank) -> int:
    if topology is None:
        return -1
    for i, g in enumerate(topology.groups["pp"]):
        if rank in g:
            return i
    return -1


def write_p2p(outdir, rows: list) -> list:
    """Write ``p2p.parquet`` and ``p2p.csv`` (the ``p2p_table`` rows) atomically; returns the
    paths (none when there are no rows)."""
    if not rows:
        return []
    floats = ("start_skew_mean_ns", "busbw_gbps_median")
    cols = {c: np.asarray([r[c] for r in rows], object if c == "direction" else np.int64) for c in P2P_COLUMNS
            if c not in floats}
    for c in floats:
        cols[c] = np.asarray([np.nan if r[c] is None else r[c] for r in rows], np.float64)
    return write_table(outdir, P2P, cols, P2P_COLUMNS, csv=True)
