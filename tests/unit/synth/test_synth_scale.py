"""Tests of streamtrace.synth.scale: with dp = 1 it writes generate_job's bytes; with dp > 1 each file
is what the rank's own program writes (no markers left), the files pass test_synth's checks of the format
(read with plain json), and every collective is aligned across the files that hold it."""
from __future__ import annotations

import json
from collections import defaultdict

import pytest
import test_synth as base   # its checks of one job's files, run here on scaled jobs

from streamtrace.synth.job import END_SKEW_NS, SynthSpec, check_spec, generate_job, process_groups, replay, simulate
from streamtrace.synth.scale import ClassProgram, generate_job_scaled, representative

SCALED = SynthSpec(steps=2, microbatches=3, layers=1, seed=4, extra_allreduces=1)               # TP2 x DP2 x PP2
WIDE = SynthSpec(world_size=16, tp=2, pp=2, microbatches=3, layers=1, seed=2, compress=True)    # dp = 4
# the newest format (Seq on the kernels) with DP all-to-alls (even splits: one template per class)
WIDE_A2A = SynthSpec(world_size=16, tp=2, pp=2, microbatches=2, layers=1, seed=3, alltoalls=2,
                     comm_format="kernel_args_seq")


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    truth = generate_job_scaled(tmp_path_factory.mktemp("scaled"), SCALED, jobs=2)
    return truth, {rt.rank: base.read(rt.path)[0] for rt in truth.ranks}, 0.0


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    truth = generate_job_scaled(tmp_path_factory.mktemp("wide"), WIDE)
    return truth, {rt.rank: base.read(rt.path)[0] for rt in truth.ranks}, 0.0


@pytest.fixture(scope="module")
def wide_a2a(tmp_path_factory):
    truth = generate_job_scaled(tmp_path_factory.mktemp("wide_a2a"), WIDE_A2A)
    return truth, {rt.rank: base.read(rt.path)[0] for rt in truth.ranks}, 0.0


@pytest.mark.parametrize("spec", [SynthSpec(world_size=4, tp=2, pp=2, microbatches=3, layers=2),
                                  SynthSpec(world_size=4, tp=2, pp=2, layers=1, comm_format="record_param_comms"),
                                  SynthSpec(world_size=4, tp=2, pp=2, layers=1, comm_format="annotation_dims"),
                                  SynthSpec(world_size=8, tp=4, pp=2, microbatches=2, layers=1, seed=9, clock_skew_ns=777)])
def test_one_replica_is_generate_job(tmp_path, spec):
    a, b = generate_job(tmp_path / "a", spec), generate_job_scaled(tmp_path / "b", spec, jobs=2)
    assert b.collectives == [] and len(a.ranks) == len(b.ranks) == spec.world_size
    for ra, rb in zip(a.ranks, b.ranks):
        assert ra.path.read_bytes() == rb.path.read_bytes()
        for f in ("rank", "pid", "coords", "clock_offset_ns", "base_time_ns", "n_events"):
            assert getattr(ra, f) == getattr(rb, f), f
        for f in ("steps", "forward", "backward", "forward_gpu", "backward_gpu"):
            assert getattr(ra, f).tolist() == getattr(rb, f).tolist(), f
        assert ra.devices.keys() == rb.devices.keys()
        for d, dt in ra.devices.items():
            for c in ("compute", "comm", "memory"):
                assert getattr(dt, c).start.tolist() == getattr(rb.devices[d], c).start.tolist()
                assert getattr(dt, c).end.tolist() == getattr(rb.devices[d], c).end.tolist()
    assert (tmp_path / "a/streamtrace_topology.json").read_text() == (tmp_path / "b/streamtrace_topology.json").read_text()


def test_each_file_is_its_ranks_program(wide):
    """The template with a rank's values put in == the class program run with that rank's own values."""
    truth, docs, _ = wide
    spec = truth.spec
    pgs = process_groups(spec, check_spec(spec))
    reps = sorted({representative(spec, r) for r in range(spec.world_size)})
    assert reps == [0, 1, 8, 9]
    _, replies = simulate(spec, pgs, ranks=reps, truth=False)
    for rt in truth.ranks:
        chunks = []
        replay(ClassProgram(spec, pgs, rt.rank, representative(spec, rt.rank), chunks.append).run(),
               replies[representative(spec, rt.rank)])
        assert docs[rt.rank]["traceEvents"] == json.loads(b"[" + b"".join(chunks) + b"]", parse_float=base.Decimal)
        assert "\u00a7" not in base.read(rt.path)[1]   # no marker left


@pytest.mark.parametrize("fx", ["scaled", "wide", "wide_a2a"])
def test_files_pass_the_format_checks(request, fx):
    job = request.getfixturevalue(fx)
    checks = [base.test_timestamps_are_microseconds_with_three_decimals, base.test_flows_are_paired,
              base.test_each_gpu_event_has_exactly_one_launch,
              base.test_slices_nest_per_thread_and_gpu_work_never_overlaps_on_a_stream,
              base.test_truth_intervals_equal_the_file, base.test_annotations_windows_and_kineto_extras]
    if fx == "scaled":
        checks.append(base.test_layout_and_top_level_keys)   # its pg_count formula holds for 8 ranks
    for check in checks:
        check(job)


@pytest.mark.parametrize("fx", ["scaled", "wide", "wide_a2a"])
def test_collectives_are_aligned_across_files(request, fx):
    """The k-th kernel of a process group on each member is one instance: it ends after every member arrived,
    the ends are within END_SKEW_NS, and every member of the group holds as many (read from the files)."""
    truth, docs, _ = request.getfixturevalue(fx)
    inst = defaultdict(lambda: defaultdict(list))   # (pg, collective) -> rank -> [(start, end)] (true ns)
    groups = {}
    for r, d in docs.items():
        for e in base.events(d, "X", "kernel"):
            a = e["args"]
            if base.NCCL.search(e["name"]) and a["Collective name"] not in ("send", "recv"):
                s = base.ns(e["ts"]) - truth.ranks[r].clock_offset_ns
                inst[a["Process Group Name"], a["Collective name"]][r].append((s, s + base.ns(e["dur"])))
                assert a["Rank"] == r and groups.setdefault(a["Process Group Name"], a["Process Group Ranks"]) == a["Process Group Ranks"]
    sizes = set()
    for (pg, _), per_rank in inst.items():
        assert sorted(per_rank) == json.loads(groups[pg])
        sizes.add(len(per_rank))
        (n,) = {len(v) for v in per_rank.values()}
        for k in range(n):
            starts, ends = zip(*(v[k] for v in per_rank.values()))
            assert min(ends) >= max(starts) and max(ends) - min(ends) <= END_SKEW_NS, (pg, k)
    assert sizes == {truth.spec.tp, truth.spec.dp}


def test_straggler_refused(tmp_path):
    with pytest.raises(ValueError, match="straggler"):
        generate_job_scaled(tmp_path, SynthSpec(straggler_rank=1, straggler_delay_ns=10))
