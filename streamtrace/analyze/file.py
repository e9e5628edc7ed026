"""One trace file of ``streamtrace analyze`` (``analyze_file``): read it into a store (one
process, or byte ranges on several: ``streamtrace.events.parallel_ingest``), tell its ranks
apart (``rank_plan``: a merged multi-rank trace holds several), and analyse each rank into
its Parquet partitions (``streamtrace.analyze.rank.analyze_rank``)."""
from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass, replace

import pyarrow.parquet as pq

from ..events.dataset import PartitionWriter, StringPool, drop_extra_parts, partition_path, schemas
from ..events.ingest import ingest
from ..events.parallel_ingest import IngestSettings, ingest_parallel
from ..events.store import MemoryStore, SpillStore
from ..runtime.files import atomic_output, owner
from ..runtime.tuning import trim
from ..runtime.warmup import warm_trace
from ..topology.sources import load_topology
from ..trace.metadata import pg_config, trace_facts
from ..trace.nsys import is_sqlite
from ..trace.steps import KINETO_STEP_PATTERNS
from . import nsys as nsys_export
from .corrupt import corrupted_warning, without_overlong
from .options import AnalyzeOptions
from .opperf import CostedOps, write_op_perf
from .patterns import Patterns
from .cuda_sync import sync_table
from .outputs import CPU_COLLECTIVES, CUDA_SYNC, KERNELS, OPS, STEP_PATTERNS_KEY
from .rank import RankOutputs, RankSettings, RankSource, analyze_rank


def warm_analysis(folder, opt, ingest_only=False) -> None:
    """Load analyze's numba kernels (and pyarrow's Parquet writer) into this process by
    analysing the warm-up trace (``streamtrace.runtime.warmup``) with ``opt``'s options in
    a temporary folder in ``folder``;
    ``ingest_only``: only the parse kernels (reading that trace into a store).
    ``--jobs N`` on one big trace loads the parse kernels before forking the parse
    workers, and the rest while they parse: the track children, forked later, inherit
    it all, so the split run loads every kernel once, as the single-process run does."""
    with warm_trace(folder) as (d, src):
        if ingest_only:
            ingest(src, MemoryStore(opt.chunk_events), Patterns.load(opt.patterns).gpu_cats)
        else:
            analyze_file(src, d, 0, None, replace(opt, split_jobs=1))


def rank_plan(store, metadata, file_rank):
    """Which rank each stored key belongs to, and how to find a GPU event's device.

    * streamtrace merged traces: rank from ``args.rank``; device and original pid from
      the recorded process map;
    * TraceFusion-style traces: rank from ``args.rank``;
    * Megatron-style merges (GPU and CPU events sharing pids 1..K): rank = pid - 1,
      device from the kernels' ``args.device``;
    * otherwise the whole file is ``file_rank``; device = the GPU event's pid.
    Returns ``({rank: [keys]}, device_mode, pmap)``."""
    st = metadata.get("streamtrace") if isinstance(metadata.get("streamtrace"), dict) else None
    pmap = {int(k): v for k, v in (st or {}).get("process_map", {}).items()} if st and st.get("kind") == "merged" \
        else {}
    keys = store.keys()
    ranks: dict = {}
    if any(k[1] >= 0 for k in keys):
        for k in keys:
            ranks.setdefault(k[1] if k[1] >= 0 else file_rank, []).append(k)
        return ranks, "pmap" if pmap else "pid", pmap
    gpu_pids = {k[2] for k in keys if k[0] == "gpu"}
    cpu_pids = {k[2] for k in keys if k[0] == "cpu"}
    # Megatron's merge gives every event of rank r pid r + 1, so GPU events share
    # their pid with CPU events, and the pids are 1..K; in one rank's own trace GPU pids are
    # device indices that carry no CPU events (GPU annotations are not stored as CPU events)
    # beside the process's own pid, a large number -- a stray CPU event on a device's pid
    # does not make it a merge.
    if len(cpu_pids) > 1 and gpu_pids and gpu_pids <= cpu_pids and min(cpu_pids) >= 1 \
            and max(cpu_pids) <= 2 * len(cpu_pids):
        for k in keys:
            ranks.setdefault(k[2] - 1, []).append(k)
        return ranks, "args", {}
    return {file_rank: keys}, "pmap" if pmap else "pid", pmap


