"""``analyze --op-perf`` on a real H100 trace (issue 31): each costed op's GPU time is the sum of
the GPU events (kernels, memsets) launched inside it, found here with plain ``json``: the runtime launches on the op's
thread within its span, their correlation ids, those kernels' durations; FLOPs from the shapes by
hand for GEMMs; the roofline against the H100 SXM datasheet (989 TFLOP/s BF16, 3.35 TB/s)."""
from __future__ import annotations

import gzip
import json
from decimal import Decimal

import pyarrow.parquet as pq
import pytest

from support import REAL, need_shared
from streamtrace.analyze import AnalyzeOptions, analyze

TRACE = "h100_qwen_inference.json.gz"


def _ns(v) -> int:
    return int(Decimal(str(v)) * 1000)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    need_shared()
    d = tmp_path_factory.mktemp("opperf") / "an"
    analyze([REAL / TRACE], d, AnalyzeOptions(jobs=1, op_perf=True))
    return d


@pytest.fixture(scope="module")
def out(analysed):
    (f,) = list((analysed / "op_perf").glob("iteration=*/rank=*/part-0.parquet"))
    return pq.read_table(f).to_pylist()


def test_kernel_perf_gives_each_op_its_kernels(analysed, out):
    (f,) = list((analysed / "kernel_perf").glob("iteration=*/rank=*/part-0.parquet"))
    kp = pq.read_table(f).to_pylist()
    ev = json.loads(gzip.open(REAL / TRACE).read())["traceEvents"]
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]
    checked = 0
    for r in [r for r in out if r["name"] in ("aten::mm", "aten::addmm")][:40]:
        mine = {e["args"]["correlation"] for e in gpu if e["args"].get("External id") == r["external_id"]}
        rows = [k for k in kp if k["external_id"] == r["external_id"]]
        assert {k["correlation"] for k in rows} == mine
        if mine:
            assert sum(k["flops"] for k in rows) == pytest.approx(r["flops"])
            assert sum(k["bytes"] for k in rows) == pytest.approx(r["bytes"])
            checked += 1
    assert checked >= 20


def test_gemm_kernel_time_flops_and_roofline(out):
    ev = json.loads(gzip.open(REAL / TRACE).read(), parse_float=Decimal)["traceEvents"]
    launches = [e for e in ev if e.get("cat") == "cuda_runtime" and e.get("ph") == "X"]
    kernel = {e["args"]["correlation"]: _ns(e["dur"]) for e in ev
              if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")}
    gemms = [r for r in out if r["name"] in ("aten::mm", "aten::addmm")]
    assert len(gemms) >= 100
    for r in gemms[:40]:
        t0, t1 = r["ts_ns"], r["ts_ns"] + r["dur_ns"]
        mine = [kernel[e["args"]["correlation"]] for e in launches
                if e["tid"] == r["tid"] and t0 <= _ns(e["ts"]) < t1 and e["args"].get("correlation") in kernel]
        assert r["kernel_count"] == len(mine) and r["kernel_time_ns"] == sum(mine)
        dims = json.loads(r["input_dims"])
        a, b = (dims[1], dims[2]) if r["name"] == "aten::addmm" else (dims[0], dims[1])
        assert r["flops"] == 2 * a[0] * a[1] * b[1]
        assert r["dtype"] == "bf16"
        bound = max(r["flops"] / 989e12, r["bytes"] / 3350e9) * 1e9
        assert r["bound_ns"] == pytest.approx(bound)
        assert r["bound"] == ("compute" if r["flops"] / r["bytes"] >= 989e12 / 3350e9 else "memory")
        assert r["achieved_tflops"] == pytest.approx(r["flops"] / (r["gpu_busy_ns"] / 1e9) / 1e12)
        assert r["lost_ns"] == pytest.approx(max(r["gpu_busy_ns"] - bound, 0))


def test_attention_is_counted_once(out):
    names = {r["name"] for r in out}
    assert "aten::_flash_attention_forward" in names
    assert not names & {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
                        "aten::linear", "aten::matmul"}


def test_no_recorded_shapes_no_op_perf(tmp_path):
    """A trace profiled without record_shapes (no "Input Dims": checked here with a plain read)
    gets no op_perf/ or kernel_perf/, and is not read past the probe."""
    need_shared()
    src = REAL / "a100_resnet_ddp_rank0_of2.json.gz"
    assert b'"Input Dims"' not in gzip.open(src).read()
    analyze([src], tmp_path / "an", AnalyzeOptions(jobs=1, op_perf=True))
    assert (tmp_path / "an" / "kernels").is_dir()
    assert not (tmp_path / "an" / "op_perf").exists() and not (tmp_path / "an" / "kernel_perf").exists()
