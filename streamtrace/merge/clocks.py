"""``merge --align collectives``: each rank's clock offset from the ends of its collectives.

**Collected** in merge's survey (the one extra read of every rank; :func:`CollectiveLog.add`): every
GPU kernel whose name matches ``nccl``/``rccl``, with its start and end (rank-local int64 ns), its
process group (``Process Group Ranks``, else ``Process Group Name``, else its stream), whether it is
a point-to-point send or receive (``Collective name`` send/recv) and its signature (collective name
or kernel name, ``In msg nelems``, ``Out msg nelems``, ``dtype``).

**Matched** (:func:`match`) per process group: every member issues the group's collectives in the
same order (NCCL requires it), so the k-th collective of a group on one rank is the k-th on another.
A rank whose trace starts or ends a few collectives earlier than another's is re-aligned: against the
group's lowest rank, the shift d in [-16, 16] under which the most signatures agree is used (the
smallest |d| on ties; d = 0 when the signatures say nothing).  An instance whose members disagree on
the signature is not used.  Point-to-point transfers in a two-rank group (Megatron's pipeline
groups with two stages) are matched sender to receiver the same way and serve only as *bridges*:
they join sets of ranks that share no group collective (pipeline stages) and are not used inside a
set (:mod:`streamtrace.events.clocks`, step 4).

**Estimated** with :func:`streamtrace.events.clocks.fit_clock_offsets` (the estimator of ``aggregate
--clock-sync collectives``) on the ranks' times after merge's global shift (``baseTimeNanoseconds``),
and subtracted from each rank's shift (:func:`plan_clock_sync`).  Not applied (the global shift kept;
the estimate recorded in the header and warned about) for a rank linked to the others by fewer than
:data:`MIN_INSTANCES` instances, for a rank whose collective ends still disagree after alignment by
more than :data:`MAX_RESIDUAL_NS` (95th percentile of its residuals: the matching or the premise
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
from ..trace.metadata import host_name

MIN_INSTANCES = 8                   # instances linking a rank to the others before its offset is applied
MAX_RESIDUAL_NS = 50_000            # 95th-percentile residual above which the estimate is called unreliable
MAX_SHIFT = 16                      # collectives a rank's trace may start or end away from the reference's
_COMM = re.compile(r"nccl|rccl", re.I)
_P2P = re.compile(r"^(send|recv)", re.I)
KERNEL_CATS = frozenset({"kernel", "Kernel"})


class CollectiveLog:
    """One rank's (or byte range's) collective kernels, in file order: ``start``/``end`` (int64 ns,
    rank-local), ``group`` and ``sig`` (indices into ``groups`` / ``sigs``, strings)."""

    def __init__(self):
        self.start, self.end, self.group, self.sig = [], [], [], []
        self.groups, self.sigs = [], []
        self._g, self._s = {}, {}

    def add(self, name, ts, dur, args, stream) -> None:
        """Record one GPU kernel (``args``: its collective args, a dict or None) unless its name is
        not NCCL's / RCCL's; a send or receive under the group name ``send:<group>`` / ``recv:<group>``."""
        args = args or {}
        coll = args.get("Collective name")
        if not _COMM.search(name or ""):
            return
        p2p = _P2P.match(coll).group(1).lower() + ":" if isinstance(coll, str) and _P2P.match(coll) else ""
        ranks = args.get("Process Group Ranks")
        ranks = ",".join(re.findall(r"\d+", ranks)) if isinstance(ranks, str) else \
            ",".join(map(str, ranks)) if isinstance(ranks, list) else ""
        pg = args.get("Process Group Name")
        group = p2p + (f"ranks:{ranks}" if ranks else f"pg:{pg}" if pg is not None else f"stream:{stream}")
        what = "p2p" if p2p else coll if isinstance(coll, str) else name     # a send matches its receive
        sig = f"{what}|{args.get('In msg nelems')}|{args.get('Out msg nelems')}|{args.get('dtype')}"
        self.start.append(int(ts))
        self.end.append(int(ts) + int(dur))
        self.group.append(_intern(self._g, self.groups, group))
        self.sig.append(_intern(self._s, self.sigs, sig))

    def extend(self, other: "CollectiveLog") -> None:
        """Append a later byte range's log."""
        gmap = [_intern(self._g, self.groups, g) for g in other.groups]
        smap = [_intern(self._s, self.sigs, s) for s in other.sigs]
        self.start += other.start
        self.end += other.end
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


