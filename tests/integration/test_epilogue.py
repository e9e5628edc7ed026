"""``streamtrace epilogue``: the whole post-job pipeline, robust and idempotent."""
from __future__ import annotations

import json

from streamtrace.epilogue import run
from streamtrace.synth.job import SynthSpec, generate_job
from streamtrace.validate.check import validate

from support import run_cli


def make_run(tmp_path):
    d = tmp_path / "tb"
    generate_job(d, SynthSpec(world_size=4, tp=2, pp=1, compress=True))
    (d / "iteration_10" / "rank_0007_iter_10.pt.trace.json").write_text('{"traceEvents": [{"ph": "X"')
    return d


def test_epilogue_end_to_end_keeps_going_and_reuses(tmp_path):
    d = make_run(tmp_path)
    s = run(d, jobs=2)
    out = d / "streamtrace"
    # the truncated rank is reported with its file, the four good ranks are processed
    bad = [f for f in s["failures"] if "rank_0007" in f["file"]]
    assert bad and all("truncated" in f["error"] for f in bad)
    summary = json.loads((out / "iteration_10" / "analysis" / "summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"]] == [0, 1, 2, 3]
    merged = out / "iteration_10" / "merged_gpu.json.gz"
    rep = validate(merged)
    assert rep["ok"] and rep["events"] > 0
    assert (out / "aggregate").is_dir()
    state = json.loads((out / "epilogue.json").read_text())
    assert state["summary"]["stages"]["iteration_10/analyze"] == "done"
    # second run: nothing changed, every successful stage is reused
    s2 = run(d, jobs=2)
    assert s2["stages"]["iteration_10/analyze"] == "reused" and s2["stages"]["iteration_10/merge"] == "reused"
    assert s2["stages"].get("aggregate") in ("reused", None) or s["stages"]["aggregate"] == "failed"


def test_epilogue_never_raises_and_exit_codes(tmp_path):
    s = run(tmp_path / "does-not-exist")
    assert s["failures"]
    d = make_run(tmp_path)
    r = run_cli("epilogue", d, "-j", "1")
    assert r.returncode == 0 and "FAILED" in r.stderr and "rank_0007" in r.stderr
    r = run_cli("epilogue", d, "-j", "1", "--strict")
    assert r.returncode == 1


def test_epilogue_does_what_report_does_into_its_own_folder(tmp_path):
    """A read-only run folder, -o elsewhere, throughput, topology, chart ranks (issue 17, item 7); a later
    run never takes merge's or its own outputs for rank traces (item 1)."""
    import os
    import stat

    from streamtrace.merge import MergeOptions, merge
    d = tmp_path / "job42" / "tb"
    generate_job(d, SynthSpec(world_size=4, tp=2, pp=2, microbatches=1))
    topo = d / "streamtrace_topology.json"
    # a merged trace of the run put into the run folder, under a name that says nothing
    merge([d / "iteration_10"], d / "iteration_10" / "everything.json", MergeOptions(jobs=1))
    for p in [d, *d.rglob("*")]:
        os.chmod(p, os.stat(p).st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        out = tmp_path / "out"
        r = run_cli("epilogue", d, "-o", out, "-j", "1", "--tokens-per-step", "4096", "--topology", topo,
                    "--chart-ranks", "0", "-q")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == f"report: {out / 'job42.md'}"        # -q: the one final line; the job's name
        assert "FAILED" not in r.stderr
        rep = json.loads((out / "report.json").read_text())
        assert rep["throughput"]["tokens_per_step"] == 4096 and rep["throughput"]["tokens_per_s"] > 0
        charts = {p.name for p in (out / "charts").glob("rank_*.png")}
        assert charts and all(c.startswith("rank_0_") for c in charts)
        s = json.loads((out / "epilogue.json").read_text())["summary"]
        assert s["ranks"] == 4 and not s["failures"]
        # once more: the merged trace and the outputs (here inside no "streamtrace" folder) are not rank traces
        s2 = run(d, outdir=out, jobs=1, topology=str(topo))
        assert s2["ranks"] == 4 and not s2["failures"], s2["failures"]
        assert s2["stages"]["iteration_10/analyze"] == "reused"
    finally:
        for p in [d, *d.rglob("*")]:
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)


def test_epilogue_inside_the_run_folder_skips_its_outputs(tmp_path):
    d = tmp_path / "run"
    generate_job(d, SynthSpec(world_size=4, tp=2, pp=2, microbatches=1))
    out = d / "analysis-out"
    s = run(d, outdir=out, jobs=1, charts=False)
    assert not s["failures"] and s["ranks"] == 4
    s2 = run(d, outdir=out, jobs=1, charts=False)
    assert not s2["failures"] and s2["ranks"] == 4 and s2["iterations"] == [10]


def test_epilogue_of_a_cpu_only_run_says_so(tmp_path):
    import shutil

    from support import REAL, need_shared
    need_shared()
    d = tmp_path / "gloo"
    (d / "iteration_551").mkdir(parents=True)
    shutil.copy(REAL / "cpu_only_gloo_rank34_of300.json.gz", d / "iteration_551" / "rank_0034_iter_551.json.gz")
    s = run(d, jobs=1, charts=False)
    assert any("CPU-only" in n for n in s["notes"]), s
    merged = d / "streamtrace" / "iteration_551" / "merged_gpu.json.gz"
    assert validate(merged)["events"] > 0


