"""The two ways ``CostedOps`` finds the costed ops (analyze's own pass hands it each batch's columns;
the standalone ``costed_ops`` pass reads names from the bytes) against the ops found in the raw trace
with plain ``json``; ``roofline_columns`` (vectorised) against ``roofline`` (one op at a time), value
for value, nulls included."""
from __future__ import annotations

import gzip
import json
import math
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import REAL, need_shared
from streamtrace.analyze.opcost import COSTED, op_cost
from streamtrace.analyze.opperf import EXACT, ROOFLINE, CostedOps, costed_ops, roofline, roofline_columns
from streamtrace.events.ingest import ingest
from streamtrace.events.store import MemoryStore
from streamtrace.topology.hardware import gpu_spec

TRACES = ["h100_qwen_inference.json.gz", "a100_rank3_of8.json.gz", "mi250_rocm_minitoy.json.gz",
          "cpu_only_gloo_rank34_of300.json.gz", "a100_recsys_sampled_rank0_of128.json.gz"]


def _by_hand(path) -> list:
    """``(pid, tid, ts_ns, name, flops)`` of every complete event of a costed name whose recorded shapes
    ``op_cost`` can cost, from the whole document read with ``json`` (before the innermost rule)."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    out = []
    for e in doc["traceEvents"]:
        a = e.get("args") or {}
        if e.get("ph") != "X" or e.get("name") not in COSTED or "Input Dims" not in a:
            continue
        c = op_cost(e["name"], a.get("Input Dims"), a.get("Input type"))
        if c is not None:
            out.append((e["pid"], e["tid"], int(Decimal(str(e["ts"])) * 1000), e["name"], c[0]))
    return sorted(out)


def _taken(ops: CostedOps) -> list:
    return sorted((r[0], r[1], r[2], r[4], r[8]) for r in ops._out)


@pytest.mark.parametrize("name", TRACES)
def test_both_paths_take_the_ops_found_by_hand(name):
    need_shared()
    path = REAL / name
    want = _by_hand(path)
    assert want, "the trace holds costed ops"
    with_cols = CostedOps()
    ingest(path, MemoryStore(1 << 16), frozenset({"kernel", "gpu_memcpy", "gpu_memset"}), on_batch=with_cols.add)
    from_bytes = CostedOps()
    from streamtrace.trace.reader import TraceReader
    for b in TraceReader(path).raw_batches(decode=False):
        from_bytes.add(b)
    assert _taken(with_cols) == want
    assert _taken(from_bytes) == want
    rows, _ = costed_ops(path)
    assert rows == with_cols.rows()


_int = st.one_of(st.just(0), st.integers(1, 10**6), st.integers(1, EXACT - 1))


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(_int, _int, _int, st.sampled_from([None, "fp32", "bf16", "fp16", "fp8", "fp64", "tf32", "int8"])),
                    min_size=1, max_size=30),
       gpu=st.sampled_from([None, "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB"]),
       big=st.booleans())
def test_roofline_columns_equal_roofline_op_by_op(ops, gpu, big):
    spec = gpu_spec(gpu) if gpu else None
    if big:                                   # past 2**53: the op-by-op fallback
        ops[0] = (EXACT + 1, ops[0][1], ops[0][2], ops[0][3])
    flops, nbytes, busy, dtypes = (list(v) for v in zip(*ops))
    got = roofline_columns(flops, nbytes, busy, spec, dtypes)
    assert list(got) == list(ROOFLINE)
    want = [roofline(f, b, g, spec, d) for f, b, g, d in ops]
    for k in ROOFLINE:
        col = got[k].to_pylist()
        for x, w in zip(col, (r[k] for r in want)):
            assert x == w or (isinstance(x, float) and isinstance(w, float) and math.isnan(x) and math.isnan(w)), k
