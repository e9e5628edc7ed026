"""aggregate's explaining tables against their definitions: the idle breakdown (HolisticTraceAnalysis'
``get_idle_time_breakdown`` rule, running maximum of ends) on a hand-built stream, random streams, a
synthetic job and the real traces in ../shared (a plain-Python loop over the analysed rows is the
reference; device idle equals analyze's summary.json); kernel_stats and launch_stats against numpy on
the raw rows; the report's sections and chart."""
from __future__ import annotations

import glob
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import streamtrace
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.aggregate.idle import breakdown
from streamtrace.synth.job import SynthSpec, generate_job

from support import REAL, need_shared, run_cli

T = 30      # threshold in the hand-built units (us)


def _hand():
    #         ts,  end, launch (None: no launch row)
    ev = [(0, 20, 0),            # first: no gap
          (30, 40, 25),          # launch 25 > prev end 20: host wait 10
          (45, 60, 10),          # gap 5 < 30: kernel wait 5
          (110, 120, 50),        # gap 50 >= 30: other 50
          (125, 130, None),      # no launch row, gap 5: kernel wait 5
          (210, 250, None),      # no launch row, gap 80: other 80
          (215, 230, 200),       # inside the previous: overlapped, no gap
          (255, 260, 240)]       # gap from the running max 250 (not 230): kernel wait 5
    return ev


def _arrays(ev, step=None):
    ts, end = np.array([e[0] for e in ev]), np.array([e[1] for e in ev])
    linked, lts = np.array([e[2] is not None for e in ev]), np.array([e[2] or 0 for e in ev])
    st = np.zeros(len(ev), np.int64) if step is None else np.asarray(step)
    return np.zeros(len(ev), np.int64), np.full(len(ev), 7), ts, end, st, linked, lts


def test_hand_built_stream():
    b = breakdown(*_arrays(_hand()), threshold_ns=T)
    row = {c: v[list(b["stream"]).index(7)] for c, v in b.items()}
    assert (row["host_wait_ns"], row["kernel_wait_ns"], row["other_ns"], row["idle_ns"]) == (10, 15, 130, 155)
    assert (row["host_wait_gaps"], row["kernel_wait_gaps"], row["other_gaps"]) == (1, 3, 2)
    assert (row["no_launch_gaps"], row["no_launch_ns"], row["overlapped_kernels"]) == (2, 85, 1)
    assert row["span_ns"] == 260 and row["busy_ns"] == 105 and row["span_ns"] - row["busy_ns"] == 155
    assert row["max_gap_ns"] == 80 and row["host_wait_pct"] == pytest.approx(100 * 10 / 155)


def test_boundaries():
    # gap == threshold is other, threshold - 1 kernel wait; a launch starting exactly at the previous end is
    # not host wait (HTA: ts_runtime > prev_end)
    ev = [(0, 10, 0), (10 + T, 50, 5), (50 + T - 1, 100, 5), (110, 120, 100)]
    b = breakdown(*_arrays(ev), threshold_ns=T)
    i = list(b["stream"]).index(7)
    assert (b["other_ns"][i], b["kernel_wait_ns"][i], b["host_wait_ns"][i]) == (T, T - 1 + 10, 0)
    # the gap belongs to the step of the event that ends it; cross_step_ns counts gaps across steps
    b = breakdown(*_arrays([(0, 10, 0), (15, 20, 12), (40, 50, 14)], step=[1, 1, 2]), threshold_ns=T)
    rows = {(s, st): (h, k, c) for s, st, h, k, c in zip(b["stream"], b["step"], b["host_wait_ns"],
                                                         b["kernel_wait_ns"], b["cross_step_ns"])}
    assert rows[(7, 1)] == (5, 0, 0) and rows[(7, 2)] == (0, 20, 20)


