#!/usr/bin/env python3
"""Side-by-side benchmark: ``streamtrace analyze`` vs HolisticTraceAnalysis (HTA).

    python bench/bench_analyze.py              # the real run (appends to bench/RESULTS.md)
    python bench/bench_analyze.py --quick      # real traces only, nothing recorded

Inputs, each measured in the same invocation:

  * real traces (``--real``, default ``v100_ddp_rank1_of2`` and
    ``a100_resnet_ddp_rank0_of2`` from ``../shared/traces/real/``), as the ``.json.gz``
    the profiler wrote;
  * one trace inflated by ``tools/inflate_trace.py`` to ``--big-mb`` MB (default 1100,
    i.e. > 1 GiB) of uncompressed JSON: HTA, streamtrace in memory, streamtrace
    ``--chunked``;
  * one trace inflated to ``--chunked-mb`` MB (default 2200, > 2 GiB): streamtrace
    ``--chunked`` only.

Inflated inputs are generated once into ``--scratch`` (default
``$STREAMTRACE_BENCH_DIR`` or ``/tmp/streamtrace-bench``) under ``analyze_in_1x<N>mb/``
and reused by later runs; they are never written into the repository.

What runs, each as its own process:

  * HTA, as a user runs it: ``TraceAnalysis(trace_dir=D)`` on a folder ``D`` that holds
    only this trace (a symlink named ``rank_R.pt.trace.json[.gz]``; HTA takes every
    ``*.json``/``*.gz`` in the folder and reads the rank from ``"rank": N`` in the
    file), then ``get_temporal_breakdown(visualize=False)`` and
    ``get_comm_comp_overlap(visualize=False)``, with HTA's defaults otherwise
    (``include_last_profiler_step=False``, its default json parser backend).  This
    script re-invokes itself with ``--hta-worker`` for that.  It is killed after
    ``--hta-timeout`` s (default 1200) or when its RSS passes ``--hta-max-gb`` GiB
    (default 20) or the machine's available memory falls under 1 GiB; the table
    then says so.
  * ``streamtrace analyze TRACE -o OUT -j 1`` and the same with ``--chunked``.

Each process runs under ``/usr/bin/time -v`` (when present) while a thread polls
``/proc`` every 50 ms for the whole process tree.  Peak RSS is the largest of time's
``Maximum resident set size``, the polled VmHWM of any process and the polled RSS
summed over the tree.  The real traces are run ``--repeat`` times per tool (default 3),
the inflated ones ``--big-repeat`` times per streamtrace mode (default 2; HTA once):
median wall time, largest RSS.  Before every measured streamtrace run, streamtrace is
run on a tiny trace (in memory and ``--chunked``) so that numba's on-disk JIT cache is
warm: the cache lives next to the package the ``streamtrace`` command imports and is
invalidated whenever its sources change (others may be editing them, or reinstalling
the package elsewhere).  Inputs are read once before each measured run so that every
tool reads them from the page cache.

Reported per input: wall s, CPU s, peak RSS MB (2^20 bytes), MB/s of uncompressed
input (10^6 bytes), HTA wall / streamtrace wall, HTA RSS / streamtrace RSS,
streamtrace RSS / uncompressed trace size, and HTA's comm/comp overlap next to
streamtrace's ``summary.json`` ``overlap_pct`` (and the reference value of
``../shared/reference`` for the real traces).  A Markdown section is printed and
appended to ``bench/RESULTS.md`` (not with ``--quick`` unless ``--record``).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import hashlib
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
INFLATE = ROOT / "tools" / "inflate_trace.py"
RESULTS = BENCH / "RESULTS.md"
SHARED = ROOT.parent / "shared"
REAL = SHARED / "traces" / "real"
REFERENCE = SHARED / "reference"
DEFAULT_SRC = REAL / "v100_ddp_rank1_of2.json.gz"
WARMUP_TRACE = REAL / "a100_resnet_ddp_rank0_of2.json.gz"
GNU_TIME = "/usr/bin/time"
HTA_VERSION = "0.5.0"

sys.path.insert(0, str(BENCH))
from bench_merge import _mb, _meminfo, _tree  # noqa: E402  (shared /proc helpers)
from bench_merge import machine_info as _merge_machine_info  # noqa: E402

TARGET_SPEEDUP = 6.0          # HTA wall / streamtrace wall
TARGET_RSS_RATIO = 8.0        # HTA peak RSS / streamtrace peak RSS
TARGET_RSS_FRACTION = 0.25    # streamtrace (in memory) peak RSS / uncompressed trace size
TARGET_CHUNKED_MB = 400.0     # streamtrace --chunked peak RSS on the 2 GB trace, MB of 2^20

SECTION_TITLE = "## analyze vs HolisticTraceAnalysis"


# -- the HTA worker (runs in its own process) --------------------------------------

def hta_worker(trace_dir, result_path, include_last_step):
    """What a user does with HTA; writes phase times, VmHWM after each phase and
    the results to ``result_path`` (JSON, rewritten after each phase so that a run
    killed half-way still tells how far it got)."""
    def hwm():
        try:
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    out = {"phases": []}
    t_start = time.perf_counter()

    def phase(name, t0):
        out["phases"].append({"phase": name, "s": time.perf_counter() - t0, "hwm": hwm()})
        Path(result_path).write_text(json.dumps(out))

    t0 = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis
    out["hta_version"] = _version_of("holistictraceanalysis") or "?"
    phase("import", t0)
    t0 = time.perf_counter()
    ta = TraceAnalysis(trace_dir=str(trace_dir), include_last_profiler_step=include_last_step)
    phase("TraceAnalysis(trace_dir=...) (load + parse)", t0)
    t0 = time.perf_counter()
    tb = ta.get_temporal_breakdown(visualize=False)
    out["temporal_breakdown"] = json.loads(tb.to_json(orient="records"))
    phase("get_temporal_breakdown()", t0)
    t0 = time.perf_counter()
    ov = ta.get_comm_comp_overlap(visualize=False)
    out["comm_comp_overlap"] = json.loads(ov.to_json(orient="records"))
    phase("get_comm_comp_overlap()", t0)
    out["total_s"] = time.perf_counter() - t_start
    out["done"] = True
    Path(result_path).write_text(json.dumps(out))
    return 0


# -- machine -----------------------------------------------------------------------


def _version_of(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:  # noqa: BLE001 - informational only
        return None


def machine_info():
    """bench_merge's machine record plus the versions of HTA and its stack."""
    info = _merge_machine_info()
    for dist in ("holistictraceanalysis", "pandas", "numpy", "numba", "pyarrow", "ijson"):
        info[dist] = _version_of(dist) or "not installed"
    return info


