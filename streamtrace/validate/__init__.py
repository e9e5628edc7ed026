"""Stage ``validate``: check a trace for what Perfetto's JSON importer relies on.

:func:`validate` (``streamtrace.validate(...)``) checks one trace file in one
streaming pass (:mod:`~streamtrace.validate.check`: the checks, their records, the external sort
of those records, several processes over byte ranges; :mod:`~streamtrace.validate.ordered`: the
checks of the sorted records, and the output filter of merge's time filter);
:mod:`~streamtrace.validate.merged` is merge's check, done while rewriting, from the same records.
Imports only the stages below it:
:mod:`streamtrace.kernels`, :mod:`streamtrace.runtime`, :mod:`streamtrace.trace` and
:mod:`streamtrace.events` (the record codec and the external sort).
"""
from ..runtime.stage import stage_package
from .check import PROBLEMS, ValidateOptions, validate

__all__ = ["validate", "ValidateOptions", "PROBLEMS"]


stage_package(__name__)      # called, the package is its function
