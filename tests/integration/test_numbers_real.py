"""The numbers of the epilogue on the real jobs, round two (issue 47): the peak MFU is measured
against, the link each collective is measured against, and what the epilogue says of its merged
trace.  Every expected value is read here from the raw traces with plain Python (gzip + json) or
from a datasheet figure written out in the test, never from the code under test."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from support import SHARED, run_cli

pytestmark = pytest.mark.slow

MULTI = SHARED / "traces" / "real-multi"
MEGATRON = MULTI / "megatron_tp2_v100x2"
DLRM = MULTI / "param_dlrm_v100x8"


def _raw(folder):
    return [json.loads(gzip.open(f).read()) for f in sorted(Path(folder).glob("*.json.gz"))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The epilogue of each real GPU job, by the command line."""
    if not MULTI.is_dir():
        pytest.skip("../shared/traces/real-multi is absent")
    base = tmp_path_factory.mktemp("numbers")
    out = {}
    for name, src in (("megatron", MEGATRON), ("dlrm", DLRM)):
        r = run_cli("epilogue", src, "-o", base / name, "-j", "2", "-q")
        assert r.returncode == 0, r.stderr
        out[name] = {"dir": base / name, "md": next((base / name).glob("*.md")).read_text(), "log": r.stdout + r.stderr,
                     "json": json.loads((base / name / "report.json").read_text()),
                     "epilogue": json.loads((base / name / "epilogue.json").read_text()), "raw": _raw(src)}
    return out


def _gemm_kernels(raw):
    """The GEMM kernels' names: ``gemm`` in the kernel's own name (before its template arguments; FBGEMM's
    ``fbgemm_gpu::`` embedding kernels are none)."""
    own = (re.split(r"[<(]", e["name"].replace("void ", "", 1), 1)[0] for r in raw for e in r["traceEvents"]
           if e.get("cat") == "kernel")
    return {n for n in own if "gemm" in n.lower() and "fbgemm" not in n}


# -- item 2: the peak follows the dtype the GEMMs ran in ---------------------------------------------

#: NVIDIA V100 datasheet: single-precision (fp32) 14 TFLOP/s (PCIe), 15.7 (SXM2)
V100_FP32 = {"Tesla V100-PCIE-32GB": 14.0, "Tesla V100-SXM2-32GB": 15.7}


@pytest.mark.parametrize("name", ["megatron", "dlrm"])
def test_fp32_jobs_measured_against_the_fp32_peak(runs, name):
    raw = runs[name]["raw"]
    gemms = _gemm_kernels(raw)
    assert gemms and all("sgemm" in k or k.startswith("gemm") for k in gemms), gemms    # cuBLAS' fp32 kernels
    assert not any(re.search(r"h884|hgemm|f16|bf16|tf32", k) for k in gemms)
    (gpu,) = {r["deviceProperties"][0]["name"] for r in raw}
    inp = runs[name]["json"]["efficiency"]["inputs"]
    assert inp["peak_dtype"] == "fp32" and inp["peak_tflops"] == V100_FP32[gpu]
    md = runs[name]["md"]
    assert f"- peak per GPU: {V100_FP32[gpu]:.1f} TFLOP/s (" in md and "dense fp32, fp32 from the GEMM kernels'" in md
    assert "dense fp16" not in md and "112.0" not in md and "125.0" not in md


def test_mfu_sentence_names_the_peak(runs, tmp_path):
    agg = runs["megatron"]["dir"] / "aggregate"
    r = run_cli("report", agg, "-o", tmp_path / "rep", "--tokens-per-step", "4096", "--flops-per-token", "1e6",
                "--no-charts", "-q")
    assert r.returncode == 0, r.stderr
    md = next((tmp_path / "rep").glob("*.md")).read_text()
    line = next(x for x in md.splitlines() if "MFU" in x and "tokens/s" in x)
    assert line.endswith("against the V100 PCIe's dense fp32 peak, 14.0 TFLOP/s."), line


def test_roofline_draws_the_mfu_peak_only(runs, monkeypatch):
    from streamtrace.report import effcharts
    seen = []
    monkeypatch.setattr(effcharts, "save", lambda fig, stem, formats: seen.append(fig) or [])
    sec = runs["dlrm"]["json"]["efficiency"]
    meta = json.loads((runs["dlrm"]["dir"] / "aggregate" / "aggregate.json").read_text())
    effcharts.efficiency_charts(sec, runs["dlrm"]["dir"] / "aggregate", runs["dlrm"]["dir"], meta)
    roof = next(f for f in seen if "Roofline" in f.axes[0].get_title())
    lines = [ln.get_label() for ln in roof.axes[0].get_lines()]
    assert len(lines) == 1 and "fp32 (15.7 TFLOP/s" in lines[0], lines
    assert max(roof.axes[0].get_lines()[0].get_ydata()) == pytest.approx(15.7)


# -- item 3: links named from the GPU model --------------------------------------------------------

