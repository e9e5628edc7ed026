"""Stage ``validate``: check a trace for what Perfetto's JSON importer relies on.

``validate`` (``streamtrace.validate(...)``) checks one trace file in one
streaming pass (``check``: the checks, their records, the external sort
of those records, several processes over byte ranges; ``ordered``: the
checks of the sorted records, and the output filter of merge's time filter);
``merged`` is merge's check, done while rewriting, from the same records.
Imports only the stages below it:
``streamtrace.kernels``, ``streamtrace.runtime``, ``streamtrace.trace`` and
``streamtrace.events`` (the record codec and the external sort).
"""
from ..runtime.stage import stage_package
from .check import PROBLEMS, ValidateOptions, validate

__all__ = ["validate", "ValidateOptions", "PROBLEMS"]


stage_package(__name__)      # called, the package is its function
