"""An aggregate folder (``streamtrace aggregate``'s output), as every later stage sees it: the
names of its tables (``TABLES``), the folder as a kind of output folder (``Aggregate``, its
entries ``owned``; ``Aggregate.read(DIR)``: ``aggregate.json`` read back and checked), one
table read back (``read_aggregate_table``); and the names of the report written into such a
folder (``REPORT_MARKER``, ``report_owns``: the report's kind,
``streamtrace.report.outputs.Report``, takes them from here).  Light on purpose: ``report``,
the charts and the epilogue's process import this module, not the aggregation (no numba kernels,
no pyarrow until a table is read).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..runtime.errors import DataError
from ..events.load import Outputs, register

# The tables ``aggregate`` writes, by name (each ``NAME.parquet``, some also ``NAME.csv``): every module
# that writes or reads one names it by these constants and finds its file with ``table_path``.
RANK_PHASE = "rank_phase"
RANKS = "ranks"
PIPELINE = "pipeline"
REPLICAS = "replicas"
ITERATIONS = "iterations"
TIMELINE = "timeline"
TOP_KERNELS = "top_kernels"
COLLECTIVES = "collectives"
COLLECTIVES_RANKS = "collectives_ranks"
COLLECTIVES_SUMMARY = "collectives_summary"
STRAGGLERS = "stragglers"
P2P = "p2p"
PROCESS_GROUPS = "process_groups"
COLLECTIVES_MISMATCH = "collectives_mismatch"
OP_PERF = "op_perf"
KERNEL_STATS = "kernel_stats"
OP_STATS = "op_stats"
LAUNCH_STATS = "launch_stats"
IDLE_BREAKDOWN = "idle_breakdown"
CRITICAL_PATH = "critical_path"
CRITICAL_PATH_SUMMARY = "critical_path_summary"
CRITICAL_PATH_RANKS = "critical_path_ranks"
WHATIF = "whatif"
WHATIF_ANCHORS = "whatif_anchors"
WHATIF_EDGES = "whatif_edges"
WHATIF_RANKS = "whatif_ranks"

EXPLAIN_TABLES = (KERNEL_STATS, OP_STATS, LAUNCH_STATS, IDLE_BREAKDOWN)
"""The explaining tables (``streamtrace.aggregate.explain``)."""
CRITICAL_PATH_TABLES = (CRITICAL_PATH, CRITICAL_PATH_SUMMARY, CRITICAL_PATH_RANKS)
"""The critical path's tables (``streamtrace.aggregate.critical_path``)."""
WHATIF_TABLES = (WHATIF, WHATIF_ANCHORS, WHATIF_EDGES, WHATIF_RANKS)
"""The what-if replay's tables (``streamtrace.aggregate.whatif``)."""

TABLES = (RANK_PHASE, RANKS, PIPELINE, REPLICAS, ITERATIONS, TIMELINE, TOP_KERNELS, COLLECTIVES, COLLECTIVES_RANKS,
          COLLECTIVES_SUMMARY, STRAGGLERS, P2P, PROCESS_GROUPS, COLLECTIVES_MISMATCH, OP_PERF, *EXPLAIN_TABLES,
          *CRITICAL_PATH_TABLES, *WHATIF_TABLES)
"""The tables ``aggregate`` writes (each ``NAME.parquet``, some also ``NAME.csv``)."""


# The columns of every table, beside their names: the writers write these tuples (in this order) and every
# reader selects its columns through ``columns``.
COLLECTIVES_COLUMNS = ("instance", "iteration", "step", "collective", "parallel_dim", "pg_name", "pg_ranks",
                       "group_size", "n_ranks", "complete", "consistent", "matched_by", "source", "ranks", "src", "dst",
                       "msg_bytes", "phase", "microbatch", "first_start_ns", "last_start_ns", "first_end_ns",
                       "last_end_ns", "start_skew_ns", "end_skew_ns", "straggler_rank", "straggler_lag_ns",
                       "waiter_rank", "waiter_wait_ns", "latency_ns", "max_dur_ns", "kernel_time_ns", "algbw_gbps",
                       "busbw_gbps")
