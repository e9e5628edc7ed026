"""The arrival-delay grids of the collective skew heat maps (drawn by
``streamtrace.report.charts.skew_heatmap``): per group-collective kind, rank x instance (in
time order, binned to at most ``MAX_COLUMNS`` columns, the max delay per bin), from the
``collectives.parquet`` instances and ``collectives_ranks.parquet`` members, whole or in batches.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_COLUMNS = 400
"""At most this many instance columns per heat map."""

MAX_ROWS = 1024
"""At most this many rank rows per heat map (``row_bins``): fewer than the ~1,260 pixel rows of the
tallest map's axes (12.6 in at 100 dpi), so that every rank's delay reaches a pixel (a map of 4,096 rows
resampled to fewer pixels drops most of them, a late rank with them) and the image drawn stays the size
of a 1,024-rank job's (matplotlib's resampling, 4,096 x 400: +230 MB in the chart's process)."""

P2P_KINDS = ("Send", "Recv", "SendRecv")


def kind_grids(c, m) -> dict:
    """``{(collective, dim): skew_grid(...)}`` for each group-collective kind of the instances ``c``
    (``collectives.parquet`` columns) and members ``m`` (``collectives_ranks.parquet``): only that
    kind's instances with two or more ranks; point-to-point kinds (Send, Recv, SendRecv) left out.
    The members may also come in batches: ``SkewGrids``."""
    grids = SkewGrids(c)
    grids.add(m)
    return grids.grids()


class SkewGrids:
    """``kind_grids`` over members given in batches (``add``, e.g. the row groups of a
    1,024-rank job's ``collectives_ranks.parquet``, millions of rows): per kind one (rank x column)
    array of running maxima, so memory is the batch plus ~8 bytes per instance, not the members.
    ``grids`` gives what ``skew_grid`` gives for each kind's members at once.  ``rows``: the number of
    rank rows to allocate at once (the largest rank + 1, when known: no growing copies); the grids of a
    16,384-rank job are ~52 MB a kind, so they are finished in place (``grids``, once), and ``kinds``
    (``(collective, dim)`` pairs, default all: ``kinds_of``) grids only those, e.g. one kind at a time."""

    def __init__(self, c, rows: int = 0, kinds=None):
        # (the (collective, dim) pairs made as they are read, twice: a list of them is ~12 MB at 160,000 instances)
        coll, dim = c["collective"].tolist(), c["parallel_dim"].tolist()
        self.kinds = [k for k in kinds_of(c, zip(coll, dim)) if kinds is None or k in kinds]
        code = {k: i for i, k in enumerate(self.kinds)}
        self.kind = np.fromiter((code.get(p, -1) for p in zip(coll, dim)), np.int16, len(coll))
        self.kind[np.asarray(c["n_ranks"]) < 2] = -1
        self.bins = np.zeros(len(self.kind), np.int64)          # the instance's column in its kind's grid
        self.shape, self.best = {}, {}
        for k in range(len(self.kinds)):
            sel = np.flatnonzero(self.kind == k)
            if not len(sel):
                continue
            order = np.argsort(np.asarray(c["first_start_ns"])[sel], kind="stable")
            col_of = np.empty(len(sel), np.int64)
            col_of[order] = np.arange(len(sel))
            ncol = max(1, min(MAX_COLUMNS, len(sel)))
            self.bins[sel] = (col_of * ncol) // len(sel)
            self.shape[k] = (ncol, len(sel))
            self.best[k] = np.full((max(0, int(rows)), ncol), -np.inf)

    def add(self, m):
        """Members ``m`` (columns ``instance``, ``rank``, ``arrival_ns``), any subset of rows."""
        inst = np.asarray(m["instance"], np.int64)
        if not len(inst):
            return
        kind = self.kind[inst]
        for k in np.unique(kind[kind >= 0]).tolist():
            rows = np.flatnonzero(kind == k)
            rank = np.asarray(m["rank"], np.int64)[rows]
            best = self.best[k]
            if rank.max() >= len(best):
                best = self.best[k] = np.vstack([best, np.full((int(rank.max()) + 1 - len(best), best.shape[1]),
                                                               -np.inf)])
            np.maximum.at(best, (rank, self.bins[inst[rows]]), np.asarray(m["arrival_ns"])[rows] / 1e3)

    def grids(self) -> dict:
        """``{(collective, dim): (grid, ranks, per_column, n)}`` as ``skew_grid``; the running maxima
        become the grids (no copy when every row has a member), so it is called once."""
        out = {}
        for k, (ncol, n) in self.shape.items():
            grid = self.best.pop(k)
            ranks = np.flatnonzero(np.isfinite(grid).any(axis=1)).astype(np.int64)
            if len(ranks) < len(grid):
                grid = grid[ranks]
            grid[~np.isfinite(grid)] = np.nan
            out[self.kinds[k]] = (grid, ranks, int(np.ceil(n / ncol)), n)
        return out


