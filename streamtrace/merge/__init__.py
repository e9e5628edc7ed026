"""Stage 3a, ``streamtrace merge``: many rank traces -> one Perfetto-loadable trace, in flat memory.

``merge`` (``streamtrace.merge(...)``) finds the rank files and merges each
iteration; ``merge_files`` merges given ``TraceFile`` s.
Inside, one module per step of the line (``line``): discover
(``run``), survey/plan (``plan``, each rank's survey in
``survey``), rewrite (``rewrite``: one rank in
``rank``, its pid and id rules in ``pids``, one big rank in byte
ranges in ``ranges``, the workers' typed results in ``outcome``),
stitch (``output``) and validate (``streamtrace.validate.merged``).
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
