"""Plain-Python twins of the numba kernels, for property tests: one module per kernel
module.  Each twin has the same signature, return types and errors as its numba
counterpart but uses a deliberately different algorithm, so that the two can be
checked against each other on random inputs (tests/kernels/).  Speed is not a goal.

Twins that are also production code stay beside their callers and are listed here:
``streamtrace.events.columns.columns_from_dicts`` (of
``streamtrace.kernels.extract.scan_columns``), ``streamtrace.merge.rank.rewrite_dict``
(of ``streamtrace.kernels.rewrite.scan_rewrite``; merge uses it for the events the kernel
hands back), ``streamtrace.validate.check.fields_from_dict`` (of
``streamtrace.kernels.validate.event_fields``; validate uses it for the events the kernel
leaves to Python), ``streamtrace.merge.nsys.event_dicts`` serialised by orjson (of
``streamtrace.kernels.nsys_text.nsys_event_text``; merge uses it for a batch with a name orjson
cannot encode), and ``json.loads`` (of ``streamtrace.kernels.jsoncheck``).
"""
from .ancestry import *  # noqa: F401,F403
from .ancestry import __all__ as _ancestry
from .chains import *  # noqa: F401,F403
from .chains import __all__ as _chains
from .critical import *  # noqa: F401,F403
from .critical import __all__ as _critical
from .gaps import *  # noqa: F401,F403
from .gaps import __all__ as _gaps
from .intervals import *  # noqa: F401,F403
from .intervals import __all__ as _intervals
from .keep import *  # noqa: F401,F403
from .keep import __all__ as _keep
from .nesting import *  # noqa: F401,F403
from .nesting import __all__ as _nesting
from .replay import *  # noqa: F401,F403
from .replay import __all__ as _replay
from .runs import *  # noqa: F401,F403
from .runs import __all__ as _runs
from .sqlite_pages import *  # noqa: F401,F403
from .sqlite_pages import __all__ as _sqlite_pages
from .stepgpu import *  # noqa: F401,F403
from .stepgpu import __all__ as _stepgpu
from .survey import *  # noqa: F401,F403
from .survey import __all__ as _survey
from .texthash import *  # noqa: F401,F403
from .texthash import __all__ as _texthash
from .tree import *  # noqa: F401,F403
from .tree import __all__ as _tree
from .validate import *  # noqa: F401,F403
from .validate import __all__ as _validate
from .windows import *  # noqa: F401,F403
from .windows import __all__ as _windows

__all__ = [*_intervals, *_tree, *_nesting, *_ancestry, *_validate, *_windows, *_runs, *_gaps, *_critical,
           *_sqlite_pages, *_survey, *_keep, *_replay, *_texthash, *_chains,
           *_stepgpu]
