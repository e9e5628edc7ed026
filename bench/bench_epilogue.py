#!/usr/bin/env python3
"""The whole ``streamtrace epilogue``, stage by stage, this checkout against a baseline checkout.

    python bench/bench_epilogue.py --baseline ../base-f8b8bc9                 # a100x8 and synth256, 3 rounds
    python bench/bench_epilogue.py --baseline REF --jobs synth1024,synth4096 --rounds 1
    python bench/bench_epilogue.py --quick                                    # a100x8 once, nothing recorded

Run it before a change that touches a stage lands (CONTRIBUTING.md): each stage's own bench measures
only that stage, and the epilogue is where their costs add up.

The jobs (``--jobs``, built once into the scratch folder, not timed):

* ``a100x8``: a real-derived 8-rank A100 job: ``../shared/traces/real/a100_rank3_of8.json.gz`` (one rank
  of a real 8 x A100 NCCL job: 109k events, 6 ProfilerSteps, SendRecv and AllReduce kernels) written as
  ranks 0-7 by ``tools/inflate_trace.py --ranks 8 --size-mb 1 --gz`` (one copy of its events per rank,
  only ``distributedInfo.rank`` differs; 28 MB of JSON, 2.3 MB gzipped, per rank);
* ``dlrm``: ``../shared/traces/real-multi/param_dlrm_v100x8`` as it is (a real 8 x V100 DLRM step);
* ``synth<N>``: ``tools/gen_synthetic.py --world-size N --tp 4 --pp 4 --layers 8 --microbatches 4 --gz``
  (the generator of issue 48's rows);
* ``dp<N>``: the same generator with ``--tp 1 --pp 1``: pure data parallelism, one process group of all N
  ranks (what grows with a group's size, not with the rank count: its rank list on each collective).

Each checkout's ``streamtrace warmup`` runs first (not timed), so that no round compiles kernels, and
``compileall`` of its package, so that no process compiles modules (``pip install`` writes the bytecode; a checkout
run with ``PYTHONDONTWRITEBYTECODE=1`` has none, and every stage's process compiled what it imports: importing
the stages' modules of 62ca9df took 1.92-2.12 CPU-s so, 0.64-0.71 with bytecode, a bias against the checkout with
more modules).  Each
round runs the epilogue of every checkout on every job, alternating (this, baseline, this, ...;
the order flips every round), into a fresh output folder, through ``bench/epilogue_stages.py``, which
measures each stage's child process (wall, CPU of the process and its workers, largest process peak
RSS, tree peak RSS); the whole command is measured by ``harness.measure`` (wall, CPU, largest process,
tree peak, the CPU the rest of the machine used meanwhile).  ``--rerun`` also measures a second run
into the same folder (every stage reused).  Medians over the rounds; ratios this / baseline.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from harness import (BENCH, REAL, ROOT, SHARED, command_line, default_scratch, finish, fmt_s, git_describe, log, mb,
                     md_head, md_row, measure, uptime, wait_idle)

PY = sys.executable
STAGES = ("compile", "discover", "analyze", "merge", "aggregate", "critical path marks", "report + charts")


def build_job(name: str, scratch: Path) -> Path:
    """The run folder of job ``name`` (see the module docstring), built once."""
    if name == "dlrm":
        return SHARED / "traces" / "real-multi" / "param_dlrm_v100x8"
    d = scratch / "jobs" / name
    done = d / ".built"
    if done.is_file():
        return d
    shutil.rmtree(d, ignore_errors=True)
    if name == "a100x8":
        cmd = [PY, ROOT / "tools" / "inflate_trace.py", REAL / "a100_rank3_of8.json.gz", d, "--ranks", "8",
               "--size-mb", "1", "--gz"]
    elif name.startswith("synth") and name[5:].isdigit():
        cmd = [PY, ROOT / "tools" / "gen_synthetic.py", d, "--world-size", name[5:], "--tp", "4", "--pp", "4",
               "--layers", "8", "--microbatches", "4", "--gz"]
    elif name.startswith("dp") and name[2:].isdigit():
        cmd = [PY, ROOT / "tools" / "gen_synthetic.py", d, "--world-size", name[2:], "--tp", "1", "--pp", "1",
               "--layers", "8", "--microbatches", "4", "--gz"]
    else:
        raise SystemExit(f"unknown job {name!r}: a100x8, dlrm, synth<N> or dp<N>")
    log(f"{name}: building ({' '.join(map(str, cmd[1:]))})")
    subprocess.run(list(map(str, cmd)), check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    done.write_text("ok\n")
    return d


def baseline_checkout(ref: str, scratch: Path) -> Path:
    """``ref`` itself when it is a checkout's folder, else a worktree of the git ref ``ref`` made in the
    scratch folder (detached; kept for later runs)."""
    p = Path(ref)
    if (p / "streamtrace").is_dir():
        return p.resolve()
    wt = scratch / f"baseline-{ref.replace('/', '_')}"
    if not (wt / "streamtrace").is_dir():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(wt), ref], check=True)
    return wt


def one_run(checkout: Path, job: Path, out: Path, logs: Path, label: str, jobs: str, fresh=True) -> dict:
    """One measured epilogue of ``checkout`` on ``job`` into ``out``: ``harness.measure``'s dict plus
    ``stages`` (``epilogue_stages.py``'s rows by stage name)."""
    if fresh:
        shutil.rmtree(out, ignore_errors=True)
    js = logs / f"{label}.stages.json"
    cmd = [PY, BENCH / "epilogue_stages.py", "--checkout", checkout, "--json", js, "--",
           "epilogue", job, "-o", out, "-q", "-j", jobs]
    r = measure(cmd, logs, label, cwd=checkout)
    if r["rc"] != 0:
        raise SystemExit(f"{label} failed (rc {r['rc']}): {r['stderr'][-2000:]}")
    rows = json.loads(js.read_text())["stages"]
    r["stages"] = {}
    for s in rows:                                   # several iterations: a stage's calls add up
        t = r["stages"].setdefault(s["stage"], {"wall": 0.0, "cpu_s": 0.0, "largest_rss": 0, "tree_rss": 0})
        t["wall"] += s["wall"]
        t["cpu_s"] += s["cpu_s"]
        t["largest_rss"] = max(t["largest_rss"], s["largest_rss"])
        t["tree_rss"] = max(t["tree_rss"], s["tree_rss"])
    return r


def _med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summary(runs: list) -> dict:
    """Medians over ``runs`` of the whole command and of each stage."""
    out = {"total": {"wall": _med(r["wall"] for r in runs), "cpu_s": _med(r.get("cpu_s") for r in runs),
                     "largest_rss": _med(r["max_single_rss"] for r in runs),
                     "tree_rss": _med(r["peak_rss"] for r in runs), "other": _med(r.get("other_cores") for r in runs)}}
    names = [s for s in STAGES if any(s in r["stages"] for r in runs)]
    names += sorted({s for r in runs for s in r["stages"]} - set(names))
    for s in names:
        out[s] = {k: _med(r["stages"][s][k] for r in runs if s in r["stages"])
                  for k in ("wall", "cpu_s", "largest_rss", "tree_rss")}
    return out


def _ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else "-"


def table(job: str, this: dict, base: dict | None) -> list:
    """The Markdown rows of one job: each stage and the whole command, this checkout (and the baseline)."""
    cols = ["stage", "wall s", "CPU s", "largest process MB", "tree peak MB"]
    if base is not None:
        cols += ["baseline wall s", "baseline CPU s", "baseline largest MB", "CPU ratio", "largest RSS ratio"]
    lines = md_head(cols)
    for s in [k for k in this if k != "total"] + [k for k in (base or {}) if k not in this] + ["total"]:
        a, b = this.get(s), (base or {}).get(s)
        cells = [f"**{s}**" if s == "total" else s]
        cells += ([fmt_s(a["wall"], 2), fmt_s(a["cpu_s"], 2), f"{mb(a['largest_rss']):,.0f}",
                   f"{mb(a['tree_rss']):,.0f}"] if a else ["reused/absent"] + ["-"] * 3)
        if base is not None:
            cells += ([fmt_s(b["wall"], 2), fmt_s(b["cpu_s"], 2), f"{mb(b['largest_rss']):,.0f}"] if b else ["-"] * 3)
            cells += [_ratio(a and a["cpu_s"], b and b["cpu_s"]),
                      _ratio(a and a["largest_rss"], b and b["largest_rss"])]
        lines.append(md_row(cells))
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", help="a checkout's folder, or a git ref (a worktree of it is made in the scratch "
                    "folder)")
    ap.add_argument("--jobs", default="a100x8,synth256", help="a100x8, dlrm, synth<N>, dp<N>, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-j", default="0", help="the epilogue's -j (default 0: every core)")
    ap.add_argument("--rerun", action="store_true", help="also a second, unchanged run into the same folder")
    ap.add_argument("--wait", type=float, default=30.0, help="wait up to S s for a quiet machine before each run")
    ap.add_argument("--scratch", type=Path, default=default_scratch() / "epilogue")
    ap.add_argument("--quick", action="store_true", help="a100x8, one round, nothing recorded")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the outputs (the built jobs are always kept)")
    args = ap.parse_args(argv)
    if args.quick:
        args.jobs, args.rounds, args.no_record, args.wait = "a100x8", 1, True, 0
    scratch, logs = args.scratch, args.scratch / "logs"
    checkouts = {"this": ROOT}
    if args.baseline:
        checkouts["baseline"] = baseline_checkout(args.baseline, scratch)
    for k, c in checkouts.items():                # numba's cache filled first: no round pays for compiling
        log(f"{k}: streamtrace warmup, compileall")
        subprocess.run([PY, "-m", "streamtrace", "warmup", "-q"], cwd=c, check=False,
                       env={**os.environ, "PYTHONPATH": str(c)})
        subprocess.run([PY, "-m", "compileall", "-q", str(Path(c) / "streamtrace")], check=False)   # as pip does
    lines = [f"## Epilogue by stage ({git_describe()})", "", f"`{command_line(__file__, argv)}`", "",
             f"baseline: {checkouts.get('baseline', 'none')}; load before: {uptime()}", ""]
    for name in args.jobs.split(","):
        job = build_job(name, scratch)
        runs = {k: [] for k in checkouts}
        reruns = {k: [] for k in checkouts}
        for i in range(args.rounds):
            order = list(checkouts) if i % 2 == 0 else list(checkouts)[::-1]
            for k in order:
                if args.wait:
                    wait_idle(args.wait)
                out = scratch / "out" / f"{name}-{k}"
                log(f"{name}: {k} epilogue ({i + 1}/{args.rounds})")
                runs[k].append(one_run(checkouts[k], job, out, logs, f"{name}_{k}_{i}", args.j))
                if args.rerun:
                    reruns[k].append(one_run(checkouts[k], job, out, logs, f"{name}_{k}_{i}_rerun", args.j,
                                             fresh=False))
        sums = {k: summary(v) for k, v in runs.items()}
        lines += [f"### {name} ({args.rounds} round(s), medians; other cores busy: "
                  + ", ".join(f"{k} {sums[k]['total']['other'] or 0:.2f}" for k in sums) + ")", "",
                  *table(name, sums["this"], sums.get("baseline")), ""]
        if args.rerun:
            rs = {k: summary(v) for k, v in reruns.items()}
            lines += [f"{name}, unchanged rerun into the same folder:", "",
                      *table(name, rs["this"], rs.get("baseline")), ""]
    lines += [f"load after: {uptime()}", ""]
    finish("\n".join(lines), args, None if args.keep else scratch / "out")


if __name__ == "__main__":
    main()
