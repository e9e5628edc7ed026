"""streamtrace: stream PyTorch profiler (Kineto) traces of multi-rank training jobs
in flat memory -- merge them for Perfetto, validate them, analyse them.

Public API (an epilogue script can call these directly):
  :class:`TraceReader`, :class:`TraceWriter`, :func:`merge`, :class:`MergeOptions`,
  :func:`validate`, :func:`discover`.
"""
__version__ = "0.1.0"

from .errors import StreamtraceError, TraceError, TruncatedTraceError  # noqa: E402
from .reader import TraceReader  # noqa: E402
from .writer import TraceWriter  # noqa: E402


def __getattr__(name):
    # heavier modules load on first use
    if name in ("merge", "MergeOptions"):
        from . import merge as m
        return getattr(m, name)
    if name == "validate":
        from .validate import validate
        return validate
    if name == "discover":
        from .discover import discover
        return discover
    raise AttributeError(name)
