"""Stage 4, the whole job at once, from the analysed folders of all ranks and iterations: the time
alignment of the ranks (:mod:`~streamtrace.job.alignment`), collectives matched across ranks
(:mod:`~streamtrace.job.collectives`) and the job's tables (:mod:`~streamtrace.job.aggregate`,
:func:`aggregate`), read back by later stages through :mod:`~streamtrace.job.folder`.

:func:`aggregate` and :class:`AggregateOptions` are imported on first use (PEP 562), so that
``report``, which imports this package for the folder readers, does not load the aggregation and
its numba kernels (~0.3 s).  As before, ``streamtrace.job.aggregate`` is the function: the
submodule of that name does not replace it when it is imported (:class:`_Package`).
"""
import importlib
import sys
import types

_API = {"aggregate": "aggregate", "AggregateOptions": "options"}

__all__ = list(_API)


def __getattr__(name):
    if name in _API:
        value = getattr(importlib.import_module(f".{_API[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Package(types.ModuleType):
    """This package's module type: importing the submodule ``aggregate`` sets the package's
    attribute of that name to the submodule (Python's import system); here the name stays the
    function (the submodule is ``sys.modules["streamtrace.job.aggregate"]``)."""

    def __setattr__(self, name, value):
        if name in _API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