def gpu_keys(store, keys) -> list:
    """``analyze --gpu-only``: the GPU keys of ``keys`` (GPU events and GPU annotations); the CPU
    keys' rows are dropped from ``store`` unread (a Kineto trace's CPU events are parsed and stored
    with the rest: the rank plan of a Megatron-style merge needs their pids)."""
    for k in keys:
        if k[0] == "cpu":
            store.drop(k)
    return [k for k in keys if k[0] != "cpu"]


def _write_cuda_sync(t, outdir, rank, iteration) -> None:
    """``cuda_sync/`` of one rank (``streamtrace.analyze.cuda_sync``), written only when it has rows
    (an earlier run's file is removed otherwise)."""
    path = partition_path(outdir, CUDA_SYNC, rank, iteration)
    if t.num_rows:
        with atomic_output(path, compress=False) as f:
            pq.write_table(t, f, compression="zstd")
    else:
        path.unlink(missing_ok=True)


def _step_record(pats) -> dict:
    """``{"step_patterns": [...]}``: the step patterns the rank's steps were found by, for the later
    stages (``streamtrace.aggregate.steps``); ``{}`` for the Kineto default, which they take when none is
    recorded (so a ProfilerStep trace's summary.json is as before)."""
    return {} if list(pats.spec["step"]) == KINETO_STEP_PATTERNS else {STEP_PATTERNS_KEY: list(pats.spec["step"])}


@dataclass
class _Ingested:
    """One trace file read into a store (``_ingest_file``): the store, its string ``table`` and
    collective rows, the trace's metadata (dict), the file's warnings (list of str), the count of
    complete events dropped for their time (``unusable``) and of negative durations, the Nsight
    export's facts (``nsys``, None for Kineto) and the op costs read in the same pass (``costed``)."""
    store: object
    table: object
    comm_rows: object
    meta: dict
    warnings: list
    unusable: int
    negative: int
    nsys: object = None
    costed: object = None


def _ingest_file(path, outdir, opt, pats, spill, file_rank, progress) -> _Ingested:
    """Read ``path`` into a store: an Nsight Systems export by content, a Kineto trace in byte ranges on
    ``opt.split_jobs`` processes, else in this one (``spill``: the chunked store's folder or None).
    Raises ``TraceError`` for an unreadable file."""
    if is_sqlite(path):                              # an Nsight Systems export: read by content
        store = SpillStore(spill.name, opt.chunk_events) if spill else MemoryStore(opt.chunk_events)
        nsys = nsys_export.read_export(path, store, file_rank, opt, progress)
        return _Ingested(store, nsys.table, nsys.comm_rows, {}, nsys_export.warnings_of(nsys), 0, 0, nsys)
    split = None
    if opt.split_jobs > 1:
        warm_analysis(outdir, opt, ingest_only=True)  # before forking: the workers inherit the kernels
        settings = IngestSettings(pats.gpu_cats, opt.salvage, spill.name if spill else None, opt.chunk_events)
        split = ingest_parallel(path, outdir, opt.split_jobs, settings,
                                while_parsing=lambda: warm_analysis(outdir, opt))
    if split is not None:
        got = _Ingested(split.store, split.table, split.comm_rows, split.metadata, split.warnings,
                        split.unusable_times, split.negative_durations)
    else:                                            # one process (also: a file that cannot be split)
        store = SpillStore(spill.name, opt.chunk_events) if spill else MemoryStore(opt.chunk_events)
        ops = CostedOps() if opt.op_perf and not opt.gpu_only else None     # the op costs: in the same pass
        table, comm_rows, reader = ingest(path, store, pats.gpu_cats, opt.salvage, progress,
                                          on_batch=ops.add if ops is not None else None)
        got = _Ingested(store, table, comm_rows, reader.metadata, reader.warnings, reader.unusable_times,
                        reader.negative_durations, None, (ops.rows(), reader.metadata) if ops is not None else None)
        del reader                                   # and its last input block
    if got.unusable:
        got.warnings = got.warnings + [f"{path}: {got.unusable:,} complete event(s) dropped: ts or dur missing, ts "
                                       f"negative, not a number or beyond int64 nanoseconds"]
    return got


@functools.lru_cache(maxsize=4)
def run_topology(path):
    """``load_topology(path)``, read once per process for the files it analyses: the topology of a
    job lists every rank's groups, so reading it per file was quadratic in the world size (4,096
    ranks: ~60 of the epilogue's 251 analyze CPU-s).  Shared, not copied: the analysis only looks
    groups up in it.  ``analyze`` clears it at the start of a run (a file changed since is read
    again)."""
    return load_topology(path)


