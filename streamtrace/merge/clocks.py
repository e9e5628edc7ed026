"""``merge --align collectives``: each rank's clock offset from the ends of its collectives.

**Collected** in merge's survey (the one extra read of every rank; ``CollectiveLog.add``): every
GPU kernel whose name matches ``nccl``/``rccl``, with its start and end (rank-local int64 ns), its
process group (``Process Group Ranks``, else ``Process Group Name``, else its stream), whether it is
a point-to-point send or receive (``Collective name`` send/recv) and its signature (collective name
or kernel name, ``In msg nelems``, ``Out msg nelems``, ``dtype``).

**Matched** (``match``) by ``streamtrace.events.collmatch.match_ordinals``, the matcher of
``aggregate`` too: per process group, by NCCL's sequence number (``Seq``) where every kernel of the
group carries it, else by order (every member issues the group's collectives in the same order,
NCCL requires it), a rank whose count differs re-aligned by signature and reported (a warning and
the header's ``mismatches``).  An instance whose members disagree on the signature is not used.
Point-to-point transfers in a two-rank group (Megatron's pipeline
groups with two stages) are matched sender to receiver the same way and serve only as *bridges*:
they join sets of ranks that share no group collective (pipeline stages) and are not used inside a
set (``streamtrace.events.clocks``, step 4).

**Estimated** with ``streamtrace.events.clocks.fit_clock_offsets`` (the estimator of ``aggregate
--clock-sync collectives``) on the ranks' times after merge's global shift (``baseTimeNanoseconds``),
and subtracted from each rank's shift (``plan_clock_sync``).  Not applied (the global shift kept;
the estimate recorded in the header and warned about) for a rank linked to the others by fewer than
``MIN_INSTANCES`` instances, for a rank whose collective ends still disagree after alignment by
more than ``MAX_RESIDUAL_NS`` (95th percentile of its residuals: the matching or the premise
failed), and for every rank when all ranks were recorded on one host (one clock: the estimate would
only be the collectives' own end spread).  Sets of ranks that no usable collective links (the
pipeline stages when the PP group has more than two ranks: its Send/Recv kernels name the whole group,
not the peer) are each aligned within themselves (0 at their lowest rank) and keep the global clock
relative to each other, with a warning.
"""
from __future__ import annotations

import re

import numpy as np

from ..events.clocks import fit_clock_offsets
from ..events.collmatch import group_key, match_ordinals, mismatch_warning, signature
from ..trace.metadata import host_name

MIN_INSTANCES = 8                   # instances linking a rank to the others before its offset is applied
MAX_RESIDUAL_NS = 50_000            # 95th-percentile residual above which the estimate is called unreliable
_COMM = re.compile(r"nccl|rccl", re.I)
_P2P = re.compile(r"^(send|recv)", re.I)
KERNEL_CATS = frozenset({"kernel", "Kernel"})


