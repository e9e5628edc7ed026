#!/usr/bin/env python3
"""Side-by-side benchmark: ``streamtrace merge`` vs the json.load merge of Megatron-LM.

    python bench/bench_merge.py --sizes 250,1000      # 4 ranks x 250 MB, then 4 x 1000 MB
    python bench/bench_merge.py --quick               # small smoke run (not recorded)

For each size, rank files are generated (once, then reused) by
``tools/inflate_trace.py`` into a scratch folder (``--scratch``, default
``$STREAMTRACE_BENCH_DIR`` or ``/tmp/streamtrace-bench``), then measured on the same inputs:

  * ``python -m streamtrace merge DIR -o OUT.json --no-validate``  (default jobs: all cores)
  * the same with ``-j 1``
  * ``python bench/megatron_merge.py -i DIR -o OUT.json``  (skipped when its memory,
    extrapolated from an earlier run of this invocation, would exceed ``--megatron-max-gb``)

Each command runs under ``/usr/bin/time -v`` (when present) while a thread polls
``/proc`` every 50 ms for the whole process tree.  Reported: wall time, the largest
RSS of any single process (max of time's ``Maximum resident set size`` and the polled
VmHWM), the peak of the RSS summed over the tree (polled; forked workers share
copy-on-write pages with their parent, which this sum counts once per process), the
peak summed PSS (sampled every 0.5 s, only while every process is below 1 GB RSS;
PSS splits shared pages fairly), MB/s of uncompressed input (total, and per worker
process) and the speed ratio.  Outputs are deleted after each run; inputs are kept
for the next invocation (``--clean`` removes them).

A Markdown table is printed and appended, with the command line, date and machine,
to ``bench/RESULTS.md`` (not for ``--quick`` unless ``--record``).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
INFLATE = ROOT / "tools" / "inflate_trace.py"
MEGATRON = BENCH / "megatron_merge.py"
RESULTS = BENCH / "RESULTS.md"
DEFAULT_SRC = ROOT.parent / "shared" / "traces" / "real" / "v100_ddp_rank1_of2.json.gz"
GNU_TIME = "/usr/bin/time"

TARGET_SPEEDUP = 5.0
TARGET_RSS_MB = 300.0
TARGET_MBPS_WORKER = 80.0

RESULTS_HEADER = """# Merge benchmark results

`streamtrace merge` against a faithful re-implementation of Megatron-LM's
`tools/merge_profiler_traces.py` (`bench/megatron_merge.py`: `json.load` of every
rank, one `json.dump(indent=2)`), on rank files inflated from a real trace by
`tools/inflate_trace.py`.  Each section below was appended by one run of
`bench/bench_merge.py`; to reproduce:

    python bench/bench_merge.py --sizes 250,1000   # 4 x 250 MB and 4 x 1000 MB per rank

