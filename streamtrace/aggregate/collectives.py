"""Cross-rank collectives: the same NCCL collective matched across the ranks of its group, with
skew, straggler, waiter, latency and bandwidth per instance, a summary per collective type and
parallel dimension, per-rank straggler counts, and clock offsets estimated from collective ends.

Input: the ``communication`` kernels of every rank (``streamtrace analyze`` output, read through
``streamtrace.aggregate.alignment.Job``).  Times are int64 ns on the job's aligned axis.

**Matching** (``streamtrace.events.collmatch.match_ordinals``, the matcher ``merge --align
collectives`` uses too): a collective kernel of rank r belongs to instance ``(iteration, step, group,
k)`` when it is the k-th collective on that process group (``group_key``:
``pg_ranks``, else ``pg_name``, else the stream) in that ProfilerStep of that iteration (see
``streamtrace.aggregate.alignment.Job``): k is NCCL's sequence number where every kernel of the
group carries it (``matched_by`` "seq"), else the kernel's position in start order (every member
of a group issues its collectives in the same order, NCCL requires it; ``matched_by`` "order").  A
rank that missed or added a collective is reported (``CollectiveResult.mismatches``), not silently
shifted.  Point-to-point kernels (Send / Recv) match by ``(iteration, src -> dst, k)``: the k-th send
from src to dst is the k-th receive of dst from src; the peer is the other member of a two-rank
group, or, in a larger pipeline group, the neighbour stage named by Megatron's p2p function on the
launch stack (``send_forward`` -> next stage, ``send_backward`` -> previous, ``recv_forward`` <-
previous, ``recv_backward`` <- next).  A ``SendRecv`` kernel (both ways at once: a batched
exchange) with a known peer matches the peer's k-th ``SendRecv`` with it, ``src`` / ``dst`` left -1.
Where the trace names neither communicator nor peer (an Nsight Systems export made without NCCL's
payloads) and the job is the two ranks of one file, the peer is the file's other rank
(``file_peer``; a warning says so).  A point-to-point
instance has 2 members (``group_size``): one seen on one rank only is not ``complete``.  Group
collectives with no process group fall back to order on the stream: ``(iteration, stream, k)``.

**Per instance** (``collectives.parquet``): ``start_skew_ns`` = last start - first start (arrival
spread), ``end_skew_ns`` likewise for ends; ``straggler_rank`` = the last to arrive (latest start),
``straggler_lag_ns`` = its start - the second latest start; ``waiter_rank`` = the first to arrive,
which waited longest, ``waiter_wait_ns`` = last start - its start; ``latency_ns`` = min over the
ranks of the kernel duration (the last arrival does not wait, so its duration is the transfer);
``source``: "kernels", or "cpu ops" for a CPU-only (gloo) rank's collectives
(``streamtrace.aggregate.gloo``: matched, not used for clock offsets).  ``msg_bytes`` = the largest member's message (all-to-all: the largest of what a member sends
or receives, ``streamtrace.aggregate.collective_rows.member_bytes``; the members' own in
``collectives_ranks``' ``send_bytes`` / ``recv_bytes``); ``algbw_gbps`` = msg_bytes / latency_ns (bytes per ns = GB/s, GB = 1e9 bytes); ``busbw_gbps`` =
algbw x the bus factor of nccl-tests' PERFORMANCE.md (``bus_factor``).

**Clock sync** (``estimate_clock_offsets``, ``streamtrace.events.clocks``, shared with
``merge --align collectives``): the members of a collective finish nearly together, so rank r's
clock offset o_r is estimated from ``end(r) - end(s) = o_r - o_s`` over every matched instance: the
median difference per rank pair, then weighted least squares over the pairs, 0 at the lowest rank
of each connected set of ranks; point-to-point transfers only join the sets the group collectives
leave apart (pipeline stages).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .folder import (COLLECTIVES, COLLECTIVES_COLUMNS, COLLECTIVES_MISMATCH, COLLECTIVES_MISMATCH_COLUMNS,
                     COLLECTIVES_RANKS, COLLECTIVES_RANKS_COLUMNS, COLLECTIVES_SUMMARY,
                     COLLECTIVES_SUMMARY_COLUMNS)
from ..analyze.outputs import OPS
from ..runtime.errors import StreamtraceError
from ..events.dataset import write_table
from ..events.clocks import estimate_clock_offsets
from ..events.collmatch import group_key, is_all_to_all, match_ordinals, signature
from .collective_rows import fill_dims, member_bytes, mismatch_rows, read_comm, splits_agree

P2P = ("Send", "Recv", "SendRecv")
COMM_COLUMNS = ("ts_ns", "end_ns", "dur_ns", "iteration", "step", "collective", "msg_bytes", "group_size", "pg_name",
                "pg_ranks", "parallel_dim", "phase", "microbatch", "correlation", "stream")
_P2P_FN = re.compile(r"(send|recv)_(forward|backward)", re.I)
INSTANCE_COLUMNS = COLLECTIVES_COLUMNS
MEMBER_COLUMNS = COLLECTIVES_RANKS_COLUMNS
MISMATCH_COLUMNS = COLLECTIVES_MISMATCH_COLUMNS


def bus_factor(collective: str, n: int) -> float:
    """Bus-bandwidth factor of nccl-tests' ``doc/PERFORMANCE.md`` for ``n`` ranks: AllReduce
    2(n-1)/n; AllGather, ReduceScatter, AllToAll (n-1)/n; Broadcast, Reduce, Send/Recv 1.
    NaN for anything else (e.g. Barrier), or n < 1."""
    if n < 1:
        return float("nan")
    if collective == "AllReduce":
        return 2.0 * (n - 1) / n
    if collective in ("AllGather", "ReduceScatter", "AllToAll"):
        return (n - 1) / n
    if collective in ("Broadcast", "Reduce") or collective in P2P:
        return 1.0
    return float("nan")


@dataclass
class CollectiveResult:
    """``instances`` and ``members``: dicts of equally long numpy columns (``INSTANCE_COLUMNS``,
    ``MEMBER_COLUMNS``); ``summary``: list of dicts per (collective, parallel_dim);
    ``stragglers``: list of dicts per collective kind and rank (``straggler_table``); ``clock_offsets``: ``{part index: ns}`` (empty unless
    estimated); ``stats``: counts of matched / unmatched kernels; ``mismatches``: the ranks that missed or added a collective
    (``MISMATCH_COLUMNS``); ``transfers``: the p2p transfers
    (``streamtrace.aggregate.p2p.p2p_transfers``; set by the bucketed path, whose ``instances`` and
    ``members`` stay empty: they are in its output files)."""
    instances: dict
    members: dict
    summary: list
    stragglers: list
    clock_offsets: dict = field(default_factory=dict)
    clock_components: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    transfers: dict = field(default_factory=dict)
    mismatches: dict = field(default_factory=dict)


# -- matching --------------------------------------------------------------------------

def _ranks_of(s: str) -> list:
    return [int(x) for x in s.split(",") if x.strip().lstrip("-").isdigit()] if s else []


def _p2p_dirs(part, corr_needed) -> dict:
    """``{correlation: {"send": "forward"|"backward", "recv": ...}}`` from the Megatron p2p function
    (send_forward, recv_backward, send_forward_recv_backward, ...) above each launch in the ops."""
    t = part.read(OPS, ["name", "parent", "correlation"]) if corr_needed else None
    if t is None:
        return {}
    corr = t["correlation"].to_numpy()
    parent = t["parent"].to_numpy()
    names = t["name"]
    want = np.isin(corr, np.fromiter(corr_needed, np.int64))
    out = {}
    cache: dict = {}
    for row in np.flatnonzero(want).tolist():
        found, j, steps = {}, int(parent[row]), 0
        while j >= 0 and steps < 64 and len(found) < 2:
            if j not in cache:
                cache[j] = _P2P_FN.findall(names[j].as_py() or "")
            for verb, d in cache[j]:
                found.setdefault(verb.lower(), d.lower())
            j, steps = int(parent[j]), steps + 1
        if found:
            out[int(corr[row])] = found
    return out


def match_prefixes(job, part, k) -> tuple[list, np.ndarray, np.ndarray]:
    """Match-key prefix (str) per comm kernel of one part (``k``: ``Job.read_kernels`` columns
    ``COMM_COLUMNS``, sorted by start), and for p2p rows src/dst (int64 arrays, else -1).  Matching
    only ever combines rows with the same prefix; an instance is (prefix, k-th row of each part).
    A rank's kernels repeat a few groups: each distinct group and rank list is parsed once."""
    n = len(k["ts_ns"])
    src = np.full(n, -1, np.int64)
    dst = np.full(n, -1, np.int64)
    pre = [""] * n
    rank = part.rank
    topo = job.topology
    coll, pg_ranks, pg_name = k["collective"].tolist(), k["pg_ranks"].tolist(), k["pg_name"].tolist()
    stream, corr = k["stream"].tolist(), k["correlation"].tolist()
    its = [f"{int(a)}:{int(b)}" for a, b in zip(k["iteration"].tolist(), k["step"].tolist())]
    ranks_of: dict = {}
    groups: dict = {}
    need = []
    for i in range(n):
        if coll[i] in P2P:
            g = ranks_of.get(pg_ranks[i])
            if g is None:
                g = ranks_of[pg_ranks[i]] = _ranks_of(pg_ranks[i])
            if len(g) > 2 or (not g and topo is not None):
                need.append(int(corr[i]))
    dirs = {**(_p2p_dirs(part, set(need)) if need else {}), **k.get("p2p_dirs", {})}
    inferred = 0
    for i in range(n):
        c, it = coll[i], its[i]
        key = (pg_ranks[i], pg_name[i], stream[i])
        pg = groups.get(key)
        if pg is None:
            pg = groups[key] = group_key(*key)
        if c in P2P:
            g = ranks_of[pg_ranks[i]]
            if not g and topo is not None:
                g = topo.group_of("pp", rank) or []
            elif not g and not pg_name[i] and job.file_peer(part) is not None:
                g = sorted((rank, job.file_peer(part)))        # the file's only other rank (Job.file_peer)
                inferred += 1
            peer = None
            if len(g) == 2 and rank in g:
                peer = g[1] if g[0] == rank else g[0]
            elif len(g) > 2 and rank in g and c in ("Send", "Recv"):
                d = dirs.get(int(corr[i]), {}).get(c.lower())
                pos = g.index(rank)
                if d is not None:
                    nxt, prv = g[(pos + 1) % len(g)], g[pos - 1]
                    peer = (nxt if d == "forward" else prv) if c == "Send" else (prv if d == "forward" else nxt)
            if peer is not None and c in ("Send", "Recv"):
                s, t = (rank, peer) if c == "Send" else (peer, rank)
                src[i], dst[i] = s, t
                pre[i] = f"{it}|p2p|{s}>{t}"
            elif peer is not None:                  # SendRecv: both ways at once, the k-th of each side
                pre[i] = f"{it}|p2p|{min(rank, peer)}<>{max(rank, peer)}"
            else:
                pre[i] = f"{it}|p2p?|{pg}|{c}|{stream[i]}|r{rank}"     # unmatched: stays alone
        else:
            pre[i] = f"{it}|{pg}"
    if inferred:
        note = (f"{part.source}: point-to-point kernels that name neither their communicator nor their peer (no "
                f"NCCL payload or process group in the trace) matched with the file's other rank, by order")
        if note not in job.warnings:
            job.warnings.append(note)
    return pre, src, dst


