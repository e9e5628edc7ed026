"""The collectives of a CPU-only (gloo) rank as communication rows, so they are matched across
ranks like NCCL kernels (``streamtrace.aggregate.collectives``): used for a rank whose kernels table
holds no communication row.

**Rows and facts.** One per row of analyze's ``cpu_collectives`` table (one per ``gloo:*`` run:
``streamtrace.analyze.cpu_collectives``, where a gloo collective's type, bytes, dtype and their
source are read, by ``collective_facts`` as for kernels;
times: the run's, int64 ns, rank-local).  Nothing here reads a collective's facts again.  Each run
is paired with the ``c10d::<op>`` call that issued it (``allreduce_``, ``allgather_``, ``send``,
``recv_``, ...: what ``torch.distributed`` records when called), the k-th call of a kind with the
k-th ``gloo:`` run of that kind (the work is queued in call order: on a worker thread for the
asynchronous collectives, inline for send / recv), found in the ops table by the run's start and
name; the call's stack gives what the run's thread does not know: the dimension, the step (else
analyze's), the phase.  ``stream`` -1.

**Groups** (gloo records none): the parallel dimension from the names around the call (Megatron's
functions: ``Patterns.stack_dim``, then ``Patterns.pg_desc`` on the names, e.g. ``tp_all_reduce`` ->
TP) and, with the job's topology, that dimension's group holding the rank (``pg_ranks``); a call
with no dimension stays in one unnamed group (the stream, -1, ``group_key``),
matched by order.
A send or receive is given the rank's PP group (its peer when the group has two ranks) and its
direction through the Megatron function around it (``send_forward`` ...: ``p2p_dirs``, by the row's
``correlation``, -2 - its op row: never an op's -1), as for NCCL p2p kernels.
"""
from __future__ import annotations

import re

import numpy as np

from ..analyze.outputs import CPU_COLLECTIVES, OPS
from ..analyze.patterns import Patterns

_CALL = re.compile(r"^c10d::([a-z_]+?)_?$")
_RUN = re.compile(r"^gloo:([a-z_]+)$")
_SAME = {"allreduce": "all_reduce", "allgather": "all_gather", "reduce_scatter": "reduce_scatter",
         "alltoall_base": "all_to_all", "alltoall": "all_to_all", "broadcast": "broadcast", "send": "send",
         "recv": "recv", "barrier": "barrier", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
         "_allgather_base": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
         "_reduce_scatter_base": "reduce_scatter"}
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


def _step(names, steps) -> int:
    """The number of the first step op among ``names`` (``steps``: the part's
    ``StepNames``), -1 none."""
    for n in names:
        num = steps.number(n)
        if num >= 0:
            return num
    return -1


def call_runs(names, ts=None) -> list:
    """``[(call row, run row or -1)]`` per ``c10d::`` call among ``names`` (the part's op names, by
    row): the k-th call of a kind with the k-th ``gloo:`` run of that kind (module docstring), in
    the order of their start times ``ts`` (int64 ns by row; None: row order).  The ops table holds
    each thread's rows together: runs on two gloo worker threads (DDP's buckets, handed to
    alternating threads) are in start order only once sorted."""
    calls, runs = {}, {}
    for i, n in enumerate(names):
        m = _CALL.match(n)
        if m and m.group(1) in _SAME:
            calls.setdefault(_SAME[m.group(1)], []).append(i)
        m = _RUN.match(n)
        if m:
            runs.setdefault(m.group(1), []).append(i)
    if ts is not None:
        key = lambda i: (int(ts[i]), i)  # noqa: E731
        calls = {k: sorted(v, key=key) for k, v in calls.items()}
        runs = {k: sorted(v, key=key) for k, v in runs.items()}
    out = []
    for kind, rows in calls.items():
        mine = runs.get(kind, [])
        out += [(c, mine[k] if k < len(mine) else -1) for k, c in enumerate(rows)]
    return out


