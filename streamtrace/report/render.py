"""Which charts of ``streamtrace.report.charts`` to draw, and drawing them (in parallel).

* **No chart without content**: a chart function returns None when it would draw nothing worth a
  look (no rows, every value 0, an all-zero heat map, bandwidth of one-rank "instances"); no file is
  written for it, and chart files of an earlier run in the folder that this run did not write are
  removed.
* **Alike pictures, one chart**: the charts drawn once per step (``ranks_overview``,
  ``rank_<R>_timeline``, ``rank_<R>_microbatches``, ``pp_group_<G>``, ``replica_<K>``) and, for the
  per-rank, per-PP-group and per-replica ones, once per rank / group / replica, are drawn once for
  each set of pictures with no difference worth seeing: in (step, rank or group) order, a picture
  alike an earlier drawn one of the same kind gets no chart of its own; the drawn chart's title
  names the steps / ranks / groups it stands for.  Ranks asked for by name (``ranks``,
  ``--chart-ranks``) each get their charts; only their alike steps are merged.  **Worth
  seeing**: the drawn rows/bars differ (another rank of a group, phase, micro-batch or kernel
  category), or some drawn quantity differs by at least ``ALIKE_FRACTION`` (5 %) of its axis:
  a bar height or stacked segment relative to the tallest bar, a window's start or end (from the
  first window's start) relative to the longest span.  5 % is about 60 px of a 1,200 px axis: a
  smaller difference has to be measured on the picture, it is not seen.  **Never folded**: a rank's
  per-rank charts into another rank's when the rank is on the step's critical path, or its idle
  time or lateness differs from the other's by more than the step's jitter (``RankApart``): a
  straggler's picture can look alike at 5 % of a long axis and still be the one that matters.
* **Parallel**: ``jobs`` worker processes (fork; 0 = all cores) draw the charts; the files are the
  same as with one (each chart is drawn from the same data by the same function, in its own
  figure).
* **Formats**: PNG (default), SVG, or both (``ChartOptions``).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import InitVar, dataclass, field
from pathlib import Path

import numpy as np

from ..events.dataset import column_min_max, iter_table
from ..aggregate.folder import (COLLECTIVES, COLLECTIVES_RANKS, CRITICAL_PATH_SUMMARY, P2P, PIPELINE, RANK_PHASE, RANKS,
                                STRAGGLERS, TIMELINE, Aggregate, columns, read_aggregate_table, table_path)
from ..runtime.parallel import run_tasks
from ..runtime.progress import progress_bar
from ..runtime.tuning import trim
from . import charts as drawing
from .config import step_patterns_used
from .skew import HeatGrid, SkewGrids, kinds_of

ALIKE_FRACTION = 0.05
WHAT = {"rank_timeline": "rank", "rank_microbatches": "rank", "pp_gantt": "PP group", "replica_view": "replica"}


@dataclass
class ChartOptions:
    """Options of ``render_all``.

    Attributes:
        chart_formats: file formats, a tuple of ``"png"`` and/or ``"svg"`` (default ``("png",)``; the
            spelling of ``ReportOptions``).
        jobs: worker processes drawing charts (int); 0 (default) = all cores; 1 = this process.
        chart_ranks: ranks that get per-rank charts (list of int); None (default): all when <= 8, else
            each stage of the first PP group plus the rank that was the straggler most often (the
            spelling of ``ReportOptions``).
        max_groups: PP groups drawn (first N, default 16); max_replicas: replicas drawn (default 8).
        progress: a bar over the charts (bool); None (default): only on a terminal.
        ranks: deprecated (removed in the next release): ``chart_ranks``, with a ``DeprecationWarning``.
    """
    chart_formats: tuple = ("png",)
    jobs: int = 0
    chart_ranks: list | None = None
    max_groups: int = 16
    max_replicas: int = 8
    progress: bool | None = None
    ranks: InitVar[list | None] = None

    def __post_init__(self, ranks):
        if ranks is not None:
            _deprecated_ranks(stacklevel=4)
            self.chart_ranks = ranks


def _deprecated_ranks(stacklevel):
    """``ranks`` of the last release's ``ChartOptions`` / ``render_all``: one more release, warned."""
    warnings.warn("the charts' ranks=... is deprecated (removed in the next release): give chart_ranks=..., "
                  "the spelling of ReportOptions", DeprecationWarning, stacklevel=stacklevel)


