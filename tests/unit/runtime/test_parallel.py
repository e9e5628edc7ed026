"""The batch layer: local pool, any executor, a real dask LocalCluster, retries."""
from __future__ import annotations

import concurrent.futures as cf
import os
import time

import pyarrow.parquet as pq
import pytest

from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.runtime.parallel import TaskFailure, run_tasks
from streamtrace.synth.job import SynthSpec, generate_job

from support import CPU3D, need_shared

_calls = {}


def flaky(x, marker_dir):
    """Fails on its first call for x == 2 (a marker file remembers across processes)."""
    m = os.path.join(marker_dir, f"seen{x}")
    if x == 2 and not os.path.exists(m):
        open(m, "w").close()
        raise RuntimeError("transient")
    if x == 3:
        raise ValueError("always broken")
    return x * 10


@pytest.mark.parametrize("jobs", [1, 2])
def test_retry_then_report(tmp_path, jobs):
    res = run_tasks(flaky, [(i, str(tmp_path)) for i in range(5)], jobs, retries=1, keep_going=True)
    assert res[:3] == [0, 10, 20] and res[4] == 40
    assert isinstance(res[3], TaskFailure) and res[3].attempts == 2 and "always broken" in res[3].error
    with pytest.raises(ValueError):
        run_tasks(flaky, [(3, str(tmp_path))], jobs, retries=1)


@pytest.mark.parametrize("jobs", [1, 2])
def test_on_result_in_this_process(tmp_path, jobs):
    seen = []

    def keep(r):
        seen.append(os.getpid())
        return ("kept", r)
    res = run_tasks(flaky, [(i, str(tmp_path)) for i in (0, 1, 4)], jobs, on_result=keep)
    assert res == [("kept", 0), ("kept", 10), ("kept", 40)] and seen == [os.getpid()] * 3


def test_any_executor(tmp_path):
    with cf.ThreadPoolExecutor(2) as ex:
        assert run_tasks(flaky, [(i, str(tmp_path)) for i in (0, 1, 4)], executor=ex) == [0, 10, 40]


class _CountedWaiters(list):
    installed = 0

    def append(self, w):
        _CountedWaiters.installed += 1
        super().append(w)


class _OneAtATime(cf.Executor):
    """Runs its tasks on one thread, in order, 1 ms each; its futures count the waiters put on
    them (``concurrent.futures.wait`` puts one on every unfinished future it is given, per call)."""

    def __init__(self):
        self.pool = cf.ThreadPoolExecutor(1)

    def submit(self, fn, *args):
        f = cf.Future()
        f._waiters = _CountedWaiters()

        def run():
            time.sleep(0.001)
            try:
                f.set_result(fn(*args))
            except BaseException as e:   # noqa: BLE001 - handed to the caller as the future's
                f.set_exception(e)
        self.pool.submit(run)
        return f

    def shutdown(self, wait=True, **kw):
        self.pool.shutdown(wait)


def test_many_tasks_cost_each_one_wait(tmp_path):
    # 600 tasks finishing one by one: waiting for each one in turn must not touch every task still
    # pending (it did: 20 CPU-s of a 4,096-rank merge went to concurrent.futures.wait's waiters)
    n = 600
    _CountedWaiters.installed = 0
    ticks = []
    with _OneAtATime() as ex:
        got = run_tasks(flaky, [(i % 2, str(tmp_path)) for i in range(n)], executor=ex,
                        on_tick=lambda: ticks.append(1))
    assert got == [(i % 2) * 10 for i in range(n)]
    assert _CountedWaiters.installed <= 2 * n
    assert ticks                       # called at least once, at the end


def _tables(out):
    got = {}
    for root, _, files in os.walk(out):
        for f in files:
            if f.endswith(".parquet"):
                got[os.path.relpath(os.path.join(root, f), out)] = pq.read_table(os.path.join(root, f))
    return got


