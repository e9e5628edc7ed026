"""Stage 2, events: trace events as numpy columns, in bounded memory, and the Parquet tables
they end in.

Column dtypes and interned strings (``columns``), reading a trace into a
store (``ingest``, or with several processes:
``parallel_ingest``), the stores behind one protocol
(``store``, blocks compressed by ``codec``), the
external sort (``sort``), sets of integer keys as sorted arrays
(``sortedsets``), and the Parquet datasets and tables every later
stage writes and reads (``dataset``).  Imports only
``streamtrace.trace``, ``streamtrace.kernels``, ``streamtrace.runtime`` and
``streamtrace.runtime.errors``.
"""
