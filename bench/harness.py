"""The measuring harness every bench script shares (a library: it runs nothing by itself).

* the machine and the code measured: ``machine_info``, ``git_describe``,
  ``code_id`` (a hash of the streamtrace sources on disk), ``cli_package_dir``;
* inputs: ``ensure_inputs`` (rank files inflated by ``tools/inflate_trace.py`` into a
  scratch folder, reused while the source and the inflater are unchanged),
  ``uncompressed_size``, ``read_through``;
* the machine's load: ``busy_seconds``, ``wait_idle``, ``uptime``;
* one measured command: ``measure`` runs it under ``/usr/bin/time -v`` (when present)
  while a ``TreePoller`` polls ``/proc`` for its whole process tree (RSS, VmHWM, PSS),
  and reports wall and CPU seconds, peak memory and the CPU other processes used meanwhile;
* output: ``mb``, ``fmt_s``, ``md_head``, ``md_row``, ``command_line``,
  ``append_results``.

Units: bytes and seconds inside; tables print MB of 2^20 bytes for memory and MB of 10^6
bytes for input sizes.  Only Linux (``/proc``).
"""
from __future__ import annotations

import hashlib
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
RESULTS = BENCH / "RESULTS.md"
INFLATE = ROOT / "tools" / "inflate_trace.py"
SHARED = ROOT.parent / "shared"
REAL = SHARED / "traces" / "real"
DEFAULT_SRC = REAL / "v100_ddp_rank1_of2.json.gz"
GNU_TIME = "/usr/bin/time"


def default_scratch() -> Path:
    """Scratch folder for inputs, outputs and logs: ``$STREAMTRACE_BENCH_DIR`` or
    ``/tmp/streamtrace-bench`` (never inside the repository)."""
    return Path(os.environ.get("STREAMTRACE_BENCH_DIR", "/tmp/streamtrace-bench"))


def log(msg):
    """A progress line on stderr (tables go to stdout)."""
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# -- the machine and the code ---------------------------------------------------------

def meminfo() -> dict:
    """``/proc/meminfo`` as ``{field: bytes}`` (empty when unreadable)."""
    out = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def version_of(dist):
    """The installed version of distribution ``dist``, or None."""
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:  # noqa: BLE001 - informational only
        return None


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or ""


def git_describe() -> str:
    """Short hash of the checkout's HEAD, plus ``(+ uncommitted changes)`` when tracked
    files differ from it; ``?`` when git does not answer."""
    try:
        def git(*a):
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
        head = git("rev-parse", "--short", "HEAD") or "?"
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return head + (" (+ uncommitted changes)" if dirty else "")
    except Exception:  # noqa: BLE001 - informational only
        return "?"


