"""Charts: every chart with content renders from the demo trace set (PNG by default, SVG on
request, the same files from 1 or 2 worker processes), charts without content are not written,
alike pictures become one chart, the large-rank overview stays legible, and the helpers that keep
charts legible at 64+ ranks and thousands of kernels behave."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.events.dataset import read_table
from streamtrace.report.charts import PX_WIDTH, _fits, merge_close
from streamtrace.report.skew import (HEAT_BAND_ROWS, MAX_COLUMNS, MAX_ROWS, HeatGrid, SkewGrids, kind_grids, row_bins,
                                     skew_grid)
from streamtrace.report.render import COLLECTIVE_COLUMNS, ChartOptions, load, render_all
from streamtrace.synth.job import SynthSpec, generate_job


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("charts")
    generate_job(tmp / "traces", SynthSpec())          # the demo's job: TP2 x DP2 x PP2, 8 ranks
    analyze([tmp / "traces"], tmp / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp / "an"], tmp / "agg", AggregateOptions())
    return tmp


def _not_blank(p):
    import matplotlib.image as mpimg
    img = mpimg.imread(p)
    assert img.ndim == 3 and img.shape[0] > 150 and img.shape[1] > 400, p
    assert img[..., :3].std() > 0.05, p          # not a blank canvas


def test_every_chart_renders_from_the_demo_png_by_default(demo):
    files = render_all(demo / "agg", demo / "charts", opt=ChartOptions(chart_ranks=[0, 5], jobs=1))
    names = sorted(p.name for p in files)
    # rank 5 is on stage 1 as rank 4 is: its pictures are rank 4's -> one chart per stage; the four
    # PP groups (two replicas) draw the same picture -> one each (see test_alike_* for the rule)
    want = ["ranks_overview_iter10", "rank_0_timeline_iter10", "rank_0_microbatches_iter10", "rank_5_timeline_iter10",
            "rank_5_microbatches_iter10", "collectives_busbw", "collectives_skew_AllGather_DP",
            "collectives_skew_AllReduce_TP", "collectives_skew_ReduceScatter_DP", "p2p_stage_pairs",
            "pp_group_0_iter10", "replica_0_iter10"]
    assert names == sorted(f"{w}.png" for w in want)
    for p in files:
        assert p.stat().st_size > 5_000, p
        _not_blank(p)


def test_ranks_asked_for_each_get_their_chart(demo):
    """Ranks 4 and 5 (one TP group of stage 1, neither on the critical path, idle and slack within the
    jitter) draw alike pictures: by default one chart stands for both; asked for by name, each gets
    its own."""
    asked = {p.name for p in render_all(demo / "agg", demo / "asked", opt=ChartOptions(chart_ranks=[4, 5],
                                                                                          jobs=1))}
    assert {"rank_4_timeline_iter10.png", "rank_5_timeline_iter10.png", "rank_5_microbatches_iter10.png"} <= asked
    with pytest.warns(DeprecationWarning, match="chart_ranks"):      # the last release's keyword, one more
        old = {p.name for p in render_all(demo / "agg", demo / "old", ranks=[4, 5])}
    assert old == asked
    default = {p.name for p in render_all(demo / "agg", demo / "default", opt=ChartOptions(jobs=1))}
    assert "rank_4_timeline_iter10.png" in default and "rank_5_timeline_iter10.png" not in default


def test_charts_read_only_the_charted_ranks_timeline_and_few_collective_columns(demo):
    """What keeps the report of a 1,024-rank job bounded: the timeline rows of the charted ranks
    only (checked against the whole table), the collective columns the charts use."""
    whole = read_table(demo / "agg" / "timeline.parquet")
    data = load(demo / "agg", chart_ranks=[0, 5])
    tl = data["timeline"]
    assert sorted(set(tl["rank"].tolist())) == [0, 5]
    keep = np.isin(whole["rank"], [0, 5])
    assert len(tl["rank"]) == int(keep.sum()) > 0
    assert sorted(zip(tl["rank"].tolist(), tl["start_ns"].tolist())) == \
        sorted(zip(whole["rank"][keep].tolist(), whole["start_ns"][keep].tolist()))
    assert sorted(data["collectives"]) == sorted(COLLECTIVE_COLUMNS)
    assert "collectives_ranks" not in data          # read in batches by the heat maps (skew_grids)


def test_svg_on_request_and_stale_files_removed(demo):
    out = demo / "svg"
    render_all(demo / "agg", out, opt=ChartOptions(chart_ranks=[0], jobs=1))
    files = render_all(demo / "agg", out, opt=ChartOptions(chart_ranks=[0], jobs=1, chart_formats=("svg",)))
    assert files and all(p.suffix == ".svg" for p in files)
    assert sorted(out.iterdir()) == sorted(files)          # the PNGs of the run before are gone
    for p in files:
        assert ET.parse(p).getroot().tag.endswith("svg")
    with pytest.raises(ValueError):
        render_all(demo / "agg", out, opt=ChartOptions(chart_formats=("jpg",)))


def test_parallel_rendering_writes_the_same_files(demo):
    one = render_all(demo / "agg", demo / "j1", opt=ChartOptions(jobs=1))
    two = render_all(demo / "agg", demo / "j2", opt=ChartOptions(jobs=2))
    assert [p.name for p in one] == [p.name for p in two]
    for a, b in zip(one, two):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_merge_close_hand_checked():
    s, e = merge_close([0, 10, 13, 40], [10, 12, 20, 50], gap=2)
    assert s.tolist() == [0, 40] and e.tolist() == [20, 50]      # gaps 0 and 1 < 2 merge, 20 does not
    s, e = merge_close([0, 10, 13, 40], [10, 12, 20, 50], gap=1)
    assert s.tolist() == [0, 13, 40] and e.tolist() == [12, 20, 50]


def test_thousands_of_kernels_become_at_most_a_pixel_each():
    rng = np.random.default_rng(0)
    start = np.sort(rng.integers(0, 100_000_000, 20_000))
    end = start + rng.integers(100, 3_000, len(start))
    span = int(end.max() - start.min())
    s, e = merge_close(start, end, max(1, span // PX_WIDTH))
    assert len(s) <= PX_WIDTH + 1 and len(s) < len(start) // 10
    assert (e - s).sum() >= (end - start).max()
    assert s[0] == start[0] and e[-1] == end.max()


def test_labels_only_where_they_fit():
    span = 100_000_000
    assert _fits(span // 10, span, "F12")           # a tenth of the width is ~110 px
    assert not _fits(span // 2000, span, "F12")     # half a pixel
    assert not _fits(span // 100, span, "B123456789")


def test_skew_grid_bins_many_instances():
    n, ranks = 5_000, 64
    c = {"first_start_ns": np.arange(n, dtype=np.int64)[::-1] * 1000}
    inst = np.repeat(np.arange(n), 2)
    rank = np.stack([np.arange(n) % ranks, (np.arange(n) + 1) % ranks], 1).reshape(-1)
    arrival = np.where(np.arange(2 * n) % 2 == 1, 7_000, 0)
    grid, rk, per, count = skew_grid(c, {"instance": inst, "rank": rank, "arrival_ns": arrival})
    assert grid.shape == (ranks, MAX_COLUMNS) and count == n and per == int(np.ceil(n / MAX_COLUMNS))
    assert np.nanmax(grid) == 7.0 and np.nanmin(grid) == 0.0
    assert rk.tolist() == list(range(ranks))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_row_bins_take_each_bins_max_as_a_plain_loop_does(rows, cols, max_rows, seed):
    rng = np.random.default_rng(seed)
    grid = np.round(rng.exponential(10.0, (rows, cols)), 1)
    grid[rng.random((rows, cols)) < 0.5] = np.nan
    ranks = np.sort(rng.choice(10 * rows, rows, replace=False))
    got, first, per = row_bins(grid, ranks, max_rows)
    want_per = (rows + max_rows - 1) // max_rows
    want, want_first = [], []
    for b in range(0, rows, want_per):                 # each bin: its first rank, each column's max of the values
        want_first.append(int(ranks[b]))
        want.append([max((v for v in grid[b:b + want_per, j].tolist() if v == v), default=None) for j in range(cols)])
    assert per == want_per and first.tolist() == want_first and len(got) <= max_rows
    assert [[None if v != v else v for v in row] for row in got.tolist()] == want


@pytest.mark.parametrize("late", [1001, 1003, 2050, 2051, 3001])
def test_a_lone_late_rank_of_4096_is_drawn(late):
    """4,096 rank rows into ~1,200 pixel rows: matplotlib's nearest resampling alone drew about one rank in
    three (each of these ranks' row was dropped); binned to ``MAX_ROWS`` rows, max per bin, every one is."""
    from streamtrace.report import charts as C
    grid = np.zeros((4096, 400))
    grid[late] = 500.0
    fig = C.skew_heatmap(HeatGrid.of((grid, np.arange(4096), 1, 400)), "AllReduce TP")
    fig.canvas.draw()
    ax = fig.axes[0]
    img = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)
    box, h = ax.get_window_extent(), img.shape[0]
    inside = img[int(h - box.y1) + 2:int(h - box.y0) - 2, int(box.x0) + 2:int(box.x1) - 2]
    assert (inside.sum(axis=-1) < 150).sum() > 100          # the late rank's row, in the scale's darkest colour
    assert sum(im.get_array().shape[0] for im in ax.images) == MAX_ROWS and "4 per row" in ax.get_ylabel()
    C.pyplot().close(fig)


