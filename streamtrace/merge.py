"""``streamtrace merge``: many rank traces -> one Perfetto-loadable trace, in flat memory.

Each rank is streamed by :class:`~streamtrace.reader.TraceReader` in a worker
process that rewrites its events and writes them to its own *segment* file
(a gzip member when the output is ``.gz``); the segments are then stitched by
byte copy between a header and a trailer, so peak memory depends on the batch
size only, never on the input size or the number of ranks.

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

import concurrent.futures as cf
import multiprocessing as mp
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from . import __version__
from .discover import TraceFile, discover, parse_ranks
from .errors import StreamtraceError
from .io import atomic_output
from .kernels import rewrite as RW
from .reader import TraceReader, _loads_one
from .writer import dumps_event, dumps_events, fmt_us

PID_STRIDE = 1000
ID_BITS = 40
GPU_PID_LIMIT = 1024   # Kineto gives GPU devices pid = device index; CPU processes their OS pid
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Kernel", "Memcpy", "Memset"})
FLOW_PHASES = frozenset({"s", "f", "t"})
PROCESS_META = frozenset({"process_name", "process_labels", "process_sort_index"})
_ID_ARGS = (("correlation", "raw correlation"), ("External id", "raw External id"),
            ("external id", "raw external id"))


def unique_id(rank: int, raw):
    """Make a correlation / flow id unique across ranks: ``rank * 2**40 + raw`` for
    integers in [0, 2**40); other values become the string ``"r<rank>:<raw>"``.
    The transform is the same for flow ids and correlations, so an ``ac2g`` flow id
    still equals its launch's correlation after the merge."""
    if type(raw) is int and 0 <= raw < (1 << ID_BITS):
        return (rank << ID_BITS) | raw
    return f"r{rank}:{raw}"


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

    def needs_survey(self):
        return self.align == "first-step" or self.steps is not None or self.window_ms is not None


@dataclass
class RankPlan:
    """What one worker needs to rewrite one rank (picklable)."""
    path: str
    rank: int
    shift_ns: int
    segment: str
    compress: bool
    compresslevel: int
    drop_cat: frozenset
    gpu_only: bool
    keep: tuple | None            # (lo, hi) rank-local ns, or None
    kept_flows: set | None        # (cat, id) pairs to keep under a time filter
    salvage: bool
    host: str | None = None
    devices: dict = field(default_factory=dict)


@dataclass
class Survey:
    """A full pre-pass over one rank: metadata, time extent and ProfilerStep windows (ns)."""
    metadata: dict
    first_ns: int | None
    steps: dict
    flows: dict


def survey_rank(path, want_flows=False, salvage=False) -> Survey:
    """Read one rank fully (a pre-pass needed by ``--steps``, ``--window`` and
    ``--align first-step``): ProfilerStep windows ``{N: (start_ns, end_ns)}``, the
    earliest ts, and per flow ``(cat, id) -> (min ts, max ts)`` when ``want_flows``."""
    r = TraceReader(path, salvage=salvage)
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


def _hashable(v):
    return v if isinstance(v, (int, str, float)) or v is None else orjson.dumps(v)


def _classify_pid(pid):
    if type(pid) is int and 0 <= pid < GPU_PID_LIMIT:
        return "gpu"
    if type(pid) is int:
        return "cpu"
    return "other"


class _PidMap:
    def __init__(self, rank):
        self.rank = rank
        self.map = {}
        self.info = {}
        self.ncpu = 0
        self.nother = 0

    def get(self, pid):
        key = _hashable(pid)
        mp_ = self.map.get(key)
        if mp_ is None:
            kind = _classify_pid(pid)
            if kind == "gpu":
                slot = 100 + pid
            elif kind == "cpu":
                slot = min(self.ncpu, 99)
                self.ncpu += 1
            else:
                slot = 900 + min(self.nother, 99)
                self.nother += 1
            mp_ = 1 + self.rank * PID_STRIDE + slot
            self.map[key] = mp_
            self.info[mp_] = {"rank": self.rank, "pid": pid, "kind": kind,
                              "device": pid if kind == "gpu" else None, "slot": slot}
        return mp_


