"""The at-median factors of a rank (``streamtrace.aggregate.whatif.medians``' per-name part) against
the rule its docstring states, computed here row by row with ``statistics.median`` on small random
statistics tables (ties, repeated counts, names only one rank runs, zero own times, other steps)."""
from __future__ import annotations

import statistics

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.aggregate.folder import OP_STATS
from streamtrace.aggregate.whatif import _name_factors

IT, STEP = 3, 7


@st.composite
def stats_rows(draw):
    """Rows ``(step, rank, name, count, self_ns)``, one per (step, rank, name), some in another step."""
    rows = []
    for step in (STEP, STEP + 1):
        for rank in range(draw(st.integers(1, 5))):
            for name in draw(st.sets(st.sampled_from("abcdef"), max_size=6)):
                rows.append((step, rank, name, draw(st.integers(1, 3)),
                             float(draw(st.sampled_from([0, 1, 2, 3, 5, 8, 13, 2.5, 1e9 + 1])))))
    return rows, draw(st.integers(0, 5))


def expected(rows, rank) -> dict:
    """The docstring's rule, one name at a time: min(1, median over the peers that ran it as many
    times / its own), else over all that ran it, else 0 when other ranks exist; own time > 0 only."""
    mine = [r for r in rows if r[0] == STEP]
    own = {n: (c, v) for s, k, n, c, v in mine if k == rank}
    others = {k for s, k, n, c, v in mine if k != rank}
    out = {}
    for n, (c, v) in own.items():
        if v <= 0:
            continue
        same = [x for s, k, m, cc, x in mine if k != rank and m == n and cc == c]
        every = [x for s, k, m, cc, x in mine if k != rank and m == n]
        if same or every:
            out[n] = min(1.0, statistics.median(same or every) / v)
        elif others:
            out[n] = 0.0
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(stats_rows())
def test_name_factors_follow_the_rule(tmp_path, case):
    rows, rank = case
    cols = list(zip(*rows)) if rows else [[]] * 5
    t = pa.table({"iteration": pa.array([IT] * len(rows), pa.int64()), "step": pa.array(cols[0], pa.int64()),
                  "rank": pa.array(cols[1], pa.int64()), "name": pa.array(cols[2], pa.string()),
                  "count": pa.array(cols[3], pa.int64()), "self_ns": pa.array(cols[4], pa.float64())})
    path = tmp_path / "op_stats.parquet"
    pq.write_table(t, path)
    assert _name_factors(path, OP_STATS, "self_ns", IT, STEP, rank) == expected(rows, rank)
