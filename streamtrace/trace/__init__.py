"""Stage 1, trace files: the Kineto / Chrome trace-event JSON format itself.

Bytes (``source``: plain or gzip, byte ranges), the streaming reader
(``reader``, with ``decode`` for the values orjson
refuses), the metadata keys besides the events (``metadata``), byte ranges
on event boundaries for several processes (``ranges``), the streaming
writer (``writer``), finding rank files and their rank and iteration
(``discover``).  Checking a trace is the stage above
(``streamtrace.validate``), the synthetic job generator a package of its own
(``streamtrace.synth``), and the clock-offset fit lives with the events
(``streamtrace.events.clocks``).  Imports only ``streamtrace.kernels``,
``streamtrace.runtime`` and ``streamtrace.runtime.errors``.
"""
