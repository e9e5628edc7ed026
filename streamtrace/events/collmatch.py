"""The one collective matcher of ``merge --align collectives`` and ``aggregate`` (both the in-memory
and the bucketed path): which kernels of different ranks are the same collective call.

**Groups.** A collective belongs to its process group (``group_key``: ``ranks:0,1`` from the
``Process Group Ranks`` the kernel carries, else ``pg:<name>``, else ``stream:<id>``, the stream
standing for the communicator in traces that name no group).  A caller may put more in front of
the key (aggregate: the iteration and ProfilerStep); matching never combines two keys.

**Ordinals** (``match_ordinals``), per group:

* *by sequence number* (``matched_by = "seq"``) when every kernel of the group carries NCCL's
  sequence number (``Seq`` on the kernel / ``record_param_comms`` in newer Kineto, counted per
  process group by ``ProcessGroupNCCL``; -1 unknown): the ordinal is the number itself less the
  group's lowest, so a rank whose trace lacks a collective leaves a hole and nothing moves;
* *by order* (``matched_by = "order"``) otherwise: every member issues a group's collectives in the
  same order (NCCL requires it), so the k-th on one rank is the k-th on another.  When the ranks'
  counts differ (a rank missed or added a collective, or its trace starts or ends earlier), each
  rank's sequence is re-aligned against the group's reference (its lowest part) by the shift d
  (|d| <= ``MAX_SHIFT``) under which the most signatures agree (the smallest |d| on ties, 0
  when the signatures say nothing).  Shifts are sought only when the counts differ.

Either way a rank whose count of collectives in the group differs from the most any member has is
**reported**
(``Mismatch``: group, part, its count, the most, the shift used), never silently shifted.
Signatures (``signature``) are what a member must agree on: the collective and its size, the
size left out for all-to-all (uneven splits give each rank its own size).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

MAX_SHIFT = 16                      # collectives a rank's sequence may be re-aligned by
_A2A = re.compile(r"all_?to_?all", re.I)


def group_key(pg_ranks, pg_name, stream) -> str:
    """The group part of a match key: ``"ranks:0,1"`` (``pg_ranks``: a str such as ``"[0, 1]"`` or
    ``"0,1"``, or a list of ints), else ``"pg:<pg_name>"`` (non-empty str), else
    ``"stream:<stream>"``."""
    if isinstance(pg_ranks, (list, tuple)):
        ranks = ",".join(str(int(x)) for x in pg_ranks)
    else:
        ranks = ",".join(re.findall(r"-?\d+", pg_ranks)) if isinstance(pg_ranks, str) else ""
    if ranks:
        return f"ranks:{ranks}"
    if isinstance(pg_name, str) and pg_name:
        return f"pg:{pg_name}"
    return f"stream:{stream}"


def is_all_to_all(collective) -> bool:
    """``AllToAll``, ``all_to_all``, ``all_to_allv``, ``alltoall_base`` ... (case-insensitive)."""
    if not isinstance(collective, str):
        return False
    return _a2a_name(collective) if len(collective) <= 256 else bool(_A2A.search(collective))


@lru_cache(maxsize=4096)
def _a2a_name(name: str) -> bool:
    """``is_all_to_all`` of a str, searched once a name (a job's kernels repeat a few collectives' names:
    1.5 M calls at 4,096 synthetic ranks); names up to 256 characters only, so that the cache never keeps
    a hostile trace's long texts alive."""
    return bool(_A2A.search(name))


def signature(collective, size) -> str:
    """What the members of one instance agree on: ``"<collective>|<size>"``, the size dropped for
    all-to-all (``is_all_to_all``)."""
    return f"{collective}|" if is_all_to_all(collective) else f"{collective}|{size}"


@dataclass
class Mismatch:
    """A rank whose count of collectives in one group differs from the most any rank of the group
    has: ``group`` (the caller's key id), ``part``, ``count``, ``most``, ``shift`` (collectives its
    sequence was moved by to line up with the reference's; 0 when matched by sequence number)."""
    group: int
    part: int
    count: int
    most: int
    shift: int