def _reference(rows, threshold):
    """Plain-Python idle breakdown: ``rows`` of (device, stream, step, ts, end, launch_ts or None) -> {(device,
    stream, step): [host, kernel, other, overlapped, events]} per stream and (stream -1) per device."""
    out = defaultdict(lambda: [0, 0, 0, 0, 0])
    for level in ("stream", "device"):
        by = defaultdict(list)
        for d, s, st, ts, end, lt in rows:
            by[(d, s if level == "stream" else -1)].append((ts, end, st, lt))
        for (d, s), evs in by.items():
            prev = None
            for ts, end, st, lt in sorted(evs, key=lambda e: (e[0], e[1])):
                acc = out[(d, s, st)]
                acc[4] += 1
                if prev is not None:
                    gap = ts - prev
                    if gap < 0:
                        acc[3] += 1
                    elif lt is not None and lt > prev:
                        acc[0] += gap
                    elif gap < threshold:
                        acc[1] += gap
                    else:
                        acc[2] += gap
                prev = end if prev is None else max(prev, end)
    return dict(out)


def test_random_streams_match_the_definition():
    rng = np.random.default_rng(7)
    for _ in range(30):
        n = int(rng.integers(1, 60))
        ts = np.sort(rng.integers(0, 2000, n))
        end = ts + rng.integers(0, 80, n)
        dev, stream, step = rng.integers(0, 2, n), rng.integers(7, 10, n), rng.integers(0, 3, n)
        linked = rng.random(n) < 0.7
        lts = ts - rng.integers(-40, 100, n)
        b = breakdown(dev, stream, ts, end, step, linked, lts, threshold_ns=T)
        got = {(d, s, st): [h, k, o, ov, c] for d, s, st, h, k, o, ov, c in zip(
            *(b[x].tolist() for x in ("device", "stream", "step", "host_wait_ns", "kernel_wait_ns", "other_ns",
                                      "overlapped_kernels", "kernels")))}
        ref = _reference([(int(d), int(s), int(st), int(a), int(e), int(lt) if k else None) for d, s, st, a, e, lt, k
                          in zip(dev, stream, step, ts, end, lts, linked)], T)
        assert got == ref


def _check_analysis(an, agg, threshold=30_000):
    """idle_breakdown of the aggregate ``agg`` of analysis ``an`` against the reference on the analysed rows
    (launch rows joined by correlation) and the device idle of summary.json."""
    summ = json.loads((an / "summary.json").read_text())
    ib = streamtrace.load(agg).table("idle_breakdown").to_pylist()
    got = defaultdict(lambda: [0, 0, 0, 0, 0])
    for r in ib:
        g = got[(r["rank"], r["device"], r["stream"], r["step"])]
        for i, c in enumerate(("host_wait_ns", "kernel_wait_ns", "other_ns", "overlapped_kernels", "kernels")):
            g[i] += r[c]
    for rk in summ["ranks"]:
        part = f"rank={rk['rank']}"
        k = pq.ParquetDataset(sorted(glob.glob(f"{an}/kernels/**/{part}/*.parquet", recursive=True))).read()
        ofiles = sorted(glob.glob(f"{an}/ops/**/{part}/*.parquet", recursive=True))
        launch = {}
        if ofiles:
            o = pq.ParquetDataset(ofiles).read(columns=["correlation", "ts_ns"]).to_pylist()
            for x in o:
                if x["correlation"] >= 0:
                    launch.setdefault(x["correlation"], x["ts_ns"])
        rows = [(r["device"], r["stream"], r["step"], r["ts_ns"], r["end_ns"], launch.get(r["correlation"]))
                for r in k.select(["device", "stream", "step", "ts_ns", "end_ns", "correlation"]).to_pylist()]
        ref = _reference(rows, threshold)
        mine = {key[1:]: v for key, v in got.items() if key[0] == rk["rank"]}
        assert mine == ref, rk["rank"]
        for dev, m in rk["devices"].items():
            idle = sum(r["idle_ns"] for r in ib if r["rank"] == rk["rank"] and r["device"] == int(dev)
                       and r["stream"] == -1)
            assert idle == round(m["idle_us"] * 1000), (rk["rank"], dev)
    return ib


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("explain")
    generate_job(tmp / "tr", SynthSpec(world_size=4, tp=2, pp=2, steps=2, microbatches=2, seed=5))
    analyze([tmp / "tr"], tmp / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp / "an"], tmp / "agg", AggregateOptions(jobs=1))
    return tmp


def test_synthetic_job_idle_matches_definition_and_summary(synth):
    ib = _check_analysis(synth / "an", synth / "agg")
    assert any(r["host_wait_ns"] > 0 for r in ib) and any(r["other_ns"] > 0 for r in ib)