(inputs are generated into `/tmp/streamtrace-bench`, or `--scratch DIR`; see
`bench/README.md`).  MB = 10^6 bytes of uncompressed JSON input; RSS in MB of 2^20 bytes.
Targets: streamtrace >= 5x faster than the json.load merge, peak RSS <= 300 MB
whatever the input size, >= 80 MB/s of input per worker process.
"""


# -- machine -------------------------------------------------------------------

def _meminfo():
    out = {}
    try:
        for line in open("/proc/meminfo"):
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def machine_info():
    cpu = platform.processor() or ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = _meminfo()
    info = {"nproc": os.cpu_count(), "ram_gib": mem.get("MemTotal", 0) / 2**30,
            "avail_gib": mem.get("MemAvailable", 0) / 2**30, "cpu": cpu,
            "python": platform.python_version(), "kernel": platform.release()}
    try:
        v = subprocess.run([sys.executable, "-m", "streamtrace", "--version"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120).stdout.split("\n")
        info["streamtrace"] = " / ".join(x.strip() for x in v if x.strip())
    except Exception as e:  # noqa: BLE001 - informational only
        info["streamtrace"] = f"? ({e})"
    try:
        import orjson
        info["orjson"] = orjson.__version__
    except Exception:  # noqa: BLE001
        pass
    try:
        info["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                     text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=30).stdout.strip()
        if dirty:
            info["git"] += " (+ uncommitted changes)"
    except Exception:  # noqa: BLE001
        pass
    return info


def code_id():
    """Short hash of the streamtrace package's source files as they are on disk now
    (other people may be editing them while the benchmark runs)."""
    import hashlib
    h = hashlib.sha1()
    for f in sorted((ROOT / "streamtrace").rglob("*.py")):
        h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:10]


# -- inputs --------------------------------------------------------------------

def ensure_inputs(scratch: Path, src: Path, ranks: int, size_mb: float, log):
    """Generate (or reuse) ``ranks`` files of ``size_mb`` MB; returns (dir, files, bytes)."""
    d = scratch / f"in_{ranks}x{size_mb:g}mb"
    st = src.stat()
    stamp = {"src": str(src.resolve()), "src_size": st.st_size, "src_mtime": int(st.st_mtime),
             "ranks": ranks, "size_mb": size_mb, "inflate_mtime": int(INFLATE.stat().st_mtime)}
    stamp_path = d / ".inflate-stamp.json"
    files = [d / f"rank_{r:04d}.pt.trace.json" for r in range(ranks)]
    try:
        if json.loads(stamp_path.read_text()) == stamp and all(f.exists() for f in files):
            log(f"reusing inputs in {d}")
            return d, files, sum(f.stat().st_size for f in files), None
    except (OSError, ValueError):
        pass
    if d.exists():
        shutil.rmtree(d)
    need = ranks * size_mb * 1e6 * 1.25
    free = shutil.disk_usage(scratch).free
    if free < need:
        raise SystemExit(f"bench: not enough disk in {scratch} for the inputs: need ~{need / 1e9:.1f} GB, "
                         f"{free / 1e9:.1f} GB free")
    log(f"generating {ranks} x {size_mb:g} MB into {d} ...")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(INFLATE), str(src), str(d), "--ranks", str(ranks),
                    "--size-mb", f"{size_mb:g}"], check=True, cwd=ROOT)
    gen_s = time.perf_counter() - t0
    stamp_path.write_text(json.dumps(stamp))
    return d, files, sum(f.stat().st_size for f in files), gen_s


# -- measuring a process tree ----------------------------------------------------

def _children(pid):
    kids = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids.extend(int(x) for x in f.read().split())
            except OSError:
                pass
    except OSError:
        pass
    return kids


def _tree(root):
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def _status(pid):
    """(VmRSS, VmHWM) in bytes, or None when the process is gone."""
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


def _pss(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class TreePoller(threading.Thread):
    """Polls the process tree under ``root`` every ``interval`` s (excluding ``root``
    itself when it is only the ``time`` wrapper)."""

    def __init__(self, root, skip_root, interval=0.05, pss_every=10, pss_limit=1 << 30):
        super().__init__(daemon=True)
        self.root, self.skip_root, self.interval = root, skip_root, interval
        self.pss_every, self.pss_limit = pss_every, pss_limit
        self.stop = threading.Event()
        self.peak_sum_rss = 0
        self.max_hwm = 0
        self.peak_sum_pss = 0
        self.pss_samples = 0
        self.pss_skipped = 0
        self.max_procs = 0
        self.samples = 0

    def run(self):
        tick = 0
        while not self.stop.is_set():
            pids = _tree(self.root)
            if self.skip_root:
                pids = [p for p in pids if p != self.root]
            total, stats = 0, []
            for p in pids:
                s = _status(p)
                if s is None or s[0] == 0:
                    continue
                stats.append((p, s[0]))
                total += s[0]
                self.max_hwm = max(self.max_hwm, s[1])
            if stats:
                self.samples += 1
                self.peak_sum_rss = max(self.peak_sum_rss, total)
                self.max_procs = max(self.max_procs, len(stats))
                if tick % self.pss_every == 0:
                    if all(r < self.pss_limit for _, r in stats):
                        pss = [_pss(p) for p, _ in stats]
                        self.peak_sum_pss = max(self.peak_sum_pss, sum(x for x in pss if x))
                        self.pss_samples += 1
                    else:
                        self.pss_skipped += 1
            tick += 1
            self.stop.wait(self.interval)


def _busy_seconds():
    """Machine-wide busy CPU-seconds so far (all cores), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_idle(max_wait, log, threshold=0.25, window=2.0):
    """Wait (up to ``max_wait`` s) until other processes use < ``threshold`` cores for
    three ``window``-second windows in a row; returns the last measured load in cores
    (None if unknown)."""
    t_end = time.time() + max_wait
    said = False
    quiet = 0
    while True:
        b0 = _busy_seconds()
        time.sleep(window)
        b1 = _busy_seconds()
        if b0 is None or b1 is None:
            return None
        load = (b1 - b0) / window
        quiet = quiet + 1 if load < threshold else 0
        if quiet >= 3 or time.time() >= t_end:      # three quiet windows in a row
            return load
        if load >= threshold and not said:
            log(f"waiting for the machine to calm down (other processes use {load:.2f} cores) ...")
            said = True