def analyze_file(path, outdir, file_rank, iteration, opt: AnalyzeOptions, progress=None) -> list[dict]:
    """Analyse one trace file (any number of ranks inside) into ``outdir``: its Parquet partitions
    (``kernels/`` and ``ops/``, ``partition_path``) and one summary
    dict per rank (``rank``, ``source``, ``iteration``, ``warnings`` and
    ``analyze_rank``'s keys).  ``file_rank``: the rank of a file that
    holds one; ``progress(bytes read)``: called per block.  Raises
    ``TraceError`` for an unreadable file, nothing written for it."""
    pats = Patterns.load(opt.patterns).with_step(opt.step_pattern)
    if not opt.step_pattern and is_sqlite(path):
        pats = pats.for_export()                         # its NVTX step ranges too (streamtrace.trace.steps)
    topo = run_topology(opt.topology) if opt.topology else None
    spill = tempfile.TemporaryDirectory(prefix=f".streamtrace-spill.{owner()}.", dir=outdir) if opt.chunked else None
    try:
        got = _ingest_file(path, outdir, opt, pats, spill, file_rank, progress)
        store, table, comm_rows, meta, nsys = got.store, got.table, got.comm_rows, got.meta, got.nsys
        unusable, negative, warnings = got.unusable, got.negative, got.warnings
        trim()
        ranks, device_mode, pmap = rank_plan(store, meta, file_rank)
        kschema, oschema = schemas()
        pool = StringPool(table.strings)
        ops_pools = {"name": pool, "cat": pool}
        out = []
        for rank, keys in sorted(ranks.items()):
            keys = gpu_keys(store, keys) if opt.gpu_only else keys

            def open_kernels(pools, part=0, rank=rank):
                return PartitionWriter(outdir, rank, iteration, kschema, KERNELS, pools, part=part)

            def open_ops(part, rank=rank):
                return PartitionWriter(outdir, rank, iteration, oschema, OPS, ops_pools, part=part)
            def write_cpu_collectives(t, rank=rank):
                if t.num_rows:
                    path = partition_path(outdir, CPU_COLLECTIVES, rank, iteration)
                    with atomic_output(path, compress=False) as f:
                        pq.write_table(t, f, compression="zstd")
            if nsys is None and not opt.gpu_only:             # newer Kineto's cuda_sync events, if any
                _write_cuda_sync(sync_table(store, keys, comm_rows, table.strings, device_mode, pmap), outdir, rank,
                                 iteration)
            for name in (KERNELS, OPS):                   # an earlier run's part-1.. files
                drop_extra_parts(outdir, name, rank, iteration, 1)
            facts = trace_facts(meta, rank)
            rstore, overlong = without_overlong(store, keys)      # CUPTI's corrupted durations (issue 33)
            summ = analyze_rank(RankSource(rstore, keys, comm_rows, table, rank, device_mode, pmap),
                                RankSettings(pats, topo, pg_config(meta, rank), facts["world_size"] or -1,
                                             opt.chunk_events, spill.name if spill else None, opt.split_jobs),
                                RankOutputs(open_ops, open_kernels, pool, write_cpu_collectives))
            if nsys is not None:
                facts = nsys_export.rank_facts(nsys, rank, [int(d) for d in summ["devices"]])
            out.append({"rank": rank, "source": str(path), "iteration": iteration, **summ,
                        "dropped_for_time": unusable,     # the file's (issue 33): counted, said in warnings
                        "corrupted_durations": {"negative": negative, "longer_than_trace": overlong},
                        **_step_record(pats),             # the step names the later stages take
                        "trace_metadata": facts, "warnings": (warnings if nsys is None or len(out) == 0 else [])
                        + ([corrupted_warning(path, negative if not out else 0, overlong)]
                           if overlong or (negative and not out) else [])})
            if nsys is not None:
                out[-1]["nsys"] = nsys_export.export_facts(nsys, rank)
        if opt.op_perf and nsys is None and not opt.gpu_only:   # per-op FLOPs/bytes (a pass of its own when split)
            write_op_perf(path, outdir, sorted(ranks), iteration, got.costed)
        return out
    finally:
        if spill is not None:
            spill.cleanup()
