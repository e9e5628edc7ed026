"""Small hand-made Kineto traces for tests: CPU annotations and ops on one thread, launches and
their kernels, GPU annotations; times in integer microseconds as written."""
from __future__ import annotations

import json
from pathlib import Path


class KinetoDoc:
    """Build a one-rank trace: ``cpu(name, ts, dur)`` an annotation or op on pid 1 / tid 1,
    ``launch(ts, kernel_ts, kernel_dur)`` a ``cudaLaunchKernel`` and its kernel (correlation ids
    from 1), ``kernel(...)`` a kernel without a launch, ``gpu_annotation(...)`` one on the GPU."""

    def __init__(self, rank=0):
        self.events = []
        self.corr = 0
        self.rank = rank

    def cpu(self, name, ts, dur, cat="user_annotation", tid=1):
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur})
        return self

    def launch(self, ts, kernel_ts, kernel_dur=1, name="gemm", stream=7, tid=1):
        """A launch at ``ts`` (1 us long) and its kernel; returns the correlation id."""
        self.corr += 1
        c = self.corr
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid,
                            "ts": ts, "dur": 1, "args": {"correlation": c, "External id": c}})
        self.kernel(kernel_ts, kernel_dur, name, stream, c)
        return c

    def kernel(self, ts, dur, name="gemm", stream=7, correlation=None):
        args = {"device": 0, "stream": stream}
        if correlation is not None:
            args["correlation"] = correlation
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts,
                            "dur": dur, "args": args})
        return self

    def gpu_annotation(self, name, ts, dur, stream=7):
        self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": 0, "tid": stream,
                            "ts": ts, "dur": dur, "args": {"device": 0, "stream": stream}})
        return self

    def write(self, path) -> Path:
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": self.rank, "world_size": 1},
               "traceEvents": self.events, "baseTimeNanoseconds": 1_700_000_000_000_000_000}
        Path(path).write_text(json.dumps(doc))
        return Path(path)
