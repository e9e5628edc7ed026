"""The warm-up trace: a small trace that exercises every numba kernel of merge and analyze
(launches, kernels on two streams, a collective with its args, a memcpy, a flow, an event whose
``ts`` is a string and goes through the Python path).  Merging or analysing it in the parent
process loads the compiled kernels from numba's cache (or compiles them) with the argument types
the real work uses, before worker processes are forked: the workers inherit the loaded code
instead of each spending ~0.5 s of its first task on loading it."""
from __future__ import annotations

import contextlib
import os
import tempfile

from .files import owner

WARM_TRACE = (
    b'{"schemaVersion":1,"distributedInfo":{"rank":0,"world_size":2},"traceEvents":['
    b'{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":100},'
    b'{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1.5,"dur":20,"args":{"External id":3}},'
    b'{"ph":"X","cat":"cpu_op","name":"record_param_comms","pid":1,"tid":1,"ts":30,"dur":20,'
    b'"args":{"Collective name":"allreduce","In msg nelems":4,"Out msg nelems":4,"dtype":"Float",'
    b'"Group size":2,"Process Group Ranks":"[0, 1]"}},'
    b'{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":2,"dur":5,'
    b'"args":{"correlation":9,"External id":3}},'
    b'{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":31,"dur":5,'
    b'"args":{"correlation":10}},'
    b'{"ph":"X","cat":"cpu_op","name":"autograd::engine","pid":1,"tid":2,"ts":40,"dur":20},'
    b'{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":8,"dur":2,'
    b'"args":{"device":0,"stream":7,"correlation":9,"External id":3}},'
    b'{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL","pid":0,"tid":8,"ts":37,"dur":9,'
    b'"args":{"device":0,"stream":8,"correlation":10,"Collective name":"allreduce","In msg nelems":4,'
    b'"Out msg nelems":4,"dtype":"Float","Group size":2}},'
    b'{"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD","pid":0,"tid":7,"ts":50,"dur":1,"args":{"device":0}},'
    b'{"ph":"f","id":9,"pid":0,"tid":7,"ts":8,"cat":"ac2g","name":"ac2g","bp":"e"},'
    b'{"ph":"X","name":"odd","pid":0,"tid":7,"ts":"1"}'
    b']}')


@contextlib.contextmanager
def warm_trace(folder):
    """Yield ``(tmpdir, path)``: ``WARM_TRACE`` written to ``tmpdir/warm.json``, ``tmpdir``
    a temporary folder inside ``folder`` (removed afterwards; named with its owner, see
    ``streamtrace.runtime.files.clean_stale``)."""
    with tempfile.TemporaryDirectory(dir=folder, prefix=f".streamtrace-warm.{owner()}.") as d:
        path = os.path.join(d, "warm.json")
        with open(path, "wb") as f:
            f.write(WARM_TRACE)
        yield d, path
