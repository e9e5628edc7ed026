"""Failure behaviour, round four (issue 49): untrusted names in the report and on the terminal, a Slurm
epilogue's environment (no locale, stdout closed or a pipe, non-UTF-8 folder names), losing good data
(negative ts, symbolic-link loops, clocks days apart).  Every hostile input is generated here, at test
time, from the synthetic job generator; expected values come from the raw files (json, pyarrow)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hostile import assert_no_traceback, cli, synth

from support import ROOT

HERE = {**os.environ, "PYTHONPATH": str(ROOT)}      # this checkout's package from any current folder

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
EVIL_KERNEL = "gemm<script>alert(1)</script>|x`y`\n| fake | row |\x1b]0;pwned\x07\x1b[2J"
EVIL_OP = "[l](javascript:alert(1)) *op*"
EVIL_PG = "<script>pg</script>"
EVIL_RUN = "job`x`|<script>alert(2)<:script>"


def _rewrite_names(it: Path):
    """Put the hostile names into every rank file of the iteration folder ``it`` (json in, json out)."""
    for f in sorted(it.glob("*.json")):
        d = json.loads(f.read_text())
        for ev in d["traceEvents"]:
            if ev.get("name") == GEMM:
                ev["name"] = EVIL_KERNEL
            elif ev.get("name") == "aten::mm":
                ev["name"] = EVIL_OP
        for pg in d["distributedInfo"]["pg_config"]:
            if pg["pg_desc"] == "TENSOR_MODEL_PARALLEL_GROUP":
                pg["pg_desc"] = EVIL_PG
        f.write_text(json.dumps(d))


def _outside_code_spans(md: str) -> str:
    """The Markdown without its code spans (CommonMark: a run of N backticks up to the next run of
    exactly N; a backslash-escaped backtick starts none): inside them HTML and links are text."""
    out, i = [], 0
    while i < len(md):
        if md[i] == "`" and (i == 0 or md[i - 1] != "\\"):
            n = len(md[i:]) - len(md[i:].lstrip("`"))
            m = re.compile(r"(?<!`)" + "`" * n + r"(?!`)").search(md, i + n)
            if m:
                i = m.end()
                continue
            out.append(md[i:i + n])
            i += n
            continue
        out.append(md[i])
        i += 1
    return "".join(out)


def _table_rows_intact(md: str):
    """Every table row has as many cells as its header (a cell's '|' escaped as '\\|')."""
    lines = md.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---") or line.startswith("|--"):
            n = len(re.findall(r"(?<!\\)\|", lines[i - 1]))
            j = i + 1
            while j < len(lines) and lines[j].startswith("|"):
                assert len(re.findall(r"(?<!\\)\|", lines[j])) == n, (lines[i - 1], lines[j])
                j += 1


@pytest.mark.slow
def test_report_escapes_untrusted_names(tmp_path):
    """A kernel name holding HTML, a table row and terminal escapes, an op name holding a javascript:
    link, a process group described as <script>, a run folder named with backticks, '|' and <script>:
    the Markdown shows them as text (no tag, no link, no escape character, every table row whole),
    the terminal gets no escape character, and report.json and the Parquet tables keep the exact text."""
    run = tmp_path / EVIL_RUN
    _rewrite_names(synth(run, world_size=2, tp=2, pp=1, steps=2))
    r = cli("epilogue", run, "--no-charts", "-j", "1")
    assert r.returncode == 0, r
    assert_no_traceback(r)
    assert "\x1b" not in r.stderr + r.stdout and "\x07" not in r.stderr + r.stdout
    out = run / "streamtrace"
    mds = list(out.glob("*.md"))
    assert len(mds) == 1, list(out.iterdir())
    md = mds[0].read_text()
    text = _outside_code_spans(md)
    assert "<script" not in text and not re.search(r"(?<!\\)\]\(javascript", text), text[:2000]
    assert "\x1b" not in md and "\x07" not in md
    assert md.splitlines()[0].startswith("# job\\`x\\`\\|&lt;script>")
    _table_rows_intact(md)
    rep = json.loads((out / "report.json").read_text())
    assert rep["name"] == EVIL_RUN
    assert EVIL_KERNEL in {row["name"] for row in rep["top_kernels"]["rows"]}
    names = set()
    for part in (out / "iteration_10" / "analysis" / "kernels").rglob("*.parquet"):
        names |= set(pq.read_table(part, columns=["name"]).column("name").to_pylist())
    assert EVIL_KERNEL in names
    ops = set()
    for part in (out / "iteration_10" / "analysis" / "ops").rglob("*.parquet"):
        ops |= set(pq.read_table(part, columns=["name"]).column("name").to_pylist())
    assert EVIL_OP in ops


def _run_env(**kw):
    env = {k: v for k, v in HERE.items() if k not in ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONUTF8", "PYTHONIOENCODING")}
    env.update(kw)
    return env


@pytest.mark.slow
@pytest.mark.parametrize("name,env", [(os.fsdecode(b"job_caf\xe9_\xff"), {}),
                                      ("j\u00f6b-\u00b5s", {"LC_ALL": "C", "PYTHONUTF8": "0"})],
                         ids=["latin1-bytes", "C-locale"])
def test_epilogue_in_odd_run_folder_names(tmp_path, name, env):
    """A run folder whose name is Latin-1 bytes (not UTF-8), and one named jöb-µs under LC_ALL=C with
    UTF-8 mode off and LANG unset (ASCII I/O): the epilogue writes epilogue.json and the report, exit 0,
    and its terminal lines show the bytes it cannot print as \\xNN."""
    run = tmp_path / name
    synth(run, world_size=2, tp=2, pp=1, steps=2)
    p = subprocess.run([sys.executable, "-m", "streamtrace", "epilogue", os.fsencode(run), "--no-charts", "-j", "1"],
                       capture_output=True, cwd=ROOT, env=_run_env(**env), timeout=300)
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode == 0, err
    assert "Traceback" not in err
    assert "\\x" in err                        # the name's bytes, shown
    summary = json.loads((run / "streamtrace" / "epilogue.json").read_bytes())["summary"]
    assert summary["failures"] == [] and summary["report"], summary
    assert Path(summary["report"]).is_file()


def test_validate_under_the_c_locale_says_its_error(tmp_path):
    """validate of a missing file named with non-ASCII letters, under LC_ALL=C (ASCII stderr): one
    'streamtrace: error:' line, exit 1."""
    p = subprocess.run([sys.executable, "-m", "streamtrace", "validate", str(tmp_path / "j\u00f6b-\u00b5s.json")],
                       capture_output=True, cwd=ROOT, env=_run_env(LC_ALL="C", PYTHONUTF8="0"), timeout=120)
    lines = [x for x in p.stderr.decode("ascii", "replace").strip().splitlines() if not x.startswith("notice: ")]
    assert p.returncode == 1 and len(lines) == 1 and lines[0].startswith("streamtrace: error: "), p.stderr


@pytest.mark.parametrize("path", ["/proc/self/mem", "a\x1b[2Jb.json"])
def test_validate_of_odd_paths_says_one_error_line(tmp_path, path):
    """A path that opens but cannot be read (EIO), and one holding a terminal escape: one
    'streamtrace: error:' line (the escape shown as \\x1b), exit 1."""
    r = cli("validate", path, cwd=tmp_path, env=HERE)
    errors = [x for x in r.err_lines if not x.startswith("notice: ")]       # a first run's compile notice aside
    assert r.returncode == 1 and len(errors) == 1 and r.last_err.startswith("streamtrace: error: "), r
    assert "\x1b" not in r.stderr


def _closed_stdout(args, close="1", cwd=ROOT):
    """The CLI run with stdout (and stderr with close="12") closed, as a shell's ``>&-``."""
    redir = {"1": ">&-", "12": ">&- 2>&-"}[close]
    cmd = " ".join(f"'{a}'" for a in [sys.executable, "-m", "streamtrace", *map(str, args)]) + " " + redir
    return subprocess.run(["sh", "-c", cmd], cwd=cwd, env=HERE, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("close", ["1", "12"])
def test_closed_stdout_loses_neither_work_nor_exit_code(tmp_path, close):
    """``--version``, validate, merge and analyze with stdout (and stderr) closed: exit 0, no traceback,
    the outputs written."""
    it = synth(tmp_path / "job")
    f = sorted(it.glob("*.json"))[0]
    assert _closed_stdout(["--version"], close).returncode == 0
    r = _closed_stdout(["validate", f], close)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    r = _closed_stdout(["merge", it, "-o", tmp_path / "m.json"], close)
    assert r.returncode == 0 and "Traceback" not in r.stderr and (tmp_path / "m.json").is_file(), r.stderr
    r = _closed_stdout(["analyze", it, "-o", tmp_path / "an"], close)
    assert r.returncode == 0 and (tmp_path / "an" / "summary.json").is_file(), r.stderr


@pytest.mark.slow
def test_epilogue_with_stdout_closed_or_a_closed_pipe(tmp_path):
    """The epilogue with stdout closed, and with stdout a pipe its reader closed at once: exit 0,
    epilogue.json and the report written, no traceback."""
    synth(tmp_path / "job", steps=2)
    r = _closed_stdout(["epilogue", tmp_path / "job", "--no-charts", "-j", "1"])
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert (tmp_path / "job" / "streamtrace" / "epilogue.json").is_file()
    p = subprocess.Popen([sys.executable, "-m", "streamtrace", "epilogue", str(tmp_path / "job"), "--no-charts"],
                         cwd=ROOT, env=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 0 and "Traceback" not in err, err


def _aggregate_ranks(out: Path) -> int:
    """The ranks of the aggregate folder's ranks.parquet (pyarrow)."""
    return len(set(pq.read_table(out / "aggregate" / "ranks.parquet", columns=["rank"]).column("rank").to_pylist()))


@pytest.mark.slow
def test_interrupted_rerun_leaves_a_record_that_agrees_with_the_outputs(tmp_path):
    """Issue 47, item 9: an epilogue rerun after a rank file was removed (4 -> 3 ranks), Ctrl-C'd once
    its new aggregate is in place: exit 130, and epilogue.json then says 3 ranks (not the earlier
    run's 4), names the stage that was cut, and claims no report of this run it did not write."""
    it = synth(tmp_path / "job", world_size=4, tp=2, pp=1, steps=2)
    out = tmp_path / "job" / "streamtrace"
    r = cli("epilogue", tmp_path / "job", "-j", "1")
    assert r.returncode == 0, r
    assert json.loads((out / "epilogue.json").read_text())["summary"]["ranks"] == 4
    (it / "rank_0003_iter_10.pt.trace.json").unlink()
    agg_json = out / "aggregate" / "aggregate.json"
    ino = agg_json.stat().st_ino
    p = subprocess.Popen([sys.executable, "-m", "streamtrace", "epilogue", str(tmp_path / "job"), "-j", "1"],
                         cwd=ROOT, env=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         start_new_session=True)
    import time
    t0 = time.monotonic()
    while p.poll() is None and time.monotonic() - t0 < 200:
        try:
            if agg_json.stat().st_ino != ino:
                break
        except FileNotFoundError:
            pass
        time.sleep(0.002)
    fired = p.poll() is None
    if fired:
        os.killpg(p.pid, 2)
    err = p.stderr.read().decode()
    code = p.wait(timeout=120)
    if not fired:
        pytest.skip("the epilogue ended before its aggregate was replaced")
    assert "Traceback" not in err and "Exception ignored" not in err, err
    summary = json.loads((out / "epilogue.json").read_text())["summary"]
    if code == 0:                   # the signal came after the last write: nothing to agree on
        assert summary["ranks"] == 3
        return
    assert code == 130, err
    assert summary["ranks"] == 3 == _aggregate_ranks(out) and summary.get("interrupted"), summary
    assert "interrupted" in summary["stages"].values() or summary["stages"].get("report") == "done", summary
    if summary["report"]:
        assert summary["stages"]["report"] == "done"


@pytest.mark.slow
def test_sigterm_sweep_over_the_epilogue_is_never_lost(tmp_path):
    """SIGTERM sent to the epilogue's process group at 9 instants over its run (stages forking their
    processes and pools): each time it ends with 143 (or 0 when it was done), within 25 s, with no
    "Exception ignored" and no traceback, and no stage finishes after the signal."""
    import time
    synth(tmp_path / "job", world_size=4, tp=2, pp=1, steps=2)
    for k, delay in enumerate([0.3, 0.6, 1.0, 1.5, 2.1, 2.8, 3.6, 4.5, 5.5]):
        out = tmp_path / f"out{k}"
        p = subprocess.Popen([sys.executable, "-m", "streamtrace", "epilogue", str(tmp_path / "job"), "-o", str(out),
                              "-j", "2"], cwd=ROOT, env=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
        time.sleep(delay)
        t_sig = time.monotonic()
        if p.poll() is None:
            os.killpg(p.pid, 15)
        err = p.stderr.read().decode()
        code = p.wait(timeout=60)
        assert time.monotonic() - t_sig < 25, (delay, err)
        assert code in (143, 0), (delay, code, err)
        assert "Exception ignored" not in err and "Traceback" not in err, (delay, err)
        if code == 143:
            tail = err[err.find("terminated"):] if "terminated" in err else ""
            assert "done in" not in tail, (delay, err)


def _shift_ts(src: Path, dst: Path, shift_us: int):
    """Copy the job ``src`` to ``dst`` with every event's ``ts`` moved by ``shift_us`` microseconds,
    exactly (on the number's text), and its baseTimeNanoseconds with it."""
    from decimal import Decimal
    num = re.compile(rb'"ts":\s*(-?[0-9]+(?:\.[0-9]+)?)')
    for f in src.rglob("*"):
        out = dst / f.relative_to(src)
        if f.is_dir():
            out.mkdir(parents=True, exist_ok=True)
            continue
        data = f.read_bytes()
        if f.name.endswith(".pt.trace.json"):
            data = num.sub(lambda m: b'"ts":' + str(Decimal(m.group(1).decode()) + shift_us).encode(), data)
            data = re.sub(rb'"baseTimeNanoseconds":\s*([0-9]+)',
                          lambda m: b'"baseTimeNanoseconds": ' + str(int(m.group(1)) + shift_us * 1000).encode(), data)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)


def _gpu_events(path: Path) -> int:
    return sum(1 for e in json.loads(path.read_text())["traceEvents"]
               if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))


@pytest.mark.slow
def test_negative_ts_are_kept(tmp_path):
    """A job whose every ts is negative (the same job moved 10,000 s before 0): analyze keeps every GPU
    event (as many kernels rows as the raw JSON holds), the epilogue writes its report, and the
    ranks' times equal the unmoved job's."""
    synth(tmp_path / "pos", world_size=2, tp=2, pp=1, steps=2)
    first = min(float(m) for f in (tmp_path / "pos").rglob("*.pt.trace.json")
                for m in re.findall(r'"ts":\s*(-?[0-9.]+)', f.read_text()))
    _shift_ts(tmp_path / "pos", tmp_path / "neg", -int(first) - 10_000_000_000)
    for job in ("pos", "neg"):
        r = cli("epilogue", tmp_path / job, "--no-charts", "-j", "1")
        assert r.returncode == 0 and "dropped" not in r.stderr, r
    for f in sorted((tmp_path / "neg").rglob("*.pt.trace.json")):
        assert max(float(m) for m in re.findall(r'"ts":\s*(-?[0-9.]+)', f.read_text())) < 0
        rank = int(re.search(r"rank_(\d+)", f.name).group(1))
        parts = (tmp_path / "neg" / "streamtrace" / "iteration_10" / "analysis" / "kernels").glob(f"*/rank={rank}/*.parquet")
        assert sum(pq.read_metadata(p).num_rows for p in parts) == _gpu_events(f) > 0
    summary = json.loads((tmp_path / "neg" / "streamtrace" / "epilogue.json").read_text())["summary"]
    assert summary["report"] and not summary["failures"], summary
    cols = ["rank", "compute_ns", "comm_ns", "overlap_ns", "idle_ns", "busy_ns"]
    a = pq.read_table(tmp_path / "pos" / "streamtrace" / "aggregate" / "ranks.parquet", columns=cols).to_pylist()
    b = pq.read_table(tmp_path / "neg" / "streamtrace" / "aggregate" / "ranks.parquet", columns=cols).to_pylist()
    assert a == b


@pytest.mark.slow
def test_symlink_loops_are_one_failure_each(tmp_path):
    """Two links named like rank traces pointing at each other, ``up -> ..``, ``self -> self`` and a
    topology-named link to itself among a 2-rank job's files: the epilogue reports the job's 2 ranks
    (exit 0, its report written) and each looping rank link as one failure of discovery."""
    it = synth(tmp_path / "job", world_size=2, tp=2, pp=1, steps=2)
    os.symlink("rank_0005_iter_10.pt.trace.json", it / "rank_0004_iter_10.pt.trace.json")
    os.symlink("rank_0004_iter_10.pt.trace.json", it / "rank_0005_iter_10.pt.trace.json")
    os.symlink("..", it / "up")
    os.symlink("self", it / "self")
    os.symlink("parallel_topology.json", tmp_path / "job" / "parallel_topology.json")
    r = cli("epilogue", tmp_path / "job", "--no-charts", "-j", "1")
    assert r.returncode == 0, r
    assert_no_traceback(r)
    summary = json.loads((tmp_path / "job" / "streamtrace" / "epilogue.json").read_text())["summary"]
    assert summary["ranks"] == 2 and summary["report"], summary
    failed = sorted(Path(f["file"]).name for f in summary["failures"])
    assert failed == ["rank_0004_iter_10.pt.trace.json", "rank_0005_iter_10.pt.trace.json"], summary["failures"]


@pytest.mark.slow
def test_clocks_days_apart_are_one_job(tmp_path):
    """A 4-rank job whose hosts' clocks are a day apart each (baseTimeNanoseconds and ts): the
    epilogue keeps every rank (no "another job's rank file?"), notes the clocks with a pointer to
    --clock-sync, aggregates with the offsets estimated from the collectives, and each rank's times
    equal those of the same job on one clock."""
    day = 86_400 * 10**9
    synth(tmp_path / "one", world_size=4, tp=2, pp=1, steps=2)
    synth(tmp_path / "apart", world_size=4, tp=2, pp=1, steps=2, clock_skew_ns=day)
    bases = {json.loads(f.read_text())["baseTimeNanoseconds"] for f in (tmp_path / "apart").rglob("*.pt.trace.json")}
    assert max(bases) - min(bases) == 3 * day
    for job in ("one", "apart"):
        r = cli("epilogue", tmp_path / job, "--no-charts", "-j", "1")
        assert r.returncode == 0, r
    summary = json.loads((tmp_path / "apart" / "streamtrace" / "epilogue.json").read_text())["summary"]
    assert summary["ranks"] == 4 and not summary["failures"] and summary["report"], summary
    assert any("--clock-sync" in n for n in summary["notes"]), summary["notes"]
    meta = json.loads((tmp_path / "apart" / "streamtrace" / "aggregate" / "aggregate.json").read_text())
    assert meta["clock_sync"] == "collectives" and any("clocks differ" in w for w in meta["warnings"])
    cols = ["rank", "compute_ns", "comm_ns", "overlap_ns", "busy_ns"]
    a = pq.read_table(tmp_path / "one" / "streamtrace" / "aggregate" / "ranks.parquet", columns=cols).to_pylist()
    b = pq.read_table(tmp_path / "apart" / "streamtrace" / "aggregate" / "ranks.parquet", columns=cols).to_pylist()
    assert a == b


# ================================================================= inputs built to exhaust memory or time
# Speed and memory are measured in bench/bench_hostile.py; these tests check what each command does with
# such an input: a hostile environment (an address-space limit, as a small node has; a 2 MB file
# system) where today's code runs out, and the result the command must give.

def _limited(args, gb=3, timeout=300):
    """The CLI with its address space limited to ``gb`` GiB (a node's memory: what does not fit raises
    MemoryError or is refused, as on a small node)."""
    import resource
    lim = gb << 30

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    return _cli_pre(args, limit, timeout)


def _cli_pre(args, preexec, timeout):
    argv = [sys.executable, "-m", "streamtrace", *map(str, args)]
    p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=HERE, timeout=timeout, preexec_fn=preexec)
    from hostile import Result
    return Result(p.returncode, p.stdout, p.stderr, args)


def _add_events(path: Path, raw: bytes):
    """Put the raw event texts ``raw`` (``e1,e2,...``) first in the file's traceEvents array."""
    data = path.read_bytes()
    i = data.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    path.write_bytes(data[:i] + raw + b"," + data[i:])


@pytest.mark.slow
def test_events_nested_100000_levels_deep(tmp_path):
    """An event whose args nest 100,000 levels deep, in a 2-rank job, under a 3 GiB address space:
    validate notices it (deep_event), analyze and merge keep every event and say it, the merged trace
    holds the args exactly, and the epilogue writes its report."""
    it = synth(tmp_path / "job", world_size=2, tp=2, pp=1, steps=2)
    f = it / "rank_0000_iter_10.pt.trace.json"
    deep = b"[" * 100_000 + b"7" + b"]" * 100_000
    _add_events(f, b'{"ph":"X","cat":"cpu_op","name":"deep_op","pid":1,"tid":1,"ts":1,"dur":1,"args":{"a":' + deep + b"}}")
    r = _limited(["validate", f])
    assert "deep_event 1" in r.stdout and "Traceback" not in r.stderr, r
    r = _limited(["analyze", it, "-o", tmp_path / "an"])
    assert r.returncode == 0 and "nested deeper than 200 levels" in r.stderr, r
    summary = json.loads((tmp_path / "an" / "summary.json").read_text())
    assert len(summary["ranks"]) == 2
    r = _limited(["merge", it, "-o", tmp_path / "m.json"])
    assert r.returncode == 0, r
    assert (tmp_path / "m.json").read_bytes().count(deep) == 1
    r = _limited(["epilogue", tmp_path / "job", "--no-charts", "-j", "1"])
    assert r.returncode == 0 and json.loads((tmp_path / "job" / "streamtrace" / "epilogue.json").read_text())[
        "summary"]["report"], r


@pytest.mark.slow
def test_one_correlation_id_shared_by_200000_launches_and_kernels(tmp_path):
    """200,000 launches and 200,000 kernels on one correlation id (a 3 GiB address space): analyze
    links every kernel to the first launch (as for any id shared by several launches) and keeps every
    kernel, counted from the raw file."""
    it = synth(tmp_path / "job", world_size=2, tp=2, pp=1, steps=1)
    f = it / "rank_0000_iter_10.pt.trace.json"
    n = 200_000
    launches = b",".join(b'{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":%d,'
                         b'"dur":1,"args":{"correlation":999999999}}' % (10 + 3 * i) for i in range(n))
    kernels = b",".join(b'{"ph":"X","cat":"kernel","name":"shared_k","pid":0,"tid":99,"ts":%d,"dur":1,'
                        b'"args":{"correlation":999999999,"device":0,"stream":99}}' % (12 + 3 * i) for i in range(n))
    _add_events(f, launches + b"," + kernels)
    r = _limited(["analyze", f, "-o", tmp_path / "an"])
    assert r.returncode == 0, r
    rows = pq.read_table(tmp_path / "an" / "kernels", columns=["name", "launch_op"]).to_pylist()
    shared = [x for x in rows if x["name"] == "shared_k"]
    assert len(shared) == n and all(x["launch_op"] == "cudaLaunchKernel" for x in shared)


@pytest.mark.slow
def test_100000_distinct_pid_tid_pairs(tmp_path):
    """100,000 CPU tracks (a pid and tid each) in one trace: merge keeps every track (distinct merged
    (pid, tid) pairs, counted in its output; CPU processes past 100 share one merged pid by design),
    analyze writes every event's ops row; each within the CLI helper's 300 s (ac550c5 ran past it:
    both were quadratic in the tracks)."""
    f = synth(tmp_path / "job", world_size=2, tp=2, pp=1, steps=1) / "rank_0000_iter_10.pt.trace.json"
    n = 100_000
    _add_events(f, b",".join(b'{"ph":"X","cat":"cpu_op","name":"t","pid":%d,"tid":%d,"ts":%d,"dur":1}'
                             % (100_000 + i, i, 10 + i) for i in range(n)))
    r = cli("merge", f, "-o", tmp_path / "m.json", "-j", "1", env=HERE)
    assert r.returncode == 0, r
    tracks = {(e["pid"], e["tid"]) for e in json.loads((tmp_path / "m.json").read_text())["traceEvents"]
              if e.get("name") == "t" and e.get("ph") == "X"}
    assert len(tracks) == n
    r = cli("analyze", f, "-o", tmp_path / "an", "-j", "1", env=HERE)
    assert r.returncode == 0, r
    t = pq.read_table(tmp_path / "an" / "ops", columns=["name", "tid"]).to_pylist()
    assert len({x["tid"] for x in t if x["name"] == "t"}) == n


@pytest.mark.slow
def test_a_200_mb_name_is_cut_counted_and_said(tmp_path):
    """An op named by 200,000,000 characters: analyze keeps the op with its name cut to the first 65,536
    bytes and the count of the rest, and says so; merge keeps the name whole."""
    f = synth(tmp_path / "job", world_size=2, tp=2, pp=1, steps=1) / "rank_0000_iter_10.pt.trace.json"
    n = 200_000_000
    _add_events(f, b'{"ph":"X","cat":"cpu_op","name":"' + b"n" * n + b'","pid":1,"tid":1,"ts":10,"dur":1}')
    r = cli("analyze", f, "-o", tmp_path / "an", env=HERE)
    assert r.returncode == 0 and "1 name(s) longer than 65,536 bytes cut" in r.stderr, r
    names = [x for x in pq.read_table(tmp_path / "an" / "ops", columns=["name"]).column("name").to_pylist()
             if x.startswith("nnn")]
    assert names == ["n" * 65_535 + f"... ({n - 65_535:,} more bytes cut)"]
    r = cli("merge", f, "-o", tmp_path / "m.json", env=HERE)
    assert r.returncode == 0, r
    assert (tmp_path / "m.json").stat().st_size > n


def _gzip_bomb(path: Path, whitespace: int):
    """A valid 2-rank job's rank 0 trace, gzipped, with ``whitespace`` bytes of spaces before its array's
    closing bracket: a few MB that inflate to GBs (its size field is the size modulo 4 GiB)."""
    import gzip
    it = synth(path.parent / "src", world_size=2, tp=2, pp=1, steps=1)
    data = (it / "rank_0000_iter_10.pt.trace.json").read_bytes()
    i = data.rindex(b"]")
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as z:
        z.write(data[:i])
        blk = b" " * (64 << 20)
        for _ in range(whitespace // len(blk)):
            z.write(blk)
        z.write(data[i:])


@pytest.mark.slow
def test_a_gzip_bomb_is_merged_as_a_stream(tmp_path, small_fs):
    """A 1.3 MB gzip trace that inflates to 1.3 GB of whitespace, merged with 2 workers into a 2 MB file
    system: no decompressed copy is written (ac550c5 copied it whole beside the output: no space left),
    the events are merged, and a warning says how much it inflated."""
    bomb = tmp_path / "bomb" / "rank_0000.json.gz"
    bomb.parent.mkdir()
    _gzip_bomb(bomb, 20 * (64 << 20))
    r = cli("merge", bomb, "-o", small_fs.path / "m.json", "-j", "2", env=HERE)
    assert r.returncode == 0, r
    assert re.search(r"inflates [0-9,]+x .* read as a stream", r.stderr), r.stderr
    assert json.loads((small_fs.path / "m.json").read_text())["traceEvents"]


def test_a_decompressed_copy_stops_at_its_bound(tmp_path):
    """plain_copy of a gzip that inflates beyond 64 times its size: InflateBoundError, no file left."""
    from streamtrace.trace.source import InflateBoundError, plain_copy
    bomb = tmp_path / "b" / "rank_0000.json.gz"
    bomb.parent.mkdir()
    _gzip_bomb(bomb, 64 << 20)
    out = tmp_path / "copies"
    out.mkdir()
    with pytest.raises(InflateBoundError, match="read as a stream"):
        plain_copy(bomb, out)
    assert list(out.iterdir()) == []
