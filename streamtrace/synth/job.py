"""Deterministic synthetic Kineto traces of a Megatron-LM style 3D-parallel training job.

``generate_job(out_dir, SynthSpec(...))`` writes one Kineto trace per rank (``out_dir/iteration_<N>/rank_<RRRR>_iter_<N>.pt.trace.json[.gz]``)
and ``out_dir/streamtrace_topology.json``, and returns a ``JobTruth`` with every interval it placed, so analyses
can be checked against exact answers. Same spec -> same bytes.

Units and clocks: every time here is an ``int`` number of **nanoseconds** (int64 in numpy). In the
files ``ts``/``dur`` are **microseconds** with exactly three decimals (``f"{ns // 1000}.{ns % 1000:03d}"``):
exact ns in the text, which float parsing loses. The simulation runs on one true job clock; rank
``r`` writes ``ts_ns = t_true + clock_offset_ns`` with ``clock_offset_ns = MONO0_NS + r*clock_skew_ns``
(a monotonic-clock value, ~9.8e12 us) and ``baseTimeNanoseconds = base_time_ns + r*clock_skew_ns``.
All truth times are rank-local, i.e. exactly what that rank's file says.

Model: ProfilerStep#i > memset > Megatron 1F1B schedule of ``forward_step``/``backward_step`` per micro-batch
(``recv_forward``, ``send_forward``, ``recv_backward``, ``send_backward``, ``send_forward_recv_backward``,
``send_backward_recv_forward``) > ``finalize_model_grads`` > ``start_grad_sync`` (DP reduce-scatters) > ``optimizer``
(memcpy DtoH + host sync, Adam, DP all-gathers); backward CPU ops run on an autograd thread. Streams: 7 compute,
20 TP, 21 DP, 22 PP send, 23 PP recv. A kernel starts at max(stream free, launch + LAUNCH_LAT_NS, awaited events); a
NCCL kernel also waits for the compute stream as of its launch, and ends on every member at max(member starts) +
transfer time + a skew in [0, END_SKEW_NS]. Overlap is exact by construction: forward TP all-reduces block compute,
backward TP all-reduces overlap the wgrad GEMM, PP sends overlap later compute, DP collectives overlap grad-scaling and
Adam kernels. Injected changes (for diffs): the straggler's first compute kernel of each forward/backward step runs
``straggler_delay_ns`` longer (peers wait for it); ``kernel_scale`` stretches kernels by key (``(("fprop", 1.2),)``);
``extra_allreduces`` adds blocking DP all-reduces of one layer's parameters at the end of every step.
"""
from __future__ import annotations

import gzip
import io
import json
import random
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
import orjson

from . import faults
from .comm_formats import FORMATS, alltoall_splits, comm_args
from .groups import ORDER, PG_DESC, build_topology, process_groups  # noqa: F401 (ORDER: re-exported)
from .kernel_names import KERNELS as _K

MONO0_NS = 9_812_345_678_000_000   # rank 0's monotonic clock at true time 0 (ns); > 2**53, so float64 loses ns
END_SKEW_NS = 2_000                # max spread of one collective's end across its ranks (true ns)
LAUNCH_LAT_NS = 4_000              # min delay from launch call start to kernel start (ns)
GPUS_PER_NODE = 8
S_COMP, S_TP, S_DP, S_SEND, S_RECV = 7, 20, 21, 22, 23
HIDDEN, SEQ, FFN, VOCAB = 4096, 2048, 16384, 50304
GEMM_FLOP_PER_NS, ATTN_FLOP_PER_NS, HBM_BYTES_PER_NS = 600_000, 400_000, 2_500
LINKS = {"TP": (9_000, 180), "DP": (14_000, 90), "PP": (7_000, 45)}   # per dim: latency (ns), bandwidth (bytes/ns)
_ESIZE = {"BFloat16": 2, "Float": 4}
_CBID = {"cudaLaunchKernel": 211, "cudaGraphLaunch": 311, "cudaMemcpyAsync": 41, "cudaMemsetAsync": 51, "cudaEventRecord": 135, "cudaStreamWaitEvent": 147, "cudaStreamSynchronize": 131}
_C10D = {"allreduce": ("c10d::allreduce_", "nccl:all_reduce"), "reduce_scatter": ("c10d::_reduce_scatter_base_", "nccl:_reduce_scatter_base"),
         "allgather": ("c10d::_allgather_base_", "nccl:_all_gather_base"), "send": ("c10d::send", "nccl:send"), "recv": ("c10d::recv_", "nccl:recv"),
         "alltoall": ("c10d::alltoall_base_", "nccl:all_to_all")}
_NCCL_KARGS = {"registers per thread": 96, "shared memory": 87_568, "blocks per SM": 0.121212,
               "warps per SM": 1.939394, "grid": [16, 1, 1], "block": [512, 1, 1], "est. achieved occupancy %": 0}
