"""Topology: Megatron's rank order (hand-checked cases and megatron-core's RankGenerator when it is
installed), TraceViz text, distributedInfo.pg_config of a trace folder, JSON round trips, the CLI."""
from __future__ import annotations

import itertools
import json
import warnings

import pytest
from hypothesis import given, settings, strategies as st

from streamtrace.runtime.errors import StreamtraceError
from streamtrace.synth.job import SynthSpec, build_topology, generate_job
from streamtrace.topology import (DIMS, format_traceviz_txt, from_sizes, orthogonal_groups, parse_traceviz_txt,
                                  topology_from_traceviz, write_topology)
from streamtrace.topology.model import Topology
from streamtrace.topology.sources import from_pg_config, load_topology

from support import CPU3D, TRACEVIZ_TXT, run_cli

TP = [[0, 1], [2, 3], [4, 5], [6, 7]]
DP = [[0, 2], [1, 3], [4, 6], [5, 7]]
PP = [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_default_order_hand_checked():
    t = from_sizes(8, tp=2, pp=2)
    assert t.groups["tp"] == TP and t.groups["dp"] == DP and t.groups["pp"] == PP
    assert t.groups["cp"] == [[r] for r in range(8)] and t.groups["ep"] == [[r] for r in range(8)]
    assert t.replicas == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert t.sizes == {"tp": 2, "cp": 1, "ep": 1, "dp": 2, "pp": 2}
    assert t.stage_of(5) == 1 and t.stage_of(2) == 0 and t.replica_of(6) == 1


def test_other_orders_hand_checked():
    # Megatron's own docstring example: order tp-pp-dp, sizes 2-2-2 -> dp groups [[0,4],[1,5],[2,6],[3,7]]
    t = from_sizes(8, tp=2, pp=2, order="tp-pp-dp")
    assert t.groups["dp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert t.groups["pp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert t.groups["tp"] == TP
    # its docstring's 24-rank case: [tp, dp, pp] = [2, 3, 4]: dp_group[0] = [0, 2, 4] ... dp_group[7] = [19, 21, 23]
    g = orthogonal_groups({"tp": 2, "dp": 3, "pp": 4}, "tp-dp-pp", "dp")
    assert len(g) == 8 and g[0] == [0, 2, 4] and g[1] == [1, 3, 5] and g[7] == [19, 21, 23]
    # tp slowest: 8 ranks, tp=4, pp=2, order pp-dp-tp (dp = 1): tp groups stride 2
    t = from_sizes(8, tp=4, pp=2, order="pp-dp-tp")
    assert t.groups["tp"] == [[0, 2, 4, 6], [1, 3, 5, 7]] and t.groups["pp"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # context parallel: tp2 cp2 dp2 (world 8, default order): cp groups stride 2, dp stride 4
    t = from_sizes(8, tp=2, cp=2)
    assert t.groups["cp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert t.groups["dp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert t.extra["dp_cp"] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert t.dim_of([0, 2, 4, 6]) == "DP" and t.dim_of([0, 2]) == "CP"
    assert t.replicas == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_expert_parallel_hand_checked():
    # world 16, tp2 pp2 ep2: dense dp = 4; expert dp = 16 / (2*2*2) = 2; ep groups join dp indices 2k, 2k+1
    t = from_sizes(16, tp=2, pp=2, ep=2)
    assert t.groups["dp"][0] == [0, 2, 4, 6]
    assert t.groups["ep"] == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]]
    assert t.replicas == [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]
    txt = format_traceviz_txt(t.to_json())
    assert "EXPERT PARALLEL (EP) GROUPS" in txt and "Full model = TP2 x EP2 x PP2 x CP1 = 8 ranks" in txt
    back = topology_from_traceviz(txt)
    assert back.groups == t.groups and back.replicas == t.replicas


def test_bad_sizes():
    for kw in ({"world_size": 6, "tp": 4}, {"world_size": 8, "tp": 2, "pp": 2, "order": "tp-dp-xx"},
               {"world_size": 8, "tp": 2, "pp": 2, "order": "tp-dp"}, {"world_size": 8, "tp": 0}):
        with pytest.raises(StreamtraceError):
            from_sizes(**kw)


def _megatron():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core.parallel_state import RankGenerator
        return RankGenerator
    except Exception:       # megatron-core or torch missing (or broken)
        pytest.skip("megatron-core (with torch) is not installed")


COMBOS = [(w, tp, pp, cp, ep) for w in (1, 2, 8, 12, 16, 24, 32, 64)
          for tp, pp, cp, ep in itertools.product((1, 2, 4), (1, 2, 3, 4), (1, 2), (1, 2))
          if w % (tp * pp * cp) == 0 and w % (tp * pp * ep) == 0]
RICH = {(16, 2, 2, 2, 1), (16, 2, 2, 1, 2), (24, 2, 3, 2, 1), (64, 2, 4, 2, 2), (64, 4, 2, 1, 2)}
# every permutation of the five names, plus Megatron's short forms that leave size-1 names out
ORDERS = ["-".join(p) for p in itertools.permutations(DIMS)] + ["tp-pp-dp", "tp-dp-pp", "pp-dp-tp", "tp-cp-dp-pp"]


def test_equals_megatron_rank_generator():
    RankGenerator = _megatron()
    checked = 0
    for k, ((w, tp, pp, cp, ep), order) in enumerate(itertools.product(COMBOS, ORDERS)):
        if (w, tp, pp, cp, ep) not in RICH and k % 11:   # others: a deterministic eleventh of the orders (time)
            continue
        dp, edp = w // (tp * pp * cp), w // (tp * pp * ep)
        try:
            dense = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order)
            expert = RankGenerator(tp=tp, ep=ep, dp=edp, pp=pp, cp=1, order=order)
        except (RuntimeError, AssertionError):
            with pytest.raises(StreamtraceError):
                from_sizes(w, tp, pp, cp, ep, order)
            continue
        if not (order.endswith("pp") or pp == 1 or edp == dp) or dense.get_ranks("pp") != expert.get_ranks("pp"):
            with pytest.raises(StreamtraceError):                  # Megatron asserts both
                from_sizes(w, tp, pp, cp, ep, order)
            continue
        t = from_sizes(w, tp, pp, cp, ep, order)
        for d in ("tp", "cp", "dp", "pp"):
            assert t.groups[d] == dense.get_ranks(d), (w, tp, pp, cp, ep, order, d)
        assert t.groups["ep"] == expert.get_ranks("ep"), (w, tp, pp, cp, ep, order)
        for tok in ("tp-pp", "dp-cp", "tp-cp", "tp-dp-cp"):
            assert orthogonal_groups({"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}, order, tok) == \
                dense.get_ranks(tok)
        checked += 1
    assert checked > 300


def test_traceviz_txt_from_the_issue():
    p = parse_traceviz_txt(TRACEVIZ_TXT)
    assert p["tp"] == TP and p["pp"] == PP and p["dp"] == DP
    assert p["replicas"] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert p["sizes"]["world"] == 8 and p["global_batch_size"] == 16
    t = topology_from_traceviz(TRACEVIZ_TXT)
    assert t.order == "tp-cp-ep-dp-pp" and t.world_size == 8
    assert t.to_json()["tp"] == TP
    # our writer produces the issue's text (but for the timestamp line)
    mine = format_traceviz_txt(from_sizes(8, 2, 2).to_json(), timestamp="2026-01-05 14:48:40.123456",
                               global_batch_size=16)
    assert mine.strip() == TRACEVIZ_TXT.strip()


def test_pg_config_of_cpu3d_folder():
    if not CPU3D.is_dir():
        pytest.skip("../shared/traces/cpu-3d is absent")
    t = load_topology(CPU3D)
    truth = json.loads((CPU3D / "parallel_topology.json").read_text())
    assert t.groups["tp"] == truth["tp_groups"] == TP
    assert t.groups["dp"] == truth["dp_groups"] == DP
    assert t.groups["pp"] == truth["pp_groups"] == PP
    assert t.world_size == 8 and t.order == "tp-cp-ep-dp-pp"
    assert t.replicas == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert "pg_config" in t.source


def test_pg_config_names():
    entries = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": list(range(4))},
               {"pg_name": "1", "pg_desc": "TENSOR_MODEL_PARALLEL_GROUP", "ranks": [0, 1]},
               {"pg_name": "2", "pg_desc": "TENSOR_MODEL_PARALLEL_GROUP", "ranks": [3, 2]},
               {"pg_name": "3", "pg_desc": "TENSOR_AND_DATA_PARALLEL_GROUP", "ranks": [0, 1, 2, 3]},
               {"pg_name": "4", "pg_desc": "DATA_PARALLEL_GROUP", "ranks": [0, 2]},
               {"pg_name": "5", "pg_desc": "DATA_PARALLEL_GROUP", "ranks": [1, 3]},
               {"pg_name": "4", "pg_desc": "DATA_PARALLEL_GROUP", "ranks": [0, 2]}]   # seen by two ranks
    t = from_pg_config(entries, 4)
    assert t.groups["tp"] == [[0, 1], [2, 3]] and t.groups["dp"] == [[0, 2], [1, 3]]
    assert t.groups["pp"] == [[0], [1], [2], [3]]
    assert t.replicas == [[0, 1], [2, 3]]
    with pytest.raises(StreamtraceError):
        from_pg_config([{"pg_desc": "default_pg", "ranks": [0, 1]}])


def test_pg_config_every_rank_lists_every_group():
    """A job's union of pg_config entries repeats each group once a rank that lists it (read once each:
    ``sources._repeated``); the same group as a str and as a list, and entries whose ranks hold a list or
    a dict (not a group, and not a key), give the groups written out below by hand (TP2 x DP2 x PP2)."""
    tp, dp, pp = [[0, 1], [2, 3], [4, 5], [6, 7]], [[0, 2], [1, 3], [4, 6], [5, 7]], [[0, 4], [1, 5], [2, 6], [3, 7]]
    one = [{"pg_desc": d, "ranks": g} for d, gs in (("TENSOR_MODEL_PARALLEL_GROUP", tp), ("DATA_PARALLEL_GROUP", dp),
                                                    ("PIPELINE_MODEL_PARALLEL_GROUP", pp)) for g in gs]
    odd = [{"pg_desc": "DATA_PARALLEL_GROUP", "ranks": "[0, 2]"}, {"pg_desc": "TP", "ranks": [[0, 1]]},
           {"pg_desc": "TP", "ranks": [{"r": 0}]}, {"pg_desc": "TP", "ranks": (0, 1)}]
    entries = [dict(e, ranks=list(reversed(e["ranks"]))) if r % 2 else dict(e) for r in range(8) for e in one] + odd * 3
    t = from_pg_config(entries, 8)
    assert t.groups["tp"] == tp and t.groups["dp"] == dp and t.groups["pp"] == pp
    assert t.world_size == 8 and t.replicas == [[0, 1, 4, 5], [2, 3, 6, 7]]


def test_synthetic_job_topology(tmp_path):
    spec = SynthSpec(world_size=16, tp=2, pp=4, microbatches=1, layers=1)
    truth = generate_job(tmp_path, spec)
    for src in (tmp_path, tmp_path / "streamtrace_topology.json"):
        t = load_topology(src)
        for d in DIMS:
            assert t.groups[d] == truth.topology[d], (src, d)
        assert t.replicas == truth.topology["replicas"]
    assert from_sizes(16, tp=2, pp=4).groups == {d: build_topology(spec)[d] for d in DIMS}


def test_json_and_txt_round_trip(tmp_path):
    t = from_sizes(32, tp=2, pp=4, cp=2, order="tp-cp-dp-pp")
    j = write_topology(t, tmp_path / "topo.json")
    x = write_topology(t, tmp_path / "unique_parallel_groups_x.txt")
    for p in (j, x):
        back = load_topology(p)
        assert back.groups == t.groups and back.replicas == t.replicas
    assert load_topology(j).order == t.order == "tp-cp-dp-pp-ep"


def test_bad_files(tmp_path):
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / "b.json").write_text("{nope")
    (tmp_path / "c.json").write_text('{"x": 1}')
    for name in ("a.txt", "b.json", "c.json", "missing.json"):
        with pytest.raises(StreamtraceError) as e:
            load_topology(tmp_path / name)
        assert "\n" not in str(e.value)


def test_cli(tmp_path):
    r = run_cli("topology", "--tp", 2, "--pp", 2, "--world-size", 8, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["tp"] == TP and d["dp"] == DP and d["pp"] == PP and d["replicas"] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert all(k in d for k in ("tp", "cp", "ep", "dp", "pp", "replicas"))
    r = run_cli("topology", "--tp", 2, "--pp", 2, "--world-size", 8, "--write", tmp_path / "t.txt")
    assert r.returncode == 0, r.stderr
    r = run_cli("topology", "--from", tmp_path / "t.txt", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["pp"] == PP
    r = run_cli("topology", "--from", tmp_path / "t.txt")
    assert r.returncode == 0 and "PP groups" in r.stdout
    r = run_cli("topology", "--tp", 3, "--world-size", 8)
    assert r.returncode == 2 and "not a multiple" in r.stderr          # sizes that do not fit: a usage error
    if CPU3D.is_dir():
        r = run_cli("topology", "--from", CPU3D, "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["dp"] == DP


@settings(max_examples=60, deadline=None)
@given(world=st.integers(1, 12), data=st.data())
def test_group_and_replica_lookups_are_the_first_group_that_holds_the_rank(world, data):
    """``group_of`` / ``replica_of`` / ``stage_of`` (indexed once) against a scan of the groups, on groups
    that may overlap or leave ranks out."""
    ranks = st.lists(st.integers(0, world - 1), min_size=1, max_size=world, unique=True)
    groups = {d: data.draw(st.lists(ranks, max_size=4)) for d in ("tp", "dp", "pp")}
    replicas = data.draw(st.lists(ranks, min_size=1, max_size=3))
    t = Topology(groups, world_size=world, replicas=replicas)
    for r in range(world + 2):
        for d in DIMS:
            assert t.group_of(d, r) == next((g for g in t.groups[d] if r in g), None)
        assert t.replica_of(r) == next((i for i, g in enumerate(t.replicas) if r in g), -1)
        pp = next((g for g in t.groups["pp"] if r in g), None)
        assert t.stage_of(r) == (pp.index(r) if pp else 0)
