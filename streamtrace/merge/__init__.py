"""Stage 3a, ``streamtrace merge``: many rank traces -> one Perfetto-loadable trace, in flat memory.

:func:`merge` (``streamtrace.merge(...)``) finds the rank files and merges each
iteration; :func:`merge_files` merges given :class:`~streamtrace.trace.discover.TraceFile` s.
Inside, one module per step of the line (:mod:`~streamtrace.merge.line`): discover
(:mod:`~streamtrace.merge.run`), survey/plan (:mod:`~streamtrace.merge.plan`, each rank's survey in
:mod:`~streamtrace.merge.survey`), rewrite (:mod:`~streamtrace.merge.rewrite`: one rank in
:mod:`~streamtrace.merge.rank`, its pid and id rules in :mod:`~streamtrace.merge.pids`, one big rank in byte
ranges in :mod:`~streamtrace.merge.ranges`, the workers' typed results in :mod:`~streamtrace.merge.outcome`),
stitch (:mod:`~streamtrace.merge.output`) and validate (:mod:`streamtrace.validate.merged`).
"""
from ..runtime.stage import stage_package
from .options import MergeOptions
from .pids import ID_BITS, PID_STRIDE, PROCESS_META, unique_id
from .rank import rewrite_dict
from .result import MergeResult
from .run import merge, merge_files

__all__ = ["merge", "merge_files", "MergeOptions", "MergeResult", "rewrite_dict", "unique_id", "ID_BITS", "PID_STRIDE",
           "PROCESS_META"]


stage_package(__name__)      # called, the package is its function