def cli_package_dir():
    """The folder of the ``streamtrace`` package that the ``streamtrace`` command imports
    (an editable install imports ``ROOT/streamtrace``; a regular ``pip install .`` a copy in
    site-packages, with its own numba cache)."""
    exe = shutil.which("streamtrace")
    py = sys.executable
    try:
        with open(exe, "rb") as f:
            first = f.readline().decode(errors="replace").strip()
        if first.startswith("#!") and os.path.exists(first[2:].split()[0]):
            py = first[2:].split()[0]
    except (OSError, TypeError, IndexError):
        pass
    try:
        out = subprocess.run([py, "-c", "import importlib.util as u; print(u.find_spec('streamtrace').origin)"],
                             cwd="/", capture_output=True, text=True, timeout=60).stdout.strip()
        return Path(out).resolve().parent if out else ROOT / "streamtrace"
    except (OSError, subprocess.SubprocessError):
        return ROOT / "streamtrace"


def code_id(pkg=None):
    """Short hash of streamtrace's source files as they are on disk now (those of
    ``pkg``, default the package the ``streamtrace`` command imports)."""
    pkg = Path(pkg) if pkg else cli_package_dir()
    h = hashlib.sha1()
    for f in sorted(pkg.rglob("*.py")):
        try:
            h.update(str(Path("streamtrace") / f.relative_to(pkg)).encode() + b"\0" + f.read_bytes())
        except OSError:
            pass
    return h.hexdigest()[:10]


# -- inputs --------------------------------------------------------------------------

def uncompressed_size(path: Path) -> int:
    if path.suffix != ".gz":
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as f:
        while True:
            b = f.read(1 << 22)
            if not b:
                return n
            n += len(b)


def read_through(path: Path):
    """Read the file once so that the measured run finds it in the page cache."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def ensure_inflated(scratch: Path, src: Path, size_mb: float, log):
    """Generate (or reuse) one rank file of ``size_mb`` MB; returns (path, seconds or None)."""
    d = scratch / f"analyze_in_1x{size_mb:g}mb"
    st = src.stat()
    stamp = {"src": str(src.resolve()), "src_size": st.st_size, "src_mtime": int(st.st_mtime),
             "ranks": 1, "size_mb": size_mb, "inflate_mtime": int(INFLATE.stat().st_mtime)}
    stamp_path = d / ".inflate-stamp.json"
    f = d / "rank_0000.pt.trace.json"
    try:
        if json.loads(stamp_path.read_text()) == stamp and f.exists():
            log(f"reusing {f} ({f.stat().st_size / 1e6:,.0f} MB)")
            return f, None
    except (OSError, ValueError):
        pass
    if d.exists():
        shutil.rmtree(d)
    need = size_mb * 1e6 * 1.2
    free = shutil.disk_usage(scratch).free
    if free < need:
        raise SystemExit(f"bench: not enough disk in {scratch}: need ~{need / 1e9:.1f} GB, {free / 1e9:.1f} GB free")
    log(f"generating 1 x {size_mb:g} MB into {d} ...")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(INFLATE), str(src), str(d), "--ranks", "1", "--size-mb", f"{size_mb:g}"],
                   check=True, cwd=ROOT)
    stamp_path.write_text(json.dumps(stamp))
    return f, time.perf_counter() - t0


def rank_of(path: Path):
    """The rank HTA would read (its regex needs whitespace after the colon)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        head = f.read(1 << 20)
    m = re.search(rb'"rank":\s*(\d+)', head)
    return int(m.group(1)) if m else 0


def hta_folder(scratch: Path, tag: str, trace: Path) -> Path:
    """A folder holding only ``trace`` (as a symlink), the layout HTA's trace_dir wants."""
    d = scratch / "analyze_hta_dirs" / tag
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    name = f"rank_{rank_of(trace)}.pt.trace.json" + (".gz" if trace.suffix == ".gz" else "")
    (d / name).symlink_to(trace.resolve())
    return d


# -- measuring a process tree ---------------------------------------------------------


def _status(pid):
    rss = hwm = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
    except OSError:
        return None
    return rss, hwm


def _kill_tree(root, keep_root=False):
    """SIGKILL every process under ``root`` (deepest first); with ``keep_root`` spare
    ``root`` itself (the ``time`` wrapper, which then still reports on its child)."""
    for pid in reversed(_tree(root)):
        if keep_root and pid == root:
            continue
        try:
            os.kill(pid, 9)
        except OSError:
            pass