COLLECTIVES_RANKS_COLUMNS = ("instance", "part", "rank", "iteration", "step", "collective", "start_ns", "end_ns",
                             "dur_ns", "arrival_ns", "wait_ns", "correlation", "stream", "send_bytes", "recv_bytes")
COLLECTIVES_MISMATCH_COLUMNS = ("group", "iteration", "step", "rank", "count", "most", "shift", "matched_by")
P2P_COLUMNS = ("src", "dst", "src_stage", "dst_stage", "direction", "pp_group", "count", "bytes", "time_ns",
               "recv_wait_ns", "send_wait_ns", "start_skew_mean_ns", "start_skew_max_ns", "busbw_gbps_median")
CRITICAL_PATH_COLUMNS = ("iteration", "step", "order", "rank", "lane", "start_ns", "end_ns", "dur_ns", "weight_ns",
                         "category", "name", "correlation", "external_id")
CRITICAL_PATH_SUMMARY_COLUMNS = ("iteration", "step", "what", "key", "rank", "ns", "min_ns", "pct", "on_path",
                                 "span_ns", "path_ns")
CRITICAL_PATH_RANKS_COLUMNS = ("iteration", "step", "rank", "thread", "on_path", "path_ns", "path_pct", "slack_ns",
                               "wait_ns", "collectives", "last_count", "lead_ns", "start_ns", "end_ns")
NEXT_MIN_GAIN = 0.005
"""What bounds a step next is said (the summary's ``next`` rows, the report's replayed sentence) only when the
change shortens its critical path by more than this share of it."""
WHATIF_COLUMNS = ("iteration", "step", "change", "description", "source", "ranks_touched", "measured_span_ns",
                  "replay_span_ns", "predicted_span_ns", "saving_ns", "saving_pct", "measured_step_ns",
                  "predicted_step_ns", "bound_rank", "bound_ns", "bound_what", "top_rank", "top_category", "top_name",
                  "top_ns", "fidelity_pct", "flag")
WHATIF_ANCHORS_COLUMNS = ("iteration", "step", "part", "rank", "anchor", "kind", "t_ns", "correlation", "stream")
WHATIF_EDGES_COLUMNS = ("iteration", "step", "part", "src", "dst", "w_ns", "host_ns", "gpu_ns", "top_category",
                        "top_name", "top_lane", "top_ns")
WHATIF_RANKS_COLUMNS = ("iteration", "step", "part", "rank", "start_ns", "end_ns", "host_gap_ns", "cpu_ns", "gpu_ns",
                        "nodes", "edges", "pairs", "dropped", "replay_end_ns")

RANK_METRICS = ("kernels", "wall_ns", "busy_ns", "idle_ns", "compute_ns", "comm_ns", "memory_ns", "overlap_ns",
                "exposed_comm_ns", "compute_only_ns", "kernel_time_ns")
"""The per-rank interval metrics (``streamtrace.aggregate.rank_metrics.interval_metrics``), columns of ``ranks`` and
``rank_phase``."""
RANK_PHASE_COLUMNS = ("iteration", "step", "rank", "device", "source", "phase", "microbatch", "replica", "pp_group",
                      "stage", "start_ns", "end_ns", "compute_start_ns", "compute_end_ns", *RANK_METRICS,
                      "overlap_pct")
RANKS_COLUMNS = ("iteration", "step", "rank", "device", "source", "replica", "pp_group", "stage", "start_ns", "end_ns",
                 *RANK_METRICS, "overlap_pct", "step_ns")
PIPELINE_COLUMNS = ("iteration", "step", "pp_group", "stage", "rank", "stages", "microbatches", "span_start_ns",
                    "span_end_ns", "span_ns", "first_ns", "last_ns", "busy_ns", "microbatch_ns", "p2p_wait_ns",
                    "bubble_ns", "bubble_pct", "outside_microbatch_ns", "outside_microbatch_pct", "ideal_bubble_pct")
