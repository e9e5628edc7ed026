#!/usr/bin/env python3
"""Where one rank-step of the critical path and its what-if replay spends its CPU: the step graph's
construction (``critical_local.build_step`` and its parts) and the replay's rows
(``whatif_local.ReplayRows.add``, its kernel ``anchor_pairs`` apart), in process-time ms per
rank-step, best of ``--repeat`` rounds, for the checkout on ``sys.path`` (run it with
``PYTHONPATH=CHECKOUT`` to compare two).  AGG: an aggregate folder (its ``aggregate.json`` names the
parts and steps); the parts' analysed tables are read once, outside the timing.

    PYTHONPATH=. python bench/critical_steps.py AGG [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

from streamtrace.aggregate import critical_cpu, critical_local, whatif_local
from streamtrace.aggregate.whatif import PartsJob, parts_of

PARTS = ("collective_waits", "cpu_chains", "_launches", "gpu_events", "queued_behind", "sync_edges",
         "cpu_collectives", "zero_linked_syncs", "_anchors")


def _timed(module, name, label, into):
    f = getattr(module, name)

    def g(*a, **k):
        t = time.process_time()
        try:
            return f(*a, **k)
        finally:
            into[label] += time.process_time() - t
    setattr(module, name, g)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("agg", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    meta = json.loads((a.agg / "aggregate.json").read_text())
    parts = parts_of(meta)
    job = PartsJob({int(s[1]) for s in meta.get("steps") or []} or None)
    spent: dict = defaultdict(float)
    for name in PARTS:
        _timed(critical_local, name, name, spent)
    for name in ("chain", "thread_waits", "lane_name"):
        _timed(critical_cpu, name, f"  cpu_chains: {name}", spent)
    _timed(whatif_local, "anchor_pairs", "anchor_pairs (in add)", spent)
    graphs = {p: critical_local.part_graphs(job, part, critical_local.part_reads(part)) for p, part in parts.items()}
    best, n = None, 0
    for _ in range(a.repeat):
        spent.clear()
        n = 0
        for p, g in graphs.items():
            if g is None:
                continue
            rows = whatif_local.ReplayRows(0, p, parts[p].rank)
            for w in g.windows(job.steps):
                t = time.process_time()
                graph = g.build(*w)
                spent["build_step"] += time.process_time() - t
                t = time.process_time()
                rows.add(g, w[0], *graph)
                spent["ReplayRows.add"] += time.process_time() - t
                n += 1
        if best is None or spent["build_step"] + spent["ReplayRows.add"] < best["build_step"] + best["ReplayRows.add"]:
            best = dict(spent)
    print(f"{a.agg}: {n} rank-steps, process-time ms per rank-step (best of {a.repeat})")
    for k, v in best.items():
        print(f"  {k:28s} {1000 * v / max(n, 1):7.3f}")


if __name__ == "__main__":
    main()