class TreePoller(threading.Thread):
    """Polls the process tree under ``root`` (without ``root`` when it is only the
    ``time`` wrapper); kills it when its summed RSS passes ``max_rss`` or the
    machine's available memory falls below ``min_avail``."""

    def __init__(self, root, skip_root, interval=0.05, max_rss=None, min_avail=None):
        super().__init__(daemon=True)
        self.root, self.skip_root, self.interval = root, skip_root, interval
        self.max_rss, self.min_avail = max_rss, min_avail
        self.stop = threading.Event()
        self.peak_sum_rss = self.max_hwm = self.max_procs = self.samples = 0
        self.killed = None

    def run(self):
        tick = 0
        while not self.stop.is_set():
            pids = [p for p in _tree(self.root) if not (self.skip_root and p == self.root)]
            total, n = 0, 0
            for p in pids:
                s = _status(p)
                if s is None or s[0] == 0:
                    continue
                n += 1
                total += s[0]
                self.max_hwm = max(self.max_hwm, s[1])
            if n:
                self.samples += 1
                self.peak_sum_rss = max(self.peak_sum_rss, total)
                self.max_procs = max(self.max_procs, n)
                if self.killed is None and self.max_rss and total > self.max_rss:
                    self.killed = f"RSS passed {self.max_rss / 2**30:.0f} GiB"
                elif self.killed is None and self.min_avail and tick % 4 == 0:
                    avail = _meminfo().get("MemAvailable")
                    if avail is not None and avail < self.min_avail:
                        self.killed = (f"machine's available memory fell to {avail / 2**30:.1f} GiB "
                                       f"(the run held {total / 2**30:.1f} GiB)")
                if self.killed:
                    _kill_tree(self.root, keep_root=self.skip_root)
            tick += 1
            self.stop.wait(self.interval)


def _busy_seconds():
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_idle(max_wait, log, threshold=0.25, window=2.0):
    """Wait (up to ``max_wait`` s) until other processes use < ``threshold`` cores for
    three ``window``-second windows in a row; returns the last load seen, in cores."""
    t_end = time.time() + max_wait
    said, quiet, load = False, 0, None
    while True:
        b0 = _busy_seconds()
        time.sleep(window)
        b1 = _busy_seconds()
        if b0 is None or b1 is None:
            return None
        load = (b1 - b0) / window
        quiet = quiet + 1 if load < threshold else 0
        if quiet >= 3 or time.time() >= t_end:
            return load
        if load >= threshold and not said:
            log(f"waiting up to {max_wait:.0f} s for the machine to calm down (other processes use {load:.2f} cores) ...")
            said = True


def _parse_gnu_time(text):
    out = {}
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if m:
        out["time_maxrss"] = int(m.group(1)) * 1024
    u = re.search(r"User time \(seconds\): ([\d.]+)", text)
    s = re.search(r"System time \(seconds\): ([\d.]+)", text)
    if u and s:
        out["cpu_s"] = float(u.group(1)) + float(s.group(1))
    return out


def measure(cmd, logdir: Path, label: str, timeout=None, max_rss=None, min_avail=None):
    logdir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_")
    out_log, err_log, time_log = (logdir / f"analyze_{slug}.{x}" for x in ("out", "err", "time"))
    use_time = os.access(GNU_TIME, os.X_OK)
    full = ([GNU_TIME, "-v", "-o", str(time_log)] if use_time else []) + [str(c) for c in cmd]
    with open(out_log, "wb") as fo, open(err_log, "wb") as fe:
        busy0 = _busy_seconds()
        t0 = time.perf_counter()
        p = subprocess.Popen(full, stdout=fo, stderr=fe, cwd=ROOT)
        poll = TreePoller(p.pid, skip_root=use_time, max_rss=max_rss, min_avail=min_avail)
        poll.start()
        timed_out = False
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_tree(p.pid, keep_root=use_time)
            try:
                rc = p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _kill_tree(p.pid)
                rc = p.wait()
        wall = time.perf_counter() - t0
        busy1 = _busy_seconds()
        poll.stop.set()
        poll.join()
    res = {"label": label, "cmd": [str(c) for c in cmd], "rc": rc, "timed_out": timed_out,
           "killed": poll.killed, "wall": wall, "peak_sum_rss": poll.peak_sum_rss, "max_hwm": poll.max_hwm,
           "max_procs": poll.max_procs, "stdout": out_log.read_text(errors="replace"),
           "stderr": err_log.read_text(errors="replace")}
    if use_time and time_log.exists():
        res.update(_parse_gnu_time(time_log.read_text(errors="replace")))
    res["peak_rss"] = max(res.get("time_maxrss", 0), poll.max_hwm, poll.peak_sum_rss)
    if busy0 is not None and busy1 is not None and "cpu_s" in res and wall > 0:
        res["other_cores"] = max(0.0, (busy1 - busy0 - res["cpu_s"]) / wall)
    return res


# -- the benchmark ---------------------------------------------------------------------


def _fmt_s(s):
    return f"{s:,.2f}" if s < 10 else (f"{s:,.1f}" if s < 100 else f"{s:,.0f}")


