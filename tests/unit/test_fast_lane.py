"""The fast lane's list of slow tests (tests/slow_tests.py) names test files and functions that exist,
so that a renamed test does not silently come back into ``-m "not slow"`` nor a stale name stay."""
from __future__ import annotations

import ast

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