@dataclass
class Match:
    """``match_ordinals``' result: ``ordinal`` (int64 per row, >= 0, the instance within its
    group), ``matched_by`` (``{group id: "seq" | "order"}``), ``mismatches`` (list of
    ``Mismatch``, by group then part)."""
    ordinal: np.ndarray
    matched_by: dict
    mismatches: list


def best_shift(ref: np.ndarray, mine: np.ndarray) -> int:
    """The shift d (|d| <= ``MAX_SHIFT``) with ``mine[k + d] == ref[k]`` for the most k; the
    smallest |d| (then the smaller d) on ties."""
    best, best_hits = 0, -1
    for d in sorted(range(-MAX_SHIFT, MAX_SHIFT + 1), key=lambda x: (abs(x), x)):
        lo, hi = max(0, -d), min(len(ref), len(mine) - d)
        hits = int(np.count_nonzero(ref[lo:hi] == mine[lo + d:hi + d])) if hi > lo else 0
        if hits > best_hits:
            best, best_hits = d, hits
    return best


def _cumcount(ids: np.ndarray) -> np.ndarray:
    o = np.argsort(ids, kind="stable")
    s = ids[o]
    first = np.r_[True, s[1:] != s[:-1]] if len(s) else np.zeros(0, bool)
    start = np.maximum.accumulate(np.where(first, np.arange(len(s)), 0)) if len(s) else s
    out = np.empty(len(ids), np.int64)
    out[o] = np.arange(len(s)) - start
    return out


def match_ordinals(part, group, seq, sig) -> Match:
    """The module docstring's matching.  ``part``, ``group`` (int64 ids), ``seq`` (int64, -1 unknown)
    and ``sig`` (int64 ids of ``signature`` strings) are equally long arrays; each part's rows
    in the order it issued them (start order).  Raises nothing; empty input gives an empty match."""
    part, group = np.asarray(part, np.int64), np.asarray(group, np.int64)
    seq, sig = np.asarray(seq, np.int64), np.asarray(sig, np.int64)
    n = len(part)
    ordinal = np.zeros(n, np.int64)
    by, bad = {}, []
    if not n:
        return Match(ordinal, by, bad)
    span = int(part.max()) + 1
    k = _cumcount(group * span + part)
    o = np.argsort(group, kind="stable")
    cut = np.flatnonzero(np.r_[True, group[o][1:] != group[o][:-1], True])
    for a, b in zip(cut[:-1], cut[1:]):
        rows = o[a:b]
        g = int(group[rows[0]])
        parts, counts = np.unique(part[rows], return_counts=True)
        if (seq[rows] >= 0).all():
            by[g] = "seq"
            ordinal[rows] = seq[rows] - seq[rows].min()
            most = int(counts.max())
            bad += [Mismatch(g, int(p), int(c), most, 0) for p, c in zip(parts, counts) if c != most]
            continue
        by[g] = "order"
        ordinal[rows] = k[rows]
        most = int(counts.max())
        if (counts == most).all():
            continue
        ref = rows[part[rows] == parts[0]]
        shifts = {}
        for p in parts.tolist():
            mine = rows[part[rows] == p]
            shifts[p] = 0 if p == parts[0] else best_shift(sig[ref], sig[mine])
            ordinal[mine] = k[mine] - shifts[p]
        ordinal[rows] -= ordinal[rows].min()
        bad += [Mismatch(g, int(p), int(c), most, shifts[int(p)]) for p, c in zip(parts, counts) if c != most]
    return Match(ordinal, by, bad)


def mismatch_warning(bad: list, what: str) -> list:
    """One warning line for the ranks that missed or added collectives (``bad``: dicts with
    ``rank``, ``group``, ``count``, ``most``), or none."""
    if not bad:
        return []
    shown = "; ".join(f"rank {b['rank']} {b['count']} of {b['most']} on {b['group']}" for b in bad[:4])
    more = f"; {len(bad) - 4} more" if len(bad) > 4 else ""
    return [f"{what}: {len(bad)} rank-group pair(s) with a missed or extra collective ({shown}{more}): the "
            f"others are matched around the gap (by sequence number where known, else by signature); see the "
            f"mismatch table"]
