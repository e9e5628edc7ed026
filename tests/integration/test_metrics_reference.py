"""device_metrics against the shared reference metrics of the real Kineto traces, recomputed
independently of the package (``tests/metrics_reference.py``: plain ``json`` + ``gzip``, exact
int64 ns).  Definitions: ``shared/traces/README.md``.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from metrics_reference import (FLOAT64_REFERENCE_KEYS, REFERENCE, TRACES, close_enough, exact_metrics,
                               float64_metrics, load_devices, trace_names)
from streamtrace.analyze.metrics import COMM, COMPUTE, MEMORY, METRIC_KEYS, NOT_GPU, classify_gpu_event, device_metrics


@pytest.mark.parametrize("trace", trace_names() or ["<no shared traces>"])
def test_device_metrics_match_reference(trace):
    if not TRACES.is_dir():
        pytest.skip(f"shared traces not present at {TRACES}")
    ref_path = REFERENCE / trace.replace(".json.gz", ".metrics.json")
    if not ref_path.is_file():
        pytest.skip(f"no reference metrics for {trace}")
    reference = json.loads(ref_path.read_text())

    devices = load_devices(TRACES / trace)
    assert sorted(devices) == sorted(reference["devices"])

    float64_keys = FLOAT64_REFERENCE_KEYS.get(trace, set())
    mismatches = []
    for pid, want in reference["devices"].items():
        got = device_metrics(*devices[pid])
        assert set(got) == set(want) == set(METRIC_KEYS)
        # exact invariants (the union can never exceed the sum of durations)
        assert got["busy_us"] <= got["kernel_time_us"] + 0.0005
        assert got["overlap_us"] <= min(got["comm_us"], got["compute_us"]) + 0.0005
        float64 = exact = None
        for key in METRIC_KEYS:
            if close_enough(got[key], want[key]):
                continue
            if key in float64_keys:
                if float64 is None:
                    float64 = float64_metrics(TRACES / trace, pid)
                    exact = exact_metrics(*devices[pid])
                if close_enough(float64[key], want[key]) and close_enough(got[key], exact[key]):
                    continue  # explained: the reference carries float64 rounding
            mismatches.append(f"device {pid} {key}: got {got[key]!r}, reference {want[key]!r}")
    assert not mismatches, "\n".join(mismatches)


# --------------------------------------------------------------------------
# small hand-checked cases (need no shared data)
# --------------------------------------------------------------------------

def test_classify_gpu_event():
    assert classify_gpu_event("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float") == COMM
    assert classify_gpu_event("kernel", "ncclDevKernel_SendRecv") == COMM
    assert classify_gpu_event("kernel", "void RCCL_kernel()") == COMM
    assert classify_gpu_event("Kernel", "void foo_NcClbar()") == COMM
    assert classify_gpu_event("kernel", "void at::native::elementwise_kernel<>()") == COMPUTE
    assert classify_gpu_event("kernel", None) == COMPUTE
    assert classify_gpu_event("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)") == MEMORY
    assert classify_gpu_event("gpu_memset", "Memset (Device)") == MEMORY
    assert classify_gpu_event("Memcpy", "Memcpy DtoH") == MEMORY
    assert classify_gpu_event("Memset", "Memset") == MEMORY
    # memcpy named like a collective is still memory: the comm rule is for kernels
    assert classify_gpu_event("gpu_memcpy", "nccl staging copy") == MEMORY
    for cat in ("cpu_op", "cuda_runtime", "user_annotation", "gpu_user_annotation",
                "ac2g", "KERNEL", "", None):
        assert classify_gpu_event(cat, "ncclKernel") == NOT_GPU


def test_device_metrics_hand_checked():
    # compute [0,10) and [20,30); comm [5,25); memory [40,45); a zero-length
    # compute event at 50 (counted, covers nothing); a negative one (ignored).
    start = np.array([0, 20, 5, 40, 50, 60], dtype=np.int64) * 1000
    end = np.array([10, 30, 25, 45, 50, 55], dtype=np.int64) * 1000
    kind = np.array([COMPUTE, COMPUTE, COMM, MEMORY, COMPUTE, COMM], dtype=np.int8)
    m = device_metrics(start, end, kind)
    assert m == {
        "gpu_events": 5,
        "kernel_time_us": 45.0,
        "span_us": 50.0,
        "busy_us": 35.0,
        "idle_us": 15.0,
        "compute_us": 20.0,
        "comm_us": 20.0,
        "memory_us": 5.0,
        "overlap_us": 10.0,
        "exposed_comm_us": 10.0,
        "overlap_pct": 50.0,
    }


def test_device_metrics_rounding_and_no_comm():
    m = device_metrics([1_000], [22_355], np.array([COMPUTE], dtype=np.int8))
    assert m["busy_us"] == 21.355 and m["kernel_time_us"] == 21.355
    assert m["comm_us"] == 0.0 and m["overlap_pct"] is None
    # pct rounded to 3 decimals: overlap 1 of comm 3
    m = device_metrics([0, 0], [3, 1], np.array([COMM, COMPUTE], dtype=np.int8))
    assert m["overlap_pct"] == 33.333


def test_device_metrics_empty_and_errors():
    m = device_metrics([], [], np.array([], dtype=np.int8))
    assert m["gpu_events"] == 0 and m["span_us"] == 0.0 and m["overlap_pct"] is None
    assert set(m) == set(METRIC_KEYS)
    # only negative-duration events: all ignored
    m = device_metrics([10], [5], np.array([COMM], dtype=np.int8))
    assert m["gpu_events"] == 0 and m["comm_us"] == 0.0
    with pytest.raises(ValueError):
        device_metrics([0, 1], [1], np.array([0, 0], dtype=np.int8))
    with pytest.raises(ValueError):
        device_metrics([0], [1], np.array([3], dtype=np.int8))
    with pytest.raises(ValueError):
        device_metrics([0], [1], np.array([NOT_GPU], dtype=np.int8))
