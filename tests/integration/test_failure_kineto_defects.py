"""Failure behaviour, round three (issue 33), what real traces do: GPU kernels overlapping on one
stream (class 8) are counted apart from CPU bad nesting; Kineto's unescaped double quotes in
dynamo frame names (class 7, pytorch#146900) are repaired and counted.  Expected values come from
the raw JSON with plain Python.  Helpers: tests/hostile.py."""
from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pyarrow.dataset as ds

from hostile import cli, real

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}


def _ns(v) -> int:
    return int(Decimal(str(v)) * 1000)


def _overlaps(path) -> tuple:
    """(CPU bad nesting, GPU stream overlaps) of the raw JSON: per (pid, tid) track, X slices by
    start then end descending; a slice starting inside the innermost open one and ending after it
    is bad (Perfetto cannot nest it).  GPU activity slices form their own track."""
    doc = json.loads(Path(path).read_bytes(), parse_float=Decimal)
    tracks = {}
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or not isinstance(e.get("dur"), (int, Decimal)) or e["dur"] < 0:
            continue
        gpu = e.get("cat") in GPU_CATS
        s = _ns(e["ts"])
        tracks.setdefault((gpu, repr(e["pid"]), repr(e["tid"])), []).append((s, s + _ns(e["dur"])))
    bad = [0, 0]
    for (gpu, _, _), sl in tracks.items():
        stack = []
        for s, e in sorted(sl, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= s:
                stack.pop()
            if stack and e > stack[-1]:
                bad[gpu] += 1
            else:
                stack.append(e)
    return tuple(bad)


def _shifted_kernel(path) -> int:
    """Put a copy of the file's first kernel that starts half-way through it on its stream (as
    clock jitter or a CUDA graph replay leave them); returns the kernel's dur in ns."""
    b = Path(path).read_bytes()
    doc = json.loads(b)
    k = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e.get("dur", 0) >= 2)
    twin = dict(k, name="OVERLAPPING_" + k["name"], ts=k["ts"] + k["dur"] / 2)
    j = b.index(b"[", b.index(b'"traceEvents"')) + 1
    Path(path).write_bytes(b[:j] + json.dumps(twin).encode() + b"," + b[j:])
    return k["dur"]


def _validate(path) -> dict:
    r = cli("validate", "--json", path)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def test_gpu_kernels_overlapping_on_a_stream_are_counted_apart(tmp_path):
    src = real("a100_resnet_ddp_rank0_of2.json.gz", tmp_path / "r0.json")
    cpu0, gpu0 = _overlaps(src)
    n0 = len(json.loads(src.read_bytes())["traceEvents"])
    _shifted_kernel(src)
    cpu, gpu = _overlaps(src)
    assert cpu == cpu0 and gpu == gpu0 + 1
    rep = _validate(src)
    rep = rep[0] if isinstance(rep, list) else rep
    assert rep["problems"]["bad_nesting"] == cpu                 # CPU bad nesting unchanged by the kernel
    assert rep["notices"].get("gpu_stream_overlap") == gpu
    assert rep["events"] == n0 + 1

    m = cli("merge", src, "-o", tmp_path / "merged.json")
    assert m.returncode == 0, m.stderr
    assert f"{gpu:,} GPU kernels overlap another on their stream" in m.stdout + m.stderr


# names as Kineto wrote them before kineto#1459 (with_stack on torch.compile code; pytorch#146900)
DYNAMO_NAMES = ['{"device": "cpu", "dtype": "float32"}(12): run',
                'torch/_dynamo/eval_frame.py(632): _fn "compiled" wrapper',
                '<module "x">(3): <lambda>']


def _quoted_names(path) -> list:
    """Give three cpu_op events of the file the names above, written with their quotes unescaped
    as old Kineto wrote them; returns the original names."""
    b = Path(path).read_bytes()
    key = b'"cat": "cpu_op", "name": "'
    at, orig = 0, []
    for k, name in enumerate(DYNAMO_NAMES):
        for _ in range(1 + 50 * k):
            at = b.index(key, at) + len(key)
        end = b.index(b'"', at)
        orig.append(b[at:end].decode())
        b = b[:at] + name.encode() + b[end:]
    Path(path).write_bytes(b)
    return orig


def test_kineto_unescaped_quotes_are_repaired_and_counted(tmp_path):
    clean = real("a100_recsys_sampled_rank0_of128.json.gz", tmp_path / "clean" / "rank0.json")
    src = real("a100_recsys_sampled_rank0_of128.json.gz", tmp_path / "bad" / "rank0.json")
    n_events = len(json.loads(clean.read_bytes())["traceEvents"])
    _quoted_names(src)
    try:
        json.loads(src.read_bytes())
        raise AssertionError("the injected trace should be invalid JSON")
    except json.JSONDecodeError:
        pass
    n = len(DYNAMO_NAMES)

    rep = _validate(src)
    rep = rep[0] if isinstance(rep, list) else rep
    assert rep["events"] == n_events and rep["notices"]["repaired_event"] == n

    m = cli("merge", src, "-o", tmp_path / "merged.json")
    assert m.returncode == 0, m.stderr
    assert f"{n} events repaired" in m.stderr
    out = json.loads((tmp_path / "merged.json").read_bytes())
    assert out["streamtrace"]["ranks"][0]["repaired_events"] == n
    m0 = cli("merge", clean, "-o", tmp_path / "merged0.json")
    assert m0.returncode == 0, m0.stderr
    out0 = json.loads((tmp_path / "merged0.json").read_bytes())
    assert len(out["traceEvents"]) == len(out0["traceEvents"])          # every event kept
    names = [e.get("name") for e in out["traceEvents"]]
    assert all(names.count(t) == 1 for t in DYNAMO_NAMES)               # the text meant, exactly

    for d, f in (("an0", clean), ("an", src)):
        a = cli("analyze", f, "-o", tmp_path / d)
        assert a.returncode == 0, a.stderr
    assert f"{n} events repaired" in a.stderr
    summ = json.loads((tmp_path / "an" / "summary.json").read_text())
    assert any(f"{n} events repaired" in w for w in summ["ranks"][0]["warnings"])
    ops = ds.dataset(tmp_path / "an" / "ops", format="parquet").to_table().column("name").to_pylist()
    ops0 = ds.dataset(tmp_path / "an0" / "ops", format="parquet").to_table().column("name").to_pylist()
    assert len(ops) == len(ops0) and all(ops.count(t) == 1 for t in DYNAMO_NAMES)
