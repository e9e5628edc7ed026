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
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from analyze_report import hta_phases, overlap_report, table, verdicts
from harness import (DEFAULT_SRC, REAL, ROOT, append_results, cli_package_dir, code_id, command_line,
                     default_scratch, ensure_inputs, log, machine_info, mb, measure, read_through,
                     status, uncompressed_size, version_of, wait_idle)

WARMUP_TRACE = REAL / "a100_resnet_ddp_rank0_of2.json.gz"
HTA_VERSION = "0.5.0"
HTA_STACK = ("holistictraceanalysis", "pandas", "numpy", "numba", "pyarrow", "ijson")

SECTION_TITLE = "## analyze vs HolisticTraceAnalysis"


# -- the HTA worker (runs in its own process) --------------------------------------

def hta_worker(trace_dir, result_path, include_last_step):
    """What a user does with HTA; writes phase times, VmHWM after each phase and
    the results to ``result_path`` (JSON, rewritten after each phase so that a run
    killed half-way still tells how far it got)."""
    def hwm():
        return (status(os.getpid()) or (0, 0))[1]

    out = {"phases": []}
    t_start = time.perf_counter()

    def phase(name, t0):
        out["phases"].append({"phase": name, "s": time.perf_counter() - t0, "hwm": hwm()})
        Path(result_path).write_text(json.dumps(out))

    t0 = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis
    out["hta_version"] = version_of("holistictraceanalysis") or "?"
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


# -- inputs ---------------------------------------------------------------------------

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


# -- the benchmark ---------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.scratch = Path(args.scratch)
        self.logdir = self.scratch / "logs"
        self.outdir = self.scratch / "analyze_out"
        self.notes: list[str] = []
        self.inputs: list[dict] = []
        self.pkgs: list = []
        self.pkg = None
        self.codes: dict = {}
        self.nproc = os.cpu_count() or 1

    # numba's on-disk JIT cache sits next to the package the command imports and is
    # invalidated when its sources change: warm it before every measured streamtrace run
    def warm_up(self):
        self.pkg = pkg = cli_package_dir()
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
            log(f"warm-up streamtrace analyze {' '.join(extra) or '(in memory)'} on {WARMUP_TRACE.name}: "
                f"{dt:.1f} s (code {code} in {pkg})")
            if dt > 20:
                self.notes.append(f"warm-up (code {code} in {pkg}, {'--chunked' if extra else 'in memory'}): "
                                  f"{dt:.0f} s on the 0.75 MB {WARMUP_TRACE.name}, i.e. numba JIT compilation "
                                  f"with a cold cache; the measured run after it started with a warm cache")

    def run_one(self, inp, tool, label, cmd, out=None, timeout=None, max_rss=None, min_avail=None, reps=1):
        """``reps`` measured runs of ``cmd`` (stopping at the first failure); one table row:
        median wall and CPU time, largest peak RSS, most other load."""
        runs = []
        for i in range(reps):
            r = self._measure_once(inp, tool, label, cmd, out, timeout, max_rss, min_avail, i, reps)
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

    def _measure_once(self, inp, tool, label, cmd, out, timeout, max_rss, min_avail, i, reps):
        tag, st = inp["tag"], tool.startswith("streamtrace")
        run = f" run {i + 1}" if reps > 1 else ""
        if st:
            self.warm_up()
        read_through(inp["path"])
        log(f"[{tag}] {label}" + (f" (run {i + 1}/{reps})" if reps > 1 else "") + f": {shlex.join(cmd)}")
        idle = wait_idle(self.args.wait_idle, log) if self.args.wait_idle > 0 else None
        code = code_id(self.pkg) if st else None
        r = measure(cmd, self.logdir, f"analyze_{tag}_{label}_{i}", timeout, max_rss, min_avail)
        r["idle_before"] = idle
        if st:
            r["code"] = code
            self.codes.setdefault(code, []).append(f"{tag} {label}{run}")
            if code_id(self.pkg) != code:
                self.notes.append(f"[{tag}] {label}: streamtrace's source files changed on disk while it ran")
        r["ok"] = r["rc"] == 0 and not r["timed_out"] and not r["killed"]
        why = ("timed out after %.0f s" % r["wall"] if r["timed_out"] else
               f"killed: {r['killed']}" if r["killed"] else f"exit {r['rc']}")
        log(f"[{tag}] {label}: {'ok' if r['ok'] else 'FAILED (' + why + ')'} {r['wall']:.1f} s, "
            f"peak RSS {mb(r['peak_rss']):,.0f} MB")
        if st and out is not None:
            why = self._read_summary(r, out, why)
        if not r["ok"]:
            r["why"] = why
            tail = (r["stderr"].strip() or r["stdout"].strip()).splitlines()[-3:]
            self.notes.append(f"[{tag}] {label} FAILED ({why})" + (": " + " | ".join(tail) if tail and not r["killed"] and not r["timed_out"] else ""))
        if r.get("other_cores", 0) > 0.15:
            self.notes.append(f"[{tag}] {label}{run}: other processes used "
                              f"{r['other_cores']:.2f} cores on average during the run (of {self.nproc}); "
                              f"its wall time is inflated by that contention")
        return r

    @staticmethod
    def _read_summary(r, out, why):
        """Keep streamtrace's ``summary.json`` in ``r`` (a run without one failed), then delete
        the output folder; returns why the run failed."""
        if r["ok"]:
            try:
                r["summary"] = json.loads((Path(out) / "summary.json").read_text())
            except (OSError, ValueError) as e:
                r["ok"] = False
                why = f"no summary.json ({e})"
        shutil.rmtree(out, ignore_errors=True)
        return why

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
        log(f"[{tag}] measuring the uncompressed size of {path} ...")
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



