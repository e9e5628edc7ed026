"""Stage ``diff``: what changed between two runs (``streamtrace diff``), in one place.

:mod:`~streamtrace.report.diff.inputs` resolves the two sides (analysed folders, or traces analysed on
the way) and their options (:class:`DiffOptions`); :mod:`~streamtrace.report.diff.compare` compares kernels,
CPU ops, groups and ranks into tables; :mod:`~streamtrace.report.diff.markdown` writes ``diff.md`` and its
chart.  :func:`diff` (also callable as ``streamtrace.diff(...)``) does all three.
"""
import sys
import types

from .inputs import DiffOptions
from .markdown import diff

__all__ = ["diff", "DiffOptions"]


class _DiffModule(types.ModuleType):
    """``streamtrace.report.diff`` is this package and, called, :func:`diff`."""

    def __call__(self, *args, **kwargs):
        return diff(*args, **kwargs)


sys.modules[__name__].__class__ = _DiffModule
