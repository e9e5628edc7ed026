"""Collective type, bytes, process group, sequence number and parallel dimension of one rank's
communication kernels (``collective_columns``): each kernel's facts from its own args, the
communication ops its launch ran under and the trace's process-group config
(``streamtrace.analyze.collective_facts.collective_facts``), its dimension from those, the
topology and the launching stack.

The parallel dimension, first answer wins: the process group's description when it is one of
Megatron-LM's exact names (``streamtrace.topology.dim_of_desc``: ``EXPERT_DATA_PARALLEL_GROUP``
is EDP even when its ranks equal a DP group's); the topology's group with the same ranks (dense
dimensions before expert ones); the ``pg_desc`` patterns; the launching stack (``stack_dim``)."""
from __future__ import annotations

import numpy as np
import orjson

from ..events.dataset import StringPool
from ..topology.model import dim_of_desc
from .collective_facts import OpIndex, collective_facts

#: string and integer columns of the kernels table that describe a collective
COLL_STR = ("collective", "dtype", "pg_name", "pg_desc", "pg_ranks", "parallel_dim", "bytes_source", "in_splits",
            "out_splits")
COLL_INT = ("in_bytes", "out_bytes", "msg_bytes", "group_size", "seq")


def collective_columns(gpu, comm_rows, nm, pats, topo, pg_config, world_size=-1) -> dict:
    """The ``COLL_INT`` / ``COLL_STR`` columns of the communication kernels only:
    ``{"pos": their GPU rows, column: values}``, int columns int64 (-1 unknown), string columns
    int32 ids into ``"pool"``.  ``gpu.comm_own``: each communication row's own args row, ``gpu.ctx["comm_row"]``:
    the innermost communication op its launch ran under (-1: none); ``world_size``: the job's
    (-1 unknown)."""
    pool, ids = [], {}

    def sid(v):
        v = v if isinstance(v, str) else str(v)
        if v not in ids:
            ids[v] = len(pool)
            pool.append(v)
        return ids[v]
    k = len(gpu.comm_pos)
    dim_at = gpu.ctx["dim"]
    ops_at = gpu.ctx["comm_row"]
    index, found = {}, []                  # kernels with equal inputs share one result
    opx = None
    which = np.empty(k, np.int64)
    seq_at = np.full(k, -1, np.int64)       # a kernel's own Seq: not in the cache key
    for i, (name, r, o, d) in enumerate(zip(gpu.comm_name.tolist(), gpu.comm_own.tolist(),
                                            ops_at[gpu.comm_pos].tolist(), dim_at[gpu.comm_pos].tolist())):
        if o >= 0 and opx is None:
            opx = OpIndex(comm_rows)
        ops = opx.enclosing(o) if o >= 0 else []
        key = (name, d, _row_key(comm_rows[r]) if r >= 0 else None, tuple(_row_key(comm_rows[j]) for j in ops))
        seq_at[i] = own_seq(comm_rows[r] if r >= 0 else None, [comm_rows[j] for j in ops])
        v = index.get(key)
        if v is None:
            f = collective_facts(nm.names[name], comm_rows[r] if r >= 0 else None, [comm_rows[j] for j in ops],
                                 pats, pg_config, world_size)
            dim = dim_of_desc(f.pg_desc)                       # Megatron's own name: exact
            dim = dim or (topo.dim_of(f.pg_ranks) if topo is not None else None)
            dim = dim or pats.first(pats.pg_desc, f.pg_desc)
            if not dim and d >= 0:
                dim = nm.stack_dim[d]
            info = vars(f) | {"parallel_dim": dim or "unknown", "pg_ranks": ",".join(map(str, f.pg_ranks))}
            v = index[key] = len(found)
            found.append([info[c] for c in COLL_INT] + [sid(info[c]) for c in COLL_STR])   # strings in order
        which[i] = v
    table = np.asarray(found, np.int64).reshape(len(found), len(COLL_INT) + len(COLL_STR))
    out = {c: table[which, n] for n, c in enumerate(COLL_INT)}
    out["seq"] = np.where(seq_at >= 0, seq_at, out["seq"])
    out.update({c: table[which, len(COLL_INT) + n].astype(np.int32) for n, c in enumerate(COLL_STR)})
    out["pos"] = gpu.comm_pos
    out["pool"] = StringPool(pool)
    return out


def own_seq(own: dict | None, ops: list) -> int:
    """NCCL's sequence number written as ``Seq`` (int >= 0) on the kernel's own args row ``own``,
    else on the innermost ``record_param_comms`` of ``ops`` (innermost first), the order in which
    ``collective_facts`` reads it; -1 when none carries
    it.  Kept out of ``_row_key``: a per-call number would make every row's key unique."""
    for row in [own] + [o for o in ops if o.get("@op") == "record_param_comms"]:
        v = row.get("Seq") if row else None
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
    return -1


def _row_key(row):
    """A hashable stand-in for a collective-args row without its position and its ``Seq`` (its other
    keys and values as JSON bytes): two calls of one collective with equal args share their facts."""
    if row is None:
        return None
    return orjson.dumps({k: v for k, v in row.items() if k[0] != "@" and k != "Seq"}, default=bytes.decode)
