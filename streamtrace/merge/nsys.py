"""``streamtrace merge`` of Nsight Systems exports (``merge_exports``): their rows written as a
Perfetto-loadable Chrome trace with ``TraceWriter``, in the merged
layout of ``streamtrace.merge.pids`` (``Rank r · GPU d (name)`` / ``Rank r · CPU (host h, pid
p)`` processes, pids ``1 + rank * PID_STRIDE + slot``, correlations and flow ids ``rank * 2**40 +
id``).

Two reads of each export: the pre-pass (``survey_export``: step
windows, earliest starts, NCCL kernels, flow candidates), then the rewrite.  Between them the time
plan of a Kineto merge (``plan_time``, with each export's session
start ``utcEpochNs`` as its ranks' ``baseTimeNanoseconds``; ``--align collectives`` through
``plan_clock_sync``): ``--steps``, ``--window``, ``--align``,
``--drop-cat``, ``--ranks`` and ``--gpu-only`` act as on Kineto traces.  Each CUDA runtime/driver
call gets an ``ac2g`` flow arrow (``ph`` ``s`` on the call, ``f`` with ``bp: "e"`` on its GPU row,
the first of each by start where a correlation id repeats: a graph launch) to the kernel, memcpy or
memset with its ``correlationId`` in the same process, as Kineto writes them.  Memory: one batch of
rows at a time plus the flow candidates (``nsys_survey``)."""
from __future__ import annotations

import sys
import time
from types import SimpleNamespace

import numpy as np
import orjson
from tqdm import tqdm

from ..events.sortedsets import sorted_distinct
from ..kernels.nsys_writer import NsysRows, event_text
from ..runtime.errors import StreamtraceError
from ..trace.discover import load_rank_map
from ..trace.nsys import KINDS, NsysExport, unowned_warning
from ..trace.nsys.counts import export_rows
from ..trace.steps import STEP_PATTERNS, step_regex, user_step_regex
from ..trace.writer import TraceWriter, dumps_events, us_fragment
from ..validate.check import PROBLEMS, validate
from .clocks import plan_clock_sync
from .nsys_survey import (FLOW_CAT, GPU_KINDS, KEY_SHIFT, LAUNCH_KINDS, Owners, kept_flow_keys, survey_export,
                          survey_tables)
from .pids import PID_STRIDE, process_meta_events, unique_id
from .survey import plan_time

GPU_SLOT, CPU_SLOT = 100, 0


