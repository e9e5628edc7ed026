"""``streamtrace diff`` / ``streamtrace.diff``: identical inputs change nothing; a synthetic pair with one
injected change (a slower GEMM, an extra DP all-reduce, a straggler) puts that change first, by the amount
the traces themselves say (summed from the raw JSON, not from streamtrace's tables); rank and step pairing;
usage and input errors."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import streamtrace
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.runtime.errors import StreamtraceError, UsageError
from streamtrace.report.diff.compare import short_name
from streamtrace.synth.job import _K, SynthSpec, generate_job

from support import load_json, run_cli

SPEC = dict(world_size=8, tp=2, pp=2, steps=2, microbatches=2, seed=3)
DELAY = 1_500_000
VARIANTS = {"base": SynthSpec(**SPEC), "slow": SynthSpec(**SPEC, kernel_scale=(("fprop", 1.25),)),
            "coll": SynthSpec(**SPEC, extra_allreduces=1),
            "strag": SynthSpec(**SPEC, straggler_rank=5, straggler_delay_ns=DELAY)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("diff")
    for k, spec in VARIANTS.items():
        generate_job(tmp / f"tr_{k}", spec)
        analyze([tmp / f"tr_{k}"], tmp / f"an_{k}", AnalyzeOptions(jobs=1))
    shutil.copytree(tmp / "an_base", tmp / "an_copy")
    return tmp


def _run(runs, test, name, **kw):
    return streamtrace.diff(runs / "an_base", runs / test, runs / f"d_{name}",
                            streamtrace.DiffOptions(**{"jobs": 1, "charts": False, **kw}))


def _trace_totals(folder, name):
    """(kernel count, summed duration in ns, ProfilerStep windows) of kernel ``name`` in every trace
    of ``folder``, from the raw JSON (ts/dur: us with three decimals)."""
    count = total = cells = 0
    for f in sorted(folder.rglob("*.pt.trace.json*")):
        ev = load_json(f)["traceEvents"]
        cells += sum(1 for e in ev if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X")
        for e in ev:
            if e.get("cat") == "kernel" and e.get("name") == name:
                count += 1
                total += round(float(e["dur"]) * 1000)
    return count, total, cells


def test_identical_inputs_are_all_unchanged_with_zero_deltas(runs):
    d = _run(runs, "an_copy", "same", charts=True)
    assert d.kind == "diff"
    for name in ("kernels", "ops"):
        t = d.table(name)
        assert t.num_rows > 10
        assert set(t["change"].to_pylist()) == {"unchanged"}
        assert np.all(t["delta_ns"].to_numpy() == 0)
        assert np.all(t["base_count"].to_numpy() == t["test_count"].to_numpy())
    assert np.all(d.table("ops")["delta_self_ns"].to_numpy() == 0)
    assert np.all(d.table("groups")["delta_ns"].to_numpy() == 0)
    r = d.table("ranks").to_pandas()
    assert len(r) == 8 and (r["base_rank"] == r["test_rank"]).all()
    assert (r.filter(like="delta_").to_numpy() == 0).all()
    s = d.summary
    assert s["base"]["cells"] == s["test"]["cells"] == 16          # 8 ranks x 2 steps
    assert all(v["delta"] == 0 for v in s["summary"].values())
    md = (runs / "d_same" / "diff.md").read_text()
    assert "*None: no kernel takes more time.*" in md
    assert not (runs / "d_same" / "charts").exists()             # nothing changed: no chart


def test_slower_kernel_comes_first_with_the_traces_delta(runs):
    d = _run(runs, "an_slow", "slow", charts=True)
    k = d.table("kernels").to_pylist()
    gemm = _K["fprop"][0]
    assert k[0]["name"] == gemm and k[0]["change"] == "unchanged"    # by count, as HTA: same count
    cb, sb, nb = _trace_totals(runs / "tr_base", gemm)
    ct, st, nt = _trace_totals(runs / "tr_slow", gemm)
    assert cb == ct and nb == nt == 16
    assert k[0]["delta_ns"] == pytest.approx((st - sb) / 16, abs=1e-6)
    assert k[0]["base_mean_ns"] == pytest.approx(sb / cb)
    assert k[0]["delta_pct"] == pytest.approx(100 * (st - sb) / sb)
    assert all(r["delta_ns"] == 0 for r in k if r["kind"] == "compute" and r["name"] != gemm)
    assert (runs / "d_slow" / "charts" / "diff_top_deltas.png").is_file()
    assert "![diff_top_deltas](charts/diff_top_deltas.png)" in (runs / "d_slow" / "diff.md").read_text()


def test_extra_collective_comes_first_as_increased(runs):
    d = _run(runs, "an_coll", "coll")
    k = d.table("kernels").to_pylist()
    assert k[0]["kind"] == "communication" and "AllReduce" in k[0]["name"]
    assert k[0]["change"] == "increased" and k[0]["delta_count"] == 1.0     # one more per rank-step
    cb, sb, _ = _trace_totals(runs / "tr_base", k[0]["name"])
    ct, st, _ = _trace_totals(runs / "tr_coll", k[0]["name"])
    assert ct - cb == 16 and k[0]["delta_ns"] == pytest.approx((st - sb) / 16, abs=1e-6)
    g = d.table("groups").to_pandas()
    cd = g[g["dimension"] == "collective_dim"].iloc[0]
    assert cd["value"] == "AllReduce/DP"


def test_straggler_rank_comes_first_in_ranks(runs):
    d = _run(runs, "an_strag", "strag")
    r = d.table("ranks").to_pylist()
    assert r[0]["base_rank"] == 5 == r[0]["test_rank"]
    # its first compute kernel of each forward and backward step: 2 micro-batches x 2 per step
    assert r[0]["delta_compute_ns"] == pytest.approx(4 * DELAY)
    assert all(x["delta_compute_ns"] == 0 for x in r[1:])


def test_rank_and_step_pairing(runs):
    d = _run(runs, "an_base", "pairs", base_ranks=[0, 1], test_ranks=[1, 0], base_steps=[10], test_steps=[11])
    assert [tuple(p) for p in d.summary["pairs"]] == [(0, 1), (1, 0)]
    assert d.summary["base"]["steps"] == [10] and d.summary["test"]["steps"] == [11]
    assert d.summary["base"]["cells"] == d.summary["test"]["cells"] == 2
    one = _run(runs, "an_base", "one", ranks=[3], steps=[10])
    assert one.summary["base"]["cells"] == 1 and one.table("ranks").num_rows == 1


def test_bad_options_and_inputs(runs, tmp_path):
    with pytest.raises(UsageError):
        streamtrace.diff(runs / "an_base", runs / "an_copy", tmp_path / "x",
                         streamtrace.DiffOptions(ranks=[0], base_ranks=[0], test_ranks=[0]))
    with pytest.raises(StreamtraceError, match="no rank 9"):
        _run(runs, "an_copy", "bad", ranks=[9])
    with pytest.raises(StreamtraceError, match="no step 99"):
        _run(runs, "an_copy", "bad2", steps=[99])
    p = run_cli("diff", runs / "an_base", runs / "an_copy", "-o", tmp_path / "y", "--rank", "0", "--base-rank", "0",
                "--test-rank", "0")
    assert p.returncode == 2
    p = run_cli("diff", runs / "an_base", tmp_path / "missing", "-o", tmp_path / "z")
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1


def test_cli_on_traces_analyses_them_and_load_opens_the_result(runs, tmp_path):
    out = tmp_path / "cli"
    p = run_cli("diff", runs / "tr_base", runs / "tr_slow", "-o", out, "-j", "1", "--no-charts",
                "--labels", "before,after", "--rank", "0-3", "--name-key", "short")
    assert p.returncode == 0, p.stderr
    assert (out / "analysis-base" / "summary.json").is_file() and (out / "analysis-test" / "summary.json").is_file()
    d = streamtrace.load(out)
    assert d.kind == "diff" and d.tables() == ["kernels", "ops", "groups", "ranks"]
    k = {r["name"]: r for r in d.table("kernels").to_pylist()}
    assert k[short_name(_K["fprop"][0])]["delta_ns"] > 0 and d.summary["base"]["ranks"] == [0, 1, 2, 3]
    assert d.summary["labels"] == ["before", "after"] and d.summary["base"]["analysed"]
    assert "# streamtrace diff: before vs after" in (out / "diff.md").read_text()
    assert (out / "kernels.csv").is_file()


@pytest.mark.parametrize("name, short", [
    ("void at::native::foo<float, 4>(int, float*)", "at::native::foo"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),
    ("void at::native::(anonymous namespace)::k<int>(int)", "at::native::(anonymous namespace)::k"),
    ("aten::mm", "aten::mm"), ("a -> b", "a -> b"), ("<lambda>", "<lambda>"),
])
def test_short_name(name, short):
    assert short_name(name) == short


def test_worker_pool_gives_the_same_tables(runs, monkeypatch):
    import streamtrace.report.diff.compare as jd
    one = _run(runs, "an_strag", "inline")
    monkeypatch.setattr(jd, "INLINE_BYTES", 0)
    two = _run(runs, "an_strag", "pool", jobs=2)
    for name in ("kernels", "ops", "groups", "ranks"):
        assert one.table(name).equals(two.table(name)), name


def test_output_folder_is_one_unit(runs, tmp_path):
    """A diff that fails half-way leaves an earlier diff in OUTDIR whole; a folder holding files
    diff did not write is refused before any work; ``dirs`` name the folder after the swap."""
    out = tmp_path / "unit"
    d = streamtrace.diff(runs / "tr_base", runs / "tr_slow", out,
                         streamtrace.DiffOptions(jobs=1, charts=False, ranks=[0]))
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert d.summary["base"]["dirs"] == [str(out / "analysis-base")]
    with pytest.raises(StreamtraceError, match="no rank 9"):
        streamtrace.diff(runs / "an_base", runs / "an_copy", out, streamtrace.DiffOptions(jobs=1, ranks=[9]))
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unit"]          # no staging folder left
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    p = run_cli("diff", runs / "an_base", runs / "an_copy", "-o", tmp_path / "foreign", "--no-charts", "-j", "1")
    assert p.returncode == 1 and "foreign" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert (tmp_path / "foreign" / "notes.txt").read_text() == "mine"