def _best_shift(ref, mine) -> int:
    """The shift d (|d| <= :data:`MAX_SHIFT`) with ``mine[k + d] == ref[k]`` for the most k; the
    smallest |d| (then the smaller d) on ties."""
    best, best_hits = 0, -1
    for d in sorted(range(-MAX_SHIFT, MAX_SHIFT + 1), key=lambda x: (abs(x), x)):
        lo, hi = max(0, -d), min(len(ref), len(mine) - d)
        hits = int(np.count_nonzero(ref[lo:hi] == mine[lo + d:hi + d])) if hi > lo else 0
        if hits > best_hits:
            best, best_hits = d, hits
    return best


def _p2p_key(name, rank):
    """``"send:ranks:0,8"`` on rank 0 -> ``"p2p:0>8"`` (``recv:`` the other way); None unless the
    group has exactly two ranks, this one among them (the peer is then known)."""
    verb, _, group = name.partition(":")
    ranks = [int(x) for x in re.findall(r"\d+", group)] if group.startswith("ranks:") else []
    if len(ranks) != 2 or rank not in ranks:
        return None
    peer = ranks[1] if ranks[0] == rank else ranks[0]
    return f"p2p:{rank}>{peer}" if verb == "send" else f"p2p:{peer}>{rank}"


def _by_group(logs: dict, shifts: dict) -> dict:
    """``{group string: {rank: (signature strings, ends on the global axis)}}``; point-to-point
    kernels under ``p2p:<src>><dst>`` (:func:`_p2p_key`; others dropped)."""
    out: dict = {}
    for r, log in logs.items():
        if not len(log):
            continue
        g, s = np.asarray(log.group), np.asarray(log.sig)
        end = np.asarray(log.end, np.int64) + int(shifts[r])
        sigs = np.asarray(log.sigs, object)
        for gi, name in enumerate(log.groups):
            sel = g == gi
            key = _p2p_key(name, r) if name.startswith(("send:", "recv:")) else name
            if key is not None and sel.any():
                out.setdefault(key, {})[r] = (sigs[s[sel]].astype(str), end[sel])
    return out


