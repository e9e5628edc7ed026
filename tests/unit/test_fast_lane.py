"""The fast lane's list of slow tests (tests/slow_tests.py) names test files and functions that exist,
so that a renamed test does not silently come back into ``-m "not slow"`` nor a stale name stay."""
from __future__ import annotations

import ast
import os

from slow_tests import SLOW
from support import ROOT


def test_every_slow_entry_names_an_existing_test():
    missing = []
    for path, names in SLOW.items():
        f = ROOT / path
        if not f.is_file():
            missing.append(path)
            continue
        defined = {n.name for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.FunctionDef)}
        missing += [f"{path}::{n}" for n in ([] if names == "*" else sorted(names)) if n not in defined]
    assert not missing, missing


def test_the_suite_leaves_nothing_under_tmp():
    """Issue 47: dask's scratch space and torch inductor's cache go into the session's folder, removed at
    its end; pytest keeps only the failed tests' tmp_path folders of the last run; scipy, which one test
    needs, is in the test extra (so that test never skips)."""
    import configparser
    import tempfile

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["tool:pytest"]["tmp_path_retention_policy"] == "failed"
    scratch = os.path.dirname(os.environ["DASK_TEMPORARY_DIRECTORY"])        # tests/conftest.py's SCRATCH
    assert os.path.basename(scratch).startswith("streamtrace-tests-") and scratch.startswith(tempfile.gettempdir())
    for var in ("DASK_TEMPORARY_DIRECTORY", "TORCHINDUCTOR_CACHE_DIR"):
        assert os.environ[var].startswith(scratch), var
    import dask.config
    assert dask.config.get("temporary-directory").startswith(scratch)
    extra = (ROOT / "pyproject.toml").read_text().split("\ntest = [", 1)[1].split("\nbench = ", 1)[0]
    assert '"scipy' in extra
