"""Nsight Systems SQLite exports (``nsys export --type sqlite``) as a trace source: what the
file is (``is_sqlite``, ``is_nsys_report``), and its processes, ranks and activity rows
(``NsysExport``).  See docs/nsight.md for what maps to what."""
from .db import is_nsys_report, is_sqlite, report_hint
from .processes import count_gpu_processes, pid_of, process_key, tid_of
from .reader import NsysExport
from .streams import KINDS, ROW_DTYPE

__all__ = ["count_gpu_processes", "is_nsys_report", "is_sqlite", "report_hint", "pid_of", "process_key", "tid_of", "NsysExport", "KINDS",
           "ROW_DTYPE"]