class Bench:
    def __init__(self, args, log):
        self.args, self.log = args, log
        self.scratch = Path(args.scratch)
        self.logdir = self.scratch / "logs"
        self.outdir = self.scratch / "analyze_out"
        self.notes: list[str] = []
        self.inputs: list[dict] = []
        self.pkgs: list = []
        self.codes: dict = {}
        self.nproc = os.cpu_count() or 1

    # streamtrace's numba cache is keyed on its source files: warm it for the code on disk
    # numba's on-disk JIT cache sits next to the package the command imports and is
    # invalidated when its sources change: warm it before every measured streamtrace run
    def warm_up(self):
        pkg = cli_package_dir()
        code = code_id(pkg)
        if str(pkg) not in self.pkgs:
            self.pkgs.append(str(pkg))
        for extra in ([], ["--chunked"]):
            out = self.outdir / "warmup"
            t0 = time.perf_counter()
            p = subprocess.run(["streamtrace", "analyze", str(WARMUP_TRACE), "-o", str(out), "-j", "1", *extra],
                               cwd=ROOT, capture_output=True, text=True)
            dt = time.perf_counter() - t0
            shutil.rmtree(out, ignore_errors=True)
            if p.returncode != 0:
                self.notes.append(f"warm-up `streamtrace analyze {WARMUP_TRACE.name} {' '.join(extra)}` FAILED "
                                  f"(exit {p.returncode}): {p.stderr.strip().splitlines()[-1:]}")
            self.log(f"warm-up streamtrace analyze {' '.join(extra) or '(in memory)'} on {WARMUP_TRACE.name}: "
                     f"{dt:.1f} s (code {code} in {pkg})")
            if dt > 20:
                self.notes.append(f"warm-up (code {code} in {pkg}, {'--chunked' if extra else 'in memory'}): "
                                  f"{dt:.0f} s on the 0.75 MB {WARMUP_TRACE.name}, i.e. numba JIT compilation "
                                  f"with a cold cache; the measured run after it started with a warm cache")

    def run_one(self, inp, tool, label, cmd, out=None, timeout=None, max_rss=None, min_avail=None, reps=1):
        tag = inp["tag"]
        runs = []
        for i in range(reps):
            if tool.startswith("streamtrace"):
                self.warm_up()
            read_through(inp["path"])
            self.log(f"[{tag}] {label}" + (f" (run {i + 1}/{reps})" if reps > 1 else "") + f": {shlex.join(cmd)}")
            idle = wait_idle(self.args.wait_idle, self.log) if self.args.wait_idle > 0 else None
            code = code_id()
            r = measure(cmd, self.logdir, f"{tag}_{label}_{i}", timeout, max_rss, min_avail)
            r["idle_before"] = idle
            if tool.startswith("streamtrace"):
                r["code"] = code
                self.codes.setdefault(code, []).append(f"{tag} {label}" + (f" run {i + 1}" if reps > 1 else ""))
                if code_id() != code:
                    self.notes.append(f"[{tag}] {label}: streamtrace's source files changed on disk while it ran")
            r["ok"] = r["rc"] == 0 and not r["timed_out"] and not r["killed"]
            why = ("timed out after %.0f s" % r["wall"] if r["timed_out"] else
                   f"killed: {r['killed']}" if r["killed"] else f"exit {r['rc']}")
            self.log(f"[{tag}] {label}: {'ok' if r['ok'] else 'FAILED (' + why + ')'} {r['wall']:.1f} s, "
                     f"peak RSS {_mb(r['peak_rss']):,.0f} MB")
            if tool.startswith("streamtrace") and out is not None:
                summ = Path(out) / "summary.json"
                if r["ok"]:
                    try:
                        r["summary"] = json.loads(summ.read_text())
                    except (OSError, ValueError) as e:
                        r["ok"] = False
                        why = f"no summary.json ({e})"
                shutil.rmtree(out, ignore_errors=True)
            if not r["ok"]:
                r["why"] = why
                tail = (r["stderr"].strip() or r["stdout"].strip()).splitlines()[-3:]
                self.notes.append(f"[{tag}] {label} FAILED ({why})" + (": " + " | ".join(tail) if tail and not r["killed"] and not r["timed_out"] else ""))
            if r.get("other_cores", 0) > 0.15:
                self.notes.append(f"[{tag}] {label}{f' run {i + 1}' if reps > 1 else ''}: other processes used "
                                  f"{r['other_cores']:.2f} cores on average during the run (of {self.nproc}); "
                                  f"its wall time is inflated by that contention")
            runs.append(r)
            if not r["ok"]:
                break
        best = dict(runs[-1])
        ok = [r for r in runs if r["ok"]]
        if ok:
            best = dict(min(ok, key=lambda r: abs(r["wall"] - statistics.median(x["wall"] for x in ok))))
            best["wall"] = statistics.median(r["wall"] for r in ok)
            best["walls"] = [r["wall"] for r in ok]
            best["peak_rss"] = max(r["peak_rss"] for r in ok)
            if all("cpu_s" in r for r in ok):
                best["cpu_s"] = statistics.median(r["cpu_s"] for r in ok)
            oc = [r["other_cores"] for r in ok if "other_cores" in r]
            if oc:
                best["other_cores"] = max(oc)
        best["tool"], best["label"], best["reps"] = tool, label, len(runs)
        inp["rows"].append(best)
        return best

    def run_hta(self, inp, include_last_step=False, label=None, reps=1, overlap_only=False):
        d = inp.get("hta_dir") or hta_folder(self.scratch, inp["tag"], inp["path"])
        inp["hta_dir"] = d
        res = self.scratch / "analyze_out" / f"hta_{inp['tag']}{'_last' if include_last_step else ''}.json"
        res.parent.mkdir(parents=True, exist_ok=True)
        if res.exists():
            res.unlink()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--hta-worker", str(d), str(res)]
        if include_last_step:
            cmd.append("--include-last-step")
        label = label or f"HTA {HTA_VERSION}"
        if overlap_only:
            # a cheap extra run for the overlap check only, not a table row
            try:
                p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=self.args.hta_timeout)
                return json.loads(res.read_text()) if p.returncode == 0 else None
            except (OSError, ValueError, subprocess.TimeoutExpired):
                return None
        r = self.run_one(inp, "hta", label, cmd, timeout=self.args.hta_timeout,
                         max_rss=self.args.hta_max_gb * 2**30, min_avail=2**30, reps=reps)
        try:
            r["hta"] = json.loads(res.read_text())
        except (OSError, ValueError):
            r["hta"] = None
        return r

    def run_streamtrace(self, inp, chunked, reps=1):
        out = self.outdir / f"st_{inp['tag']}{'_chunked' if chunked else ''}"
        shutil.rmtree(out, ignore_errors=True)
        cmd = ["streamtrace", "analyze", str(inp["path"]), "-o", str(out), "-j", "1"] + (["--chunked"] if chunked else [])
        label = "streamtrace -j 1 --chunked" if chunked else "streamtrace -j 1 (in memory)"
        return self.run_one(inp, "streamtrace-chunked" if chunked else "streamtrace", label, cmd, out=out,
                            timeout=self.args.timeout, reps=reps)

    def add_input(self, tag, path, kind, gen_s=None):
        self.log(f"[{tag}] measuring the uncompressed size of {path} ...")
        inp = {"tag": tag, "path": Path(path), "kind": kind, "bytes": uncompressed_size(Path(path)),
               "disk_bytes": Path(path).stat().st_size, "rows": [], "gen_s": gen_s}
        self.inputs.append(inp)
        if gen_s is not None:
            self.notes.append(f"[{tag}] input generated in {gen_s:.0f} s")
        return inp

    def floor(self):
        """streamtrace on a tiny trace: the fixed cost (interpreter, imports) that every run pays."""
        tiny = REAL / "no_distributed_info.json.gz"
        if not tiny.exists():
            return None
        inp = {"tag": "floor", "path": tiny, "rows": []}
        r = self.run_one(inp, "streamtrace", f"streamtrace -j 1 on {tiny.name}", ["streamtrace", "analyze", str(tiny), "-o",
                                                      str(self.outdir / "floor"), "-j", "1"],
                         out=self.outdir / "floor", reps=3)
        return r if r["ok"] else None