def cumcount(ids: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each value of ``ids`` in array order."""
    if not len(ids):
        return np.zeros(0, np.int64)
    o = np.argsort(ids, kind="stable")
    s = ids[o]
    first = np.r_[True, s[1:] != s[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(s)), 0))
    out = np.empty(len(ids), np.int64)
    out[o] = np.arange(len(s)) - start
    return out


def comm_rows(job, part, pids: dict, sigs: dict) -> dict | None:
    """One part's communication kernels as match rows: columns ``part``, ``rank``, ``iteration``,
    ``step``, ``start`` / ``end`` (aligned int64 ns), ``dur``, ..., ``src`` / ``dst``, ``prefix``
    (int64 id in ``pids``, first-seen order), ``nseq`` (NCCL's sequence number for group
    collectives, -1 unknown or point-to-point), ``sig`` (id in ``sigs`` of
    ``signature``), ``send`` / ``recv`` (bytes,
    ``member_bytes``), ``in_splits`` / ``out_splits``; rows in
    start order.  None when the part has none."""
    k = read_comm(job, part, COMM_COLUMNS)
    n = len(k["ts_ns"])
    if not n:
        return None
    pre, src, dst = match_prefixes(job, part, k)
    send, recv = member_bytes(k)
    p2p = np.isin(k["collective"].astype(object), P2P)
    out = {"part": np.full(n, part.index, np.int64), "rank": np.full(n, part.rank, np.int64),
           "iteration": k["iteration"], "step": k["step"], "start": part.align(k["ts_ns"]),
           "end": part.align(k["end_ns"]), "dur": k["dur_ns"].astype(np.int64)}
    for a, b in (("collective", "collective"), ("bytes", "msg_bytes"), ("group_size", "group_size"),
                 ("pg_name", "pg_name"), ("pg_ranks", "pg_ranks"), ("dim", "parallel_dim"), ("phase", "phase"),
                 ("microbatch", "microbatch"), ("correlation", "correlation"), ("stream", "stream"),
                 ("in_splits", "in_splits"), ("out_splits", "out_splits")):
        out[a] = k[b]
    out["dim"] = fill_dims(k["parallel_dim"], k["pg_ranks"], job.topology)
    out["cpu"] = np.full(n, int(bool(k.get("from_cpu_ops", False))), np.int64)
    out.update(src=src, dst=dst, send=send, recv=recv,
               nseq=np.where(p2p, -1, np.asarray(k["seq"], np.int64)),
               prefix=np.fromiter((pids.setdefault(x, len(pids)) for x in pre), np.int64, n),
               sig=_sig_ids(k["collective"].tolist(), k["msg_bytes"].tolist(), sigs))
    return out


def _sig_ids(coll: list, size: list, sigs: dict) -> np.ndarray:
    """int64 id in ``sigs`` (``{signature: id}``, first-seen order, added to) of each row's
    ``signature(coll, size)``; the text made once a distinct (collective, size) of the part (a rank's
    kernels repeat a few: 659 k rows, 3.5 s profiled at 4,096 synthetic ranks, were a text and a lookup a
    row).  The type is in the key: 1 and 1.0 are equal keys but not equal texts."""
    ids: dict = {}
    out = []
    for c, b in zip(coll, size):
        key = (c, b, type(b))
        v = ids.get(key)
        if v is None:
            v = ids[key] = sigs.setdefault(signature(c, b), len(sigs))
        out.append(v)
    return np.asarray(out, np.int64)


def sorted_prefix_ids(pids: dict) -> tuple[np.ndarray, list]:
    """Prefix ids (first-seen) -> ids in sorted prefix order (as np.unique), and the prefixes in
    that order."""
    names = sorted(pids)
    rank_of = np.empty(len(pids), np.int64)
    rank_of[[pids[x] for x in names]] = np.arange(len(pids))
    return rank_of, names


def load_comm(job) -> dict:
    """Every part's communication kernels with their match keys (``comm_rows``' columns, times
    aligned), matched (``match_ordinals``): ``instance``,
    ``seq`` (the ordinal within the prefix), ``by`` ("seq" / "order" per row), sorted by
    (instance, start, rank); ``mismatches`` under the key ``"_mismatches"`` (table columns)."""
    pids: dict = {}          # match-key prefix -> id: an int64 per row, not a str (or a U-array row of
    sigs: dict = {}          # the longest prefix: 1 KB for a 64-rank group's) per row
    cols: dict = {}
    for part in job.parts:
        rows = comm_rows(job, part, pids, sigs)
        if rows is not None:
            for name, v in rows.items():
                cols.setdefault(name, []).append(v)
    if not cols:
        return {}
    c = {}
    for name in list(cols):              # one column at a time: the parts' arrays freed as they are joined
        c[name] = np.concatenate(cols.pop(name))
    rank_of, names = sorted_prefix_ids(pids)
    pid = rank_of[c.pop("prefix")]
    m = match_ordinals(c["part"], pid, c.pop("nseq"), c.pop("sig"))
    c["seq"] = m.ordinal
    c["by"] = np.asarray([m.matched_by[g] for g in range(len(names))], object)[pid] if len(pid) else \
        np.zeros(0, object)
    key = pid * (1 << 32) + c["seq"]
    ukey, inst = np.unique(key, return_inverse=True)
    c["instance"] = inst.reshape(-1).astype(np.int64)
    o = np.lexsort((c["rank"], c["start"], c["instance"]))
    for name in list(c):                 # reordered in place, one column at a time (peak: one more column)
        c[name] = c[name][o]
    c["_mismatches"] = mismatch_rows(m.mismatches, names, {p.index: p.rank for p in job.parts}, m.matched_by)
    return c


def instance_tables(c: dict) -> tuple[dict, dict]:
    """Instance and member columns (``INSTANCE_COLUMNS``, ``MEMBER_COLUMNS``) of the matched
    rows ``c`` (``load_comm``'s columns, sorted by (instance, start, rank)); instance ids are
    ``c["instance"]`` (dense and ascending: the whole job's, or one contiguous range of them)."""
    inst = c["instance"]
    if not len(inst):
        return {k: np.zeros(0) for k in INSTANCE_COLUMNS}, {k: np.zeros(0) for k in MEMBER_COLUMNS}
    first = np.r_[True, inst[1:] != inst[:-1]]
    starts = np.flatnonzero(first)
    lasts = np.r_[starts[1:] - 1, len(inst) - 1]
    n = lasts - starts + 1
    red = lambda f, a: f.reduceat(a, starts)  # noqa: E731
    first_start, last_start = c["start"][starts], c["start"][lasts]
    second_last = np.where(n >= 2, c["start"][np.maximum(lasts - 1, starts)], last_start)
    lat = red(np.minimum, c["dur"])
    coll = c["collective"][starts].astype(object)
    a2a = np.fromiter((is_all_to_all(x) for x in coll), bool, len(coll))
    nbytes = np.where(a2a, red(np.maximum, np.maximum(c["send"], c["recv"])), red(np.maximum, c["bytes"]))
    is_p2p = np.isin(coll, P2P) & (c["src"][starts] >= 0)
    coll = np.where(is_p2p, "SendRecv", coll)
    consistent = a2a | (red(np.maximum, c["bytes"]) == red(np.minimum, c["bytes"]))
    ctype = c["collective"].astype(str)
    for j, (a, b) in enumerate(zip(starts, lasts)):
        if b > a and not is_p2p[j]:
            consistent[j] &= bool((ctype[a:b + 1] == ctype[a]).all())
        if b > a and a2a[j]:
            consistent[j] &= splits_agree(c["rank"][a:b + 1].tolist(), c["pg_ranks"][a],
                                          c["in_splits"][a:b + 1].tolist(), c["out_splits"][a:b + 1].tolist())
    gs = np.where(np.isin(coll, P2P), 2, np.where(c["group_size"][starts] > 0, c["group_size"][starts], n))
    ranks_str = np.asarray([",".join(map(str, sorted(set(c["rank"][a:b + 1].tolist()))))
                            for a, b in zip(starts, lasts)], object)
    low = np.asarray([a + int(np.argmin(c["rank"][a:b + 1])) for a, b in zip(starts, lasts)], np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where((lat > 0) & (nbytes >= 0), nbytes / np.maximum(lat, 1), np.nan)
    factor = np.asarray([bus_factor(t, int(g)) for t, g in zip(coll, gs)], float)
    inst_cols = {
        "instance": c["instance"][starts].astype(np.int64), "iteration": c["iteration"][starts],
        "step": c["step"][starts],
        "collective": coll, "parallel_dim": c["dim"][low].astype(object), "pg_name": c["pg_name"][low].astype(object),
        "pg_ranks": c["pg_ranks"][low].astype(object), "group_size": gs.astype(np.int64), "n_ranks": n.astype(np.int64),
        "complete": n == gs, "consistent": consistent, "matched_by": c["by"][starts].astype(object),
        "source": np.where(red(np.maximum, c["cpu"]) > 0, "cpu ops", "kernels").astype(object),
        "ranks": ranks_str,
        "src": np.where(is_p2p, c["src"][starts], -1), "dst": np.where(is_p2p, c["dst"][starts], -1),
        "msg_bytes": nbytes.astype(np.int64), "phase": c["phase"][low].astype(object),
        "microbatch": c["microbatch"][low].astype(np.int64),
        "first_start_ns": first_start, "last_start_ns": last_start,
        "first_end_ns": red(np.minimum, c["end"]), "last_end_ns": red(np.maximum, c["end"]),
        "start_skew_ns": last_start - first_start, "end_skew_ns": red(np.maximum, c["end"]) - red(np.minimum, c["end"]),
        "straggler_rank": np.where(n >= 2, c["rank"][lasts], -1), "straggler_lag_ns": last_start - second_last,
        "waiter_rank": np.where(n >= 2, c["rank"][starts], -1), "waiter_wait_ns": last_start - first_start,
        "latency_ns": lat.astype(np.int64), "max_dur_ns": red(np.maximum, c["dur"]).astype(np.int64),
        "kernel_time_ns": red(np.add, c["dur"]).astype(np.int64),
        "algbw_gbps": algbw, "busbw_gbps": algbw * factor,
    }
    pos = np.repeat(np.arange(len(starts)), n)
    members = {"instance": c["instance"], "part": c["part"], "rank": c["rank"], "iteration": c["iteration"],
               "step": c["step"],
               "collective": c["collective"].astype(object), "start_ns": c["start"], "end_ns": c["end"],
               "dur_ns": c["dur"], "arrival_ns": c["start"] - first_start[pos], "wait_ns": last_start[pos] - c["start"],
               "correlation": c["correlation"], "stream": c["stream"], "send_bytes": c["send"],
               "recv_bytes": c["recv"]}
    return inst_cols, members


# -- summaries ---------------------------------------------------------------------------

def _pct(x, q):
    return float(np.percentile(x, q)) if len(x) else None


class Summary:
    """``summarize`` over instance tables given one piece at a time (``add``, in instance
    order): per kind int sums, and the per-instance values the distributions need (start skew,
    int64; bus and alg bandwidth of complete instances, float64: 24 bytes per instance), so the
    rows equal ``summarize`` of the whole table."""

    def __init__(self):
        self.total = 0
        self.kinds: dict = {}

    def add(self, inst: dict):
        if not len(inst["instance"]):
            return
        self.total += int(np.maximum(inst["msg_bytes"], 0).sum())
        for coll, dim in set(zip(inst["collective"].tolist(), inst["parallel_dim"].tolist())):
            m = (inst["collective"] == coll) & (inst["parallel_dim"] == dim)
            good = m & inst["complete"] & np.isfinite(inst["busbw_gbps"])
            a = self.kinds.setdefault((coll, dim), {"count": 0, "bytes": 0, "time": 0, "ktime": 0, "bw": [], "ab": [],
                                                    "skew": []})
            a["count"] += int(m.sum())
            a["bytes"] += int(np.maximum(inst["msg_bytes"][m], 0).sum())
            a["time"] += int(inst["latency_ns"][m].sum())
            a["ktime"] += int(inst["kernel_time_ns"][m].sum())
            a["bw"].append(inst["busbw_gbps"][good])
            a["ab"].append(inst["algbw_gbps"][good])
            a["skew"].append(inst["start_skew_ns"][m])

    def rows(self) -> list:
        total = float(self.total) or 1.0
        out = []
        for (coll, dim), a in sorted(self.kinds.items()):
            bw, ab, skew = np.concatenate(a["bw"]), np.concatenate(a["ab"]), np.concatenate(a["skew"])
            out.append({"collective": coll, "parallel_dim": dim, "count": a["count"], "complete": int(len(bw)),
                        "bytes": a["bytes"], "traffic_pct": 100 * a["bytes"] / total, "time_ns": a["time"],
                        "kernel_time_ns": a["ktime"],
                        "busbw_gbps_min": _pct(bw, 0), "busbw_gbps_p10": _pct(bw, 10), "busbw_gbps_median": _pct(bw, 50),
                        "busbw_gbps_mean": float(bw.mean()) if len(bw) else None, "busbw_gbps_p90": _pct(bw, 90),
                        "busbw_gbps_max": _pct(bw, 100), "algbw_gbps_median": _pct(ab, 50),
                        "start_skew_mean_ns": float(skew.mean()), "start_skew_max_ns": int(skew.max())})
        return out


def summarize(inst: dict) -> list:
    """Per (collective, parallel_dim): ``count`` instances (``complete`` of them), ``bytes`` (sum of
    msg_bytes), ``traffic_pct`` (percent of all bytes), ``time_ns`` (sum of latency), ``kernel_time_ns``
    (sum over ranks of kernel durations), bus/alg bandwidth distribution over complete instances
    (``busbw_gbps_min``, ``_p10``, ``_median``, ``_mean``, ``_p90``, ``_max``, ``algbw_gbps_median``;
    GB/s), mean and max start skew (ns).  Rows sorted by (collective, parallel_dim)."""
    acc = Summary()
    acc.add(inst)
    return acc.rows()


def is_group(inst: dict) -> np.ndarray:
    """Mask of the group collectives among ``inst`` (everything but point-to-point: Send, Recv,
    SendRecv, matched or not)."""
    return ~np.isin(np.asarray(inst["collective"], object), P2P) if len(inst["instance"]) else np.zeros(0, bool)


def _grown(a: np.ndarray, size: int) -> np.ndarray:
    return a if len(a) >= size else np.concatenate([a, np.zeros(size - len(a), a.dtype)])


class Stragglers:
    """``straggler_table`` over instance and member tables given one piece at a time
    (``add``; a piece's members belong to its instances): per kind, per-rank counts and sums
    (int64 / float64 arrays of length max rank + 1), so the rows equal the whole table's."""

    def __init__(self):
        self.kinds: dict = {}

    def add(self, inst: dict, members: dict):
        if not len(inst["instance"]):
            return
        group = is_group(inst)
        multi = group & (inst["n_ranks"] >= 2)
        pairs = list(zip(inst["collective"].tolist(), inst["parallel_dim"].tolist()))
        kinds = sorted(set(pairs))
        code = {k: i for i, k in enumerate(kinds)}
        kind = np.asarray([code[x] for x in pairs], np.int64)
        pos = np.searchsorted(inst["instance"], members["instance"])      # member -> its instance's row
        m_kind, m_group = kind[pos], group[pos]
        for k in sorted(set(kind[group].tolist())):          # per kind: bincounts over ranks, linear in rows
            of_kind = multi & (kind == k)
            mine = m_group & (m_kind == k)
            m_rank = members["rank"][mine].astype(np.int64)
            if not len(m_rank):
                continue
            s_rank, w_rank = inst["straggler_rank"][of_kind], inst["waiter_rank"][of_kind]
            lag = inst["straggler_lag_ns"][of_kind][s_rank >= 0].astype(np.float64)
            s_rank, w_rank = s_rank[s_rank >= 0].astype(np.int64), w_rank[w_rank >= 0].astype(np.int64)
            size = int(max(m_rank.max(), s_rank.max(initial=-1), w_rank.max(initial=-1))) + 1
            a = self.kinds.setdefault(kinds[k], {"seen": np.zeros(0, bool), "n": np.zeros(0, np.int64),
                                                 "wait": np.zeros(0), "s_cnt": np.zeros(0, np.int64),
                                                 "s_lag": np.zeros(0), "w_cnt": np.zeros(0, np.int64)})
            size = max(size, len(a["n"]))
            for name in a:
                a[name] = _grown(a[name], size)
            a["seen"][m_rank] = True
            a["n"] += np.bincount(m_rank, minlength=size)
            a["wait"] += np.bincount(m_rank, weights=members["wait_ns"][mine].astype(np.float64), minlength=size)
            a["s_cnt"] += np.bincount(s_rank, minlength=size)
            a["s_lag"] += np.bincount(s_rank, weights=lag, minlength=size)
            a["w_cnt"] += np.bincount(w_rank, minlength=size)

    def rows(self) -> list:
        out = []
        for (coll, dim), a in sorted(self.kinds.items()):
            for r in np.flatnonzero(a["seen"]).tolist():
                out.append({"collective": coll, "parallel_dim": dim, "rank": int(r), "instances": int(a["n"][r]),
                            "straggler_count": int(a["s_cnt"][r]), "straggler_lag_ns": int(round(a["s_lag"][r])),
                            "waiter_count": int(a["w_cnt"][r]), "wait_ns": int(round(a["wait"][r]))})
        return out


def straggler_table(inst: dict, members: dict) -> list:
    """Per collective kind (``collective``, ``parallel_dim``) and rank, over the group collectives
    only (point-to-point transfers have their own table, ``streamtrace.aggregate.p2p``: there the
    receiver posts early by design): the rank's matched kernels of that kind (``instances``), how
    often it was the straggler (``straggler_count``) and the lag it caused (``straggler_lag_ns``,
    sum of its lead over the next-latest rank), how often it waited longest (``waiter_count``),
    and its total wait (``wait_ns``, sum of last arrival - its arrival; sums of int ns in float64,
    exact below 2^53 ns).  Rows by kind, then rank."""
    acc = Stragglers()
    acc.add(inst, members)
    return acc.rows()


def analyse_collectives(job, clock_sync: str | None = None) -> CollectiveResult:
    """Match, measure and summarise the collectives of ``job``.  With ``clock_sync="collectives"``
    the clock offsets are estimated, set on the job (every later aligned time uses them) and the
    instances measured again on the corrected clocks."""
    if clock_sync not in (None, "none", "collectives"):
        raise StreamtraceError(f"bad --clock-sync {clock_sync!r}: use none or collectives")
    c = load_comm(job)
    bad = c.pop("_mismatches", None) or mismatch_rows([], [], {}, {})
    inst, mem = instance_tables(c) if c else instance_tables({"instance": np.zeros(0, np.int64)})
    offsets, comps = {}, {}
    if clock_sync == "collectives" and c:
        offsets, comps = estimate_clock_offsets(mem, clock_instances(inst))
        job.set_clock_offsets(offsets)
        c = load_comm(job)
        c.pop("_mismatches")
        inst, mem = instance_tables(c)
    stats = {"kernels": int(len(mem["instance"])), "instances": int(len(inst["instance"])),
             "complete": int(inst["complete"].sum()) if len(inst["instance"]) else 0,
             "inconsistent": int((~inst["consistent"]).sum()) if len(inst["instance"]) else 0,
             "single_rank": int((inst["n_ranks"] == 1).sum()) if len(inst["instance"]) else 0,
             **match_stats(inst, bad)}
    return CollectiveResult(inst, mem, summarize(inst), straggler_table(inst, mem), offsets, comps, stats,
                            mismatches=bad)


def clock_instances(inst: dict) -> dict:
    """The instance flags ``estimate_clock_offsets`` reads: point-to-
    point transfers are bridges only; instances matched from CPU ops (gloo) are not used (their
    members do not end together: each rank's gloo thread returns when it is done), marked
    inconsistent for the estimate only."""
    cpu = np.asarray(inst.get("source", np.zeros(0, object)), object) == "cpu ops"
    return {"complete": inst["complete"], "consistent": np.asarray(inst["consistent"], bool) & ~cpu,
            "n_ranks": inst["n_ranks"], "bridge": ~is_group(inst)}


def match_stats(inst: dict, bad: dict) -> dict:
    """``matched_by_seq`` / ``matched_by_order`` (instances) and ``mismatched`` (rank-group pairs
    whose count differs from the group's most), ``mismatched_ranks`` (sorted ranks) for
    ``aggregate.json``'s ``collectives``."""
    by = np.asarray(inst.get("matched_by", np.zeros(0, object)), object)
    return {"matched_by_seq": int((by == "seq").sum()), "matched_by_order": int((by == "order").sum()),
            "mismatched": int(len(bad["rank"])), "mismatched_ranks": sorted({int(r) for r in bad["rank"]})}


def write_collectives(outdir, res: CollectiveResult) -> list:
    """Write ``collectives.parquet`` (instances), ``collectives_ranks.parquet`` (members) and
    ``collectives_summary.csv`` / ``.parquet`` into ``outdir`` atomically; returns the paths."""
    paths = write_table(outdir, COLLECTIVES, res.instances, INSTANCE_COLUMNS) + \
        write_table(outdir, COLLECTIVES_RANKS, res.members, MEMBER_COLUMNS)
    if res.mismatches and len(res.mismatches["rank"]):
        paths += write_table(outdir, COLLECTIVES_MISMATCH, res.mismatches, MISMATCH_COLUMNS, csv=True)
    return paths + write_summary(outdir, res.summary)


def write_summary(outdir, summary: list) -> list:
    """Write ``collectives_summary.parquet`` / ``.csv`` (``COLLECTIVES_SUMMARY_COLUMNS``) from the row dicts
    ``summary`` into ``outdir`` atomically; returns the paths (``[]``, nothing written, without rows)."""
    if not summary:
        return []
    summ = {k: np.asarray([r[k] for r in summary], object if isinstance(summary[0][k], str) else None)
            for k in COLLECTIVES_SUMMARY_COLUMNS}
    return write_table(outdir, COLLECTIVES_SUMMARY, summ, COLLECTIVES_SUMMARY_COLUMNS, csv=True)