def test_epilogue_stages_run_in_their_own_processes_and_a_killed_stage_is_one_failure(tmp_path, monkeypatch):
    """Each stage runs in a child process (its memory is freed when it ends): a stage the system kills
    (here aggregate, as the out-of-memory killer would) is logged as that stage's failure and the
    epilogue ends normally; the analyze and merge failures the children logged reach epilogue.json."""
    import io
    import os
    import signal

    import sys

    import streamtrace.analyze
    import streamtrace.aggregate.run
    analysis, aggregation = sys.modules["streamtrace.analyze"], sys.modules["streamtrace.aggregate.run"]
    d = make_run(tmp_path)
    real = analysis.analyze
    mark = tmp_path / "analyze.pid"

    def analyze(*a, **k):
        mark.write_text(str(os.getpid()))                # the parent sees files, not the child's memory
        return real(*a, **k)

    def aggregate(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)
    monkeypatch.setattr(analysis, "analyze", analyze)           # the stages import them in their process
    monkeypatch.setattr(aggregation, "aggregate", aggregate)
    log = io.StringIO()
    s = run(d, jobs=1, log_file=log)
    assert int(mark.read_text()) != os.getpid()
    agg = [f for f in s["failures"] if f["stage"] == "aggregate"]
    assert len(agg) == 1 and "SIGKILL" in agg[0]["error"]
    assert any("rank_0007" in f["file"] and f["stage"] == "analyze" for f in s["failures"])   # relayed from the child
    assert s["report"] is None and s["stages"]["aggregate"] == "failed"
    assert "FAILED aggregate" in log.getvalue() and "analyze: done" in log.getvalue()
    state = json.loads((d / "streamtrace" / "epilogue.json").read_text())
    assert state["state"]["iteration_10/analyze"]["failures"]           # kept for a later run that reuses it
    # in-process (isolate=False): the same stage functions run in this process
    monkeypatch.setattr(aggregation, "aggregate", lambda *a, **k: None)
    run(d, jobs=1, isolate=False, outdir=tmp_path / "inproc", log_file=io.StringIO())
    assert int(mark.read_text()) == os.getpid()


def test_epilogue_process_never_loads_the_stages(tmp_path):
    """The epilogue's own process does not import matplotlib (the report's): discovery and every stage
    run (and import what they need) in child processes, so no stage starts on top of that memory.
    numba and pyarrow it loads once, before the first stage (``stages.share_imports``): every stage
    uses them and inherits them instead of loading them again."""
    import subprocess
    import sys

    d = tmp_path / "tb"
    generate_job(d, SynthSpec(world_size=2, tp=2, pp=1))
    code = ("import gc, sys, streamtrace.epilogue as e; s = e.run(sys.argv[1], jobs=1, charts=False); "
            "print(bool(s['report']), gc.get_freeze_count(), "
            "sorted(m for m in ('numba', 'pyarrow', 'matplotlib') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True 0 ['numba', 'pyarrow']"     # (frozen for the stages' forks, thawed after)


def test_an_epilogue_whose_stages_are_all_reused_does_not_set_numba_up(tmp_path):
    """``share_imports`` runs before a stage that runs, not for one reused: a rerun with nothing
    changed stays free of numba (~0.5-0.9 CPU-s; the Python API's: the CLI imports it to check the
    kernel cache first, and its discovery's process inherits it)."""
    import subprocess
    import sys

    d = tmp_path / "tb"
    generate_job(d, SynthSpec(world_size=2, tp=2, pp=1))
    code = ("import sys, streamtrace.epilogue as e; s = e.run(sys.argv[1], jobs=1, charts=False); "
            "print(sorted(set(s['stages'].values())), 'numba' in sys.modules)")
    runs = [subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True, timeout=600)
            for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr
    assert runs[0].stdout.split()[-1] == "True"
    assert runs[1].stdout.strip() == "['reused'] False"


def test_the_report_loads_no_kernels(tmp_path):
    """The report calls no numba kernel: importing it leaves numba out (its modules and LLVM: ~60-80 MB of
    a process's RSS), and the epilogue runs its report stage in a process forked before the epilogue set
    numba up (``StageRun.report_process``), through the CLI (its standby forked before its kernel check)
    and through the Python API alike; the other stages' processes still inherit numba's set-up."""
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", "import sys, streamtrace.report.run; print('numba' in sys.modules)"],
                       capture_output=True, text=True, timeout=300)
    assert (r.returncode, r.stdout.strip()) == (0, "False"), r.stderr
    d = tmp_path / "tb"
    generate_job(d, SynthSpec(world_size=2, tp=2, pp=1))
    probe = ("import os, sys, streamtrace.epilogue.stages as st\n"
             "real = st.report_stage\n"
             "def probe(*a):\n"
             "    open(os.environ['PROBE'], 'a').write(f\"report {'numba' in sys.modules} {os.getppid()}\\n\")\n"
             "    return real(*a)\n"
             "st.report_stage = probe\n")
    api = probe + "import streamtrace.epilogue as e; s = e.run(sys.argv[1], jobs=1, charts=False); print(os.getpid())"
    cli = probe + ("from streamtrace.cli import main; sys.argv[0] = 'streamtrace'; "
                   "main(['epilogue', sys.argv[1], '-q', '-j', '1', '--no-charts', '-o', sys.argv[2]]); print(os.getpid())")
    for code, out in ((api, None), (cli, tmp_path / "cli-out")):
        env = {**os.environ, "PROBE": str(tmp_path / "probe.txt")}
        (tmp_path / "probe.txt").unlink(missing_ok=True)
        r = subprocess.run([sys.executable, "-c", code, str(d), str(out)], capture_output=True, text=True,
                           timeout=600, env=env)
        assert r.returncode == 0, r.stderr
        epilogue_pid = r.stdout.split()[-1]
        # one report, in a direct child of the epilogue's process (its standby), without numba
        assert (tmp_path / "probe.txt").read_text().split() == ["report", "False", epilogue_pid]