def match(logs: dict, shifts: dict) -> tuple[dict, dict]:
    """Instances across ranks from ``logs`` (``{rank: CollectiveLog}``) on the global axis (rank-local
    time + ``shifts[rank]``).  Returns ``(members, instances)`` in the form
    :func:`~streamtrace.events.clocks.fit_clock_offsets` takes (``part`` = ``rank``); an instance is
    complete when it has as many members as its group has ranks (``Process Group Ranks``, else the
    ranks seen in the group); point-to-point instances are ``bridge`` instances."""
    m_inst, m_rank, m_end, m_sig, starts, sizes, bridge = [], [], [], [], [], [], []
    base = 0
    for name, ranks in sorted(_by_group(logs, shifts).items()):
        ref = min(ranks)
        starts.append(base)
        bridge.append(name.startswith("p2p:"))
        sizes.append(2 if bridge[-1] else len(re.findall(r"\d+", name)) if name.startswith("ranks:") else len(ranks))
        for r, (sig, end) in ranks.items():
            k = np.arange(len(sig)) - (0 if r == ref else _best_shift(ranks[ref][0], sig))
            ok = k >= 0                                # instance ordinal of each of r's kernels
            m_inst.append(base + k[ok])
            m_rank.append(np.full(int(ok.sum()), r, np.int64))
            m_end.append(end[ok])
            m_sig.append(sig[ok])
        base += max(len(v[0]) for v in ranks.values()) + MAX_SHIFT + 1
    if not m_inst:
        z = np.zeros(0, np.int64)
        return {"instance": z, "part": z, "rank": z, "end_ns": z}, \
            {"complete": z.astype(bool), "consistent": z.astype(bool), "n_ranks": z, "bridge": z.astype(bool)}
    ordinal, rank, end, sig = (np.concatenate(x) for x in (m_inst, m_rank, m_end, m_sig))
    uniq, inst = np.unique(ordinal, return_inverse=True)
    inst = inst.reshape(-1).astype(np.int64)
    n = np.bincount(inst, minlength=len(uniq))
    which = np.searchsorted(np.asarray(starts), uniq, "right") - 1
    size, is_bridge = np.asarray(sizes, np.int64)[which], np.asarray(bridge, bool)[which]
    o = np.argsort(inst, kind="stable")
    first = np.r_[True, inst[o][1:] != inst[o][:-1]]
    same_as_first = sig[o] == sig[o][np.maximum.accumulate(np.where(first, np.arange(len(o)), 0))]
    consistent = np.ones(len(uniq), bool)
    consistent[inst[o][~same_as_first]] = False
    members = {"instance": inst, "part": rank, "rank": rank, "end_ns": end}
    return members, {"complete": n >= size, "consistent": consistent, "n_ranks": n, "bridge": is_bridge}


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
    "applied", "one_host", "references", "ranks": {rank: {"offset_ns", "residual_ns", "instances",
    "component", "applied"}}}`` for the merged header."""
    logs = {tf.rank: s.collectives for tf, s in zip(files, surveys)}
    est = fit_clock_offsets(*match(logs, shifts))
    hosts = {host_name(s.metadata) for s in surveys}
    one_host = len(files) > 1 and None not in hosts and len(hosts) == 1
    warnings, ranks, out = [], {}, dict(shifts)
    for tf in files:
        r = tf.rank
        n = est.instances.get(r, 0)
        linked = n >= MIN_INSTANCES and r in est.offsets
        res = est.residual_ns.get(r)
        reliable = linked and res is not None and res["p95"] <= MAX_RESIDUAL_NS
        applied = reliable and not one_host
        off = est.offsets.get(r, 0)
        ranks[r] = {"offset_ns": off, "residual_ns": est.residual_ns.get(r), "instances": n,
                    "component": est.components.get(r), "applied": applied}
        if applied:
            out[r] = shifts[r] - off
        elif not linked and len(files) > 1:
            warnings.append(f"--align collectives: rank {r} shares {n} usable collective(s) with the other ranks "
                            f"(< {MIN_INSTANCES}): its clock offset is not estimated, merge's global shift is kept")
        if linked and not reliable:
            warnings.append(f"--align collectives: rank {r}: collective ends still disagree by {res['p95'] / 1e3:,.1f} "
                            f"us (95th percentile) after alignment (> {MAX_RESIDUAL_NS / 1e3:g} us): the estimate is "
                            f"unreliable and not applied, merge's global shift is kept")
    sets = _applied_sets(ranks)
    if len(sets) > 1:
        warnings.append(f"--align collectives: the ranks fall into {len(sets)} sets that no usable collective links "
                        f"(lowest ranks {', '.join(str(min(s)) for s in sets)}; pipeline stages when the PP group "
                        f"has more than two ranks: point-to-point joins only two-rank groups): each set is aligned "
                        f"within itself, the sets keep merge's global clock relative to each other")
    if one_host:
        warnings.append(f"--align collectives: every rank was recorded on host {hosts.pop()!r} (one clock): the "
                        f"estimated offsets are recorded in the header but not applied")
    clock = {"method": "collectives", "applied": any(v["applied"] for v in ranks.values()), "one_host": one_host,
             "references": {str(c): r for c, r in est.references.items()}, "ranks": ranks}
    return out, clock, warnings