# -- report ---------------------------------------------------------------------------------

def _dev_overlaps(summary):
    """{(rank, device): overlap_pct} from streamtrace's summary.json."""
    out = {}
    for rk in (summary or {}).get("ranks", []):
        for dev, m in (rk.get("devices") or {}).items():
            out[(rk.get("rank"), dev)] = m.get("overlap_pct")
    return out


def _hta_overlaps(h):
    if not h:
        return {}
    return {row.get("rank"): row.get("comp_comm_overlap_pctg") for row in h.get("comm_comp_overlap", [])}


def _ref_overlap(path: Path):
    name = path.name
    for suf in (".json.gz", ".json"):
        if name.endswith(suf):
            name = name[: -len(suf)]
    f = REFERENCE / f"{name}.metrics.json"
    try:
        d = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    return {dev: m.get("overlap_pct") for dev, m in (d.get("devices") or {}).items()}


def _size(inp):
    s = f"{inp['bytes'] / 1e6:,.0f} MB"
    if inp["path"].suffix == ".gz":
        s += f" ({inp['disk_bytes'] / 1e6:,.1f} MB .gz)"
    return s


def table(inputs):
    head = ("| input | uncompressed | tool | wall s | CPU s | MB/s | peak RSS MB | speed vs HTA (HTA wall / wall) "
            "| speed vs HTA by CPU s | RSS ratio (HTA / this) | peak RSS / uncompressed size | overlap % "
            "| other load, cores |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for inp in inputs:
        hta = next((r for r in inp["rows"] if r["tool"] == "hta"), None)
        for r in inp["rows"]:
            mbps = inp["bytes"] / 1e6 / r["wall"]
            status = "" if r["ok"] else f" **{r.get('why', 'FAILED')}**"
            cpu = r.get("cpu_s")
            hcpu = hta.get("cpu_s") if hta else None
            if r["tool"] == "hta":
                speed_cpu = "1.0x (baseline)" if r["ok"] else "-"
            elif hcpu and cpu:
                speed_cpu = ("" if hta["ok"] else "> ") + f"{hcpu / cpu:.1f}x"
            else:
                speed_cpu = "n/a"
            if r["tool"] == "hta":
                speed = "1.0x (baseline)" if r["ok"] else "-"
                rss_ratio = "1.0x (baseline)" if r["ok"] else "-"
                ov = _hta_overlaps(r.get("hta"))
                ovs = ", ".join(f"{v:.2f}" for v in ov.values() if v is not None) or "-"
            else:
                if hta and hta["ok"]:
                    speed = f"{hta['wall'] / r['wall']:.1f}x"
                    rss_ratio = f"{hta['peak_rss'] / r['peak_rss']:.1f}x"
                elif hta:   # killed or timed out: lower bounds
                    speed = f"> {hta['wall'] / r['wall']:.1f}x (HTA did not finish)"
                    rss_ratio = f"> {hta['peak_rss'] / r['peak_rss']:.1f}x (HTA did not finish)"
                else:
                    speed = rss_ratio = "n/a (HTA not run)"
                ov = _dev_overlaps(r.get("summary"))
                ovs = ", ".join(f"{v:.3f}" for v in ov.values() if v is not None) or "-"
            frac = f"{r['peak_rss'] / inp['bytes']:.3f}"
            reps = f" (median of {r['reps']})" if r.get("reps", 1) > 1 else ""
            lines.append("| " + " | ".join([
                f"{inp['tag']}", _size(inp), f"{r['label']}{status}", _fmt_s(r["wall"]) + reps,
                _fmt_s(cpu) if cpu else "n/a", f"{mbps:,.1f}", f"{_mb(r['peak_rss']):,.0f}", speed, speed_cpu, rss_ratio,
                frac, ovs, f"{r['other_cores']:.2f}" if "other_cores" in r else "n/a"]) + " |")
    return "\n".join(lines)


def verdicts(inputs, floor):
    out = []

    def pairs(tool):
        for inp in inputs:
            hta = next((r for r in inp["rows"] if r["tool"] == "hta"), None)
            st = next((r for r in inp["rows"] if r["tool"] == tool and r["ok"]), None)
            if hta and st:
                yield inp, hta, st

    for tool, name in (("streamtrace", "in memory"), ("streamtrace-chunked", "--chunked")):
        sp, rs = [], []
        for inp, hta, st in pairs(tool):
            bound = "" if hta["ok"] else ">= "
            cpu = hta["cpu_s"] / st["cpu_s"] if hta.get("cpu_s") and st.get("cpu_s") else None
            sp.append((inp["tag"], hta["wall"] / st["wall"], bound, cpu))
            rs.append((inp["tag"], hta["peak_rss"] / st["peak_rss"], bound))
        if sp:
            ok = all(v >= TARGET_SPEEDUP for _, v, _, _ in sp)
            ok_cpu = all(c is not None and c >= TARGET_SPEEDUP for _, _, _, c in sp)
            out.append(f"- >= {TARGET_SPEEDUP:g}x faster than HTA ({name}): by wall time **{'MET' if ok else 'NOT MET'}**, "
                       f"by CPU time (less disturbed by other load) **{'MET' if ok_cpu else 'NOT MET'}** ("
                       + "; ".join(f"{t}: wall {b}{v:.1f}x" + (f", CPU {b}{c:.1f}x" if c is not None else "")
                                   for t, v, b, c in sp) + ")")
            ok = all(v >= TARGET_RSS_RATIO for _, v, _ in rs)
            out.append(f"- peak RSS <= 1/{TARGET_RSS_RATIO:g} of HTA's ({name}): **{'MET' if ok else 'NOT MET'}** ("
                       + "; ".join(f"{t}: HTA / streamtrace = {b}{v:.1f}x" for t, v, b in rs) + ")")
    fr = [(inp, r) for inp in inputs for r in inp["rows"] if r["tool"] == "streamtrace" and r["ok"]]
    if fr:
        ok = all(r["peak_rss"] / inp["bytes"] <= TARGET_RSS_FRACTION for inp, r in fr)
        txt = "; ".join(f"{inp['tag']}: {r['peak_rss'] / inp['bytes']:.3f}x ({_mb(r['peak_rss']):,.0f} MB of "
                        f"{inp['bytes'] / 1e6:,.0f} MB)" for inp, r in fr)
        extra = ""
        if floor:
            extra = (f"; the fixed floor of any `streamtrace analyze` process (a 0.05 MB trace) is "
                     f"{_mb(floor['peak_rss']):,.0f} MB, so on a small trace this ratio measures the interpreter "
                     f"and its libraries more than the trace; above the floor: "
                     + "; ".join(f"{inp['tag']}: {max(0, r['peak_rss'] - floor['peak_rss']) / inp['bytes']:.3f}x"
                                 for inp, r in fr))
        out.append(f"- in-memory peak RSS <= {TARGET_RSS_FRACTION:g}x the uncompressed trace: "
                   f"**{'MET' if ok else 'NOT MET'}** ({txt}{extra})")
    ch = [(inp, r) for inp in inputs if inp["kind"] == "chunked-big"
          for r in inp["rows"] if r["tool"] == "streamtrace-chunked"]
    if ch:
        inp, r = ch[0]
        ok = r["ok"] and _mb(r["peak_rss"]) <= TARGET_CHUNKED_MB
        out.append(f"- `--chunked` peak RSS <= {TARGET_CHUNKED_MB:g} MB on the {inp['bytes'] / 1e9:.1f} GB trace: "
                   f"**{'MET' if ok else 'NOT MET'}** ({_mb(r['peak_rss']):,.0f} MB"
                   + ("" if r["ok"] else f", run {r.get('why', 'failed')}") + ")")
    return "\n".join(out)


def overlap_report(inputs, extra_hta):
    lines = ["| input | device | HTA comp_comm_overlap_pctg (default) | HTA (include_last_profiler_step=True) "
             "| streamtrace overlap_pct (in memory) | streamtrace --chunked | reference definition |",
             "|---|---|---|---|---|---|---|"]
    for inp in inputs:
        hta = next((r for r in inp["rows"] if r["tool"] == "hta"), None)
        ho = _hta_overlaps(hta.get("hta") if hta else None)
        hl = _hta_overlaps(extra_hta.get(inp["tag"]))
        st = next((r for r in inp["rows"] if r["tool"] == "streamtrace" and r["ok"]), None)
        sc = next((r for r in inp["rows"] if r["tool"] == "streamtrace-chunked" and r["ok"]), None)
        so = _dev_overlaps(st.get("summary") if st else None)
        sco = _dev_overlaps(sc.get("summary") if sc else None)
        ref = _ref_overlap(inp["path"]) if inp["kind"] == "real" else None
        keys = list(so) or list(sco) or [(k, "?") for k in ho]
        for rank, dev in keys:
            def f(v, nd=2):
                return "-" if v is None else f"{v:.{nd}f}"
            lines.append(f"| {inp['tag']} | rank {rank} GPU {dev} | {f(ho.get(rank))} | {f(hl.get(rank))} | "
                         f"{f(so.get((rank, dev)), 3)} | {f(sco.get((rank, dev)), 3)} | "
                         f"{f((ref or {}).get(dev), 3) if ref else '-'} |")
    return "\n".join(lines)


def hta_phases(inputs):
    out = []
    for inp in inputs:
        for r in inp["rows"]:
            h = r.get("hta") if r["tool"] == "hta" else None
            if h and h.get("phases"):
                ph = "; ".join(f"{p['phase']} {p['s']:.1f} s (VmHWM then {_mb(p['hwm']):,.0f} MB)" for p in h["phases"])
                out.append(f"[{inp['tag']}] HTA phases: {ph}" + ("" if h.get("done") else " -- did not get further"))
            elif r["tool"] == "hta":
                out.append(f"[{inp['tag']}] HTA did not finish its import")
            if h and h.get("temporal_breakdown"):
                tb = h["temporal_breakdown"][0]
                st = next((x for x in inp["rows"] if x["tool"] == "streamtrace" and x["ok"]), None)
                extra = ""
                if st and st.get("summary"):
                    for rk in st["summary"].get("ranks", []):
                        for dev, m in (rk.get("devices") or {}).items():
                            extra = (f"; streamtrace rank {rk.get('rank')} GPU {dev}: busy {m.get('busy_us', 0) / 1e3:,.1f} ms, "
                                     f"compute {m.get('compute_us', 0) / 1e3:,.1f} ms, comm {m.get('comm_us', 0) / 1e3:,.1f} ms, "
                                     f"memory {m.get('memory_us', 0) / 1e3:,.1f} ms, idle {m.get('idle_us', 0) / 1e3:,.1f} ms")
                out.append(f"[{inp['tag']}] HTA temporal breakdown rank {tb.get('rank')}: idle "
                           f"{tb.get('idle_time(us)', 0) / 1e3:,.1f} ms ({tb.get('idle_time_pctg')} %), compute "
                           f"{tb.get('compute_time(us)', 0) / 1e3:,.1f} ms, non-compute {tb.get('non_compute_time(us)', 0) / 1e3:,.1f} ms"
                           + extra)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", default="v100_ddp_rank1_of2,a100_resnet_ddp_rank0_of2",
                    help="real traces from ../shared/traces/real (names without .json.gz, comma-separated)")
    ap.add_argument("--big-mb", type=float, default=1100.0,
                    help="inflated trace for HTA and streamtrace, MB of 10^6 (default 1100; 0: skip)")
    ap.add_argument("--chunked-mb", type=float, default=2200.0,
                    help="inflated trace for streamtrace --chunked only, MB (default 2200; 0: skip)")
    ap.add_argument("--src", default=str(DEFAULT_SRC), help="trace to inflate (default: the V100 DDP rank-1 trace)")
    ap.add_argument("--quick", action="store_true", help="real traces only, nothing recorded")
    ap.add_argument("--record", action="store_true", help="append to bench/RESULTS.md even with --quick")
    ap.add_argument("--no-record", action="store_true", help="do not append to bench/RESULTS.md")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool on the real traces (median; default 3)")
    ap.add_argument("--big-repeat", type=int, default=2,
                    help="runs per streamtrace mode on the inflated traces (median; default 2; HTA runs once there)")
    ap.add_argument("--no-hta", action="store_true", help="do not run HTA")
    ap.add_argument("--hta-timeout", type=float, default=1200.0, help="kill HTA after this many seconds (default 1200)")
    ap.add_argument("--hta-max-gb", type=float, default=20.0, help="kill HTA when its RSS passes this many GiB (default 20)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="kill a streamtrace run after this many seconds")
    ap.add_argument("--wait-idle", type=float, default=60.0,
                    help="before each run wait up to this many seconds for other processes to use < 0.25 cores "
                         "(default 60; 0: do not wait)")
    ap.add_argument("--scratch", default=os.environ.get("STREAMTRACE_BENCH_DIR", "/tmp/streamtrace-bench"),
                    help="scratch folder for inputs/outputs/logs (default $STREAMTRACE_BENCH_DIR or /tmp/streamtrace-bench)")
    ap.add_argument("--hta-worker", nargs=2, metavar=("TRACE_DIR", "RESULT_JSON"), help=argparse.SUPPRESS)
    ap.add_argument("--include-last-step", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.hta_worker:
        return hta_worker(args.hta_worker[0], args.hta_worker[1], args.include_last_step)
    if args.quick:
        args.big_mb = args.chunked_mb = 0
    record = not args.no_record and (args.record or not args.quick)
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(f"bench: {msg}", file=sys.stderr, flush=True)

    if shutil.which("streamtrace") is None:
        raise SystemExit("bench: the `streamtrace` command is not on PATH (pip install -e .)")
    if not args.no_hta and _version_of("holistictraceanalysis") is None:
        raise SystemExit(f"bench: HTA is not installed: pip install holistictraceanalysis=={HTA_VERSION} "
                         f"(or pip install -e '.[bench]'), or pass --no-hta")
    machine = machine_info()
    started = _dt.datetime.now().astimezone()
    log(f"machine: {machine['nproc']} cores, {machine['ram_gib']:.1f} GiB RAM ({machine['avail_gib']:.1f} available); "
        f"HTA {machine['holistictraceanalysis']}, pandas {machine['pandas']}; load average {os.getloadavg()}")
    b = Bench(args, log)
    if machine["holistictraceanalysis"] not in (HTA_VERSION, "not installed"):
        b.notes.append(f"HTA {machine['holistictraceanalysis']} installed, the brief asks for {HTA_VERSION}")
    b.warm_up()
    floor = b.floor()

    extra_hta = {}
    for name in [x.strip() for x in args.real.split(",") if x.strip()]:
        path = REAL / f"{name}.json.gz"
        if not path.exists():
            b.notes.append(f"real trace {path} not found, skipped")
            continue
        inp = b.add_input(name, path, "real")
        if not args.no_hta:
            if b.run_hta(inp, reps=args.repeat)["ok"]:
                extra_hta[name] = b.run_hta(inp, include_last_step=True, overlap_only=True)
        b.run_streamtrace(inp, chunked=False, reps=args.repeat)
        b.run_streamtrace(inp, chunked=True, reps=args.repeat)

    if args.big_mb > 0:
        path, gen = ensure_inflated(scratch, Path(args.src), args.big_mb, log)
        inp = b.add_input(f"inflated {args.big_mb:g} MB", path, "big", gen)
        # streamtrace first: HTA may be killed on memory, and it should not have evicted
        # anything from the page cache that streamtrace then reads from disk
        b.run_streamtrace(inp, chunked=False, reps=args.big_repeat)
        b.run_streamtrace(inp, chunked=True, reps=args.big_repeat)
        if not args.no_hta:
            b.run_hta(inp)
    if args.chunked_mb > 0:
        path, gen = ensure_inflated(scratch, Path(args.src), args.chunked_mb, log)
        inp = b.add_input(f"inflated {args.chunked_mb:g} MB", path, "chunked-big", gen)
        b.run_streamtrace(inp, chunked=True, reps=args.big_repeat)

    cmdline = shlex.join(["python", os.path.relpath(Path(__file__).resolve(), ROOT)]
                         + (argv if argv is not None else sys.argv[1:]))
    notes = list(b.notes)
    notes += hta_phases(b.inputs)
    if floor:
        notes.append(f"fixed floor: `streamtrace analyze` on the 0.05 MB no_distributed_info.json.gz takes "
                     f"{floor['wall']:.2f} s wall and {_mb(floor['peak_rss']):,.0f} MB peak RSS (interpreter, numpy, "
                     f"numba, pyarrow; numba cache warm)")
    if len(b.codes) > 1:
        notes.append("streamtrace's source changed between runs (others were editing it): "
                     + "; ".join(f"code {c}: {', '.join(v)}" for c, v in b.codes.items()))
    big = [i for i in b.inputs if i["kind"] == "big"]
    if big and any(r["tool"] == "hta" for r in big[0]["rows"]) and rank_of(big[0]["path"]) == 0:
        with open(big[0]["path"], "rb") as f:
            head = f.read(1 << 16)
        if not re.search(rb'"rank":\s+\d', head):
            notes.append("the inflated trace is compact JSON on one line (`\"rank\":0`, no space): HTA's rank regex "
                         "(`\"rank\":\\s+(\\d+)`) does not match it, so HTA reads the whole file as one line while "
                         "looking for the rank, then assumes rank 0 (a real Kineto trace, indented, would not cost it "
                         "that read)")
    total_min = (_dt.datetime.now().astimezone() - started).total_seconds() / 60
    md = [f"{SECTION_TITLE}", "",
          f"### {started:%Y-%m-%d %H:%M %Z}: `{cmdline}`" + (" (quick smoke run)" if args.quick else ""), "",
          f"- machine: `nproc` = {machine['nproc']} ({machine['cpu']}), {machine['ram_gib']:.1f} GiB RAM "
          f"({machine['avail_gib']:.1f} GiB available at start), Linux {machine['kernel']}, Python {machine['python']}",
          f"- HolisticTraceAnalysis {machine['holistictraceanalysis']} (pandas {machine['pandas']}, numpy "
          f"{machine['numpy']}; HTA's default json parser backend); {machine.get('streamtrace', '?')} (numba "
          f"{machine['numba']}, pyarrow {machine['pyarrow']}, ijson {machine['ijson']}); git {machine.get('git', '?')}; "
          f"streamtrace source hash (sha1 of streamtrace/**/*.py) {', '.join(sorted(b.codes)) or '?'}; the "
          f"`streamtrace` command imported the package from {', '.join(f'`{x}`' for x in b.pkgs) or '?'}",
          "- commands, per input TRACE: HTA: `TraceAnalysis(trace_dir=D)` (D: a folder holding only TRACE), "
          "`get_temporal_breakdown(visualize=False)`, `get_comm_comp_overlap(visualize=False)`, in one process "
          "(`python bench/bench_analyze.py --hta-worker D RESULT.json`); streamtrace: "
          "`streamtrace analyze TRACE -o OUT -j 1` and `streamtrace analyze TRACE -o OUT -j 1 --chunked`",
          f"- inputs: real traces as written by the profiler (`.json.gz`, decompressed by each tool); inflated traces "
          f"made by `tools/inflate_trace.py {os.path.relpath(args.src, ROOT) if os.path.isabs(args.src) else args.src} "
          f"DIR --ranks 1 --size-mb N` (uncompressed `.json`), read from the page cache; total benchmark time "
          f"{total_min:.0f} min",
          "- wall and peak RSS are of the whole process (interpreter start, imports, parse, analysis, output); "
          "peak RSS = max(`/usr/bin/time -v` max RSS, polled VmHWM, polled RSS summed over the process tree), MB of "
          "2^20 bytes; MB/s = MB (10^6 bytes) of uncompressed JSON per wall second; ratios against HTA on the same "
          "input",
          "", table(b.inputs), "",
          "Comm/compute overlap (by definition not identical: HTA counts only kernels it can tie to a CPU op inside "
          "a ProfilerStep and, by default, drops the last profiler step; streamtrace and the reference count every "
          "GPU kernel, see `../shared/traces/README.md`):", "",
          overlap_report(b.inputs, extra_hta), "",
          "Targets (streamtrace):", verdicts(b.inputs, floor), ""]
    if notes:
        md += ["Notes:"] + [f"- {n}" for n in notes] + [""]
    text = "\n".join(md)
    print(text)
    raw = scratch / "analyze_results.json"
    try:
        raw.write_text(json.dumps({"started": started.isoformat(), "cmdline": cmdline, "machine": machine,
                                   "inputs": [{**{k: v for k, v in i.items() if k != "rows"}, "path": str(i["path"]),
                                               "hta_dir": str(i.get("hta_dir", "")),
                                               "rows": [{k: v for k, v in r.items() if k not in ("stdout",)}
                                                        for r in i["rows"]]} for i in b.inputs],
                                   "extra_hta": extra_hta, "notes": notes}, default=str, indent=1))
        log(f"raw results in {raw}")
    except (OSError, TypeError) as e:
        log(f"could not write {raw}: {e}")
    if record:
        # a further run under this file's last "## analyze vs ..." section adds only its "###" part
        try:
            heads = [ln for ln in RESULTS.read_text().splitlines() if ln.startswith("## ")]
        except OSError:
            heads = []
        if heads and heads[-1].strip() == SECTION_TITLE:
            text = text.split("\n", 2)[2]
        with open(RESULTS, "a") as f:
            f.write("\n" + text)
        log(f"appended to {RESULTS}")
    return 0 if all(r["ok"] for i in b.inputs for r in i["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