@pytest.mark.slow
def test_dask_localcluster_equals_local_pool(tmp_path):
    need_shared()
    distributed = pytest.importorskip("distributed")
    generate_job(tmp_path / "demo", SynthSpec(world_size=4, tp=2, pp=1))
    inputs = [CPU3D, tmp_path / "demo" / "iteration_10"]
    for i, inp in enumerate(inputs):
        local = analyze([inp], tmp_path / f"local{i}", AnalyzeOptions(jobs=2))
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                      dashboard_address=None) as cluster:
            remote = analyze([inp], tmp_path / f"dask{i}", AnalyzeOptions(scheduler=cluster.scheduler_address))
        strip = lambda s: [{k: v for k, v in r.items()} for r in s["ranks"]]  # noqa: E731
        assert strip(local) == strip(remote) and remote["failed"] == []
        a, b = _tables(tmp_path / f"local{i}"), _tables(tmp_path / f"dask{i}")
        assert a.keys() == b.keys() and all(a[k].equals(b[k]) for k in a)


def test_trace_errors_cross_process_boundaries(tmp_path):
    """A worker's TraceError must arrive whole (it once broke the process pool)."""
    import pickle

    from streamtrace.runtime.errors import TraceError, TruncatedTraceError
    e = TruncatedTraceError("/x/rank3.json", "truncated: the file ends inside traceEvents", offset=27, events=0)
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is TruncatedTraceError and str(e2) == str(e) and e2.path == "/x/rank3.json" and e2.offset == 27
    bad = tmp_path / "rank_0001.json"
    bad.write_text('{"traceEvents": [{"ph": "X"')
    good = tmp_path / "rank_0000.json"
    good.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]}')
    s = analyze([good, bad], tmp_path / "out", AnalyzeOptions(jobs=2))
    assert [r["rank"] for r in s["ranks"]] == [0]
    # not retried: it would fail again
    assert len(s["failed"]) == 1 and "truncated" in s["failed"][0]["error"] and s["failed"][0]["attempts"] == 1
    assert isinstance(TraceError("p", "m"), Exception)


def _tuned(x):
    from streamtrace.runtime import tuning
    return x, tuning._MALLOC_TUNED, os.environ.get("MALLOC_TRIM_THRESHOLD_")


@pytest.mark.parametrize("env,want", [({"MALLOC_TRIM_THRESHOLD_": "65536"}, "True False"),
                                      ({"MALLOC_TRIM_THRESHOLD_": "65536", "MALLOC_MMAP_THRESHOLD_": "131072"},
                                       "False False"),
                                      ({}, "False False")])
def test_tune_malloc_only_when_frozen(env, want):
    """glibc's mmap threshold is restored once per process, only where a MALLOC_* variable froze it."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | env
    code = "from streamtrace.runtime.tuning import tune_malloc as t; print(t(), t())"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert r.stdout.split() == want.split()


@pytest.mark.slow
def test_dask_workers_tune_malloc():
    """Tasks on a dask LocalCluster (whose nanny sets MALLOC_TRIM_THRESHOLD_) run with malloc tuned."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        res = run_tasks(_tuned, [(1,), (2,)], scheduler=cluster.scheduler_address)
    assert res == [(1, True, "65536"), (2, True, "65536")]


def test_pool_trims_the_parent_before_forking(monkeypatch):
    """A local pool hands the parent's freed heap back (runtime.tuning.trim) before its workers
    exist, so that no worker starts on top of pages the parent no longer uses."""
    import multiprocessing as mp

    from streamtrace.runtime import parallel
    seen = []
    monkeypatch.setattr(parallel, "trim", lambda: seen.append(len(mp.active_children())))
    assert run_tasks(flaky, [(0, "."), (1, ".")], jobs=2) == [0, 10]
    assert seen == [0]


@pytest.mark.parametrize("jobs, at", [(1, 0), (2, 0), (2, 2), (2, 9)])
def test_more_tasks_made_while_the_first_run(tmp_path, jobs, at):
    # ``more`` runs once, in this process, after the first ``at`` tasks were sent; its tasks' results
    # come after the others', whatever the order they were sent in
    calls = []

    def more():
        calls.append(os.getpid())
        return [(4, str(tmp_path)), (5, str(tmp_path))]
    got = run_tasks(flaky, [(i, str(tmp_path)) for i in (0, 1, 6)], jobs, more=more, more_at=at)
    assert got == [0, 10, 60, 40, 50] and calls == [os.getpid()]
