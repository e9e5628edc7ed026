#!/usr/bin/env python3
"""The CPU work of ``merge --steps`` / ``--window`` against the full merge on a rank cut into byte
ranges, each merge run whole in one process: its tasks (the byte ranges, the rank's decision and
check) run inline, one after the other, so the process's CPU time is the merge's work without the
pool's scheduling noise (a CLI run's user + sys of the process tree spreads by +-0.3 CPU-s between
identical rounds on this 2-core VM, `bench_merge.py --filters`; this by ~0.05 on a quiet VM, more
when a neighbour is busy).  Wall time
means nothing here and is not reported.

    python bench/bench_filter_cpu.py                               # 1 x 300 MB rank, 5 rounds
    python bench/bench_filter_cpu.py --baseline /tmp/base --record # and another checkout's, round by round

A round runs, in a fresh process per checkout, one warm-up merge (numba's kernels loaded) and then
each variant once (full, ``--steps``, each ``--window``; each round starts with another), timing each
by ``time.process_time``; the rounds alternate between the checkouts.  The input is
``bench_merge.py``'s (the V100 rank inflated to ``--size`` MB, 8 time-shifted copies for 300 MB:
``--steps 3-4`` keeps 92.5 % of its events), merged with ``jobs=2`` and cut into 4 ranges as the CLI
cuts it on 2 cores.  Prints a Markdown table (median and least CPU-s per variant, each against the
same checkout's full merge: another process on the VM only adds time, so the least is the steadier
figure), and a second one of where each merge spends it (median thread CPU of the range passes,
the check, the decision thread and the write: ``PHASES``, far steadier than the totals when one
phase changes), and the CPU of only finding the rank's ``ProfilerStep#`` names before the merge (what
a merge that knew ``--steps``' window before its pass would add at least); ``--record`` appends them to
``bench/RESULTS.md``.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import DEFAULT_SRC, ROOT, append_results, command_line, default_scratch, ensure_inputs, log, machine_info


def worker(input_dir: str, variants: list[str], out: str) -> None:
    """In this process (run with the checkout's root first on ``sys.path``): a warm-up merge, then
    each variant's merge timed; prints ``{variant: {"cpu": CPU s, "phases": {phase: thread CPU s}}}`` as
    JSON (``PHASES``)."""
    from concurrent.futures import Executor, Future

    import streamtrace.runtime.parallel as P
    from streamtrace.merge import MergeOptions, merge

    class Inline(Executor):
        def submit(self, fn, *args, **kwargs):
            f = Future()
            try:
                f.set_result(fn(*args, **kwargs))
            except BaseException as e:          # noqa: BLE001 - handed to the caller as the pool would
                f.set_exception(e)
            return f

    @contextlib.contextmanager
    def inline_pool(jobs, arr=None):
        yield Inline()

    P.pool = inline_pool

    def options(v: str) -> MergeOptions:
        if v.startswith("--steps "):
            a, b = v.split()[1].split("-")
            return MergeOptions(jobs=2, steps=(int(a), int(b)))
        if v.startswith("--window "):
            a, b = v.split()[1].split(":")
            return MergeOptions(jobs=2, window_ms=(float(a), float(b)))
        return MergeOptions(jobs=2)

    spent = _time_phases()
    merge([input_dir], Path(out), options(variants[0]))
    cpu = {}
    for v in variants:
        spent.clear()
        t = time.process_time()
        res = merge([input_dir], Path(out), options(v))
        cpu[v] = {"cpu": time.process_time() - t, "phases": dict(spent)}
        assert res[0].get("split"), "the rank was not cut into byte ranges"
    print(json.dumps(cpu))


# Where a merge of the cut rank spends its CPU: (phase, module, function) timed by the thread CPU of
# the thread that runs it (the decision runs in a thread of its own).  A name that is not there (another
# checkout) is left out; the rest of the merge is "other".
PHASES = [("range passes", "streamtrace.merge.ranges", "merge_range"),
          ("check", "streamtrace.merge.rewrite", "split_validation"),
          ("check", "streamtrace.merge.split_filter", "split_reports"),
          ("decision thread", "streamtrace.merge.split_filter", "_decide_ranges"),
          ("write", "streamtrace.merge.line", "write_merged")]


def _time_phases() -> dict:
    """Wrap each function of ``PHASES`` where it is called from; returns the dict the wrappers add
    their thread CPU seconds to, by phase."""
    import functools
    import importlib

    spent: dict = {}

    def timed(label, f):
        @functools.wraps(f)
        def g(*a, **k):
            t = time.thread_time()
            try:
                return f(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.thread_time() - t
        return g

    for label, module, name in PHASES:
        mod = importlib.import_module(module)
        if hasattr(mod, name):
            setattr(mod, name, timed(label, getattr(mod, name)))
    return spent


def round_of(checkout: Path, input_dir: Path, variants: list[str], out: Path) -> dict:
    """One round in a fresh process with ``checkout``'s streamtrace."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    res = subprocess.run([sys.executable, __file__, "--worker", str(input_dir), str(out), *variants],
                         env=env, cwd="/", capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=float, default=300, help="MB of the one rank (default 300)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--baseline", help="another checkout's root folder, measured round by round beside this one")
    ap.add_argument("--filter-steps", default="3-4")
    ap.add_argument("--filter-window", default="0:500,0:100000")
    ap.add_argument("--scratch", default=str(default_scratch()))
    ap.add_argument("--record", action="store_true", help="append the table to bench/RESULTS.md")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker[0], args.worker[2:], args.worker[1])
        return 0
    scratch = Path(args.scratch)
    input_dir = ensure_inputs(scratch, Path(DEFAULT_SRC), 1, args.size)[0]
    out = scratch / "out" / "filter_cpu.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    windows = [f"--window {w}" for w in args.filter_window.split(",") if w]
    variants = ["full merge", f"--steps {args.filter_steps}"] + windows
    checkouts = [("this checkout", ROOT)] + ([("baseline", Path(args.baseline).resolve())] if args.baseline else [])
    started = _dt.datetime.now().astimezone()
    cpu = {(c, v): [] for c, _ in checkouts for v in variants}
    phases = {(c, v): [] for c, _ in checkouts for v in variants}
    for k in range(args.repeat):
        order = variants[k % len(variants):] + variants[:k % len(variants)]     # no variant always first
        for name, root in checkouts:
            for v, got in round_of(root, input_dir, order, out).items():
                cpu[(name, v)].append(got["cpu"])
                phases[(name, v)].append(dict(got["phases"], other=got["cpu"] - sum(got["phases"].values())))
            log(f"round {k + 1}/{args.repeat} {name}: done")
    out.unlink(missing_ok=True)
    machine = machine_info()
    lines = [f"## {started:%Y-%m-%d %H:%M %Z}: `{command_line(__file__, argv)}`", "",
             f"- machine: {machine['nproc']} cores ({machine['cpu']}), Python {machine['python']}; "
             f"git {machine.get('git', '?')}"
             + "".join(f"; {n}: {_git(r)}" for n, r in checkouts[1:]),
             f"- input: 1 x {args.size:g} MB rank (`{input_dir}`), merged with jobs=2 (cut into byte ranges), "
             "every task "
             "inline in one process; CPU s = `time.process_time` of one merge, median and least of the rounds", "",
             "| checkout | merge | CPU s (median) | vs its full merge | CPU s (least) | vs its full merge | rounds |",
             "|---|---|---|---|---|---|---|"]
    for name, _ in checkouts:
        full, least = statistics.median(cpu[(name, variants[0])]), min(cpu[(name, variants[0])])
        for v in variants:
            m, a = statistics.median(cpu[(name, v)]), min(cpu[(name, v)])
            lines.append(f"| {name} | {v} | {m:.3f} | {m / full:.3f} | {a:.3f} | {a / least:.3f} | "
                         f"{', '.join(f'{x:.2f}' for x in cpu[(name, v)])} |")
    lines += _phase_table(checkouts, variants, phases)
    lines += _prescan_lines(input_dir, statistics.median(cpu[(checkouts[0][0], variants[0])]))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.record:
        append_results(text)
    return 0


