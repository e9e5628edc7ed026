"""The Efficiency section's charts (``efficiency_charts``):

* ``roofline``: the GEMM / attention rows of ``op_perf.parquet`` (the top by GPU time) at their
  arithmetic intensity (FLOP/byte, x, log) and achieved TFLOP/s (y, log), under the GPU's roofline
  min(peak, bandwidth x intensity) (Williams, Waterman & Patterson, CACM 2009) for the one peak the
  report's MFU uses (the math the GEMMs ran in), point area by GPU time;
* ``busbw_vs_size``: every collective instance's bus bandwidth (``collectives.parquet``) against its
  message size (log x), one panel per collective kind, intra-node and inter-node points apart, with
  the link peaks of ``streamtrace.report.links`` as horizontal lines.
"""
from __future__ import annotations

import numpy as np

from ..aggregate.folder import COLLECTIVES, OP_PERF, columns, read_aggregate_table
from ..topology.hardware import gpu_spec
from .axes import bytes_axis, log_ticks
from .charts import pyplot, save
from .escape import chart_text
from .links import inter_node


def efficiency_charts(sec: dict | None, aggdir, folder, meta: dict, formats=("png",), top: int = 40) -> list:
    """Draw the charts into ``folder`` (``roofline``, ``busbw_vs_size``; each only when it has
    points); returns the paths written."""
    if not sec:
        return []
    spec = gpu_spec((meta.get("devices") or [None])[0])
    out = []
    dt = (sec.get("inputs") or {}).get("peak_dtype")
    out += _roofline(aggdir, folder / "roofline", spec, formats, top, dt, (sec.get("inputs") or {}).get("peak_tflops"))
    out += _busbw(aggdir, folder / "busbw_vs_size", sec.get("links"), meta, spec, formats)
    return out


def _roofline(aggdir, stem, spec, formats, top, dtype=None, peak=None) -> list:
    """The roofline of ``dtype`` (the report's MFU peak's math, ``gemm_precision``;
    None: ``--peak-tflops``, whose ``peak`` is drawn)."""
    t = read_aggregate_table(aggdir, OP_PERF)
    if not t or not len(t.get("name", [])):
        return []
    keep = np.flatnonzero((t["flops"] > 0) & (t["gpu_busy_ns"] > 0))
    keep = keep[np.argsort(-t["gpu_busy_ns"][keep], kind="stable")][:top]
    if not len(keep):
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    x, y = t["intensity"][keep], t["achieved_tflops"][keep]
    size = 20 + 300 * t["gpu_busy_ns"][keep] / t["gpu_busy_ns"][keep].max()
    kinds = np.asarray(["attention" if "attention" in str(n) else "GEMM" for n in t["name"][keep]])
    for kind, color in (("GEMM", "tab:blue"), ("attention", "tab:orange")):
        m = kinds == kind
        if m.any():
            ax.scatter(x[m], y[m], s=size[m], alpha=0.6, color=color, label=kind, edgecolors="k", linewidths=0.3)
    p = spec.peak(dtype) if spec is not None and dtype else peak
    if spec is not None and p:
        lo, hi = max(min(x.min(), 1.0) / 2, 1e-3), max(x.max(), p * 1e3 / spec.mem_gbps) * 4
        xs = np.geomspace(lo, hi, 200)
        what = dtype or "--peak-tflops"
        ax.plot(xs, np.minimum(p, spec.mem_gbps * xs / 1e3), "-", color="k", lw=1,
                label=f"{spec.name} roofline, {what} ({p:,.1f} TFLOP/s, {spec.mem_gbps:,.0f} GB/s): MFU's peak")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.autoscale_view()
    log_ticks(ax.xaxis)                  # plain labels (1, 10, 1,000): no mathtext to lay out
    log_ticks(ax.yaxis)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"Roofline of the top {len(keep)} GEMM / attention ops by GPU time")
    ax.legend(fontsize=7, loc="lower right")
    return save(fig, stem, formats)


def _busbw(aggdir, stem, links, meta, spec, formats) -> list:
    t = read_aggregate_table(aggdir, COLLECTIVES,
                             columns(COLLECTIVES, "collective", "pg_ranks", "ranks", "msg_bytes", "busbw_gbps"))
    if not t or not len(t.get("collective", [])):
        return []
    ok = (t["msg_bytes"] > 0) & ~np.isnan(t["busbw_gbps"].astype(float))
    kinds = sorted(set(t["collective"][ok].tolist()))
    if not kinds:
        return []
    inter, _ = inter_node(t["pg_ranks"], t["ranks"], meta, (links or {}).get("gpus_per_node", 8))
    plt = pyplot()
    fig, axes = plt.subplots(len(kinds), 1, figsize=(8, 2.6 * len(kinds) + 0.6), squeeze=False)
    fig.subplots_adjust(hspace=0.4)          # each panel's title clear of the tick labels above it
    nic = (links or {}).get("nic_gbps")
    for ax, kind in zip(axes[:, 0], kinds):
        for scope, m, color in (("intra-node", ~inter, "tab:green"), ("inter-node", inter, "tab:red")):
            sel = ok & m & (t["collective"] == kind)
            if sel.any():
                ax.scatter(t["msg_bytes"][sel], t["busbw_gbps"][sel], s=8, alpha=0.5, color=color, label=scope)
        if spec is not None:
            ax.axhline(spec.link_gbps, color="tab:green", ls="--", lw=1,
                       label=f"intra-node {spec.link} peak {spec.link_gbps:g} GB/s")
        if nic:
            ax.axhline(nic, color="tab:red", ls=":", lw=1, label=f"network per GPU {nic:g} GB/s")
        ax.set_xscale("log")
        ax.autoscale_view()
        bytes_axis(ax.xaxis)
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(chart_text(kind), fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel("message size (KB, MB, GB = powers of 1,000 bytes)")
    return save(fig, stem, formats)