def process_label(info, host=None, devices=None) -> str:
    """Perfetto process name for a merged pid, e.g. ``Rank 3 · GPU 3 (NVIDIA H100 80GB HBM3)``."""
    r = info["rank"]
    if info["kind"] == "gpu":
        dev = (devices or {}).get(info["device"])
        return f"Rank {r} · GPU {info['device']}" + (f" ({dev})" if dev else "")
    if info["kind"] == "cpu":
        where = f"host {host}, pid {info['pid']}" if host else f"pid {info['pid']}"
        return f"Rank {r} · CPU ({where})"
    return f"Rank {r} · {info['pid'] or 'global'}"


class _RankCtx:
    """Per-rank rewrite state shared by the byte kernel and its Python twin."""

    def __init__(self, plan: RankPlan):
        self.rank = plan.rank
        self.shift = plan.shift_ns
        self.drop_cat = plan.drop_cat
        self.gpu_only = plan.gpu_only
        self.lo, self.hi = plan.keep if plan.keep else (None, None)
        self.kept_flows = plan.kept_flows
        self.pids = _PidMap(plan.rank)
        self.used = set()
        self.first_out = None
        self.count = 0


def rewrite_dict(ev, ts_ns, dur_ns, flag, ctx: _RankCtx):
    """The Python definition of merge's per-event rewrite (the twin of
    :func:`streamtrace.kernels.rewrite.rewrite_events`).  Returns the rewritten
    event dict, or None when a filter drops it.  ``ts_ns``/``dur_ns``/``flag``: the
    exact times and scan flags of the event."""
    if not isinstance(ev, dict):
        return None
    ph = ev.get("ph")
    if ctx.drop_cat and ev.get("cat") in ctx.drop_cat:
        return None
    if ph == "M" and ev.get("name") in PROCESS_META:
        return None
    newpid = ctx.pids.get(ev.get("pid"))
    if ctx.gpu_only and (ph in FLOW_PHASES or ctx.pids.info[newpid]["kind"] != "gpu"):
        return None
    if flag & 1 and not flag & 4:
        t = ts_ns
        if ctx.lo is not None and ph != "M":
            end = t + dur_ns if (flag & 2 and not flag & 8 and dur_ns > 0) else t
            if end < ctx.lo or t > ctx.hi:
                return None
            if ph in FLOW_PHASES and (ev.get("cat"), _hashable(ev.get("id"))) not in ctx.kept_flows:
                return None
        t += ctx.shift
        ev["ts"] = orjson.Fragment(fmt_us(t))
        if ph != "M" and (ctx.first_out is None or t < ctx.first_out):
            ctx.first_out = t
    ev["pid"] = newpid
    if "id" in ev and ph in FLOW_PHASES:
        ev["id"] = unique_id(ctx.rank, ev["id"])
    args = ev.get("args")
    if not isinstance(args, dict):
        args = ev["args"] = {} if args is None else {"value": args}
    for key, rawkey in _ID_ARGS:
        if key in args:
            v = args[key]
            args[rawkey] = v
            args[key] = unique_id(ctx.rank, v)
    args["rank"] = ctx.rank
    ctx.used.add(newpid)
    ctx.count += 1
    return ev


class _PidTables:
    """The pid lookup arrays handed to the byte kernel (rebuilt when a new pid appears)."""

    def __init__(self):
        self.texts = []
        self.new = []
        self.kind = []
        self.used = np.zeros(0, np.uint8)
        self._build()

    def add(self, text: bytes, newpid: int, kind: str):
        self.texts.append(text)
        self.new.append(newpid)
        self.kind.append({"cpu": RW.KIND_CPU, "gpu": RW.KIND_GPU}.get(kind, RW.KIND_OTHER))
        used = self.used
        self._build()
        self.used[:len(used)] = used

    def _build(self):
        self.text = np.frombuffer(b"".join(self.texts) or b"\0", np.uint8)
        self.off = np.zeros(len(self.texts) + 1, np.int64)
        self.off[1:] = np.cumsum([len(t) for t in self.texts]) if self.texts else []
        self.new_a = np.asarray(self.new, np.int64) if self.new else np.zeros(1, np.int64)
        self.kind_a = np.asarray(self.kind, np.int64) if self.kind else np.zeros(1, np.int64)
        self.used = np.zeros(max(1, len(self.texts)), np.uint8)


