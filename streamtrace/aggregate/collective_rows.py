"""A rank's communication kernels as the collective matcher reads them, and what the match reports:
the optional facts the analyze stage may give (NCCL's sequence number, all-to-all split sizes,
where the bytes came from), each rank's bytes sent and received in an all-to-all, the check that an
all-to-all's splits agree between ranks, and the ranks that missed or added a collective.

**Optional kernel columns** (absent in folders analysed before they existed: the defaults stand):
``seq`` (int64, NCCL's sequence number per process group, -1 unknown), ``in_splits`` /
``out_splits`` (str, all-to-all(v) bytes to / from each group member, in the group's rank order,
comma-separated, "" unknown), ``bytes_source`` (str, "" unknown).

**All-to-all bytes per rank** (``member_bytes``): sent = the sum of ``in_splits``, received = the
sum of ``out_splits`` (PyTorch's ``all_to_all_single`` input / output split sizes, recorded by
``record_param_comms`` as ``In split size`` / ``Out split size``); without splits the kernel's
``in_bytes`` / ``out_bytes`` (``In msg nelems`` / ``Out msg nelems`` x the dtype's size), -1 unknown.
"""
from __future__ import annotations

import numpy as np

from ..analyze.outputs import KERNELS
from ..events.collmatch import is_all_to_all
from ..events.dataset import parquet_file
from .folder import COLLECTIVES_MISMATCH_COLUMNS
from .gloo import gloo_comm

OPTIONAL = {"seq": -1, "in_splits": "", "out_splits": "", "bytes_source": ""}
UNKNOWN_DIMS = ("", "unknown", None)
MISMATCH_COLUMNS = COLLECTIVES_MISMATCH_COLUMNS


def read_comm(job, part, columns) -> dict:
    """``job.read_kernels(part, columns + in_bytes/out_bytes + the optional columns the part's
    files have, kind="communication")``; an optional column the files lack is filled with its
    default (``OPTIONAL``), as are ``in_bytes`` / ``out_bytes`` (-1).  A rank with no kernel
    at all (CPU only): its gloo collectives from its CPU ops (``gloo_comm``)."""
    files = part.files(KERNELS)
    opened = [parquet_file(f) for f in files]        # (each footer read once: rows and schema)
    if not sum(f.metadata.num_rows for f in opened):  # a CPU-only rank: its gloo collectives
        return gloo_comm(job, part, columns)
    have = set(opened[0].schema_arrow.names)
    extra = [c for c in ("in_bytes", "out_bytes", *OPTIONAL) if c in have]
    k = job.read_kernels(part, list(dict.fromkeys(list(columns) + extra)), kind="communication")
    n = len(k["ts_ns"])
    for c, d in (("in_bytes", -1), ("out_bytes", -1), *OPTIONAL.items()):
        if c not in k:
            k[c] = np.full(n, d, np.int64) if isinstance(d, int) else np.full(n, d, object)
    return k


def _split_sum(s) -> int:
    if not isinstance(s, str) or not s.strip():
        return -1
    try:
        return int(sum(int(x) for x in s.split(",") if x.strip()))
    except ValueError:
        return -1


def member_bytes(k: dict) -> tuple[np.ndarray, np.ndarray]:
    """Bytes each kernel's rank sends and receives (int64, -1 unknown; module docstring): for an
    all-to-all from its splits, else ``in_bytes`` / ``out_bytes``; for any other collective
    ``in_bytes`` / ``out_bytes`` (the kernel's input and output message)."""
    n = len(k["ts_ns"])
    send = np.asarray(k["in_bytes"], np.int64).copy() if n else np.zeros(0, np.int64)
    recv = np.asarray(k["out_bytes"], np.int64).copy() if n else np.zeros(0, np.int64)
    for i in np.flatnonzero([is_all_to_all(c) for c in k["collective"]]).tolist():
        s, r = _split_sum(k["in_splits"][i]), _split_sum(k["out_splits"][i])
        send[i] = s if s >= 0 else send[i]
        recv[i] = r if r >= 0 else recv[i]
    return send, recv


