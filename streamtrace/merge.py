"""``streamtrace merge``: many rank traces -> one Perfetto-loadable trace, in flat memory.

Each rank is streamed by :class:`~streamtrace.reader.TraceReader` in a worker
process that rewrites its events and writes them to its own *segment* file
(a gzip member when the output is ``.gz``); the segments are then stitched by
byte copy between a header and a trailer, so peak memory depends on the batch
size only, never on the input size or the number of ranks.  With several workers,
a rank trace of at least ``MergeOptions.split_threshold`` bytes is rewritten in
byte ranges by several of them, one segment per range, with the same output
(:mod:`streamtrace.mergesplit`).

Rewrites (all documented in the README):
  * processes: every (rank, original pid) becomes a distinct process with pid
    ``1 + rank * PID_STRIDE + slot`` (slot 0-99: CPU processes, 100 + d: GPU device d,
    900+: string pids such as ``"Spans"``), named ``Rank 3 · CPU (host h, pid 41523)`` /
    ``Rank 3 · GPU 3 (NVIDIA H100 80GB HBM3)`` and sorted rank by rank, CPU first;
    Kineto's own ``process_name``/``process_labels``/``process_sort_index`` events are
    replaced by these;
  * ids: flow ``id`` (ac2g, fwdbwd, ...), ``args.correlation`` and ``args["External id"]``
    become ``rank * 2**40 + id`` (see :func:`unique_id`), originals kept as
    ``args["raw correlation"]`` / ``args["raw External id"]`` / ``args["raw id"]``;
    every event gets ``args.rank``;
  * time: ts is shifted by ``baseTimeNanoseconds(rank) - min(baseTimeNanoseconds)`` so all
    ranks share one clock (or, with ``align="first-step"``, so every rank's first
    ``ProfilerStep#`` starts together), and written as exact decimal microseconds.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path


from . import __version__
from . import mergesplit as MS
from . import parallel
from . import rankmerge as RM
from .discover import TraceFile, discover
from .errors import StreamtraceError, TraceError
from .io import atomic_output
from .parallel import run_tasks
from .rankmerge import (FLOW_PHASES, GPU_CATS, ID_BITS, PID_STRIDE, PROCESS_META, RankPlan,  # noqa: F401
                        _device_names, _hashable, _host, merge_rank, rewrite_dict, unique_id)
from .reader import TraceReader, read_trailer
from .split import SPLIT_THRESHOLD, cleanup
from .writer import dumps_event

@dataclass
class MergeOptions:
    """Options of :func:`merge` (see ``streamtrace merge --help`` for each)."""
    ranks: set | None = None
    drop_cat: frozenset = frozenset()
    steps: tuple | None = None            # (first, last) ProfilerStep numbers, inclusive
    gpu_only: bool = False
    window_ms: tuple | None = None        # (start, end) ms from the start of the merged timeline
    align: str = "global"                 # "global" | "first-step"
    iteration: int | None = None
    jobs: int = 0                         # 0 = all cores
    salvage: bool = False
    progress: bool | None = None          # None = only on a terminal
    compresslevel: int = 1
    scheduler: str | None = None          # dask scheduler address (or $STREAMTRACE_SCHEDULER)
    split_threshold: int | None = SPLIT_THRESHOLD   # with jobs > 1, rewrite traces this big (bytes,
                                          # uncompressed) in byte ranges on several workers; None: never

    def needs_survey(self):
        return self.align == "first-step" or self.steps is not None or self.window_ms is not None


@dataclass
class Survey:
    """A full pre-pass over one rank: metadata, time extent and ProfilerStep windows (ns)."""
    metadata: dict
    first_ns: int | None
    steps: dict
    flows: dict


def survey_rank(path, want_flows=False, salvage=False, byte_range=None) -> Survey:
    """Read one rank fully (a pre-pass needed by ``--steps``, ``--window`` and
    ``--align first-step``): ProfilerStep windows ``{N: (start_ns, end_ns)}``, the
    earliest ts, and per flow ``(cat, id) -> (min ts, max ts)`` when ``want_flows``.
    ``byte_range``: survey only that range of a plain file's events (no metadata;
    see :func:`streamtrace.mergesplit.combine_surveys`)."""
    r = TraceReader(path, salvage=salvage, byte_range=byte_range)
    first = None
    steps, flows = {}, {}
    for b in r.raw_batches():
        ts, dur, flags = b.ts_ns.tolist(), b.dur_ns.tolist(), b.flags.tolist()
        for i, ev in enumerate(b.events):
            if not flags[i] & 1:
                continue
            t = ts[i]
            ph = ev.get("ph")
            if ph != "M" and (first is None or t < first):
                first = t
            name = ev.get("name")
            if ph == "X" and isinstance(name, str) and name.startswith("ProfilerStep#") \
                    and ev.get("cat") not in GPU_CATS:
                try:
                    n = int(name[13:])
                except ValueError:
                    continue
                lo, hi = steps.get(n, (t, t + dur[i]))
                steps[n] = (min(lo, t), max(hi, t + dur[i]))
            elif want_flows and ph in FLOW_PHASES:
                k = (ev.get("cat"), _hashable(ev.get("id")))
                lo, hi = flows.get(k, (t, t))
                flows[k] = (min(lo, t), max(hi, t))
    return Survey(r.metadata, first, steps, flows)



# -- orchestration ------------------------------------------------------------

def _metadata_task(path, head, survey, want_flows, salvage):
    if survey:
        return survey_rank(path, want_flows, salvage)
    if "baseTimeNanoseconds" in head:
        return Survey(head, None, {}, {})
    trailer = read_trailer(path)
    if trailer is not None:
        return Survey({**head, **trailer}, None, {}, {})
    return Survey(TraceReader(path, salvage=True).read_metadata(), None, {}, {})


def plan_time(files, surveys, opt):
    """Per-rank time shift and keep-window (ns).  Returns ``(out_base, shifts, keeps)``.

    Raises :class:`StreamtraceError` when ``--steps`` / ``--align first-step`` need a
    ProfilerStep a rank does not have."""
    bases = {tf.rank: int(s.metadata.get("baseTimeNanoseconds") or 0) for tf, s in zip(files, surveys)}
    out_base = min(bases.values())
    shifts = {r: b - out_base for r, b in bases.items()}
    if opt.align == "first-step":
        firsts = {}
        for tf, s in zip(files, surveys):
            if not s.steps:
                raise StreamtraceError(f"{tf.path}: no ProfilerStep# event, cannot --align first-step")
            firsts[tf.rank] = s.steps[min(s.steps)][0]
        target = min(firsts[r] + shifts[r] for r in firsts)
        shifts = {r: target - firsts[r] for r in firsts}
    keeps = {tf.rank: None for tf in files}
    if opt.steps is not None:
        a, b = opt.steps
        for tf, s in zip(files, surveys):
            if a not in s.steps or b not in s.steps:
                have = ", ".join(map(str, sorted(s.steps))) or "none"
                raise StreamtraceError(f"{tf.path}: --steps {a}-{b} not in this rank's ProfilerSteps ({have})")
            keeps[tf.rank] = (s.steps[a][0], s.steps[b][1])
    if opt.window_ms is not None:
        starts = [s.first_ns + shifts[tf.rank] for tf, s in zip(files, surveys) if s.first_ns is not None]
        t0 = min(starts) if starts else 0
        lo_g, hi_g = t0 + int(opt.window_ms[0] * 1e6), t0 + int(opt.window_ms[1] * 1e6)
        for tf in files:
            lo, hi = lo_g - shifts[tf.rank], hi_g - shifts[tf.rank]
            if keeps[tf.rank]:
                lo, hi = max(lo, keeps[tf.rank][0]), min(hi, keeps[tf.rank][1])
            keeps[tf.rank] = (lo, hi)
    return out_base, shifts, keeps


def _append_file(src, dst):
    """Append file ``src`` to the open binary file ``dst``, in the kernel when the
    platform allows (``os.copy_file_range``), else through a buffer."""
    dst.flush()
    with open(src, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        done = 0
        if hasattr(os, "copy_file_range"):
            # a failure part-way raises: the caller's atomic output is then discarded
            while done < size:
                n = os.copy_file_range(f.fileno(), dst.fileno(), size - done)
                if n == 0:
                    break
                done += n
            dst.seek(0, os.SEEK_END)
            f.seek(done)
        shutil.copyfileobj(f, dst, 1 << 22)


def _piece(data: bytes, compress, level):
    import gzip
    return gzip.compress(data, compresslevel=level, mtime=0) if compress else data


def merge_files(files: list[TraceFile], output, opt: MergeOptions | None = None, log=None) -> dict:
    """Merge the given rank traces (one iteration) into ``output`` (``.json`` or
    ``.json.gz``).  Returns a summary dict (ranks, events in/out, bytes, seconds,
    output).  Raises :class:`StreamtraceError` / :class:`TraceError` on bad input; the
    output is then not created.

    With more than one worker, a trace of at least ``opt.split_threshold`` bytes is
    rewritten in byte ranges by several workers (:mod:`streamtrace.mergesplit`); the
    output is the same."""
    opt = opt or MergeOptions()
    t_start = time.time()
    output = Path(output)
    want = opt.jobs or os.cpu_count() or 1
    splits = {}
    fallback = False
    try:
        big = [i for i, tf in enumerate(files) if want > 1 and opt.split_threshold is not None
               and MS.size_hint(tf.path, tf.size) >= opt.split_threshold]
        if big:
            output.parent.mkdir(parents=True, exist_ok=True)
            prepared = run_tasks(MS.prepare, [(files[i].path, str(output.parent), want, opt.split_threshold)
                                              for i in big], min(want, len(big)), scheduler=opt.scheduler)
            splits = {i: sf for i, sf in zip(big, prepared) if sf is not None}
        return _merge_files(files, output, opt, splits, t_start)
    except TraceError as e:
        # a range that fails to parse: the unsplit merge reports the error exactly
        if not any(e.path in (sf.path, files[i].path) for i, sf in splits.items()):
            raise
        fallback = True
    finally:
        for sf in splits.values():
            cleanup(sf.tmp)
    if fallback:
        return merge_files(files, output, replace(opt, split_threshold=None))


def _merge_files(files, output, opt, splits, t_start):
    compress = output.name.endswith(".gz")
    want = opt.jobs or os.cpu_count() or 1
    jobs = max(1, min(want, len(files) + sum(len(sf.ranges) - 1 for sf in splits.values())))
    survey = opt.needs_survey()
    want_flows = opt.window_ms is not None or opt.steps is not None
    tasks, owner = [], []           # metadata / survey tasks; owner: file index of each
    for i, tf in enumerate(files):
        if i not in splits:
            tasks.append((_metadata_task, (tf.path, tf.head, survey, want_flows, opt.salvage)))
            owner.append(i)
        elif survey:
            for r in splits[i].ranges:
                tasks.append((survey_rank, (splits[i].path, want_flows, False, r)))
                owner.append(i)
    done = run_tasks(_call, tasks, jobs, scheduler=opt.scheduler)
    surveys = []
    for i, tf in enumerate(files):
        mine = [s for s, o in zip(done, owner) if o == i]
        if i not in splits:
            surveys.append(mine[0])
        elif survey:
            surveys.append(MS.combine_surveys(mine, splits[i].meta))
        else:
            surveys.append(Survey(MS.survey_meta(tf, splits[i]), None, {}, {}))
    out_base, shifts, keeps = plan_time(files, surveys, opt)
    output.parent.mkdir(parents=True, exist_ok=True)
    stem = str(output.parent / f".{output.name}.{os.getpid()}.rank")
    plans = []
    for tf, s in zip(files, surveys):
        keep = keeps[tf.rank]
        kept_flows = None
        if keep is not None:
            kept_flows = {k for k, (a, b) in s.flows.items() if a >= keep[0] and b <= keep[1]}
        plans.append(RankPlan(tf.path, tf.rank, shifts[tf.rank], f"{stem}{tf.rank}.seg",
                              compress, opt.compresslevel, frozenset(opt.drop_cat), opt.gpu_only, keep,
                              kept_flows, opt.salvage, _host(s.metadata), _device_names(s.metadata)))
    # the rewrite: one task per unsplit rank, one per byte range of a split rank
    tasks, sizes, where = [], [], []         # where: the file index of each task
    for i, (tf, p) in enumerate(zip(files, plans)):
        if i not in splits:
            tasks.append(("rank", p, None, None, None, None))
            sizes.append(tf.size)
            where.append(i)
            continue
        for k, r in enumerate(splits[i].ranges):
            tasks.append(("range", p, splits[i].path, r, f"{p.segment}.{k}", None))
            sizes.append(r[1] - r[0])
            where.append(i)
    total = sum(sizes)
    show = sys.stderr.isatty() if opt.progress is None else opt.progress
    arr = mp.Array("q", len(tasks), lock=False)
    bar = None
    if show:
        from tqdm import tqdm
        bar = tqdm(total=total, unit="B", unit_scale=True, desc="merge", file=sys.stderr)

    def tick():
        if bar is not None:
            bar.n = min(total, sum(arr))
            bar.refresh()
    temps = [p.segment for p in plans] + [t[4] for t in tasks if t[4]]
    try:
        if tasks and not parallel.scheduler_address(opt.scheduler):
            RM.warm_kernels(plans[0])        # forked workers inherit the loaded kernels
        res_t = _run_largest_first(tasks, sizes, range(len(tasks)), jobs, arr, tick, opt.scheduler)
        of = {}                     # file index -> its task indices, in file order
        for j, i in enumerate(where):
            of.setdefault(i, []).append(j)
        results = [None] * len(files)
        for i in range(len(files)):
            if i not in splits:
                results[i] = dict(res_t[of[i][0]], segments=[plans[i].segment])
        # split ranks: settle the pid slots; redo the ranges whose provisional slots were wrong
        redo = []
        for i in splits:
            _, final, wrong = MS.settle_pids(plans[i].rank, [res_t[j] for j in of[i]])
            redo += [(of[i][k], final[k]) for k in wrong]
        if redo:
            again = _run_largest_first([tasks[j][:5] + (f,) for j, f in redo], [sizes[j] for j, _ in redo],
                                       [j for j, _ in redo], jobs, arr, tick, opt.scheduler)
            for (j, _), res in zip(redo, again):
                res_t[j] = res
        for i, sf in splits.items():
            parts = [res_t[j] for j in of[i]]
            pids, _, wrong = MS.settle_pids(plans[i].rank, parts)
            if wrong:
                raise RuntimeError(f"rank {plans[i].rank}: pid slots did not settle")
            results[i] = MS.finish_rank(plans[i], sf, parts, pids, plans[i].segment)
        if any(int(res["metadata"].get("baseTimeNanoseconds") or 0) != int(s.metadata.get("baseTimeNanoseconds") or 0)
               for s, res in zip(surveys, results)):
            # the quick trailer peek missed the base time: redo with the real metadata
            for tf, res in zip(files, results):
                tf.head = res["metadata"]
            return _merge_files(files, output, opt, splits, t_start)
        if bar is not None:
            bar.n = total
            bar.close()
        meta = _merged_metadata(files, results, shifts, out_base, opt, output)
        with atomic_output(output, compress=False) as f:
            f.write(_piece(b'{"traceEvents":[', compress, opt.compresslevel))
            first = True
            for res in results:
                if not res["events_out"]:
                    continue
                for seg in res["segments"]:
                    if not first:
                        f.write(_piece(b",", compress, opt.compresslevel))
                    _append_file(seg, f)
                    first = False
            trailer = b"]" + b"".join(b"," + dumps_event(k) + b":" + dumps_event(v) for k, v in meta.items()) + b"}\n"
            f.write(_piece(trailer, compress, opt.compresslevel))
    finally:
        for t in temps:
            cleanup(t)
    warnings = [w for r in results for w in r["warnings"]]
    busy = {}                                   # worker pid -> [bytes, seconds]
    for r in res_t:
        w = busy.setdefault(r["task_stats"][0], [0, 0.0])
        w[0] += r["task_stats"][1]
        w[1] += r["task_stats"][2]
    return {"output": str(output), "ranks": [tf.rank for tf in files], "iteration": files[0].iteration,
            "events_in": sum(r["events_in"] for r in results),
            "events_out": sum(r["events_out"] for r in results),
            "bytes_in": sum(r["bytes_in"] for r in results), "bytes_out": output.stat().st_size,
            "seconds": time.time() - t_start, "jobs": jobs, "warnings": warnings,
            "split": {files[i].rank: len(sf.ranges) for i, sf in splits.items()}, "ranges_redone": len(redo),
            "worker_mb_per_s": [round(b / 1e6 / max(t, 1e-9), 1) for b, t in busy.values()]}


def _call(fn, args):
    return fn(*args)


def _run_task(kind, plan, src, byte_range, segment, final, idx):
    """Worker: one rewrite task (a whole rank, or one byte range of a split rank)."""
    from . import parallel
    shared = parallel.PROGRESS

    def report(n):
        shared[idx] = n
    progress = report if shared is not None else None
    t0 = time.perf_counter()
    if kind == "rank":
        res = merge_rank(plan, progress)
    else:
        res = MS.merge_range(plan, src, byte_range, segment, final, progress)
    # the worker's own account: bytes in, busy seconds (for "MB/s per worker")
    res["task_stats"] = (os.getpid(), (byte_range[1] - byte_range[0]) if byte_range else res["bytes_in"],
                         time.perf_counter() - t0)
    return res


def _run_largest_first(tasks, sizes, slots, jobs, arr, tick, scheduler):
    """Run rewrite tasks, the largest first (better balance); results in task order.
    ``slots``: each task's slot in the progress array ``arr``."""
    order = sorted(range(len(tasks)), key=lambda j: -sizes[j])
    slots = list(slots)
    res = run_tasks(_run_task, [(*tasks[j], slots[j]) for j in order], jobs, arr, tick,
                    scheduler=scheduler, retries=1)
    out = [None] * len(tasks)
    for j, r in zip(order, res):
        out[j] = r
    return out