_DEVICE_PROPS = {"name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_029_158_912, "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
                 "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232_448, "sharedMemPerMultiprocessor": 233_472}


@dataclass(frozen=True)
class SynthSpec:
    """What to generate; times in int ns. ``dp = world_size // (tp*pp)``; rank order is Megatron's
    "tp-cp-ep-dp-pp" (cp = ep = 1): ``rank = tp_i + tp*dp_i + tp*dp*pp_i``. ``layers`` = transformer
    layers per pipeline stage; ``steps`` = ProfilerStep windows per file (``ProfilerStep#<iteration+k>``)."""
    world_size: int = 8
    tp: int = 2
    pp: int = 2
    iteration: int = 10
    steps: int = 1
    microbatches: int = 2
    layers: int = 2
    seed: int = 0
    compress: bool = False
    base_time_ns: int = 1_700_000_000_000_000_000
    clock_skew_ns: int = 0              # rank r's clock runs r*clock_skew_ns ahead of rank 0's
    straggler_rank: int | None = None
    straggler_delay_ns: int = 0
    kernel_scale: tuple = ()            # ((kernel key of _K, factor), ...): those kernels run factor x longer
    extra_allreduces: int = 0           # blocking DP all-reduces added at the end of every step (dp > 1)
    comm_format: str = "kernel_args"    # where a collective's facts are written: synth.comm_formats.FORMATS
    alltoalls: int = 0                  # blocking DP all-to-alls (uneven splits) at the end of every step (dp > 1)
    faults: tuple = ()                  # synth.faults.Fault, ...: injected faults with a known effect
    graph_replays: bool = False         # forward/backward compute kernels replayed from CUDA graphs (cudaGraphLaunch):
                                        # a kernel queued behind its predecessor starts 1-15 us before it ends

    @property
    def dp(self) -> int:
        return self.world_size // (self.tp * self.pp)


class Intervals(NamedTuple):
    """int64 ns intervals (rank-local clock), sorted by start then end."""
    start: np.ndarray
    end: np.ndarray


@dataclass
class DeviceTruth:
    """Everything placed on one GPU (trace GPU pid = local device index = rank % 8), as int64 ns Intervals."""
    device: int
    compute: Intervals   # cat "kernel" whose name does not match nccl (stream 7)
    comm: Intervals      # NCCL kernels (streams 20-23)
    memory: Intervals    # gpu_memcpy + gpu_memset (stream 7)


@dataclass
class CollectiveTruth:
    """One collective instance. Per-rank dicts map global rank -> value; times are rank-local ns."""
    index: int
    type: str            # allreduce | reduce_scatter | allgather | sendrecv
    dim: str             # TP | DP | PP
    ranks: tuple         # members of this instance; (src, dst) for sendrecv
    pg_name: str         # its process group ("Process Group Name")
    pg_ranks: tuple
    nbytes: int          # max(In msg nelems, Out msg nelems) * element size
    bytes: dict          # rank -> (In msg nelems, Out msg nelems) * element size (an all-to-all's differ by rank)
    dtype: str           # "BFloat16" | "Float"
    step: int            # ProfilerStep index in the files
    label: str           # what it is, e.g. "bwd L1 qkv dgrad mb0"
    start_ns: dict       # rank -> its NCCL kernel start (the rank's arrival)
    end_ns: dict         # rank -> its NCCL kernel end
    correlation: dict    # rank -> the kernel's correlation id in that rank's file


@dataclass
class RankTruth:
    """One rank's file and what is in it. Windows are int64 ns (rank-local); S steps, M micro-batches."""
    rank: int
    path: Path
    pid: int                  # CPU process id in the trace
    coords: dict              # {"tp", "dp", "pp"} indices
    clock_offset_ns: int      # rank-local ns - true job ns
    base_time_ns: int         # the file's baseTimeNanoseconds
    devices: dict             # GPU pid -> DeviceTruth
    steps: np.ndarray         # (S, 2) ProfilerStep annotations
    forward: np.ndarray       # (S, M, 2) forward_step CPU annotations, by micro-batch id
    backward: np.ndarray      # (S, M, 2) backward_step CPU annotations
    forward_gpu: np.ndarray   # (S, M, 2) first start / last end of the compute kernels forward_step launched
    backward_gpu: np.ndarray  # (S, M, 2) same for backward_step
    n_events: int             # len(traceEvents)


@dataclass
class JobTruth:
    """Returned by ``generate_job``: ``ranks[r]`` is rank r; ``collectives`` in resolution order."""
    spec: SynthSpec
    out_dir: Path
    topology: dict            # as written to out_dir/streamtrace_topology.json
    ranks: list
    collectives: list


class RankProgram:
    """One rank's program: ``run()`` yields lists of posts (NCCL kernel arrivals, true ns) and is sent
    back their end times. ``sink`` receives the bytes of each event (None: simulate only)."""

    UNEVEN_ALLTOALL = True    # all-to-all split sizes differ by member (synth.comm_formats.alltoall_splits)

    def __init__(self, spec: SynthSpec, pgs: list, rank: int, sink=None):
        self.spec, self.rank, self.rank_arg, self.sink, self.sep = spec, rank, rank, sink, b"\n  "   # rank_arg: as written
        self.stride, self.stage = spec.tp * spec.dp, rank // (spec.tp * spec.dp)
        self.first, self.last = self.stage == 0, self.stage == spec.pp - 1
        self.dev, self.pid, self.main, self.auto = rank % GPUS_PER_NODE, 40000 + 7 * rank, 40000 + 7 * rank, 40003 + 7 * rank
        self.off = MONO0_NS + rank * spec.clock_skew_ns
        rng = random.Random(f"streamtrace/{spec.seed}/{rank}")   # random() is reproducible across Python versions
        self.rand = lambda lo, hi: lo + int(rng.random() * (hi - lo + 1))   # uniform int in [lo, hi]
        self.pg = {d: next(p for p in pgs[1:] if p[1] == desc and rank in p[2]) for d, desc in PG_DESC.items()}
        self.t0 = self.rand(0, 40_000)
        self.cur = {self.main: self.t0 + 150_000, self.auto: 0}          # CPU thread cursors
        self.stack: dict = {self.main: [], self.auto: []}                # open CPU ops' External ids
        self.sq = dict.fromkeys((S_COMP, S_TP, S_DP, S_SEND, S_RECV), 0)   # time each stream is free
        self.comp_wait = self.comp_start = self.ext = self.fid = self.n_events = self.step = 0
        self.corr, self.seq, self.fb, self.win = 100, {}, {}, {"steps": []}
        self.iv: dict = {c: ([], []) for c in ("compute", "comm", "memory")}
        self.phase, self.straggle = None, False

    def _ev(self, ev: dict, ts: int, dur: int | None = None, args: dict | None = None):
        """Write one event; ``ts`` is true ns, ``dur`` ns; both become raw "<us>.<3 digits>" numbers."""
        self.n_events += 1
        if self.sink:
            ev["ts"] = orjson.Fragment("%d.%03d" % divmod(ts + self.off, 1000))
            ev |= ({} if dur is None else {"dur": orjson.Fragment("%d.%03d" % divmod(dur, 1000))}) | ({} if args is None else {"args": args})
            self.sink(self.sep + orjson.dumps(ev))
            self.sep = b",\n  "

    def _x(self, cat, name, pid, tid, ts, dur, args):
        self._ev({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid}, ts, dur, args)

    def _flow(self, ph, fid, cat, pid, tid, ts):
        self._ev({"ph": ph, "id": fid, "pid": pid, "tid": tid, "cat": cat, "name": cat} | ({"bp": "e"} if ph == "f" else {}), ts)

    def _meta(self, name, pid, tid, args):   # a metadata event
        self._ev({"name": name, "ph": "M", "pid": pid, "tid": tid}, self.t0, None, args)

    def metadata(self):
        """Process/thread metadata: CPU pid, every local GPU pid, the streams in use."""
        sp = self.spec
        for pid, label, sort in [(self.pid, "CPU", self.pid)] + [(g, f"GPU {g}", 16777216 + g) for g in range(min(GPUS_PER_NODE, sp.world_size))]:
            for name, args in (("process_name", {"name": "python3"}), ("process_labels", {"labels": label}), ("process_sort_index", {"sort_index": sort})):
                self._meta(name, pid, 0, args)
        streams = [(self.dev, s, f"stream {s} ") for s in [S_COMP] + [S_TP] * (sp.tp > 1) + [S_DP] * (sp.dp > 1) + [S_SEND, S_RECV] * (sp.pp > 1)]
        for pid, tid, name in streams + [(self.pid, t, f"thread {t} ({n})") for t, n in ((self.main, "pt_main_thread"), (self.auto, "pt_autograd_0"))]:
            self._meta("thread_name", pid, tid, {"name": name})
            self._meta("thread_sort_index", pid, tid, {"sort_index": tid})

    def closing(self):
        """The profiler span and instant events Kineto writes last."""
        end = max(list(self.cur.values()) + list(self.sq.values())) + 20_000
        self._x("Trace", "PyTorch Profiler (0)", "Spans", "PyTorch Profiler", self.t0, end - self.t0, {"Op count": 0})
        self._meta("process_sort_index", "Spans", 0, {"sort_index": 536870912})
        self._ev({"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces", "tid": "Trace PyTorch Profiler"}, self.t0)
        self._ev({"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": ""}, end)

    @contextmanager
    def op(self, name, tid, cat="cpu_op", args=None, gap=(300, 1500)):
        """A CPU slice on ``tid`` enclosing whatever the body does; yields its start (true ns)."""
        ts = self.cur[tid] = self.cur[tid] + self.rand(*gap)
        self.ext += 1
        ext = self.ext
        self.stack[tid].append(ext)
        yield ts
        self.stack[tid].pop()
        end = self.cur[tid] = self.cur[tid] + self.rand(200, 900)
        self._x(cat, name, self.pid, tid, ts, end - ts, {"External id": ext, "Record function id": 0, "Ev Idx": ext - 1} | (args or {}))

    def _runtime(self, tid, api, until=None):
        """One cuda_runtime call; with ``until`` (true ns) it blocks until then. Returns (ts, corr)."""
        ts = self.cur[tid] + self.rand(500, 2000)
        d = self.rand(2500, 7000) if until is None else max(until - ts, 0) + self.rand(1000, 3000)
        self.corr += 1
        self._x("cuda_runtime", api, self.pid, tid, ts, d, {"External id": self.stack[tid][-1], "cbid": _CBID[api], "correlation": self.corr})
        self.cur[tid] = ts + d
        return ts, self.corr

    def _gpu_ev(self, cls, cat, name, stream, start, end, args):
        """A GPU slice (true ns) + the ac2g flow end on it; recorded in the truth class ``cls``."""
        self.sq[stream] = end
        self._x(cat, name, self.dev, stream, start, end - start, args)
        self._flow("f", args["correlation"], "ac2g", self.dev, stream, start)
        self.iv[cls][0].append(start + self.off)
        self.iv[cls][1].append(end + self.off)

    def gpu(self, tid, key, dur, cat="kernel", api="cudaLaunchKernel", extra=None):
        """Launch a kernel (``key`` in _K) or a memcpy/memset (``key`` = its name) on stream 7."""
        graph = self.spec.graph_replays and cat == "kernel" and self.phase is not None
        ts, corr = self._runtime(tid, "cudaGraphLaunch" if graph else api)
        self._flow("s", corr, "ac2g", self.pid, tid, ts)
        if self.straggle and cat == "kernel":
            dur, self.straggle = dur + self.spec.straggler_delay_ns, False
        start = max(self.sq[S_COMP], ts + LAUNCH_LAT_NS, self.comp_wait)
        if graph and start == self.sq[S_COMP] > max(ts + LAUNCH_LAT_NS, self.comp_wait):
            # CUPTI's timestamps of a graph's nodes: a node queued behind its predecessor starts 1-15 us
            # before the predecessor's end (never before its start)
            start -= min(self.rand(1_000, 15_000), start - self.comp_start - 1, start - ts - LAUNCH_LAT_NS)
        self.comp_start = start
        end = start + int(dur * dict(self.spec.kernel_scale).get(key, 1) * faults.kernel_factor(self.spec.faults, self.rank, key))
        args = {"External id": self.stack[tid][-1], "queued": 0, "device": self.dev, "context": 1, "stream": S_COMP, "correlation": corr}
        name = key
        if cat == "kernel":
            name, grid, block = _K[key]
            args |= {"registers per thread": 128, "shared memory": 0, "grid": grid, "block": block}
            if self.phase is not None:
                self.phase = [self.phase[0] if self.phase[0] is not None else start, end]
        self._gpu_ev("compute" if cat == "kernel" else "memory", cat, name, S_COMP, start, end, args | (extra or {}))
        return end

    def chain(self, tid, ops, key, dur):
        """Nested CPU ops ``ops[0] > ops[1] > ...``; the innermost launches one kernel of ``dur`` ns."""
        with self.op(ops[0], tid):
            if len(ops) > 1:
                return self.chain(tid, ops[1:], key, dur)
            return self.gpu(tid, key, dur)

    def cost(self, flops=0, nbytes=0, flop_per_ns=GEMM_FLOP_PER_NS):
        """Kernel duration (ns) from its FLOPs and bytes moved, +- 3 % deterministic jitter."""
        ns = flops // flop_per_ns + nbytes // HBM_BYTES_PER_NS + 4_000
        return ns + ns * self.rand(-30, 30) // 1000

    def wait(self, tid, end):
        """cudaStreamWaitEvent: the next compute-stream kernel starts after ``end`` (true ns)."""
        self._runtime(tid, "cudaStreamWaitEvent")
        self.comp_wait = max(self.comp_wait, end)

    def post(self, tid, kind, dim, n_in, n_out, label, dtype="BFloat16", peer=None):
        """CPU side of one NCCL op and its kernel's start (true ns); returns the post to yield."""
        pg_name, pg_desc, pg_ranks = self.pg[dim]
        p2p = kind in ("send", "recv")
        members = ((self.rank, peer) if kind == "send" else (peer, self.rank)) if p2p else tuple(pg_ranks)
        key = ("p2p",) + members if p2p else (pg_name,)
        stream = {"send": S_SEND, "recv": S_RECV}.get(kind, S_TP if dim == "TP" else S_DP)
        self.seq[key] = self.seq.get(key, 0) + 1
        if kind == "alltoall":
            splits = alltoall_splits(len(pg_ranks), list(pg_ranks).index(self.rank), n_in, self.UNEVEN_ALLTOALL)
            n_in, n_out = sum(splits[0]), sum(splits[1])
        cargs = {"Collective name": "all_to_allv" if kind == "alltoall" else kind, "In msg nelems": n_in, "Out msg nelems": n_out,
                 "Group size": len(pg_ranks), "dtype": dtype, "In split size": str(splits[0]) if kind == "alltoall" else "[]",
                 "Out split size": str(splits[1]) if kind == "alltoall" else "[]", "Process Group Name": pg_name,
                 "Process Group Description": pg_desc, "Process Group Ranks": str(pg_ranks), "Rank": self.rank_arg}
        ca = comm_args(self.spec.comm_format, kind, cargs, dtype, self.seq[key])
        with self.op(_C10D[kind][0], tid, args=ca.c10d), self.op("record_param_comms", tid, args=ca.record_param_comms), \
                self.op(_C10D[kind][1], tid, cat="user_annotation", args=ca.annotation):
            self._runtime(tid, "cudaEventRecord")
            self._runtime(tid, "cudaStreamWaitEvent")
            ts, corr = self._runtime(tid, "cudaLaunchKernel")
            self._flow("s", corr, "ac2g", self.pid, tid, ts)
            ext = self.stack[tid][-1]
        return SimpleNamespace(
            key=key + (self.seq[key],), rank=self.rank, start=max(self.sq[stream], ts + LAUNCH_LAT_NS, self.sq[S_COMP]),
            corr=corr, stream=stream, kname=ca.kernel_name, members=members,
            args={"External id": ext, "queued": 0, "device": self.dev, "context": 1, "stream": stream, "correlation": corr}
            | _NCCL_KARGS | ca.kernel,
            truth=dict(type="sendrecv" if p2p else kind, dim=dim, ranks=members, pg_name=pg_name, pg_ranks=tuple(pg_ranks),
                       nbytes=max(n_in, n_out) * _ESIZE[dtype], bytes=(n_in * _ESIZE[dtype], n_out * _ESIZE[dtype]), dtype=dtype, step=self.step, label=label))

    def comm(self, tid, kind, dim, n_in, n_out, label, dtype="BFloat16"):
        """Generator: one collective on its own; returns its end on this rank (true ns)."""
        p = self.post(tid, kind, dim, n_in, n_out, label, dtype)
        (end,) = yield [p]
        self._gpu_ev("comm", "kernel", p.kname, p.stream, p.start, end, p.args)
        return end

    def p2p(self, tid, name, send_to=None, recv_from=None):
        """A Megatron p2p_communication call: a batched send and/or recv with a neighbour stage."""
        n = SEQ * HIDDEN
        with self.op(name, tid, cat="user_annotation"):
            posts = [self.post(tid, kind, "PP", n, n, f"{name} {kind} {peer}", peer=peer)
                     for kind, peer in (("send", send_to), ("recv", recv_from)) if peer is not None]
            ends = yield posts
            for p, e in zip(posts, ends):
                self._gpu_ev("comm", "kernel", p.kname, p.stream, p.start, e, p.args)
            if recv_from is not None:
                self.wait(tid, ends[-1])

    def tp_ar(self, tid, label, n=SEQ * HIDDEN, dtype="BFloat16"):
        """A blocking TP all-reduce (Megatron's reduce-from-TP-region in forward)."""
        if self.spec.tp > 1:
            self.wait(tid, (yield from self.comm(tid, "allreduce", "TP", n, n, label, dtype)))

    def linear(self, mb, name, m, n, k):
        with self.op("aten::linear", self.main) as ts:
            self.fid += 1
            self.fb[(mb, name)] = self.fid
            self._flow("s", self.fid, "fwdbwd", self.pid, self.main, ts)
            self.chain(self.main, ["aten::matmul", "aten::mm"], "fprop", self.cost(2 * m * n * k))

    def linear_bwd(self, mb, name, m, n, k, ar_label=None):
        """dgrad GEMM; with ``ar_label`` its async TP all-reduce overlaps the wgrad GEMM."""
        a, end = self.auto, None
        with self.op("autograd::engine::evaluate_function: MmBackward0", a) as ts, self.op("MmBackward0", a):
            self._flow("f", self.fb.pop((mb, name)), "fwdbwd", self.pid, a, ts)
            self.chain(a, ["aten::mm"], "dgrad", self.cost(2 * m * n * k))
            if ar_label and self.spec.tp > 1:
                end = yield from self.comm(a, "allreduce", "TP", m * k, m * k, ar_label)
            self.chain(a, ["aten::mm"], "wgrad", self.cost(2 * m * n * k))
            if end is not None:
                self.wait(a, end)

    def node(self, node, ops, key, dur):
        with self.op("autograd::engine::evaluate_function: " + node, self.auto), self.op(node, self.auto):
            self.chain(self.auto, ops, key, dur)

    def forward(self, mb):
        m, tp, H, S, F, c = self.main, self.spec.tp, HIDDEN, SEQ, FFN, self.cost
        ln = ["aten::layer_norm", "aten::native_layer_norm"]
        if self.first:
            self.chain(m, ["aten::embedding", "aten::index_select"], "emb", c(nbytes=S * H * 2))
            yield from self.tp_ar(m, f"fwd embedding mb{mb}")
        for ly in range(self.spec.layers):
            self.chain(m, ln, "ln", c(nbytes=S * H * 4))
            self.linear(mb, f"L{ly}.qkv", S, 3 * H // tp, H)
            self.chain(m, ["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
                           "aten::_flash_attention_forward"], "flash", c(2 * S * S * H // tp, 0, ATTN_FLOP_PER_NS))
            self.linear(mb, f"L{ly}.proj", S, H, H // tp)
            yield from self.tp_ar(m, f"fwd L{ly} attn mb{mb}")
            self.chain(m, ["aten::add"], "add", c(nbytes=S * H * 6))
            self.chain(m, ln, "ln", c(nbytes=S * H * 4))
            self.linear(mb, f"L{ly}.fc1", S, F // tp, H)
            self.chain(m, ["aten::gelu"], "gelu", c(nbytes=S * F // tp * 4))
            self.linear(mb, f"L{ly}.fc2", S, H, F // tp)
            yield from self.tp_ar(m, f"fwd L{ly} mlp mb{mb}")
            self.chain(m, ["aten::add"], "add", c(nbytes=S * H * 6))
        if self.last:  # output layer + vocab-parallel cross entropy (small fp32 TP all-reduces)
            self.linear(mb, "output", S, VOCAB // tp, H)
            for key in ("max", "sum"):
                self.chain(m, [f"aten::{key}"], key, c(nbytes=S * VOCAB // tp * 4))
                yield from self.tp_ar(m, f"loss {key} mb{mb}", S, "Float")

    def backward(self, mb):
        tp, H, S, F, c = self.spec.tp, HIDDEN, SEQ, FFN, self.cost
        lnb = ("NativeLayerNormBackward0", ["aten::native_layer_norm_backward"], "ln_bwd")
        if self.last:
            self.node("_VocabParallelCrossEntropyBackward", ["aten::mul_"], "mul", c(nbytes=S * VOCAB // tp * 8))
            yield from self.linear_bwd(mb, "output", S, VOCAB // tp, H, f"bwd output dgrad mb{mb}")
        for ly in reversed(range(self.spec.layers)):
            yield from self.linear_bwd(mb, f"L{ly}.fc2", S, H, F // tp)
            self.node("GeluBackward0", ["aten::gelu_backward"], "gelu_bwd", c(nbytes=S * F // tp * 6))
            yield from self.linear_bwd(mb, f"L{ly}.fc1", S, F // tp, H, f"bwd L{ly} fc1 dgrad mb{mb}")
            self.node(*lnb, c(nbytes=S * H * 6))
            yield from self.linear_bwd(mb, f"L{ly}.proj", S, H, H // tp)
            self.node("ScaledDotProductFlashAttentionBackward0", ["aten::_scaled_dot_product_flash_attention_backward",
                      "aten::_flash_attention_backward"], "flash_bwd", c(5 * S * S * H // tp, 0, ATTN_FLOP_PER_NS))
            yield from self.linear_bwd(mb, f"L{ly}.qkv", S, 3 * H // tp, H, f"bwd L{ly} qkv dgrad mb{mb}")
            self.node(*lnb, c(nbytes=S * H * 6))
        if self.first:
            self.node("EmbeddingBackward0", ["aten::embedding_dense_backward"], "emb_bwd", c(nbytes=S * H * 8))

    def phase_step(self, kind, mb, recv, send):
        """One ``forward_step``/``backward_step`` annotation; ``recv``/``send`` = (p2p name, peer) or None."""
        m = self.main
        with self.op(kind, m, cat="user_annotation") as ts:
            ext = self.ext
            self.phase, self.straggle = [None, None], self.rank == self.spec.straggler_rank
            if recv:
                yield from self.p2p(m, recv[0], recv_from=recv[1])
            if kind == "forward_step":
                yield from self.forward(mb)
            else:   # the main thread blocks in autograd while the autograd thread runs the graph
                self.cur[self.auto] = max(self.cur[self.auto], self.cur[m]) + self.rand(5_000, 15_000)
                yield from self.backward(mb)
                self.cur[m] = max(self.cur[m], self.cur[self.auto])
            if send:
                yield from self.p2p(m, send[0], send_to=send[1], recv_from=send[1] if "_recv_" in send[0] else None)
        (fs, fe), self.phase = self.phase, None
        self._x("gpu_user_annotation", kind, self.dev, S_COMP, fs, fe - fs, {"External id": ext})
        self.win[(kind, "cpu", self.step, mb)] = (ts + self.off, self.cur[m] + self.off)
        self.win[(kind, "gpu", self.step, mb)] = (fs + self.off, fe + self.off)

    def schedule(self):
        """Megatron 1F1B (forward_backward_pipelining_without_interleaving) for this stage."""
        M, prev, nxt = self.spec.microbatches, self.rank - self.stride, self.rank + self.stride
        rf, sf = (None if self.first else ("recv_forward", prev)), (None if self.last else ("send_forward", nxt))
        warm = min(self.spec.pp - self.stage - 1, M)
        for i in range(warm):
            yield from self.phase_step("forward_step", i, rf, sf)
        for i in range(M - warm):
            yield from self.phase_step("forward_step", warm + i, rf if i == 0 else None, None if self.last else ("send_forward_recv_backward", nxt))
            name = "send_backward" if i == M - warm - 1 else "send_backward_recv_forward"
            yield from self.phase_step("backward_step", i, None, None if self.first else (name, prev))
        for i in range(M - warm, M):
            yield from self.phase_step("backward_step", i, None if self.last else ("recv_backward", nxt),
                                       None if self.first else ("send_backward", prev))

    def run(self):
        """The whole profiled window: ``steps`` ProfilerSteps (generator, see class docstring)."""
        sp, m, ua = self.spec, self.main, "user_annotation"
        P = 12 * HIDDEN * HIDDEN // sp.tp // sp.dp * sp.dp   # parameters of one layer bucket on this rank
        self.metadata()
        for k in range(sp.steps):
            self.step = k
            with self.op(f"ProfilerStep#{sp.iteration + k}", m, cat=ua, gap=(5_000, 20_000)) as ts:
                with faults.stall(self, m), self.op("aten::zero_", m):     # after an injected data-loader stall, if any
                    self.gpu(m, "Memset (Device)", self.cost(nbytes=P * sp.layers * 2), "gpu_memset", "cudaMemsetAsync",
                             {"bytes": P * sp.layers * 2, "memory bandwidth (GB/s)": 2500.0})
                yield from self.schedule()
                ends, ags = [], []
                with self.op("finalize_model_grads", m, cat=ua):
                    with self.op("start_grad_sync", m, cat=ua):
                        for b in reversed(range(sp.layers)):   # buckets fill up in backward order
                            self.chain(m, ["aten::mul_"], "mul", self.cost(nbytes=P * 4))
                            if sp.dp > 1:
                                ends.append((yield from self.comm(m, "reduce_scatter", "DP", P, P // sp.dp, f"grads L{b}")))
                    for e in ends:
                        self.wait(m, e)
                with self.op("optimizer", m, cat=ua):
                    self.chain(m, ["aten::_foreach_norm"], "norm", self.cost(nbytes=P * sp.layers * 4 // sp.dp))
                    with self.op("aten::item", m), self.op("aten::_local_scalar_dense", m):
                        end = self.gpu(m, "Memcpy DtoH (Device -> Pageable)", self.rand(1_500, 2_500), "gpu_memcpy",
                                       "cudaMemcpyAsync", {"bytes": 4, "memory bandwidth (GB/s)": 0.002})
                        self._runtime(m, "cudaStreamSynchronize", until=end)
                    for b in range(sp.layers):
                        with self.op("Optimizer.step#DistributedOptimizer.step", m, cat=ua):
                            self.chain(m, ["aten::_fused_adam_"], "adam", self.cost(nbytes=P // sp.dp * 28))
                        if sp.dp > 1:
                            ags.append((yield from self.comm(m, "allgather", "DP", P // sp.dp, P, f"params L{b}")))
                    for e in ags:   # the next forward needs the gathered parameters
                        self.wait(m, e)
                for i in range(sp.extra_allreduces + sp.alltoalls if sp.dp > 1 else 0):
                    kind, n = ("allreduce", P) if i < sp.extra_allreduces else ("alltoall", SEQ * HIDDEN // 8)
                    self.wait(m, (yield from self.comm(m, kind, "DP", n, n, "extra" if kind == "allreduce" else f"alltoall {i}")))
            self.win["steps"].append((ts + self.off, self.cur[m] + self.off))
        self.closing()

    def truth(self, path) -> RankTruth:
        sp, iv = self.spec, {c: Intervals(*(np.array(x, np.int64)[np.lexsort((en, st))] for x in (st, en))) for c, (st, en) in self.iv.items()}
        w = {(k, c): np.array([[self.win[(f"{k}_step", c, s, mb)] for mb in range(sp.microbatches)]
                               for s in range(sp.steps)], np.int64).reshape(sp.steps, sp.microbatches, 2)
             for k in ("forward", "backward") for c in ("cpu", "gpu")}
        return RankTruth(self.rank, path, self.pid, {"tp": self.rank % sp.tp, "dp": (self.rank // sp.tp) % sp.dp, "pp": self.stage},
                         self.off, sp.base_time_ns + self.rank * sp.clock_skew_ns, {self.dev: DeviceTruth(self.dev, **iv)},
                         np.array(self.win["steps"], np.int64).reshape(-1, 2), w["forward", "cpu"], w["backward", "cpu"],
                         w["forward", "gpu"], w["backward", "gpu"], self.n_events)


def simulate(spec: SynthSpec, pgs: list, ranks=None, truth=True):
    """Run the programs of ``ranks`` (default: all) together. A collective instance, matched by (group, sequence
    number), ends once all its members among ``ranks`` arrived: at max(arrivals) + ring transfer + per-rank skew.
    Returns (collectives: list of CollectiveTruth, [] unless ``truth``; replies: rank -> list of reply lists, ns)."""
    gens = {r: RankProgram(spec, pgs, r).run() for r in (range(spec.world_size) if ranks is None else ranks)}
    rng = random.Random(f"streamtrace/{spec.seed}/collectives")
    pending, resolved, waiting, colls, replies = {}, {}, {}, [], {r: [] for r in gens}
    todo = deque((r, None) for r in gens)
    while todo:
        r, val = todo.popleft()
        try:
            waiting[r] = gens[r].send(val)
        except StopIteration:
            continue
        woken = []
        for p in waiting[r]:
            got = pending.setdefault(p.key, {})
            got[p.rank] = p
            if len(got) < sum(q in gens for q in p.members):
                continue
            del pending[p.key]
            t, n = p.truth, len(p.truth["pg_ranks"])
            num, den = {"allreduce": (2 * n - 2, n), "reduce_scatter": (n - 1, n), "allgather": (n - 1, n)}.get(t["type"], (1, 1))
            lat, bw = LINKS[t["dim"]]
            took = lat + t["nbytes"] * num // (den * bw)
            f = faults.coll_factor(spec, t)
            t_end = max(q.start for q in got.values()) + (took if f == 1 else int(took * f)) + faults.send_delay_ns(spec, t)
            ends = resolved[p.key] = {q: t_end + int(rng.random() * (END_SKEW_NS + 1)) for q in sorted(got)}
            if truth:
                colls.append(CollectiveTruth(index=len(colls), start_ns={q: got[q].start for q in sorted(got)}, end_ns=ends,
                                             correlation={q: got[q].corr for q in sorted(got)},
                                             **t | {"bytes": {q: got[q].truth["bytes"] for q in sorted(got)}}))
            woken += sorted(got)
        for w in dict.fromkeys(woken):
            if w in waiting and all(q.key in resolved for q in waiting[w]):
                replies[w].append([resolved[q.key][w] for q in waiting.pop(w)])
                todo.append((w, replies[w][-1]))
    if pending or waiting:
        raise RuntimeError(f"synthetic schedule deadlocked: ranks {sorted(waiting)} are waiting")
    return colls, replies


def trace_frame(spec: SynthSpec, pgs: list, r: int):
    """Rank ``r``'s file: (path relative to the job folder, bytes before its events, bytes after them)."""
    rel = f"iteration_{spec.iteration}/rank_{r:04d}_iter_{spec.iteration}.pt.trace.json" + ".gz" * spec.compress
    dist = {"backend": "nccl", "rank": r, "world_size": spec.world_size, "pg_count": len(pgs), "nccl_version": "2.21.5",
            "pg_config": [{"pg_name": nm, "pg_desc": d, "backend_config": "cuda:nccl", "pg_size": len(g), "ranks": g} for nm, d, g in pgs if r in g]}
    head = (b'{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    ' + b",\n    ".join(orjson.dumps({"id": i} | _DEVICE_PROPS) for i in range(min(GPUS_PER_NODE, spec.world_size)))
            + b'\n  ],\n  "distributedInfo": ' + orjson.dumps(dist) + b',\n  "traceEvents": [')
    return rel, head, b'\n  ],\n  "traceName": %s,\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": %d\n}\n' % (orjson.dumps(rel), spec.base_time_ns + r * spec.clock_skew_ns)


def replay(gen, replies):
    """Run a rank program's generator ``gen`` to its end, sending it ``replies`` (the last one ends it)."""
    for val in [None] + replies:
        try:
            gen.send(val)
        except StopIteration:
            return


def check_spec(spec: SynthSpec) -> dict:
    """The spec's topology (``build_topology``); ValueError for a spec no job can have."""
    topo = build_topology(spec)
    if min(spec.steps, spec.microbatches, spec.layers) < 1 or spec.straggler_delay_ns < 0 or not 0 <= (spec.straggler_rank or 0) < spec.world_size or faults.bad(spec):
        raise ValueError(f"steps, microbatches, layers must be >= 1, straggler_delay_ns >= 0, straggler_rank a rank, faults valid: {spec}")
    if spec.comm_format not in FORMATS or spec.alltoalls < 0:
        raise ValueError(f"comm_format must be one of {', '.join(FORMATS)} and alltoalls >= 0: {spec}")
    return topo


def generate_job(out_dir, spec: SynthSpec | None = None) -> JobTruth:
    """Write a synthetic multi-rank Kineto trace set into ``out_dir`` and return its truth.

    Files (streamed event by event): ``out_dir/iteration_<N>/rank_<RRRR>_iter_<N>.pt.trace.json`` (``.json.gz``
    when ``spec.compress``) and ``out_dir/streamtrace_topology.json``. Returned times are int64 ns in each
    rank's local clock (= file ``ts`` * 1000, exactly).
    """
    spec = spec or SynthSpec()
    topo = check_spec(spec)
    out = Path(out_dir)
    (out / f"iteration_{spec.iteration}").mkdir(parents=True, exist_ok=True)
    (out / "streamtrace_topology.json").write_text(json.dumps(topo) + "\n")
    pgs = process_groups(spec, topo)
    colls, replies = simulate(spec, pgs)
    ranks = []
    for r in range(spec.world_size):   # replay each rank with its recorded replies, streaming its events to disk
        rel, head, tail = trace_frame(spec, pgs, r)
        with open(out / rel, "wb") as raw:
            gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) if spec.compress else None
            fh = io.BufferedWriter(gz, 1 << 20) if gz else raw
            fh.write(head)
            prog = RankProgram(spec, pgs, r, fh.write)
            replay(prog.run(), replies[r])
            fh.write(tail)
            fh.close()   # flushes; for .gz also writes the gzip trailer (raw stays open until the with ends)
        ranks.append(prog.truth(out / rel))
    for c in colls:   # true clock -> each rank's local clock
        c.start_ns = {r: t + ranks[r].clock_offset_ns for r, t in c.start_ns.items()}
        c.end_ns = {r: t + ranks[r].clock_offset_ns for r, t in c.end_ns.items()}
    return JobTruth(spec, out, topo, ranks, colls)
