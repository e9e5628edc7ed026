"""pytest configuration: the shared helpers are in support.py (on the path through setup.cfg).

The fast lane, ``python -m pytest -m "not slow"``, leaves out the tests marked ``slow``: those marked
``@pytest.mark.slow`` where they are written, and those listed in ``SLOW`` (tests/slow_tests.py) (measured with
``--durations`` on each test folder, or known by what they do: clusters, gloo jobs and torch, chains of
CLI subprocesses, long hypothesis runs, whole real traces read by ``json.load``).  CI runs everything.
"""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from slow_tests import SLOW  # noqa: E402 - tests/ is on sys.path (setup.cfg pythonpath)

#: What the libraries the tests start write under the temporary folder -- dask's ``dask-scratch-space``,
#: torch inductor's ``torchinductor_<user>`` -- goes into one folder of this session, removed when it
#: ends (the tests' own ``tmp_path`` folders: setup.cfg keeps only the failed tests' of the last run).
#: Set before any test imports them, inherited by the CLI subprocesses; a value the user set is kept.
SCRATCH = tempfile.mkdtemp(prefix="streamtrace-tests-")
os.environ.setdefault("DASK_TEMPORARY_DIRECTORY", os.path.join(SCRATCH, "dask"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(SCRATCH, "torchinductor"))


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(SCRATCH, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        names = SLOW.get(path)
        if names is not None and (names == "*" or getattr(item, "originalname", item.name) in names):
            item.add_marker(pytest.mark.slow)