def parse_args(argv):
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
    ap.add_argument("--scratch", default=str(default_scratch()),
                    help="scratch folder for inputs/outputs/logs (default $STREAMTRACE_BENCH_DIR or /tmp/streamtrace-bench)")
    ap.add_argument("--hta-worker", nargs=2, metavar=("TRACE_DIR", "RESULT_JSON"), help=argparse.SUPPRESS)
    ap.add_argument("--include-last-step", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def run_all(b, args, scratch):
    """Every input and tool, in order; returns HTA's extra overlap results by input tag."""
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
        _, (path,), _, gen = ensure_inputs(scratch, Path(args.src), 1, args.big_mb, log, prefix="analyze_in")
        inp = b.add_input(f"inflated {args.big_mb:g} MB", path, "big", gen)
        # streamtrace first: HTA may be killed on memory, and it should not have evicted
        # anything from the page cache that streamtrace then reads from disk
        b.run_streamtrace(inp, chunked=False, reps=args.big_repeat)
        b.run_streamtrace(inp, chunked=True, reps=args.big_repeat)
        if not args.no_hta:
            b.run_hta(inp)
    if args.chunked_mb > 0:
        _, (path,), _, gen = ensure_inputs(scratch, Path(args.src), 1, args.chunked_mb, log, prefix="analyze_in")
        inp = b.add_input(f"inflated {args.chunked_mb:g} MB", path, "chunked-big", gen)
        b.run_streamtrace(inp, chunked=True, reps=args.big_repeat)
    return extra_hta


def run_notes(b, floor):
    notes = list(b.notes) + hta_phases(b.inputs)
    if floor:
        notes.append(f"fixed floor: `streamtrace analyze` on the 0.05 MB no_distributed_info.json.gz takes "
                     f"{floor['wall']:.2f} s wall and {mb(floor['peak_rss']):,.0f} MB peak RSS (interpreter, numpy, "
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
    return notes


def provenance(b, args, cmdline, machine, started):
    """The section's heading and the lines saying what ran where."""
    total_min = (_dt.datetime.now().astimezone() - started).total_seconds() / 60
    src = os.path.relpath(args.src, ROOT) if os.path.isabs(args.src) else args.src
    return [f"{SECTION_TITLE}", "",
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
            f"made by `tools/inflate_trace.py {src} "
            f"DIR --ranks 1 --size-mb N` (uncompressed `.json`), read from the page cache; total benchmark time "
            f"{total_min:.0f} min",
            "- wall and peak RSS are of the whole process (interpreter start, imports, parse, analysis, output); "
            "peak RSS = max(`/usr/bin/time -v` max RSS, polled VmHWM, polled RSS summed over the process tree), MB of "
            "2^20 bytes; MB/s = MB (10^6 bytes) of uncompressed JSON per wall second; ratios against HTA on the same "
            "input"]


def save_raw(raw, b, started, cmdline, machine, extra_hta, notes):
    """Every measured row (without the captured stdout) as JSON, for a later look."""
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


def check_tools(args):
    if shutil.which("streamtrace") is None:
        raise SystemExit("bench: the `streamtrace` command is not on PATH (pip install -e .)")
    if not args.no_hta and version_of("holistictraceanalysis") is None:
        raise SystemExit(f"bench: HTA is not installed: pip install holistictraceanalysis=={HTA_VERSION} "
                         f"(or pip install -e '.[bench]'), or pass --no-hta")


def main(argv=None):
    args = parse_args(argv)
    if args.hta_worker:
        return hta_worker(args.hta_worker[0], args.hta_worker[1], args.include_last_step)
    if args.quick:
        args.big_mb = args.chunked_mb = 0
    record = not args.no_record and (args.record or not args.quick)
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    check_tools(args)
    machine = machine_info(HTA_STACK)
    started = _dt.datetime.now().astimezone()
    log(f"machine: {machine['nproc']} cores, {machine['ram_gib']:.1f} GiB RAM ({machine['avail_gib']:.1f} available); "
        f"HTA {machine['holistictraceanalysis']}, pandas {machine['pandas']}; load average {os.getloadavg()}")
    b = Bench(args)
    if machine["holistictraceanalysis"] not in (HTA_VERSION, "not installed"):
        b.notes.append(f"HTA {machine['holistictraceanalysis']} installed, the brief asks for {HTA_VERSION}")
    b.warm_up()
    floor = b.floor()
    extra_hta = run_all(b, args, scratch)
    cmdline = command_line(__file__, argv)
    notes = run_notes(b, floor)
    md = provenance(b, args, cmdline, machine, started) + [
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
    save_raw(scratch / "analyze_results.json", b, started, cmdline, machine, extra_hta, notes)
    if record:
        # a further run under this file's last "## analyze vs ..." section adds only its "###" part
        append_results(text, continues=SECTION_TITLE)
    return 0 if all(r["ok"] for i in b.inputs for r in i["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