OUT_BYTES = 8 << 20


def merge_rank(plan: RankPlan, progress=None) -> dict:
    """Rewrite one rank's events into ``plan.segment``; returns counts, the process
    map and the rank's metadata (all small).  Runs in a worker process.

    Events go through the byte kernel :func:`~streamtrace.kernels.rewrite.rewrite_events`;
    those it hands back (unusual shapes, invalid JSON) are decoded and rewritten by
    :func:`rewrite_dict`, which raises :class:`TraceError` for invalid input."""
    import gzip
    ctx = _RankCtx(plan)
    tables = _PidTables()
    drops = [c.encode() for c in sorted(plan.drop_cat)]
    drop_text = np.frombuffer(b"".join(drops) or b"\0", np.uint8)
    drop_off = np.zeros(len(drops) + 1, np.int64)
    if drops:
        drop_off[1:] = np.cumsum([len(d) for d in drops])
    has_window = ctx.lo is not None
    lo = ctx.lo if has_window else 0
    hi = ctx.hi if has_window else 0
    out = np.empty(OUT_BYTES, np.uint8)
    state = np.zeros(4, np.int64)
    info = np.zeros(2, np.int64)
    n_in = 0
    reader = TraceReader(plan.path, salvage=plan.salvage, progress=progress)
    raw = open(plan.segment, "wb")
    seg = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=plan.compresslevel, mtime=0) \
        if plan.compress else raw
    try:
        for b in reader.raw_batches(decode=False):
            buf = np.frombuffer(b.buf, np.uint8)
            starts, ends = b.starts, b.ends
            n = len(starts)
            n_in += n
            i = 0
            o = 0
            while i < n:
                i, o, status = RW.rewrite_events(
                    buf, starts, ends, b.ts_ns, b.dur_ns, b.flags, i, n, out, o, state,
                    tables.text, tables.off, tables.new_a, tables.kind_a, tables.used, len(tables.texts),
                    drop_text, drop_off, len(drops), plan.rank, ctx.shift, ctx.gpu_only, has_window, lo, hi, info)
                if status == RW.OK:
                    break
                if status == RW.OUT_FULL:
                    if o == 0:
                        out = np.empty(2 * len(out) + int(ends[i] - starts[i]), np.uint8)
                    seg.write(out[:o].tobytes())
                    o = 0
                elif status == RW.UNKNOWN_PID:
                    text = b.buf[int(info[0]):int(info[1])]
                    pid = _loads(text, plan.path, b.offset)
                    newpid = ctx.pids.get(pid)
                    tables.add(text, newpid, ctx.pids.info[newpid]["kind"])
                else:   # NEED_PYTHON: decode this one event and use the twin
                    s, e = int(starts[i]), int(ends[i])
                    ev = _loads(b.buf[s:e], plan.path, b.offset + s - int(starts[0]))
                    ev = rewrite_dict(ev, int(b.ts_ns[i]), int(b.dur_ns[i]), int(b.flags[i]), ctx)
                    if ev is not None:
                        data = dumps_event(ev)
                        if len(out) - o < len(data) + 1:
                            seg.write(out[:o].tobytes())
                            o = 0
                            if len(out) < len(data) + 1:
                                out = np.empty(len(data) + OUT_BYTES, np.uint8)
                        if state[0]:
                            out[o] = 44
                            o += 1
                        out[o:o + len(data)] = np.frombuffer(data, np.uint8)
                        o += len(data)
                        state[0] = 1
                    i += 1
            if o:
                seg.write(out[:o].tobytes())
        for k, used in enumerate(tables.used[:len(tables.texts)].tolist()):
            if used:
                ctx.used.add(int(tables.new_a[k]))
        first_out = ctx.first_out
        if state[3] and (first_out is None or state[2] < first_out):
            first_out = int(state[2])
        n_out = ctx.count + int(state[1])
        # Our own process metadata, one set per process that had events.
        meta = reader.metadata
        devices = plan.devices or _device_names(meta)
        host = plan.host or _host(meta)
        t0 = fmt_us(first_out or 0)
        mevs = []
        pmap = {k: v for k, v in sorted(ctx.pids.info.items()) if k in ctx.used}
        for mpid, info_ in pmap.items():
            label = process_label(info_, host, devices)
            sort_index = plan.rank * PID_STRIDE + info_["slot"]
            for name, args in (("process_name", {"name": label}),
                               ("process_sort_index", {"sort_index": sort_index}),
                               ("process_labels", {"labels": f"rank {plan.rank}"})):
                mevs.append({"ph": "M", "name": name, "pid": mpid, "tid": 0,
                             "ts": orjson.Fragment(t0), "args": dict(args, rank=plan.rank)})
        if mevs:
            if state[0]:
                seg.write(b",")
            seg.write(dumps_events(mevs))
            n_out += len(mevs)
        if plan.compress:
            seg.close()
        raw.close()
    except BaseException:
        raw.close()
        try:
            os.unlink(plan.segment)
        except OSError:
            pass
        raise
    return {"rank": plan.rank, "events_in": n_in, "events_out": n_out, "bytes_in": reader.bytes_read,
            "events_fast": int(state[1]),
            "process_map": {str(k): v for k, v in pmap.items()},
            "metadata": meta, "warnings": reader.warnings, "truncated": reader.truncated}


