"""The step graphs' lanes and names as codes of a part's ``Texts`` (``streamtrace.aggregate.critical_graph``),
and the what-if's look-ups by text over them (``whatif_changes.EdgeView``)."""
from __future__ import annotations

import re

import numpy as np
from hypothesis import given, strategies as st

from streamtrace.aggregate.critical_graph import Category, StepGraph, Texts, edge_texts
from streamtrace.aggregate.whatif_changes import EdgeView, _thread_id

TEXT = st.one_of(st.none(), st.text(max_size=6), st.sampled_from(["thread 7", "thread 7 (backward)", "aten::mm"]))


@given(st.lists(st.lists(TEXT, max_size=12), max_size=5))
def test_codes_decode_to_the_texts_across_steps(steps):
    # one table for several steps: every step's codes decode with the last step's values (append-only)
    texts = Texts()
    coded = [(x, texts.codes(np.asarray(x, object))) for x in steps]
    values = texts.values()
    assert len(values) == len({(type(v), v) for x in steps for v in x})          # each distinct text once
    for x, c in coded:
        assert c.dtype == np.int32 and values[c].tolist() == x


def test_edges_take_codes_text_and_scalars():
    g = StepGraph()
    a = g.nodes([0, 10, 20, 30])
    g.edges(a[:2], a[1:3], [10, 10], Category.cpu_op, "thread 1", np.asarray(["aten::mm", None], object))
    code = g.texts.code("gemm")
    g.edges(a[2:3], a[3:], [10], Category.compute_kernel, "device 0 stream 7", np.asarray([code]))
    t, cols = g.arrays()
    lane, name = edge_texts(cols)
    assert cols[4].dtype == cols[5].dtype == np.int32
    assert lane.tolist() == ["thread 1", "thread 1", "device 0 stream 7"]
    assert name.tolist() == ["aten::mm", None, "gemm"]


def test_thread_ids_of_lanes_only():
    # a lane names its thread; an event's name that merely starts with "thread" is no lane
    assert [_thread_id(x) for x in ("thread 12", "thread 12 (backward)", "thread -3", "device 0 stream 7",
                                    "thread start", "thread 5x", "", None)] == [12, 12, -3, -1, -1, -1, -1, -1]


@given(st.lists(st.sampled_from(["gemm_a", "gemm_b", "relu", "nccl:all_reduce", "aten::mm"]), min_size=1,
                max_size=20), st.data())
def test_edge_view_look_ups_by_text_equal_a_row_by_row_look_up(names, data):
    # the codes' look-ups (a pattern, a median factor) equal the same look-up on each edge's own text
    texts = Texts()
    texts.code("unused first")
    codes = texts.codes(np.asarray(names, object))
    among = np.asarray(data.draw(st.lists(st.booleans(), min_size=len(names), max_size=len(names))), bool)
    meds = {("gpu", "gemm_a"): 0.5, ("gpu", "relu"): 0.25}
    n = len(names)
    view = EdgeView(np.full(n, Category.compute_kernel, np.int8), np.zeros(n, np.int32), codes, texts.values(),
                    np.zeros(n, np.int64), np.ones(n, np.int64), 0, {}, meds)
    rx = re.compile("gemm|mm", re.IGNORECASE)
    assert view.matches(rx).tolist() == [bool(rx.search(x)) for x in names]
    assert view.matches(rx, among).tolist() == [bool(rx.search(x)) and m for x, m in zip(names, among)]
    assert view.median_factor("gpu", codes).tolist() == [meds.get(("gpu", x), 1.0) for x in names]