@dataclass
class ChartTask:
    """One chart: ``fn`` (a name in ``charts``), its ``args`` (after the
    data, for the per-step and collective charts), the file ``stem`` and ``also``: the labels of
    the alike steps it stands for."""
    fn: str
    args: tuple
    stem: str
    data_arg: bool = True
    also: list = field(default_factory=list)
    alike: list = field(default_factory=list)
    """The same as ``(noun, rank / group / replica or None, step label or None: the chart's own
    step)`` tuples, for the title's note (``alike_note``)."""


COLLECTIVE_COLUMNS = columns(COLLECTIVES, "instance", "collective", "parallel_dim", "complete", "busbw_gbps",
                             "msg_bytes", "n_ranks", "first_start_ns")
"""The columns of ``collectives.parquet`` the charts read."""
MEMBER_COLUMNS = columns(COLLECTIVES_RANKS, "instance", "rank", "arrival_ns")
"""The columns of ``collectives_ranks.parquet`` the heat maps read, a batch at a time."""
MEMBER_BATCH_ROWS = 1 << 16
"""Rows of ``collectives_ranks.parquet`` the heat maps read at a time: ``SkewGrids.add``'s temporaries are
~10 int64 columns of the batch (the reader's default, 2^20 rows, read 4,096 ranks' 655,360 members in one batch:
+40-50 MB in the report's process for each kind)."""


def load(aggdir, chart_ranks=None, meta=None) -> dict:
    """The aggregate outputs the charts need, as column dicts (``meta`` = aggregate.json, read unless
    given: the report's, read once for its sections and charts): only
    the columns of ``COLLECTIVE_COLUMNS``, and ``timeline`` rows only of the ranks that get
    per-rank charts (``charted_ranks`` of ``chart_ranks``, kept as ``chart_ranks``); the collective
    members are read in batches by ``plan`` (``skew_grids``), so that the report of a 1,024-rank
    job holds no table of every collective kernel and no other rank's timeline.
    Raises ``DataError`` naming a damaged or missing file."""
    out = {"meta": Aggregate.read(aggdir).summary if meta is None else meta}
    for n in (RANK_PHASE, RANKS, PIPELINE, P2P):      # (each under its table's name)
        out[n] = read_aggregate_table(aggdir, n)
    out["collectives"] = read_aggregate_table(aggdir, COLLECTIVES, COLLECTIVE_COLUMNS)
    out["step_word"] = "step " if step_patterns_used(out["meta"].get("inputs")) else "ProfilerStep#"
    out["chart_ranks"] = charted_ranks(out, aggdir, chart_ranks)
    out["timeline"] = read_aggregate_table(aggdir, TIMELINE, where={"rank": out["chart_ranks"] or [-1]})
    trim()                          # (what the reads left in glibc's heap: ~25 MB at 4,096 ranks)
    return out


def skew_grids(aggdir, c, kinds=None) -> dict:
    """``kind_grids`` of the instances ``c`` with the members of
    ``aggdir/collectives_ranks.parquet`` read a batch at a time (``SkewGrids``); only the ``(collective,
    dim)`` pairs ``kinds`` when given.  Raises ``DataError`` naming a damaged file."""
    path = table_path(aggdir, COLLECTIVES_RANKS)
    top = column_min_max(path, "rank")[1] if path.is_file() else None     # (the footer's statistics)
    grids = SkewGrids(c, 0 if top is None else top + 1, kinds)
    if path.is_file():
        for batch in iter_table(path, MEMBER_COLUMNS, batch_rows=MEMBER_BATCH_ROWS):
            grids.add(batch)
    return grids.grids()


def skew_heat(aggdir, c):
    """Yield ``((collective, dim), HeatGrid or None)`` for each kind of ``kinds_of(c)`` in order, its grid
    made from one read of the members of its own (``skew_grids``), so that one kind's unbinned grid is held
    at a time (at 16,384 ranks ~52 MB a kind; reading the members again: ~0.05 s a kind).  Raises
    ``DataError`` naming a damaged file."""
    for kind in kinds_of(c):
        heat = {key: HeatGrid.of(grid) for key, grid in skew_grids(aggdir, c, [kind]).items()}
        trim()                             # (the unbinned grid and the batches' temporaries, freed)
        yield from heat.items()            # (the unbinned grid let go before the next kind's is made)


