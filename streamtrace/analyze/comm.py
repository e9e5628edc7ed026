"""Collective type, bytes, process group and parallel dimension of one rank's communication
kernels (:func:`collective_columns`), from their collective-args rows, the process-group config
of the trace, the topology and the launching stack.

The parallel dimension, first answer wins: the process group's description when it is one of
Megatron-LM's exact names (:func:`streamtrace.topology.dim_of_desc`: ``EXPERT_DATA_PARALLEL_GROUP``
is EDP even when its ranks equal a DP group's); the topology's group with the same ranks (dense
dimensions before expert ones); the ``pg_desc`` patterns; the launching stack (``stack_dim``)."""
from __future__ import annotations

import numpy as np

from ..events.dataset import StringPool
from ..topology.model import dim_of_desc
from . import classify as C

#: string and integer columns of the kernels table that describe a collective
COLL_STR = ("collective", "dtype", "pg_name", "pg_desc", "pg_ranks", "parallel_dim")
COLL_INT = ("in_bytes", "out_bytes", "msg_bytes", "group_size")


def collective_columns(gpu, comm_rows, nm, pats, topo, pg_config) -> dict:
    """Collective type, bytes, process group and parallel dimension of the communication
    kernels only: ``{"pos": rows, column: values}``; string columns as ids into ``"pool"``."""
    pool, ids = [], {}

    def sid(v):
        v = v if isinstance(v, str) else str(v)
        if v not in ids:
            ids[v] = len(pool)
            pool.append(v)
        return ids[v]
    k = len(gpu.comm_pos)
    dim_at = gpu.ctx["dim"]
    index, found = {}, []                  # kernels with equal inputs share one result
    which = np.empty(k, np.int64)
    for i, (name, r, d) in enumerate(zip(gpu.comm_name.tolist(), gpu.comm_row[gpu.comm_pos].tolist(),
                                         dim_at[gpu.comm_pos].tolist())):
        row = comm_rows[r] if r >= 0 else None
        key = (name, d, _row_key(row))
        v = index.get(key)
        if v is None:
            info = C.collective_info(row, nm.names[name], pats, pg_config)
            dim = dim_of_desc(info["pg_desc"])                       # Megatron's own name: exact
            dim = dim or (topo.dim_of(info["pg_ranks"]) if topo is not None else None)
            dim = dim or pats.first(pats.pg_desc, info["pg_desc"])
            if not dim and d >= 0:
                dim = nm.stack_dim[d]
            info["parallel_dim"] = dim or "unknown"
            info["pg_ranks"] = ",".join(map(str, info["pg_ranks"]))
            v = index[key] = len(found)
            found.append([info[c] for c in COLL_INT] + [sid(info[c]) for c in COLL_STR])   # strings in order
        which[i] = v
    table = np.asarray(found, np.int64).reshape(len(found), len(COLL_INT) + len(COLL_STR))
    out = {c: table[which, n] for n, c in enumerate(COLL_INT)}
    out.update({c: table[which, len(COLL_INT) + n].astype(np.int32) for n, c in enumerate(COLL_STR)})
    out["pos"] = gpu.comm_pos
    out["pool"] = StringPool(pool)
    return out


def _row_key(row):
    """A hashable stand-in for a collective-args row (its values in key order)."""
    if row is None:
        return None
    key = tuple(row.values())
    try:
        hash(key)
    except TypeError:                     # a list value: compare by text
        return repr(key)
    return key
