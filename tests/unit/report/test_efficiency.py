"""The report's Efficiency section (issue 31) on real traces: tokens/s, samples/s and MFU per step
from the job's config (TorchTitan TOML through ``epilogue``, Megatron-LM arguments through the
topology file) or flags, each number with its source.  Expected values are computed here from
``iterations.parquet`` (read with pyarrow) and the formulas worked by hand."""
from __future__ import annotations

import gzip
import json
import re

import pyarrow.parquet as pq
import pytest

from support import REAL, need_shared, run_cli
from streamtrace import capture
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.aggregate.folder import COLUMNS, OP_PERF
from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.report import write_report
from streamtrace.report.options import ReportOptions
from streamtrace.report.efficiency import EfficiencyOptions

CFG = """
[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 2
seq_len = 8192
[parallelism]
data_parallel_shard_degree = -1
tensor_parallel_degree = 2
pipeline_parallel_degree = 2
"""
# Llama 3 8B by hand (see test_flops.py): 6 N + 12 L H Q T at seq len 8192
_LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
FPT_8B = 6 * (32 * _LAYER + 4096 + 4096 * 128256) + 12 * 32 * 32 * 128 * 8192


def _step_ns(aggdir) -> dict:
    t = pq.read_table(aggdir / "iterations.parquet").to_pydict()
    return {(i, s): ns for i, s, ns in zip(t["iteration"], t["step"], t["step_ns_median"])}


def test_epilogue_with_a_torchtitan_config(tmp_path):
    need_shared()
    cfg = tmp_path / "llama3_8b.toml"
    cfg.write_text(CFG)
    r = run_cli("epilogue", REAL.parent / "cpu-3d", "-o", tmp_path / "out", "--torchtitan-config", cfg,
                "--peak-tflops", "100", "-j", "1", "--no-charts", "-q")
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    eff = rep["efficiency"]
    steps = _step_ns(tmp_path / "out" / "aggregate")
    tokens = 2 * 8192 * 2                          # local batch x seq len x DP (8 / (tp 2 x pp 2))
    assert eff["inputs"]["tokens_per_step"] == tokens and eff["inputs"]["gpus"] == 8
    assert str(cfg) in eff["inputs"]["tokens_per_step_from"] and eff["inputs"]["peak_from"] == "--peak-tflops"
    assert eff["inputs"]["flops_per_token"] == FPT_8B
    for row in eff["steps"]:
        sec = steps[(row["iteration"], row["step"])] / 1e9
        assert row["tokens_per_s"] == pytest.approx(tokens / sec)
        assert row["samples_per_s"] == pytest.approx(4 / sec)
        assert row["mfu_pct"] == pytest.approx(100 * tokens / sec * FPT_8B / (8 * 100e12))
    md = (tmp_path / "out" / "cpu-3d.md").read_text()
    assert md.index("## Steps and throughput") < md.index("## Efficiency") < md.index("## Where the time went")
    assert "Where each number came from" in md and "--peak-tflops" in md
    meta = json.loads((tmp_path / "out" / "aggregate" / "aggregate.json").read_text())
    assert meta["train_config"]["tokens_per_step"] == tokens


@pytest.fixture(scope="module")
def a100(tmp_path_factory):
    need_shared()
    d = tmp_path_factory.mktemp("eff") / "an"
    analyze([REAL / "a100_rank3_of8.json.gz"], d, AnalyzeOptions(jobs=1))
    return d