def has_runs(names) -> bool:
    """Whether any of ``names`` (e.g. a column's distinct values) is a ``gloo:<op>`` run."""
    return any(_RUN.match(n or "") for n in names)


#: the facts taken as analyze wrote them (``cpu_collectives``), with the value of a missing one
FACTS = {"collective": "Unknown", "in_bytes": -1, "out_bytes": -1, "msg_bytes": -1, "seq": -1, "dtype": "",
         "in_splits": "", "out_splits": "", "bytes_source": "", "pg_name": "", "pg_ranks": "", "group_size": -1}
_STR = ("collective", "parallel_dim", "pg_ranks", "pg_name", "phase", "dtype", "in_splits", "out_splits",
        "bytes_source")


def _calls_by_run(t) -> tuple[dict, int]:
    """``{(gloo: run's ts_ns, its name): (call row, ancestor names)}`` from the part's ops table
    ``t``, and its number of rows."""
    if t is None or not t.num_rows:
        return {}, 0
    names = t["name"].to_pylist()
    ts, parent = t["ts_ns"].to_numpy(), t["parent"].to_numpy()
    return {(int(ts[run]), names[run]): (call, _ancestors(call, parent, names))
            for call, run in call_runs(names, ts) if run >= 0}, len(names)


def _row(f: dict, call, up, topo, rank, dirs, corr, steps) -> dict:
    """One analyze ``cpu_collectives`` row ``f`` with what the calling stack and topology add."""
    row = {c: f.get(c, d) if f.get(c) is not None else d for c, d in FACTS.items()}
    p2p = row["collective"] in ("Send", "Recv")
    dim = "PP" if p2p else _dim(up) if call is not None else f.get("parallel_dim") or "unknown"
    group = topo.group_of(dim.lower(), rank) if topo is not None and dim not in ("unknown", "") else None
    if group:
        row.update(pg_ranks=",".join(map(str, group)), group_size=len(group))
    if p2p and call is not None:
        dirs[corr] = _direction(up)
    row.update(ts_ns=int(f["ts_ns"]), dur_ns=int(f["dur_ns"]), parallel_dim=dim, correlation=corr,
               step=_step(up, steps) if call is not None and _step(up, steps) >= 0 else int(f["step"]),
               phase=_phase(up) if call is not None else "")
    return row


def gloo_comm(job, part, columns) -> dict:
    """The part's gloo collectives as ``read_kernels``-like
    columns (``columns`` plus the optional collective columns), rows by start, filtered by the job's
    steps; empty columns when it has none.  A collective's facts (type, bytes, dtype, their source,
    times: the ``gloo:`` run's) are analyze's ``cpu_collectives`` row as written
    (``streamtrace.analyze.cpu_collectives``, the one place that reads them); this adds the
    parallel dimension, step and phase from the ``c10d::`` call's stack, its group from the topology
    and a send / receive's direction (module docstring).  A folder analysed before analyze wrote
    ``cpu_collectives`` gives none."""
    facts = part.read(CPU_COLLECTIVES, None)
    rows, dirs = [], {}
    if facts is not None and facts.num_rows:
        by_run, n_ops = _calls_by_run(part.read(OPS, ["name", "ts_ns", "dur_ns", "parent"]))
        for i, f in enumerate(facts.to_pylist()):
            call, up = by_run.get((int(f["ts_ns"]), f["name"]), (None, []))
            corr = -2 - (call if call is not None else n_ops + i)       # never an op's -1, unique
            rows.append(_row(f, call, up, job.topology, part.rank, dirs, corr, part.steps))
    n = len(rows)
    out = {}
    for c in dict.fromkeys(list(columns) + list(FACTS) + ["ts_ns", "dur_ns", "parallel_dim", "step", "phase",
                                                          "correlation"]):
        if c in _STR:
            out[c] = np.asarray([r.get(c, "") for r in rows], object)
        elif rows and c in rows[0]:
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
