"""Charts of an aggregated job (``streamtrace aggregate`` output), matplotlib with the Agg backend,
each written as PNG, or SVG on request (atomically):

Per-step charts are named ``..._iter<N>`` (``N`` the trace file's iteration, as analyze's
``iteration=N``; ``_iter<N>_step<S>`` when the iteration holds several ProfilerSteps) and titled
``iteration N (ProfilerStep#S)``; a CPU-only run's charts say CPU time.

* ``rank_<R>_timeline``: one rank's GPU (or CPU) time line, a row per kernel category (compute, memory,
  comm:<dim>) under a row of phase x micro-batch windows (F0, B0, ... labelled where they fit);
* ``rank_<R>_microbatches``: per micro-batch stacked bars of compute-only / overlap / comm-only time
  with the wall clock as a line, forward and backward panels;
* ``ranks_overview``: every rank's compute-only / overlap / comm-only / idle time (stacked bars);
* ``pp_group_<G>``: the stages of one pipeline group as a Gantt chart of their forward / backward
  micro-batches (on the aggregate's time alignment: global or individual);
* ``replica_<K>``: all PP groups of one model replica in one figure;
* ``collectives_busbw``: bus bandwidth per instance by message size, by collective type and dimension;
* ``collectives_skew_<collective>_<dim>``: one heat map per group-collective kind, each on its own
  colour scale: rank x instance of the arrival delay (start - first start); point-to-point left out;
* ``p2p_stage_pairs``: point-to-point waiting (receiver, sender) and transfer time per pipeline stage pair.

Legibility at 64+ ranks and thousands of kernels: intervals closer than one pixel are merged before
drawing, labels are drawn only where their text fits, tick labels are thinned, the skew heat maps
bin instances into at most ``MAX_COLUMNS`` columns and ranks into at most ``MAX_ROWS`` rows (max delay per bin).
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from ..runtime.files import atomic_output
from .axes import bytes_axis, count_ticks, log_ticks, patch_legend, time_scale
from .escape import chart_text
from .pipeline import stage_bubbles
from .skew import draw_bands, heat_image
from .units import fmt_time

PX_WIDTH = 1400          # drawing width in pixels at DPI (figure 14 in x 100 dpi)
DPI = 100
PNG_LEVEL = 3            # zlib level of the PNG (Pillow's default 6: ~2x the encoding time; bench/RESULTS.md)
COLORS = {"compute": "#4C72B0", "memory": "#8C8C8C", "comm:TP": "#DD8452", "comm:DP": "#55A868",
          "comm:PP": "#C44E52", "comm:CP": "#8172B3", "comm:EP": "#937860", "comm:unknown": "#DA8BC3",
          "comm:cpu": "#DD8452", "forward": "#4C72B0", "backward": "#55A868", "recompute": "#8172B3",
          "optimizer": "#C44E52", "other": "#BBBBBB", "compute_only": "#4C72B0", "overlap": "#9B59B6",
          "comm_only": "#DD8452", "idle": "#DDDDDD"}
def rows_at(tbl, at) -> np.ndarray:
    """Mask of the rows of column dict ``tbl`` at ``at`` = (iteration, step) (bool, shape (rows,))."""
    it, st = at
    if not len(tbl.get("iteration", [])):
        return np.zeros(0, bool)
    return (tbl["iteration"] == it) & (tbl["step"] == st)


def label(at, data=None) -> str:
    """``(4, 3)`` -> ``"iteration 4 (ProfilerStep#3)"``; an unknown part is left out.  ``data``
    (``streamtrace.report.render.load``'s) with ``step_word`` ``"step "``: the job's steps are
    custom step ranges (``--step-pattern``, NVTX ``iteration N``), named ``step 3``, not
    ``ProfilerStep#3``."""
    it, st = at
    word = (data or {}).get("step_word") or "ProfilerStep#"
    if it < 0:
        return f"{word}{st}" if st >= 0 else "unknown step"
    return f"iteration {it}" + (f" ({word}{st})" if st >= 0 else "")


def stem_suffix(at, steps_in_iteration: int) -> str:
    """Chart file suffix: ``iter4`` (its only step), ``iter4_step3`` (one of several), ``step3``
    (iteration unknown)."""
    it, st = at
    if it < 0:
        return f"step{st}" if st >= 0 else "nostep"
    return f"iter{it}" if steps_in_iteration == 1 else f"iter{it}_step{st}"


PHASE_TAG = {"forward": "F", "backward": "B", "recompute": "R", "optimizer": "Opt", "other": ""}


def pyplot():
    """matplotlib.pyplot on the Agg backend (imported on first call: ~0.5 s)."""
    import matplotlib            # lazy: heavy (~0.5 s), loaded only when charts are drawn
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def style():
    """The charts' matplotlib settings, as a context (``matplotlib.rc_context``; the caller's settings
    are left as they were): titles at the axes' top plus the title pad, not placed above whatever
    is drawn there (no chart draws ticks or labels above its axes), which spares measuring every
    tick label of every axes once more per draw (~15 % of a chart's time); text rendered without
    FreeType's hinting (``text.hinting`` ``no_hinting``: glyphs not fitted to the pixel grid one by
    one; the same layout, text a little softer, ~10 % of a report's chart CPU time less, measured
    with matplotlib 3.11 on the a100x8 aggregate: 1.76 -> 1.59 s for 19 charts, median of 5)."""
    import matplotlib
    return matplotlib.rc_context({"axes.titley": 1.0, "text.hinting": "no_hinting"})


FORMATS = ("png", "svg")


def save(fig, path_stem, formats=("png",)) -> list:
    """Write ``<stem>.<ext>`` for each of ``formats`` (``"png"``, ``"svg"``) atomically, cropped to
    what is drawn plus 0.1 in (as matplotlib's ``bbox_inches="tight"``); closes the figure; returns
    the paths.  The figure is drawn once on the Agg canvas and the PNG is that pixel buffer, cropped;
    when something drawn lies off the canvas, the canvas is first grown by that much (axes keep
    their size) and drawn again.  What is drawn: the pixels that are not the background
    (``_drawn_box``), matplotlib's tight box where those reach the canvas' edge or for SVG.  The
    SVG is one more draw with the measured box.  Raises
    ValueError for another format."""
    from matplotlib.transforms import Bbox
    plt = pyplot()
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ValueError(f"chart format {bad[0]!r}: use png or svg")
    fig.set_dpi(DPI)
    fig.canvas.draw()
    tight = None if "svg" in formats else _drawn_box(fig)
    if tight is None:                                            # something may lie off the canvas: measure
        tight = fig.get_tightbbox(fig.canvas.get_renderer())     # inches
        if not _on_canvas(fig, tight):
            _grow(fig, tight)
            fig.canvas.draw()
            tight = fig.get_tightbbox(fig.canvas.get_renderer())
    box = tight.padded(0.1)
    out = []
    for ext in formats:
        buf = io.BytesIO()
        if ext == "png" and _on_canvas(fig, tight):
            _crop_png(fig, box, buf)
        else:
            fig.savefig(buf, format=ext, dpi=DPI, bbox_inches=Bbox(box.get_points()))
        p = Path(f"{path_stem}.{ext}")
        with atomic_output(p, compress=False) as f:
            f.write(buf.getvalue())
        out.append(p)
    plt.close(fig)
    return out


def _drawn_box(fig):
    """The box (inches, origin bottom left) of the drawn canvas' pixels that are not the figure's
    background, or None when they reach the canvas' edge (something may be cut off there: the
    caller measures the artists instead) or nothing is drawn.  Reading the pixels costs a few ms;
    matplotlib's tight box measures every text and tick again (~20 % of a chart's time)."""
    from matplotlib.colors import to_rgba
    rgba = np.ascontiguousarray(fig.canvas.buffer_rgba())
    bg = np.round(np.asarray(to_rgba(fig.get_facecolor())) * 255).astype(np.uint8)
    ink = rgba.view(np.uint32)[..., 0] != bg.view(np.uint32)[0]         # a pixel's 4 bytes compared at once
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    h, w = ink.shape
    if not len(rows) or rows[0] == 0 or cols[0] == 0 or rows[-1] == h - 1 or cols[-1] == w - 1:
        return None
    from matplotlib.transforms import Bbox
    return Bbox([[cols[0] / DPI, (h - 1 - rows[-1]) / DPI], [(cols[-1] + 1) / DPI, (h - rows[0]) / DPI]])


def _on_canvas(fig, box, slack=0.02) -> bool:
    w, h = fig.get_size_inches()
    return box.x0 >= -slack and box.y0 >= -slack and box.x1 <= w + slack and box.y1 <= h + slack


def _grow(fig, box):
    """Enlarge ``fig`` by what ``box`` (inches) overhangs on each side; axes keep their size in inches."""
    w, h = fig.get_size_inches()
    left, bottom = max(0.0, -box.x0) + 0.05, max(0.0, -box.y0) + 0.05
    big_w, big_h = w + left + max(0.0, box.x1 - w) + 0.05, h + bottom + max(0.0, box.y1 - h) + 0.05
    for ax in fig.axes:
        p = ax.get_position()
        ax.set_position([(p.x0 * w + left) / big_w, (p.y0 * h + bottom) / big_h, p.width * w / big_w,
                         p.height * h / big_h])
    fig.set_size_inches(big_w, big_h)


def bars_h(ax, y, width, left, height, color, label=None):
    """Horizontal bars as ``ax.barh(y, width, left=left, height=height, color=color, label=label)`` draws
    them (the same pixels), as one ``PolyCollection`` instead of a
    ``Rectangle`` artist per bar: a chart of thousands of bars (one per rank, or per path segment) is
    not laid out and measured bar by bar.  ``y``, ``width``, ``left``: float arrays (data units), one
    bar each.  Each bar's left end is a sticky edge of the x axis' autoscaling, as barh makes it.
    Returns the collection."""
    from matplotlib.collections import PolyCollection     # (matplotlib: loaded by pyplot())
    y, x0 = np.asarray(y, np.float64), np.asarray(left, np.float64)
    x1, h = x0 + np.asarray(width, np.float64), height / 2
    verts = np.stack([np.c_[x0, y - h], np.c_[x0, y + h], np.c_[x1, y + h], np.c_[x1, y - h]], 1)
    col = PolyCollection(verts, facecolor=color, edgecolor="none", linewidth=1, label=label)
    col.sticky_edges.x.extend(x0.tolist())
    ax.add_collection(col)
    return col


def margins(fig, left=None, bottom=None, right=None, top=None):
    """``subplots_adjust`` with margins in inches (None: matplotlib's), so short and narrow figures
    keep their labels on the canvas."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=None if left is None else left / w, bottom=None if bottom is None else bottom / h,
                        right=None if right is None else 1 - right / w, top=None if top is None else 1 - top / h)


def _crop_png(fig, box, buf):
    """The drawn Agg canvas cropped to ``box`` (inches, origin bottom left; clipped to the canvas)
    as PNG into ``buf``: RGB when every pixel is opaque (the same picture, fewer bytes), else RGBA."""
    from PIL import Image
    rgba = np.asarray(fig.canvas.buffer_rgba())
    hpx = rgba.shape[0]
    x0, x1 = int(np.floor(box.x0 * DPI)), int(np.ceil(box.x1 * DPI))
    y0, y1 = hpx - int(np.ceil(box.y1 * DPI)), hpx - int(np.floor(box.y0 * DPI))
    px = rgba[max(y0, 0):y1, max(x0, 0):x1]
    px = px[..., :3] if px.size and px[..., 3].min() == 255 else px
    img = Image.fromarray(np.ascontiguousarray(px))
    img.save(buf, format="png", dpi=(DPI, DPI), compress_level=PNG_LEVEL)


def merge_close(start, end, gap) -> tuple[np.ndarray, np.ndarray]:
    """Merge sorted disjoint intervals whose gap is < ``gap`` (int ns): what one pixel cannot separate."""
    s, e = np.asarray(start, np.int64), np.asarray(end, np.int64)
    if len(s) < 2:
        return s, e
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] - reach[:-1] >= gap]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def _ms(x, div=1e6):
    """Times (ns) in the chart's unit (``div`` ns each; default ms)."""
    return np.asarray(x, np.float64) / div


def _fits(width_ns, span_ns, text, px=PX_WIDTH * 0.8, char_px=6.5) -> bool:
    return span_ns > 0 and width_ns / span_ns * px >= len(text) * char_px + 4


def _thin_ticks(ax, labels, positions, axis="y", max_labels=40):
    step = max(1, int(np.ceil(len(labels) / max_labels)))
    pos, lab = positions[::step], labels[::step]
    (ax.set_yticks if axis == "y" else ax.set_xticks)(pos)
    (ax.set_yticklabels if axis == "y" else ax.set_xticklabels)(lab, fontsize=8 if len(lab) <= 20 else 7)


# -- per rank ------------------------------------------------------------------------------

def rank_timeline(data, rank, at):
    """Kernel categories of one rank by wall clock, under its phase x micro-batch windows; None (no chart)
    without a timeline row of the rank's step (the windows alone have no time axis: ``report.markdown``)."""
    plt = pyplot()
    tl, rp = data["timeline"], data["rank_phase"]
    m = (tl["rank"] == rank) & rows_at(tl, at) if len(tl.get("rank", [])) else np.zeros(0, bool)
    w = (rp["rank"] == rank) & rows_at(rp, at)
    if not m.any():
        return None
    cats = sorted(set(tl["category"][m].tolist()), key=lambda c: (c != "compute", c != "memory", c))
    lo, hi = tl["start_ns"][m].min(), tl["end_ns"][m].max()
    span = max(int(hi - lo), 1)
    gap = max(1, span // PX_WIDTH)
    div, unit = time_scale([span])
    fig, ax = plt.subplots(figsize=(14, 1.2 + 0.45 * (len(cats) + 1)))
    margins(fig, left=1.4, bottom=0.55, right=0.3, top=0.35)
    for y, c in enumerate(cats):
        cm = m & (tl["category"] == c)
        s, e = merge_close(tl["start_ns"][cm], tl["end_ns"][cm], gap)
        ax.broken_barh(list(zip(_ms(s - lo, div), _ms(e - s, div))), (y - 0.35, 0.7), color=COLORS.get(c, "#999999"),
                       linewidth=0)
    y = len(cats)
    for j in np.flatnonzero(w).tolist():
        ph, mb = rp["phase"][j], int(rp["microbatch"][j])
        if rp["start_ns"][j] is None or np.isnan(float(rp["start_ns"][j])):
            continue
        a, b = int(rp["start_ns"][j]), int(rp["end_ns"][j])
        ax.broken_barh([(_ms(a - lo, div), _ms(b - a, div))], (y - 0.35, 0.7), color=COLORS.get(ph, "#BBBBBB"),
                       alpha=0.55, linewidth=0.5, edgecolor="white")
        tag = PHASE_TAG.get(ph, "") + (str(mb) if mb >= 0 else "")
        if tag and _fits(b - a, span, tag):
            ax.text(_ms((a + b) // 2 - lo, div), y, tag, ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(cats) + 1))
    ax.set_yticklabels(cats + ["phase x micro-batch"], fontsize=8)
    ax.set_xlim(0, _ms(span, div))
    ax.set_xlabel(f"time ({unit}) from {fmt_time(lo, 4)} on the {data['meta']['time_alignment']} axis")
    cpu = bool(w.any()) and all(x == "cpu" for x in rp["source"][w].tolist())
    what = "CPU time line (no GPU events) by op category" if cpu else "GPU time line by kernel category"
    ax.set_title(f"rank {rank}, {label(at, data)}: {what}", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return fig


def rank_microbatches(data, rank, at):
    """Stacked compute-only / overlap / comm-only per micro-batch, wall clock line: a forward and a
    backward panel, each only when that phase has windows.  A window without a micro-batch number
    (a step annotated without micro-batches, or an inferred forward) is labelled ``step``."""
    plt = pyplot()
    rp = data["rank_phase"]
    fb = (rp["rank"] == rank) & rows_at(rp, at) & np.isin(rp["phase"], ("forward", "backward"))
    if not fb.any() or not (rp["wall_ns"][fb] > 0).any():
        return None
    phases = [ph for ph in ("forward", "backward") if (fb & (rp["phase"] == ph)).any()]
    div, unit = time_scale(rp["wall_ns"][fb], rp["busy_ns"][fb])
    fig, axes = plt.subplots(1, len(phases), figsize=(6 * len(phases), 3.8), sharey=True, squeeze=False)
    for ax, ph in zip(axes[0], phases):
        sel = np.flatnonzero(fb & (rp["phase"] == ph))
        sel = sel[np.argsort(rp["microbatch"][sel], kind="stable")]
        mb = rp["microbatch"][sel].astype(int)
        x = np.arange(len(sel))
        co, ov = _ms(rp["compute_only_ns"][sel], div), _ms(rp["overlap_ns"][sel], div)
        cm = _ms(rp["exposed_comm_ns"][sel], div)
        ax.bar(x, co, color=COLORS["compute_only"])
        ax.bar(x, ov, bottom=co, color=COLORS["overlap"])
        ax.bar(x, cm, bottom=co + ov, color=COLORS["comm_only"])
        ax.plot(x, _ms(rp["wall_ns"][sel], div), "k.-")
        ax.set_title(f"{ph}", fontsize=10)
        ax.set_xlabel("micro-batch")
        _thin_ticks(ax, [str(v) if v >= 0 else "step" for v in mb], x, axis="x", max_labels=32)
        ax.set_xlim(-0.6, len(x) - 0.4)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(unit)
    fig.subplots_adjust(bottom=0.24)
    patch_legend(fig, [("compute only", COLORS["compute_only"]), ("overlap", COLORS["overlap"]),
                       ("comm only (exposed)", COLORS["comm_only"])], lines=[("wall clock", ".", "black")],
                 fontsize=8, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(f"rank {rank}, {label(at, data)}: time per micro-batch", fontsize=10)
    return fig


def ranks_overview(data, at):
    """Every rank's compute-only / overlap / comm-only / idle time in one step (``at``): one stacked
    bar per rank up to ``MAX_BARS`` ranks, else ``_sorted_distribution``.  None when every
    value is 0."""
    plt = pyplot()
    rk = data["ranks"]
    sel = np.flatnonzero(rows_at(rk, at))
    sel = sel[np.argsort(rk["rank"][sel], kind="stable")]
    if not len(sel) or not any((rk[k][sel] > 0).any() for k in ("compute_only_ns", "overlap_ns", "exposed_comm_ns")):
        return None
    unit = "CPU" if len(sel) and (rk["source"][sel] == "cpu").all() else "GPU"
    fig, ax = plt.subplots(figsize=(max(8, min(16, 0.22 * min(len(sel), MAX_BARS) + 4)), 4.4))
    div, tunit = time_scale(sum(rk[k][sel].astype(np.float64) for k, _ in OVERVIEW_PARTS))
    if len(sel) > MAX_BARS:
        _sorted_distribution(ax, rk, sel, div, tunit)
        what = f"{len(sel):,} ranks sorted by time not computing (exposed comm + idle)"
    else:
        x = np.arange(len(sel))
        bottom = np.zeros(len(sel))
        for key, lab in OVERVIEW_PARTS:
            v = _ms(rk[key][sel], div)
            ax.bar(x, v, bottom=bottom, color=COLORS[key.replace("_ns", "").replace("exposed_comm", "comm_only")],
                   label=lab, width=0.85)
            bottom += v
        _thin_ticks(ax, [str(int(r)) for r in rk["rank"][sel]], x, axis="x", max_labels=64)
        ax.set_xlabel("rank")
        what = f"where each rank's {unit} time went"
    ax.set_ylabel(tunit)
    fig.subplots_adjust(bottom=0.24)
    h, lab = ax.get_legend_handles_labels()
    fig.legend(h, lab, fontsize=8, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 0.0))
    ax.set_title(f"{label(at, data)}: {what}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return fig


MAX_BARS = 64                # ranks_overview: above this many ranks, a sorted distribution instead of bars
NAMED_OUTLIERS = 5           # ... with this many ranks named at each end
OVERVIEW_PARTS = (("compute_only_ns", "compute only"), ("overlap_ns", "overlap"),
                  ("exposed_comm_ns", "comm only (exposed)"), ("idle_ns", "idle"))


def _sorted_distribution(ax, rk, sel, div=1e6, unit="ms"):
    """Stacked areas of ``OVERVIEW_PARTS`` over the rows ``sel`` sorted by exposed comm + idle
    (ascending), the ``NAMED_OUTLIERS`` ranks at each end named, the median marked."""
    lost = rk["exposed_comm_ns"][sel] + rk["idle_ns"][sel]
    order = sel[np.argsort(lost, kind="stable")]
    x = np.arange(len(order))
    parts = [_ms(rk[k][order], div) for k, _ in OVERVIEW_PARTS]
    ax.stackplot(x, *parts, labels=[lab for _, lab in OVERVIEW_PARTS], linewidth=0,
                 colors=[COLORS[k.replace("_ns", "").replace("exposed_comm", "comm_only")] for k, _ in OVERVIEW_PARTS])
    top = np.sum(parts, axis=0)
    n = min(NAMED_OUTLIERS, len(order) // 2)
    lost_ms = _ms(lost[np.argsort(lost, kind="stable")], div)
    for js, where, what in ((range(n), 0.01, "least"), (range(len(order) - 1, len(order) - 1 - n, -1), 0.99, "most")):
        js = list(js)
        ax.plot(x[js], top[js], "kv", markersize=4)
        names = ", ".join(f"r{int(rk['rank'][order[j]])} ({lost_ms[j]:,.2f})" for j in js)
        ax.text(where, 0.97, f"{what} lost ({unit}): {names}", transform=ax.transAxes, fontsize=7, va="top",
                ha="left" if where < 0.5 else "right", bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0})
    ax.axvline(len(order) // 2, color="black", linewidth=0.6, linestyle=":")
    ax.set_xlim(-0.5, len(order) - 0.5)
    ax.set_ylim(0, float(top.max()) * 1.25)
    ax.set_xlabel(f"ranks, sorted (dotted: median; triangles: the {n} with least and most time lost, named above)")
# -- pipeline --------------------------------------------------------------------------------

GANTT_PHASES = ("forward", "backward", "recompute", "optimizer")


def _gantt_rows(ax, data, at, rows, lo, span, div=1e6):
    """Draw phase x micro-batch bars for ``rows`` = [(y, rank)] on ``ax``: each window light (its
    waits included), its compute (first to last compute kernel) solid."""
    rp = data["rank_phase"]
    fb = np.isin(rp["phase"], GANTT_PHASES)
    for y, rank in rows:
        sel = np.flatnonzero((rp["rank"] == rank) & rows_at(rp, at) & fb)
        for ph in ("forward", "backward", "recompute", "optimizer"):
            js = [j for j in sel.tolist() if rp["phase"][j] == ph and rp["compute_start_ns"][j] is not None
                  and not np.isnan(float(rp["compute_start_ns"][j]))]
            if not js:
                continue
            a = np.asarray([int(rp["compute_start_ns"][j]) for j in js])
            b = np.asarray([int(rp["compute_end_ns"][j]) for j in js])
            wa = np.asarray([int(rp["start_ns"][j]) for j in js])      # the whole window, its waits included
            wb = np.asarray([int(rp["end_ns"][j]) for j in js])
            ax.broken_barh(list(zip(_ms(wa - lo, div), _ms(wb - wa, div))), (y - 0.4, 0.8), color=COLORS[ph],
                           alpha=0.25, linewidth=0)
            ax.broken_barh(list(zip(_ms(a - lo, div), _ms(b - a, div))), (y - 0.4, 0.8), color=COLORS[ph], linewidth=0.3,
                           edgecolor="white")
            for j, x0, x1 in zip(js, a, b):
                mb = int(rp["microbatch"][j])
                tag = PHASE_TAG[ph] + (str(mb) if mb >= 0 else "")
                if _fits(x1 - x0, span, tag):
                    ax.text(_ms((x0 + x1) // 2 - lo, div), y, tag, ha="center", va="center", fontsize=7, color="white")


def has_windows(data, at, ranks) -> bool:
    """Whether any of ``ranks`` has a forward/backward/recompute/optimizer window with compute in
    step ``at`` (what the Gantt charts draw)."""
    rp = data["rank_phase"]
    if not len(rp.get("rank", [])):
        return False
    sel = rows_at(rp, at) & np.isin(rp["rank"], list(ranks)) & np.isin(rp["phase"], ("forward", "backward", "recompute",
                                                                                  "optimizer"))
    return any(v is not None and not np.isnan(float(v)) for v in rp["compute_start_ns"][sel])


def _span(data, at, ranks):
    """(first start, last end) ns of what the Gantt charts draw for ``ranks``: every window of a
    drawn phase (forward ... optimizer, its compute and the whole window), so no bar runs past
    the axis."""
    rp = data["rank_phase"]
    sel = rows_at(rp, at) & np.isin(rp["rank"], list(ranks)) & np.isin(rp["phase"], GANTT_PHASES)
    sel &= np.asarray([v is not None and not np.isnan(float(v)) for v in rp["compute_start_ns"]], bool)
    a = [float(v) for k in ("compute_start_ns", "start_ns") for v in rp[k][sel]]
    b = [float(v) for k in ("compute_end_ns", "end_ns") for v in rp[k][sel]]
    return (int(min(a)), int(max(b))) if a else (0, 1)


def pp_gantt(data, group_index, at):
    """Gantt chart of one PP group's stages (forward / backward micro-batches), bubble per stage."""
    plt = pyplot()
    g = data["meta"]["topology"]["pp"][group_index]
    if not has_windows(data, at, g):
        return None
    lo, hi = _span(data, at, g)
    span = max(hi - lo, 1)
    fig, ax = plt.subplots(figsize=(14, 1.0 + 0.45 * len(g)))
    margins(fig, left=2.2, bottom=0.55, right=1.3, top=0.35)
    rows = [(len(g) - 1 - s, r) for s, r in enumerate(g)]
    div, unit = time_scale([span])
    _gantt_rows(ax, data, at, rows, lo, span, div)
    bubbles = stage_bubbles(data.get("pipeline") or {}, at[0], at[1], g)     # pipeline.parquet, as the table
    labels = []
    for s, r in enumerate(g):
        bub = f"  bubble {bubbles[r]:.1f}%" if bubbles.get(r) is not None else ""
        labels.append(f"stage {s} (rank {r}){bub}")
    _thin_ticks(ax, labels[::-1], np.arange(len(g)), max_labels=40)
    _phase_legend(ax)
    ax.set_xlim(0, _ms(span, div) * 1.01)
    ax.set_xlabel(f"time ({unit}), {data['meta']['time_alignment']} alignment")
    ax.set_title(f"PP group {group_index} (ranks {','.join(map(str, g))}), {label(at, data)}", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return fig


def replica_view(data, replica_index, at):
    """All PP groups of one model replica, stitched into one figure (one block of rows per group)."""
    plt = pyplot()
    topo = data["meta"]["topology"]
    rep = set(topo["replicas"][replica_index])
    groups = [(gi, g) for gi, g in enumerate(topo["pp"]) if set(g) <= rep]
    n = sum(len(g) for _, g in groups)
    if not has_windows(data, at, rep):
        return None
    lo, hi = _span(data, at, rep)
    span = max(hi - lo, 1)
    fig, ax = plt.subplots(figsize=(14, 1.2 + min(0.32 * n, 22)))
    margins(fig, left=1.2, bottom=0.55, right=1.3, top=0.35)
    rows, labels, y = [], [], n - 1
    for gi, g in groups:
        for s, r in enumerate(g):
            rows.append((y, r))
            labels.append((y, f"PP{gi} s{s} r{r}"))
            y -= 1
        ax.axhline(y + 0.5, color="black", linewidth=0.6)
    div, unit = time_scale([span])
    _gantt_rows(ax, data, at, rows, lo, span, div)
    labels.sort()
    _thin_ticks(ax, [x[1] for x in labels], np.asarray([x[0] for x in labels]), max_labels=48)
    _phase_legend(ax)
    ax.set_xlim(0, _ms(span, div) * 1.01)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlabel(f"time ({unit}), {data['meta']['time_alignment']} alignment")
    ax.set_title(f"model replica {replica_index}: {len(groups)} PP groups, {n} ranks, {label(at, data)}",
                 fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return fig


def _phase_legend(ax):
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=COLORS[p], label=p) for p in ("forward", "backward", "recompute", "optimizer")],
              fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


# -- collectives -----------------------------------------------------------------------------

def busbw_chart(data):
    """Bus bandwidth of each complete collective instance by message size (log-log)."""
    plt = pyplot()
    c = data["collectives"]
    ok = c["complete"] & np.isfinite(c["busbw_gbps"]) & (c["msg_bytes"] > 0) & (c["n_ranks"] >= 2)
    if not ok.any():
        return None                 # one-rank "instances" measure no bandwidth between ranks
    fig, ax = plt.subplots(figsize=(11, 5))
    margins(fig, right=2.3)                         # (room for the legend beside the axes: no second draw)
    markers = {"TP": "o", "DP": "s", "PP": "^", "CP": "D", "EP": "v"}
    for coll, dim in sorted(set(zip(c["collective"][ok].tolist(), c["parallel_dim"][ok].tolist()))):
        m = ok & (c["collective"] == coll) & (c["parallel_dim"] == dim)
        ax.scatter(c["msg_bytes"][m], c["busbw_gbps"][m], s=14, alpha=0.6, marker=markers.get(dim, "x"),
                   label=chart_text(f"{coll} {dim} ({int(m.sum())})"))
    ax.set_xscale("log")
    if c["busbw_gbps"][ok].min() > 0:
        ax.set_yscale("log")
    ax.autoscale_view()
    bytes_axis(ax.xaxis)
    if ax.get_yscale() == "log":
        log_ticks(ax.yaxis)
    ax.set_xlabel("message size (KB, MB, GB = powers of 1,000 bytes)")
    ax.set_ylabel("bus bandwidth (GB/s, GB = 1e9 B)")
    ax.set_title("collectives: bus bandwidth by type and message size", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)   # (over no point; "best"
    #                                                   searched over 160 k points held ~30 MB of copies of them)
    return fig


def skew_heatmap(heat, kind):
    """One group-collective kind's heat map (``heat``: a ``skew.HeatGrid``, None when every rank arrived
    together: no figure), on its own colour scale
    (0 to the 99th percentile of its delays): rank x instance (time order) of the arrival delay, at most
    ``MAX_COLUMNS`` columns and ``MAX_ROWS`` rows (max per bin), blank where the rank is not a member;
    drawn as the image ``skew.heat_image`` colours, in bands of rows (``skew.draw_bands``)."""
    plt = pyplot()
    if heat is None:
        return None                 # every rank arrived together: nothing to see
    first, per_row, per, n = heat.first, heat.per_row, heat.per_column, heat.n
    div, unit = time_scale([heat.vmax_ns])
    rgba, mapped = heat_image(heat.grid, 1e3 / div, heat.vmax_ns / div, "magma_r")
    fig, ax = plt.subplots(figsize=(14, max(3.0, 1.5 + min(0.16 * len(first), 12))))   # room for the colour bar's label
    margins(fig, left=0.8, bottom=0.55, top=0.35)
    draw_bands(ax, rgba)
    _thin_ticks(ax, [str(int(r)) for r in first], np.arange(len(first)), max_labels=40)
    count_ticks(ax.xaxis, rgba.shape[1], per=per)
    ax.set_ylabel("rank" + (f" ({per_row:,} per row, max shown)" if per_row > 1 else ""))
    ax.set_xlabel(f"{kind} instance (0 = first, time order; {n:,} in all" + (f", {per:,} per column, max shown)"
                                                                            if per > 1 else ")"))
    fig.colorbar(mapped, ax=ax).set_label(f"arrival after the first rank ({unit})", fontsize=9)
    ax.set_title(f"{kind} skew: how late each rank arrives", fontsize=10)
    return fig


def p2p_chart(rows):
    """Point-to-point waiting per pipeline stage pair (``p2p.parquet`` summed per (src_stage,
    dst_stage)): the receiver's wait for the sender and the sender's for the receiver, and the
    transfer time, in ms."""
    plt = pyplot()
    if not len(rows["src_stage"]) or not any((np.asarray(rows[k]) > 0).any()
                                             for k in ("recv_wait_ns", "send_wait_ns", "time_ns")):
        return None
    labels = [f"{a}->{b}" if a >= 0 else "-" for a, b in zip(rows["src_stage"], rows["dst_stage"])]
    x = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(labels) + 3), 4.5))
    div, unit = time_scale(*(rows[k] for k in ("recv_wait_ns", "send_wait_ns", "time_ns")))
    for k, (col, lab, color) in enumerate((("recv_wait_ns", "receiver waited", COLORS["comm:PP"]),
                                           ("send_wait_ns", "sender waited", COLORS["comm:TP"]),
                                           ("time_ns", "transfer", COLORS["comm:DP"]))):
        ax.bar(x + (k - 1) * 0.27, _ms(rows[col], div), width=0.27, label=lab, color=color)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_xlabel("pipeline stage pair (sender -> receiver)")
    ax.set_ylabel(f"{unit} (sum over transfers and iterations)")
    ax.set_title("point-to-point: waiting per stage pair", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return fig


def stage_pairs(p) -> dict:
    """``p2p.parquet`` columns summed per (src_stage, dst_stage), as columns sorted by stages."""
    keys = sorted(set(zip(p["src_stage"].tolist(), p["dst_stage"].tolist())))
    out = {"src_stage": np.asarray([k[0] for k in keys]), "dst_stage": np.asarray([k[1] for k in keys])}
    for col in ("recv_wait_ns", "send_wait_ns", "time_ns"):
        out[col] = np.asarray([int(p[col][(p["src_stage"] == a) & (p["dst_stage"] == b)].sum()) for a, b in keys])
    return out
