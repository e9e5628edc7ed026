#!/usr/bin/env python3
"""First run vs warm run of ``streamtrace`` in a fresh virtual environment.

    python bench/bench_first_run.py --record                  # venv from this checkout, 3 rounds
    python bench/bench_first_run.py --venv /tmp/venv-x --reuse --rounds 5
    python bench/bench_first_run.py --system-site-packages    # no network: dependencies from this Python
    python bench/bench_first_run.py --system-site-packages --reinstall --src /tmp/old-tree   # reinstalls

Builds ``--venv`` with ``python -m venv`` and ``pip install SRC`` (pip's configured index;
``--system-site-packages`` when the network is unavailable: the dependencies then come from
the Python running this script, streamtrace itself is still installed into the venv), then for
every round and every command:

  1. deletes numba's cache of the installed package (``*.nbi``/``*.nbc`` in
     ``site-packages/streamtrace/**/__pycache__``, and the per-user kernel cache, which the runs keep
     under a temporary ``XDG_CACHE_HOME``): the state of a first install on a machine, when every
     kernel is compiled on first use;
  2. runs the command (the first run), then the same command again (the warm run).

The install itself is timed too (wall and CPU of pip and its build: the kernels ``setup.py`` compiles into
the wheel, which a first run then loads instead of compiling; docs/kernel-cache.md).
Commands: ``streamtrace demo`` (8 synthetic ranks: merge + validate) and ``streamtrace analyze``
of a 327-byte trace.  Each run is timed from outside: wall seconds, and the CPU seconds (user +
system) of the command and every process it waited for (its compiling and worker processes).
``NUMBA_CACHE_DIR`` and ``STREAMTRACE_CACHE_DIR`` are removed from the environment and
``XDG_CACHE_HOME`` is a temporary folder (the user's own cache is neither used nor touched).
The table gives the median of the rounds and first - warm; the target is first - warm <= 10 s
(wall).  ``--reinstall`` instead times each command's first run after installing the same
version again: cold in venv A (fills the cache), ``pip install --force-reinstall --no-deps SRC``
into A and the first run, then a fresh venv B with ``SRC`` and its first and warm runs (run it
with ``--src`` a tree before and after a change to compare).  Then ``streamtrace warmup -v`` on an
empty cache: what every kernel costs to compile (CPU seconds in its compiling process), the largest first.  The CPU seconds are the better
measure on a shared machine, since other processes stretch the wall times; the load average
during the runs is printed beside them.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import ROOT, append_results, command_line, log, machine_info, md_head, md_row

TARGET_S = 10.0

TINY_TRACE = (
    '{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1,"dur":20},'
    '{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":2,"dur":5,'
    '"args":{"correlation":9}},{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":10,"dur":8,'
    '"args":{"correlation":9,"stream":7,"device":0}}]}\n')


def build_venv(venv: Path, src: Path, system_site: bool) -> tuple:
    """A fresh venv at ``venv`` with ``src`` pip-installed; returns pip's (wall s, CPU s of pip and its
    build processes: the wheel's kernel compile, ``setup.py``, included)."""
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([sys.executable, "-m", "venv", str(venv)] + (["--system-site-packages"] if system_site else []),
                   check=True)
    wall, cpu, out, code = timed([str(venv / "bin" / "pip"), "install", "-q", str(src)], None, None)
    if code != 0:
        raise SystemExit(f"pip install {src} exited {code}:\n{out}")
    log(f"pip install {src}: {wall:.0f} s wall, {cpu:.0f} s CPU")
    return wall, cpu


def package_dir(venv: Path) -> Path:
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import os, streamtrace; print(os.path.dirname(streamtrace.__file__))"],
                         check=True, capture_output=True, text=True, cwd="/").stdout.strip()
    return Path(out)


def clear_numba_cache(pkg: Path, env=None) -> int:
    """Delete the installed package's numba files and the per-user kernel cache (``env``'s
    ``XDG_CACHE_HOME``/streamtrace); returns how many numba files were deleted."""
    n = 0
    for f in pkg.rglob("__pycache__/*"):
        if f.suffix in (".nbi", ".nbc"):
            f.unlink()
            n += 1
    if env and env.get("XDG_CACHE_HOME"):
        shutil.rmtree(Path(env["XDG_CACHE_HOME"]) / "streamtrace", ignore_errors=True)
    return n