class CollectiveLog:
    """One rank's (or byte range's) collective kernels, in file order: ``start``/``end`` (int64 ns,
    rank-local), ``seq`` (NCCL's sequence number, ``Seq``, -1 unknown), ``group`` and ``sig``
    (indices into ``groups`` / ``sigs``, strings)."""

    def __init__(self):
        self.start, self.end, self.seq, self.group, self.sig = [], [], [], [], []
        self.groups, self.sigs = [], []
        self._g, self._s = {}, {}

    def add(self, name, ts, dur, args, stream) -> None:
        """Record one GPU kernel (``args``: its collective args, a dict or None) unless its name is
        not NCCL's / RCCL's; a send or receive under the group name ``send:<group>`` / ``recv:<group>``
        (the group: ``group_key``)."""
        args = args or {}
        coll = args.get("Collective name")
        if not _COMM.search(name or ""):
            return
        p2p = _P2P.match(coll).group(1).lower() + ":" if isinstance(coll, str) and _P2P.match(coll) else ""
        group = p2p + group_key(args.get("Process Group Ranks"), args.get("Process Group Name"), stream)
        what = "p2p" if p2p else coll if isinstance(coll, str) else name     # a send matches its receive
        sig = signature(what, f"{args.get('In msg nelems')}|{args.get('Out msg nelems')}|{args.get('dtype')}")
        seq = args.get("Seq")
        self.start.append(int(ts))
        self.end.append(int(ts) + int(dur))
        self.seq.append(int(seq) if isinstance(seq, int) and not p2p else -1)
        self.group.append(_intern(self._g, self.groups, group))
        self.sig.append(_intern(self._s, self.sigs, sig))

    def extend(self, other: "CollectiveLog") -> None:
        """Append a later byte range's log."""
        gmap = [_intern(self._g, self.groups, g) for g in other.groups]
        smap = [_intern(self._s, self.sigs, s) for s in other.sigs]
        self.start += other.start
        self.end += other.end
        self.seq += other.seq
        self.group += [gmap[g] for g in other.group]
        self.sig += [smap[s] for s in other.sig]

    def __len__(self):
        return len(self.start)

    def __getstate__(self):                 # pickled back from survey workers: no lookup dicts
        return {k: v for k, v in self.__dict__.items() if k not in ("_g", "_s")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._g = {g: i for i, g in enumerate(self.groups)}
        self._s = {s: i for i, s in enumerate(self.sigs)}


def _intern(index, strings, s):
    i = index.get(s)
    if i is None:
        i = index[s] = len(strings)
        strings.append(s)
    return i


def _p2p_key(name, rank):
    """``"send:ranks:0,8"`` on rank 0 -> ``"p2p:0>8"`` (``recv:`` the other way); None unless the
    group has exactly two ranks, this one among them (the peer is then known)."""
    verb, _, group = name.partition(":")
    ranks = [int(x) for x in re.findall(r"\d+", group)] if group.startswith("ranks:") else []
    if len(ranks) != 2 or rank not in ranks:
        return None
    peer = ranks[1] if ranks[0] == rank else ranks[0]
    return f"p2p:{rank}>{peer}" if verb == "send" else f"p2p:{peer}>{rank}"


def _rows(logs: dict, shifts: dict) -> tuple:
    """Every rank's kernels as matcher rows (rank order, each rank's in file order): ``rank``,
    group id, ``seq``, signature id, end (global axis); the group names by id.  Point-to-point
    kernels under ``p2p:<src>><dst>`` (``_p2p_key``; others dropped)."""
    names: dict = {}
    sig_ids: dict = {}
    out = {k: [] for k in ("rank", "group", "seq", "sig", "end")}
    for r in sorted(logs):
        log = logs[r]
        if log is None or not len(log):
            continue
        keys = [(_p2p_key(n, r) if n.startswith(("send:", "recv:")) else n) for n in log.groups]
        keep = np.asarray([keys[g] is not None for g in log.group], bool)
        gid = np.asarray([names.setdefault(keys[g], len(names)) if keys[g] is not None else -1 for g in log.group],
                         np.int64)
        sid = np.asarray([sig_ids.setdefault(log.sigs[s], len(sig_ids)) for s in log.sig], np.int64)
        out["rank"].append(np.full(int(keep.sum()), r, np.int64))
        out["group"].append(gid[keep])
        out["seq"].append(np.asarray(log.seq, np.int64)[keep])
        out["sig"].append(sid[keep])
        out["end"].append(np.asarray(log.end, np.int64)[keep] + int(shifts[r]))
    cols = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in out.items()}
    return cols, sorted(names, key=names.get)


def match(logs: dict, shifts: dict) -> tuple[dict, dict]:
    """Instances across ranks from ``logs`` (``{rank: CollectiveLog}``) on the global axis (rank-local
    time + ``shifts[rank]``), by ``match_ordinals`` (the matcher
    of ``aggregate``).  Returns ``(members, instances)`` in the form
    ``fit_clock_offsets`` takes (``part`` = ``rank``); an instance is
    complete when it has as many members as its group has ranks (``Process Group Ranks``, else the
    ranks seen in the group); point-to-point instances are ``bridge`` instances.  ``instances`` also
    holds ``mismatches`` (``Mismatch`` list) and ``group_names``."""
    c, names = _rows(logs, shifts)
    z = np.zeros(0, np.int64)
    if not len(c["rank"]):
        return {"instance": z, "part": z, "rank": z, "end_ns": z}, \
            {"complete": z.astype(bool), "consistent": z.astype(bool), "n_ranks": z, "bridge": z.astype(bool),
             "mismatches": [], "group_names": names}
    m = match_ordinals(c["rank"], c["group"], c["seq"], c["sig"])
    uniq, inst = np.unique(c["group"] * (1 << 32) + m.ordinal, return_inverse=True)
    inst = inst.reshape(-1).astype(np.int64)
    n = np.bincount(inst, minlength=len(uniq))
    seen = {}
    for g, r in zip(c["group"].tolist(), c["rank"].tolist()):
        seen.setdefault(g, set()).add(r)
    sizes = np.asarray([2 if x.startswith("p2p:") else len(re.findall(r"\d+", x)) if x.startswith("ranks:")
                        else len(seen[g]) for g, x in enumerate(names)], np.int64)
    bridges = np.asarray([x.startswith("p2p:") for x in names], bool)
    which = uniq >> 32
    o = np.argsort(inst, kind="stable")
    first = np.r_[True, inst[o][1:] != inst[o][:-1]]
    sig = c["sig"][o]
    same_as_first = sig == sig[np.maximum.accumulate(np.where(first, np.arange(len(o)), 0))]
    consistent = np.ones(len(uniq), bool)
    consistent[inst[o][~same_as_first]] = False
    members = {"instance": inst, "part": c["rank"], "rank": c["rank"], "end_ns": c["end"]}
    return members, {"complete": n >= sizes[which], "consistent": consistent, "n_ranks": n,
                     "bridge": bridges[which], "mismatches": m.mismatches, "group_names": names}


