"""The report's explaining sections read aggregate's stats tables narrowly (only the columns they use,
names as dictionaries, ``op_stats`` a batch at a time: issue 48) and still state what the rows say:
the sums per name and the cells, computed here from the rows with plain Python."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtrace.report import explain

NAMES = ["aten::mm", "aten::add_", "aten::copy_", "Optimizer.step#AdamW.step", "nccl:all_reduce"]
CATS = ["cpu_op", "user_annotation"]
OP_ROW = st.tuples(st.integers(0, 1), st.integers(-1, 2), st.integers(0, 5), st.sampled_from(NAMES),
                   st.sampled_from(CATS), *[st.integers(0, 10 ** 12)] * 5)


def _write(path, cols, rows, row_group):
    t = pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)},
                 schema=pa.schema([(c, pa.string() if c in ("name", "cat", "kind") else pa.int64()) for c in cols]))
    pq.write_table(t, path, row_group_size=row_group)


@settings(max_examples=40, deadline=None)
@given(st.lists(OP_ROW, min_size=1, max_size=60), st.integers(1, 9), st.integers(1, 20), st.integers(1, 6))
def test_top_ops_from_batches_are_the_rows_sums(tmp_path_factory, rows, batch, row_group, top):
    d = tmp_path_factory.mktemp("agg")
    cols = ["iteration", "step", "rank", "name", "cat", *explain.OP_SUMS]
    _write(d / "op_stats.parquet", cols, rows, row_group)
    old = explain.OP_BATCH_ROWS
    explain.OP_BATCH_ROWS = batch
    try:
        got = explain.build_explain(d, top=top)
    finally:
        explain.OP_BATCH_ROWS = old
    sums: dict = {}
    for r in rows:
        acc = sums.setdefault((r[3], r[4]), [0] * 5)
        for j in range(5):
            acc[j] += r[5 + j]
    want = sorted(({"name": k[0], "cat": k[1], **dict(zip(explain.OP_SUMS, v))} for k, v in sums.items()),
                  key=lambda r: (-r["self_ns"], r["name"]))
    ops = got["ops"]
    # (self_ns, name) order; a tie between two cats of one name may come either way
    assert [(r["self_ns"], r["name"]) for r in ops["rows"]] == [(r["self_ns"], r["name"]) for r in want[:top]]
    for r in ops["rows"]:
        assert r == {"name": r["name"], "cat": r["cat"], **dict(zip(explain.OP_SUMS, sums[(r["name"], r["cat"])]))}
    cells = {(r[0], r[1], r[2]) for r in rows}
    inside = {c for c in cells if c[1] >= 0}
    assert (ops["cells"], ops["ranks"], ops["steps"]) == (len(inside), len({c[2] for c in inside}),
                                                          len({c[:2] for c in inside}))
    assert ops["outside_ranks"] == len({c[2] for c in cells if c[1] < 0})
    assert got["kernels"] is None and got["launches"] is None and got["idle"] is None


def test_top_kernels_sum_over_row_groups_read_as_dictionaries(tmp_path):
    """Names in several row groups (one Parquet dictionary each) come back as the names, summed as one."""
    cols = ["iteration", "step", "rank", "name", "kind", "count", "total_ns", "p50_ns", "p95_ns", "max_ns", "std_ns"]
    rows = [(0, 0, r, NAMES[(r * 3 + k) % 4], "compute" if k % 2 else "communication", k + 1, 1000 * (r + k), 10 * r,
             20 * r, 30 * r + k, r) for r in range(12) for k in range(3)]
    _write(tmp_path / "kernel_stats.parquet", cols, rows, 5)
    got = explain.build_explain(tmp_path, top=50)["kernels"]
    sums: dict = {}
    for r in rows:
        acc = sums.setdefault((r[3], r[4]), [0, 0, 0])
        acc[0] += r[5]
        acc[1] += r[6]
        acc[2] = max(acc[2], r[9])
    assert {(r["name"], r["kind"]): [r["count"], r["total_ns"], r["max_ns"]] for r in got["rows"]} == sums
    assert [r["total_ns"] for r in got["rows"]] == sorted((v[1] for v in sums.values()), reverse=True)
    assert got["total_ns"] == sum(r[6] for r in rows) and got["cells"] == 12
    assert all(isinstance(r["name"], str) for r in got["rows"])
