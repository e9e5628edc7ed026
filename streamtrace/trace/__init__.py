"""Stage 1, trace files: the Kineto / Chrome trace-event JSON format itself.

Bytes (:mod:`~streamtrace.trace.source`: plain or gzip, byte ranges), the streaming reader
(:mod:`~streamtrace.trace.reader`, with :mod:`~streamtrace.trace.decode` for the values orjson
refuses), the metadata keys besides the events (:mod:`~streamtrace.trace.metadata`), byte ranges
on event boundaries for several processes (:mod:`~streamtrace.trace.ranges`), the streaming
writer (:mod:`~streamtrace.trace.writer`), finding rank files and their rank and iteration
(:mod:`~streamtrace.trace.discover`).  Checking a trace is the stage above
(:mod:`streamtrace.validate`), the synthetic job generator a package of its own
(:mod:`streamtrace.synth`), and the clock-offset fit lives with the events
(:mod:`streamtrace.events.clocks`).  Imports only :mod:`streamtrace.kernels`,
:mod:`streamtrace.runtime` and :mod:`streamtrace.runtime.errors`.
"""