def _applied_sets(ranks: dict) -> list:
    """The connected sets (``component``) with two or more ranks whose offset is applied, each as a
    sorted list of ranks, ordered by lowest rank."""
    sets: dict = {}
    for r, v in ranks.items():
        if v["applied"]:
            sets.setdefault(v["component"], []).append(r)
    return sorted((sorted(s) for s in sets.values() if len(s) > 1), key=min)


def plan_clock_sync(files, surveys, shifts: dict) -> tuple[dict, dict, list]:
    """Per-rank shifts corrected by the collectives' clock offsets (module docstring).  ``files``
    and ``surveys`` in the same order (each survey with its ``collectives`` log), ``shifts``: merge's
    global shifts ``{rank: ns}``.  Returns ``(shifts, clock, warnings)``: ``clock`` = ``{"method",
    "applied", "one_host", "references", "mismatches", "ranks": {rank: {"offset_ns", "residual_ns",
    "instances", "component", "applied"}}}`` for the merged header (``mismatches``: the ranks that
    missed or added a collective, ``{"group", "rank", "count", "most", "shift"}`` each)."""
    logs = {tf.rank: s.collectives for tf, s in zip(files, surveys)}
    members, instances = match(logs, shifts)
    est = fit_clock_offsets(members, instances)
    hosts = {host_name(s.metadata) for s in surveys}
    one_host = len(files) > 1 and None not in hosts and len(hosts) == 1
    ranks, out = {}, dict(shifts)
    for tf in files:
        r = tf.rank
        n = est.instances.get(r, 0)
        linked = n >= MIN_INSTANCES and r in est.offsets
        res = est.residual_ns.get(r)
        reliable = linked and res is not None and res["p95"] <= MAX_RESIDUAL_NS
        applied = reliable and not one_host
        ranks[r] = {"offset_ns": est.offsets.get(r, 0), "residual_ns": res, "instances": n,
                    "component": est.components.get(r), "applied": applied, "linked": linked, "reliable": reliable}
        if applied:
            out[r] = shifts[r] - ranks[r]["offset_ns"]
    bad = [{"group": instances["group_names"][m.group], "rank": m.part, "count": m.count, "most": m.most,
            "shift": m.shift} for m in instances["mismatches"]]
    warnings = _warnings(ranks, len(files), one_host, hosts, bad)
    for v in ranks.values():
        del v["linked"], v["reliable"]
    clock = {"method": "collectives", "applied": any(v["applied"] for v in ranks.values()), "one_host": one_host,
             "references": {str(c): r for c, r in est.references.items()}, "mismatches": bad, "ranks": ranks}
    return out, clock, warnings


def _warnings(ranks: dict, n_files: int, one_host: bool, hosts: set, bad: list) -> list:
    """The warnings of ``plan_clock_sync``: one line when no collective links any rank (a
    CPU-only / gloo job), else per rank not linked or unreliable; the sets left apart; one host."""
    tag = "--align collectives"
    if n_files > 1 and not any(v["instances"] for v in ranks.values()):
        return [f"{tag}: no collective kernel (NCCL/RCCL) is matched across ranks (a CPU-only or gloo job, or "
                f"traces without GPU kernels): no clock offset is estimated, merge's global shift is kept"]
    warnings = mismatch_warning(bad, tag)
    for r, v in ranks.items():
        if not v["linked"] and n_files > 1:
            warnings.append(f"{tag}: rank {r} shares {v['instances']} usable collective(s) with the other ranks "
                            f"(< {MIN_INSTANCES}): its clock offset is not estimated, merge's global shift is kept")
        elif not v["reliable"]:
            warnings.append(f"{tag}: rank {r}: collective ends still disagree by "
                            f"{v['residual_ns']['p95'] / 1e3:,.1f} us (95th percentile) after alignment "
                            f"(> {MAX_RESIDUAL_NS / 1e3:g} us): the estimate is unreliable and not applied, merge's "
                            f"global shift is kept")
    sets = _applied_sets(ranks)
    if len(sets) > 1:
        warnings.append(f"{tag}: the ranks fall into {len(sets)} sets that no usable collective links "
                        f"(lowest ranks {', '.join(str(min(s)) for s in sets)}; pipeline stages when the PP group "
                        f"has more than two ranks: point-to-point joins only two-rank groups): each set is aligned "
                        f"within itself, the sets keep merge's global clock relative to each other")
    if one_host:
        warnings.append(f"{tag}: every rank was recorded on host {next(iter(hosts))!r} (one clock): the "
                        f"estimated offsets are recorded in the header but not applied")
    return warnings
