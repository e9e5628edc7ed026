"""Failure behaviour (issue 19), output paths: a read-only folder or file system, -o naming an existing
folder (merge) or file (analyze, aggregate, report), -o under a plain file, a full disk, merge -o
onto one of its own inputs, an output folder holding someone else's files.  One line naming the
path, exit 1, checked before the work where it can be, and the earlier output left as it was.
Helpers: tests/hostile.py; fixtures: tests/integration/conftest.py."""
from __future__ import annotations

import json
import shutil

import pytest

from hostile import (assert_one_line_error, cli, hidden_entries, private_ro_mount, rank_file, readonly_dir, synth,
                     tree_digest, unprivileged, visible_files)


# --- output paths: read-only folders -------------------------------------------------------


@pytest.mark.parametrize("command", ["merge", "analyze", "aggregate", "report"])
def test_crash_output_path_readonly_folder(small_analysis, tmp_path, restore_modes, command):
    """-o inside a read-only folder (EACCES): one line naming the path, exit 1."""
    pre = unprivileged()
    d = readonly_dir(tmp_path)
    restore_modes.append(d)
    src = small_analysis
    target = {"merge": d / "m.json", "analyze": d / "an-out", "aggregate": d / "agg-out",
              "report": d / "rep-out"}[command]
    args = {"merge": ["merge", src / "job" / "iteration_10", "-o", target, "-j", "1"],
            "analyze": ["analyze", src / "job" / "iteration_10", "-o", target, "-j", "1"],
            "aggregate": ["aggregate", src / "analysis", "-o", target],
            "report": ["report", src / "aggregate", "-o", target, "--no-charts"]}[command]
    r = cli(*args, prefix=pre)
    assert_one_line_error(r, target.parent if command == "merge" else target)


def test_crash_output_path_readonly_existing_outdir_analyze(small_analysis, tmp_path, restore_modes):
    """analyze into an existing read-only OUTDIR (--chunked too: the spill folder goes there)."""
    pre = unprivileged()
    d = readonly_dir(tmp_path, "ro-analysis")
    restore_modes.append(d)
    r = cli("analyze", small_analysis / "job" / "iteration_10", "-o", d, "-j", "1", "--chunked", prefix=pre)
    assert_one_line_error(r, d)


def test_crash_output_path_readonly_mount_merge(small_analysis, tmp_path):
    """merge -o onto a read-only file system (EROFS)."""
    d = tmp_path / "rofs"
    d.mkdir()
    pre = private_ro_mount(d)
    r = cli("merge", small_analysis / "job" / "iteration_10", "-o", d / "m.json", "-j", "1", prefix=pre)
    assert_one_line_error(r, d)


# --- output paths: -o naming an existing folder or file --------------------------------------

@pytest.mark.parametrize("name", ["existing-dir", "existing-dir.json", "nonempty-dir.json.gz"])
def test_crash_output_path_merge_onto_existing_folder(small_analysis, tmp_path, name):
    """merge -o naming an existing folder: one line naming it, before any work; folder untouched."""
    d = tmp_path / name
    d.mkdir()
    if name.startswith("nonempty"):
        (d / "keep.txt").write_text("keep")
    r = cli("merge", small_analysis / "job" / "iteration_10", "-o", d, "-j", "1")
    assert_one_line_error(r, d)
    assert d.is_dir() and not hidden_entries(tmp_path)


@pytest.mark.parametrize("command", ["analyze", "aggregate", "report"])
def test_crash_output_path_onto_existing_file(small_analysis, tmp_path, command):
    """analyze/aggregate/report -o naming an existing file: one line, the file untouched."""
    f = tmp_path / "existing-file.txt"
    f.write_text("precious")
    src = small_analysis
    args = {"analyze": ["analyze", src / "job" / "iteration_10", "-o", f, "-j", "1"],
            "aggregate": ["aggregate", src / "analysis", "-o", f],
            "report": ["report", src / "aggregate", "-o", f, "--no-charts"]}[command]
    r = cli(*args)
    assert_one_line_error(r, f)
    assert f.read_text() == "precious"


@pytest.mark.parametrize("command", ["merge", "analyze"])
def test_crash_output_path_under_a_file(small_analysis, tmp_path, command):
    """-o whose parent is a file (NotADirectory / FileExists): one line naming it."""
    f = tmp_path / "plain-file"
    f.write_text("x")
    target = f / ("m.json" if command == "merge" else "an")
    r = cli(command, small_analysis / "job" / "iteration_10", "-o", target, "-j", "1")
    assert_one_line_error(r, f)


# --- output paths: full disk ----------------------------------------------------------------

@pytest.mark.parametrize("out,free", [("m.json", 64 << 10), ("m.json.gz", 16 << 10)])
def test_crash_output_path_full_disk_merge(small_analysis, small_fs, out, free):
    """merge onto a full disk: one line naming the output, exit 1, nothing left behind."""
    small_fs.fill(free)
    target = small_fs.path / out
    r = cli("merge", small_analysis / "job" / "iteration_10", "-o", target, "-j", "1")
    assert_one_line_error(r, target)
    assert not target.exists()
    assert [e for e in hidden_entries(small_fs.path) if e != ".filler"] == []


