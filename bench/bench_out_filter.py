#!/usr/bin/env python3
"""What ``Checker.reports(out_filter=...)`` costs over ``reports()`` (merge's one-pass time filter
drops written events from the V_OUT view after the fact: one vectorised mask per sorted chunk).

    python bench/bench_out_filter.py                 # 2M events (3/4 X slices on 8 tracks, 1/4 flow ends)
    python bench/bench_out_filter.py --events 500000 --repeat 1

Builds the checker's fields directly (no trace file), records every event in V_IN | V_OUT, and
times (CPU seconds of this process, median of ``--repeat``) the sort and check of ``reports()``
with no filter and with a filter dropping about half the slices by window and half the flow ends.
Prints a Markdown table; ``--record`` appends it to ``bench/RESULTS.md`` with the command line.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from streamtrace.kernels import scan as K                      # noqa: E402
from streamtrace.kernels import validate as KV                  # noqa: E402
from streamtrace.validate.check import Checker, ValidateOptions  # noqa: E402
from streamtrace.validate.ordered import OutFilter              # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def fields(n: int, seed: int = 0) -> np.ndarray:
    """int64[n, NF]: X slices (ts 1 us apart, dur 0-3 us) on 8 tracks, every 4th event a flow end."""
    rng = np.random.default_rng(seed)
    f = np.zeros((n, KV.NF), np.int64)
    flow = np.arange(n) % 4 == 3
    f[:, KV.C_PH] = np.where(flow, np.where(np.arange(n) % 8 == 3, KV.PH_S, KV.PH_F), KV.PH_X)
    f[:, KV.C_PIDK] = f[:, KV.C_TIDK] = f[:, KV.C_CATK] = f[:, KV.C_IDK] = KV.INT
    f[:, KV.C_TIDV] = rng.integers(0, 8, n)
    f[:, KV.C_TS] = np.arange(n) * 1000
    f[:, KV.C_DUR] = rng.integers(0, 3000, n)
    f[:, KV.C_IDV] = np.arange(n) // 8
    f[:, KV.C_TFLAGS] = K.HAS_TS | K.HAS_DUR
    return f


def one(f: np.ndarray, filt: OutFilter | None, folder: str) -> float:
    with Checker(ValidateOptions(spill_dir=folder)) as chk:
        for a in range(0, len(f), 100_000):
            chk.account(f[a:a + 100_000], KV.V_IN | KV.V_OUT, out_pid=True)
        t = time.process_time()
        chk.reports(out_filter=filt)
        return time.process_time() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--record", action="store_true", help="append the table to bench/RESULTS.md")
    a = ap.parse_args(argv)
    f = fields(a.events)
    n = len(f)
    lo, hi = n * 1000 // 4, n * 1000 * 3 // 4
    dropped = np.arange(n) % 2 == 0
    filt = OutFilter(lo, hi, dropped, events=0)
    one(f[:1000], filt, tempfile.gettempdir())               # compile / load the kernels
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, fl in (("reports()", None), ("reports(out_filter=...)", filt)):
            ts = [one(f, fl, d) for _ in range(a.repeat)]
            rows.append(f"| {name} | {statistics.median(ts):.3f} | {', '.join(f'{t:.3f}' for t in ts)} |")
    head = (f"{n:,} events ({n * 3 // 4:,} X slices, {n // 4:,} flow ends), CPU s of reports() (merging the sorted "
            "runs and checking them; recording the events not counted):")
    table = "\n".join([head,
                       "", "| call | CPU s (median) | runs |", "|---|---|---|", *rows])
    print(table)
    if a.record:
        when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        cmd = "python bench/bench_out_filter.py " + " ".join(argv if argv is not None else sys.argv[1:])
        with open(RESULTS, "a") as out:
            out.write(f"\n## {when}: validate's after-the-fact output filter (`{cmd.strip()}`)\n\n{table}\n\n"
                      "Machine shared with other sessions (2 cores): differences under ~10 % are noise.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