def timed(argv, cwd, env):
    """(wall s, CPU s of the process and what it waited for, stderr + stdout text, exit code)."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    return wall, ru.ru_utime + ru.ru_stime, text, code


def run_rounds(cmds, pkg, tmp, env, rounds):
    """``{command: {"first", "warm", "first_cpu", "warm_cpu": [s per round], "notice": count, "load": [...]}}``."""
    rows = {c: {"first": [], "warm": [], "first_cpu": [], "warm_cpu": [], "notice": 0, "load": []} for c in cmds}
    for r in range(rounds):
        for c, row in rows.items():
            clear_numba_cache(pkg, env)
            for kind in ("first", "warm"):
                work = tmp / f"run-{c}-{r}-{kind}"
                work.mkdir()
                row["load"].append(os.getloadavg()[0])
                wall, cpu, out, code = timed(cmds[c], work, env)
                if code != 0:
                    raise SystemExit(f"{' '.join(cmds[c])} exited {code}:\n{out}")
                row[kind].append(wall)
                row[kind + "_cpu"].append(cpu)
                if kind == "first":
                    row["notice"] += "first run only" in out
                shutil.rmtree(work)
            log(f"round {r + 1}: {c} first {row['first'][-1]:.1f} s ({row['first_cpu'][-1]:.1f} s CPU), "
                f"warm {row['warm'][-1]:.1f} s ({row['warm_cpu'][-1]:.1f} s CPU)")
    return rows


def table(rows, rounds) -> list:
    med = statistics.median
    lines = md_head(["command", "first run wall s", "warm run wall s", "first - warm wall s", "first CPU s",
                     "warm CPU s", "first - warm CPU s", "notice on stderr", "load avg", "target (<= 10 s)"])
    for c, row in rows.items():
        d = med([a - b for a, b in zip(row["first"], row["warm"])])
        dc = med([a - b for a, b in zip(row["first_cpu"], row["warm_cpu"])])
        lines.append(md_row([f"`streamtrace {c}`", f"{med(row['first']):.1f}", f"{med(row['warm']):.1f}",
                             f"**{d:.1f}**", f"{med(row['first_cpu']):.1f}", f"{med(row['warm_cpu']):.1f}",
                             f"{dc:.1f}", f"{row['notice']}/{rounds}", f"{med(row['load']):.1f}",
                             "met" if d <= TARGET_S else "NOT met"]))
    return lines


def warmup_breakdown(exe, pkg, tmp, env) -> list:
    """``streamtrace warmup -v`` on an empty cache, the kernels the wheel carries (``kernels/prebuilt``)
    moved aside for it: one line with its wall/CPU, then the kernels' compile CPU seconds, largest first."""
    clear_numba_cache(pkg, env)
    prebuilt, aside = pkg / "kernels" / "prebuilt", tmp / "prebuilt-aside"
    if prebuilt.exists():
        prebuilt.rename(aside)
    try:
        wall, cpu, out, code = timed([exe, "warmup", "-v"], tmp, env)
    finally:
        if aside.exists():
            aside.rename(prebuilt)
    if code != 0:
        raise SystemExit(f"streamtrace warmup exited {code}:\n{out}")
    units = sorted(((float(s), n) for n, s in re.findall(r"^\s+(\S+): ([\d.]+) s CPU$", out, re.M)), reverse=True)
    lines = [f"`streamtrace warmup -v` on an empty cache: {wall:.1f} s wall, {cpu:.1f} s CPU (all processes), "
             f"{len(units)} kernels, {sum(s for s, _ in units):.1f} s CPU in the compiling processes, "
             f"load avg {os.getloadavg()[0]:.1f}. CPU s to compile each (its callees already cached):", ""]
    lines.append(", ".join(f"{n} {s:.2f}" for s, n in units))
    return lines


def _commands(venv: Path, tmp: Path) -> dict:
    exe = str(venv / "bin" / "streamtrace")
    return {"demo": [exe, "demo", "demo-out"], "analyze": [exe, "analyze", str(tmp / "tiny.json"), "-o", "analyze-out"]}


def _run_in(argv, tmp, env, label):
    """Run ``argv`` in a fresh folder under ``tmp``: (wall s, CPU s); exits on failure."""
    work = Path(tempfile.mkdtemp(dir=tmp, prefix="run-"))
    wall, cpu, out, code = timed(argv, work, env)
    shutil.rmtree(work, ignore_errors=True)
    if code != 0:
        raise SystemExit(f"{label}: {' '.join(argv)} exited {code}:\n{out}")
    return wall, cpu


