"""patch/enable_traceviz.patch: a well-formed git diff that touches only
megatron/training/training.py, stays small, and applies (``git apply --check``) to the
Megatron-LM checkout named by ``MEGATRON_LM_DIR`` when that variable is set."""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support import ROOT

PATCH = ROOT / "patch" / "enable_traceviz.patch"
README = ROOT / "patch" / "README.md"
TARGET = "megatron/training/training.py"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


def parse_patch(text: str) -> list[dict]:
    """Parse a git diff into files and hunks; raises AssertionError on any malformed part."""
    lines = text.split("\n")
    assert lines[-1] == "", "the patch must end with a newline"
    lines.pop()
    files, i = [], 0
    while i < len(lines):
        m = re.match(r"^diff --git a/(\S+) b/(\S+)$", lines[i])
        assert m, f"line {i + 1}: expected 'diff --git a/... b/...', got {lines[i]!r}"
        f = {"a": m.group(1), "b": m.group(2), "hunks": [], "index": None}
        i += 1
        while i < len(lines) and not lines[i].startswith("--- "):
            assert re.match(r"^(index [0-9a-f]{7,40}\.\.[0-9a-f]{7,40}( \d{6})?|(old|new) mode \d{6})$", lines[i]), \
                f"line {i + 1}: unexpected extended header {lines[i]!r}"
            if lines[i].startswith("index "):
                f["index"] = lines[i].split()[1]
            i += 1
        assert lines[i] == f"--- a/{f['a']}" and lines[i + 1] == f"+++ b/{f['b']}", f"line {i + 1}: bad ---/+++ headers"
        i += 2
        while i < len(lines) and not lines[i].startswith("diff --git "):
            m = _HUNK.match(lines[i])
            assert m, f"line {i + 1}: expected a hunk header, got {lines[i]!r}"
            old_start, old_len = int(m.group(1)), int(m.group(2) or 1)
            new_start, new_len = int(m.group(3)), int(m.group(4) or 1)
            i += 1
            body = []
            n_old = n_new = 0
            while i < len(lines) and (n_old < old_len or n_new < new_len or lines[i].startswith("\\")):
                line = lines[i]
                assert line[:1] in (" ", "+", "-", "\\"), f"line {i + 1}: bad hunk line {line!r}"
                n_old += line[:1] in (" ", "-")
                n_new += line[:1] in (" ", "+")
                body.append(line)
                i += 1
            assert (n_old, n_new) == (old_len, new_len), \
                f"hunk {m.group(0)!r}: counts {n_old}/{n_new} lines, header says {old_len}/{new_len}"
            f["hunks"].append({"old": (old_start, old_len), "new": (new_start, new_len), "lines": body})
        files.append(f)
    return files


def test_patch_is_a_well_formed_diff_of_training_py():
    files = parse_patch(PATCH.read_text())
    assert [(f["a"], f["b"]) for f in files] == [(TARGET, TARGET)]
    hunks = files[0]["hunks"]
    assert hunks and files[0]["index"]
    shift, prev_end = 0, 0
    for h in hunks:
        (os_, ol), (ns, nl) = h["old"], h["new"]
        assert os_ > prev_end, "hunks must be in order and must not overlap"
        assert ns == os_ + shift, f"hunk at -{os_}: new start {ns} != {os_ + shift}"
        shift += nl - ol
        prev_end = os_ + ol - 1
        ctx = [x for x in h["lines"] if x.startswith(" ")]
        assert len(ctx) >= 3, "each hunk keeps git's context lines"
    changed = [x for h in hunks for x in h["lines"] if x[:1] in "+-"]
    assert len(changed) <= 40, f"the patch should stay small ({len(changed)} changed lines)"
    added = "\n".join(x[1:] for x in changed if x.startswith("+"))
    for needle in ("from streamtrace import capture", "profiler_schedule(", "trace_handler(",
                   "dump_topology(", "should_profile(", "args.tensorboard_dir", "args.use_pytorch_profiler"):
        assert needle in added, needle
    assert not re.search(r"[ \t]$", added, re.M), "no trailing whitespace in added lines"


def test_readme_states_commit_flags_and_layout():
    text = README.read_text()
    assert re.search(r"\b[0-9a-f]{40}\b", text), "patch/README.md must state the Megatron-LM commit"
    for needle in ("--profile", "--use-pytorch-profiler", "--profile-step-start", "--profile-step-end",
                   "--tensorboard-dir", "PROFILE_ALLRANKS", "PROFILER_WAIT_STEPS", "PROFILER_WARMUP_STEPS",
                   "PROFILER_ACTIVE_STEPS", "PROFILER_REPEAT", "git apply", "tp-cp-ep-dp-pp",
                   "unique_parallel_groups_", "streamtrace_topology.json", "rank_0000_iter_"):
        assert needle in text, needle


def _megatron_dir() -> Path:
    d = os.environ.get("MEGATRON_LM_DIR")
    if not d:
        pytest.skip("MEGATRON_LM_DIR is not set")
    p = Path(d)
    if not (p / TARGET).is_file():
        pytest.fail(f"MEGATRON_LM_DIR={d} has no {TARGET}")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    return p


def test_patch_applies_to_megatron(tmp_path):
    mdir = _megatron_dir()
    r = subprocess.run(["git", "apply", "--check", "-v", str(PATCH)], cwd=mdir, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # apply it to a copy of the file and check that the result is still valid Python
    work = tmp_path / "m"
    (work / TARGET).parent.mkdir(parents=True)
    shutil.copy(mdir / TARGET, work / TARGET)
    r = subprocess.run(["git", "apply", str(PATCH)], cwd=work, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    patched = (work / TARGET).read_text()
    ast.parse(patched)
    assert patched.count("streamtrace_capture.dump_topology(") == 1


def test_patch_index_matches_stated_commit():
    """When MEGATRON_LM_DIR is a git checkout holding the commit patch/README.md names, the patch's
    pre-image is that commit's training.py."""
    mdir = _megatron_dir()
    commit = re.search(r"\b[0-9a-f]{40}\b", README.read_text()).group(0)
    r = subprocess.run(["git", "rev-parse", f"{commit}:{TARGET}"], cwd=mdir, capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"{mdir} does not hold commit {commit}")
    pre = parse_patch(PATCH.read_text())[0]["index"].split("..")[0]
    assert r.stdout.strip().startswith(pre)


def test_parser_rejects_broken_patches():
    text = PATCH.read_text()
    header = next(line for line in text.splitlines() if line.startswith("@@"))
    m = _HUNK.match(header)
    broken = header.replace(f",{m.group(4)} @@", f",{int(m.group(4)) + 1} @@", 1)
    for bad in (text.replace(header, broken, 1),                      # line count off by one
                text.replace("--- a/", "--- x/", 1),                   # bad file header
                text.rstrip("\n")):                                    # no final newline
        with pytest.raises(AssertionError):
            parse_patch(bad)
