"""The collectives of a CPU-only (gloo) rank as communication rows, from its CPU ops, so they are
matched across ranks like NCCL kernels (:mod:`streamtrace.job.collectives`): used for a rank whose
kernels table holds no communication row.

**Rows.** Each ``c10d::<op>`` call (``allreduce_``, ``allgather_``, ``send``, ``recv_``, ...: what
``torch.distributed`` records when it is called) paired with the k-th ``gloo:<op>`` annotation of
the same kind (what the gloo backend records around the work itself: on a worker thread for the
asynchronous collectives, inline for send / recv): the k-th call's work is the k-th run of that kind
(the work is queued in call order).  Times: the ``gloo:`` run's (int64 ns, rank-local); a call
with no run (an NCCL rank that recorded no kernel) gives no row.  ``collective`` from the op's name (:class:`~streamtrace.analyze.patterns.Patterns`'
``collective``); ``msg_bytes`` -1 (the ops table keeps no shapes); ``stream`` -1; ``step`` the
enclosing ``ProfilerStep#N`` (-1 none).

**Groups** (gloo records none): the parallel dimension from the names around the call (Megatron's
functions: ``Patterns.stack_dim``, then ``Patterns.pg_desc`` on the names, e.g. ``tp_all_reduce`` ->
TP) and, with the job's topology, that dimension's group holding the rank (``pg_ranks``); a call
with no dimension stays in one unnamed group (the stream, -1, :func:`~streamtrace.events.collmatch.group_key`),
matched by order.
A send or receive is given the rank's PP group (its peer when the group has two ranks) and its
direction through the Megatron function around it (``send_forward`` ...: ``p2p_dirs``, by the row's
``correlation``, -2 - its op row: never an op's -1), as for NCCL p2p kernels.
"""
from __future__ import annotations

import re

import numpy as np

from ..analyze.patterns import Patterns

_CALL = re.compile(r"^c10d::([a-z_]+?)_?$")
_RUN = re.compile(r"^gloo:([a-z_]+)$")
_SAME = {"allreduce": "all_reduce", "allgather": "all_gather", "reduce_scatter": "reduce_scatter",
         "alltoall_base": "all_to_all", "alltoall": "all_to_all", "broadcast": "broadcast", "send": "send",
         "recv": "recv", "barrier": "barrier", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
         "_allgather_base": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
         "_reduce_scatter_base": "reduce_scatter"}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_PATTERNS = Patterns.load()


def _ancestors(i, parent, names, limit=64) -> list:
    out, j = [], int(parent[i])
    while j >= 0 and len(out) < limit:
        out.append(names[j])
        j = int(parent[j])
    return out


def _dim(names) -> str:
    for n in names:
        d = _PATTERNS.first(_PATTERNS.stack_dim, n) or _PATTERNS.first(_PATTERNS.pg_desc, n)
        if d:
            return d
    return "unknown"


def _step(names) -> int:
    for n in names:
        m = _STEP.match(n)
        if m:
            return int(m.group(1))
    return -1


def call_runs(names) -> list:
    """``[(call row, run row or -1)]`` per ``c10d::`` call among ``names`` (the part's op names, by
    row): the k-th call of a kind with the k-th ``gloo:`` run of that kind (module docstring)."""
    calls, runs = {}, {}
    for i, n in enumerate(names):
        m = _CALL.match(n)
        if m and m.group(1) in _SAME:
            calls.setdefault(_SAME[m.group(1)], []).append(i)
        m = _RUN.match(n)
        if m:
            runs.setdefault(m.group(1), []).append(i)
    out = []
    for kind, rows in calls.items():
        mine = runs.get(kind, [])
        out += [(c, mine[k] if k < len(mine) else -1) for k, c in enumerate(rows)]
    return out


def has_runs(names) -> bool:
    """Whether any of ``names`` (e.g. a column's distinct values) is a ``gloo:<op>`` run."""
    return any(_RUN.match(n or "") for n in names)


def gloo_comm(job, part, columns) -> dict:
    """The part's gloo collectives as :meth:`~streamtrace.job.alignment.Job.read_kernels`-like
    columns (``columns`` plus ``in_bytes`` / ``out_bytes`` / ``seq`` / splits at their unknown
    values), rows by start, filtered by the job's steps; empty columns when it has none."""
    t = part.read("ops", ["name", "ts_ns", "dur_ns", "parent"])
    rows, dirs = [], {}
    if t is not None and t.num_rows:
        names = t["name"].to_pylist()
        ts, dur, parent = (t[c].to_numpy() for c in ("ts_ns", "dur_ns", "parent"))
        topo = job.topology
        for call, run in call_runs(names):
            if run < 0:                   # no gloo: run (an NCCL rank without kernels): not a gloo call
                continue
            up = _ancestors(call, parent, names)
            coll = _PATTERNS.first(_PATTERNS.collective, _CALL.match(names[call]).group(1)) or "Unknown"
            p2p = coll in ("Send", "Recv")
            dim = "PP" if p2p else _dim(up)
            group = topo.group_of(dim.lower(), part.rank) if topo is not None and dim != "unknown" else None
            if p2p:
                dirs[-2 - call] = _direction(up)
            rows.append({"ts_ns": int(ts[run]), "dur_ns": int(dur[run]), "collective": coll, "parallel_dim": dim,
                         "pg_ranks": ",".join(map(str, group)) if group else "",
                         "pg_name": "", "group_size": len(group) if group else -1,
                         "step": _step(up), "phase": _phase(up), "correlation": -2 - call})
    n = len(rows)
    out = {}
    for c in dict.fromkeys(list(columns) + ["in_bytes", "out_bytes", "seq", "in_splits", "out_splits",
                                            "bytes_source"]):
        if c in ("collective", "parallel_dim", "pg_ranks", "pg_name", "phase"):
            out[c] = np.asarray([r[c] for r in rows], object)
        elif c in ("in_splits", "out_splits", "bytes_source"):
            out[c] = np.full(n, "", object)
        elif c in ("ts_ns", "dur_ns", "group_size", "step", "correlation"):
            out[c] = np.asarray([r[c] for r in rows], np.int64)
        else:
            out[c] = np.full(n, -1, np.int64)
    out["end_ns"] = out["ts_ns"] + out["dur_ns"]
    out["iteration"] = np.full(n, job.iteration_of(part), np.int64)
    out["microbatch"] = np.full(n, -1, np.int64)
    out["from_cpu_ops"] = True
    out["p2p_dirs"] = dirs
    keep = job.keep_rows(out["step"])
    o = np.flatnonzero(keep)[np.argsort(out["ts_ns"][keep], kind="stable")]
    return {c: (v[o] if isinstance(v, np.ndarray) else v) for c, v in out.items()}


def _direction(names) -> dict:
    """``{"send": "forward"|"backward", "recv": ...}`` from Megatron's p2p functions among ``names``
    (``send_forward``, ``recv_backward``, ``send_forward_recv_backward`` ...)."""
    found: dict = {}
    for n in names:
        for verb, d in re.findall(r"(send|recv)_(forward|backward)", n or "", re.I):
            found.setdefault(verb.lower(), d.lower())
    return found


def _phase(names) -> str:
    for n in names:
        for k, rx in _PATTERNS.phase:
            if rx and rx.search(n):
                return k
    return ""
