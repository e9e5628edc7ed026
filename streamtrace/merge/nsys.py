"""``streamtrace merge`` of Nsight Systems exports (:func:`merge_exports`): their rows written as a
Perfetto-loadable Chrome trace with :class:`~streamtrace.trace.writer.TraceWriter`, in the merged
layout of :mod:`streamtrace.merge.pids` (``Rank r · GPU d (name)`` / ``Rank r · CPU (host h, pid
p)`` processes, pids ``1 + rank * PID_STRIDE + slot``, correlations ``rank * 2**40 + id``), every
file's times shifted onto one clock by its session start (``utcEpochNs``).  Memory: one batch of
rows at a time."""
from __future__ import annotations

import time

from ..trace.nsys import KINDS, NsysExport
from ..trace.writer import TraceWriter, us_fragment
from .pids import PID_STRIDE, process_meta_events, unique_id

GPU_SLOT, CPU_SLOT = 100, 0


def merge_exports(files, output, opt, rank_map=None) -> dict:
    """Write the exports ``files`` (:class:`~streamtrace.trace.discover.TraceFile` s) into ``output``;
    each export's processes ranked as ``analyze`` ranks them (the first file's from 0, the next
    after them).  ``opt.gpu_only``: GPU rows only; ``opt.ranks``: only those ranks; the time filters
    and alignments of Kineto traces are not applied (a warning says so).  Returns merge's summary dict (the keys of
    :func:`~streamtrace.merge.run.merge_files`; ``validation`` None, ``streamtrace validate`` checks
    the output).  Raises :class:`~streamtrace.runtime.errors.TraceError` for an unreadable export."""
    t0 = time.time()
    unapplied = [f for f, off in (("--align " + str(opt.align), opt.align != "global"), ("--steps", opt.steps),
                                  ("--window-ms", opt.window_ms), ("--drop-cat", opt.drop_cat)) if off]
    warnings = [f"Nsight Systems exports: {', '.join(unapplied)} not applied (they are for Kineto traces)"] \
        if unapplied else []
    exports, base = [], 0
    for tf in files:
        ex = NsysExport(tf.path, rank_map, base)
        base = max([base] + [p.rank + 1 for p in ex.processes])
        exports.append(ex)
    starts = [ex.session_start_ns for ex in exports if ex.session_start_ns is not None]
    origin = min(starts) if starts else 0
    meta = {"displayTimeUnit": "ms", "baseTimeNanoseconds": origin,
            "streamtrace": {"kind": "merged", "source": "nsys", "inputs": [tf.path for tf in files]}}
    ranks, n_out, n_in, gpu_seen = set(), 0, 0, False
    with TraceWriter(output, metadata=meta) as w:
        for ex in exports:
            shift = (ex.session_start_ns - origin) if ex.session_start_ns is not None else 0
            rank_of = {p.key: p for p in ex.processes if opt.ranks is None or p.rank in opt.ranks}
            default = None if ex.gpu_by_pid or not ex.processes else ex.processes[0].key
            seen: dict = {}
            for gpu, batches in ((True, ex.gpu_batches()), (False, ex.cpu_batches())):
                if not gpu and opt.gpu_only:
                    break
                for b in batches:
                    n_in += len(b)
                    names = ex.names(set(b["name"].tolist()))
                    evs = []
                    for r in b.tolist():
                        ts, dur, kind, name, proc, tid, dev, stream, corr, _ = r
                        p = rank_of.get(default if gpu and default is not None else proc)
                        if p is None:
                            continue
                        slot = GPU_SLOT + dev if gpu else CPU_SLOT
                        pid = 1 + p.rank * PID_STRIDE + slot
                        seen[pid] = {"rank": p.rank, "pid": dev if gpu else p.pid, "kind": "gpu" if gpu else "cpu",
                                     "device": dev if gpu else None, "slot": slot, "host": p.host}
                        args = {"rank": p.rank}
                        if corr >= 0:
                            args["correlation"], args["raw correlation"] = unique_id(p.rank, corr), corr
                        if gpu:
                            args["device"], args["stream"] = dev, stream
                        evs.append({"ph": "X", "cat": KINDS[kind], "name": names[name], "pid": pid,
                                    "tid": stream if gpu else tid, "ts": us_fragment(ts + shift),
                                    "dur": us_fragment(dur), "args": args})
                    w.write_many(evs)
                    n_out += len(evs)
            gpu_seen |= any(v["kind"] == "gpu" for v in seen.values())
            for rank in sorted({v["rank"] for v in seen.values()}):
                pm = {k: v for k, v in sorted(seen.items()) if v["rank"] == rank}
                host = next((f"{v['host']}" for v in pm.values() if v["kind"] == "cpu"), None)
                w.write_many(process_meta_events(pm, rank, host, ex.gpus, shift))
                ranks.add(rank)
            warnings += ex.warnings + ex.notices
            if ex.unusable:
                warnings.append(f"{ex.path}: {ex.unusable:,} row(s) without a usable start/end left out")
            ex.close()
    return {"output": str(output), "ranks": sorted(ranks), "iteration": files[0].iteration, "events_in": n_in,
            "events_out": n_out, "bytes_in": sum(tf.size for tf in files), "bytes_out": output.stat().st_size,
            "seconds": time.time() - t0, "jobs": 1, "warnings": warnings, "split": {}, "ranges_redone": 0,
            "worker_mb_per_s": [], "cpu_only": not gpu_seen, "validation": None}
