"""Per-op FLOPs from the recorded shapes (issue 31) against PyTorch's own counter: a small model
(linear with and without bias, batched matmul, baddbmm, attention) runs forward and backward once
under ``torch.profiler`` with ``record_shapes=True`` on the CPU, and once, with the same shapes,
under a dispatch mode that applies ``torch.utils.flop_counter``'s registered formula to every
call (the one ``FlopCounterMode`` sums; its total is checked too).  The costed ops
(``streamtrace.analyze.opperf.costed_ops``, innermost of each nest) equal it op by op, in
call order.  CPU attention (``_scaled_dot_product_flash_attention_for_cpu``) has no formula in
the registry: it is checked against torch's ``sdpa_flop_count`` / ``sdpa_backward_flop_count``
on the recorded shapes."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, profile                      # noqa: E402
from torch.utils import flop_counter as fc                                # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode                # noqa: E402

from streamtrace.analyze.opcost import op_cost                            # noqa: E402
from streamtrace.analyze.opperf import costed_ops                         # noqa: E402


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(24, 48)                 # addmm
        self.b = torch.nn.Linear(48, 24, bias=False)     # mm
        self.c = torch.nn.Parameter(torch.randn(3, 24, 20))

    def forward(self, x):                                # x: (3, 10, 24)
        h = self.b(torch.relu(self.a(x)))                # 3-D input: linear -> addmm/mm on a view
        y = torch.matmul(h, self.c)                      # bmm
        z = torch.baddbmm(y, h, self.c)                  # baddbmm
        q = z.view(3, 10, 4, 5).transpose(1, 2)          # (b, h, s, d)
        o = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        return o.sum() + z.sum()


def _run(model, x):
    model.zero_grad()
    model(x).backward()


class Calls(TorchDispatchMode):
    """Every call's FLOPs by torch's registered formula (what FlopCounterMode adds up)."""
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        f = fc.flop_registry.get(func._overloadpacket)
        if f is not None:
            self.calls.append((func._overloadpacket.__name__, f(*args, **kwargs, out_val=out)))
        return out


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    torch.manual_seed(0)
    model, x = Model(), torch.randn(3, 10, 24)
    with Calls() as calls:
        _run(model, x)
    with fc.FlopCounterMode(display=False) as counter:
        _run(model, x)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        _run(model, x)
    path = tmp_path_factory.mktemp("opcost") / "trace.json"
    prof.export_chrome_trace(str(path))
    return path, calls.calls, counter.get_total_flops()


def test_flops_equal_torch_op_by_op(traced):
    path, calls, total = traced
    rows, _ = costed_ops(path)
    order = sorted(range(len(rows["name"])), key=lambda i: rows["ts_ns"][i])
    ours = [(rows["name"][i].removeprefix("aten::"), rows["flops"][i]) for i in order
            if rows["flops"][i] and "attention" not in rows["name"][i]]
    assert ours == calls
    assert {n for n, _ in ours} >= {"addmm", "mm", "bmm", "baddbmm"}
    assert sum(f for _, f in calls) == total                    # FlopCounterMode's own total


def test_attention_forward_and_backward_against_torch(traced):
    path, _, _ = traced
    events = json.loads(path.read_text())["traceEvents"]
    seen = set()
    for e in events:
        a = e.get("args") or {}
        name, dims = e.get("name"), a.get("Input Dims")
        if name == "aten::_scaled_dot_product_flash_attention_for_cpu":
            assert op_cost(name, dims, a["Input type"])[0] == fc.sdpa_flop_count(dims[0], dims[1], dims[2])
            seen.add("fwd")
        if name == "aten::_scaled_dot_product_flash_attention_for_cpu_backward":
            want = fc.sdpa_backward_flop_count(dims[0], dims[1], dims[2], dims[3])
            assert op_cost(name, dims, a["Input type"])[0] == want
            seen.add("bwd")
    assert seen == {"fwd", "bwd"}
    rows, _ = costed_ops(path)
    names = set(rows["name"])
    assert "aten::scaled_dot_product_attention" not in names and "aten::linear" not in names   # nests: innermost


def test_bytes_by_hand():
    # mm (8 x 16) @ (16 x 4) in bf16: reads 8*16 + 16*4, writes 8*4, 2 bytes each
    assert op_cost("aten::mm", [[8, 16], [16, 4]], ["c10::BFloat16", "c10::BFloat16"]) == \
        (2 * 8 * 16 * 4, (8 * 16 + 16 * 4 + 8 * 4) * 2, "bf16")
    # flash attention forward, (b, s, h, d) layout: b 2, s 128, h 8, d 64
    q = [2, 128, 8, 64]
    f, b, dt = op_cost("aten::_flash_attention_forward", [q, q, q], ["c10::Half"] * 3)
    assert f == 4 * 2 * 8 * 128 * 128 * 64 and b == 4 * (2 * 128 * 8 * 64) * 2 and dt == "fp16"
    # elementwise: bytes only
    assert op_cost("aten::add", [[4, 4], [4, 4], []], ["float", "float", "Scalar"]) == (0, 3 * 16 * 4, "fp32")
    assert op_cost("aten::mm", [[8, 16], [15, 4]], ["float", "float"]) is None                 # shapes disagree
    assert op_cost("aten::softmax", [[8]], ["float"]) is None
    # grouped GEMM of MoE experts: 96 routed token rows (k 32) over 4 experts' 32 x 64 weights
    f, b, _ = op_cost("aten::_grouped_mm", [[96, 32], [4, 32, 64], [4]], ["c10::BFloat16", "c10::BFloat16", "int"])
    assert f == 2 * 96 * 32 * 64 and b == (96 * 32 + 4 * 32 * 64 + 96 * 64) * 2 + 4 * 4


def test_analyze_gathers_the_same_ops_in_its_own_pass(traced, tmp_path):
    """``analyze --op-perf`` costs the ops from the batches of its own reading pass (no pass of its own):
    its ``op_perf`` rows are the standalone pass's (``costed_ops``, checked against torch above)."""
    import pyarrow.parquet as pq
    from streamtrace.analyze import AnalyzeOptions, analyze
    path, _, _ = traced
    rows, _ = costed_ops(path)
    analyze([path], tmp_path / "an", AnalyzeOptions(jobs=1, op_perf=True, progress=False))
    got = pq.read_table(next((tmp_path / "an" / "op_perf").rglob("*.parquet"))).to_pydict()
    key = lambda t: sorted(zip(t["ts_ns"], t["name"], t["flops"], t["bytes"], t["input_dims"]))  # noqa: E731
    assert key(got) == key(rows) and len(rows["name"]) > 5
