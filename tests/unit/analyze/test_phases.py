"""Step, phase and micro-batch of each kernel (issue 15, part 1): the exact innermost window
around the launch whatever the number of sibling windows, micro-batches numbered by the outermost
window of a phase (Megatron's ``## forward ##`` inside ``forward_step`` is one micro-batch), and
recompute windows of a real activation-checkpointing run (torch, CPU)."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pyarrow.dataset as ds
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.analyze.phases import outer_ordinals

from kineto import KinetoDoc
from support import ROOT


def kernels(outdir):
    t = ds.dataset(outdir / "kernels", partitioning="hive").to_table().sort_by("correlation")
    return {c: t[c].to_pylist() for c in t.column_names}


def run(doc, tmp_path):
    out = tmp_path / "an"
    analyze([doc.write(tmp_path / "t.json")], out, AnalyzeOptions(jobs=1))
    return kernels(out)


def test_nested_windows_of_one_phase_are_one_microbatch(tmp_path):
    """forward_step > ## forward ## twice, then two backward_steps: four forward launches
    (inside and outside the inner window) are micro-batches 0, 0, 1, 1 (was 1, 0, 3, 2:
    every window of the phase counted)."""
    d = KinetoDoc().cpu("ProfilerStep#5", 0, 1000)
    for k, base in enumerate((10, 200)):
        d.cpu("forward_step", base, 100).cpu("## forward ##", base + 10, 80)
        d.launch(base + 20, 500 + 10 * k)              # inside ## forward ##
        d.launch(base + 95, 505 + 10 * k)              # in forward_step only
    for k, base in enumerate((400, 600)):
        d.cpu("backward_step", base, 100).cpu("## backward ##", base + 10, 80)
        d.launch(base + 20, 700 + 10 * k)
        d.launch(base + 95, 705 + 10 * k)
    k = run(d, tmp_path)
    assert k["phase"] == ["forward"] * 4 + ["backward"] * 4
    assert k["microbatch"] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert k["step"] == [5] * 8


def test_many_siblings_before_the_launch(tmp_path):
    """A recompute window with ten short sibling windows of the same kind before the launch,
    inside a backward_step that has ten sibling ProfilerStep-like and phase windows: the launch
    is recompute, step 3, micro-batch 0 (the old guess looked 8 windows back: backward)."""
    d = KinetoDoc().cpu("ProfilerStep#3", 0, 5000).cpu("backward_step", 100, 4000)
    d.cpu("CheckpointFunctionBackward", 200, 2000, cat="cpu_op")
    for j in range(10):
        d.cpu("torch/utils/checkpoint.py(99): unpack", 210 + 10 * j, 5, cat="python_function")
    d.launch(400, 4500)
    k = run(d, tmp_path)
    assert (k["phase"], k["step"], k["microbatch"]) == (["recompute"], [3], [0])


def test_ten_phase_siblings_inside_a_window(tmp_path):
    """optimizer > ten Optimizer.zero_grad# windows, then a launch in the optimizer window
    (was: no window found within 8 positions, phase other)."""
    d = KinetoDoc().cpu("ProfilerStep#1", 0, 5000).cpu("optimizer", 100, 4000)
    for j in range(10):
        d.cpu(f"Optimizer.zero_grad#{j}", 110 + 10 * j, 5)
    d.launch(900, 4500)
    assert run(d, tmp_path)["phase"] == ["optimizer"]


def test_outer_ordinals_by_hand():
    ws = np.array([0, 5, 10, 20, 25, 40, 50], np.int64)
    we = np.array([15, 8, 12, 30, 28, 45, 60], np.int64)
    step = np.array([0, 0, 0, 0, 0, 1, 1], np.int64)
    # outer windows: [0,15) [20,30) in step 0; [40,45) [50,60) in step 1; the others inside them
    assert outer_ordinals(ws, we, step).tolist() == [0, 0, 0, 1, 1, 0, 1]
    p = [6, 2, 4, 0, 5, 1, 3]                          # any input order
    assert outer_ordinals(ws[p], we[p], step[p]).tolist() == [1, 0, 1, 0, 0, 0, 1]
    assert outer_ordinals(ws[:0], we[:0], step[:0]).tolist() == []


# -- a real activation-checkpointing run ---------------------------------------------------

@pytest.fixture(scope="module")
def ckpt_trace(tmp_path_factory):
    pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("ckpt") / "ckpt.json"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_ckpt_trace.py"), str(path)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"torch could not profile a checkpointed run here: {r.stderr[-300:]}")
    return path


def test_kernels_under_recompute_windows_are_recompute(ckpt_trace, tmp_path):
    """Every kernel launched inside a ``torch/utils/checkpoint.py(...): recompute_fn`` window (found
    here with a plain json.load) is ``recompute``; the other backward_step kernels stay backward,
    and both keep the micro-batch of their backward_step."""
    doc = json.loads(ckpt_trace.read_text())
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    rf = [(e["ts"], e["ts"] + e["dur"]) for e in ev if re.search(r"checkpoint\.py\(\d+\): recompute_fn$", e["name"])]
    bw = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"] == "backward_step")
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e["name"] == "cudaLaunchKernel"}
    assert len(rf) >= 4 and len(bw) == 2
    out = tmp_path / "an"
    analyze([ckpt_trace], out, AnalyzeOptions(jobs=1))
    k = kernels(out)
    under = [any(a <= launch[c] < b for a, b in rf) for c in k["correlation"]]
    in_bw = [next((i for i, (a, b) in enumerate(bw) if a <= launch[c] < b), None) for c in k["correlation"]]
    assert sum(under) >= 20
    for u, b, ph, mb in zip(under, in_bw, k["phase"], k["microbatch"]):
        if u:
            assert (ph, mb) == ("recompute", b)
        elif b is not None:
            assert (ph, mb) == ("backward", b)


# -- where an attribution comes from (part 2) ---------------------------------------------------

def test_kernel_without_launch_is_placed_by_its_gpu_start(tmp_path):
    """A kernel whose launch is not in the trace (launched before the profiler started) takes the
    step and phase around its GPU start, and says so; a launched kernel those of its launch."""
    d = KinetoDoc().cpu("ProfilerStep#7", 0, 100).cpu("forward_step", 10, 50).cpu("ProfilerStep#8", 100, 100)
    d.cpu("backward_step", 120, 50)
    d.kernel(20, 5, name="early")                      # no launch: GPU start 20 -> step 7, forward
    d.launch(30, 130, 5, name="late")                  # launched in step 7's forward, runs in step 8
    k = run(d, tmp_path)
    got = {n: (s, p, a) for n, s, p, a in zip(k["name"], k["step"], k["phase"], k["attributed_by"])}
    assert got == {"early": (7, "forward", "gpu_start"), "late": (7, "forward", "launch")}


def test_gpu_annotation_is_the_shortest_overlapping_one_on_its_stream(tmp_path):
    """gpu_user_annotation events: each kernel gets the shortest one overlapping it on its own
    stream (HolisticTraceAnalysis' rule), the CPU-side ``annotation`` stays the launch's."""
    d = KinetoDoc().cpu("ProfilerStep#1", 0, 1000).cpu("cpu_outer", 5, 100)
    d.gpu_annotation("gpu_outer", 100, 400).gpu_annotation("gpu_inner", 150, 50)
    d.gpu_annotation("other_stream", 100, 400, stream=9)
    d.launch(10, 120, 10, name="k_outer")              # only gpu_outer
    d.launch(11, 190, 20, name="k_straddle")           # overlaps gpu_inner's end: the shorter wins
    d.launch(12, 600, 10, name="k_none")
    d.launch(13, 160, 10, name="k_stream9", stream=9)
    k = run(d, tmp_path)
    got = dict(zip(k["name"], zip(k["gpu_annotation"], k["annotation"])))
    assert got == {"k_outer": ("gpu_outer", "cpu_outer"), "k_straddle": ("gpu_inner", "cpu_outer"),
                   "k_none": ("", "cpu_outer"), "k_stream9": ("other_stream", "cpu_outer")}


@pytest.mark.parametrize("trace", ["a100_resnet_ddp_rank0_of2", "h100_qwen_inference", "v100_float_ns_rank0"])
def test_real_traces_gpu_annotation_and_attribution_by_plain_json(trace, tmp_path):
    """On real traces: every GPU event's gpu_annotation is the shortest gpu_user_annotation
    overlapping it on its (pid, tid) (ties: latest start, then last in file), and attributed_by is
    ``launch`` exactly when a CPU event carries its correlation id -- both worked out here from a
    plain json.load."""
    from support import REAL, exact_ns, load_json, need_shared
    need_shared()
    src = REAL / f"{trace}.json.gz"
    ev = [e for e in load_json(src, decimal=True)["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
    annos: dict = {}
    for i, e in enumerate(ev):
        if e.get("cat") == "gpu_user_annotation":
            annos.setdefault((e["pid"], e["tid"]), []).append((exact_ns(e["ts"]), exact_ns(e["ts"]) + exact_ns(e["dur"]),
                                                              i, e["name"]))
    cpu_corr = {(e.get("args") or {}).get("correlation") for e in ev if e.get("cat") not in gpu_cats
                and e.get("cat") != "gpu_user_annotation"}
    want = []
    for e in ev:
        if e.get("cat") not in gpu_cats or exact_ns(e["dur"]) < 0:
            continue
        s, d = exact_ns(e["ts"]), exact_ns(e["dur"])
        hits = [(b - a, -a, -i, n) for a, b, i, n in annos.get((e["pid"], e["tid"]), [])
                if a < b and (a <= s < b if d == 0 else (a < s + d and s < b))]
        c = (e.get("args") or {}).get("correlation")
        want.append((s, d, e["name"], min(hits)[3] if hits else "",
                     "launch" if c is not None and c in cpu_corr else "gpu_start"))
    out = tmp_path / "an"
    analyze([src], out, AnalyzeOptions(jobs=1))
    k = kernels(out)
    got = list(zip(k["ts_ns"], k["dur_ns"], k["name"], k["gpu_annotation"], k["attributed_by"]))
    assert sorted(got) == sorted(want)
    assert sum(1 for w in want if w[3]) > 0