REPLICAS_COLUMNS = ("iteration", "step", "replica", "ranks", "n_ranks", "pp_groups", "start_ns", "end_ns", "span_ns",
                    "compute_ns_mean", "comm_ns_mean", "exposed_comm_ns_mean", "idle_ns_mean", "bubble_pct_mean")
ITERATIONS_COLUMNS = ("iteration", "step", "ranks", "start_ns", "end_ns", "span_ns", "step_ns_median", "step_ns_max",
                      "compute_ns_mean", "comm_ns_mean", "exposed_comm_ns_mean")
TIMELINE_COLUMNS = ("part", "rank", "iteration", "step", "device", "category", "start_ns", "end_ns")
TOP_KERNELS_COLUMNS = ("name", "kind", "count", "total_ns")
COLLECTIVES_SUMMARY_COLUMNS = ("collective", "parallel_dim", "count", "complete", "bytes", "traffic_pct", "time_ns",
                               "kernel_time_ns", "busbw_gbps_min", "busbw_gbps_p10", "busbw_gbps_median",
                               "busbw_gbps_mean", "busbw_gbps_p90", "busbw_gbps_max", "algbw_gbps_median",
                               "start_skew_mean_ns", "start_skew_max_ns")
STRAGGLERS_COLUMNS = ("collective", "parallel_dim", "rank", "instances", "straggler_count", "straggler_lag_ns",
                      "waiter_count", "wait_ns")
PROCESS_GROUPS_COLUMNS = ("group", "ranks_from", "pg_name", "group_size", "parallel_dim", "instances", "kinds",
                          "bytes", "time_ns", "kernel_time_ns")
OP_PERF_COLUMNS = ("name", "dtype", "input_dims", "bound", "count", "ranks", "flops", "bytes", "kernel_time_ns",
                   "gpu_busy_ns", "bound_ns", "lost_ns", "achieved_tflops", "achieved_gbps", "intensity",
                   "pct_of_bound")
KERNEL_STATS_COLUMNS = ("iteration", "step", "rank", "name", "kind", "collective", "count", "total_ns", "mean_ns",
                        "p50_ns", "p95_ns", "max_ns", "min_ns", "std_ns", "share_pct")
OP_STATS_COLUMNS = ("iteration", "step", "rank", "name", "cat", "count", "nested_count", "inclusive_ns",
                    "inclusive_mean_ns", "inclusive_max_ns", "self_ns", "self_mean_ns", "self_clamped", "kernels",
                    "kernel_time_ns", "gpu_busy_ns")
LAUNCH_STATS_COLUMNS = ("iteration", "step", "rank", "kind", "kernels", "linked", "unlinked", "graph_kernels",
                        "launch_delay_p50_ns", "launch_delay_p95_ns", "launch_delay_max_ns", "launch_delay_mean_ns",
                        "early_start_count", "launch_delay_outliers", "launch_overhead_p50_ns",
                        "launch_overhead_p95_ns", "launch_overhead_max_ns", "launch_overhead_mean_ns",
                        "launch_overhead_total_ns", "launch_overhead_outliers", "launch_bound_count",
                        "launch_bound_pct")
IDLE_BREAKDOWN_COLUMNS = ("iteration", "step", "rank", "device", "stream", "kernels", "span_ns", "busy_ns", "idle_ns",
                          "host_wait_ns", "kernel_wait_ns", "other_ns", "host_wait_gaps", "kernel_wait_gaps",
                          "other_gaps", "no_launch_gaps", "no_launch_ns", "cross_step_ns", "overlapped_kernels",
                          "max_gap_ns", "host_wait_pct", "kernel_wait_pct", "other_pct")

