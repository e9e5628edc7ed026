"""Fixtures of the failure-behaviour tests (test_failure_*.py); helpers in tests/hostile.py."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from hostile import IS_ROOT, cli, kill_pids, synth, unprivileged

from support import ROOT


@pytest.fixture(scope="session")
def small_analysis(tmp_path_factory):
    """A complete analysis + aggregate of a 4-rank synthetic job (TP2 x DP2), made once:
    ``job/iteration_10``, ``analysis``, ``aggregate``."""
    base = tmp_path_factory.mktemp("small")
    it = synth(base / "job", world_size=4, tp=2, pp=1)
    r = cli("analyze", it, "-o", base / "analysis", "-j", "1")
    assert r.returncode == 0, r
    r = cli("aggregate", base / "analysis", "-o", base / "aggregate")
    assert r.returncode == 0, r
    return base


@pytest.fixture(scope="session")
def medium_job(tmp_path_factory):
    """An 8-rank synthetic job (1 MB per rank) and its complete analysis: big enough to be
    interrupted mid-write."""
    base = tmp_path_factory.mktemp("medium")
    it = synth(base / "job", world_size=8, tp=2, pp=2, steps=3, layers=4, microbatches=2)
    r = cli("analyze", it, "-o", base / "analysis", "-j", "2")
    assert r.returncode == 0, r
    return base


@pytest.fixture
def small_fs(tmp_path):
    """A 2 MB tmpfs; ``fill(free)`` leaves about ``free`` bytes."""
    if not IS_ROOT or not shutil.which("mount"):
        pytest.skip("needs root to mount a tmpfs")
    d = tmp_path / "smallfs"
    d.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(d)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {p.stderr.strip()}")

    class FS:
        path = d

        @staticmethod
        def fill(free):
            filler = d / ".filler"
            if filler.exists():
                filler.unlink()
            st = os.statvfs(d)
            filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - free))
    try:
        yield FS
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


@pytest.fixture
def reaper():
    """Pids to SIGKILL at teardown if still alive (orphaned workers of a killed run)."""
    pids = []
    yield pids
    kill_pids(pids)


@pytest.fixture
def restore_modes():
    """Paths whose mode a test took away, given back at teardown (so tmp folders can be removed)."""
    paths = []
    yield paths
    for p in paths:
        if os.path.lexists(p):
            os.chmod(p, 0o755)


@pytest.fixture
def readonly_install(tmp_path, restore_modes):
    """The package copied to a read-only folder, HOME read-only, no numba cache folder:
    ``(prefix, env, cwd, tmp_path)`` to run the CLI with."""
    pre = unprivileged()
    site = tmp_path / "site"
    shutil.copytree(ROOT / "streamtrace", site / "streamtrace",
                    ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc", "*.pyc"))
    home = tmp_path / "home"
    home.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for p in [site, home, *site.rglob("*")]:
        restore_modes.append(p)
        os.chmod(p, 0o555 if p.is_dir() else 0o444)
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME", "PYTHONDONTWRITEBYTECODE")}
    env.update(HOME=str(home), PYTHONPATH=str(site))
    return pre, env, cwd, tmp_path
