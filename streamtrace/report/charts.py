"""Charts of an aggregated job (``streamtrace aggregate`` output), matplotlib with the Agg backend,
each written as PNG and SVG (atomically):

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
bin instances into at most :data:`MAX_COLUMNS` columns (max delay per bin).
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from ..job.aggregate import read_aggregate_table, read_meta
from ..runtime.files import atomic_output
from ..runtime.progress import progress_bar

MAX_COLUMNS = 400
PX_WIDTH = 1400          # drawing width in pixels at DPI (figure 14 in x 100 dpi)
DPI = 100
COLORS = {"compute": "#4C72B0", "memory": "#8C8C8C", "comm:TP": "#DD8452", "comm:DP": "#55A868",
          "comm:PP": "#C44E52", "comm:CP": "#8172B3", "comm:EP": "#937860", "comm:unknown": "#DA8BC3",
          "comm:cpu": "#DD8452", "forward": "#4C72B0", "backward": "#55A868", "recompute": "#8172B3",
          "optimizer": "#C44E52", "other": "#BBBBBB", "compute_only": "#4C72B0", "overlap": "#9B59B6",
          "comm_only": "#DD8452", "idle": "#DDDDDD"}
def _at(tbl, at) -> np.ndarray:
    """Rows of column dict ``tbl`` at ``at`` = (iteration, step)."""
    it, st = at
    if not len(tbl.get("iteration", [])):
        return np.zeros(0, bool)
    return (tbl["iteration"] == it) & (tbl["step"] == st)


def label(at) -> str:
    """``(4, 3)`` -> ``"iteration 4 (ProfilerStep#3)"``; an unknown part is left out."""
    it, st = at
    if it < 0:
        return f"ProfilerStep#{st}" if st >= 0 else "unknown step"
    return f"iteration {it}" + (f" (ProfilerStep#{st})" if st >= 0 else "")


def stem_suffix(at, steps_in_iteration: int) -> str:
    """Chart file suffix: ``iter4`` (its only step), ``iter4_step3`` (one of several), ``step3``
    (iteration unknown)."""
    it, st = at
    if it < 0:
        return f"step{st}" if st >= 0 else "nostep"
    return f"iter{it}" if steps_in_iteration == 1 else f"iter{it}_step{st}"


PHASE_TAG = {"forward": "F", "backward": "B", "recompute": "R", "optimizer": "Opt", "other": ""}


def _plt():
    import matplotlib            # lazy: heavy (~0.5 s), loaded only when charts are drawn
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, path_stem) -> list:
    """Write ``<stem>.png`` and ``<stem>.svg`` atomically; closes the figure; returns both paths."""
    plt = _plt()
    out = []
    for ext in ("png", "svg"):
        p = Path(f"{path_stem}.{ext}")
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=DPI, bbox_inches="tight")
        with atomic_output(p, compress=False) as f:
            f.write(buf.getvalue())
        out.append(p)
    plt.close(fig)
    return out


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


def _ms(x):
    return np.asarray(x, np.float64) / 1e6


def _fits(width_ns, span_ns, text, px=PX_WIDTH * 0.8, char_px=6.5) -> bool:
    return span_ns > 0 and width_ns / span_ns * px >= len(text) * char_px + 4


def _thin_ticks(ax, labels, positions, axis="y", max_labels=40):
    step = max(1, int(np.ceil(len(labels) / max_labels)))
    pos, lab = positions[::step], labels[::step]
    (ax.set_yticks if axis == "y" else ax.set_xticks)(pos)
    (ax.set_yticklabels if axis == "y" else ax.set_xticklabels)(lab, fontsize=8 if len(lab) <= 20 else 7)


# -- per rank ------------------------------------------------------------------------------

def rank_timeline(data, rank, at, stem) -> list:
    """Kernel categories of one rank by wall clock, under its phase x micro-batch windows."""
    plt = _plt()
    tl, rp = data["timeline"], data["rank_phase"]
    m = (tl["rank"] == rank) & _at(tl, at)
    w = (rp["rank"] == rank) & _at(rp, at)
    cats = sorted(set(tl["category"][m].tolist()), key=lambda c: (c != "compute", c != "memory", c))
    lo = min([tl["start_ns"][m].min()] if m.any() else [0])
    hi = max([tl["end_ns"][m].max()] if m.any() else [1])
    span = max(int(hi - lo), 1)
    gap = max(1, span // PX_WIDTH)
    fig, ax = plt.subplots(figsize=(14, 1.2 + 0.45 * (len(cats) + 1)))
    for y, c in enumerate(cats):
        cm = m & (tl["category"] == c)
        s, e = merge_close(tl["start_ns"][cm], tl["end_ns"][cm], gap)
        ax.broken_barh(list(zip(_ms(s - lo), _ms(e - s))), (y - 0.35, 0.7), color=COLORS.get(c, "#999999"),
                       linewidth=0)
    y = len(cats)
    for j in np.flatnonzero(w).tolist():
        ph, mb = rp["phase"][j], int(rp["microbatch"][j])
        if rp["start_ns"][j] is None or np.isnan(float(rp["start_ns"][j])):
            continue
        a, b = int(rp["start_ns"][j]), int(rp["end_ns"][j])
        ax.broken_barh([(_ms(a - lo), _ms(b - a))], (y - 0.35, 0.7), color=COLORS.get(ph, "#BBBBBB"),
                       alpha=0.55, linewidth=0.5, edgecolor="white")
        tag = PHASE_TAG.get(ph, "") + (str(mb) if mb >= 0 else "")
        if tag and _fits(b - a, span, tag):
            ax.text(_ms((a + b) // 2 - lo), y, tag, ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(cats) + 1))
    ax.set_yticklabels(cats + ["phase x micro-batch"], fontsize=8)
    ax.set_xlim(0, _ms(span))
    ax.set_xlabel(f"time (ms) from {_ms(lo):,.3f} ms on the {data['meta']['time_alignment']} axis")
    cpu = bool(w.any()) and all(x == "cpu" for x in rp["source"][w].tolist())
    what = "CPU time line (no GPU events) by op category" if cpu else "GPU time line by kernel category"
    ax.set_title(f"rank {rank}, {label(at)}: {what}", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return save(fig, stem)


def rank_microbatches(data, rank, at, stem) -> list:
    """Stacked compute-only / overlap / comm-only per micro-batch, wall clock line; fwd and bwd panels."""
    plt = _plt()
    rp = data["rank_phase"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
    for ax, ph in zip(axes, ("forward", "backward")):
        sel = np.flatnonzero((rp["rank"] == rank) & _at(rp, at) & (rp["phase"] == ph))
        sel = sel[np.argsort(rp["microbatch"][sel])]
        x = rp["microbatch"][sel].astype(int)
        co, ov = _ms(rp["compute_only_ns"][sel]), _ms(rp["overlap_ns"][sel])
        cm = _ms(rp["exposed_comm_ns"][sel])
        ax.bar(x, co, color=COLORS["compute_only"], label="compute only")
        ax.bar(x, ov, bottom=co, color=COLORS["overlap"], label="overlap")
        ax.bar(x, cm, bottom=co + ov, color=COLORS["comm_only"], label="comm only (exposed)")
        ax.plot(x, _ms(rp["wall_ns"][sel]), "k.-", label="wall clock")
        ax.set_title(f"{ph}", fontsize=10)
        ax.set_xlabel("micro-batch")
        if len(x):
            _thin_ticks(ax, [str(v) for v in x], x, axis="x", max_labels=32)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("ms")
    h, lab = axes[0].get_legend_handles_labels()
    fig.legend(h, lab, fontsize=8, ncol=4, loc="lower center", bbox_to_anchor=(0.5, -0.06))
    fig.suptitle(f"rank {rank}, {label(at)}: time per micro-batch", fontsize=10)
    return save(fig, stem)


def ranks_overview(data, at, stem) -> list:
    """Every rank's compute-only / overlap / comm-only / idle time in one step (``at``)."""
    plt = _plt()
    rk = data["ranks"]
    sel = np.flatnonzero(_at(rk, at))
    sel = sel[np.argsort(rk["rank"][sel], kind="stable")]
    unit = "CPU" if len(sel) and (rk["source"][sel] == "cpu").all() else "GPU"
    x = np.arange(len(sel))
    fig, ax = plt.subplots(figsize=(max(8, min(16, 0.22 * len(sel) + 4)), 4))
    bottom = np.zeros(len(sel))
    for key, lab in (("compute_only_ns", "compute only"), ("overlap_ns", "overlap"),
                     ("exposed_comm_ns", "comm only (exposed)"), ("idle_ns", "idle")):
        v = _ms(rk[key][sel])
        ax.bar(x, v, bottom=bottom, color=COLORS[key.replace("_ns", "").replace("exposed_comm", "comm_only")],
               label=lab, width=0.85)
        bottom += v
    _thin_ticks(ax, [str(int(r)) for r in rk["rank"][sel]], x, axis="x", max_labels=64)
    ax.set_xlabel("rank")
    ax.set_ylabel("ms")
    ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    ax.set_title(f"{label(at)}: where each rank's {unit} time went", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return save(fig, stem)


# -- pipeline --------------------------------------------------------------------------------

def _gantt_rows(ax, data, at, rows, lo, span):
    """Draw phase x micro-batch bars for ``rows`` = [(y, rank)] on ``ax``."""
    rp = data["rank_phase"]
    fb = np.isin(rp["phase"], ("forward", "backward", "recompute", "optimizer"))
    for y, rank in rows:
        sel = np.flatnonzero((rp["rank"] == rank) & _at(rp, at) & fb)
        for ph in ("forward", "backward", "recompute", "optimizer"):
            js = [j for j in sel.tolist() if rp["phase"][j] == ph and rp["compute_start_ns"][j] is not None
                  and not np.isnan(float(rp["compute_start_ns"][j]))]
            if not js:
                continue
            a = np.asarray([int(rp["compute_start_ns"][j]) for j in js])
            b = np.asarray([int(rp["compute_end_ns"][j]) for j in js])
            ax.broken_barh(list(zip(_ms(a - lo), _ms(b - a))), (y - 0.4, 0.8), color=COLORS[ph], linewidth=0.3,
                           edgecolor="white")
            for j, x0, x1 in zip(js, a, b):
                mb = int(rp["microbatch"][j])
                tag = PHASE_TAG[ph] + (str(mb) if mb >= 0 else "")
                if _fits(x1 - x0, span, tag):
                    ax.text(_ms((x0 + x1) // 2 - lo), y, tag, ha="center", va="center", fontsize=7, color="white")


def _span(data, at, ranks):
    rp = data["rank_phase"]
    sel = _at(rp, at) & np.isin(rp["rank"], list(ranks))
    a = [float(v) for v in rp["compute_start_ns"][sel] if v is not None and not np.isnan(float(v))]
    b = [float(v) for v in rp["compute_end_ns"][sel] if v is not None and not np.isnan(float(v))]
    return (int(min(a)), int(max(b))) if a else (0, 1)


def pp_gantt(data, group_index, at, stem) -> list:
    """Gantt chart of one PP group's stages (forward / backward micro-batches), bubble per stage."""
    plt = _plt()
    g = data["meta"]["topology"]["pp"][group_index]
    lo, hi = _span(data, at, g)
    span = max(hi - lo, 1)
    fig, ax = plt.subplots(figsize=(14, 1.0 + 0.45 * len(g)))
    rows = [(len(g) - 1 - s, r) for s, r in enumerate(g)]
    _gantt_rows(ax, data, at, rows, lo, span)
    pipe = data.get("pipeline") or {}
    labels = []
    for s, r in enumerate(g):
        j = np.flatnonzero((pipe.get("rank", np.zeros(0)) == r) & _at(pipe, at))
        bub = f"  bubble {pipe['bubble_pct'][j[0]]:.1f}%" if len(j) else ""
        labels.append(f"stage {s} (rank {r}){bub}")
    _thin_ticks(ax, labels[::-1], np.arange(len(g)), max_labels=40)
    _phase_legend(ax)
    ax.set_xlim(0, _ms(span))
    ax.set_xlabel(f"time (ms), {data['meta']['time_alignment']} alignment")
    ax.set_title(f"PP group {group_index} (ranks {','.join(map(str, g))}), {label(at)}", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return save(fig, stem)


def replica_view(data, replica_index, at, stem) -> list:
    """All PP groups of one model replica, stitched into one figure (one block of rows per group)."""
    plt = _plt()
    topo = data["meta"]["topology"]
    rep = set(topo["replicas"][replica_index])
    groups = [(gi, g) for gi, g in enumerate(topo["pp"]) if set(g) <= rep]
    n = sum(len(g) for _, g in groups)
    lo, hi = _span(data, at, rep)
    span = max(hi - lo, 1)
    fig, ax = plt.subplots(figsize=(14, 1.2 + min(0.32 * n, 22)))
    rows, labels, y = [], [], n - 1
    for gi, g in groups:
        for s, r in enumerate(g):
            rows.append((y, r))
            labels.append((y, f"PP{gi} s{s} r{r}"))
            y -= 1
        ax.axhline(y + 0.5, color="black", linewidth=0.6)
    _gantt_rows(ax, data, at, rows, lo, span)
    labels.sort()
    _thin_ticks(ax, [x[1] for x in labels], np.asarray([x[0] for x in labels]), max_labels=48)
    _phase_legend(ax)
    ax.set_xlim(0, _ms(span))
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlabel(f"time (ms), {data['meta']['time_alignment']} alignment")
    ax.set_title(f"model replica {replica_index}: {len(groups)} PP groups, {n} ranks, {label(at)}",
                 fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return save(fig, stem)


def _phase_legend(ax):
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=COLORS[p], label=p) for p in ("forward", "backward", "recompute", "optimizer")],
              fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


# -- collectives -----------------------------------------------------------------------------

def busbw_chart(data, stem) -> list:
    """Bus bandwidth of each complete collective instance by message size (log-log)."""
    plt = _plt()
    c = data["collectives"]
    fig, ax = plt.subplots(figsize=(9, 5))
    ok = c["complete"] & np.isfinite(c["busbw_gbps"]) & (c["msg_bytes"] > 0)
    markers = {"TP": "o", "DP": "s", "PP": "^", "CP": "D", "EP": "v"}
    for coll, dim in sorted(set(zip(c["collective"][ok].tolist(), c["parallel_dim"][ok].tolist()))):
        m = ok & (c["collective"] == coll) & (c["parallel_dim"] == dim)
        ax.scatter(c["msg_bytes"][m], c["busbw_gbps"][m], s=14, alpha=0.6, marker=markers.get(dim, "x"),
                   label=f"{coll} {dim} ({int(m.sum())})")
    ax.set_xscale("log")
    if ok.any() and c["busbw_gbps"][ok].min() > 0:
        ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s, GB = 1e9 B)")
    ax.set_title("collectives: bus bandwidth by type and message size", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    if ok.any():
        ax.legend(fontsize=8)
    return save(fig, stem)


P2P_KINDS = ("Send", "Recv", "SendRecv")


def kind_grids(c, m) -> dict:
    """``{(collective, dim): skew_grid(...)}`` for each group-collective kind of the instances ``c``
    (``collectives.parquet`` columns) and members ``m`` (``collectives_ranks.parquet``): only that
    kind's instances with two or more ranks; point-to-point kinds (Send, Recv, SendRecv) left out."""
    out = {}
    kinds = sorted({(a, b) for a, b in zip(c["collective"].tolist(), c["parallel_dim"].tolist())
                    if a not in P2P_KINDS})
    for coll, dim in kinds:
        sel = np.flatnonzero((c["collective"] == coll) & (c["parallel_dim"] == dim) & (c["n_ranks"] >= 2))
        if not len(sel):
            continue
        renum = np.full(len(c["collective"]), -1, np.int64)
        renum[sel] = np.arange(len(sel))
        keep = renum[m["instance"]] >= 0
        sub_m = {"instance": renum[m["instance"][keep]], "rank": m["rank"][keep], "arrival_ns": m["arrival_ns"][keep]}
        out[(coll, dim)] = skew_grid({"first_start_ns": c["first_start_ns"][sel]}, sub_m)
    return out


def skew_heatmap(grid_info, kind, stem) -> list:
    """One group-collective kind's heat map (``grid_info`` from :func:`kind_grids`), on its own colour
    scale (0 to the 99th percentile of its delays): rank x instance (time order) of the arrival delay
    (us), instances binned to at most :data:`MAX_COLUMNS` columns (max per bin), blank where the rank
    is not a member."""
    plt = _plt()
    grid, ranks, per, n = grid_info
    fig, ax = plt.subplots(figsize=(14, 1.5 + min(0.16 * len(ranks), 12)))
    finite = grid[np.isfinite(grid)]
    vmax = float(np.percentile(finite, 99)) if finite.size else 1.0
    im = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="magma_r", vmin=0, vmax=max(vmax, 1e-3))
    _thin_ticks(ax, [str(int(r)) for r in ranks], np.arange(len(ranks)), max_labels=40)
    ax.set_ylabel("rank")
    ax.set_xlabel(f"{kind} instances in time order ({n:,}; {per} per column, max shown)")
    fig.colorbar(im, ax=ax, label="arrival after the first rank (us)")
    ax.set_title(f"{kind} skew: how late each rank arrives", fontsize=10)
    return save(fig, stem)


def p2p_chart(rows, stem) -> list:
    """Point-to-point waiting per pipeline stage pair (``p2p.parquet`` summed per (src_stage,
    dst_stage)): the receiver's wait for the sender and the sender's for the receiver, and the
    transfer time, in ms."""
    plt = _plt()
    labels = [f"{a}->{b}" if a >= 0 else "?" for a, b in zip(rows["src_stage"], rows["dst_stage"])]
    x = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(labels) + 3), 4.5))
    for k, (col, lab, color) in enumerate((("recv_wait_ns", "receiver waited", COLORS["comm:PP"]),
                                           ("send_wait_ns", "sender waited", COLORS["comm:TP"]),
                                           ("time_ns", "transfer", COLORS["comm:DP"]))):
        ax.bar(x + (k - 1) * 0.27, _ms(rows[col]), width=0.27, label=lab, color=color)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_xlabel("pipeline stage pair (sender -> receiver)")
    ax.set_ylabel("ms (sum over transfers and iterations)")
    ax.set_title("point-to-point: waiting per stage pair", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return save(fig, stem)


def skew_grid(c, m):
    """``(grid, ranks, per_column, n)``: arrival delay in us, shape (ranks, columns), NaN where the
    rank has no member in the column; instances in time order, ``per_column`` of them per column
    (at most :data:`MAX_COLUMNS` columns), the max delay of each rank in each column."""
    order = np.argsort(c["first_start_ns"], kind="stable")
    col_of = np.empty(len(order), np.int64)
    col_of[order] = np.arange(len(order))
    ncol = max(1, min(MAX_COLUMNS, len(order)))
    bins = (col_of * ncol) // max(1, len(order))
    ranks = np.unique(m["rank"]) if len(m["rank"]) else np.zeros(0, np.int64)
    row = np.searchsorted(ranks, m["rank"])
    grid = np.full((len(ranks), ncol), np.nan)
    if len(m["rank"]):
        cb = bins[m["instance"]]
        val = m["arrival_ns"] / 1e3
        flat = row * ncol + cb
        best = np.full(grid.size, -np.inf)
        np.maximum.at(best, flat, val)
        grid = np.where(np.isfinite(best), best, np.nan).reshape(len(ranks), ncol)
    per = int(np.ceil(len(order) / ncol)) if len(order) else 1
    return grid, ranks, per, len(order)


def _stage_pairs(p) -> dict:
    """``p2p.parquet`` columns summed per (src_stage, dst_stage), as columns sorted by stages."""
    keys = sorted(set(zip(p["src_stage"].tolist(), p["dst_stage"].tolist())))
    out = {"src_stage": np.asarray([k[0] for k in keys]), "dst_stage": np.asarray([k[1] for k in keys])}
    for col in ("recv_wait_ns", "send_wait_ns", "time_ns"):
        out[col] = np.asarray([int(p[col][(p["src_stage"] == a) & (p["dst_stage"] == b)].sum()) for a, b in keys])
    return out


# -- all of them ----------------------------------------------------------------------------

def load(aggdir) -> dict:
    """The aggregate outputs the charts need, as column dicts (``meta`` = aggregate.json).
    Raises :class:`~streamtrace.errors.DataError` naming a damaged or missing file."""
    out = {"meta": read_meta(aggdir)}
    for n in ("timeline", "rank_phase", "ranks", "pipeline", "collectives", "collectives_ranks", "p2p"):
        out[n] = read_aggregate_table(aggdir, n)
    return out


def render_all(aggdir, outdir, ranks=None, max_groups=16, max_replicas=8, log=None, progress=None) -> list:
    """Render every chart of the module docstring into ``outdir``; ``ranks``: the ranks that get
    per-rank charts (default: all when <= 8, else each stage of the first PP group plus the rank that
    was the straggler most often); ``progress``: a bar over the charts (None: on a terminal).
    Returns the written paths."""
    data = load(aggdir)
    out = Path(outdir)
    meta = data["meta"]
    rk = data["ranks"]
    keys = sorted(set(zip(rk["iteration"].tolist(), rk["step"].tolist()))) if len(rk.get("rank", [])) else []
    per_it = {it: sum(1 for i, _ in keys if i == it) for it, _ in keys}
    files = []
    all_ranks = sorted(set(data["ranks"]["rank"].tolist()))
    if ranks is None:
        if len(all_ranks) <= 8:
            ranks = all_ranks
        else:
            topo = meta.get("topology") or {}
            ranks = list((topo.get("pp") or [[all_ranks[0]]])[0])
            s = read_aggregate_table(aggdir, "stragglers")
            if s:
                lag: dict = {}                  # rows per collective kind and rank: the rank's total
                for r, v in zip(s["rank"].tolist(), s["straggler_lag_ns"].tolist()):
                    lag[r] = lag.get(r, 0) + v
                if lag:
                    ranks.append(int(max(lag, key=lag.get)))
            ranks = sorted(set(ranks))
    jobs = []                      # (chart function, args, stem), drawn under one progress bar
    topo = meta.get("topology")
    for at in keys:
        sfx = stem_suffix(at, per_it[at[0]])
        jobs.append((ranks_overview, (data, at), f"ranks_overview_{sfx}"))
        for r in ranks:
            if r in all_ranks:
                jobs.append((rank_timeline, (data, r, at), f"rank_{r}_timeline_{sfx}"))
                jobs.append((rank_microbatches, (data, r, at), f"rank_{r}_microbatches_{sfx}"))
        if topo:
            for gi in range(min(len(topo["pp"]), max_groups)):
                if set(topo["pp"][gi]) & set(all_ranks):
                    jobs.append((pp_gantt, (data, gi, at), f"pp_group_{gi}_{sfx}"))
            for ri in range(min(len(topo["replicas"]), max_replicas)):
                if set(topo["replicas"][ri]) & set(all_ranks):
                    jobs.append((replica_view, (data, ri, at), f"replica_{ri}_{sfx}"))
    if data["collectives"] and len(data["collectives"].get("instance", [])):
        jobs.append((busbw_chart, (data,), "collectives_busbw"))
        for (coll, dim), grid in kind_grids(data["collectives"], data["collectives_ranks"]).items():
            safe = "".join(ch if ch.isalnum() else "_" for ch in f"{coll}_{dim}")
            jobs.append((skew_heatmap, (grid, f"{coll} {dim}"), f"collectives_skew_{safe}"))
    if data["p2p"] and len(data["p2p"].get("src", [])):
        jobs.append((p2p_chart, (_stage_pairs(data["p2p"]),), "p2p_stage_pairs"))
    with progress_bar(len(jobs), "charts", "chart", progress) as bar:
        for fn, args, stem in jobs:
            files += fn(*args, out / stem)
            bar.update()
    if log:
        log(f"wrote {len(files)} chart files to {out}")
    return files
