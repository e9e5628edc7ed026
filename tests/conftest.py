"""pytest configuration: the shared helpers are in support.py (on the path through setup.cfg).

The fast lane, ``python -m pytest -m "not slow"``, leaves out the tests marked ``slow``: those marked
``@pytest.mark.slow`` where they are written, and those listed in ``SLOW`` (tests/slow_tests.py) (measured with
``--durations`` on each test folder, or known by what they do: clusters, gloo jobs and torch, chains of
CLI subprocesses, long hypothesis runs, whole real traces read by ``json.load``).  CI runs everything.
"""
from __future__ import annotations

import pytest

from slow_tests import SLOW  # noqa: E402 - tests/ is on sys.path (setup.cfg pythonpath)


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        names = SLOW.get(path)
        if names is not None and (names == "*" or getattr(item, "originalname", item.name) in names):
            item.add_marker(pytest.mark.slow)
