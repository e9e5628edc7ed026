"""Stage 4, ``streamtrace aggregate``: the whole job at once, from the analysed folders of all ranks
and iterations: the time alignment of the ranks (``alignment``),
collectives matched across ranks (``collectives``), the critical path
(``critical_path``) and the job's tables (``run``,
``aggregate``), read back by later stages through ``folder``.

The names are imported on first use (``streamtrace.runtime.stage``), so that ``report``, which
imports this package for the folder readers, does not load the aggregation and its numba kernels
(~0.3 s); called, the package is its function (``streamtrace.aggregate(...)``).
"""
from ..runtime.stage import stage_package

stage_package(__name__, lazy={"aggregate": "run", "AggregateOptions": "options", "replay_steps": "whatif"})