def test_heat_map_colours_are_matplotlibs_own_mapping():
    """The colours made at the grid's size and drawn as images of ``HEAT_BAND_ROWS`` rows (``skew.draw_bands``)
    give the pixels matplotlib's own colour mapping of the whole float grid gives (one ``imshow`` with the
    colour map, NaN blank)."""
    from streamtrace.report import charts as C
    plt = C.pyplot()
    rng = np.random.default_rng(3)
    grid = rng.exponential(100.0, (300, 120))
    grid[rng.random(grid.shape) < 0.3] = np.nan
    fig = C.skew_heatmap(HeatGrid.of((grid, np.arange(300), 1, 120)), "AllReduce TP")
    fig.canvas.draw()
    got = np.asarray(fig.canvas.buffer_rgba()).copy()
    ax = fig.axes[0]
    assert len(ax.images) == -(-300 // HEAT_BAND_ROWS) > 1
    for im in list(ax.images):
        im.remove()
    vmax = float(np.percentile(grid[np.isfinite(grid)], 99))
    ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="magma_r", vmin=0, vmax=vmax)
    fig.canvas.draw()
    assert (np.asarray(fig.canvas.buffer_rgba()) == got).all()
    plt.close(fig)


def test_one_heat_map_per_collective_kind_without_p2p(demo):
    """Each group-collective kind gets its own grid, whose values are exactly the arrival delays
    (us) of that kind's members; no p2p instance is in any of them, so millisecond pipeline waits
    do not set the colour scale of the microsecond TP/DP skews."""
    c = read_table(demo / "agg" / "collectives.parquet")
    m = read_table(demo / "agg" / "collectives_ranks.parquet")
    grids = kind_grids(c, m)
    assert set(grids) == {("AllReduce", "TP"), ("AllGather", "DP"), ("ReduceScatter", "DP")}
    for (coll, dim), (grid, ranks, per, n) in grids.items():
        sel = (c["collective"] == coll) & (c["parallel_dim"] == dim)
        assert n == int(sel.sum())
        mine = np.isin(m["instance"], np.flatnonzero(sel))
        assert np.nanmax(grid) == pytest.approx(m["arrival_ns"][mine].max() / 1e3)
        assert sorted(ranks.tolist()) == sorted(set(m["rank"][mine].tolist()))
    p2p = np.isin(m["instance"], np.flatnonzero(c["collective"] == "SendRecv"))
    assert m["arrival_ns"][p2p].max() > max(np.nanmax(g[0]) for g in grids.values()) * 1e3