def _loads(data: bytes, path, offset):
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return _loads_one(data, path, offset)


def _device_names(meta) -> dict:
    out = {}
    for d in meta.get("deviceProperties") or []:
        if isinstance(d, dict) and "id" in d:
            out[d["id"]] = d.get("name")
    return out


def _host(meta):
    h = meta.get("host_name") or meta.get("hostname")
    if h:
        return h
    di = meta.get("distributedInfo")
    return di.get("host_name") if isinstance(di, dict) else None


# -- orchestration ------------------------------------------------------------

_PROGRESS = None


def _init_worker(arr):
    global _PROGRESS
    _PROGRESS = arr


def _run_plan(plan, idx):
    cb = None
    if _PROGRESS is not None:
        def cb(n, _a=_PROGRESS, _i=idx):
            _a[_i] = n
    return merge_rank(plan, cb)


def _metadata_task(path, head, survey, want_flows, salvage):
    if survey:
        return survey_rank(path, want_flows, salvage)
    if "baseTimeNanoseconds" in head:
        return Survey(head, None, {}, {})
    trailer = peek_trailer(path)
    if trailer is not None:
        return Survey({**head, **trailer}, None, {}, {})
    return Survey(TraceReader(path, salvage=True).read_metadata(), None, {}, {})


def peek_trailer(path, tail=1 << 16):
    """The top-level keys after ``traceEvents`` of a plain (not gzip) file, read
    from its last bytes without reading the events (Kineto writes
    ``baseTimeNanoseconds`` there).  Returns None when the tail does not parse as
    the end of the document; the caller then skims the whole file.  A trailer
    holding arrays can be read only in part, so :func:`merge_files` checks the
    value against the main pass and redoes the merge if they differ."""
    try:
        with open(path, "rb") as f:
            if f.read(2) == b"\x1f\x8b":
                return None
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - tail))
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(b"]") + 1:].strip()
    if rest == b"}":
        return {}
    if not rest.startswith(b","):
        return None
    try:
        out = orjson.loads(b"{" + rest[1:])
    except orjson.JSONDecodeError:
        return None
    return out if isinstance(out, dict) else None


def _pool(jobs, arr=None):
    ctx = mp.get_context("fork") if sys.platform.startswith("linux") else mp.get_context()
    return cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx,
                                  initializer=_init_worker, initargs=(arr,))


def _map(fn, args_list, jobs, arr=None, on_tick=None):
    """Run ``fn(*args)`` for each args tuple, in a process pool when jobs > 1;
    results in input order.  The first failure cancels the rest and is raised."""
    if jobs <= 1 or len(args_list) <= 1:
        out = []
        for i, a in enumerate(args_list):
            if arr is not None:
                _init_worker(arr)
            out.append(fn(*a))
            if on_tick:
                on_tick()
        _init_worker(None)
        return out
    with _pool(jobs, arr) as ex:
        futs = [ex.submit(fn, *a) for a in args_list]
        try:
            pending = set(futs)
            while pending:
                done, pending = cf.wait(pending, timeout=0.2, return_when=cf.FIRST_EXCEPTION)
                for f in done:
                    f.result()
                if on_tick:
                    on_tick()
        except BaseException:
            for f in futs:
                f.cancel()
            raise
        return [f.result() for f in futs]


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


