"""The chart of "What bounds each step" (``streamtrace.report.critical_path``): the critical path
of one step across the ranks it visits, from ``critical_path.parquet``.  One row per rank on the
path; each segment a bar from its start to its end (ms from the path's start), coloured by its
category; a thin vertical line where the path moves from one rank to another (a collective's last
arrival to the member it ends on).

Drawn as one ``BrokenBarHCollection`` per category and rank (``broken_barh``)
and the moves as lines (one broken line past ``MAX_MOVE_LINES`` of them), whatever the number of
segments: a path of 15,000 CPU ops is a handful of artists, not 15,000 rectangles to lay out and measure
(the pixels are those of one ``barh`` rectangle per segment)."""
from __future__ import annotations

import numpy as np
import pyarrow.compute as pc

from ..aggregate.folder import CRITICAL_PATH, columns, table_path
from ..events.dataset import read_arrow
from .charts import margins, pyplot, save

COLORS = {"cpu_op": "#4c72b0", "host_gap": "#8c8c8c", "launch_delay": "#dd8452", "compute_kernel": "#55a868",
          "comm_transfer": "#c44e52", "memcpy": "#8172b3", "kernel_gap": "#937860", "sync": "#da8bc3",
          "wait": "#000000", "queued": "#ccb974", "thread_wait": "#64b5cd"}
COLUMNS = columns(CRITICAL_PATH, "iteration", "step", "rank", "start_ns", "end_ns", "weight_ns", "category")
MAX_MOVE_LINES = 512     # moves between ranks drawn as a line each up to this many, else as one broken line


def longest_step(t) -> tuple:
    """``(iteration, step)`` of the step with the longest path (sum of ``weight_ns``; ties: the larger
    key) in the pyarrow table ``t``."""
    g = t.group_by(["iteration", "step"]).aggregate([("weight_ns", "sum")])
    best = max(zip(g["weight_ns_sum"].to_pylist(), g["iteration"].to_pylist(), g["step"].to_pylist()))
    return (best[1], best[2]), best[0]


def critical_chart(aggdir, stem, formats=("png",)) -> list:
    """``<stem>.png`` / ``.svg`` for the step with the longest critical path; [] when there is
    none.  Returns the written paths."""
    p = table_path(aggdir, CRITICAL_PATH)
    if not p.is_file():
        return []
    t = read_arrow(p, COLUMNS)
    if not t.num_rows:
        return []
    best, length = longest_step(t)
    t = t.filter(pc.and_(pc.equal(t["iteration"], best[0]), pc.equal(t["step"], best[1])))
    rank = t["rank"].to_numpy()
    s, e = t["start_ns"].to_numpy().astype(np.float64), t["end_ns"].to_numpy().astype(np.float64)
    cat = np.asarray(t["category"].to_pylist(), dtype=object)
    t0 = s.min()
    s, e = (s - t0) / 1e6, (e - t0) / 1e6
    ranks = sorted(set(rank.tolist()))
    y = {r: len(ranks) - 1 - j for j, r in enumerate(ranks)}
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(ranks) + 2.45))
    margins(fig, bottom=1.05, top=0.4)           # the legend under the axis label, on the canvas
    for c, col in COLORS.items():
        m = cat == c
        if not m.any():
            continue
        label = c.replace("_", " ")
        for r in ranks:
            mr = m & (rank == r)
            if mr.any():                       # (as barh's rectangles: no edge, linewidth 1 for the same snapping,
                col_ = ax.broken_barh(np.c_[s[mr], (e - s)[mr]], (y[r] - 0.3, 0.6), facecolor=col,
                                      edgecolor="none", linewidth=1, label=label)
                col_.sticky_edges.x.extend(s[mr].tolist())       # each bar's left end sticky in the x autoscale)
                label = None
    moves = np.flatnonzero(rank[1:] != rank[:-1])
    if len(moves) <= MAX_MOVE_LINES:           # a line each, as ever (the same pixels where they overlap)
        for j in moves.tolist():
            ax.plot([s[j + 1], s[j + 1]], [y[rank[j]], y[rank[j + 1]]], color="black", linewidth=0.6)
    else:                                      # one line, broken by NaN, through every move
        x = np.repeat(s[moves + 1], 3)
        x[2::3] = np.nan
        yy = np.empty(3 * len(moves))
        yy[0::3] = [y[r] for r in rank[moves].tolist()]
        yy[1::3] = [y[r] for r in rank[moves + 1].tolist()]
        yy[2::3] = np.nan
        ax.plot(x, yy, color="black", linewidth=0.6)
    ax.set_yticks([y[r] for r in ranks], [f"rank {r}" for r in ranks], fontsize=8)
    ax.set_xlabel(f"ms from the start of step {best[1]}'s critical path")
    ax.set_title(f"What bounds step {best[1]}: its critical path across ranks ({length / 1e6:,.2f} ms)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.6 / ax.get_position().height
                                                              / fig.get_figheight()), ncol=5)
    return save(fig, stem, formats)