def reinstall_rounds(src: Path, names, tmp, env, rounds, system_site):
    """``{command: {"cold", "reinstall", "fresh", "warm": [(wall, cpu) per round], "load": [...]}}``: per
    round and command, an empty cache (the per-user one under ``env``'s XDG_CACHE_HOME too), venv A
    with ``src`` and the command's cold run there (it fills the cache), ``pip install --force-reinstall
    --no-deps src`` into A and the command's first run, then a fresh venv B and its first and warm runs."""
    rows = {c: {"cold": [], "reinstall": [], "fresh": [], "warm": [], "load": []} for c in names}
    for r in range(rounds):
        for c, row in rows.items():
            for d in ("streamtrace", "numba"):
                shutil.rmtree(Path(env["XDG_CACHE_HOME"]) / d, ignore_errors=True)
            a, b = tmp / "venv-a", tmp / "venv-b"
            build_venv(a, src, system_site)
            row["load"].append(os.getloadavg()[0])
            row["cold"].append(_run_in(_commands(a, tmp)[c], tmp, env, "cold"))
            subprocess.run([str(a / "bin" / "pip"), "install", "-q", "--force-reinstall", "--no-deps", str(src)],
                           check=True)
            row["reinstall"].append(_run_in(_commands(a, tmp)[c], tmp, env, "after reinstall"))
            build_venv(b, src, system_site)
            row["fresh"].append(_run_in(_commands(b, tmp)[c], tmp, env, "fresh venv"))
            row["warm"].append(_run_in(_commands(b, tmp)[c], tmp, env, "warm"))
            log(f"round {r + 1}: {c} " + ", ".join(f"{k} {v[-1][0]:.1f} s ({v[-1][1]:.1f} s CPU)"
                                                    for k, v in row.items() if k != "load"))
    return rows


def reinstall_table(rows, src) -> list:
    med = statistics.median
    lines = md_head(["source", "command", "cold first run (empty cache)", "first run after `pip install "
                     "--force-reinstall` (same venv)", "first run in a fresh venv", "warm run", "load avg"])
    for c, row in rows.items():
        cells = [f"{med(w for w, _ in row[k]):.1f} s wall, {med(u for _, u in row[k]):.1f} s CPU"
                 for k in ("cold", "reinstall", "fresh", "warm")]
        lines.append(md_row([f"`{src}`", f"`streamtrace {c}`", *cells, f"{med(row['load']):.1f}"]))
    return lines


_COUNT = r"""
import collections, json, sys, time
from numba.core import event
rec = event.RecordingListener()
event.register("numba:compile", rec)
cmd, tiny = sys.argv[1], sys.argv[2]
if cmd == "demo":
    from streamtrace.cli.demo import run_demo
    run_demo("demo-out", jobs=1, log=lambda *a: None)
else:
    from streamtrace.analyze import AnalyzeOptions, analyze
    analyze([tiny], "analyze-out", AnalyzeOptions(jobs=1))
funcs = [getattr(e.data["dispatcher"], "py_func", None) for _, e in rec.buffer if e.is_start]
kern = collections.Counter(f.__qualname__ for f in funcs if f is not None and f.__module__.startswith("streamtrace.kernels"))
print(json.dumps({"cpu": time.process_time(), "compiles": len(funcs), "kernels": len(kern),
                  "specialisations": sum(kern.values()), "repeated": {k: v for k, v in kern.items() if v > 1}}))
"""


def count_compiles(trees, tmp) -> list:
    """For each source tree (a checkout's root): ``demo`` and an ``analyze`` of the tiny trace in
    one process, serially (``-j 1``, no compiling ahead), on an empty ``NUMBA_CACHE_DIR``: the
    process's CPU seconds and numba's compiles (all, and the kernels' specialisations)."""
    lines = md_head(["source tree", "command", "CPU s", "numba compiles", "kernels", "kernel specialisations",
                     "compiled more than once"])
    for tree in trees:
        for cmd in ("demo", "analyze"):
            work = Path(tempfile.mkdtemp(dir=tmp))
            env = {**os.environ, "NUMBA_CACHE_DIR": str(work / "cache"), "PYTHONPATH": str(tree)}
            p = subprocess.run([sys.executable, "-c", _COUNT, cmd, str(tmp / "tiny.json")], cwd=work, env=env,
                               capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"counting compiles of {cmd} in {tree} failed:\n{p.stderr}")
            r = json.loads(p.stdout.splitlines()[-1])
            rep = ", ".join(f"{k} x{v}" for k, v in sorted(r["repeated"].items())) or "-"
            lines.append(md_row([f"`{tree}`", cmd, f"{r['cpu']:.1f}", str(r["compiles"]), str(r["kernels"]),
                                 str(r["specialisations"]), rep]))
            log(lines[-1])
            shutil.rmtree(work, ignore_errors=True)
    return lines