# -- alike steps --------------------------------------------------------------------------------

def _windows(rp, sel, a, b, rows=None):
    """(shape, values) of the windows ``rp[a]..rp[b]`` of rows ``sel``, from the first start,
    relative to the longest span; ``rows``: the ranks in chart-row order (the shape names the row,
    not the rank)."""
    ok = [j for j in sel.tolist() if rp[a][j] is not None and not np.isnan(float(rp[a][j]))]
    row = {r: i for i, r in enumerate(rows or [])}
    shape = tuple((row.get(int(rp["rank"][j]), 0), str(rp["phase"][j]), int(rp["microbatch"][j])) for j in ok)
    if not ok:
        return shape, np.zeros(0)
    s = np.asarray([float(rp[a][j]) for j in ok])
    e = np.asarray([float(rp[b][j]) for j in ok])
    return shape, np.r_[s - s.min(), e - s.min()]


def _bars(vals):
    """Stacked bar values (rows x segments) -> the segments' cumulative tops."""
    v = np.cumsum(np.asarray(vals, np.float64), axis=1) if len(vals) else np.zeros((0, 1))
    return v.reshape(-1)


def picture(data, fn, args, at):
    """What chart ``fn`` with ``args`` draws for step ``at``, as ``(shape, values)``: ``shape``
    the drawn rows/bars (hashable), ``values`` each drawn quantity in its axis' unit (float64 ns:
    bar tops, or window ends from the first start; the largest value is the axis' extent)."""
    rp, rk = data["rank_phase"], data["ranks"]
    if fn == "ranks_overview":
        sel = np.flatnonzero(drawing.rows_at(rk, at)) if len(rk.get("rank", [])) else np.zeros(0, np.int64)
        sel = sel[np.argsort(rk["rank"][sel], kind="stable")] if len(sel) else sel
        return (tuple(rk["rank"][sel].tolist()),
                _bars(np.stack([rk[k][sel] for k, _ in drawing.OVERVIEW_PARTS], 1) if len(sel) else []))
    if not len(rp.get("rank", [])):
        return (), np.zeros(0)
    if fn in ("rank_timeline", "rank_microbatches"):
        ranks = [args[0]]
    elif fn == "pp_gantt":
        ranks = data["meta"]["topology"]["pp"][args[0]]
    else:
        ranks = data["meta"]["topology"]["replicas"][args[0]]
    sel = np.flatnonzero(drawing.rows_at(rp, at) & np.isin(rp["rank"], list(ranks)))
    if fn == "rank_microbatches":
        sel = sel[np.isin(rp["phase"][sel], ("forward", "backward"))]
        shape = tuple((str(rp["phase"][j]), int(rp["microbatch"][j])) for j in sel.tolist())
        cols = ("compute_only_ns", "overlap_ns", "exposed_comm_ns")
        return shape, np.r_[_bars(np.stack([rp[k][sel] for k in cols], 1) if len(sel) else []),
                            rp["wall_ns"][sel].astype(np.float64)]
    if fn == "rank_timeline":
        tl = data["timeline"]
        cats = tuple(sorted(set(tl["category"][(tl["rank"] == args[0]) & drawing.rows_at(tl, at)].tolist())))
        shape, vals = _windows(rp, sel, "start_ns", "end_ns")
        return (cats, shape), vals
    sel = sel[np.isin(rp["phase"][sel], ("forward", "backward", "recompute", "optimizer"))]
    return _windows(rp, sel, "compute_start_ns", "compute_end_ns", list(ranks))


def alike(p, q, fraction=ALIKE_FRACTION) -> bool:
    """Whether pictures ``p`` and ``q`` (from ``picture``) show no difference worth seeing:
    the same shape and every value within ``fraction`` of the larger axis extent (the largest
    value of either)."""
    if p[0] != q[0] or p[1].shape != q[1].shape:
        return False
    if not p[1].size:
        return True
    extent = max(float(np.abs(p[1]).max()), float(np.abs(q[1]).max()), 1e-12)
    return float(np.abs(p[1] - q[1]).max()) < fraction * extent


# -- the plan ---------------------------------------------------------------------------------