def splits_agree(ranks, pg_ranks, in_splits, out_splits) -> bool:
    """One all-to-all instance's members (``ranks``, ints; their ``in_splits`` / ``out_splits`` str):
    what rank i sends to j (``in_splits[i][pos j]``) is what j receives from i (``out_splits[j][pos
    i]``), positions in ``pg_ranks`` ("0,1,..." or "" for the members in rank order).  True when a
    member's splits are unknown (nothing to check)."""
    order = [int(x) for x in pg_ranks.split(",") if x.strip()] if isinstance(pg_ranks, str) and pg_ranks else \
        sorted(ranks)
    pos = {r: j for j, r in enumerate(order)}
    try:
        sends = {r: [int(x) for x in s.split(",")] for r, s in zip(ranks, in_splits)}
        recvs = {r: [int(x) for x in s.split(",")] for r, s in zip(ranks, out_splits)}
    except (AttributeError, ValueError):
        return True
    for i in ranks:
        for j in ranks:
            a, b = sends[i], recvs[j]
            if pos.get(j, len(a)) >= len(a) or pos.get(i, len(b)) >= len(b):
                return False
            if a[pos[j]] != b[pos[i]]:
                return False
    return True


def mismatch_rows(mismatches, prefixes: list, part_rank: dict, matched_by: dict) -> dict:
    """The ranks that missed or added a collective (``Mismatch``
    list) as table columns ``MISMATCH_COLUMNS``: ``group`` (the group key, e.g. ``ranks:0,1``),
    ``iteration``, ``step``, ``rank``, ``count`` (its collectives in the group), ``most`` (the most
    any member has), ``shift`` (collectives its sequence was moved by), ``matched_by``.  ``prefixes``:
    the match-key prefix per group id (``"<iteration>:<step>|<group>"``)."""
    rows = {c: [] for c in MISMATCH_COLUMNS}
    for m in mismatches:
        it_step, _, group = prefixes[m.group].partition("|")
        it, _, st = it_step.partition(":")
        for c, v in (("group", group), ("iteration", int(it)), ("step", int(st)), ("rank", part_rank[m.part]),
                     ("count", m.count), ("most", m.most), ("shift", m.shift), ("matched_by", matched_by[m.group])):
            rows[c].append(v)
    return {c: np.asarray(v, object if c in ("group", "matched_by") else np.int64) for c, v in rows.items()}


def fill_dims(dims, pg_ranks, topology) -> np.ndarray:
    """The kernels' parallel dimensions (object array), those the analyze stage left unknown named
    by ``topology`` (the job's: ``--topology FILE``, or the traces' ``pg_config``) from the
    process group's ranks (``dim_of``, the rule the analyze
    stage applies when it is given the topology), so a topology given to ``report`` / ``aggregate``
    names the same dimension as one given to ``analyze`` / ``epilogue``; unchanged without one."""
    dims = np.asarray(dims, object)
    if topology is None or not len(dims):
        return dims
    out = dims.copy()
    cache: dict = {}
    for i in np.flatnonzero([d in UNKNOWN_DIMS for d in dims.tolist()]).tolist():
        g = pg_ranks[i]
        if g not in cache:
            ranks = [int(x) for x in str(g or "").replace("[", "").replace("]", "").split(",") if x.strip()]
            cache[g] = topology.dim_of(ranks) or "unknown"
        out[i] = cache[g]
    return out


class RankDims:
    """The part of a topology one rank's collectives need, cheap to send to a worker: its groups'
    dimensions (``by_set``: ``{frozenset of ranks: dim_of(ranks)}``, the groups that hold the rank, one per
    dimension; None for another set), for ``fill_dims``.  ``rank_dims`` builds every rank's at once."""

    def __init__(self, by_set: dict):
        self.by_set = by_set

    def dim_of(self, ranks) -> str | None:
        """The dimension of the group of ``ranks`` (ints) holding this rank, else None."""
        return self.by_set.get(frozenset(ranks)) if ranks else None


def rank_dims(topology) -> dict:
    """``{rank: RankDims}`` for each rank of ``topology``'s groups: in each dimension the group that holds
    the rank (``topology.group_of``), named by ``topology.dim_of``.  O(world size x dimensions) in time and
    memory: each group's rank set is one frozenset that its ranks' ``RankDims`` share (a set a
    rank, each built by scanning the groups, was O(world size x group size): a pure-DP job of 4,096 ranks
    held 540 MB of them in aggregate's parent and took 1.8 s; 16,384 ranks at TP=8, PP=4 565 MB, 9 s)."""
    shared: dict = {}                                 # id of a group's list -> (its rank set, its dimension)
    out: dict = {}
    for r in sorted({r for groups in topology.groups.values() for g in groups for r in g}):
        by_set: dict = {}
        for d in topology.groups:
            g = topology.group_of(d, r)
            if g:
                key, dim = shared.get(id(g)) or shared.setdefault(id(g), (frozenset(g), topology.dim_of(g)))
                by_set.setdefault(key, dim)
        out[r] = RankDims(by_set)
    return out