def _streamtrace_version():
    try:
        v = subprocess.run([sys.executable, "-m", "streamtrace", "--version"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120).stdout.split("\n")
        return " / ".join(x.strip() for x in v if x.strip())
    except Exception as e:  # noqa: BLE001 - informational only
        return f"? ({e})"


def machine_info(dists=()) -> dict:
    """What a results section states about the machine: ``nproc``, ``ram_gib``,
    ``avail_gib`` (GiB), ``cpu``, ``python``, ``kernel``, ``streamtrace`` (its
    ``--version``), ``orjson``, ``git`` (``git_describe``), and the version of each
    distribution in ``dists`` (``"not installed"`` when absent)."""
    mem = meminfo()
    info = {"nproc": os.cpu_count(), "ram_gib": mem.get("MemTotal", 0) / 2**30,
            "avail_gib": mem.get("MemAvailable", 0) / 2**30, "cpu": _cpu_model(),
            "python": platform.python_version(), "kernel": platform.release(),
            "streamtrace": _streamtrace_version(), "git": git_describe()}
    if version_of("orjson"):
        info["orjson"] = version_of("orjson")
    for dist in dists:
        info[dist] = version_of(dist) or "not installed"
    return info


def cli_package_dir() -> Path:
    """The folder of the ``streamtrace`` package that the ``streamtrace`` command imports
    (an editable install imports ``ROOT/streamtrace``; a regular ``pip install .`` a copy in
    site-packages, with its own numba cache)."""
    py = sys.executable
    try:
        with open(shutil.which("streamtrace"), "rb") as f:
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


def code_id(pkg=None) -> str:
    """Short sha1 of streamtrace's ``*.py`` files as they are on disk now (those of the
    package folder ``pkg``, default this checkout's), paths taken relative to the package's
    parent, so two copies of the same sources hash alike.  Others may be editing the sources
    while a benchmark runs: compare the hash before and after a run."""
    pkg = Path(pkg) if pkg else ROOT / "streamtrace"
    h = hashlib.sha1()
    for f in sorted(pkg.rglob("*.py")):
        try:
            h.update(str(Path("streamtrace") / f.relative_to(pkg)).encode() + b"\0" + f.read_bytes())
        except OSError:
            pass
    return h.hexdigest()[:10]


# -- inputs ---------------------------------------------------------------------------

def _inflate_stamp(src: Path, ranks, size_mb):
    st = src.stat()
    return {"src": str(src.resolve()), "src_size": st.st_size, "src_mtime": int(st.st_mtime),
            "ranks": ranks, "size_mb": size_mb, "inflate_mtime": int(INFLATE.stat().st_mtime)}


def ensure_inputs(scratch: Path, src: Path, ranks: int, size_mb: float, log=log, prefix="in"):
    """Generate (or reuse) ``ranks`` files ``rank_000R.pt.trace.json`` of at least ``size_mb``
    MB (10^6 bytes) each, inflated from ``src``, in ``scratch/<prefix>_<ranks>x<size_mb>mb``.
    Reused when a stamp file shows the same source, sizes and inflater.  Returns
    ``(folder, files, total bytes, seconds spent generating or None when reused)``.
    Exits (SystemExit) when the disk cannot hold them."""
    d = scratch / f"{prefix}_{ranks}x{size_mb:g}mb"
    stamp, stamp_path = _inflate_stamp(src, ranks, size_mb), d / ".inflate-stamp.json"
    files = [d / f"rank_{r:04d}.pt.trace.json" for r in range(ranks)]
    try:
        if json.loads(stamp_path.read_text()) == stamp and all(f.exists() for f in files):
            size = sum(f.stat().st_size for f in files)
            log(f"reusing inputs in {d} ({size / 1e6:,.0f} MB)")
            return d, files, size, None
    except (OSError, ValueError):
        pass
    if d.exists():
        shutil.rmtree(d)
    need, free = ranks * size_mb * 1e6 * 1.25, shutil.disk_usage(scratch).free
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


def uncompressed_size(path: Path) -> int:
    """Bytes of ``path`` once decompressed (``.gz`` is read through; others: the file size)."""
    if path.suffix != ".gz":
        return path.stat().st_size
    import gzip
    n = 0
    with gzip.open(path, "rb") as f:
        while b := f.read(1 << 22):
            n += len(b)
    return n


def read_through(path: Path):
    """Read the file once so that the measured run finds it in the page cache."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


# -- the machine's load -----------------------------------------------------------------

def busy_seconds():
    """Machine-wide busy CPU-seconds so far (all cores, idle and iowait excluded), from
    ``/proc/stat``; None when unreadable."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_idle(max_wait, log=log, threshold=0.25, window=2.0):
    """Wait (up to ``max_wait`` s) until the machine uses < ``threshold`` cores for three
    ``window``-second windows in a row; returns the last load seen, in cores (None if
    unknown)."""
    t_end = time.time() + max_wait
    said, quiet = False, 0
    while True:
        b0 = busy_seconds()
        time.sleep(window)
        b1 = busy_seconds()
        if b0 is None or b1 is None:
            return None
        load = (b1 - b0) / window
        quiet = quiet + 1 if load < threshold else 0
        if quiet >= 3 or time.time() >= t_end:
            return load
        if load >= threshold and not said:
            log(f"waiting up to {max_wait:.0f} s for the machine to calm down (other processes use {load:.2f} cores) ...")
            said = True


def uptime() -> str:
    """The ``uptime`` line (load averages), ``?`` when it fails."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001 - informational only
        return "?"


# -- a process tree ----------------------------------------------------------------------

def children(pid) -> list:
    """Direct children of ``pid`` (of all its threads), from ``/proc/PID/task/*/children``."""
    kids = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    return kids


def tree(root) -> list:
    """``root`` and all its descendants, parents before children."""
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children(p))
    return out


def status(pid):
    """``(VmRSS, VmHWM)`` of ``pid`` in bytes, or None when the process is gone."""
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


def pss(pid):
    """Proportional set size of ``pid`` in bytes (``/proc/PID/smaps_rollup``), or None."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def kill_tree(root, keep_root=False):
    """SIGKILL every process under ``root`` (deepest first); with ``keep_root`` spare
    ``root`` itself (the ``time`` wrapper, which then still reports on its child)."""
    for pid in reversed(tree(root)):
        if not (keep_root and pid == root):
            try:
                os.kill(pid, 9)
            except OSError:
                pass


class TreePoller(threading.Thread):
    """Polls the process tree under ``root`` every ``interval`` s (without ``root`` when it is
    only the ``time`` wrapper: ``skip_root``).  Keeps ``peak_sum_rss`` (RSS summed over the
    tree; forked workers' shared copy-on-write pages count once per process), ``max_hwm``
    (largest VmHWM of one process), ``peak_sum_pss`` (PSS summed, sampled every
    ``pss_every`` polls and only while every process is below ``pss_limit`` bytes of RSS,
    as reading it walks the process's memory map; ``pss_samples`` / ``pss_skipped`` count
    taken and skipped samples), ``max_procs``, ``samples``.  Kills the tree, and says why in
    ``killed``, when the summed RSS passes ``max_rss`` or the machine's available memory
    falls below ``min_avail`` (bytes; None: never)."""

    def __init__(self, root, skip_root, interval=0.05, pss_every=10, pss_limit=1 << 30,
                 max_rss=None, min_avail=None):
        super().__init__(daemon=True)
        self.root, self.skip_root, self.interval = root, skip_root, interval
        self.pss_every, self.pss_limit = pss_every, pss_limit
        self.max_rss, self.min_avail = max_rss, min_avail
        self.stop = threading.Event()
        self.peak_sum_rss = self.max_hwm = self.peak_sum_pss = 0
        self.pss_samples = self.pss_skipped = self.max_procs = self.samples = 0
        self.killed = None

    def run(self):
        tick = 0
        while not self.stop.is_set():
            stats = self._sample()
            if stats:
                if tick % self.pss_every == 0:
                    self._sample_pss(stats)
                if self.killed is None:
                    self.killed = self._over_limit(sum(r for _, r in stats), tick)
                if self.killed:
                    kill_tree(self.root, keep_root=self.skip_root)
            tick += 1
            self.stop.wait(self.interval)

    def _sample(self):
        stats = []
        for p in tree(self.root):
            s = None if (self.skip_root and p == self.root) else status(p)
            if s is not None and s[0] > 0:
                stats.append((p, s[0]))
                self.max_hwm = max(self.max_hwm, s[1])
        if stats:
            self.samples += 1
            self.peak_sum_rss = max(self.peak_sum_rss, sum(r for _, r in stats))
            self.max_procs = max(self.max_procs, len(stats))
        return stats

    def _sample_pss(self, stats):
        if all(r < self.pss_limit for _, r in stats):
            self.peak_sum_pss = max(self.peak_sum_pss, sum(x for x in map(pss, (p for p, _ in stats)) if x))
            self.pss_samples += 1
        else:
            self.pss_skipped += 1

    def _over_limit(self, total, tick):
        if self.max_rss and total > self.max_rss:
            return f"RSS passed {self.max_rss / 2**30:.0f} GiB"
        if self.min_avail and tick % 4 == 0:
            avail = meminfo().get("MemAvailable")
            if avail is not None and avail < self.min_avail:
                return (f"machine's available memory fell to {avail / 2**30:.1f} GiB "
                        f"(the run held {total / 2**30:.1f} GiB)")
        return None


# -- one measured command ------------------------------------------------------------------

_TIME_FIELDS = {"user_s": r"User time \(seconds\): ([\d.]+)", "sys_s": r"System time \(seconds\): ([\d.]+)",
                "cpu_pct": r"Percent of CPU this job got: (\d+)%",
                "minflt": r"Minor \(reclaiming a frame\) page faults: (\d+)",
                "time_maxrss": r"Maximum resident set size \(kbytes\): (\d+)",
                "time_wall": r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)"}


def parse_gnu_time(text) -> dict:
    """The numbers of a ``/usr/bin/time -v`` report: ``user_s``, ``sys_s``, ``cpu_s`` (their
    sum), ``cpu_pct``, ``minflt`` (minor page faults), ``time_maxrss`` (bytes, largest RSS of
    one process of the tree), ``time_wall`` (s); a field missing from the text is absent."""
    out = {}
    for key, pat in _TIME_FIELDS.items():
        m = re.search(pat, text)
        if not m:
            continue
        v = m.group(1)
        if key == "time_wall":
            out[key] = sum(float(x) * 60 ** i for i, x in enumerate(reversed(v.split(":"))))
        elif key == "time_maxrss":
            out[key] = int(v) * 1024
        else:
            out[key] = int(v) if key in ("cpu_pct", "minflt") else float(v)
    if "user_s" in out and "sys_s" in out:
        out["cpu_s"] = out["user_s"] + out["sys_s"]
    return out


def _wait(p, timeout, use_time):
    """Wait for ``p``; on timeout kill its tree (sparing the ``time`` wrapper, so that it
    still reports). Returns (exit code, timed out)."""
    try:
        return p.wait(timeout=timeout), False
    except subprocess.TimeoutExpired:
        kill_tree(p.pid, keep_root=use_time)
        try:
            return p.wait(timeout=30), True
        except subprocess.TimeoutExpired:
            kill_tree(p.pid)
            return p.wait(), True


def measure(cmd, logdir: Path, label: str, timeout=None, max_rss=None, min_avail=None, cwd=None) -> dict:
    """Run ``cmd`` (a list; cwd: the checkout) under ``/usr/bin/time -v`` (when present) with
    a ``TreePoller`` on it; its output goes to ``logdir/<label>.{out,err,time}``.
    Killed after ``timeout`` s, or by the poller (``max_rss``, ``min_avail``, bytes).

    Returns a dict: ``label``, ``cmd``, ``rc``, ``timed_out``, ``killed`` (why, or None),
    ``wall`` (s), ``stdout``, ``stderr``, the poller's fields, the ``parse_gnu_time``
    fields, ``max_single_rss`` (largest RSS of one process: time's and the polled VmHWM),
    ``peak_rss`` (that or the summed RSS, whichever is larger) and ``other_cores`` (CPU
    cores other processes used on average meanwhile; needs ``cpu_s``)."""
    logdir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_")
    out_log, err_log, time_log = (logdir / f"{slug}.{x}" for x in ("out", "err", "time"))
    use_time = os.access(GNU_TIME, os.X_OK)
    cmd = [str(c) for c in cmd]
    with open(out_log, "wb") as fo, open(err_log, "wb") as fe:
        busy0, t0 = busy_seconds(), time.perf_counter()
        p = subprocess.Popen(([GNU_TIME, "-v", "-o", str(time_log)] if use_time else []) + cmd,
                             stdout=fo, stderr=fe, cwd=cwd or ROOT)
        poll = TreePoller(p.pid, skip_root=use_time, max_rss=max_rss, min_avail=min_avail)
        poll.start()
        rc, timed_out = _wait(p, timeout, use_time)
        wall, busy1 = time.perf_counter() - t0, busy_seconds()
        poll.stop.set()
        poll.join()
    res = {"label": label, "cmd": cmd, "rc": rc, "timed_out": timed_out, "killed": poll.killed, "wall": wall,
           **{k: getattr(poll, k) for k in ("peak_sum_rss", "max_hwm", "peak_sum_pss", "pss_samples",
                                            "pss_skipped", "max_procs", "samples")},
           "stdout": out_log.read_text(errors="replace"), "stderr": err_log.read_text(errors="replace")}
    if use_time and time_log.exists():
        res.update(parse_gnu_time(time_log.read_text(errors="replace")))
    res["max_single_rss"] = max(res.get("time_maxrss", 0), poll.max_hwm)
    res["peak_rss"] = max(res["max_single_rss"], poll.peak_sum_rss)
    if busy0 is not None and busy1 is not None and "cpu_s" in res and wall > 0:
        res["other_cores"] = max(0.0, (busy1 - busy0 - res["cpu_s"]) / wall)
    return res


# -- output ----------------------------------------------------------------------------------

def mb(b):
    """Bytes as MB of 2^20 bytes (memory)."""
    return b / 2**20


def fmt_s(s, small=1):
    """Seconds for a table: ``small`` decimals below 10 s, one below 100 s, none above."""
    return f"{s:,.{small}f}" if s < 10 else (f"{s:,.1f}" if s < 100 else f"{s:,.0f}")


def md_row(cells) -> str:
    """One Markdown table row."""
    return "| " + " | ".join(cells) + " |"


def md_head(columns) -> list:
    """A Markdown table's header row and separator."""
    return [md_row(columns), "|" + "---|" * len(columns)]


def command_line(script, argv=None) -> str:
    """``python bench/<script> ARGS...`` as the user typed it (``argv``: the arguments,
    default ``sys.argv[1:]``), shell-quoted, for the results section."""
    rel = os.path.relpath(Path(script).resolve(), ROOT)
    return shlex.join(["python", rel] + list(sys.argv[1:] if argv is None else argv))


def finish(text, args, scratch=None):
    """The end of a bench run: print ``text``, append it to ``bench/RESULTS.md`` unless
    ``args.no_record``, and remove the scratch folder unless ``args.keep``."""
    print(text)
    if not args.no_record:
        append_results(text)
    if scratch is not None and not getattr(args, "keep", False):
        shutil.rmtree(scratch, ignore_errors=True)


def append_results(text, header=None, continues=None, path=RESULTS):
    """Append a results section (Markdown ``text``, which states the command line and the git
    hash) to ``bench/RESULTS.md``.  ``header`` is written first when the file is new.  When
    the file's last ``## `` heading is ``continues`` and ``text`` starts with that heading
    and a blank line, those two lines are left out (a further run under the same section)."""
    path = Path(path)
    try:
        heads = [ln for ln in path.read_text().splitlines() if ln.startswith("## ")]
    except OSError:
        heads = None
    if continues and heads and heads[-1].strip() == continues and text.startswith(continues + "\n"):
        text = text.split("\n", 2)[2]
    with open(path, "a") as f:
        if heads is None and header:
            f.write(header + "\n")
        f.write("\n" + text)
    log(f"appended to {path}")
