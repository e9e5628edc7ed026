"""Property tests of the GPU side of a step graph (``streamtrace.kernels.stepgpu``) against its NumPy
twin (the rules as ``critical_gpu`` ran them before the kernel), plus a case checked by hand."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.kernels.reference import gpu_edges_py, inferred_waits_py, prev_on_stream_py
from streamtrace.kernels.sentinels import NEG
from streamtrace.kernels.stepgpu import gpu_edges, gpu_step, inferred_waits, prev_on_stream

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CATS = np.arange(10, 16, dtype=np.int8)          # six distinct codes: compute, memcpy, launch, gap, wait, queued


@st.composite
def steps(draw):
    """Up to 10 GPU events on 2 devices x 3 streams, sorted by device, stream, start, with ties and
    zero-length ones; launches (some missing, some after the start), wait calls or none, work queued
    before the step or none."""
    n = draw(st.integers(0, 10))
    ev = sorted(draw(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(0, 30),
                                        st.sampled_from([0, 0, 1, 4, 9])), min_size=n, max_size=n)))
    i64 = lambda x: np.asarray(x, np.int64).reshape(-1)  # noqa: E731
    dev, stream, ts = i64([e[0] for e in ev]), i64([e[1] for e in ev]), i64([e[2] for e in ev])
    te = ts + i64([e[3] for e in ev])
    launch_t = i64(draw(st.lists(st.integers(-5, 35), min_size=n, max_size=n)))
    launch_node = i64([draw(st.sampled_from([-1, 100 + i])) for i in range(n)])
    launch_t = np.where(launch_node >= 0, launch_t, 0)
    waits = np.sort(i64(draw(st.lists(st.integers(-5, 35), max_size=4))))
    prior = i64([draw(st.sampled_from([NEG, NEG, 0, 3, 12])) for _ in range(n)])
    flags = lambda: np.asarray(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool).reshape(-1)  # noqa: E731
    return dev, stream, ts, te, flags(), flags(), launch_node, launch_t, waits, draw(st.booleans()), prior


@SETTINGS
@given(steps(), st.integers(-3, 8))
def test_kernels_equal_the_twin(g, s0):
    dev, stream, ts, te, comm, memory, launch_node, launch_t, waits, has_waits, prior = g
    prev = prev_on_stream(dev, stream)
    assert prev.tolist() == prev_on_stream_py(dev, stream).tolist()
    x = inferred_waits(dev, stream, ts, te, prev, launch_node, launch_t, s0, waits, has_waits)
    assert x.tolist() == inferred_waits_py(dev, stream, ts, te, prev, launch_node, launch_t, s0, waits,
                                           has_waits).tolist()
    n = len(ts)
    sn = 2 * np.arange(n, dtype=np.int64)
    en = np.where(te == ts, sn, sn + 1)
    args = (ts, te, comm, memory, sn, en, launch_node, launch_t, prev, x, prior, 999, s0, CATS)
    got, want = gpu_edges(*args), gpu_edges_py(*args)
    for a, b in zip(got, want):
        assert a.tolist() == b.tolist()
    step = (dev, stream, ts, te, comm, memory, sn, en, launch_node, launch_t)
    tail = (prior, 999, s0, CATS)
    for a, b in zip(gpu_step(*step, np.zeros(0, np.int64), False, waits, has_waits, *tail), want):
        assert a.tolist() == b.tolist()                            # the inferred waits: the same edges
    links = np.where(np.arange(n) % 2 == 1, np.arange(n) - 1, -1).astype(np.int64)      # links given instead
    want = gpu_edges_py(ts, te, comm, memory, sn, en, launch_node, launch_t, prev, links, *tail)
    for a, b in zip(gpu_step(*step, links, True, waits, has_waits, *tail), want):
        assert a.tolist() == b.tolist()
    src, dst, w, cat, row = got
    assert set(dst.tolist()) >= set(sn.tolist())                 # every event's start waits for something
    for wv, c, r in zip(w.tolist(), cat.tolist(), row.tolist()):     # only a queued edge of an event
        assert wv >= 0 or (c == CATS[5] and ts[r] < s0)            # before the step's start weighs < 0


def test_by_hand():
    """Stream 0: a kernel [0, 10] launched at -2, then a memcpy [12, 15] launched at 11; stream 1: a
    kernel [11, 20] with no launch, after the first ended on stream 0 (its inferred wait)."""
    dev, stream = np.zeros(3, np.int64), np.asarray([0, 0, 1], np.int64)
    ts, te = np.asarray([0, 12, 11], np.int64), np.asarray([10, 15, 20], np.int64)
    launch_node, launch_t = np.asarray([50, 51, -1], np.int64), np.asarray([-2, 11, 0], np.int64)
    prev = prev_on_stream(dev, stream)
    x = inferred_waits(dev, stream, ts, te, prev, launch_node, launch_t, -5, np.zeros(0, np.int64), False)
    assert prev.tolist() == [-1, 0, -1] and x.tolist() == [-1, -1, 0]
    sn, en = np.asarray([0, 2, 4], np.int64), np.asarray([1, 3, 5], np.int64)
    src, dst, w, cat, row = gpu_edges(ts, te, np.zeros(3, bool), np.asarray([False, True, False]), sn, en,
                                      launch_node, launch_t, prev, x, np.full(3, NEG, np.int64), 99, -5, CATS)
    assert list(zip(src.tolist(), dst.tolist(), w.tolist(), cat.tolist(), row.tolist())) == [
        (0, 1, 10, 10, 0), (2, 3, 3, 11, 1), (4, 5, 9, 10, 2),        # durations (the memcpy's code 11)
        (50, 0, 2, 12, 0), (51, 2, 1, 12, 1),                         # launches: each the latest candidate
        (1, 2, 0, 14, 1),                                             # stream order: ended at 10 < launch at 11
        (1, 4, 1, 13, 2)]                                             # stream 1 waited for stream 0's kernel
