"""aggregate's job level in its own process (``streamtrace.aggregate.run._job_level_process``): the
job's critical path and the what-if replay run in children forked before the job is opened, one each; their
tables are those the same aggregate writes with both in its own process, with ``-j 1`` and ``-j 2``;
an error there is the aggregate's error; the spilled pieces are removed; a job under ``SMALL_JOB_BYTES`` of
Parquet runs both in the aggregate's own process."""
from __future__ import annotations

import os
import signal

import pyarrow.parquet as pq
import pytest

from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.aggregate import run as agg_run
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.runtime.errors import DataError, StreamtraceError
from streamtrace.runtime.fork import Standby
from streamtrace.synth.job import SynthSpec, generate_job

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")]

TABLES = ("critical_path", "critical_path_summary", "critical_path_ranks", "whatif", "whatif_anchors",
          "whatif_edges", "whatif_ranks")


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    d = tmp_path_factory.mktemp("joblevel")
    generate_job(d / "traces", SynthSpec(world_size=4, tp=2, pp=2, layers=1, microbatches=2))
    analyze([d / "traces"], d / "an", AnalyzeOptions(jobs=1))
    return d


@pytest.fixture(autouse=True)
def forked(monkeypatch):
    """Every job forks its job level here (this job is under ``SMALL_JOB_BYTES``: it would run in this process)."""
    monkeypatch.setattr(agg_run, "SMALL_JOB_BYTES", 0)


def _tables(folder) -> dict:
    return {t: pq.read_table(folder / f"{t}.parquet").to_pylist() for t in TABLES}


@pytest.mark.parametrize("jobs", [1, 2])
def test_tables_equal_those_written_in_one_process(analysed, monkeypatch, jobs):
    forked = aggregate([analysed / "an"], analysed / f"forked{jobs}", AggregateOptions(jobs=jobs))
    with monkeypatch.context() as m:
        m.setattr(agg_run, "Standby", lambda on, setup=None: Standby(False, setup))
        here = aggregate([analysed / "an"], analysed / f"here{jobs}", AggregateOptions(jobs=jobs))
    a, b = _tables(analysed / f"forked{jobs}"), _tables(analysed / f"here{jobs}")
    assert len(a["critical_path"]) > 0 and len(a["whatif"]) > 0
    assert a == b
    assert forked.summary["critical_path"] == here.summary["critical_path"]
    assert forked.summary["warnings"] == here.summary["warnings"]
    assert not [p for p in (analysed / f"forked{jobs}").iterdir() if p.name.startswith(".")]


def _fails(job, pieces, outdir, texts=None):
    raise DataError(outdir, f"critical path failed in process {os.getpid()}")


def test_the_job_levels_error_is_the_aggregates(analysed, monkeypatch):
    monkeypatch.setattr(agg_run, "critical_paths", _fails)     # (before the fork: the child has it too)
    with pytest.raises(DataError, match="critical path failed in process") as e:
        aggregate([analysed / "an"], analysed / "failed", AggregateOptions(jobs=2))
    child = int(str(e.value).rsplit("in process ", 1)[1])
    assert child != os.getpid()                                # raised in the child, raised here again
    assert not (analysed / "failed").exists()


def _killed(job, pieces, outdir, texts=None):
    os.kill(os.getpid(), signal.SIGKILL)              # as the out-of-memory killer would


def test_a_killed_job_level_process_is_a_clear_error(analysed, monkeypatch):
    monkeypatch.setattr(agg_run, "critical_paths", _killed)
    with pytest.raises(StreamtraceError, match="job-level process .* killed by SIGKILL: out of memory") as e:
        aggregate([analysed / "an"], analysed / "killed", AggregateOptions(jobs=2))
    assert "--no-whatif" in str(e.value)
    assert not (analysed / "killed").exists()


_ORIGINAL = {"critical": agg_run.critical_paths, "whatif": agg_run.write_whatif}


def _record(what):
    with open(os.environ["JOB_LEVEL_PIDS"], "a") as f:
        f.write(f"{what} {os.getpid()}\n")


def _critical_recorded(*args, **kwargs):
    _record("critical")
    return _ORIGINAL["critical"](*args, **kwargs)


def _whatif_recorded(*args, **kwargs):          # (module-level: sent to its process by name)
    _record("whatif")
    return _ORIGINAL["whatif"](*args, **kwargs)


