"""Which rank files form the job (streamtrace.topology.members, issue 33)."""
from __future__ import annotations

from streamtrace.topology.members import job_world, split_job
from streamtrace.trace.discover import TraceFile


def _tf(rank, world=None, name=None):
    head = {"distributedInfo": {"rank": rank, "world_size": world}} if world is not None else {}
    return TraceFile(name or f"r{rank}_{world}.json", rank, 1, "distributedInfo", head)


def test_the_majority_world_size_is_the_job_and_the_others_are_skipped():
    files = [_tf(r, 4) for r in range(4)] + [_tf(1, 2), _tf(9, 16), _tf(2)]
    assert job_world(files) == (4, "4 of 6 rank files")
    keep, odd = split_job(files)
    assert [f.path for f in keep] == ["r0_4.json", "r1_4.json", "r2_4.json", "r3_4.json", "r2_None.json"]
    assert [(f.path, "world size" in why) for f, why in odd] == [("r1_2.json", True), ("r9_16.json", True)]


def test_the_topology_world_size_wins():
    files = [_tf(r, 2) for r in range(2)] + [_tf(0), _tf(5), _tf(3, 4)]
    keep, odd = split_job(files, topology_world=4)
    assert [f.path for f, _ in odd] == ["r0_2.json", "r1_2.json"]
    assert [f.path for f in keep] == ["r0_None.json", "r5_None.json", "r3_4.json"]
    assert "the job's is 4 (from the topology file)" in odd[0][1]


def test_no_stated_world_size_keeps_everything():
    files = [_tf(0), _tf(7), _tf(1, True)]        # a boolean is no world size
    assert split_job(files) == (files, [])


def test_a_file_that_started_days_apart_is_skipped():
    day = 86_400 * 10**9
    files = [_tf(r, 4) for r in range(4)] + [_tf(3, 4, name="old_r3.json")]
    times = {f.path: 10 * day + i for i, f in enumerate(files)}
    times["old_r3.json"] = 10 * day - 30 * day
    keep, odd = split_job(files, base_times=times)
    assert [f.path for f, _ in odd] == ["old_r3.json"] and "30.0 days apart" in odd[0][1]
    assert len(keep) == 4


def _grouped(rank, groups, name=None):
    """A rank file of world size 4 listing ``groups`` ({pg_name: (desc, ranks)}) in its pg_config."""
    cfg = [{"pg_name": n, "pg_desc": d, "ranks": list(rs)} for n, (d, rs) in groups.items()]
    head = {"distributedInfo": {"rank": rank, "world_size": 4, "pg_config": cfg}}
    return TraceFile(name or f"r{rank}.json", rank, 1, "distributedInfo", head)


def _job_groups(rank):
    tp = ("tp", (0, 1)) if rank < 2 else ("tp", (2, 3))
    return {"0": ("default_pg", (0, 1, 2, 3)), "1" if rank < 2 else "2": tp}


def test_a_rank_on_a_host_whose_clock_is_days_off_is_kept_and_told():
    """Issue 49: rank 3 started 3 days from the others but states the job's world size and groups,
    and no other file gives rank 3: kept, told in ``clocks_apart``; a copy of rank 1 from a month
    before (the same groups) still is another job's."""
    day = 86_400 * 10**9
    files = [_grouped(r, _job_groups(r)) for r in range(4)] + [_grouped(1, _job_groups(1), name="old_r1.json")]
    times = {f.path: 10 * day for f in files}
    times["r3.json"] += 3 * day
    times["old_r1.json"] -= 30 * day
    apart = []
    keep, odd = split_job(files, base_times=times, clocks_apart=apart)
    assert [f.path for f in keep] == ["r0.json", "r1.json", "r2.json", "r3.json"]
    assert [f.path for f, _ in apart] == ["r3.json"] and "--clock-sync" in apart[0][1]
    assert [f.path for f, _ in odd] == ["old_r1.json"]


def test_groups_that_disagree_are_another_job():
    day = 86_400 * 10**9
    files = [_grouped(r, _job_groups(r)) for r in range(3)] + [_grouped(3, {"0": ("default_pg", (0, 1, 2, 3, 4))})]
    times = {f.path: 10 * day for f in files}
    times["r3.json"] += 3 * day
    apart = []
    keep, odd = split_job(files, base_times=times, clocks_apart=apart)
    assert apart == [] and [f.path for f, _ in odd] == ["r3.json"]