def _merged_metadata(files, results, shifts, out_base, opt, output):
    first = results[0]["metadata"]
    ranks = []
    pmap = {}
    for tf, res in zip(files, results):
        m = res["metadata"]
        ranks.append({"rank": tf.rank, "source": os.path.abspath(tf.path), "iteration": tf.iteration,
                      "rank_source": tf.rank_source,
                      "baseTimeNanoseconds": m.get("baseTimeNanoseconds"), "time_shift_ns": shifts[tf.rank],
                      "distributedInfo": m.get("distributedInfo"), "deviceProperties": m.get("deviceProperties"),
                      "host": _host(m), "events_in": res["events_in"], "events_out": res["events_out"],
                      "truncated": res["truncated"]})
        pmap.update(res["process_map"])
    return {
        "schemaVersion": first.get("schemaVersion", 1),
        "displayTimeUnit": first.get("displayTimeUnit", "ms"),
        "baseTimeNanoseconds": out_base,
        "traceName": output.name,
        "streamtrace": {
            "version": __version__, "kind": "merged", "align": opt.align,
            "filters": {"ranks": sorted(opt.ranks) if opt.ranks else None, "drop_cat": sorted(opt.drop_cat),
                        "steps": list(opt.steps) if opt.steps else None, "gpu_only": opt.gpu_only,
                        "window_ms": list(opt.window_ms) if opt.window_ms else None},
            "id_transform": f"rank * 2**{ID_BITS} + raw id",
            "pid_transform": f"1 + rank * {PID_STRIDE} + slot",
            "ranks": ranks,
            "process_map": pmap,
        },
    }