def test_kernel_and_launch_stats_against_numpy(synth):
    out = streamtrace.load(synth / "agg")
    ks = out.table("kernel_stats").to_pylist()
    k = pq.ParquetDataset(sorted(glob.glob(f"{synth}/an/kernels/**/*.parquet", recursive=True))).read().to_pandas()
    for r in ks[:: max(1, len(ks) // 40)]:
        d = k[(k["rank"] == r["rank"]) & (k["step"] == r["step"]) & (k["name"] == r["name"])]["dur_ns"].to_numpy()
        assert r["count"] == len(d) and r["total_ns"] == d.sum() and r["max_ns"] == d.max() and r["min_ns"] == d.min()
        assert r["p50_ns"] == pytest.approx(np.percentile(d, 50)) and r["p95_ns"] == pytest.approx(np.percentile(d, 95))
        assert r["std_ns"] == pytest.approx(np.std(d, ddof=1) if len(d) > 1 else 0.0)
    ls = [r for r in out.table("launch_stats").to_pylist() if r["kind"] == "all"]
    o = pq.ParquetDataset(sorted(glob.glob(f"{synth}/an/ops/**/*.parquet", recursive=True))).read().to_pandas()
    for r in ls:
        kk = k[(k["rank"] == r["rank"]) & (k["step"] == r["step"])]
        oo = o[(o["rank"] == r["rank"]) & (o["correlation"] >= 0)].set_index("correlation")
        lr = oo[["ts_ns", "dur_ns"]].rename(columns={"ts_ns": "ts_ns_l", "dur_ns": "dur_ns_l"})
        j = kk.merge(lr, left_on="correlation", right_index=True, how="inner")
        delay = np.maximum(0, j["ts_ns"] - j["ts_ns_l"] - j["dur_ns_l"]).to_numpy()
        assert r["linked"] == len(j) == len(kk)
        assert r["launch_delay_p95_ns"] == pytest.approx(np.percentile(delay, 95))
        assert r["launch_overhead_max_ns"] == j["dur_ns_l"].max()
        assert r["launch_bound_count"] == int((j["dur_ns"] < j["dur_ns_l"]).sum())


def test_report_shows_the_sections_and_the_idle_chart(synth):
    p = run_cli("report", synth / "agg", "-q")
    assert p.returncode == 0, p.stderr
    md = next(synth.joinpath("agg").glob("*.md")).read_text()
    for h in ("## Kernel statistics", "## CPU ops by self time", "## Kernel launches", "## GPU idle-time breakdown",
              "![idle_breakdown](charts/idle_breakdown.png)"):
        assert h in md
    rep = json.loads((synth / "agg" / "report.json").read_text())
    ex = rep["explain"]
    tot = ex["idle"]["total"]
    assert tot["idle_ns"] == tot["host_wait_ns"] + tot["kernel_wait_ns"] + tot["other_ns"]
    assert ex["kernels"]["rows"][0]["total_ns"] >= ex["kernels"]["rows"][-1]["total_ns"]
    assert (synth / "agg" / "charts" / "idle_breakdown.png").is_file()


@pytest.mark.parametrize("trace", ["a100_resnet_ddp_rank0_of2", "h100_qwen_inference", "mi250_rocm_minitoy",
                                   "v100_float_ns_rank0"])
def test_real_traces_idle_matches_definition_and_summary(trace, tmp_path):
    need_shared()
    analyze([REAL / f"{trace}.json.gz"], tmp_path / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp_path / "an"], tmp_path / "agg", AggregateOptions(jobs=1, consecutive_kernel_delay_ns=20_000))
    ib = _check_analysis(tmp_path / "an", tmp_path / "agg", threshold=20_000)
    assert sum(r["idle_ns"] for r in ib) > 0


def test_packed_tables_write_the_same_tables_as_the_columns(synth, tmp_path):
    """What aggregate's parent holds per rank (``packed``: each table pickled, a third of the
    columns' memory; ``spill``: the tables in a file, their offsets held) writes the tables the
    columns themselves write, byte for byte in the CSV files."""
    from streamtrace.aggregate.explain import packed, part_tables, spill, write_tables
    from streamtrace.aggregate.run import _open_job
    job, _ = _open_job([synth / "an"], AggregateOptions(jobs=1))
    parts = [part_tables(job, p) for p in job.parts]
    assert all(parts)
    (tmp_path / "spill").mkdir()
    spilled = [spill(tmp_path / "spill", t) for t in parts]
    parts[1] = {k: v for k, v in parts[1].items() if k != "op_stats"}        # a part without one table
    spilled[1] = spill(tmp_path / "spill", parts[1])        # (a later record of the same file)
    assert all(isinstance(x, tuple) and len(x) == 3 and Path(x[0]).stat().st_size > x[1] for x in spilled)
    out = {}
    for how, given in (("cols", parts), ("packed", [packed(t) for t in parts]), ("spilled", spilled)):
        files = write_tables(tmp_path / how, given)
        out[how] = ({p.name: pq.read_table(p) for p in files if p.suffix == ".parquet"},
                    {p.name: p.read_bytes() for p in files if p.suffix == ".csv"})
    a, csv = out["cols"]
    assert len(a) == 4 and all(a[k].num_rows for k in a)
    for how in ("packed", "spilled"):
        b, csv_b = out[how]
        assert sorted(a) == sorted(b) and all(a[k].equals(b[k]) for k in a), how
        assert csv == csv_b, how


def _column_parts():
    """Random parts of one table column: text (str / None, some parts all None), ints, floats with NaN,
    ints with None (an object column), mixed per part as the workers' rows can be."""
    from hypothesis import strategies as st
    text = st.lists(st.one_of(st.none(), st.text(max_size=4)), max_size=5).map(lambda x: np.asarray(x, object))
    ints = st.lists(st.integers(-5, 5), max_size=5).map(lambda x: np.asarray(x, np.int64))
    floats = st.lists(st.sampled_from([0.5, float("nan"), 2.0]), max_size=5).map(lambda x: np.asarray(x, float))
    maybe = st.lists(st.one_of(st.none(), st.integers(0, 3)), max_size=5).map(
        lambda x: np.asarray(x, object) if any(v is None for v in x) else np.asarray(x, np.int64))
    return st.one_of(st.lists(text, min_size=1, max_size=4), st.lists(st.one_of(ints, floats, maybe), min_size=1,
                                                                        max_size=4))


def test_parts_joined_as_arrow_text_write_what_the_joined_columns_write(tmp_path):
    """``write_tables``' per-part text columns (``_compact``, ``_joined``) against what it did before: the
    parts' numpy arrays concatenated, sorted, NaN as null, then ``events.dataset.to_arrow`` (hypothesis)."""
    from hypothesis import given, settings
    from streamtrace.aggregate.explain import _compact, _joined, _nulls
    from streamtrace.events.dataset import to_arrow

    @settings(max_examples=300, deadline=None)
    @given(_column_parts())
    def check(parts):
        whole = np.concatenate(parts)
        o = np.arange(len(whole))[::-1].copy()
        want = to_arrow({"c": _nulls(whole[o])})
        col = _joined([_compact(p) for p in parts])
        got = to_arrow({"c": _nulls(col[o]) if isinstance(col, np.ndarray) else col.take(o)})
        nan = lambda t: [("nan" if v != v else v) for v in t.column(0).to_pylist()]  # noqa: E731 (NaN == NaN)
        assert got.schema == want.schema and nan(got) == nan(want)
    check()


def _plain_tables(parts, columns):
    """The definition of an explaining table: the parts' columns concatenated in part order, sorted by
    (iteration, step, rank, position), NaN as null, then ``events.dataset.to_arrow`` (no chunking)."""
    from streamtrace.aggregate.explain import _nulls
    from streamtrace.events.dataset import to_arrow
    have = [p["t"] for p in parts if "t" in p and len(p["t"]["rank"])]
    whole = {c: np.concatenate([h[c] for h in have]) for c in have[0]}
    o = np.lexsort((np.arange(len(whole["rank"])), whole["rank"], whole["step"], whole["iteration"]))
    return to_arrow({c: _nulls(whole[c][o]) for c in columns})


def _random_parts():
    """Parts of one table ``t``: each a rank of an iteration, its rows in steps 0-2 in any order, and
    three columns whose kind changes from part to part as the workers' rows can (text and None, ints,
    floats with NaN, ints or floats with None as an object column, bools)."""
    from hypothesis import strategies as st
    text = st.one_of(st.none(), st.text(max_size=3))
    cell = {"text": text, "int": st.integers(-3, 3), "float": st.sampled_from([0.5, float("nan"), -2.0, 1e-7]),
            "maybe_int": st.one_of(st.none(), st.integers(0, 3)), "maybe_float": st.one_of(st.none(), st.floats(-2, 2)),
            "bool": st.booleans()}
    families = st.sampled_from([("text",), ("int", "float", "maybe_int", "maybe_float", "bool"),
                                ("int", "maybe_int"), ("float", "maybe_float", "int"), ("text", "int", "maybe_int")])

    @st.composite
    def parts(draw):
        fams = [draw(families) for _ in range(3)]
        out = []
        for rank in range(draw(st.integers(1, 5))):
            n = draw(st.integers(0, 6))
            cols = {"iteration": np.full(n, draw(st.integers(0, 1)), np.int64),
                    "step": np.asarray(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), np.int64),
                    "rank": np.full(n, rank, np.int64)}
            for k, fam in enumerate(fams):
                kind = draw(st.sampled_from(fam))
                vals = draw(st.lists(cell[kind], min_size=n, max_size=n))
                if kind == "text" or None in vals:
                    cols[f"c{k}"] = np.asarray(vals, object)
                else:
                    typ = {"int": np.int64, "maybe_int": np.int64, "bool": bool}.get(kind, float)
                    cols[f"c{k}"] = np.asarray(vals, typ)
            out.append({"t": cols} if draw(st.booleans()) or n else {})
        return out
    return parts()


