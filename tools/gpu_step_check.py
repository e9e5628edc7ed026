#!/usr/bin/env python3
"""Check streamtrace's efficiency and critical-path numbers on a real GPU: train a small GPT
(bf16, SDPA causal attention, AdamW) for a few steps under ``torch.profiler`` through
``streamtrace.capture``, run the epilogue on the traces, and compare with what torch measures
itself: per-op FLOPs against ``torch.utils.flop_counter.FlopCounterMode`` over one step, MFU against
the FLOPs / wall time of unprofiled steps.  Needs torch with a CUDA GPU (CPU works with ``--small``,
for a smoke run); nothing in the test suite depends on it.

    python tools/gpu_step_check.py OUT            # OUT/run (traces), OUT/ep (epilogue), OUT/check.json
    python tools/gpu_step_check.py OUT --small    # a tiny model, CPU is enough

Results of a run on one H200 are in bench/RESULTS.md ("Real GPU step")."""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from streamtrace import capture


SMALL = dict(zip("LDHTBV", (2, 64, 4, 32, 2, 512)))
"""The tiny GPT of ``--small`` (CPU is enough)."""


def gpt(dims, dev, dtype=torch.bfloat16):
    """A GPT of ``dims`` (L blocks, width D, H heads, T tokens, batch B, vocabulary V): pre-norm,
    SDPA causal attention, GELU MLP 4x, weights in ``dtype``, AdamW.  Returns (model, optimiser)."""
    L, D, H, T, B, V = (dims[k] for k in "LDHTBV")

    class Block(nn.Module):
        def __init__(s):
            super().__init__()
            s.ln1, s.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            s.qkv, s.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            s.fc1, s.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(s, x):
            q, k, v = s.qkv(s.ln1(x)).view(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
            x = x + s.proj(a)
            return x + s.fc2(F.gelu(s.fc1(s.ln2(x))))

    class GPT(nn.Module):
        def __init__(s):
            super().__init__()
            s.emb = nn.Embedding(V, D)
            s.blocks = nn.ModuleList(Block() for _ in range(L))
            s.ln, s.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

        def forward(s, idx):
            x = s.emb(idx)
            for b in s.blocks:
                x = b(x)
            return s.head(s.ln(x))

    torch.manual_seed(0)
    model = GPT().to(dev, dtype)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def model_and_step(small, dev):
    """The GPT of this check (bf16); returns the shape dict and a function running one training step."""
    dims = SMALL if small else dict(zip("LDHTBV", (8, 2048, 16, 2048, 8, 32000)))
    B, T, V = dims["B"], dims["T"], dims["V"]
    model, opt = gpt(dims, dev)
    idx = torch.randint(0, V, (B, T), device=dev)
    tgt = torch.randint(0, V, (B, T), device=dev)

    def step():
        logits = model(idx)
        F.cross_entropy(logits.float().view(-1, V), tgt.view(-1)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    shape = dims | {"params": sum(p.numel() for p in model.parameters())}
    return shape, step


def train(out, small):
    """FlopCounterMode over one step, 5 timed unprofiled steps, then 7 steps profiled (wait 1,
    warmup 2, active 3) into ``out`` through streamtrace's capture.  Returns the facts as a dict."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    shape, step = model_and_step(small, dev)
    fc = FlopCounterMode(display=False)
    with fc:
        step()
    per_op = {str(op): int(n) for op, n in fc.get_flop_counts().get("Global", {}).items()}
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    for _ in range(3):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(5):
        step()
    sync()
    step_s = (time.perf_counter() - t0) / 5
    capture.dump_topology(out, groups={}, world_size=1)
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev == "cuda" else [])
    with torch.profiler.profile(activities=acts, record_shapes=True,
                                schedule=torch.profiler.schedule(wait=1, warmup=2, active=3, repeat=1),
                                on_trace_ready=capture.trace_handler(out)) as prof:
        for _ in range(7):
            step()
            prof.step()
    tokens = shape["B"] * shape["T"]
    return shape | {"tokens_per_step": tokens, "flops_per_step": int(fc.get_total_flops()),
                    "flops_per_token": fc.get_total_flops() / tokens, "per_op_flops": per_op,
                    "unprofiled_step_s": step_s, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
                    "torch": torch.__version__}


def compare(facts, ep):
    """streamtrace's numbers (the epilogue in ``ep``) beside torch's own."""
    import pyarrow.parquet as pq
    rep = json.load(open(os.path.join(ep, "report.json")))
    eff = rep.get("efficiency") or {}
    op = pq.read_table(os.path.join(ep, "aggregate", "op_perf.parquet")).to_pylist()
    steps = 3
    ours = {}
    for r in op:
        key = r["name"].replace("::", ".")
        ours[key] = ours.get(key, 0) + r["flops"] / steps
    ratio = {k: ours.get(k, 0) / v for k, v in facts["per_op_flops"].items() if v}
    peak = (eff.get("inputs") or {}).get("peak_tflops")
    mfu_wall = (facts["flops_per_step"] / facts["unprofiled_step_s"] / (peak * 1e12) * 100) if peak else None
    return {"op_flops_ratio_to_flopcounter": ratio, "mfu_report": (eff.get("overall") or {}).get("mfu_pct"),
            "mfu_unprofiled_wall": mfu_wall, "peak_tflops": peak}



def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--small", action="store_true", help="a tiny model (CPU is enough)")
    a = ap.parse_args(argv)
    run, ep = os.path.join(a.out, "run"), os.path.join(a.out, "ep")
    facts = train(run, a.small)
    json.dump(facts, open(os.path.join(a.out, "flopcounter.json"), "w"), indent=1)
    subprocess.run([sys.executable, "-m", "streamtrace", "epilogue", run, "-o", ep, "-q",
                    "--tokens-per-step", str(facts["tokens_per_step"]),
                    "--flops-per-token", repr(facts["flops_per_token"])], check=True)
    out = {k: v for k, v in facts.items() if k != "per_op_flops"} | compare(facts, ep)
    json.dump(out, open(os.path.join(a.out, "check.json"), "w"), indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