def merge_exports(files, output, opt, rank_map=None) -> dict:
    """Write the exports ``files`` (``TraceFile`` s) into ``output``;
    each export's processes ranked as ``analyze`` ranks them (the first file's from 0, the next
    after them; ``rank_map``: ``{"<pid>" | "<file>:<pid>": rank}``, else read from
    ``opt.rank_map``).  ``opt``: ``MergeOptions`` (module
    docstring; the options that cannot apply to an export get a warning line each,
    ``unusable_options``).  Returns merge's summary dict (the keys of
    ``merge_files``; ``validation``: ``export_validation``, None
    when ``opt.validate`` is off).  Raises
    ``TraceError`` for an unreadable export,
    ``StreamtraceError`` when ``--steps`` / ``--align first-step``
    need a step a rank lacks."""
    t0 = time.time()
    warnings = unusable_options(opt)
    if rank_map is None and opt.rank_map:
        rank_map = load_rank_map(opt.rank_map)
    bar = _NoBar()
    exports, bases, base = [], [], 0
    for tf in files:
        ex = NsysExport(tf.path, rank_map, base)
        bases.append(base)
        base = max([base] + [p.rank + 1 for p in ex.processes])
        exports.append(ex)
    try:
        bar = _bar(opt.progress, sum(export_rows(tf.path) + export_rows(tf.path, survey_tables(opt)) for tf in files))
        rx = user_step_regex(opt.step_pattern) if opt.step_pattern else step_regex(STEP_PATTERNS)
        surveys = [survey_export(ex.path, rank_map, b, opt, rx, bar.update) for ex, b in zip(exports, bases)]
        plan = _time_plan(exports, surveys, opt)
        warnings += plan.warnings
        meta = {"displayTimeUnit": "ms", "baseTimeNanoseconds": plan.out_base,
                "streamtrace": {"kind": "merged", "source": "nsys", "inputs": [tf.path for tf in files],
                                "ranks": [{"rank": r, "source": src, "shift_ns": plan.shifts[r]}
                                          for r, src in sorted(plan.sources.items())]}}
        if plan.clock is not None:
            meta["streamtrace"]["clock_sync"] = {k: plan.clock[k] for k in ("method", "applied", "one_host")}
            meta["streamtrace"]["clock_offsets_ns"] = {str(r): v["offset_ns"] for r, v in plan.clock["ranks"].items()}
        counts = {"in": 0, "out": 0, "flows": 0}
        ranks, gpu_seen = set(), False
        with TraceWriter(output, metadata=meta, compresslevel=opt.compresslevel) as w:
            for ex, es in zip(exports, surveys):
                flows = kept_flow_keys(es.gpu, es.launch, plan.keeps)
                seen = _write_export(w, ex, opt, plan, flows, counts, bar.update)
                gpu_seen |= any(v["kind"] == "gpu" for v in seen.values())
                for rank in sorted({v["rank"] for v in seen.values()}):
                    pm = {k: v for k, v in sorted(seen.items()) if v["rank"] == rank}
                    host = next((f"{v['host']}" for v in pm.values() if v["kind"] == "cpu"), None)
                    w.write_many(process_meta_events(pm, rank, host, ex.gpus, plan.shifts[rank]))
                    ranks.add(rank)
                warnings += ex.warnings + ex.notices
                if ex.unusable:
                    warnings.append(f"{ex.path}: {ex.unusable:,} row(s) without a usable start/end left out")
                lost = counts.pop("unowned", 0)
                if lost:
                    warnings.append(unowned_warning(ex.path, lost))
    finally:
        bar.close()
        for ex in exports:
            ex.close()
    clock = plan.clock
    return {"output": str(output), "ranks": sorted(ranks), "iteration": files[0].iteration,
            "events_in": counts["in"], "events_out": counts["out"], "flows": counts["flows"],
            "bytes_in": sum(tf.size for tf in files), "bytes_out": output.stat().st_size,
            "seconds": time.time() - t0, "jobs": 1, "warnings": warnings, "split": {}, "ranges_redone": 0,
            "clock_offsets_ns": {r: v["offset_ns"] for r, v in clock["ranks"].items() if v["applied"]} if clock else {},
            "worker_mb_per_s": [], "cpu_only": not gpu_seen,
            "validation": export_validation(output) if opt.validate else None}


def export_validation(output) -> dict:
    """Merge's validation (the form of ``merged_validation``) of the
    merged trace of exports: the output validated in full.  Its ``bad_nesting`` is counted as the
    input's: merge writes each thread's CUDA calls and NVTX ranges as the export holds them, and NVTX
    start/end ranges need not nest; every other problem is one merge added (``ok`` False)."""
    rep = validate(output)
    out = {k: rep[k] for k in ("events", "tracks", "flows", "problems", "notices", "ok")}
    kept = dict.fromkeys(PROBLEMS, 0)
    kept["bad_nesting"] = out["problems"].get("bad_nesting", 0)
    added = {k: v for k, v in out["problems"].items() if k != "bad_nesting"}
    inp = {"events": 0, "tracks": 0, "flows": 0, "problems": kept, "notices": {}, "ok": not any(kept.values())}
    return {"input": inp, "output": out, "added": added, "ok": not any(added.values()), "exact": False}


def unusable_options(opt) -> list[str]:
    """One line per option given that cannot apply to an export (none is left silently unused)."""
    out = []
    if opt.salvage:
        out.append("Nsight Systems exports: --salvage not applied (it keeps the events before the cut of a truncated "
                   "JSON trace; an export is an SQLite database, read whole)")
    if opt.scheduler:
        out.append("Nsight Systems exports: --scheduler not used (exports are merged in this process)")
    return out