COLUMNS = {RANK_PHASE: RANK_PHASE_COLUMNS, RANKS: RANKS_COLUMNS, PIPELINE: PIPELINE_COLUMNS,
           REPLICAS: REPLICAS_COLUMNS, ITERATIONS: ITERATIONS_COLUMNS, TIMELINE: TIMELINE_COLUMNS,
           TOP_KERNELS: TOP_KERNELS_COLUMNS, COLLECTIVES_SUMMARY: COLLECTIVES_SUMMARY_COLUMNS,
           STRAGGLERS: STRAGGLERS_COLUMNS, PROCESS_GROUPS: PROCESS_GROUPS_COLUMNS, OP_PERF: OP_PERF_COLUMNS,
           KERNEL_STATS: KERNEL_STATS_COLUMNS, OP_STATS: OP_STATS_COLUMNS, LAUNCH_STATS: LAUNCH_STATS_COLUMNS,
           IDLE_BREAKDOWN: IDLE_BREAKDOWN_COLUMNS,
           COLLECTIVES: COLLECTIVES_COLUMNS, COLLECTIVES_RANKS: COLLECTIVES_RANKS_COLUMNS,
           COLLECTIVES_MISMATCH: COLLECTIVES_MISMATCH_COLUMNS, P2P: P2P_COLUMNS, CRITICAL_PATH: CRITICAL_PATH_COLUMNS,
           CRITICAL_PATH_SUMMARY: CRITICAL_PATH_SUMMARY_COLUMNS, CRITICAL_PATH_RANKS: CRITICAL_PATH_RANKS_COLUMNS,
           WHATIF: WHATIF_COLUMNS, WHATIF_ANCHORS: WHATIF_ANCHORS_COLUMNS, WHATIF_EDGES: WHATIF_EDGES_COLUMNS,
           WHATIF_RANKS: WHATIF_RANKS_COLUMNS}
"""``{table name: its columns in the order written}``, every table of ``TABLES``."""

TEXT_COLUMNS = {
    COLLECTIVES: {"collective", "parallel_dim", "pg_name", "pg_ranks", "matched_by", "source", "ranks", "phase"},
    COLLECTIVES_RANKS: {"collective"}, COLLECTIVES_SUMMARY: {"collective", "parallel_dim"},
    COLLECTIVES_MISMATCH: {"group", "matched_by"}, CRITICAL_PATH: {"lane", "category", "name"},
    CRITICAL_PATH_SUMMARY: {"what", "key"}, KERNEL_STATS: {"name", "kind", "collective"}, LAUNCH_STATS: {"kind"},
    OP_STATS: {"name", "cat"}, OP_PERF: {"name", "dtype", "input_dims", "bound"}, P2P: {"direction"},
    PROCESS_GROUPS: {"group", "ranks_from", "pg_name", "parallel_dim", "kinds"}, RANK_PHASE: {"source", "phase"},
    RANKS: {"source"}, REPLICAS: {"ranks", "pp_groups"}, STRAGGLERS: {"collective", "parallel_dim"},
    TIMELINE: {"category"}, TOP_KERNELS: {"name", "kind"},
    WHATIF: {"change", "description", "source", "bound_what", "top_category", "top_name", "flag"},
    WHATIF_EDGES: {"top_category", "top_name", "top_lane"}}
"""``{table name: its text columns}``: every other column of ``COLUMNS`` holds numbers (int, float or bool: the
type follows the values); ``Aggregate.check`` holds each table's footer to it."""


def columns(name: str, *wanted: str) -> list:
    """The columns ``wanted`` of table ``name`` (one of ``TABLES``), as a list in the order given, or
    all of its columns when none are given: what a reader passes to ``read_aggregate_table`` or
    ``pyarrow.parquet.read_table``.  ``KeyError`` for a name that is not a table or a column the
    table does not have (a reader out of step with the writer)."""
    own = COLUMNS[name]
    for c in wanted:
        if c not in own:
            raise KeyError(f"{name} has no column {c!r} (its columns: streamtrace.aggregate.folder.COLUMNS)")
    return list(wanted or own)