def _parse_gnu_time(text):
    out = {}
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if m:
        out["time_maxrss"] = int(m.group(1)) * 1024
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    if m:
        secs = 0.0
        for part in m.group(1).split(":"):
            secs = secs * 60 + float(part)
        out["time_wall"] = secs
    m = re.search(r"Percent of CPU this job got: (\d+)%", text)
    if m:
        out["cpu_pct"] = int(m.group(1))
    u = re.search(r"User time \(seconds\): ([\d.]+)", text)
    s = re.search(r"System time \(seconds\): ([\d.]+)", text)
    if u and s:
        out["cpu_s"] = float(u.group(1)) + float(s.group(1))
    return out


def measure(cmd, logdir: Path, label: str, timeout=None):
    """Run ``cmd`` (list) and measure it; returns a dict."""
    logdir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_")
    out_log, err_log, time_log = (logdir / f"{slug}.{x}" for x in ("out", "err", "time"))
    use_time = os.access(GNU_TIME, os.X_OK)
    full = ([GNU_TIME, "-v", "-o", str(time_log)] if use_time else []) + list(cmd)
    with open(out_log, "wb") as fo, open(err_log, "wb") as fe:
        busy0 = _busy_seconds()
        t0 = time.perf_counter()
        p = subprocess.Popen(full, stdout=fo, stderr=fe, cwd=ROOT)
        poll = TreePoller(p.pid, skip_root=use_time)
        poll.start()
        timed_out = False
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            for pid in reversed(_tree(p.pid)):
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            rc = p.wait()
        wall = time.perf_counter() - t0
        busy1 = _busy_seconds()
        poll.stop.set()
        poll.join()
    res = {"label": label, "cmd": cmd, "rc": rc, "timed_out": timed_out, "wall": wall,
           "peak_sum_rss": poll.peak_sum_rss, "max_hwm": poll.max_hwm, "peak_sum_pss": poll.peak_sum_pss,
           "pss_samples": poll.pss_samples, "pss_skipped": poll.pss_skipped, "max_procs": poll.max_procs,
           "samples": poll.samples, "stdout": out_log.read_text(errors="replace"),
           "stderr": err_log.read_text(errors="replace")}
    if use_time and time_log.exists():
        res.update(_parse_gnu_time(time_log.read_text(errors="replace")))
    res["max_single_rss"] = max(res.get("time_maxrss", 0), poll.max_hwm)
    if busy0 is not None and busy1 is not None and "cpu_s" in res:
        # CPU used on the machine during the run by anything but the measured tree
        res["other_cores"] = max(0.0, (busy1 - busy0 - res["cpu_s"]) / wall)
    return res


# -- the benchmark ---------------------------------------------------------------

def _mb(b):
    return b / 2**20


def _fmt_s(s):
    return f"{s:,.1f}" if s < 100 else f"{s:,.0f}"