def test_streamed_tables_equal_the_plain_definition(tmp_path):
    """``write_tables`` (the parts spilled a step at a time, written ``ROW_GROUP_ROWS`` rows at a time,
    typed from the chunks' kinds) writes what the plain definition writes (``_plain_tables``): the
    Parquet table with its schema, and the CSV byte for byte; a table its chunks cannot type (text
    among numbers) fails as the plain definition does (hypothesis; chunks of one row group and of 2, made
    Arrow arrays a row, two, three or ``ARROW_ROWS`` rows at a time)."""
    import itertools
    from hypothesis import given, settings
    from streamtrace.aggregate import explain
    from streamtrace.events.dataset import write_table
    columns = {"t": ["iteration", "step", "rank", "c0", "c1", "c2"]}
    runs = itertools.count()

    @settings(max_examples=300, deadline=None)
    @given(_random_parts(), st_rows(), st_arrow_rows())
    def check(parts, rows, arrow_rows):
        if not any("t" in p and len(p["t"]["rank"]) for p in parts):
            return
        d = tmp_path / str(next(runs))
        for sub in ("spill", "got", "want"):
            (d / sub).mkdir(parents=True)
        try:
            want = _plain_tables(parts, columns["t"])
        except (pa.ArrowException, TypeError, ValueError):
            want = None
        spilled = [explain.spill(d / "spill", p) for p in parts]
        old, explain.ROW_GROUP_ROWS = explain.ROW_GROUP_ROWS, rows
        old_arrow, explain.ARROW_ROWS = explain.ARROW_ROWS, arrow_rows
        try:
            if want is None:
                with pytest.raises((pa.ArrowException, TypeError, ValueError)):
                    explain.write_tables(d / "got", spilled, columns)
                return
            files = explain.write_tables(d / "got", spilled, columns)
        finally:
            explain.ROW_GROUP_ROWS, explain.ARROW_ROWS = old, old_arrow
        write_table(d / "want", "t", {c: want.column(c) for c in columns["t"]}, csv=True)
        got = pq.read_table(d / "got" / "t.parquet")
        assert sorted(p.name for p in files) == ["t.csv", "t.parquet"]
        assert got.schema == want.schema
        nan = lambda t: [[("nan" if v != v else v) for v in c.to_pylist()] for c in t.columns]  # noqa: E731
        assert nan(got) == nan(want)
        assert (d / "got" / "t.csv").read_bytes() == (d / "want" / "t.csv").read_bytes()
    check()


def st_rows():
    from hypothesis import strategies as st
    return st.sampled_from([1, 2, 65_536])


def st_arrow_rows():
    from hypothesis import strategies as st
    from streamtrace.aggregate.explain import ARROW_ROWS
    return st.sampled_from([1, 2, 3, ARROW_ROWS])