def _clean_env(tmp: Path) -> dict:
    """This environment without a chosen cache folder or PYTHONPATH, the per-user cache under ``tmp``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "STREAMTRACE_CACHE_DIR", "PYTHONPATH", "NUMBA_CACHE_LOCATOR_CLASSES")}
    env["XDG_CACHE_HOME"] = str(tmp / "xdg")
    # matplotlib's font cache lives there too: build it now, not in the first timed run
    subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], env=env, check=True)
    return env


def reinstall_main(args, argv, tmp: Path):
    try:
        (tmp / "tiny.json").write_text(TINY_TRACE)
        src = Path(args.src).resolve()
        rows = reinstall_rounds(src, args.commands.split(","), tmp, _clean_env(tmp), args.rounds,
                                args.system_site_packages)
        info = machine_info(("numba", "llvmlite"))
        text = [f"### {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC: first run after reinstalling the same "
                "version", "", f"`{command_line(__file__, argv)}` — nproc {info['nproc']}, {info['cpu']}, Python "
                f"{info['python']}, numba {info['numba']}, git {info['git']}; median of {args.rounds} rounds; CPU = "
                "user + sys of the command and every process it waited for; per round an empty cache, "
                "`XDG_CACHE_HOME` a temporary folder (matplotlib's font cache built there first).", ""]
        text += reinstall_table(rows, args.src) + [""]
        print("\n".join(text))
        if args.record:
            append_results("\n".join(text))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=str(ROOT), help="what to pip install (default: this checkout)")
    ap.add_argument("--venv", default=None, help="venv folder (default: a temporary one, removed at the end)")
    ap.add_argument("--reuse", action="store_true", help="use --venv as it is (already installed)")
    ap.add_argument("--system-site-packages", action="store_true",
                    help="venv sees this Python's packages (no network: the dependencies come from there)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--commands", default="demo,analyze", help="demo, analyze (comma separated)")
    ap.add_argument("--record", action="store_true", help="append the results to bench/RESULTS.md")
    ap.add_argument("--reinstall", action="store_true",
                    help="instead: each command's first run after reinstalling the same version (same venv, "
                         "fresh venv) against its cold first run")
    ap.add_argument("--count-compiles", nargs="+", metavar="TREE", default=None,
                    help="instead: count numba's compiles of demo and analyze (serial, one process, empty cache) "
                         "with the code of these source trees, e.g. a checkout of main and this one")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="st-first-run-"))
    venv = Path(args.venv) if args.venv else tmp / "venv"
    if args.count_compiles:
        (tmp / "tiny.json").write_text(TINY_TRACE)
        text = [f"### {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC: numba compiles of a first run, serial",
                "", f"`{command_line(__file__, argv)}` — load avg {os.getloadavg()[0]:.1f}", ""]
        text += count_compiles([Path(t).resolve() for t in args.count_compiles], tmp)
        print("\n".join(text))
        if args.record:
            append_results("\n".join(text))
        shutil.rmtree(tmp, ignore_errors=True)
        return
    if args.reinstall:
        reinstall_main(args, argv, tmp)
        return
    try:
        pip = None if args.reuse else build_venv(venv, Path(args.src), args.system_site_packages)
        pkg = package_dir(venv)
        exe = str(venv / "bin" / "streamtrace")
        env = _clean_env(tmp)
        (tmp / "tiny.json").write_text(TINY_TRACE)
        every = {"demo": [exe, "demo", "demo-out"],
                 "analyze": [exe, "analyze", str(tmp / "tiny.json"), "-o", "analyze-out"]}
        cmds = {c: every[c] for c in args.commands.split(",")}
        rows = run_rounds(cmds, pkg, tmp, env, args.rounds)
        info = machine_info(("numba", "llvmlite"))
        venv_kind = "--system-site-packages" if args.system_site_packages else "own site-packages"
        text = [f"## {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC: first run vs warm run in a fresh venv", "",
                f"`{command_line(__file__, argv)}` — nproc {info['nproc']}, {info['cpu']}, Python {info['python']}, "
                f"numba {info['numba']}, llvmlite {info['llvmlite']}, git {info['git']}; venv: `python -m venv` "
                f"({venv_kind}) + `pip install {args.src}`, numba cache of the installed package deleted before each "
                f"round; median of {args.rounds} rounds; CPU = user + sys of the command and every process it "
                "waited for.", ""]
        carried = sum(1 for _ in (pkg / "kernels" / "prebuilt").rglob("*.nbi"))
        text += [f"`pip install {args.src}`: " + (f"{pip[0]:.1f} s wall, {pip[1]:.1f} s CPU" if pip else "not run")
                 + f"; the wheel carries {carried} compiled kernel indexes (`kernels/prebuilt`, setup.py). "
                 "The first runs below are the first after that install (user cache empty).", ""]
        text += table(rows, args.rounds) + [""]
        text += warmup_breakdown(exe, pkg, tmp, env) + [""]
        print("\n".join(text))
        if args.record:
            append_results("\n".join(text))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
