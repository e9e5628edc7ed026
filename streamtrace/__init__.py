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
from .discover import discover  # noqa: E402
from .merge import MergeOptions, merge  # noqa: E402  (the function shadows the module name on purpose)
from .validate import validate  # noqa: E402

__all__ = ["TraceReader", "TraceWriter", "merge", "MergeOptions", "validate", "discover",
           "StreamtraceError", "TraceError", "TruncatedTraceError", "__version__"]
