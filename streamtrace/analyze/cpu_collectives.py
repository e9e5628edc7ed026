"""The collectives of a rank without GPU events (a CPU-only job: the gloo backend), as rows of
the ``cpu_collectives`` table (``cpu_collective_rows``), so that ``aggregate`` can match them
across ranks like the kernels table's communication kernels.

One row per ``gloo:*`` ``user_annotation`` of the rank (ProcessGroupGloo opens one around the
work of every collective and point-to-point call: ``gloo:all_reduce``, ``gloo:all_gather``,
``gloo:send``, ``gloo:recv``...; it runs on the calling thread or on one of gloo's worker
threads).  The ``c10d::*`` op that issued it (on the calling thread) is not a row of its own:
its duration is the enqueueing only.  Columns: ``ts_ns``, ``dur_ns``, ``end_ns`` (int64 ns, the
annotation's), ``pid``, ``tid`` (int64; -1 when written as a string), ``name``, ``kind``
(``communication``), ``step`` (the ``ProfilerStep#N`` around the start, -1 none), and the kernels
table's collective columns (``streamtrace.analyze.comm.COLL_INT`` / ``COLL_STR``) from
``collective_facts`` (the annotation's ``Input Dims`` x
``Input type``: ``bytes_source`` ``annotation_dims``).  gloo's annotations name no process group:
``group_size`` / ``pg_*`` stay unknown unless the trace has no process groups at all (then the
default group of ``world_size`` ranks), and ``parallel_dim`` is ``unknown`` unless the group is
known."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..events.columns import NO_TS
from ..topology.model import dim_of_desc
from .collective_facts import OpIndex, collective_facts
from .comm import COLL_INT, COLL_STR

#: the table's columns before the collective ones
BASE = (("ts_ns", pa.int64()), ("dur_ns", pa.int64()), ("end_ns", pa.int64()), ("pid", pa.int64()),
        ("tid", pa.int64()), ("name", pa.string()), ("kind", pa.string()), ("step", pa.int64()))
SCHEMA = pa.schema(list(BASE) + [(c, pa.int64()) for c in COLL_INT] + [(c, pa.string()) for c in COLL_STR])


def _step_of(t, steps):
    for s, e, v in steps:
        hit = np.flatnonzero((s <= t) & (t < e))
        if len(hit):
            return int(v[hit[0]])
    return -1


def cpu_collective_rows(comm_rows, cpu_pids, pats, pg_config, world_size=-1, steps=(), topo=None) -> pa.Table:
    """The ``cpu_collectives`` rows (module docstring) of the rank whose CPU events have the pids
    ``cpu_pids`` (ints), from the file's collective-args rows ``comm_rows``; ``steps``: the rank's
    ``ProfilerStep#N`` windows (``(start, end, number)`` int64 array triples,
    ``Windows`` ``.step``).  Returns a table of ``SCHEMA``
    (no rows when the rank has no ``gloo:*`` annotation), in start order."""
    pids = set(int(p) for p in cpu_pids)
    mine = [i for i, r in enumerate(comm_rows) if r is not None and str(r.get("@op") or "").startswith("gloo:")
            and isinstance(r.get("@pid"), int) and r["@pid"] in pids and r.get("@ts", NO_TS) != NO_TS]
    mine.sort(key=lambda i: comm_rows[i]["@ts"])
    idx = OpIndex(comm_rows) if mine else None
    cols = {f.name: [] for f in SCHEMA}
    for i in mine:
        r = comm_rows[i]
        ops = [comm_rows[j] for j in idx.enclosing(i)]
        f = collective_facts(r["@op"], None, ops, pats, pg_config, world_size)
        dim = dim_of_desc(f.pg_desc) or (topo.dim_of(f.pg_ranks) if topo is not None and f.pg_ranks else None)
        dim = dim or pats.first(pats.pg_desc, f.pg_desc)
        tid = r.get("@tid")
        row = {"ts_ns": r["@ts"], "dur_ns": r["@end"] - r["@ts"], "end_ns": r["@end"], "pid": r["@pid"],
               "tid": tid if isinstance(tid, int) else -1, "name": r["@op"], "kind": "communication",
               "step": _step_of(r["@ts"], steps)}
        row.update(vars(f))
        row.update(parallel_dim=dim or "unknown", pg_ranks=",".join(map(str, f.pg_ranks)))
        for c in cols:
            cols[c].append(row[c])
    return pa.table({c: pa.array(v, SCHEMA.field(c).type) for c, v in cols.items()}, schema=SCHEMA)
