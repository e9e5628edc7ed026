"""The Python API after a plain ``import streamtrace`` (issue 17, item 12), and every option
dataclass documenting every field."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from support import ROOT


def test_plain_import_gives_every_entry_point():
    code = """
import streamtrace, types
assert callable(streamtrace.merge) and callable(streamtrace.analyze) and callable(streamtrace.report)
assert callable(streamtrace.aggregate) and callable(streamtrace.validate) and callable(streamtrace.load)
assert callable(streamtrace.diff) and streamtrace.DiffOptions().name_key == "full"
assert callable(streamtrace.epilogue.run) and isinstance(streamtrace.epilogue, types.ModuleType)
import streamtrace.merge as m, streamtrace.analyze as a
assert isinstance(m, types.ModuleType) and hasattr(m, "MergeOptions") and hasattr(a, "AnalyzeOptions")
print(streamtrace.__version__)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0.2.0"


def _options():
    import streamtrace
    from streamtrace.epilogue import EpilogueOptions
    return [streamtrace.MergeOptions, streamtrace.AnalyzeOptions, streamtrace.AggregateOptions,
            streamtrace.ReportOptions, streamtrace.DiffOptions, EpilogueOptions]


@pytest.mark.parametrize("cls", _options(), ids=lambda c: c.__name__)
def test_every_option_field_is_documented(cls):
    doc = cls.__doc__ or ""
    for f in dataclasses.fields(cls):
        assert f"        {f.name}:" in doc, (cls.__name__, f.name)


def test_changelog_names_the_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## 0.2.0" in text