class RankApart:
    """Whether rank ``r``'s per-rank charts of a step may stand in another rank's ``q`` (``__call__``
    is True when they may not): never when ``r`` is on the step's critical path
    (``critical_path_summary.parquet``, ``what == "slack"``, ``on_path``), nor when its idle time
    (``ranks.parquet``'s ``idle_ns``, summed over its devices) or its lateness (its slack, the same
    rows' ``ns``: how much later it could have finished) differs from ``q``'s by more than the
    step's jitter: 3 x the median absolute deviation of that quantity over the step's ranks (a rank
    apart from the others, not one of the crowd), at least 1 % of the step's longest wall time."""

    def __init__(self, ranks: dict, cp: dict):
        self.idle: dict = {}
        self.wall: dict = {}
        for it, st, r, idle, wall in zip(*(ranks.get(k, []) for k in ("iteration", "step", "rank", "idle_ns",
                                                                      "wall_ns"))):
            key = (int(it), int(st))
            d = self.idle.setdefault(key, {})
            d[int(r)] = d.get(int(r), 0) + int(idle)
            self.wall[key] = max(self.wall.get(key, 0), int(wall))
        self.slack: dict = {}
        self.on_path: dict = {}
        for it, st, what, r, ns, on in zip(*(cp.get(k, []) for k in ("iteration", "step", "what", "rank", "ns",
                                                                     "on_path"))):
            if what == "slack" and r >= 0:
                self.slack.setdefault((int(it), int(st)), {})[int(r)] = int(ns)
                if on:
                    self.on_path.setdefault((int(it), int(st)), set()).add(int(r))

    def _jitter(self, values: dict, at) -> float:
        v = np.asarray(list(values.values()), np.float64)
        mad = float(np.median(np.abs(v - np.median(v)))) if len(v) else 0.0
        return max(3 * mad, 0.01 * self.wall.get(at, 0))

    def __call__(self, at, r: int, q: int) -> bool:
        at = (int(at[0]), int(at[1]))
        if r in self.on_path.get(at, ()):
            return True
        for table in (self.idle, self.slack):
            vals = table.get(at, {})
            if r in vals and q in vals and abs(vals[r] - vals[q]) > self._jitter(vals, at):
                return True
        return False


def charted_ranks(data, aggdir, ranks=None) -> list:
    """The ranks that get per-rank charts: ``ranks`` (``ChartOptions.chart_ranks``) that the job has, or
    the default (see ``ChartOptions``)."""
    all_ranks = sorted(set(data["ranks"]["rank"].tolist())) if len(data["ranks"].get("rank", [])) else []
    if ranks is not None:
        return [r for r in ranks if r in set(all_ranks)]
    if len(all_ranks) <= 8:
        return all_ranks
    topo = data["meta"].get("topology") or {}
    out = list((topo.get("pp") or [[all_ranks[0]]])[0])
    s = read_aggregate_table(aggdir, STRAGGLERS)
    if s:
        lag: dict = {}                  # rows per collective kind and rank: the rank's total
        for r, v in zip(s["rank"].tolist(), s["straggler_lag_ns"].tolist()):
            lag[r] = lag.get(r, 0) + v
        if lag:
            out.append(int(max(lag, key=lag.get)))
    return sorted(set(out))


def _per_step_charts(data, ranks, opt) -> list:
    """``(fn, args, stem prefix)`` of the charts drawn once per step."""
    topo = data["meta"].get("topology")
    present = set(data["ranks"]["rank"].tolist()) if len(data["ranks"].get("rank", [])) else set()
    out = [("ranks_overview", (), "ranks_overview")]
    for r in ranks:
        out += [("rank_timeline", (r,), f"rank_{r}_timeline"), ("rank_microbatches", (r,), f"rank_{r}_microbatches")]
    if topo and any(len(g) > 1 for g in topo["pp"]):      # PP = 1: no pipeline, no Gantt of "stages"
        out += [("pp_gantt", (gi,), f"pp_group_{gi}") for gi in range(min(len(topo["pp"]), opt.max_groups))
                if set(topo["pp"][gi]) & present]
        out += [("replica_view", (ri,), f"replica_{ri}") for ri in range(min(len(topo["replicas"]), opt.max_replicas))
                if set(topo["replicas"][ri]) & present]
    return out


RANK_CHARTS = ("rank_timeline", "rank_microbatches")