def test_flags_and_the_datasheet_peak(a100, tmp_path):
    aggregate([a100], tmp_path / "agg", AggregateOptions(jobs=1))
    rep = write_report(tmp_path / "agg", opt=ReportOptions(charts=False, global_batch=8, seq_len=1024,
                                                      efficiency=EfficiencyOptions(flops_per_token=1e9)))
    inp = rep["efficiency"]["inputs"]
    # the GEMMs' math, from the raw trace: CUTLASS's tensor-op s1688gemm kernels (fp32 data on TF32 tensor
    # cores) hold more GPU time than cuBLAS' SIMT sgemm (fp32): the peak is the A100's dense TF32, 156 TFLOP/s
    ks = [e for e in json.loads(gzip.open(REAL / "a100_rank3_of8.json.gz").read())["traceEvents"]
          if e.get("cat") == "kernel"]
    tf32 = sum(e["dur"] for e in ks if "tensorop_s1688gemm" in e["name"])
    fp32 = sum(e["dur"] for e in ks if re.match(r"(ampere|volta)_sgemm", e["name"]))
    assert tf32 > fp32 > 0
    assert inp["peak_tflops"] == 156 and "A100 datasheet" in inp["peak_from"]     # NVIDIA A100-PG509-200
    assert inp["peak_dtype"] == "tf32" and "dense tf32, tf32 from the GEMM kernels' names" in inp["peak_from"]
    assert inp["tokens_per_step_from"] == "--global-batch x --seq-len"
    steps = _step_ns(tmp_path / "agg")
    for row in rep["efficiency"]["steps"]:
        sec = steps[(row["iteration"], row["step"])] / 1e9
        assert row["mfu_pct"] == pytest.approx(100 * 8192 / sec * 1e9 / (8 * 156e12))


def test_megatron_arguments_from_the_topology_file(a100, tmp_path):
    args = {"global_batch_size": 64, "micro_batch_size": 1, "seq_length": 2048, "num_layers": 24,
            "hidden_size": 2048, "ffn_hidden_size": 8192, "num_attention_heads": 16, "padded_vocab_size": 51200,
            "tensor_model_parallel_size": 8, "bf16": True}
    capture.dump_topology(tmp_path, groups={"tp": [list(range(8))]}, world_size=8, training=args)
    aggregate([a100], tmp_path / "agg", AggregateOptions(jobs=1, topology=str(tmp_path / "streamtrace_topology.json")))
    rep = write_report(tmp_path / "agg", opt=ReportOptions(charts=False))
    inp = rep["efficiency"]["inputs"]
    assert inp["tokens_per_step"] == 64 * 2048 and inp["sequences_per_step"] == 64
    assert "Megatron-LM" in inp["flops_per_token_from"]
    # Narayanan et al. eq. 3 per token (no GQA, f = 4h, no GLU): 72 l h^2 (1 + s/6h + V/12lh)
    l, h, s, V = 24, 2048, 2048, 51200
    assert inp["flops_per_token"] == pytest.approx(72 * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)))
    assert rep["throughput"]["tokens_per_step"] == 64 * 2048


