"""A real (tiny) distributed training job profiled with ``streamtrace.topology.capture``, for the
end-to-end test in ``tests/test_capture.py``.

    python tests/e2e_job.py OUT_DIR [--world-size 4] [--tp 2] [--steps 5] [--groups-json FILE]

Spawns ``--world-size`` CPU processes (``torch.multiprocessing.spawn``, gloo, MASTER_ADDR
127.0.0.1 and a free port) training a TP x DP model: one row-parallel Linear, its input
dimension split across the TP group (partial products summed with an all_reduce in the TP
group), gradients averaged with an all_reduce in the DP group, SGD.  Rank order tp-dp (TP
ranks adjacent).  Each rank profiles (when ``capture.should_profile``: set PROFILE_ALLRANKS=1
for all) with ``profiler_schedule()`` (PROFILER_* variables) and ``trace_handler(OUT_DIR)``,
annotating ``forward_step``, ``backward_step`` and ``optimizer``; ``dump_topology(OUT_DIR)``
records the groups.  ``--groups-json`` receives the groups the job created
(``{"tp": [[...]], "dp": [[...]]}``).  ``--megatron DIR``: the groups are made by that
Megatron-LM checkout's ``parallel_state.initialize_model_parallel`` (same layout) and
``dump_topology`` finds them there itself.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HIDDEN = 16


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def layout(world: int, tp: int) -> dict:
    """Groups for rank order tp-dp: rank = t + tp * d."""
    dp = world // tp
    return {"tp": [[t + tp * d for t in range(tp)] for d in range(dp)],
            "dp": [[t + tp * d for d in range(dp)] for t in range(tp)]}


class _TPSum(torch.autograd.Function):
    """Sum of the TP ranks' partial products: all_reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        y = x.clone()
        dist.all_reduce(y, group=group)
        return y

    @staticmethod
    def backward(ctx, dy):
        return dy, None


def import_parallel_state(megatron_dir: str):
    """``megatron.core.parallel_state`` from a Megatron-LM checkout, without running
    ``megatron/core/__init__.py`` (which needs GPU-only packages such as triton)."""
    import types
    for name in ("megatron", "megatron.core", "megatron.core.inference"):
        if name not in sys.modules:
            m = types.ModuleType(name)
            m.__path__ = [os.path.join(megatron_dir, *name.split("."))]
            sys.modules[name] = m
    import megatron.core.parallel_state as ps
    sys.modules["megatron.core"].parallel_state = ps
    return ps


def worker(rank: int, world: int, tp: int, out: str, steps: int, groups_json: str | None,
           megatron: str | None = None):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from streamtrace import capture

    lists = layout(world, tp)
    made = {}
    if megatron:                               # Megatron-LM makes the groups; dump_topology reads them
        ps = import_parallel_state(megatron)
        ps.initialize_model_parallel(tensor_model_parallel_size=tp)
        made = {"tp": ps.get_tensor_model_parallel_group(), "dp": ps.get_data_parallel_group()}
        capture.dump_topology(out)
    else:
        desc = {"tp": "TENSOR_MODEL_PARALLEL_GROUP", "dp": "DATA_PARALLEL_GROUP"}     # Megatron's names
        for dim in ("tp", "dp"):               # every rank creates every group, in the same order
            for ranks in lists[dim]:
                g = dist.new_group(ranks, group_desc=desc[dim])
                if rank in ranks:
                    made[dim] = g
        capture.dump_topology(out, groups=made)
    if rank == 0 and groups_json:
        Path(groups_json).write_text(json.dumps(lists))

    t, d = rank % tp, rank // tp
    shard = HIDDEN // tp
    torch.manual_seed(1234 + t)                # same weights across a DP group, one shard per TP rank
    weight = torch.nn.Parameter(torch.randn(shard, HIDDEN) * 0.1)
    opt = torch.optim.SGD([weight], lr=0.01)
    profile = capture.should_profile(rank) and steps > 0
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                  schedule=capture.profiler_schedule(),
                                  on_trace_ready=capture.trace_handler(out, strict=True)) if profile else None
    if prof:
        prof.start()
    for step in range(steps):
        gen = torch.Generator().manual_seed(100 * step + d)      # each DP rank its own batch
        x = torch.randn(8, HIDDEN, generator=gen)
        with torch.profiler.record_function("forward_step"):
            y = _TPSum.apply(x[:, t * shard:(t + 1) * shard] @ weight, made["tp"])
            loss = (y ** 2).mean()
        with torch.profiler.record_function("backward_step"):
            opt.zero_grad()
            loss.backward()
            dist.all_reduce(weight.grad, group=made["dp"])
            weight.grad /= world // tp
        with torch.profiler.record_function("optimizer"):
            opt.step()
        if prof:
            prof.step()
    if prof:
        prof.stop()
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--groups-json")
    ap.add_argument("--start-method", choices=("fork", "spawn"), default="fork")
    ap.add_argument("--megatron", metavar="MEGATRON_LM_DIR",
                    help="make the groups with this Megatron-LM checkout's parallel_state (order tp-cp-ep-dp-pp)")
    a = ap.parse_args(argv)
    if a.world_size % a.tp:
        ap.error("--world-size must be a multiple of --tp")
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import streamtrace.topology.capture  # noqa: F401  (loaded once here; forked children share it)
    # fork: the children share the parent's loaded torch instead of importing it 4 times (spawn)
    mp.start_processes(worker, args=(a.world_size, a.tp, a.out, a.steps, a.groups_json, a.megatron),
                       nprocs=a.world_size, join=True, start_method=a.start_method)
    return 0


if __name__ == "__main__":
    sys.exit(main())