def _links_md(md):
    return md.split("### Collectives against their links\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]


def test_v100_pcie_job_is_on_pcie_not_nvlink(runs):
    raw = runs["megatron"]["raw"]
    assert {r["deviceProperties"][0]["name"] for r in raw} == {"Tesla V100-PCIE-32GB"}
    hosts = {re.match(r"(.+)_\d+\.\d{19}\.pt", f.name).group(1) for f in MEGATRON.glob("*.json.gz")}
    assert len(hosts) == 1                                       # one host: every all-reduce inside it
    rows = runs["megatron"]["json"]["efficiency"]["links"]["rows"]
    assert rows and all(r["link"] == "PCIe 3.0 x16" and r["link_gbps"] == 16 for r in rows)
    sec = _links_md(runs["megatron"]["md"])
    assert "NVLink" not in sec and "| PCIe 3.0 x16 | 16.0 GB/s |" in sec


def test_v100_sxm2_job_is_on_nvlink(runs):
    assert {r["deviceProperties"][0]["name"] for r in runs["dlrm"]["raw"]} == {"Tesla V100-SXM2-32GB"}
    rows = runs["dlrm"]["json"]["efficiency"]["links"]["rows"]
    assert rows and all(r["link"] == "NVLink 2" and r["link_gbps"] == 150 for r in rows)


# -- item 5: charts never fold a rank on the critical path -------------------------------------------

def test_dlrm_rank_on_the_critical_path_has_its_own_charts(runs):
    import pyarrow.parquet as pq
    cp = pq.read_table(runs["dlrm"]["dir"] / "aggregate" / "critical_path_summary.parquet").to_pylist()
    on = {r["rank"] for r in cp if r["what"] == "slack" and r["on_path"]}
    assert 7 in on
    charts = {p.name for p in (runs["dlrm"]["dir"] / "charts").iterdir()}
    for r in on:
        assert f"rank_{r}_timeline_step10.png" in charts, (r, sorted(charts))


# -- item 6: the merged trace's problems said, not "OK" ----------------------------------------------

def _validate_line(path):
    """The last line of ``streamtrace validate PATH``: the peer check the epilogue's record must agree with."""
    r = run_cli("validate", path)
    return (r.stdout + r.stderr).strip().splitlines()[-1]


def test_megatron_merged_trace_problems_said_and_recorded(runs):
    d = runs["megatron"]["dir"]
    merged = d / "traces" / "merged_gpu.json.gz"
    assert "PROBLEMS" in _validate_line(merged) and "bad_nesting 2" in _validate_line(merged)
    inputs = [_validate_line(f) for f in sorted(MEGATRON.glob("*.json.gz"))]
    assert all("bad_nesting 1" in x for x in inputs)                  # each input has one: both inherited
    rec = runs["megatron"]["epilogue"]["state"]["traces/merge"]["result"]["validation"]
    assert rec["problems"] == {"bad_nesting": 2} and rec["in_inputs"] == {"bad_nesting": 2} and rec["added"] == {}
    final = [x for x in runs["megatron"]["log"].splitlines() if "iteration(s)" in x][-1]
    assert ", merged trace: 2 problems (bad_nesting 2), all present in the inputs; report:" in final
    assert ", OK;" not in final


# -- item 7: a diff of two unrelated jobs warns; its rows and counts read right ------------------------

def test_diff_of_unrelated_jobs_warns(runs, tmp_path):
    gpus = {n: {r["deviceProperties"][0]["name"] for r in runs[n]["raw"]} for n in ("megatron", "dlrm")}
    worlds = {n: {r["distributedInfo"]["world_size"] for r in runs[n]["raw"]} for n in ("megatron", "dlrm")}
    assert gpus["megatron"] != gpus["dlrm"] and worlds["megatron"] != worlds["dlrm"]
    r = run_cli("diff", runs["megatron"]["dir"], runs["dlrm"]["dir"], "-o", tmp_path / "d", "--no-charts")
    assert r.returncode == 0, r.stderr
    warn = " ".join((r.stdout + r.stderr).split())
    assert "look like runs of different jobs" in warn
    for g in gpus["megatron"] | gpus["dlrm"]:
        assert g in warn
    assert "different world sizes: base 2, test 8" in warn
    md = (tmp_path / "d" / "diff.md").read_text()
    assert md.index("**Warning: these look like runs of different jobs") < md.index("## Per rank-step")
    same = run_cli("diff", runs["megatron"]["dir"], runs["megatron"]["dir"], "-o", tmp_path / "s", "--no-charts")
    assert same.returncode == 0 and "different jobs" not in same.stdout + same.stderr


def test_diff_rows_by_direction_and_whole_counts(runs, tmp_path):
    r = run_cli("diff", runs["megatron"]["dir"], runs["dlrm"]["dir"], "-o", tmp_path / "d", "--no-charts", "-q")
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "d" / "diff.md").read_text()
    reg = md.split("## Top regressions: kernels that take more time\n", 1)[1].split("\n## ", 1)[0]
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in reg.splitlines() if line.startswith("| ")]
    assert len(cells) > 1
    for row in cells[1:]:
        assert row[2] == "added" or row[2].startswith("more time"), row
        assert re.fullmatch(r"-|<1|[\d,]+", row[3]) and re.fullmatch(r"-|<1|[\d,]+", row[4]), row