def table_file(name: str) -> str:
    """The file name of table ``name`` (one of ``TABLES``): ``NAME.parquet``."""
    return f"{name}.parquet"


def table_path(aggdir, name: str) -> Path:
    """The path of table ``name`` (one of ``TABLES``) in the aggregate folder ``aggdir``
    (read it with ``arrow_file``: the folder's name may not be UTF-8)."""
    return Path(aggdir) / table_file(name)


REPORT_MARKER = "report.json"
"""The report's marker (``streamtrace.report.outputs.Report``), in its own folder, an aggregate's
or the epilogue's."""
CHARTS = "charts"
"""The report's folder of charts, beside its marker."""


def report_owns(name: str) -> bool:
    """The top-level entries a report writes: ``REPORT_MARKER``, ``CHARTS``, ``<name>.md``."""
    return name in (REPORT_MARKER, CHARTS) or name.endswith(".md")


_META_TYPES = {"inputs": list, "time_alignment": str, "clock_sync": str, "iterations": list, "ranks": list,
               "collectives": dict, "files": list}


def _int(v) -> bool:
    return type(v) is int


def _number(v) -> bool:
    return type(v) in (int, float)


def _text(v) -> bool:
    return isinstance(v, str)


def _list(each):
    return lambda v: isinstance(v, list) and all(each(x) for x in v)


def _null_or(ok):
    return lambda v: v is None or ok(v)


def _object(need=(), values=None, **fields):
    """An object with the keys ``need``, whose ``fields`` (those it has) are each of its kind, and (``values``)
    whose every value is."""
    return lambda v: isinstance(v, dict) and all(k in v for k in need) and \
        all(k not in v or ok(v[k]) for k, ok in fields.items()) and (values is None or all(map(values, v.values())))


_GROUPS = _list(_list(_int))
_META_SHAPES = {       # the fields the report and the what-if read, where there (older folders lack a few)
    "inputs": (_list(_text), "a list of paths"), "iterations": (_list(_int), "a list of ints"),
    "ranks": (_list(_int), "a list of ints"), "files": (_list(_text), "a list of file names"),
    "steps": (_list(lambda s: isinstance(s, list) and len(s) == 2 and all(map(_int, s))),
              "a list of [iteration, step] int pairs"),
    "world_size": (_null_or(_int), "an int or null"), "world_size_from": (_null_or(_text), "a string or null"),
    "sources": (_list(_text), "a list of strings"), "job_name": (_text, "a string"),
    "devices": (_list(_text), "a list of strings"), "warnings": (_list(_text), "a list of strings"),
    "topology": (_null_or(_object(("pp", "replicas"), pp=_GROUPS, replicas=_GROUPS, sizes=_object(values=_int),
                                  source=_null_or(_text), order=_null_or(_text))),     # (order: null when unknown)
                 'null or a topology object ("pp", "replicas": lists of rank lists)'),
    "train_config": (_null_or(_object()), "an object or null"),
    "clock_offsets_ns": (_object(values=_number), "an object of numbers"),
    "clock_components": (_object(), "an object"), "critical_path": (_object(), "an object"),
    "collective_summary": (_list(_object()), "a list of objects"),
    "inferred_layout": (_null_or(_object()), "an object or null"),
    "consecutive_kernel_delay_ns": (_int, "an int"),
    "parts": (_list(_object(("index", "rank", "dir"), index=_int, rank=_int, dir=_text, iteration=_null_or(_int),
                            source=_text, shift_ns=_int, clock_offset_ns=_int, device_name=_text)),
              'a list of part objects ("index", "rank": ints, "dir": a path)')}
"""``aggregate.json``'s fields beyond ``_META_TYPES``: ``{key: (test of its value, what it must be)}``."""


