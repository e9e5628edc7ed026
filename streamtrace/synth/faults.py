"""Faults with a known effect for the synthetic job (``streamtrace.synth.job``), so that the
critical path (``streamtrace.aggregate.critical_path``) can be checked against what was injected.
``SynthSpec(faults=(Fault(...), ...))``; each kind touches the generator at one place:

* ``slow_gemm``: rank ``rank``'s GEMM kernels (``fprop``, ``dgrad``, ``wgrad``) run ``factor`` x
  longer (the TP peers wait for it at every all-reduce);
* ``cpu_stall``: rank ``rank``'s main thread spends ``delay_ns`` in a data-loader op
  (``enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__``) at the start of every step,
  before its first launch (everyone else waits at the first collective);
* ``slow_send``: every point-to-point transfer sent by the pipeline stage of rank ``rank`` takes
  ``delay_ns`` longer (the next stage waits on its receives);
* ``slow_coll``: every collective with rank ``rank`` among its members (its groups' all-reduces,
  reduce-scatters, all-gathers, all-to-alls and its point-to-point transfers) takes ``factor`` x its
  time (latency + transfer: a slow link or NIC on that rank).

Times are int ns.  ``parse_fault`` reads the command line's ``KIND:RANK:VALUE``.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

KINDS = ("slow_gemm", "cpu_stall", "slow_send", "slow_coll")
GEMMS = ("fprop", "dgrad", "wgrad")
LOADER = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


@dataclass(frozen=True)
class Fault:
    """One injected fault (module docstring): ``kind``, ``rank``, ``factor`` (slow_gemm),
    ``delay_ns`` (cpu_stall, slow_send; int ns)."""
    kind: str
    rank: int
    factor: float = 1.0
    delay_ns: int = 0


def parse_fault(text: str) -> Fault:
    """``slow_gemm:RANK:FACTOR``, ``cpu_stall:RANK:NS``, ``slow_send:RANK:NS`` or
    ``slow_coll:RANK:FACTOR`` -> ``Fault``.  Raises ValueError for anything else."""
    parts = text.split(":")
    if len(parts) != 3 or parts[0] not in KINDS:
        raise ValueError(f"bad fault {text!r}: use slow_gemm:RANK:FACTOR, cpu_stall:RANK:NS, slow_send:RANK:NS or "
                         "slow_coll:RANK:FACTOR")
    kind, rank = parts[0], int(parts[1])
    if kind in ("slow_gemm", "slow_coll"):
        return Fault(kind, rank, factor=float(parts[2]))
    return Fault(kind, rank, delay_ns=int(parts[2]))


def bad(spec) -> bool:
    """Does a fault of ``spec`` (a SynthSpec) name an unknown kind, a rank outside the job, a
    factor < 1 or a delay < 0?"""
    return any(f.kind not in KINDS or not 0 <= f.rank < spec.world_size or f.factor < 1 or f.delay_ns < 0
               for f in spec.faults)


def kernel_factor(faults, rank: int, key: str) -> float:
    """How many times longer kernel ``key`` runs on ``rank``."""
    out = 1.0
    for f in faults:
        if f.kind == "slow_gemm" and f.rank == rank and key in GEMMS:
            out *= f.factor
    return out


def stall_ns(faults, rank: int) -> int:
    """The data-loader stall of ``rank`` at the start of a step (int ns, 0 none)."""
    return sum(f.delay_ns for f in faults if f.kind == "cpu_stall" and f.rank == rank)


@contextmanager
def stall(prog, tid):
    """A context that first writes the data-loader stall of rank ``prog.rank`` (a
    ``RankProgram``) on thread ``tid``, if it has one (an op of that
    length, the thread's cursor moved past it), then runs its body."""
    d = stall_ns(prog.spec.faults, prog.rank)
    if d:
        with prog.op(LOADER, tid):
            prog.cur[tid] += d
    yield


def coll_factor(spec, truth: dict) -> float:
    """How many times longer one collective of ``spec`` described by ``truth`` (its ``ranks``:
    members) takes: a ``slow_coll`` fault on one of its members."""
    out = 1.0
    for f in spec.faults:
        if f.kind == "slow_coll" and f.rank in truth["ranks"]:
            out *= f.factor
    return out


def send_delay_ns(spec, truth: dict) -> int:
    """Extra transfer time (int ns) of one collective of ``spec`` (a SynthSpec) described by
    ``truth`` (type, ranks = (src, dst) for a point-to-point transfer): a send from a slowed stage."""
    if truth["type"] != "sendrecv":
        return 0
    size = spec.tp * spec.dp                                    # ranks per pipeline stage
    return sum(f.delay_ns for f in spec.faults if f.kind == "slow_send" and f.rank // size == truth["ranks"][0] // size)
