#!/usr/bin/env python3
"""Pin streamtrace's outputs, to show that a change (a refactoring) leaves them exactly as they were.

    python tools/pin_outputs.py run OUT          # every command on every input, outputs into OUT
    python tools/pin_outputs.py compare A B      # exit 1 when two runs differ; prints each difference

``run`` calls ``python -m streamtrace`` from the current folder (run it from the checkout to pin), on
the built-in demo (8 ranks, generated), ``../shared/traces/cpu-3d``, every trace in
``../shared/traces/real`` and every export in ``../shared/traces/nsys`` (merge, and ``--gpu-only``):
merge (default, ``--gpu-only``, ``-j 1``), validate, analyze (in memory and
``--chunked``; folders and a merged trace), topology, aggregate and report (``--no-charts``, and with
charts on the demo).  Commands run in a fixed work folder (``--work``, default
``/tmp/streamtrace-pin``), then the outputs move to ``OUT``, so the paths recorded inside them are
the same in every run.

``compare`` checks: merged traces byte for byte (decompressed), Parquet files with
``pyarrow.Table.equals`` (schema included), JSON equal but for timings (``seconds``, ``generated``), the
epilogue's stage ``fingerprint`` and its outputs' ``stat`` (both hold mtimes, and the demo is generated afresh
each run); CSV and TXT files byte for byte, Markdown but for timestamps; every command's exit code, and its
stdout/stderr with the numbers of seconds and MB/s masked.  Chart images are compared by name only (matplotlib writes
dates into SVG metadata).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def commands(work: Path) -> list[tuple[str, list[str]]]:
    """``[(name, argv)]``: every command of the pin run (argv after ``python -m streamtrace``)."""
    demo = work / "demo"
    cmds = [("demo", ["demo", str(demo)]),
            ("demo.merge-gpu", ["merge", str(demo / "traces"), "-o", str(work / "demo-gpu.json.gz"), "--gpu-only"]),
            ("demo.merge-j1", ["merge", str(demo / "traces"), "-o", str(work / "demo-j1.json"), "-j", "1",
                               "--no-validate"]),
            ("demo.validate", ["validate", "--json", str(demo / "merged.json.gz")]),
            ("demo.analyze", ["analyze", str(demo / "traces"), "-o", str(work / "demo-an"), "-j", "2"]),
            ("demo.analyze-merged", ["analyze", str(demo / "merged.json.gz"), "-o", str(work / "demo-an-merged"),
                                     "--chunked", "-j", "1"]),
            ("demo.topology", ["topology", "--from", str(demo / "traces"), "--json"]),
            ("demo.aggregate", ["aggregate", str(work / "demo-an"), "-o", str(work / "demo-agg"),
                                "--clock-sync", "collectives"]),
            ("demo.report", ["report", str(work / "demo-agg"), "--tokens-per-step", "65536", "--name", "demo"])]
    cpu3d = SHARED / "traces" / "cpu-3d"
    if cpu3d.is_dir():
        cmds += [("cpu3d.merge", ["merge", str(cpu3d), "-o", str(work / "cpu3d.json.gz")]),
                 ("cpu3d.analyze", ["analyze", str(cpu3d), "-o", str(work / "cpu3d-an")]),
                 ("cpu3d.topology", ["topology", "--from", str(cpu3d), "--json"]),
                 ("cpu3d.report", ["report", str(work / "cpu3d-an"), "-o", str(work / "cpu3d-rep"), "--no-charts",
                                   "--time-alignment", "individual"])]
    for t in sorted((SHARED / "traces" / "real").glob("*.json.gz")):
        n = t.name[:-len(".json.gz")]
        cmds += [(f"real.{n}.merge", ["merge", str(t), "-o", str(work / f"{n}.merged.json.gz")]),
                 (f"real.{n}.validate", ["validate", "--json", str(t)]),
                 (f"real.{n}.analyze", ["analyze", str(t), "-o", str(work / f"{n}-an"), "-j", "1"]),
                 (f"real.{n}.analyze-chunked", ["analyze", str(t), "-o", str(work / f"{n}-an-chunked"), "--chunked",
                                                "--chunk-events", "4096", "-j", "1"])]
    for t in sorted((SHARED / "traces" / "nsys").glob("*.sqlite")):
        n = t.stem
        cmds += [(f"nsys.{n}.merge", ["merge", str(t), "-o", str(work / f"{n}.merged.json")]),
                 (f"nsys.{n}.merge-gpu", ["merge", str(t), "-o", str(work / f"{n}.merged-gpu.json.gz"), "--gpu-only"])]
    return cmds


def run(out: Path, work: Path) -> int:
    if out.exists():
        sys.exit(f"{out} exists; give a new folder")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = {}
    env = dict(os.environ, PYTHONHASHSEED="0")
    for name, argv in commands(work):
        p = subprocess.run([sys.executable, "-m", "streamtrace", *argv], capture_output=True, text=True, env=env)
        log[name] = {"argv": argv, "code": p.returncode, "stdout": p.stdout, "stderr": p.stderr}
        print(f"{p.returncode} {name}", flush=True)
    (work / "commands.json").write_text(json.dumps(log, indent=1))
    shutil.move(str(work), str(out))
    return 0


_TIMING = re.compile(r"\d[\d,]*(\.\d+)?( ?(s|MB/s|ms)\b| seconds)|per worker process [^)]*\)|"
                     r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


def _mask(text: str) -> str:
    return _TIMING.sub("<t>", text)


def _drop_timings(v):
    if isinstance(v, dict):
        return {k: _drop_timings(x) for k, x in v.items() if k not in ("seconds", "generated", "fingerprint", "stat")}
    if isinstance(v, list):
        return [_drop_timings(x) for x in v]
    return v


def _read_bytes(p: Path) -> bytes:
    data = p.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _same_file(a: Path, b: Path) -> str | None:
    """None when equal, else a one-line reason."""
    name = a.name
    if name.endswith((".png", ".svg")):
        return None
    if name.endswith(".md"):
        return None if _mask(a.read_text()) == _mask(b.read_text()) else "text differs"
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq
        ta, tb = pq.read_table(a), pq.read_table(b)
        if not ta.schema.equals(tb.schema):
            return f"schema differs: {ta.schema} vs {tb.schema}"
        return None if ta.equals(tb) else f"rows differ ({ta.num_rows} vs {tb.num_rows} rows)"
    if name == "commands.json":
        ca, cb = json.loads(a.read_text()), json.loads(b.read_text())
        bad = []
        for k in sorted(set(ca) | set(cb)):
            x, y = ca.get(k), cb.get(k)
            if x is None or y is None:
                bad.append(f"{k}: only in one run")
            elif x["code"] != y["code"]:
                bad.append(f"{k}: exit {x['code']} vs {y['code']}")
            elif _mask(x["stdout"]) != _mask(y["stdout"]) or _mask(x["stderr"]) != _mask(y["stderr"]):
                bad.append(f"{k}: output differs:\n--- {x['stdout']}{x['stderr']}\n+++ {y['stdout']}{y['stderr']}")
        return "; ".join(bad) or None
    da, db = _read_bytes(a), _read_bytes(b)
    if name.endswith(".json") and not name.endswith(("merged.json", ".trace.json")) and da[:1] in (b"{", b"["):
        try:
            ja, jb = json.loads(da), json.loads(db)
        except ValueError:
            pass
        else:
            if "traceEvents" not in ja:
                return None if _drop_timings(ja) == _drop_timings(jb) else "JSON differs"
    return None if da == db else f"bytes differ ({len(da)} vs {len(db)})"


def compare(a: Path, b: Path) -> int:
    fa = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    fb = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    problems = [f"only in {a}: {p}" for p in sorted(fa - fb)] + [f"only in {b}: {p}" for p in sorted(fb - fa)]
    checked = 0
    for rel in sorted(fa & fb):
        why = _same_file(a / rel, b / rel)
        checked += 1
        if why:
            problems.append(f"{rel}: {why}")
    for p in problems:
        print(p)
    print(f"compared {checked} files: {len(problems)} difference(s)")
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--work", type=Path, default=Path("/tmp/streamtrace-pin"))
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    a = ap.parse_args()
    sys.exit(run(a.out, a.work) if a.cmd == "run" else compare(a.a, a.b))


if __name__ == "__main__":
    main()