def _phase_table(checkouts, variants, phases) -> list[str]:
    """Markdown lines: per checkout and merge, the median thread CPU of each phase (``PHASES``)."""
    names = list(dict.fromkeys([p for p, _, _ in PHASES] + ["other"]))
    out = ["", "Median CPU s per phase (thread CPU of the thread running it; `other`: the rest of the process's):", "",
           "| checkout | merge | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for name, _ in checkouts:
        for v in variants:
            runs = phases[(name, v)]
            out.append(f"| {name} | {v} | " + " | ".join(
                f"{statistics.median(r.get(p, 0.0) for r in runs):.3f}" for p in names) + " |")
    return out


def _prescan_lines(input_dir: Path, full_cpu: float) -> list[str]:
    """Markdown lines: the CPU of only finding the rank's ``ProfilerStep#`` names before the merge
    (``mmap.find`` over the page-cached file, least of 3): the least a merge that knew ``--steps``'
    window before rewriting the rank would add, against the full merge's median CPU ``full_cpu``."""
    import mmap

    path = max((p for p in input_dir.iterdir() if p.is_file()), key=lambda p: p.stat().st_size)    # the rank
    best, found = float("inf"), 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        for _ in range(3):
            t, found, at = time.process_time(), 0, m.find(b"ProfilerStep#")
            while at >= 0:
                found, at = found + 1, m.find(b"ProfilerStep#", at + 1)
            best = min(best, time.process_time() - t)
    return ["", f"Finding the rank's `ProfilerStep#` names alone, before any event is read ({found} found, "
            f"`mmap.find` over the {path.stat().st_size / 1e6:,.0f} MB file, least of 3): {best:.3f} CPU s, "
            f"{best / full_cpu:.3f}x the full merge's median CPU."]


def _git(root: Path) -> str:
    res = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return res.stdout.strip() or str(root)


if __name__ == "__main__":
    sys.exit(main())
