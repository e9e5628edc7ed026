"""Options of ``streamtrace analyze``."""
from __future__ import annotations

from dataclasses import dataclass

from ..events.store import CHUNK_EVENTS
from ..trace.ranges import SPLIT_THRESHOLD


@dataclass
class AnalyzeOptions:
    """Options of ``streamtrace.analyze.analyze`` (the ``streamtrace analyze`` flags).

    Attributes:
        jobs: worker processes; 0 = all cores.  Several files: one file per worker; one file of
            at least ``split_threshold`` bytes: its parse and its analysis use every worker.
        chunked: keep the events in spill files on disk instead of memory (same output).
        chunk_events: events held at once (rows per stored block, per sorted run, per analysis
            step); default ``CHUNK_EVENTS`` (32,768).
        patterns: path of a TOML file overriding the classification patterns
            (``streamtrace.analyze.patterns``); None: the defaults.
        topology: a topology file or trace folder (``streamtrace.topology.load_topology``),
            for the parallel dimension of each collective; None: process-group names and the
            launching stack only.
        salvage: on a truncated file keep every complete event before the cut.
        progress: show progress bars; None = only when stderr is a terminal.
        rank_map: path of a ``--rank-map`` file (JSON ``{file: rank}`` or ``<file> <rank>`` lines).
        scheduler: dask.distributed scheduler address (or ``$STREAMTRACE_SCHEDULER``).
        split_jobs: > 1: parse one big file in byte ranges with this many processes (set by
            ``analyze`` itself; 1 otherwise).
        split_threshold: bytes from which one file given alone is split (256 MiB).
        step_pattern: a regular expression naming the annotation (Kineto ``user_annotation`` or NVTX
            range) that marks a training step, its first group the step number; None:
            ``ProfilerStep#N``.
        executor: any ``concurrent.futures.Executor`` to run the files on (e.g. a dask
            client's ``get_executor()``); None: a local process pool.
        op_perf: also write ``op_perf/`` (per-op FLOPs, bytes and roofline from the recorded shapes,
            ``streamtrace.analyze.opperf``; one more pass over each file); default False.
        gpu_only: only the GPU activity (kernels, memcpy, memset, GPU annotations): the per-device
            metrics and the kernels rows, without CPU ops, call trees, launch links, steps and
            phases (``summary.json`` says so: ``"gpu_only": true``); an Nsight Systems export's CPU
            tables (runtime calls, NVTX ranges) are not read at all.  Default False.
    """
    jobs: int = 0
    chunked: bool = False
    chunk_events: int = CHUNK_EVENTS
    patterns: str | None = None
    topology: str | None = None
    salvage: bool = False
    progress: bool | None = None
    rank_map: str | None = None
    scheduler: str | None = None
    split_jobs: int = 1
    split_threshold: int = SPLIT_THRESHOLD
    executor: object = None
    op_perf: bool = False
    step_pattern: str | None = None
    gpu_only: bool = False