def _time_plan(exports, surveys, opt):
    """Shifts, keep-windows and clock of every kept rank (``plan_time`` and
    ``plan_clock_sync`` over the exports' ranks, each rank's ``baseTimeNanoseconds`` its
    export's session start)."""
    known = [ex.session_start_ns for ex in exports if ex.session_start_ns is not None]
    fallback = min(known) if known else 0
    files, survs, sources = [], [], {}
    for ex, es in zip(exports, surveys):
        start = ex.session_start_ns if ex.session_start_ns is not None else fallback
        hosts = {p.rank: p.host for p in ex.processes}
        for r, s in sorted(es.surveys.items()):
            s.metadata = {"baseTimeNanoseconds": start, "hostname": f"{ex.path}#host{hosts.get(r)}"}
            files.append(SimpleNamespace(rank=r, path=f"{ex.path} (rank {r})"))
            survs.append(s)
            sources[r] = ex.path
    try:
        out_base, shifts, keeps = plan_time(files, survs, opt) if files else (fallback, {}, {})
    except StreamtraceError as e:
        raise StreamtraceError(f"{e}; in an export a step is an NVTX range named ProfilerStep#N, step N or "
                               f"iteration N (docs/nsight.md)") from None
    clock, warnings = None, []
    if opt.align == "collectives" and files:
        shifts, clock, warnings = plan_clock_sync(files, survs, shifts)
        warnings = [w + " (an export's kernels carry no process group: its NCCL kernels are matched by stream)"
                    if "no collective kernel" in w else w for w in warnings]
    return SimpleNamespace(out_base=out_base, shifts=shifts, keeps=keeps, clock=clock, warnings=warnings,
                           sources=sources)


def _lut(values: dict, default, n: int):
    """``{rank: v}`` as an array of ``n`` indexed by rank (its last slot: rank -1, ``default``)."""
    a = np.full(n, default, np.int64)
    for r, v in values.items():
        a[r] = v
    return a


def _write_export(w, ex, opt, plan, flows, counts, progress) -> dict:
    """Write the kept rows of ``ex`` and their flow ends; returns the merged pids seen."""
    own = Owners(ex, opt.ranks)
    n = max(list(plan.shifts) + [p.rank for p in ex.processes], default=-1) + 2
    shift = _lut(plan.shifts, 0, n)
    lo = _lut({r: k[0] for r, k in plan.keeps.items() if k}, np.iinfo(np.int64).min, n)
    hi = _lut({r: k[1] for r, k in plan.keeps.items() if k}, np.iinfo(np.int64).max, n)
    dropped = np.asarray([k in opt.drop_cat for k in KINDS], bool)
    done = {True: np.zeros(len(flows), bool), False: np.zeros(len(flows), bool)}
    seen: dict = {}
    for gpu, batches in ((True, ex.gpu_batches()), (False, ex.cpu_batches())):
        for b in batches:
            counts["in"] += len(b)
            progress(len(b))
            if not gpu and opt.gpu_only:
                continue
            rank, pidx = own.of(b, gpu)
            if gpu:                    # (rows whose globalPid is no process id: counted, said after the export)
                counts["unowned"] = counts.get("unowned", 0) + int(np.count_nonzero((rank < 0) & (b["proc"] < 0)))
            ok = (rank >= 0) & ~dropped[b["kind"]]
            ok &= (b["ts"] + b["dur"] >= lo[rank]) & (b["ts"] <= hi[rank])
            b, rank, pidx = b[ok], rank[ok], pidx[ok]
            fi = _flow_index(b, pidx, flows, GPU_KINDS if gpu else LAUNCH_KINDS)
            data, n = batch_text(ex, b, (rank, shift[rank], fi), (own, done[gpu]), gpu, seen, counts)
            w.write_raw(data, n)
            counts["out"] += n
    return seen


def _flow_index(b, pidx, flows, kinds):
    """Per row, its index in ``flows`` (sorted keys), or -1 when it starts no kept flow."""
    out = np.full(len(b), -1, np.int64)
    if not len(flows):
        return out
    sel = np.flatnonzero((b["correlation"] >= 0) & np.isin(b["kind"], kinds))
    key = (pidx[sel] << KEY_SHIFT) | b["correlation"][sel]
    i = np.minimum(np.searchsorted(flows, key), len(flows) - 1)
    hit = flows[i] == key
    out[sel[hit]] = i[hit]
    return out