def plan(data, aggdir, opt: ChartOptions) -> list:
    """Every ``ChartTask`` to draw, alike pictures merged (see the module docstring)."""
    rk = data["ranks"]
    keys = sorted(set(zip(rk["iteration"].tolist(), rk["step"].tolist()))) if len(rk.get("rank", [])) else []
    per_it = {it: sum(1 for i, _ in keys if i == it) for it, _ in keys}
    tasks, drawn = [], {}             # drawn: chart kind -> [(picture, task)]
    charts = _per_step_charts(data, data["chart_ranks"], opt)
    apart = RankApart(data["ranks"], read_aggregate_table(aggdir, CRITICAL_PATH_SUMMARY,
                                                          columns(CRITICAL_PATH_SUMMARY, "iteration", "step", "what",
                                                                  "rank", "ns", "on_path")))
    for at in keys:
        for fn, args, prefix in charts:
            p = picture(data, fn, args, at)
            own = opt.chart_ranks is not None and fn in RANK_CHARTS       # ranks asked for: each its own
            twin = next((t for q, t in drawn.get(fn, []) if (not own or t.args[0] == args[0]) and alike(q, p)
                         and not (fn in RANK_CHARTS and t.args[0] != args[0] and apart(at, args[0], t.args[0]))),
                        None)
            if twin is not None:
                other = bool(args) and twin.args[0] != args[0]
                step = drawing.label(at, data) if twin.args[-1] != at else None
                what = [f"{WHAT[fn]} {args[0]}"] if other else []
                twin.also.append(", ".join(what + ([step] if step else [])))
                twin.alike.append((WHAT.get(fn), args[0] if args and fn in WHAT else None, step))
                continue
            t = ChartTask(fn, args + (at,), f"{prefix}_{drawing.stem_suffix(at, per_it[at[0]])}")
            drawn.setdefault(fn, []).append((p, t))
            tasks.append(t)
    if data["collectives"] and len(data["collectives"].get("instance", [])):
        tasks.append(ChartTask("busbw_chart", (), "collectives_busbw"))
        for (coll, dim), heat in skew_heat(aggdir, data["collectives"]):
            safe = "".join(ch if ch.isalnum() else "_" for ch in f"{coll}_{dim}")
            tasks.append(ChartTask("skew_heatmap", (heat, f"{coll} {dim}"), f"collectives_skew_{safe}", False))
    if data["p2p"] and len(data["p2p"].get("src", [])):
        tasks.append(ChartTask("p2p_chart", (drawing.stage_pairs(data["p2p"]),), "p2p_stage_pairs", False))
    return tasks


# -- drawing ------------------------------------------------------------------------------------

_RUN: dict = {}         # the data, tasks, folder and formats of the render in progress (inherited by forked workers)


def draw(i, chart=None) -> list:
    """Draw task ``i`` of the render in progress and save it; returns the written paths ([] when
    the chart has no content).  ``chart``: one of ``render_all``'s ``extra`` charts, ``(function,
    args)``, called instead (``i`` is then its place after the planned tasks).  Drawn in
    ``charts.style``."""
    with drawing.style():
        if chart is not None:
            fn, args = chart
            return list(fn(*args))
        return _draw(i)


def _draw(i) -> list:
    t = _RUN["tasks"][i]
    fn = getattr(drawing, t.fn)
    fig = fn(_RUN["data"], *t.args) if t.data_arg else fn(*t.args)
    if fig is None:
        return []
    if t.alike:
        title = fig.get_suptitle() or fig.axes[0].get_title()
        text = alike_note(title, t.alike, int(fig.get_size_inches()[0] * 72 / (10 * 0.6)))
        if fig.get_suptitle():
            fig.suptitle(text, fontsize=10)
        else:
            fig.axes[0].set_title(text, fontsize=10)
    return drawing.save(fig, Path(_RUN["out"]) / t.stem, _RUN["formats"])


