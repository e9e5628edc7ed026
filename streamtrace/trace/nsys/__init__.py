"""Nsight Systems SQLite exports (``nsys export --type sqlite``) as a trace source: what the
file is (``is_sqlite``, ``is_nsys_report``), and its processes, ranks and activity rows
(``NsysExport``).  See docs/nsight.md for what maps to what.

``NsysExport`` is imported on first use (its page reader's kernels import numba): asking whether a
file is an export (``is_sqlite``, the epilogue's CLI before any stage runs) loads no numba."""
from .db import is_nsys_report, is_sqlite, report_hint
from .processes import count_gpu_processes, pid_of, process_key, tid_of, unowned_warning
from .streams import KINDS, ROW_DTYPE


def __getattr__(name):
    if name == "NsysExport":
        from .reader import NsysExport
        return NsysExport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["count_gpu_processes", "is_nsys_report", "is_sqlite", "report_hint", "pid_of", "process_key", "tid_of", "NsysExport", "KINDS",
           "ROW_DTYPE", "unowned_warning"]