def batch_text(ex, b, cols, state, gpu, seen, counts) -> tuple[bytes, int]:
    """``event_dicts``' events of the kept rows ``b`` (``ROW_DTYPE``)
    serialised, ``(e1,e2,... bytes, count)``, byte for byte what ``dumps_events`` makes of them, but
    written by ``nsys_event_text`` (through
    ``event_text``); the dicts themselves only when a
    name is one orjson cannot encode (a lone surrogate: ``dumps_events``' fallback then writes it).
    Arguments and side effects (``seen``, ``counts``, the ``done`` flags) as ``event_dicts``'."""
    if not len(b):
        return b"", 0
    rank, shift, fi = cols
    own, done = state
    ids = sorted_distinct(b["name"])
    names = ex.names(ids.tolist())
    try:
        table = [orjson.dumps(k) for k in KINDS] + [orjson.dumps(names[i]) for i in ids.tolist()]
    except orjson.JSONEncodeError:
        evs = event_dicts(ex, b, cols, state, gpu, seen, counts)
        return dumps_events(evs), len(evs)
    cat = b["kind"].astype(np.int64)
    name = np.searchsorted(ids, b["name"]) + len(KINDS)
    col = {f: np.ascontiguousarray(b[f]) for f in ("ts", "dur", "device", "stream", "correlation")}
    pid = 1 + rank * PID_STRIDE + (GPU_SLOT + col["device"] if gpu else CPU_SLOT)
    _note_pids(ex, b, rank, pid, gpu, own.default, seen)
    track = col["stream"] if gpu else np.ascontiguousarray(b["tid"])
    rows = NsysRows(col["ts"] + shift, col["dur"], cat, name, pid, track, rank, col["correlation"], col["device"],
                    col["stream"], fi, gpu)
    text, n, nflow = event_text(rows, table, done)
    if not gpu:
        counts["flows"] += nflow
    return text, n


def _note_pids(ex, b, rank, pid, gpu, default, seen) -> None:
    """Add to ``seen`` each merged pid of ``pid`` (int64 per row of ``b``) it lacks, in the order of
    their first rows, described by that row as ``event_dicts`` describes it."""
    distinct, first = np.unique(pid, return_index=True)
    procs = {p.key: p for p in ex.processes}
    for j in np.sort(first[[int(p) not in seen for p in distinct.tolist()]]).tolist():
        dev = int(b["device"][j])
        p = procs.get(default if gpu and default is not None else int(b["proc"][j]))
        seen[int(pid[j])] = {"rank": int(rank[j]), "pid": dev if gpu else p.pid, "kind": "gpu" if gpu else "cpu",
                             "device": dev if gpu else None, "slot": GPU_SLOT + dev if gpu else CPU_SLOT,
                             "host": p.host}


def event_dicts(ex, b, cols, state, gpu, seen, counts) -> list:
    """The trace events of the kept rows ``b`` (one ``X`` each, plus a flow end where its flow
    index says and the flow has no end on this side yet).  ``cols``: per row rank, shift (ns) and
    flow index (``_flow_index``); ``state``: the ``Owners`` and the flows' ``done`` flags.
    Adds each merged pid first seen to ``seen`` and the CPU side's flow ends to ``counts["flows"]``.
    The plain-Python twin of ``batch_text`` (which merge uses)."""
    rank, shift, fi = cols
    own, done = state
    names = ex.names(set(b["name"].tolist()))
    procs = {p.key: p for p in ex.processes}
    default = own.default
    evs = []
    for j, r in enumerate(b.tolist()):
        ts, dur, kind, name, proc, tid, dev, stream, corr, _ = r
        rk = int(rank[j])
        p = procs.get(default if gpu and default is not None else proc)
        slot = GPU_SLOT + dev if gpu else CPU_SLOT
        pid = 1 + rk * PID_STRIDE + slot
        if pid not in seen:
            seen[pid] = {"rank": rk, "pid": dev if gpu else p.pid, "kind": "gpu" if gpu else "cpu",
                         "device": dev if gpu else None, "slot": slot, "host": p.host}
        args = {"rank": rk}
        if corr >= 0:
            args["correlation"], args["raw correlation"] = unique_id(rk, corr), corr
        if gpu:
            args["device"], args["stream"] = dev, stream
        t = us_fragment(ts + int(shift[j]))
        track = stream if gpu else tid
        evs.append({"ph": "X", "cat": KINDS[kind], "name": names[name], "pid": pid, "tid": track, "ts": t,
                    "dur": us_fragment(dur), "args": args})
        k = int(fi[j])
        if k >= 0 and not done[k]:
            done[k] = True
            fl = {"ph": "f" if gpu else "s", "id": unique_id(rk, corr), "pid": pid, "tid": track, "ts": t,
                  "cat": FLOW_CAT, "name": FLOW_CAT, "args": {"rank": rk}}
            if gpu:
                fl["bp"] = "e"
            evs.append(fl)
            counts["flows"] += not gpu
    return evs


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _bar(show, total):
    """A tqdm bar of the export rows read (both passes: the pre-pass reads the NVTX ranges only for
    steps and windows), on a terminal unless ``show`` says otherwise."""
    if not (sys.stderr.isatty() if show is None else show):
        return _NoBar()
    return tqdm(total=total, unit=" rows", unit_scale=True, desc="merge (nsys)", file=sys.stderr)
