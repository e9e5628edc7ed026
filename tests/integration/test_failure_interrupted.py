"""Failure behaviour (issue 19), interrupted runs: analyze and aggregate signalled mid-write leave the
complete old or the complete new output folder; spill folders, merge segments and warm-up folders
are removed on SIGTERM and by the next run after SIGKILL; worker processes exit with their
parent.  Helpers: tests/hostile.py; fixtures: tests/integration/conftest.py."""
from __future__ import annotations

import json
import os
import shutil
import signal
import time

import pytest

from hostile import alive, cli, cli_signalled, hidden_entries, tree_digest, visible_files


# =========================================================================== HALF-WRITTEN
# --- analyze interrupted: the target holds the complete old or the complete new dataset ------

def _analysis_state(outdir, old_digest, new_files, new_ranks):
    """'absent', 'old', 'new' or a description of the mix."""
    vis = visible_files(outdir)
    if not vis:
        return "absent"
    if old_digest is not None and tree_digest(outdir) == old_digest:
        return "old"
    try:
        ranks = sorted(r["rank"] for r in json.loads((outdir / "summary.json").read_text())["ranks"])
    except (OSError, ValueError, KeyError, TypeError):
        ranks = None
    if ranks == new_ranks and vis == new_files:
        return "new"
    return (f"a mix: summary.json ranks {ranks}, {len(vis)} visible files "
            f"(old had {len(old_digest or {})}, new has {len(new_files)}): {sorted(vis)[:12]}")


@pytest.mark.parametrize("over", ["fresh", "over_old"])
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_halfwritten_analyze_interrupted(small_analysis, medium_job, tmp_path, sig, over):
    """analyze signalled mid-write (3 part files in): OUTDIR holds nothing, the complete old
    analysis, or the complete new one — never old summary.json beside new partitions."""
    w = tmp_path / "w"
    w.mkdir()
    outdir = w / "an"
    old = None
    if over == "over_old":
        shutil.copytree(small_analysis / "analysis", outdir)
        old = tree_digest(outdir)
    new_files = visible_files(medium_job / "analysis")
    r, fired, _ = cli_signalled(["analyze", medium_job / "job" / "iteration_10", "-o", outdir, "-j", "1"],
                                w, getattr(signal, sig), changed=3)
    state = _analysis_state(outdir, old, new_files, list(range(8)))
    allowed = {"absent", "new"} if over == "fresh" else {"old", "new"}
    assert state in allowed, f"after {sig} (fired={fired}) OUTDIR holds {state}\n{r!r}"


def test_halfwritten_aggregate_interrupted_sigkill_over_old(small_analysis, medium_job, tmp_path):
    """aggregate SIGKILLed while writing over an older aggregate: the folder is one unit."""
    import pyarrow.parquet as pq
    w = tmp_path / "w"
    w.mkdir()
    outdir = w / "agg"
    shutil.copytree(small_analysis / "aggregate", outdir)
    old = tree_digest(outdir)
    r, fired, _ = cli_signalled(["aggregate", medium_job / "analysis", "-o", outdir], w, signal.SIGKILL, changed=3)
    if tree_digest(outdir) == old:
        return
    meta = json.loads((outdir / "aggregate.json").read_text())
    for table in ("ranks.parquet", "rank_phase.parquet"):
        got = sorted(set(pq.read_table(outdir / table).column("rank").to_pylist()))
        assert got == meta["ranks"], (f"after SIGKILL (fired={fired}) {table} has ranks {got}, "
                                      f"aggregate.json {meta['ranks']}: a mix of two runs")


# --- stale temporaries: spill folders and merge segments ----------------------------------

@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_halfwritten_spill_folder_cleaned(small_analysis, medium_job, tmp_path, sig):
    """analyze --chunked killed mid-run leaves its spill folder (.streamtrace-*/N.bin): SIGTERM
    must remove it at once, and after SIGKILL the next run into OUTDIR must."""
    w = tmp_path / "w"
    w.mkdir()
    outdir = w / "an"
    r, fired, _ = cli_signalled(["analyze", medium_job / "job" / "iteration_10", "-o", outdir, "-j", "1",
                                 "--chunked"], w, getattr(signal, sig), match=r"\.bin$", changed=6)
    if sig == "SIGKILL":
        r2 = cli("analyze", small_analysis / "job" / "iteration_10", "-o", outdir, "-j", "1", "--chunked")
        assert r2.returncode == 0, r2
    else:
        time.sleep(0.2)
        if fired:              # an orderly exit: one line, 128 + SIGTERM
            assert r.returncode == 143 and r.err_lines == ["streamtrace: terminated (SIGTERM)"], r
    assert hidden_entries(w) == [], f"stale temporaries after {sig} (fired={fired})"