def test_the_replay_runs_in_a_process_of_its_own(analysed, monkeypatch, tmp_path):
    """The what-if replay does not run in the critical path's process (what that solve left behind
    is not under the replay's peak), nor in this one."""
    monkeypatch.setenv("JOB_LEVEL_PIDS", str(tmp_path / "pids"))
    monkeypatch.setattr(agg_run, "critical_paths", _critical_recorded)     # (before the forks: the children have them)
    monkeypatch.setattr(agg_run, "write_whatif", _whatif_recorded)
    aggregate([analysed / "an"], analysed / "own", AggregateOptions(jobs=1))
    pids = dict(line.split() for line in (tmp_path / "pids").read_text().splitlines())
    assert set(pids) == {"critical", "whatif"}
    assert len({pids["critical"], pids["whatif"], str(os.getpid())}) == 3


def test_a_small_job_runs_its_job_level_here(analysed, monkeypatch, tmp_path):
    """Under ``SMALL_JOB_BYTES`` of Parquet (this job: a few hundred KB) the critical path and the replay
    run in the aggregate's own process, and write the tables the forked ones write."""
    monkeypatch.setattr(agg_run, "SMALL_JOB_BYTES", 16 << 20)
    assert agg_run._input_bytes([analysed / "an"], 16 << 20) < 16 << 20
    monkeypatch.setenv("JOB_LEVEL_PIDS", str(tmp_path / "pids"))
    monkeypatch.setattr(agg_run, "critical_paths", _critical_recorded)
    monkeypatch.setattr(agg_run, "write_whatif", _whatif_recorded)
    aggregate([analysed / "an"], analysed / "small", AggregateOptions(jobs=1))
    pids = dict(line.split() for line in (tmp_path / "pids").read_text().splitlines())
    assert pids == {"critical": str(os.getpid()), "whatif": str(os.getpid())}
    monkeypatch.setattr(agg_run, "SMALL_JOB_BYTES", 0)
    monkeypatch.setattr(agg_run, "critical_paths", _ORIGINAL["critical"])
    monkeypatch.setattr(agg_run, "write_whatif", _ORIGINAL["whatif"])
    aggregate([analysed / "an"], analysed / "small-forked", AggregateOptions(jobs=1))
    assert _tables(analysed / "small") == _tables(analysed / "small-forked")


def test_input_bytes_counts_parquet_up_to_the_limit(tmp_path):
    """``_input_bytes`` sums the Parquet files' sizes under each folder (nothing else), and stops once past the
    limit."""
    for i, n in enumerate((100, 200, 300)):
        d = tmp_path / f"r{i}"
        d.mkdir()
        (d / "part-0.parquet").write_bytes(b"x" * n)
        (d / "summary.json").write_bytes(b"y" * 1000)
    assert agg_run._input_bytes([tmp_path], 10_000) == 600
    assert 150 < agg_run._input_bytes([tmp_path], 150) < 600
    assert agg_run._input_bytes([tmp_path / "r0", tmp_path / "missing"], 10_000) == 100


def test_the_critical_paths_process_forks_before_the_replays_units_load(monkeypatch):
    """The critical path's process is forked with only its own units loaded (``CRITICAL_JOB_UNITS``); the
    replay's, which re-reduces ranks, after every unit of the aggregate is (the critical path's process
    does not hold the replay's compiled units: ~8 MB)."""
    from streamtrace.runtime.compile import CRITICAL_JOB_UNITS, TASKS
    events = []

    class Fake(Standby):
        def __init__(self, enabled=True, setup=None):
            events.append(("fork", bool(enabled)))
            super().__init__(False, setup)
    monkeypatch.setattr(agg_run, "Standby", Fake)
    monkeypatch.setattr(agg_run, "load_kernels", lambda *units: events.append(("load", units)))
    monkeypatch.setattr(agg_run, "_input_bytes", lambda dirs, limit: limit + 1)       # (a job past the limit)
    with agg_run._job_level_process(AggregateOptions(), ()):
        pass
    assert events == [("load", tuple(CRITICAL_JOB_UNITS)), ("fork", True), ("load", tuple(TASKS["aggregate"])),
                      ("fork", True)]
    events.clear()
    with agg_run._job_level_process(AggregateOptions(whatif=False), ()):
        pass
    assert events == [("load", tuple(CRITICAL_JOB_UNITS)), ("fork", True), ("fork", False)]