def test_no_chart_without_content(tmp_path):
    """One rank alone: its collectives are "matched" on that rank only, so there is no bandwidth
    between ranks and no arrival skew to show: no collectives chart; what is written has content."""
    generate_job(tmp_path / "traces", SynthSpec(world_size=4, tp=2, pp=2))
    one = sorted((tmp_path / "traces").rglob("rank_0000_*.json"))
    analyze(one, tmp_path / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp_path / "an"], tmp_path / "agg", AggregateOptions(jobs=1))
    c = read_table(tmp_path / "agg" / "collectives.parquet")
    assert len(c["instance"]) and (c["n_ranks"] == 1).all()
    files = render_all(tmp_path / "agg", tmp_path / "charts", opt=ChartOptions(jobs=1))
    names = {p.name for p in files}
    assert "ranks_overview_iter10.png" in names and "rank_0_timeline_iter10.png" in names
    assert not [n for n in names if n.startswith(("collectives_", "p2p_"))]
    for p in files:
        _not_blank(p)


def test_empty_inputs_give_no_figure():
    from streamtrace.report import charts as C
    ranks = np.arange(4)
    assert HeatGrid.of((np.zeros((4, 10)), ranks, 1, 10)) is None                              # all arrived together
    assert C.skew_heatmap(None, "AllReduce TP") is None
    assert HeatGrid.of((np.full((4, 10), np.nan), ranks, 1, 10)) is None
    zeros = {k: np.zeros(2, np.int64) for k in ("recv_wait_ns", "send_wait_ns", "time_ns")}
    assert C.p2p_chart({"src_stage": np.asarray([0, 1]), "dst_stage": np.asarray([1, 0]), **zeros}) is None
    coll = {"complete": np.asarray([True]), "busbw_gbps": np.asarray([50.0]), "msg_bytes": np.asarray([1 << 20]),
            "n_ranks": np.asarray([1]), "collective": np.asarray(["AllReduce"], object),
            "parallel_dim": np.asarray(["TP"], object)}
    assert C.busbw_chart({"collectives": coll}) is None                                   # one-rank "instance"