@pytest.mark.parametrize("at", [r"\.rank\d+\.seg$", r"^\.streamtrace-warm"], ids=["segments", "warm_up"])
def test_halfwritten_merge_segments_cleaned_by_next_run(small_analysis, medium_job, tmp_path, at):
    """merge SIGKILLed leaves .<out>.<pid>.rank<R>.seg segments (or its warm-up folder): the
    next merge to that output must remove them (their pid is dead)."""
    w = tmp_path / "w"
    w.mkdir()
    out = w / "merged.json"
    r, fired, _ = cli_signalled(["merge", medium_job / "job" / "iteration_10", "-o", out, "-j", "1"],
                                w, signal.SIGKILL, match=at)
    r2 = cli("merge", small_analysis / "job" / "iteration_10", "-o", out, "-j", "1", "--no-validate")
    assert r2.returncode == 0, r2
    assert hidden_entries(w) == [], f"stale temporaries left by the killed merge (fired={fired})"


def test_halfwritten_merge_sigterm_removes_segments(medium_job, tmp_path):
    """merge on SIGTERM removes its segments before dying."""
    w = tmp_path / "w"
    w.mkdir()
    r, fired, _ = cli_signalled(["merge", medium_job / "job" / "iteration_10", "-o", w / "merged.json", "-j", "1"],
                                w, signal.SIGTERM, match=r"\.rank\d+\.seg$")
    time.sleep(0.2)
    assert hidden_entries(w) == [], f"temporaries left after SIGTERM (fired={fired})"


def test_halfwritten_merge_segment_of_live_pid_kept(small_analysis, tmp_path):
    """Pinned: a segment whose pid is alive (another merge at work) is not touched."""
    out = tmp_path / "merged.json"
    live = tmp_path / f".merged.json.{os.getpid()}.rank0.seg"
    live.write_bytes(b"in use")
    r = cli("merge", small_analysis / "job" / "iteration_10", "-o", out, "-j", "1", "--no-validate")
    assert r.returncode == 0, r
    assert live.read_bytes() == b"in use"


@pytest.mark.parametrize("sig", ["SIGINT", "SIGKILL"])
def test_halfwritten_merge_interrupted_keeps_old_output(medium_job, tmp_path, sig):
    """Pinned: merge interrupted while rewriting leaves the old output as it was."""
    w = tmp_path / "w"
    w.mkdir()
    out = w / "merged.json"
    out.write_bytes(b'{"traceEvents": [], "old": true}')
    r, fired, _ = cli_signalled(["merge", medium_job / "job" / "iteration_10", "-o", out, "-j", "1"],
                                w, getattr(signal, sig), match=r"\.rank\d+\.seg$")
    assert fired, r
    assert out.read_bytes() == b'{"traceEvents": [], "old": true}', r


# --- orphaned workers -----------------------------------------------------------------------

def _workers_of(outdir_text, kids):
    """``kids`` plus any live process whose command line names ``outdir_text``."""
    found = set(kids)
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if outdir_text.encode() in f.read():
                        found.add(int(d))
            except OSError:
                pass
    return found


@pytest.mark.parametrize("command,sig", [("analyze", "SIGKILL"), ("merge", "SIGKILL"), ("analyze", "SIGTERM")])
def test_halfwritten_orphaned_workers_exit(medium_job, tmp_path, reaper, command, sig):
    """-j 2 workers must exit when their parent is killed (today they block or keep writing)."""
    w = tmp_path / "w"
    w.mkdir()
    target = w / ("an" if command == "analyze" else "merged.json")
    args = [command, medium_job / "job" / "iteration_10", "-o", target, "-j", "2"]
    r, fired, kids = cli_signalled(args, w, getattr(signal, sig),
                                   **({"changed": 2} if command == "analyze" else {"match": r"\.rank\d+\.seg$"}))
    workers = _workers_of(str(target), kids)
    reaper.extend(workers)
    assert fired and kids, f"the run ended before it could be killed with its workers\n{r!r}"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in workers):
        time.sleep(0.05)
    left = [p for p in workers if alive(p)]
    assert not left, f"{len(left)} of {len(workers)} workers still alive 5 s after {sig} of the parent"