def run_size(scratch, src, ranks, size_mb, args, log, state):
    indir, files, in_bytes, gen_s = ensure_inputs(scratch, src, ranks, size_mb, log)
    outdir = scratch / "out"
    outdir.mkdir(parents=True, exist_ok=True)
    logdir = scratch / "logs"
    nproc = os.cpu_count() or 1
    rows, notes = [], []
    if gen_s is not None:
        notes.append(f"{ranks} x {size_mb:g} MB inputs generated in {gen_s:.0f} s")
    tag = f"{ranks}x{size_mb:g}MB"

    def one(label, cmd, out, workers_fn, tool, keep=True):
        free = shutil.disk_usage(scratch).free
        if free < in_bytes * 2.5:
            notes.append(f"{label}: skipped, only {free / 1e9:.1f} GB free disk for its output")
            log(notes[-1])
            return None
        log(f"[{tag}] {label}: {shlex.join(cmd)}")
        idle = wait_idle(args.wait_idle, log) if args.wait_idle > 0 else None
        code = code_id()
        r = measure(cmd, logdir, f"{tag}_{label}", args.timeout)
        r["label"] = label
        r["code"] = code
        if tool != "megatron" and code_id() != code:
            notes.append(f"[{tag}] {label}: streamtrace's source files changed on disk while it ran")
        r["other_before"] = idle
        if r.get("other_cores", 0) > 0.15:
            notes.append(f"[{tag}] {label}: other processes used {r['other_cores']:.2f} cores on average during "
                         f"the run (of {nproc}); its times are inflated by that contention")
        out = Path(out)
        r["out_bytes"] = out.stat().st_size if out.exists() else 0
        if out.exists():
            out.unlink()
        r["workers"] = workers_fn(r)
        r["tool"] = tool
        r["in_bytes"] = in_bytes
        ok = r["rc"] == 0 and not r["timed_out"] and r["out_bytes"] > 0
        if tool == "megatron" and "Merge successful" not in r["stdout"]:
            ok = False
        r["ok"] = ok
        if not ok:
            why = "timed out" if r["timed_out"] else f"exit {r['rc']}"
            tail = (r["stderr"].strip() or r["stdout"].strip()).splitlines()[-3:]
            notes.append(f"{label} FAILED ({why}): " + " | ".join(tail))
        for line in r["stderr"].splitlines():
            if line.startswith("warning:"):
                notes.append(f"{label}: {line}")
        summary = [ln for ln in r["stdout"].splitlines() if ln.startswith("merged ")]
        r["summary"] = summary[0] if summary else ""
        m = re.search(r"per worker process ([\d., ]+) MB/s", r["summary"])
        r["worker_mbps"] = [float(x.replace(",", "")) for x in m.group(1).split(", ")] if m else []
        log(f"[{tag}] {label}: {'ok' if ok else 'FAILED'} {r['wall']:.1f} s, max single RSS "
            f"{_mb(r['max_single_rss']):,.0f} MB, peak summed RSS {_mb(r['peak_sum_rss']):,.0f} MB"
            + (f"; {r['summary']}" if r["summary"] else ""))
        if keep:
            rows.append(r)
        return r

    def median_of(label, cmd, out, workers_fn, tool):
        """``args.repeat`` runs of one command; the run with the median wall time is the
        table row, every run is listed in a note (this VM's speed varies by +-20 %
        from run to run)."""
        runs = [one(label, cmd, out, workers_fn, tool, keep=False) for _ in range(args.repeat)]
        runs = [r for r in runs if r is not None]
        if not runs:
            return None
        mid = sorted(runs, key=lambda r: r["wall"])[(len(runs) - 1) // 2]
        rows.append(mid)
        if len(runs) > 1:
            mid["label"] = f"{label} (median of {len(runs)})"
            notes.append(f"[{tag}] {label}: {len(runs)} runs, wall " + ", ".join(f"{r['wall']:.1f}" for r in runs)
                         + " s; per worker process " + "; ".join(
                             ", ".join(f"{x:g}" for x in r["worker_mbps"]) for r in runs) + " MB/s")
        return mid

    def st_workers(jobs):
        def f(r):
            m = re.search(r"(\d+) jobs\)", r["stdout"])
            return int(m.group(1)) if m else min(jobs or nproc, ranks)
        return f

    st_out = outdir / f"streamtrace_{tag}.json"
    base = [sys.executable, "-m", "streamtrace", "merge", str(indir), "-o", str(st_out), "--no-validate"]
    median_of(f"streamtrace (-j default = {min(nproc, ranks)})", base, st_out, st_workers(0), "streamtrace")
    median_of("streamtrace -j 1", base + ["-j", "1"], st_out, st_workers(1), "streamtrace-j1")

    # Megatron baseline, unless its memory would not fit.
    mg_out = outdir / f"megatron_{tag}.json"
    avail = _meminfo().get("MemAvailable", 0)
    if args.no_megatron:
        notes.append("Megatron baseline not run (--no-megatron)")
    else:
        prev = state.get("megatron")
        if prev:
            est = prev["peak_sum_rss"] * in_bytes / prev["in_bytes"]
            how = (f"extrapolated from its {_mb(prev['peak_sum_rss']) / 1024:.1f} GiB peak on "
                   f"{prev['in_bytes'] / 1e9:.2f} GB of input")
        else:
            est = in_bytes * args.megatron_ratio
            how = f"assumed {args.megatron_ratio:g} x the input size (no earlier run to extrapolate from)"
        limit = args.megatron_max_gb * 2**30
        if est > limit or est > avail * 0.95:
            cap = "the --megatron-max-gb limit" if est > limit else "the available RAM"
            notes.append(f"Megatron baseline SKIPPED at {tag}: it would need ~{est / 2**30:.1f} GiB of RAM "
                         f"({how}), over {cap} ({min(limit, avail * 0.95) / 2**30:.1f} GiB)")
            log(notes[-1])
            if prev:
                # linear time extrapolation, reported as an estimate only
                state.setdefault("est", {})[tag] = prev["wall"] * in_bytes / prev["in_bytes"]
        else:
            r = one("megatron json.load merge", [sys.executable, str(MEGATRON), "-i", str(indir), "-o", str(mg_out)],
                    mg_out, lambda r: 1, "megatron")
            if r and r["ok"]:
                state["megatron"] = r
                notes.append(f"Megatron baseline peak memory {_mb(r['peak_sum_rss']) / 1024:.1f} GiB = "
                             f"{r['peak_sum_rss'] / in_bytes:.1f} x its input")
    return {"tag": tag, "ranks": ranks, "size_mb": size_mb, "in_bytes": in_bytes, "rows": rows, "notes": notes}


def table(results):
    head = ("| input | tool | wall s | CPU s | speed vs json.load merge | MB/s total | workers | MB/s per worker "
            "(wall) | MB/s per worker (own busy time) | MB per CPU-s | max single-process RSS MB | peak summed RSS MB | peak summed PSS MB | output MB "
            "| other load, cores |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for res in results:
        mg = next((r for r in res["rows"] if r["tool"] == "megatron" and r["ok"]), None)
        for r in res["rows"]:
            mbps = res["in_bytes"] / 1e6 / r["wall"]
            if r["tool"] == "megatron":
                ratio = "1.0x (baseline)"
            elif mg:
                ratio = f"{mg['wall'] / r['wall']:.1f}x"
            else:
                ratio = "n/a (baseline skipped)"
            # PSS is sampled only while every process is < 1 GB: a run that grew past
            # that has no peak PSS (its early samples would understate it)
            pss = f"{_mb(r['peak_sum_pss']):,.0f}" if r["pss_samples"] and not r["pss_skipped"] else "n/a (>1 GB)"
            status = "" if r["ok"] else " **FAILED**"
            cpu = r.get("cpu_s")
            cells = [f"{res['ranks']} x {res['in_bytes'] / res['ranks'] / 1e6:,.0f} MB ({res['in_bytes'] / 1e9:.2f} GB)",
                     f"{r['label']}{status}", _fmt_s(r["wall"]), _fmt_s(cpu) if cpu else "n/a", ratio,
                     f"{mbps:,.1f}", str(r["workers"]), f"{mbps / r['workers']:,.1f}",
                     ", ".join(f"{x:,.0f}" for x in r.get("worker_mbps", [])) or "n/a",
                     f"{res['in_bytes'] / 1e6 / cpu:,.1f}" if cpu else "n/a",
                     f"{_mb(r['max_single_rss']):,.0f}", f"{_mb(r['peak_sum_rss']):,.0f}", pss,
                     f"{r['out_bytes'] / 1e6:,.0f}",
                     f"{r['other_cores']:.2f}" if "other_cores" in r else "n/a"]
            lines.append("| " + " | ".join(cells) + " |")
        if not any(r["tool"] == "megatron" for r in res["rows"]):
            lines.append(f"| {res['ranks']} x {res['size_mb']:g} MB ({res['in_bytes'] / 1e9:.2f} GB) "
                         f"| megatron json.load merge | skipped (see notes) |" + " |" * 12)
    return "\n".join(lines)


def verdicts(results, state):
    out = []
    sp = []
    for res in results:
        mg = next((r for r in res["rows"] if r["tool"] == "megatron" and r["ok"]), None)
        st = next((r for r in res["rows"] if r["tool"] == "streamtrace" and r["ok"]), None)
        if mg and st:
            sp.append(f"{res['tag']}: {mg['wall'] / st['wall']:.1f}x")
        elif st and res["tag"] in state.get("est", {}):
            sp.append(f"{res['tag']}: ~{state['est'][res['tag']] / st['wall']:.1f}x (estimate: baseline skipped, "
                      f"its time extrapolated linearly)")
    measured = [float(s.split(": ")[1].rstrip("x")) for s in sp if "estimate" not in s]
    if measured:
        ok = all(x >= TARGET_SPEEDUP for x in measured)
        out.append(f"- >= {TARGET_SPEEDUP:g}x faster than the json.load merge (default jobs): "
                   f"**{'MET' if ok else 'NOT MET'}** ({'; '.join(sp)})")
    else:
        out.append(f"- >= {TARGET_SPEEDUP:g}x faster: not measured ({'; '.join(sp) or 'no baseline run'})")
    st_rows = [(res, r) for res in results for r in res["rows"] if r["tool"].startswith("streamtrace") and r["ok"]]
    if st_rows:
        single = max(r["max_single_rss"] for _, r in st_rows)
        summed = max(r["peak_sum_rss"] for _, r in st_rows)
        pss = [r["peak_sum_pss"] for _, r in st_rows if r["pss_samples"] and not r["pss_skipped"]]
        detail = "; ".join(f"{res['tag']} {r['label']}: single {_mb(r['max_single_rss']):.0f} / summed "
                           f"{_mb(r['peak_sum_rss']):.0f}" + (f" / PSS {_mb(r['peak_sum_pss']):.0f}" if r["pss_samples"] and not r["pss_skipped"] else "")
                           + " MB" for res, r in st_rows)
        tree_ok = _mb(max(pss)) <= TARGET_RSS_MB if pss else _mb(summed) <= TARGET_RSS_MB
        out.append(f"- peak RSS <= {TARGET_RSS_MB:g} MB: per process **{'MET' if _mb(single) <= TARGET_RSS_MB else 'NOT MET'}** "
                   f"(max {_mb(single):.0f} MB); whole process tree, by PSS (pages the forked workers share with "
                   f"the parent counted once) **{'MET' if tree_ok else 'NOT MET'}** ("
                   + (f"PSS max {_mb(max(pss)):.0f} MB; " if pss else "") + f"plain RSS sum max {_mb(summed):.0f} MB) [{detail}]")
        per = [(res, r, res["in_bytes"] / 1e6 / r["wall"] / r["workers"]) for res, r in st_rows]
        own = [x for _, r in st_rows for x in r.get("worker_mbps", [])]
        worst = min(own) if own else min(x for _, _, x in per)
        out.append(f"- >= {TARGET_MBPS_WORKER:g} MB/s per worker process (input bytes a worker rewrote / the "
                   f"seconds it was busy, as the merge reports it): **{'MET' if worst >= TARGET_MBPS_WORKER else 'NOT MET'}** ("
                   + "; ".join(f"{res['tag']} {r['label']}: " + (", ".join(f"{x:.1f}" for x in r["worker_mbps"]) or "n/a")
                               for res, r in st_rows)
                   + "; of the whole command's wall time, start-up, discovery and stitching included: "
                   + "; ".join(f"{res['tag']} {r['label']}: {x:.1f}" for res, r, x in per) + " MB/s"
                   + ("; per CPU-second, which other load on the machine disturbs less: "
                      + "; ".join(f"{res['tag']} {r['label']}: {res['in_bytes'] / 1e6 / r['cpu_s']:.1f}"
                                  for res, r, _ in per if r.get("cpu_s")) if any(r.get("cpu_s") for _, r, _ in per) else "")
                   + ")")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="250,1000", help="MB per rank, comma-separated (default 250,1000)")
    ap.add_argument("--ranks", type=int, default=4, help="rank files per input set (default 4)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 4 ranks x 20 MB, not recorded")
    ap.add_argument("--record", action="store_true", help="append to bench/RESULTS.md even with --quick")
    ap.add_argument("--no-record", action="store_true", help="do not append to bench/RESULTS.md")
    ap.add_argument("--src", default=str(DEFAULT_SRC), help="trace to inflate (default: the V100 DDP rank-1 trace)")
    ap.add_argument("--scratch", default=os.environ.get("STREAMTRACE_BENCH_DIR", "/tmp/streamtrace-bench"),
                    help="scratch folder for inputs/outputs/logs (default $STREAMTRACE_BENCH_DIR or /tmp/streamtrace-bench)")
    ap.add_argument("--no-megatron", action="store_true", help="do not run the Megatron baseline")
    ap.add_argument("--megatron-max-gb", type=float, default=20.0,
                    help="skip the Megatron baseline when its extrapolated peak RAM exceeds this (GiB, default 20)")
    ap.add_argument("--megatron-ratio", type=float, default=6.0,
                    help="RAM/input ratio assumed for the Megatron baseline when no earlier run calibrates it (default 6)")
    ap.add_argument("--timeout", type=float, help="kill a measured run after this many seconds")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of each streamtrace command; the median (by wall time) is reported (default 3)")
    ap.add_argument("--wait-idle", type=float, default=300.0,
                    help="before each run wait up to this many seconds for other processes to use < 0.25 cores "
                         "(default 300; 0: do not wait)")
    ap.add_argument("--clean", action="store_true", help="delete the generated inputs at the end")
    args = ap.parse_args(argv)
    sizes = [20.0] if args.quick else [float(x) for x in args.sizes.split(",") if x.strip()]
    record = not args.no_record and (args.record or not args.quick)
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    src = Path(args.src)

    def log(msg):
        print(f"bench: {msg}", file=sys.stderr, flush=True)

    machine = machine_info()
    started = _dt.datetime.now().astimezone()
    log(f"machine: {machine['nproc']} cores, {machine['ram_gib']:.1f} GiB RAM ({machine['avail_gib']:.1f} available), "
        f"{machine['cpu']}; scratch {scratch} ({shutil.disk_usage(scratch).free / 1e9:.0f} GB free)")
    state, results = {}, []
    for size in sizes:
        results.append(run_size(scratch, src, args.ranks, size, args, log, state))
    if args.clean:
        for size in sizes:
            shutil.rmtree(scratch / f"in_{args.ranks}x{size:g}mb", ignore_errors=True)

    cmdline = shlex.join(["python", os.path.relpath(Path(__file__).resolve(), ROOT)]
                         + (argv if argv is not None else sys.argv[1:]))
    notes = [n for res in results for n in res["notes"]]
    codes = {}
    for res in results:
        for r in res["rows"]:
            if r["tool"] != "megatron":
                codes.setdefault(r["code"], []).append(f"{res['tag']} {r['label']}")
    if len(codes) > 1:
        notes.append("streamtrace's source changed between runs (others were editing it): "
                     + "; ".join(f"code {c}: {', '.join(v)}" for c, v in codes.items()))
    md = [f"## {started:%Y-%m-%d %H:%M %Z}: `{cmdline}`" + (" (quick smoke run)" if args.quick else ""), "",
          f"- machine: {machine['nproc']} cores ({machine['cpu']}), {machine['ram_gib']:.1f} GiB RAM "
          f"({machine['avail_gib']:.1f} GiB available at start), Linux {machine['kernel']}, Python {machine['python']}",
          f"- {machine.get('streamtrace', '?')}; orjson {machine.get('orjson', '?')}; git {machine.get('git', '?')}; "
          f"streamtrace source hash (sha1 of streamtrace/**/*.py) {', '.join(sorted({r['code'] for res in results for r in res['rows'] if r['tool'] != 'megatron'}))}",
          f"- inputs: {args.ranks} rank files per size inflated from `{os.path.relpath(src, ROOT.parent) if src.is_absolute() else src}` "
          f"(uncompressed `.json`, read from the page cache: generated just before or reused), outputs `.json` "
          f"to {scratch}/out (deleted after each run); total wall time of the benchmark "
          f"{(_dt.datetime.now().astimezone() - started).total_seconds() / 60:.0f} min", "",
          table(results), "", "Targets (streamtrace):", verdicts(results, state), ""]
    if notes:
        md += ["Notes:"] + [f"- {n}" for n in notes] + [""]
    text = "\n".join(md)
    print(text)
    if record:
        new = not RESULTS.exists()
        with open(RESULTS, "a") as f:
            if new:
                f.write(RESULTS_HEADER + "\n")
            f.write("\n" + text)
        log(f"appended to {RESULTS}")
    return 0 if all(r["ok"] for res in results for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