def test_links_ops_and_charts_on_real_jobs(tmp_path):
    """A real 2-rank TP job (V100 PCIe, both ranks on host 9c44bd29b3f0 by their file names): every
    all-reduce is intra-node, its median bus bandwidth against the PCIe 3.0 x16 link (16 GB/s); and
    the H100 trace's costed ops summed per distinct op into op_perf.parquet, with the roofline chart."""
    need_shared()
    analyze([REAL.parent / "real-multi" / "megatron_tp2_v100x2"], tmp_path / "an", AnalyzeOptions(jobs=1))
    r = run_cli("report", tmp_path / "an", "-o", tmp_path / "rep", "-j", "1", "-q")
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    links = rep["efficiency"]["links"]
    t = pq.read_table(tmp_path / "rep" / "collectives.parquet").to_pydict()
    bw = sorted(b for b, m in zip(t["busbw_gbps"], t["msg_bytes"]) if m > 0)
    median = (bw[(len(bw) - 1) // 2] + bw[len(bw) // 2]) / 2
    (row,) = links["rows"]
    assert row["scope"] == "intra" and row["collective"] == "AllReduce" and row["count"] == len(t["collective"])
    assert row["link_gbps"] == 16 and row["pct_of_link"] == pytest.approx(100 * median / 16)
    assert links["traffic"]["intra"]["bytes"] == sum(m for m in t["msg_bytes"] if m > 0)
    assert "host names in the trace file names" in links["hosts_from"]
    assert (tmp_path / "rep" / "charts" / "busbw_vs_size.png").is_file()

    analyze([REAL / "h100_qwen_inference.json.gz"], tmp_path / "q", AnalyzeOptions(jobs=1, op_perf=True))
    write = run_cli("report", tmp_path / "q", "-o", tmp_path / "qrep", "-j", "1", "-q")
    assert write.returncode == 0, write.stderr
    (part,) = (tmp_path / "q" / "op_perf").glob("iteration=*/rank=*/part-0.parquet")
    per_op = pq.read_table(part).to_pylist()
    job = pq.read_table(tmp_path / "qrep" / "op_perf.parquet").to_pylist()
    assert tuple(job[0]) == COLUMNS[OP_PERF]                    # the columns its owner declares, in that order
    assert sum(r["count"] for r in job) == len(per_op)
    for j in job[:5]:
        same = [r for r in per_op if (r["name"], r["input_dims"]) == (j["name"], j["input_dims"])]
        assert j["flops"] == sum(r["flops"] for r in same) and j["gpu_busy_ns"] == sum(r["gpu_busy_ns"] for r in same)
        assert j["lost_ns"] == pytest.approx(sum(r["lost_ns"] for r in same))
    lost = [j["lost_ns"] for j in job]
    assert lost == sorted(lost, reverse=True)
    qrep = json.loads((tmp_path / "qrep" / "report.json").read_text())
    assert qrep["efficiency"]["ops"][0]["name"] == next(j["name"] for j in job if j["flops"] > 0)
    assert (tmp_path / "qrep" / "charts" / "roofline.png").is_file()
    md = next((tmp_path / "qrep").glob("*.md")).read_text()
    assert "### GEMMs and attention against the roofline" in md


def test_hosts_packed_by_gpus_per_node():
    from streamtrace.report.links import spans_hosts
    meta = {"parts": [{"rank": r, "source": f"/x/rank_{r:04d}_iter_4.pt.trace.json"} for r in range(16)]}
    spans, how = spans_hosts(meta, 8)
    assert "packed 8 to a host" in how
    assert not spans("0,1,2,3,4,5,6,7", "") and spans("7,8", "") and spans("", "0,15")
    named = {"parts": [{"rank": 0, "source": "/t/nodeA_11.1724066820235157909.pt.trace.json.gz"},
                       {"rank": 1, "source": "/t/nodeB_12.1724066820237002797.pt.trace.json.gz"}]}
    spans, how = spans_hosts(named, 8)
    assert spans("0,1", "") and "host names" in how
    # a 13-digit ms time is not the handler's default: the name is not trusted as a host
    ms = {"parts": [{"rank": r, "source": f"/t/worker{r}_step_12.16941282015{r:02d}.pt.trace.json.gz"} for r in range(8)]}
    spans, how = spans_hosts(ms, 8)
    assert not spans("0,1,2,3,4,5,6,7", "") and "packed 8 to a host" in how
    # a host field in the trace metadata comes next
    meta = {"parts": [{"rank": r, "source": f"/t/w{r}.json", "host_name": f"h{r // 2}"} for r in range(4)]}
    spans, how = spans_hosts(meta, 8)
    assert not spans("0,1", "") and spans("1,2", "") and "trace metadata" in how


def test_links_and_traffic_in_the_reports_units():
    """Small messages print in the unit that fits them (13 all-reduces of 6,144 fp32 elements:
    319,488 B = 319 KB), a size nobody recorded as ``unknown``, never ``0.000``; counts with
    separators; the traffic line likewise."""
    from streamtrace.report.efficiency import efficiency_markdown
    inputs = {"tokens_per_step": None, "tokens_per_step_from": None, "sequences_per_step": None,
              "flops_per_token": None, "flops_per_token_from": "unknown (no model shape)",
              "flops_per_token_by_convention": {}, "peak_tflops": None, "peak_from": "unknown (no GPU)",
              "gpus": 2, "gpus_from": "test"}
    rows = [{"collective": "AllReduce", "parallel_dim": "TP", "scope": "intra", "count": 13, "bytes": 13 * 6144 * 4,
             "busbw_gbps_median": 1.08, "link": "NVLink / Infinity Fabric", "link_gbps": 16.0, "pct_of_link": 6.75},
            {"collective": "SendRecv", "parallel_dim": "PP", "scope": "inter", "count": 1234, "bytes": 0,
             "busbw_gbps_median": None, "link": "network", "link_gbps": None, "pct_of_link": None}]
    traffic = {"intra": {"bytes": 13 * 6144 * 4, "pct": 100.0}, "inter": {"bytes": 0, "pct": 0.0}}
    links = {"rows": rows, "traffic": traffic,
             "hosts_from": "test", "nic_gbps": 12.5, "nic_from": "test"}
    sec = {"config": None, "inputs": inputs, "steps": [], "gpu": None, "ops": [], "links": links,
           "overall": dict.fromkeys(("tokens_per_s", "samples_per_s", "model_tflops_per_gpu", "mfu_pct"))}
    md = "\n".join(efficiency_markdown(sec))
    assert "| AllReduce | TP | intra | 13 | 319 KB | 1.08 GB/s | NVLink / Infinity Fabric | 16.0 GB/s | 6.8 |" in md
    assert "| SendRecv | PP | inter | 1,234 | unknown | - | network | - | - |" in md
    assert "Traffic: 319 KB inside nodes (100.0 %), 0 across nodes (0.0 %)." in md
    assert "network 12.5 GB/s per GPU" in md and "0.000" not in md
    assert "- model FLOPs per token: unknown (no model shape)" in md and "- GFLOP" not in md
    assert "(!)" not in md
    # a bus bandwidth above its link's peak is flagged as a sign of wrong hosts / peaks, never shown bare
    over = dict(rows[0], scope="inter", link="network", link_gbps=12.5, busbw_gbps_median=23.0,
                pct_of_link=184.0, over_peak=True)
    md = "\n".join(efficiency_markdown(dict(sec, links=dict(links, rows=[over]))))
    assert "| 184.0 (!) |" in md and "sign of wrong hosts" in md


def test_links_of_a_cpu_only_job(tmp_path):
    """A job whose ranks have only CPU events (``sources`` == ["cpu"]) has no GPU link: no peak, no %."""
    import pyarrow as pa
    from streamtrace.report.links import link_section
    from streamtrace.topology.hardware import gpu_spec
    pq.write_table(pa.table({"collective": ["AllReduce"], "parallel_dim": ["DP"], "pg_ranks": ["0,1"],
                             "ranks": ["0,1"], "msg_bytes": [4096], "busbw_gbps": [0.5]}),
                   tmp_path / "collectives.parquet")
    meta = {"sources": ["cpu"], "parts": [{"rank": r, "source": f"rank_{r}.json"} for r in (0, 1)]}
    lk = link_section(tmp_path, meta, gpu_spec("Tesla V100-SXM2-32GB"), None, 8)
    (row,) = lk["rows"]
    assert lk["cpu_only"] and "CPU-only" in row["link"] and row["link_gbps"] is None and row["pct_of_link"] is None


def test_gpu_work_outside_every_step_is_no_step(tmp_path):
    """A kernel running before the first ProfilerStep (launched before the profiler started, as a
    real H200 trace had it: a 135 us 'step -' counted as a fourth step, 71 % MFU instead of 53 %)
    is left out of the steps, the throughput and the efficiency.  Expected values by hand: two
    steps of 10 ms each (the ProfilerStep windows), 1,000 tokens a step: 100,000 tokens/s."""
    from kineto import KinetoDoc
    d = tmp_path / "traces"
    d.mkdir()
    doc = KinetoDoc().kernel(0, 100, "early_kernel", correlation=99)           # before step 1, no launch
    for i, t0 in enumerate((1_000, 11_000)):
        doc.cpu(f"ProfilerStep#{i + 1}", t0, 10_000)
        doc.launch(t0 + 100, t0 + 200, 5_000)
    doc.write(d / "rank0.json")
    an, agg = tmp_path / "an", tmp_path / "agg"
    analyze([d / "rank0.json"], an, AnalyzeOptions(jobs=1))
    aggregate([an], agg, AggregateOptions(jobs=1))
    rep = write_report(str(agg), opt=ReportOptions(charts=False, tokens_per_step=1_000,
                                                efficiency=EfficiencyOptions(flops_per_token=1e9, peak_tflops=1.0)))
    assert [s["step"] for s in rep["steps"]] == [1, 2]
    assert rep["throughput"]["steps"] == 2
    assert rep["throughput"]["tokens_per_s"] == pytest.approx(100_000, rel=1e-9)
    assert rep["efficiency"]["overall"]["mfu_pct"] == pytest.approx(100_000 * 1e9 / 1e12 * 100, rel=1e-9)
    md = next(tmp_path.glob("agg/*.md")).read_text()
    assert "outside every `ProfilerStep#` window" in md
