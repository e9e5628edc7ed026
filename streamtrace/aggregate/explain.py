"""``aggregate``'s explaining tables, one rank at a time from its Parquet rows (no trace is read):
``kernel_stats``, ``op_stats``, ``launch_stats`` (``streamtrace.aggregate.stats``) and
``idle_breakdown`` (``streamtrace.aggregate.idle``), each ``.parquet`` + ``.csv``, every row keyed by
(``iteration``, ``step``, ``rank``).  ``part_tables`` runs in aggregate's per-rank worker,
``write_tables`` in the parent.  Rows are kept under aggregate's ``--steps`` like every other
table (a gap before a step's first kernel is still measured from the kernel before it).
"""
from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa

from ..analyze.outputs import KERNELS, OPS, schema_of
from ..events.dataset import write_table
from . import idle
from . import stats
from .folder import (COLUMNS, EXPLAIN_TABLES as TABLES, IDLE_BREAKDOWN, KERNEL_STATS, LAUNCH_STATS,
                     OP_STATS)

KERNEL_COLUMNS = ["device", "stream", "ts_ns", "dur_ns", "end_ns", "name", "kind", "collective", "correlation",
                  "launch_op", "step"]


def part_tables(job, part, threshold_ns=idle.DEFAULT_THRESHOLD_NS, tables=None) -> dict:
    """``{table: {column: numpy array}}`` of one part (a rank of one analysed iteration) of
    ``job`` (``Job``); ``threshold_ns``: the kernel-wait threshold
    of the idle breakdown (int ns); ``tables``: the part's ``{"kernels", "ops"}`` pyarrow tables
    already read with at least these columns (None: read here)."""
    it, rank = job.iteration_of(part), part.rank
    k, ops = (part.read(KERNELS, KERNEL_COLUMNS), part.read(OPS, stats.OPS_COLUMNS)) if tables is None else \
        (_cols(tables[KERNELS], KERNEL_COLUMNS), _cols(tables[OPS], stats.OPS_COLUMNS))
    if ops is None:
        ops = schema_of(OPS).empty_table().select(stats.OPS_COLUMNS)
    out = {}
    if k is not None and k.num_rows:
        keep = job.keep_rows(k["step"].to_numpy())
        linked, lts, ldur = stats.launch_rows(k["correlation"].to_numpy(), ops)
        b = idle.breakdown(k["device"].to_numpy(), k["stream"].to_numpy(), k["ts_ns"].to_numpy(),
                            k["end_ns"].to_numpy(), k["step"].to_numpy(), linked, lts, threshold_ns)
        sel = job.keep_rows(b["step"])
        out[IDLE_BREAKDOWN] = _keyed(it, rank, {c: v[sel] for c, v in b.items()})
        kk = k.filter(pa.array(keep))
        out[KERNEL_STATS] = _keyed(it, rank, stats.kernel_stats(kk))
        out[LAUNCH_STATS] = _keyed(it, rank, _rows(stats.launch_stats(kk, linked[keep], lts[keep], ldur[keep])))
    if ops.num_rows:
        out[OP_STATS] = _keyed(it, rank, stats.op_stats(ops, keep=job.keep_rows, steps=part.steps))
    return out


def _cols(t, columns):
    return None if t is None else t.select(columns)


def _rows(rows) -> dict:
    if not rows:
        return {}
    return {c: np.asarray([r[c] for r in rows], object if any(r[c] is None or isinstance(r[c], str) for r in rows)
                          else None) for c in rows[0]}


def _keyed(iteration, rank, cols: dict) -> dict:
    """``cols`` with ``iteration`` and ``rank`` columns first (``step`` after them)."""
    n = len(next(iter(cols.values()))) if cols else 0
    head = {"iteration": np.full(n, iteration, np.int64), "step": np.asarray(cols.get("step", []), np.int64),
            "rank": np.full(n, rank, np.int64)}
    return head | {c: v for c, v in cols.items() if c != "step"}


def packed(tables: dict) -> dict:
    """``part_tables``' result with each table pickled (``{table: bytes}``), as aggregate's parent
    holds every rank's until ``write_tables``: its columns of names are Python strings, 3-4x their
    pickled size (1,024 synthetic ranks: 73 MB of tables, 21 MB pickled)."""
    return {name: pickle.dumps(cols, protocol=pickle.HIGHEST_PROTOCOL) for name, cols in tables.items()}


def write_tables(outdir, parts: list) -> list:
    """Write the tables of ``TABLES`` from the per-part results ``parts`` (list of
    ``part_tables`` dicts, or ``packed`` ones, in part order) into ``outdir`` (Parquet + CSV), one
    table at a time; returns the paths."""
    files = []
    for name in TABLES:
        got = [pickle.loads(t) if isinstance(t, bytes) else t for t in (p[name] for p in parts if name in p)]
        got = [t for t in got if len(t["rank"])]
        if not got:
            continue
        cols = {c: np.concatenate([g[c] for g in got]) for c in got[0]}
        o = np.lexsort((np.arange(len(cols["rank"])), cols["rank"], cols["step"], cols["iteration"]))
        files += write_table(outdir, name, {c: _nulls(cols[c][o]) for c in COLUMNS[name]}, csv=True)
    return files


def _nulls(v):
    """A float column with NaN (no value: a mean of nothing, a share of 0) as an object array
    with None, so the tables hold nulls."""
    if v.dtype.kind == "f" and np.isnan(v).any():
        return np.where(np.isnan(v), None, v.astype(object))
    return v
