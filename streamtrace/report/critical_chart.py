"""The chart of "What bounds each step" (:mod:`streamtrace.report.critical_path`): the critical path
of one step across the ranks it visits, from ``critical_path.parquet``.  One row per rank on the
path; each segment a bar from its start to its end (ms from the path's start), coloured by its
category; a thin vertical line where the path moves from one rank to another (a collective's last
arrival to the member it ends on)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from .charts import pyplot, save

COLORS = {"cpu_op": "#4c72b0", "host_gap": "#8c8c8c", "launch_delay": "#dd8452", "compute_kernel": "#55a868",
          "comm_transfer": "#c44e52", "memcpy": "#8172b3", "kernel_gap": "#937860", "sync": "#da8bc3",
          "wait": "#000000", "queued": "#ccb974", "thread_wait": "#64b5cd"}


def critical_chart(aggdir, stem, formats=("png",)) -> list:
    """``<stem>.png`` / ``.svg`` for the step with the longest critical path; [] when there is
    none.  Returns the written paths."""
    p = Path(aggdir) / "critical_path.parquet"
    if not p.is_file():
        return []
    t = pq.read_table(p).to_pydict()
    if not t["step"]:
        return []
    keys = list(zip(t["iteration"], t["step"]))
    length: dict = {}
    for k, w in zip(keys, t["weight_ns"]):
        length[k] = length.get(k, 0) + w
    best = max(length, key=lambda k: (length[k], k))
    idx = [i for i, k in enumerate(keys) if k == best]
    rank = np.asarray([t["rank"][i] for i in idx])
    s = np.asarray([t["start_ns"][i] for i in idx], np.float64)
    e = np.asarray([t["end_ns"][i] for i in idx], np.float64)
    cat = [t["category"][i] for i in idx]
    t0 = s.min()
    s, e = (s - t0) / 1e6, (e - t0) / 1e6
    ranks = sorted(set(rank.tolist()))
    y = {r: len(ranks) - 1 - j for j, r in enumerate(ranks)}
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(ranks) + 1.6))
    for c, col in COLORS.items():
        m = np.asarray([x == c for x in cat])
        if m.any():
            ax.barh([y[r] for r in rank[m]], (e - s)[m], left=s[m], color=col, height=0.6, label=c.replace("_", " "))
    moves = np.flatnonzero(rank[1:] != rank[:-1])
    for j in moves.tolist():
        ax.plot([s[j + 1], s[j + 1]], [y[rank[j]], y[rank[j + 1]]], color="black", linewidth=0.6)
    ax.set_yticks([y[r] for r in ranks], [f"rank {r}" for r in ranks], fontsize=8)
    ax.set_xlabel(f"ms from the start of step {best[1]}'s critical path")
    ax.set_title(f"What bounds step {best[1]}: its critical path across ranks ({length[best] / 1e6:,.2f} ms)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.9 / fig.get_figheight()), ncol=5)
    return save(fig, stem, formats)