def alike_note(title: str, alike: list, width: int) -> str:
    """``title`` with the alike pictures a chart stands for (``ChartTask.alike``), as a person would
    write them: its own step's other ranks as ranges (``ranks 1-7``), then each other step, steps
    standing for the same ranks together (``ProfilerStep#12, ProfilerStep#13: ranks 0-7``); wrapped at
    ``width`` characters (the figure's width), at most ``MAX_NOTE_LINES`` lines of note."""
    import textwrap
    by_step: dict = {}
    for noun, who, step in alike:
        by_step.setdefault(step, (noun, set()))[1].update([] if who is None else [who])
    own = by_step.pop(None, None)
    parts = [_ids(*own)] if own and own[1] else []
    groups: dict = {}
    for step, (noun, ids) in by_step.items():
        groups.setdefault((noun, tuple(sorted(ids))), []).append(step)
    for (noun, ids), steps in groups.items():
        parts.append(", ".join(steps) + (f": {_ids(noun, ids)}" if ids else ""))
    lines = textwrap.wrap(f"(alike: {'; '.join(parts)})", width) or [""]
    if len(lines) > MAX_NOTE_LINES:
        lines = lines[:MAX_NOTE_LINES]
        lines[-1] = lines[-1][:max(0, width - 5)] + " ...)"
    head = title if len(title) + 2 + len(lines[0]) > width else f"{title}  {lines.pop(0)}"
    return "\n".join([head] + lines)


MAX_NOTE_LINES = 3


def _ids(noun, ids) -> str:
    """``noun`` with ``ids`` (ints) as ranges: ``ranks 1-7``, ``rank 3``, ``PP groups 0, 2``."""
    v = sorted(ids)
    runs, a = [], 0
    for i in range(1, len(v) + 1):
        if i == len(v) or v[i] != v[i - 1] + 1:
            runs.append(f"{v[a]}" if i - 1 == a else f"{v[a]}-{v[i - 1]}")
            a = i
    return f"{noun}{'s' if len(v) > 1 else ''} {', '.join(runs)}"


def render_all(aggdir, outdir, chart_ranks=None, max_groups=16, max_replicas=8, log=None, progress=None,
               opt: ChartOptions | None = None, ranks=None, extra=(), meta=None) -> list:
    """Render every chart of ``charts`` that has content into ``outdir``
    (``opt``, or the keyword arguments, see ``ChartOptions``; ``ranks``: deprecated, ``chart_ranks``)
    and remove the chart files an earlier run left there.  ``extra``: more charts drawn by the same
    workers, ``[(fn, args)]`` where ``fn(*args)`` writes its files and returns their paths (the report's
    idle, critical path and efficiency charts), or a function returning that list, called in this
    process while the workers draw the first planned charts (the report's Markdown, which those
    charts need); they are started before the other planned ones (each is one of the longest) and
    their files come after the planned ones.  ``meta``: aggregate.json's dict when the caller holds it
    (``load``).  Returns the written paths in plan order, then ``extra``'s.
    Raises ValueError for an unknown format."""
    if ranks is not None:
        _deprecated_ranks(stacklevel=3)
        chart_ranks = ranks
    opt = opt or ChartOptions(chart_ranks=chart_ranks, max_groups=max_groups, max_replicas=max_replicas,
                              progress=progress)
    bad = [f for f in opt.chart_formats if f not in drawing.FORMATS]
    if bad or not opt.chart_formats:
        raise ValueError(f"chart format {bad[0] if bad else ''!r}: use png or svg")
    data = load(aggdir, opt.chart_ranks, meta)
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = plan(data, aggdir, opt)
    drawing.pyplot()                               # import matplotlib once, before the workers fork
    _RUN.update(data=data, tasks=tasks, out=str(out), formats=tuple(opt.chart_formats))
    later = extra if callable(extra) else (lambda: extra)
    jobs = max(1, min(opt.jobs or os.cpu_count() or 1, len(tasks) + (1 if callable(extra) else len(extra))))
    try:
        with progress_bar(len(tasks), "charts", "chart", opt.progress) as bar:
            def more():
                charts = list(later())
                bar.total += len(charts)
                return [(len(tasks) + j, c) for j, c in enumerate(charts)]
            # the first planned charts fill the workers while this process makes ``extra`` (when it is a
            # function), then the extra ones, then the rest: the longest are not left for the end
            done = run_tasks(draw, [(i,) for i in range(len(tasks))], jobs, on_done=bar.update, more=more,
                             more_at=2 * jobs if callable(extra) else 0)
    finally:
        _RUN.clear()
    files = [Path(p) for r in done for p in r]
    keep = {p.name for p in files}
    for old in list(out.glob("*.png")) + list(out.glob("*.svg")):
        if old.name not in keep:
            old.unlink()
    if log:
        log(f"wrote {len(files)} chart files to {out}")
    return files