@register
class Aggregate(Outputs):
    """``streamtrace aggregate -o DIR`` as a kind of output folder
    (``OutputKind``): every ``*.parquet`` table by its name; ``summary`` is
    ``aggregate.json``; ``report``: the ``report.json`` written there (None when there is none).
    ``Aggregate.read(DIR)`` (what ``report`` reads it with) checks ``aggregate.json`` (``check``)."""
    kind, marker, precedence = "aggregate", "aggregate.json", 2
    missing = "{path}: no {marker} (run streamtrace aggregate first)"

    @classmethod
    def owns(cls, name: str) -> bool:
        """The top-level entries of an aggregate folder: its tables, ``aggregate.json``, and the
        report ``streamtrace report`` writes beside them (``report_owns``)."""
        stem, _, ext = name.rpartition(".")
        return name == cls.marker or report_owns(name) or (stem in TABLES and ext in ("parquet", "csv"))

    def check(self):
        """``aggregate.json`` (``read``): an object with the keys (and types) the report reads, and
        every table it lists present; else a ``DataError`` naming the file
        that is damaged or missing."""
        p, meta = self.path / self.marker, self.summary
        if not isinstance(meta, dict):
            raise DataError(p, f"not streamtrace aggregate's {self.marker} (expected an object)")
        for k, t in _META_TYPES.items():
            if not isinstance(meta.get(k), t):
                raise DataError(p, f"not streamtrace aggregate's {self.marker} ({k!r} missing or not a {t.__name__})")
        for k, (ok, what) in _META_SHAPES.items():
            if k in meta and not ok(meta[k]):
                raise DataError(p, f"not streamtrace aggregate's {self.marker} ({k!r} is not {what})")
        for name in meta["files"]:
            if name != self.marker and not (self.path / name).is_file():
                raise DataError(self.path / name, f"missing ({self.marker} lists it); run streamtrace aggregate again")
        self._check_tables()

    def _check_tables(self):
        """Each table's columns of their kind (``TEXT_COLUMNS``; from its footer), else a ``DataError`` naming
        the table's file: a text where a number goes made the report's sums and charts raise numpy's errors.
        A table of no rows may have any types (aggregate writes such a one's columns as floats)."""
        from ..events.dataset import parquet_file
        from ..events.tablecheck import check_kinds
        for name in TABLES:
            p = table_path(self.path, name)
            f = parquet_file(p) if p.is_file() else None
            if f is not None and f.metadata.num_rows:
                check_kinds(p, f.schema_arrow, TEXT_COLUMNS.get(name, set()))

    def tables(self):
        return sorted(p.stem for p in self.path.glob("*.parquet"))

    def _read(self, name):
        from ..events.dataset import read_arrow
        return read_arrow(table_path(self.path, name))

    def whatif(self, changes, jobs: int = 0):
        """The steps replayed with ``changes`` (``streamtrace.aggregate.whatif.replay_steps``: change
        records or their ``KIND:key=value,...`` text, applied together); a pyarrow Table, one row per step."""
        from .. import aggregate as stage      # (the stage's package: the replay is imported when asked)
        return stage.replay_steps(self.path, changes, jobs)

    @property
    def report(self):
        p = self.path / REPORT_MARKER
        return json.loads(p.read_text()) if p.is_file() else None


owned = Aggregate.owns
"""The top-level entries of an aggregate folder (``Aggregate.owns``)."""


def read_aggregate_table(aggdir, name, columns=None, where=None) -> dict:
    """Table ``name`` of an aggregate folder as ``read_table``
    columns (a missing column is a ``DataError`` naming the file);
    ``{}`` for a table the aggregate did not write (pipeline, replicas, stragglers without a
    topology or straggler).  ``columns`` / ``where`` (``{column: values}``): only those columns /
    rows, e.g. ``collectives_ranks`` with ``["instance", "rank", "arrival_ns"]`` (24 bytes a
    member instead of ~110) or ``timeline`` with ``where={"rank": ranks}`` (the charted ranks'
    rows only): what keeps a reader of a 1,024-rank job's tables bounded."""
    from ..events.dataset import read_table       # (pyarrow: only when a table is read)
    p = table_path(aggdir, name)
    return read_table(p, columns, where) if p.is_file() else {}
