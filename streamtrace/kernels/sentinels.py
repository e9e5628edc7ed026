"""The critical-path kernels' (``streamtrace.kernels.critical``) "no value" times, in a module that
does not load numba: a reader of their results (the report, reading ``critical_path`` tables)
compares with them without paying for the compiler's import (~0.15 s)."""
from __future__ import annotations

NEG = -(2 ** 62)    # "no value": a node not reached by any source (earliest) / not constrained (latest)
POS = 2 ** 62
