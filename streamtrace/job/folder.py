"""An aggregate folder (``streamtrace aggregate``'s output), as every later stage sees it: the
names of its tables (:data:`TABLES`), the folder as a kind of output folder (:class:`Aggregate`, its
entries :func:`owned`), ``aggregate.json`` read back and checked
(:func:`read_meta`), one table read back (:func:`read_aggregate_table`).  Light on purpose:
``report`` and the charts import this module, not the aggregation (no numba kernels to load).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..runtime.errors import DataError, StreamtraceError
from ..events.dataset import read_json, read_table
from ..events.load import Outputs, register

EXPLAIN_TABLES = ("kernel_stats", "op_stats", "launch_stats", "idle_breakdown")
"""The explaining tables (:mod:`streamtrace.job.explain`)."""

TABLES = ("rank_phase", "ranks", "pipeline", "replicas", "iterations", "timeline", "top_kernels", "collectives",
          "collectives_ranks", "collectives_summary", "stragglers", "p2p", "process_groups", "collectives_mismatch",
          "op_perf", *EXPLAIN_TABLES, "critical_path", "critical_path_summary")
"""The tables ``aggregate`` writes (each ``NAME.parquet``, some also ``NAME.csv``)."""


@register
class Aggregate(Outputs):
    """``streamtrace aggregate -o DIR`` as a kind of output folder
    (:class:`~streamtrace.events.load.OutputKind`): every ``*.parquet`` table by its name; ``summary`` is
    ``aggregate.json``; ``report``: the ``report.json`` written there (None when there is none)."""
    kind, marker, precedence = "aggregate", "aggregate.json", 2

    @classmethod
    def owns(cls, name: str) -> bool:
        """The top-level entries of an aggregate folder: its tables, ``aggregate.json``, and the
        report ``streamtrace report`` writes beside them (``report.json``, ``charts/``, ``*.md``)."""
        stem, _, ext = name.rpartition(".")
        return name in (cls.marker, "report.json", "charts") or name.endswith(".md") \
            or (stem in TABLES and ext in ("parquet", "csv"))

    def tables(self):
        return sorted(p.stem for p in self.path.glob("*.parquet"))

    def _read(self, name):
        import pyarrow.parquet as pq
        return pq.read_table(self.path / f"{name}.parquet")

    @property
    def report(self):
        p = self.path / "report.json"
        return json.loads(p.read_text()) if p.is_file() else None


owned = Aggregate.owns
"""The top-level entries of an aggregate folder (:meth:`Aggregate.owns`)."""



_META_TYPES = {"inputs": list, "time_alignment": str, "clock_sync": str, "iterations": list, "ranks": list,
               "collectives": dict, "files": list}


def read_meta(aggdir) -> dict:
    """``aggdir/aggregate.json``, checked: an object with the keys (and types) the report reads,
    and every table it lists present.  Raises :class:`StreamtraceError` when it is missing
    (not an aggregate folder), :class:`~streamtrace.runtime.errors.DataError` naming the file that is
    damaged or missing."""
    p = Path(aggdir) / "aggregate.json"
    if not p.is_file():
        raise StreamtraceError(f"{aggdir}: no aggregate.json (run streamtrace aggregate first)")
    meta = read_json(p)
    if not isinstance(meta, dict):
        raise DataError(p, "not streamtrace aggregate's aggregate.json (expected an object)")
    for k, t in _META_TYPES.items():
        if not isinstance(meta.get(k), t):
            raise DataError(p, f"not streamtrace aggregate's aggregate.json ({k!r} missing or not a {t.__name__})")
    for name in meta["files"]:
        if isinstance(name, str) and name != "aggregate.json" and not (Path(aggdir) / name).is_file():
            raise DataError(Path(aggdir) / name, "missing (aggregate.json lists it); run streamtrace aggregate again")
    return meta


def read_aggregate_table(aggdir, name, columns=None, where=None) -> dict:
    """Table ``name`` of an aggregate folder as :func:`~streamtrace.events.dataset.read_table`
    columns (a missing column is a :class:`~streamtrace.runtime.errors.DataError` naming the file);
    ``{}`` for a table the aggregate did not write (pipeline, replicas, stragglers without a
    topology or straggler).  ``columns`` / ``where`` (``{column: values}``): only those columns /
    rows, e.g. ``collectives_ranks`` with ``["instance", "rank", "arrival_ns"]`` (24 bytes a
    member instead of ~110) or ``timeline`` with ``where={"rank": ranks}`` (the charted ranks'
    rows only): what keeps a reader of a 1,024-rank job's tables bounded."""
    p = Path(aggdir) / f"{name}.parquet"
    return read_table(p, columns, where) if p.is_file() else {}