def test_bus_bandwidth_legend_hides_no_point():
    """Points everywhere on the axes (a corner the legend would pick as "best" holds some too): the
    legend lies beside the axes, over none of the drawn points, and on the canvas (what is drawn does not
    reach its edge: ``save`` draws the chart once, not again on a grown canvas)."""
    from streamtrace.report import charts as C
    rng = np.random.default_rng(5)
    n = 4000
    coll = {"complete": np.ones(n, bool), "busbw_gbps": 10 ** rng.uniform(0, 2, n),
            "msg_bytes": (10 ** rng.uniform(3, 8, n)).astype(np.int64), "n_ranks": np.full(n, 4),
            "collective": np.asarray(["AllReduce", "AllGather"] * (n // 2), object),
            "parallel_dim": np.asarray(["TP", "DP"] * (n // 2), object)}
    fig = C.busbw_chart({"collectives": coll})
    fig.set_dpi(C.DPI)
    fig.canvas.draw()
    assert C._drawn_box(fig) is not None
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    xy = ax.transData.transform(np.c_[coll["msg_bytes"], coll["busbw_gbps"]])
    assert len(ax.get_legend().get_texts()) == 2
    assert not ((xy[:, 0] >= legend.x0) & (xy[:, 0] <= legend.x1) & (xy[:, 1] >= legend.y0)
                & (xy[:, 1] <= legend.y1)).any()
    C.pyplot().close(fig)


def test_alike_is_five_percent_of_the_axis():
    from streamtrace.report.render import ALIKE_FRACTION, alike
    assert ALIKE_FRACTION == 0.05
    a = (("x",), np.asarray([0.0, 0.5, 1.0]))
    assert alike(a, (("x",), np.asarray([0.049, 0.5, 0.96])))
    assert not alike(a, (("x",), np.asarray([0.05, 0.5, 1.0])))          # 5 % of the axis is worth seeing
    assert not alike(a, (("y",), np.asarray([0.0, 0.5, 1.0])))           # other bars or rows
    assert not alike(a, (("x",), np.asarray([0.0, 0.5])))


def test_alike_steps_get_one_chart_and_a_different_one_its_own(tmp_path):
    """Two ProfilerSteps whose overview bars differ by 2 % (step 11 := step 10 x 1.02) draw one
    chart naming the second step; x 2 (a difference anyone sees) gives the second its own."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from streamtrace.report.render import load, plan
    generate_job(tmp_path / "traces", SynthSpec(world_size=4, tp=2, pp=2, steps=2))
    analyze([tmp_path / "traces"], tmp_path / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp_path / "an"], tmp_path / "agg", AggregateOptions(jobs=1))
    path = tmp_path / "agg" / "ranks.parquet"
    orig = pq.read_table(path)
    step = orig["step"].to_numpy()
    assert sorted(set(step.tolist())) == [10, 11]

    def overview_stems(factor):
        t = orig
        for k in ("compute_only_ns", "overlap_ns", "exposed_comm_ns", "idle_ns"):
            col = t[k].to_numpy()
            new = col.copy()
            new[step == 11] = (col[step == 10] * factor).astype(np.int64)
            t = t.set_column(t.schema.get_field_index(k), k, pa.array(new))
        pq.write_table(t, path)
        return [(x.stem, x.also) for x in plan(load(tmp_path / "agg"), tmp_path / "agg", ChartOptions())
                if x.fn == "ranks_overview"]

    assert overview_stems(1.02) == [("ranks_overview_iter10_step10", ["iteration 10 (ProfilerStep#11)"])]
    assert [s for s, _ in overview_stems(2.0)] == ["ranks_overview_iter10_step10", "ranks_overview_iter10_step11"]


def test_overview_of_many_ranks_is_a_sorted_distribution_with_outliers_named():
    """300 ranks: no bar per rank but stacked areas over the ranks sorted by time lost (exposed comm
    + idle), the five ranks that lost least and most named."""
    from streamtrace.report import charts as C
    rng = np.random.default_rng(1)
    n = 300
    ranks = rng.permutation(n)
    cols = {"compute_only_ns": rng.integers(5_000_000, 6_000_000, n), "overlap_ns": rng.integers(0, 100_000, n),
            "exposed_comm_ns": rng.integers(100_000, 1_000_000, n), "idle_ns": rng.integers(0, 200_000, n)}
    cols["idle_ns"][ranks == 17] = 9_000_000                      # the straggler everyone waits for... or waits
    data = {"ranks": {"rank": ranks, "iteration": np.full(n, 4), "step": np.full(n, 3),
                      "source": np.asarray(["gpu"] * n, object), **cols}}
    fig = C.ranks_overview(data, (4, 3))
    ax = fig.axes[0]
    assert len(ax.patches) == 0                                    # no bars
    import re
    least, most = ([int(x) for x in re.findall(r"r(\d+) \(", t.get_text())] for t in ax.texts)
    lost = cols["exposed_comm_ns"] + cols["idle_ns"]
    order = ranks[np.argsort(lost, kind="stable")]
    assert least == order[:5].tolist() and most == order[::-1][:5].tolist() and most[0] == 17
    C.pyplot().close(fig)


def test_chart_format_option():
    from streamtrace.cli.common import parse_formats
    from streamtrace.runtime.errors import UsageError
    assert parse_formats("png") == ("png",) and parse_formats("SVG, png") == ("svg", "png")
    for bad in ("jpg", "", "png,pdf"):
        with pytest.raises(UsageError):
            parse_formats(bad)


def test_skew_grids_from_batches_equal_each_kinds_grid_at_once(demo):
    """The heat maps' grids built from members in batches of any size (as the report reads a
    1,024-rank job's members) equal ``skew_grid`` of each kind's instances and members at once."""
    c = read_table(demo / "agg" / "collectives.parquet")
    m = read_table(demo / "agg" / "collectives_ranks.parquet")
    want = {}
    for coll, dim in sorted(set(zip(c["collective"].tolist(), c["parallel_dim"].tolist()))):
        sel = np.flatnonzero((c["collective"] == coll) & (c["parallel_dim"] == dim) & (c["n_ranks"] >= 2))
        if coll in ("Send", "Recv", "SendRecv") or not len(sel):
            continue
        renum = {int(i): j for j, i in enumerate(sel.tolist())}
        keep = np.asarray([int(i) in renum for i in m["instance"]])
        sub = {"instance": np.asarray([renum[int(i)] for i in m["instance"][keep]], np.int64),
               "rank": m["rank"][keep], "arrival_ns": m["arrival_ns"][keep]}
        want[(coll, dim)] = skew_grid({"first_start_ns": c["first_start_ns"][sel]}, sub)
    assert want
    n = len(m["rank"])
    perm = np.random.default_rng(7).permutation(n)
    top = int(m["rank"].max())
    for batch, rows in ((1, 0), (7, top + 1), (n, top + 1), (n, top + 9), (7, 2)):   # rows: allocated at once
        g = SkewGrids(c, rows)
        for a in range(0, n, batch):
            rows = perm[a:a + batch]
            g.add({k: m[k][rows] for k in ("instance", "rank", "arrival_ns")})
        got = g.grids()
        assert sorted(got) == sorted(want)
        for k, (grid, ranks, per, cnt) in want.items():
            assert np.array_equal(got[k][1], ranks) and got[k][2:] == (per, cnt)
            assert np.array_equal(got[k][0], grid, equal_nan=True)


def test_ranks_on_the_critical_path_are_never_folded(demo):
    """Issue 47: a rank on the critical path (``critical_path_summary.parquet``, ``what == "slack"``,
    ``on_path``) gets its own per-rank charts even when its picture is alike another rank's."""
    files = {p.name for p in render_all(demo / "agg", demo / "cp", opt=ChartOptions(jobs=1))}
    cp = read_table(demo / "agg" / "critical_path_summary.parquet")
    on = {int(r) for r, w, o in zip(cp["rank"], cp["what"], cp["on_path"]) if w == "slack" and o}
    assert on
    for r in on:
        assert f"rank_{r}_timeline_iter10.png" in files and f"rank_{r}_microbatches_iter10.png" in files, r


def test_a_rank_whose_idle_stands_apart_is_never_folded():
    """Idle 223 ms against 7-20 ms on the others (issue 47's A100 job): apart; 7 ms vs 20 ms: the crowd."""
    from streamtrace.report.render import RankApart
    idle = {0: 223, 1: 7, 2: 9, 3: 20, 4: 8, 5: 11, 6: 10, 7: 14}
    ranks = {"iteration": np.full(8, 3), "step": np.full(8, 3), "rank": np.arange(8),
             "idle_ns": np.asarray([idle[r] * 10**6 for r in range(8)]), "wall_ns": np.full(8, 4_500 * 10**6)}
    apart = RankApart(ranks, {})
    assert apart((3, 3), 0, 1) and apart((3, 3), 1, 0)
    assert not apart((3, 3), 3, 1) and not apart((3, 3), 7, 2)


def test_gantt_and_idle_axes_hold_every_bar(demo):
    """The PP group's and replica's axes reach the last window's end (stage 0's optimizer, its
    communication included); the idle breakdown's longest bar ends inside the frame."""
    from streamtrace.report import charts as C
    data = load(demo / "agg")
    rp = data["rank_phase"]
    topo = data["meta"]["topology"]
    for fn, g in ((C.pp_gantt, topo["pp"][0]), (C.replica_view, topo["replicas"][0])):
        fig = fn(data, 0, (10, 10))
        sel = np.isin(rp["rank"], g) & np.isin(rp["phase"], ("forward", "backward", "recompute", "optimizer"))
        lo = min(int(x) for x in rp["compute_start_ns"][sel])
        last = max(int(x) for x in rp["end_ns"][sel]) - lo
        assert fig.axes[0].get_xlim()[1] * 1e6 >= last, (fn.__name__, fig.axes[0].get_xlim(), last)
    import streamtrace.report.explain as E
    ax = _idle_figure(E.build_explain(demo / "agg"), demo / "idle").axes[0]
    ends = [p.get_x() + p.get_width() for p in ax.patches]      # bars as rectangles, or as one collection
    ends += [float(path.vertices[:, 0].max()) for c in ax.collections for path in c.get_paths()]
    longest = max(ends)
    assert longest > 0 and ax.get_xlim()[1] > longest * 1.02


def test_alike_note_names_ranks_as_ranges_and_steps_with_the_same_ranks_together():
    """Issue 48's A100 job: rank 0's step-1011 chart stood for ranks 1-7 of its step and ranks 0-7 of
    steps 1012-1014, written out one "rank k, ProfilerStep#n" at a time (a 72-inch-wide PNG)."""
    from streamtrace.report.render import MAX_NOTE_LINES, alike_note
    alike = [("rank", r, None) for r in range(1, 8)]
    alike += [("rank", r, f"ProfilerStep#{s}") for s in (1012, 1013, 1014) for r in range(8)]
    assert alike_note("rank 0, ProfilerStep#1011: time", alike, 200) == (
        "rank 0, ProfilerStep#1011: time  (alike: ranks 1-7; ProfilerStep#1012, ProfilerStep#1013, "
        "ProfilerStep#1014: ranks 0-7)")
    steps_only = [(None, None, "iteration 10 (ProfilerStep#11)")]
    assert alike_note("overview", steps_only, 100) == "overview  (alike: iteration 10 (ProfilerStep#11))"
    gaps = [("PP group", g, None) for g in (1, 2, 5)] + [("PP group", 3, "ProfilerStep#4")]
    assert alike_note("t", gaps, 100) == "t  (alike: PP groups 1-2, 5; ProfilerStep#4: PP group 3)"
    many = [("rank", r, f"ProfilerStep#{s}") for s in range(100, 160) for r in range(2 * (s % 2), 8, 2)]
    text = alike_note("a title", many, 80)
    lines = text.split("\n")
    assert all(len(x) <= 80 for x in lines) and len(lines) <= MAX_NOTE_LINES + 1 and text.endswith("...)")


def test_the_crop_reads_the_drawn_pixels_and_measures_when_they_reach_the_edge():
    """``_drawn_box``: a black square drawn at known pixels is the box; a text running off the
    canvas gives None (the artists are measured instead, and the canvas grown to hold them)."""
    from streamtrace.report.charts import DPI, _drawn_box, pyplot
    plt = pyplot()
    fig = plt.figure(figsize=(4, 3), dpi=DPI)
    fig.patches.append(__import__("matplotlib.patches").patches.Rectangle(
        (1.0, 0.5), 1.5, 1.0, transform=fig.dpi_scale_trans, color="black", linewidth=0, antialiased=False,
        figure=fig))
    fig.canvas.draw()
    box = _drawn_box(fig)
    assert box is not None and np.allclose(box.bounds, (1.0, 0.5, 1.5, 1.0), atol=1.5 / DPI), box.bounds
    fig.text(0.9, 0.5, "a long label that runs off the canvas", fontsize=20)
    fig.canvas.draw()
    assert _drawn_box(fig) is None
    plt.close(fig)


@pytest.mark.parametrize("alpha", [1.0, 0.0])
def test_the_png_holds_the_drawn_pixels_rgb_when_opaque(alpha):
    """``_crop_png``: the PNG decodes to the canvas' pixels inside the box (Pillow, independent of the
    encoder's settings); RGB when the figure is opaque, RGBA when it is not (a transparent face)."""
    import io

    from PIL import Image
    from matplotlib.transforms import Bbox
    from streamtrace.report.charts import DPI, _crop_png, pyplot
    plt = pyplot()
    fig = plt.figure(figsize=(4, 3), dpi=DPI)
    fig.patch.set_alpha(alpha)
    ax = fig.add_subplot()
    ax.patch.set_alpha(alpha)
    ax.plot([0, 1, 2], [3, 1, 2], color="tab:blue")
    fig.canvas.draw()
    want = np.asarray(fig.canvas.buffer_rgba())[300 - 250:300 - 50, 100:350]    # rows from the top
    buf = io.BytesIO()
    _crop_png(fig, Bbox([[1.0, 0.5], [3.5, 2.5]]), buf)
    img = Image.open(io.BytesIO(buf.getvalue()))
    assert img.mode == ("RGB" if alpha == 1.0 else "RGBA")
    got = np.asarray(img.convert("RGBA"))
    assert got.shape == want.shape and (got == want).all()
    plt.close(fig)


def test_no_chart_is_wider_than_the_widest_figure(tmp_path):
    """The demo's job over four steps (every rank's pictures alike across steps): every chart fits
    the widest figure the charts make (16 in) plus the crop's pad: a title with a long alike note
    is wrapped, not drawn past the canvas and the canvas grown to it (before: up to 4,022 px)."""
    import matplotlib.image as mpimg
    from streamtrace.report.charts import DPI
    generate_job(tmp_path / "traces", SynthSpec(steps=4))
    analyze([tmp_path / "traces"], tmp_path / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp_path / "an"], tmp_path / "agg", AggregateOptions(jobs=1))
    files = render_all(tmp_path / "agg", tmp_path / "charts", opt=ChartOptions(jobs=1))
    assert len(files) > 10
    for p in files:
        assert mpimg.imread(p).shape[1] <= 16 * DPI + 0.2 * DPI + 2, p


@pytest.mark.parametrize("lo, hi, minors", [(1e3, 1e9, {2, 5}), (3.0, 40.0, {3, 4, 6, 7, 8, 9})])
def test_log_axes_minor_ticks(lo, hi, minors):
    # over many decades the unlabelled minor ticks are 2x and 5x only (2x-9x: eight tick objects a
    # decade to build and draw); a short axis keeps matplotlib's (its 1x, 2x, 5x ticks are labelled)
    from streamtrace.report.axes import log_ticks
    from streamtrace.report.charts import pyplot
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    log_ticks(ax.xaxis)
    locs = [x for x in ax.xaxis.get_minorticklocs() if lo <= x <= hi]
    got = {round(x / 10 ** np.floor(np.log10(x) + 1e-9)) for x in locs}
    plt.close(fig)
    assert locs and got <= minors and (got == minors or hi / lo < 100)


def test_idle_chart_and_table_of_many_devices_show_the_64_most_idle(tmp_path):
    """1,000 devices (issue 48: 4,096 ranks drew a 90,000-pixel-tall PNG, the report's peak memory):
    the chart and the table show the 64 with the most idle time, in rank order, the rest counted."""
    import streamtrace.report.explain as E
    rng = np.random.default_rng(7)
    idle_ms = rng.permutation(1000) + 1                       # distinct: the top 64 is one set
    rows = [{"rank": r, "device": 0, "steps": 2, "span_ns": 10**9, "busy_ns": 10**9 - int(i) * 10**6,
             "idle_ns": int(i) * 10**6, "host_wait_ns": int(i) * 10**6, "kernel_wait_ns": 0, "other_ns": 0}
            for r, i in enumerate(idle_ms)]
    want = sorted(r for r, i in enumerate(idle_ms) if i > 1000 - 64)
    ex = {"idle": {"devices": rows, "total": {c: 1 for c in ("idle_ns", "host_wait_ns", "kernel_wait_ns", "other_ns")},
                   "streams": [], "from": "idle_breakdown.parquet"}}
    fig = _idle_figure(ex, tmp_path / "idle")
    assert fig.get_figheight() < 0.22 * 64 + 3
    bars = [p for c in fig.axes[0].collections for p in c.get_paths()]
    assert len(bars) == 3 * 64                                 # host wait, kernel wait, other per device
    assert "the 64 of 1,000 devices" in fig.axes[0].get_title()
    bottom, top = fig.axes[0].get_ylim()                       # no empty rows around the bars
    lo = min(float(p.vertices[:, 1].min()) for p in bars)
    hi = max(float(p.vertices[:, 1].max()) for p in bars)
    assert 0 < lo - bottom < 0.5 and 0 < top - hi < 0.5
    md = "\n".join(E.explain_markdown(ex))
    table = [ln for ln in md.splitlines() if ln.startswith("| ") and ln.split("|")[1].strip().isdigit()]
    assert [int(ln.split("|")[1]) for ln in table] == want
    assert "| ... 936 more |" in md
    E.idle_chart(ex, tmp_path / "idle", ("png",))             # drawn for real: a bounded picture
    import matplotlib.image as mpimg
    assert mpimg.imread(tmp_path / "idle.png").shape[0] < 100 * (0.22 * 64 + 3)


def _idle_figure(ex, stem):
    """The figure ``explain.idle_chart`` draws for ``ex``, before it is saved (and closed)."""
    import streamtrace.report.explain as E
    seen = []
    orig = E.save
    E.save = lambda fig, stem, formats: seen.append(fig) or []
    try:
        E.idle_chart(ex, stem, ("png",))
    finally:
        E.save = orig
    return seen[0]


def test_heat_maps_made_one_kind_at_a_time_are_the_whole_grids_binned(demo):
    """``render.skew_heat`` (one read of the members per kind, one unbinned grid held at a time) gives for
    each kind, in ``kinds_of`` order, the heat map of that kind's grid made from every member at once:
    its rows binned as ``row_bins`` bins them and the colour scale's top the 99th percentile (numpy's) of
    the unbinned grid's delays, in ns."""
    from streamtrace.report.render import skew_heat
    c = read_table(demo / "agg" / "collectives.parquet")
    m = read_table(demo / "agg" / "collectives_ranks.parquet")
    whole = kind_grids(c, m)
    got = list(skew_heat(demo / "agg", c))
    assert [k for k, _ in got] == sorted(whole)
    for key, heat in got:
        grid, ranks, per, n = whole[key]
        want, first, per_row = row_bins(grid, ranks)
        assert np.array_equal(heat.grid, want, equal_nan=True) and heat.first.tolist() == first.tolist()
        assert (heat.per_row, heat.per_column, heat.n) == (per_row, per, n)
        assert heat.vmax_ns == pytest.approx(max(np.percentile(grid[np.isfinite(grid)], 99), 1e-3) * 1e3, rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_heat_grid_bins_rows_as_row_bins_and_scales_to_the_unbinned_99th_percentile(rows, cols, seed):
    rng = np.random.default_rng(seed)
    grid = np.round(rng.exponential(10.0, (rows, cols)), 1)
    grid[rng.random((rows, cols)) < 0.5] = np.nan
    ranks = np.sort(rng.choice(10 * rows, rows, replace=False))
    heat = HeatGrid.of((grid, ranks, 3, 7))
    finite = [v for v in grid.ravel().tolist() if v == v]
    if not finite or max(finite) <= 0:
        assert heat is None
        return
    want, first, per_row = row_bins(grid, ranks)
    assert np.array_equal(heat.grid, want, equal_nan=True) and heat.first.tolist() == first.tolist()
    assert (heat.per_row, heat.per_column, heat.n) == (per_row, 3, 7)
    finite.sort()                                       # numpy's default percentile: linear between ranks
    pos = 0.99 * (len(finite) - 1)
    lo = int(pos)
    q = finite[lo] + (finite[min(lo + 1, len(finite) - 1)] - finite[lo]) * (pos - lo)
    assert heat.vmax_ns == pytest.approx(max(q, 1e-3) * 1e3, rel=1e-9)
