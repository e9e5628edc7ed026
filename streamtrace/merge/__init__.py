"""Stage 3a, ``streamtrace merge``: many rank traces -> one Perfetto-loadable trace, in flat memory.

:func:`merge` (``streamtrace.merge(...)``) finds the rank files and merges each
iteration; :func:`merge_files` merges given :class:`~streamtrace.trace.discover.TraceFile` s.
Inside: the survey of each rank (:mod:`~streamtrace.merge.survey`), the per-event rewrite of one
rank (:mod:`~streamtrace.merge.rank`, its pid and id rules in :mod:`~streamtrace.merge.pids`), one
big rank rewritten in byte ranges (:mod:`~streamtrace.merge.ranges`), the orchestration
(:mod:`~streamtrace.merge.run`) and the stitched output (:mod:`~streamtrace.merge.output`).
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
