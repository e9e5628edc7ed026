"""A real activation-checkpointing trace for tests: a small transformer run on the CPU with
``torch.utils.checkpoint`` (non-reentrant) around every block, Megatron-style annotations
(``forward_step``, ``backward_step``, ``optimizer``), profiled by the PyTorch profiler with
``with_stack=True`` (so the trace has the ``torch/utils/checkpoint.py(...): recompute_fn``
python_function windows under which the backward pass re-runs each block's forward), then given
a GPU side: one ``cudaLaunchKernel`` inside every leaf aten op that would launch a kernel on a
GPU, and its kernel on GPU 0 / stream 7 (``ac2g`` flow, correlation ids; kernels back to back on
the stream, each as long as its op). The CPU side is the real run's, untouched.

    python tools/gen_ckpt_trace.py OUT.json [--hidden 64] [--layers 3] [--microbatches 2]

Needs torch (the ``test`` extra); the output is a few MB, so tests generate it rather than keep it.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

# aten ops that launch no kernel on a GPU (views, allocation, metadata)
NO_KERNEL = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::view", "aten::reshape",
             "aten::_reshape_alias", "aten::as_strided", "aten::t", "aten::transpose", "aten::detach",
             "aten::detach_", "aten::expand", "aten::permute", "aten::unsqueeze", "aten::squeeze", "aten::select",
             "aten::slice", "aten::alias", "aten::resize_", "aten::lift_fresh", "aten::unflatten", "aten::split",
             "aten::chunk", "aten::unbind", "aten::_unsafe_view", "aten::contiguous", "aten::size", "aten::stride",
             "aten::result_type", "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "aten::set_",
             "detach", "aten::narrow", "aten::flatten", "aten::view_as", "aten::squeeze_", "aten::unsqueeze_",
             "aten::_has_compatible_shallow_copy_type"}


def profile_run(path, hidden=64, layers=3, microbatches=2):
    """Run the checkpointed model for 3 iterations and write the trace of the third to ``path``."""
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, record_function, schedule
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    torch.set_num_threads(1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.attn = nn.MultiheadAttention(hidden, 4, batch_first=True)
            self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))

    blocks = nn.ModuleList(Block() for _ in range(layers))
    opt = torch.optim.AdamW(blocks.parameters(), lr=1e-4)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=1, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path)), record_shapes=True,
                 with_stack=True) as prof:
        for _ in range(3):
            for _ in range(microbatches):
                with record_function("forward_step"):
                    x = torch.randn(2, 16, hidden)
                    for b in blocks:
                        x = checkpoint(b, x, use_reentrant=False)
                    loss = x.float().pow(2).mean()
                with record_function("backward_step"):
                    loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad()
            prof.step()


def _leaves(ops):
    """``{id(op): True}`` for the cpu_ops that hold no other cpu_op (per thread, by time)."""
    leaf = {id(e): True for e in ops}
    stack, key = [], None
    for e in sorted(ops, key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"])):
        if (e["pid"], e["tid"]) != key:
            stack, key = [], (e["pid"], e["tid"])
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
            stack.pop()
        if stack:
            leaf[id(stack[-1])] = False
        stack.append(e)
    return leaf


def add_gpu(doc: dict) -> int:
    """Give the CPU-only trace ``doc`` its GPU side (module docstring), in place; returns the
    number of kernels added."""
    ev = doc["traceEvents"]
    ops = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    leaf = _leaves(ops)
    corr, gpu_free, new = 1, 0.0, []
    for e in sorted(ops, key=lambda e: e["ts"]):
        if not leaf[id(e)] or e["name"] in NO_KERNEL:
            continue
        lt, ld = e["ts"] + min(0.5, e["dur"] / 4), min(2.0, e["dur"] / 4)
        ks, kd = max(lt + ld + 3.0, gpu_free), max(1.0, e["dur"])
        ids = {"External id": corr, "correlation": corr}
        new += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": e["pid"], "tid": e["tid"],
                 "ts": round(lt, 3), "dur": round(ld, 3), "args": ids},
                {"ph": "s", "id": corr, "pid": e["pid"], "tid": e["tid"], "ts": round(lt, 3), "cat": "ac2g",
                 "name": "ac2g"},
                {"ph": "X", "cat": "kernel", "name": "kernel_" + e["name"].replace("aten::", ""), "pid": 0,
                 "tid": 7, "ts": round(ks, 3), "dur": round(kd, 3), "args": {**ids, "device": 0, "stream": 7}},
                {"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": round(ks, 3), "cat": "ac2g", "name": "ac2g",
                 "bp": "e"}]
        gpu_free = ks + kd + 0.5
        corr += 1
    ev += new
    ev += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": 7, "args": {"name": "stream 7"}}]
    return corr - 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the trace to write (.json)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--microbatches", type=int, default=2)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        cpu = Path(d) / "cpu.json"
        profile_run(cpu, a.hidden, a.layers, a.microbatches)
        doc = json.loads(cpu.read_text())
    n = add_gpu(doc)
    Path(a.out).write_text(json.dumps(doc))
    print(f"{a.out}: {n} kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
