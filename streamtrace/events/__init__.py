"""Stage 2, events: trace events as numpy columns, in bounded memory, and the Parquet tables
they end in.

Column dtypes and interned strings (:mod:`~streamtrace.events.columns`), reading a trace into a
store (:mod:`~streamtrace.events.ingest`, or with several processes:
:mod:`~streamtrace.events.parallel_ingest`), the stores behind one protocol
(:mod:`~streamtrace.events.store`, blocks compressed by :mod:`~streamtrace.events.codec`), the
external sort (:mod:`~streamtrace.events.sort`), sets of integer keys as sorted arrays
(:mod:`~streamtrace.events.sortedsets`), and the Parquet datasets and tables every later
stage writes and reads (:mod:`~streamtrace.events.dataset`).  Imports only
:mod:`streamtrace.trace`, :mod:`streamtrace.kernels`, :mod:`streamtrace.runtime` and
:mod:`streamtrace.runtime.errors`.
"""
