#!/usr/bin/env python3
"""HolisticTraceAnalysis' critical path of one rank's step beside streamtrace's, on the same trace.

    python tools/hta_critical_path.py TRACE.json[.gz] --step 6 [--json OUT.json]
    python tools/hta_critical_path.py TRACE.json[.gz] --annotation NAME --instance I [--json OUT.json]

Runs HTA's ``TraceAnalysis.critical_path_analysis`` (HTA >= 0.5, needs networkx and pandas; from 0.6 on
PyPI as ``traceinsight``) on
``TRACE`` for ``ProfilerStep#STEP`` and streamtrace's ``analyze`` + ``aggregate`` (a one-rank job)
on the same file, and prints / writes both: the path's length (ns) and its split by edge kind, with
HTA's version.  The kinds correspond as: HTA ``critical_path_operator`` = streamtrace ``cpu_op`` +
``compute_kernel`` + ``memcpy`` + ``comm_transfer`` + ``sync``; ``critical_path_kernel_launch_delay``
= ``launch_delay``; ``critical_path_kernel_kernel_delay`` = ``kernel_gap``;
``critical_path_dependency`` and ``critical_path_sync_dependency`` (weight 0 in HTA) = ``host_gap``
(counted in streamtrace: docs/critical-path.md says why).

HTA 0.5.0 calls ``DataFrame.drop(axis=1, columns=...)``, which pandas 3 rejects; this script drops
the redundant ``axis`` for HTA's calls (a shim around ``pandas.DataFrame.drop`` in this process only).
HTA reads a folder of rank traces, so the trace is copied (decompressed) into a temporary folder.

``--annotation NAME --instance I`` compares the window of a user annotation instead (HTA's own
critical-path test traces use ``[param|pytorch.model.alex_net|0|0|0|measure|forward]``, instance 1,
and have no ``ProfilerStep``): HTA gets the annotation and instance as its test passes them;
streamtrace, whose steps are ``ProfilerStep#N`` windows, gets a temporary copy of the trace in which
the I-th CPU event of that name (by start, from 0) is renamed ``ProfilerStep#1``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout without installing

HTA_KINDS = {"critical_path_operator": ("cpu_op", "compute_kernel", "memcpy", "comm_transfer", "sync"),
             "critical_path_kernel_launch_delay": ("launch_delay",),
             "critical_path_kernel_kernel_delay": ("kernel_gap",),
             "critical_path_dependency": ("host_gap",), "critical_path_sync_dependency": ()}


def _pandas_shim():
    import pandas as pd
    drop = pd.DataFrame.drop

    def compatible_drop(self, *args, **kwargs):
        if "columns" in kwargs and "axis" in kwargs:
            kwargs.pop("axis")
        return drop(self, *args, **kwargs)
    pd.DataFrame.drop = compatible_drop


def hta_path(trace: Path, annotation: str, instance: int, tmp: Path) -> dict:
    """HTA's path of the ``instance``-th ``annotation`` window: ``{"length_ns", "by_kind_ns", "version"}``."""
    import warnings
    _pandas_shim()
    warnings.simplefilter("ignore")
    from hta.trace_analysis import TraceAnalysis
    d = tmp / "hta"
    d.mkdir()
    raw = trace.read_bytes()
    (d / "rank.json").write_bytes(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    ta = TraceAnalysis(trace_dir=str(d))
    rank = list(ta.t.traces.keys())[0]
    cp, ok = ta.critical_path_analysis(rank=rank, annotation=annotation, instance_id=instance)
    if not ok:
        raise SystemExit("HTA's critical path failed")
    b = cp.get_critical_path_breakdown()
    by = {k: int(round(v * 1000)) for k, v in b.groupby("type")["duration"].sum().items()}   # us -> ns
    return {"length_ns": int(round(b["duration"].sum() * 1000)), "by_kind_ns": by, "version": hta_version()}


def hta_version() -> str:
    """HTA's version: its distribution is ``HolisticTraceAnalysis`` up to 0.5, ``traceinsight`` from 0.6."""
    from importlib.metadata import PackageNotFoundError, version
    for dist in ("traceinsight", "HolisticTraceAnalysis"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "unknown"


def as_step(trace: Path, annotation: str, instance: int, tmp: Path) -> Path:
    """A copy of ``trace`` in ``tmp`` whose ``instance``-th CPU event named ``annotation`` is
    ``ProfilerStep#1``.  Raises SystemExit when there is no such event."""
    raw = trace.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    hits = sorted((e for e in doc["traceEvents"] if e.get("name") == annotation and e.get("ph") == "X"
                   and not str(e.get("cat", "")).startswith("gpu")), key=lambda e: e["ts"])
    if len(hits) <= instance:
        raise SystemExit(f"{trace}: no instance {instance} of {annotation!r}")
    hits[instance]["name"] = "ProfilerStep#1"
    out = tmp / "as_step.json"
    out.write_text(json.dumps(doc))
    return out


def streamtrace_path(trace: Path, step: int, tmp: Path) -> dict:
    """streamtrace's path of ``ProfilerStep#step`` on the one-rank job: ``{"length_ns", "by_category_ns"}``."""
    import pyarrow.parquet as pq
    from streamtrace.analyze import AnalyzeOptions, analyze
    from streamtrace.aggregate import AggregateOptions, aggregate
    analyze([trace], tmp / "an", AnalyzeOptions(jobs=1, progress=False))
    aggregate([tmp / "an"], tmp / "agg", AggregateOptions(jobs=1, steps=[step], progress=False))
    segs = [s for s in pq.read_table(tmp / "agg" / "critical_path.parquet").to_pylist() if s["step"] == step]
    by: dict = {}
    for s in segs:
        by[s["category"]] = by.get(s["category"], 0) + s["weight_ns"]
    return {"length_ns": sum(s["weight_ns"] for s in segs), "by_category_ns": by,
            "ranks": sorted({s["rank"] for s in segs})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--step", type=int, help="the ProfilerStep#N to compare")
    ap.add_argument("--annotation", help="compare this user annotation's window instead")
    ap.add_argument("--instance", type=int, default=0, help="which instance of --annotation (from 0)")
    ap.add_argument("--json", type=Path, help="write the numbers here")
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="hta-cp-"))
    try:
        if (a.step is None) == (a.annotation is None):
            ap.error("give --step or --annotation")
        if a.annotation:
            hta = hta_path(a.trace, a.annotation, a.instance, tmp)
            st = streamtrace_path(as_step(a.trace, a.annotation, a.instance, tmp), 1, tmp)
        else:
            hta = hta_path(a.trace, f"ProfilerStep#{a.step}", 0, tmp)
            st = streamtrace_path(a.trace, a.step, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = [(k, v, sum(st["by_category_ns"].get(c, 0) for c in HTA_KINDS.get(k, ()))) for k, v in
            sorted(hta["by_kind_ns"].items())]
    out = {"trace": str(a.trace), "step": a.step, "annotation": a.annotation, "instance": a.instance,
           "hta": hta, "streamtrace": st,
           "by_hta_kind": [{"kind": k, "hta_ns": h, "streamtrace_ns": s} for k, h, s in rows]}
    what = f"{a.annotation} #{a.instance}" if a.annotation else f"ProfilerStep#{a.step}"
    print(f"{a.trace.name} {what}: HTA {hta['version']} path {hta['length_ns'] / 1e6:,.3f} ms, "
          f"streamtrace {st['length_ns'] / 1e6:,.3f} ms")
    for k, h, s in rows:
        print(f"  {k:38s} HTA {h / 1e6:10,.3f} ms   streamtrace {s / 1e6:10,.3f} ms")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
