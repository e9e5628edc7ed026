"""Charts: every chart renders (PNG and SVG) from the demo trace set, and the helpers that keep them
legible at 64+ ranks and thousands of kernels behave."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest

from streamtrace.job import AggregateOptions, aggregate
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.events.dataset import read_table
from streamtrace.report.charts import MAX_COLUMNS, PX_WIDTH, _fits, kind_grids, merge_close, render_all, skew_grid
from streamtrace.trace.synth import SynthSpec, generate_job


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("charts")
    generate_job(tmp / "traces", SynthSpec())          # the demo's job: TP2 x DP2 x PP2, 8 ranks
    analyze([tmp / "traces"], tmp / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp / "an"], tmp / "agg", AggregateOptions())
    return tmp


def test_every_chart_renders_from_the_demo(demo):
    files = render_all(demo / "agg", demo / "charts", ranks=[0, 5])
    names = sorted(p.name for p in files)
    want = ["ranks_overview_iter10", "rank_0_timeline_iter10", "rank_0_microbatches_iter10", "rank_5_timeline_iter10",
            "rank_5_microbatches_iter10", "collectives_busbw", "collectives_skew_AllGather_DP",
            "collectives_skew_AllReduce_TP", "collectives_skew_ReduceScatter_DP", "p2p_stage_pairs"] + \
        [f"pp_group_{g}_iter10" for g in range(4)] + [f"replica_{r}_iter10" for r in range(2)]
    assert names == sorted(f"{w}.{ext}" for w in want for ext in ("png", "svg"))
    import matplotlib.image as mpimg
    for p in files:
        assert p.stat().st_size > 5_000, p
        if p.suffix == ".png":
            img = mpimg.imread(p)
            assert img.ndim == 3 and img.shape[0] > 150 and img.shape[1] > 400
            assert img[..., :3].std() > 0.05          # not a blank canvas
        else:
            assert ET.parse(p).getroot().tag.endswith("svg")


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