@pytest.mark.parametrize("free", [8 << 10, 40 << 10])
def test_crash_output_path_full_disk_analyze(small_analysis, small_fs, free):
    """analyze onto a full disk: one line naming OUTDIR (not the input), exit 1, no partial
    dataset at OUTDIR."""
    small_fs.fill(free)
    target = small_fs.path / "an-out"
    r = cli("analyze", small_analysis / "job" / "iteration_10", "-o", target, "-j", "1")
    assert_one_line_error(r, target)
    assert not visible_files(target)


def test_crash_output_path_full_disk_aggregate(small_analysis, small_fs):
    """aggregate onto a full disk: one line naming OUTDIR, exit 1."""
    small_fs.fill(40 << 10)
    target = small_fs.path / "agg-out"
    r = cli("aggregate", small_analysis / "analysis", "-o", target)
    assert_one_line_error(r, target)


@pytest.mark.parametrize("charts", [False, True])
def test_crash_output_path_full_disk_report(small_analysis, small_fs, charts):
    """report onto a full disk: one line naming OUTDIR, exit 1, no partial report."""
    small_fs.fill(40 << 10 if charts else 8 << 10)
    target = small_fs.path / "rep-out"
    r = cli("report", small_analysis / "aggregate", "-o", target, *([] if charts else ["--no-charts"]))
    assert_one_line_error(r, target)
    assert not visible_files(target)


# --- full disk: the output folder is a unit ------------------------------------------------

def test_halfwritten_aggregate_full_disk_no_partial_files(small_analysis, small_fs):
    """aggregate on a full disk leaves no table files in OUTDIR (today rank_phase.* etc.)."""
    small_fs.fill(40 << 10)
    target = small_fs.path / "agg-out"
    cli("aggregate", small_analysis / "analysis", "-o", target)
    assert not visible_files(target), f"partial aggregate: {sorted(visible_files(target))}"


@pytest.mark.parametrize("command", ["analyze", "aggregate"])
def test_halfwritten_full_disk_keeps_old_output(small_analysis, medium_job, small_fs, command):
    """On a full disk an earlier complete output at the target stays exactly as it was."""
    target = small_fs.path / "target"
    shutil.copytree(small_analysis / ("analysis" if command == "analyze" else "aggregate"), target)
    old = tree_digest(target)
    small_fs.fill(40 << 10)
    src = medium_job / ("job/iteration_10" if command == "analyze" else "analysis")
    r = cli(command, src, "-o", target, *(["-j", "1"] if command == "analyze" else []))
    assert r.returncode != 0, r
    assert tree_digest(target) == old, "the old output was partly overwritten"


# --- merge -o onto one of its own inputs ----------------------------------------------------

@pytest.mark.parametrize("how", ["folder_input", "gz_file_inputs", "dotdot_spelling"])
def test_halfwritten_merge_output_onto_own_input(tmp_path, how):
    """merge -o naming one of its inputs: refuse in one line, the input untouched."""
    it = synth(tmp_path / "run", compress=(how == "gz_file_inputs"))
    victim = rank_file(it, 1)
    before = victim.read_bytes()
    if how == "folder_input":
        args = [it, "-o", victim]
    elif how == "gz_file_inputs":
        args = [rank_file(it, 0), victim, "-o", victim]
    else:
        args = [it, "-o", it / ".." / it.name / victim.name]
    r = cli("merge", *args, "-j", "1", "--no-validate")
    assert victim.read_bytes() == before, "merge overwrote its own input"
    assert_one_line_error(r, victim)


# --- an output folder is replaced as a whole: never someone else's ------------------------------

@pytest.mark.parametrize("case", ["foreign_file", "holds_the_input"])
def test_output_folder_holding_other_files_is_refused(small_analysis, tmp_path, case):
    """analyze -o a folder with files streamtrace did not write there (or the traces themselves):
    refused in one line before any work, the folder untouched (the old code added its outputs
    to any folder; a folder unit would have replaced the user's files)."""
    if case == "foreign_file":
        target = tmp_path / "mine"
        shutil.copytree(small_analysis / "analysis", target)
        (target / "notes.txt").write_text("precious")
        src = small_analysis / "job" / "iteration_10"
    else:
        target = tmp_path / "run"
        shutil.copytree(small_analysis / "job", target)
        src = target / "iteration_10"
    before = tree_digest(target)
    r = cli("analyze", src, "-o", target, "-j", "1")
    assert_one_line_error(r, target)
    assert tree_digest(target) == before and not hidden_entries(tmp_path)


def test_report_into_the_aggregate_folder_replaces_only_the_report(small_analysis, tmp_path):
    """Pinned: report's default output is the aggregate folder: the tables stay (the same
    files), the earlier report is replaced as a whole."""
    g = tmp_path / "agg"
    shutil.copytree(small_analysis / "aggregate", g)
    (g / "charts").mkdir(exist_ok=True)
    (g / "charts" / "stale.png").write_bytes(b"old chart")
    tables = {p.name: p.read_bytes() for p in g.glob("*.parquet")}
    r = cli("report", g, "--name", "second", "--no-charts")
    assert r.returncode == 0, r
    assert {p.name: p.read_bytes() for p in g.glob("*.parquet")} == tables
    assert (g / "second.md").is_file() and not (g / "charts").exists()
    assert json.loads((g / "report.json").read_text())["name"] == "second" and not hidden_entries(tmp_path)
