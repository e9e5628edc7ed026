"""``streamtrace epilogue``: everything after a training job, in one call."""
from __future__ import annotations

import argh

from .common import Exit


@argh.arg("run_dir", help="the training run's output folder (traces, topology)")
@argh.arg("--full", help="merge every event, not only GPU processes")
@argh.arg("--in-memory", help="analyse in memory instead of --chunked")
@argh.arg("-j", "--jobs", type=int, help="worker processes (default: all cores)")
@argh.arg("--max-memory", type=float, help="cap in GB: limits parallel workers (~0.6 GB each)")
@argh.arg("--strict", help="exit 1 when anything failed (default: always exit 0)")
@argh.arg("--name", help="run name for the report (default: the folder name)")
def epilogue(run_dir, *, full=False, in_memory=False, jobs=0, max_memory=None, strict=False, name=None):
    """After a training job: analyse, merge, aggregate, report and chart every iteration."""
    from ..epilogue import run      # (the CLI's convention: see streamtrace.cli)
    s = run(run_dir, full=full, chunked=not in_memory, jobs=jobs, max_memory_gb=max_memory, strict=strict, name=name)
    if s["report"]:
        print(f"report: {s['report']}")
    if strict and s["failures"]:
        raise Exit(1)