def output_for_iteration(output: Path, iteration) -> Path:
    """``merged.json.gz`` -> ``merged_iter10.json.gz`` (one output per iteration)."""
    name = output.name
    for suf in (".json.gz", ".json"):
        if name.endswith(suf):
            return output.with_name(f"{name[:-len(suf)]}_iter{iteration}{suf}")
    return output.with_name(f"{name}_iter{iteration}")


def merge(inputs, output, opt: MergeOptions | None = None, rank_map=None) -> list[dict]:
    """Merge the rank traces found in ``inputs`` (files, folders, globs) into
    ``output``.  Files from several iterations are merged per iteration
    (``<output>_iter<N>.json[.gz]``) unless ``opt.iteration`` picks one.
    Returns one summary dict per output written."""
    opt = opt or MergeOptions()
    files = discover(inputs, rank_map)
    if not files:
        raise StreamtraceError(f"no trace files found in {', '.join(map(str, inputs))}")
    if opt.ranks:
        files = [f for f in files if f.rank in opt.ranks]
        if not files:
            raise StreamtraceError("--ranks selects none of the ranks found")
    groups = {}
    for f in files:
        groups.setdefault(f.iteration, []).append(f)
    if opt.iteration is not None:
        if opt.iteration not in groups:
            have = ", ".join(str(k) for k in groups if k is not None) or "none"
            raise StreamtraceError(f"no traces for iteration {opt.iteration} (found: {have})")
        groups = {opt.iteration: groups[opt.iteration]}
    output = Path(output)
    if len(groups) == 1:
        return [merge_files(next(iter(groups.values())), output, opt)]
    return [merge_files(g, output_for_iteration(output, it), opt) for it, g in sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))]
