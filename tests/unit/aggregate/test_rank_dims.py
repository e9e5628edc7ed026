"""Every rank's share of the topology, as aggregate's parent hands it to the rank tasks
(``streamtrace.aggregate.collective_rows.rank_dims``): the same dimensions as the topology names from
the groups that hold the rank (computed here by scanning the groups, as a rank would), and memory
linear in the world size (a set of ranks a rank was 540 MB for a pure-DP job of 4,096 ranks)."""
from __future__ import annotations

import tracemalloc

from hypothesis import given, settings, strategies as st

from streamtrace.aggregate.collective_rows import fill_dims, rank_dims
from streamtrace.topology.model import Topology, from_sizes


def _scanned(topo: Topology, rank: int) -> dict:
    """The rank's groups, one per dimension (the first that holds it), named by the topology."""
    out = {}
    for d, groups in topo.groups.items():
        g = next((g for g in groups if rank in g), None)
        if g:
            out.setdefault(frozenset(g), topo.dim_of(g))
    return out


@settings(max_examples=60, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 3]), cp=st.sampled_from([1, 2]),
       dp=st.integers(1, 5))
def test_each_ranks_dims_are_the_groups_that_hold_it(tp, pp, cp, dp):
    topo = from_sizes(tp * pp * cp * dp, tp=tp, pp=pp, cp=cp)
    dims = rank_dims(topo)
    assert sorted(dims) == list(range(topo.world_size))
    for r in range(topo.world_size):
        assert dims[r].by_set == _scanned(topo, r)
        for g, d in _scanned(topo, r).items():
            assert dims[r].dim_of(sorted(g)) == d
        assert dims[r].dim_of([topo.world_size + 5]) is None


def test_overlapping_groups_keep_the_first_that_holds_the_rank():
    topo = Topology({"tp": [[0, 1], [1, 2], [3]], "dp": [[0, 2], [1, 3]]}, world_size=4)
    dims = rank_dims(topo)
    for r in range(4):
        assert dims[r].by_set == _scanned(topo, r)
    assert frozenset({1, 2}) not in dims[1].by_set            # rank 1's TP group is [0, 1], the first


def test_a_pure_dp_job_holds_each_group_once():
    topo = from_sizes(2048)                                   # one DP group of every rank
    tracemalloc.start()
    dims = rank_dims(topo)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert held < 4e6, held                                   # a set of 2,048 ranks a rank: ~135 MB
    dp = [k for k in dims[0].by_set if len(k) == 2048]
    assert len(dp) == 1 and all(dp[0] in dims[r].by_set for r in (1, 1000, 2047))
    assert all(next(k for k in dims[r].by_set if len(k) == 2048) is dp[0] for r in (1, 1000, 2047))


def test_fill_dims_names_unknown_groups_as_the_topology_does():
    topo = from_sizes(8, tp=2, pp=2)
    dims = rank_dims(topo)[5]
    tp, dp = topo.group_of("tp", 5), topo.group_of("dp", 5)
    pg = [str(tp), str(dp), "[0, 7]", ""]
    got = fill_dims(["unknown", "unknown", "unknown", "unknown"], pg, dims).tolist()
    assert got == [topo.dim_of(tp), topo.dim_of(dp), "unknown", "unknown"]