def _piece(data: bytes, compress, level):
    import gzip
    return gzip.compress(data, compresslevel=level, mtime=0) if compress else data


def merge_files(files: list[TraceFile], output, opt: MergeOptions | None = None, log=None) -> dict:
    """Merge the given rank traces (one iteration) into ``output`` (``.json`` or
    ``.json.gz``).  Returns a summary dict (ranks, events in/out, bytes, seconds,
    output).  Raises :class:`StreamtraceError` / :class:`TraceError` on bad input; the
    output is then not created."""
    opt = opt or MergeOptions()
    t_start = time.time()
    output = Path(output)
    compress = output.name.endswith(".gz")
    jobs = max(1, min(opt.jobs or os.cpu_count() or 1, len(files)))
    survey = opt.needs_survey()
    surveys = _map(_metadata_task, [(tf.path, tf.head, survey, opt.window_ms is not None or opt.steps is not None,
                                     opt.salvage) for tf in files], jobs)
    out_base, shifts, keeps = plan_time(files, surveys, opt)
    output.parent.mkdir(parents=True, exist_ok=True)
    plans = []
    for tf, s in zip(files, surveys):
        keep = keeps[tf.rank]
        kept_flows = None
        if keep is not None:
            kept_flows = {k for k, (a, b) in s.flows.items() if a >= keep[0] and b <= keep[1]}
        plans.append(RankPlan(tf.path, tf.rank, shifts[tf.rank],
                              str(output.parent / f".{output.name}.{os.getpid()}.rank{tf.rank}.seg"),
                              compress, opt.compresslevel, frozenset(opt.drop_cat), opt.gpu_only, keep,
                              kept_flows, opt.salvage, _host(s.metadata), _device_names(s.metadata)))
    total = sum(tf.size for tf in files)
    show = sys.stderr.isatty() if opt.progress is None else opt.progress
    arr = mp.Array("q", len(files), lock=False)
    bar = None
    if show:
        from tqdm import tqdm
        bar = tqdm(total=total, unit="B", unit_scale=True, desc="merge", file=sys.stderr)

    def tick():
        if bar is not None:
            bar.n = min(total, sum(arr))
            bar.refresh()
    try:
        results = _map(_run_plan, [(p, i) for i, p in enumerate(plans)], jobs, arr, tick)
        if any(int(res["metadata"].get("baseTimeNanoseconds") or 0) != int(s.metadata.get("baseTimeNanoseconds") or 0)
               for s, res in zip(surveys, results)):
            # the quick trailer peek missed the base time: redo with the real metadata
            for tf, res in zip(files, results):
                tf.head = res["metadata"]
            return merge_files(files, output, opt)
        if bar is not None:
            bar.n = total
            bar.close()
        meta = _merged_metadata(files, results, shifts, out_base, opt, output)
        with atomic_output(output, compress=False) as f:
            f.write(_piece(b'{"traceEvents":[', compress, opt.compresslevel))
            first = True
            for p, res in zip(plans, results):
                if res["events_out"]:
                    if not first:
                        f.write(_piece(b",", compress, opt.compresslevel))
                    with open(p.segment, "rb") as seg:
                        shutil.copyfileobj(seg, f, 1 << 22)
                    first = False
            trailer = b"]" + b"".join(b"," + dumps_event(k) + b":" + dumps_event(v) for k, v in meta.items()) + b"}\n"
            f.write(_piece(trailer, compress, opt.compresslevel))
    finally:
        for p in plans:
            try:
                os.unlink(p.segment)
            except OSError:
                pass
    warnings = [w for r in results for w in r["warnings"]]
    return {"output": str(output), "ranks": [tf.rank for tf in files], "iteration": files[0].iteration,
            "events_in": sum(r["events_in"] for r in results),
            "events_out": sum(r["events_out"] for r in results),
            "bytes_in": sum(r["bytes_in"] for r in results), "bytes_out": output.stat().st_size,
            "seconds": time.time() - t_start, "jobs": jobs, "warnings": warnings}


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