def kinds_of(c, pairs=None) -> list:
    """The group-collective kinds ``(collective, dim)`` of the instances ``c``, sorted: the heat maps'
    (point-to-point kinds left out).  ``pairs``: ``c``'s ``(collective, parallel_dim)`` pairs when made (any
    iterable, read once)."""
    pairs = zip(c["collective"].tolist(), c["parallel_dim"].tolist()) if pairs is None else pairs
    return sorted({p for p in pairs if p[0] not in P2P_KINDS})


def row_bins(grid, ranks, max_rows=MAX_ROWS) -> tuple:
    """``(grid, first, per_row)``: the rows of ``grid`` (float64[ranks, columns], NaN where no member)
    binned ``per_row`` = ceil(rows / ``max_rows``) consecutive rows at a time, the max of each column
    over a bin (NaN where the bin has no value), and ``first`` the rank of each bin's first row (int64,
    from ``ranks``, the grid's rank of each row); the grid and ``ranks`` as they are when they fit."""
    n = len(ranks)
    per = max(1, -(-n // max_rows))
    if per == 1:
        return grid, np.asarray(ranks, np.int64), 1
    starts = np.arange(0, n, per)
    return np.fmax.reduceat(grid, starts, axis=0), np.asarray(ranks, np.int64)[starts], per


@dataclass
class HeatGrid:
    """One kind's heat map as drawn (``HeatGrid.of`` a grid of ``SkewGrids.grids``): ``grid`` the rows
    binned to at most ``MAX_ROWS`` (``row_bins``: float64[rows, columns], us, NaN blank), ``first`` each
    row's first rank (int64), ``per_row`` ranks a row, ``per_column`` instances a column, ``n`` instances in
    all, ``vmax_ns`` the colour scale's top: the 99th percentile of the unbinned grid's delays (ns, at least
    1 ns).  Made in the report's process before the chart workers fork: at 4,096 ranks a kind's unbinned
    grid is 13 MB, which each worker would otherwise inherit."""
    grid: np.ndarray
    first: np.ndarray
    per_row: int
    per_column: int
    n: int
    vmax_ns: float

    @classmethod
    def of(cls, grid_info) -> "HeatGrid | None":
        """The heat map of ``grid_info`` (``(grid, ranks, per_column, n)``, as ``skew_grid``); None when no
        rank arrived after another (no finite delay above 0): nothing to draw."""
        grid, ranks, per, n = grid_info
        finite = grid[np.isfinite(grid)]
        if not finite.size or finite.max() <= 0:
            return None
        vmax = max(float(np.percentile(finite, 99, overwrite_input=True)), 1e-3) * 1e3    # (finite: a copy)
        binned, first, per_row = row_bins(grid, ranks)
        return cls(binned, first, per_row, per, n, vmax)


def heat_image(grid, scale: float, vmax: float, cmap: str) -> tuple:
    """``(rgba, mapped)``: ``grid``'s values (float64[rows, columns], NaN blank; a ``HeatGrid``'s, so at most
    ``MAX_ROWS`` rows) times ``scale`` coloured by ``cmap`` from 0 to ``vmax``
    (NaN: the colour map's transparent "bad" colour), one byte a channel (uint8[rows, columns, 4]), at the
    grid's size: matplotlib maps a float grid's colours in float64 RGBA at the grid's or the canvas' size
    (~100-230 MB for one map).  ``mapped``: the ``ScalarMappable`` for the colour bar."""
    from matplotlib import cm, colormaps, colors
    mapped = cm.ScalarMappable(norm=colors.Normalize(vmin=0, vmax=vmax), cmap=colormaps[cmap])
    return mapped.to_rgba(np.ma.masked_invalid(grid * scale), bytes=True), mapped


HEAT_BAND_ROWS = 128     # rows of a heat map's image matplotlib resamples at a time


def draw_bands(ax, rgba):
    """Draw ``rgba`` (uint8[rows, columns, 4]) as ``imshow(rgba, aspect="auto", interpolation="nearest")``
    would, as images of ``HEAT_BAND_ROWS`` rows each: matplotlib resamples an image to its size on the
    canvas in float32 RGBA plus two temporaries of that size (~70 MB for a 1,024-row map on a 14 x 12 in
    canvas at 100 dpi); a band's share is an eighth of that.  The bands' edges fall on pixel borders
    (matplotlib rounds an image's box to them), where the whole image's nearest-pixel sampling puts them but for
    rounding (4,096 synthetic ranks' three maps: one pixel differs)."""
    rows, cols = rgba.shape[:2]
    for r0 in range(0, rows, HEAT_BAND_ROWS):
        r1 = min(rows, r0 + HEAT_BAND_ROWS)
        ax.imshow(rgba[r0:r1], aspect="auto", interpolation="nearest", extent=(-0.5, cols - 0.5, r1 - 0.5, r0 - 0.5))
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)


def skew_grid(c, m):
    """``(grid, ranks, per_column, n)``: arrival delay in us, shape (ranks, columns), NaN where the
    rank has no member in the column; instances in time order, ``per_column`` of them per column
    (at most ``MAX_COLUMNS`` columns), the max delay of each rank in each column."""
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
