"""The Python API after a plain ``import streamtrace`` (issue 17, item 12), and every option
dataclass documenting every field."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from support import ROOT


def test_plain_import_gives_every_entry_point():
    code = """
import streamtrace, types
assert callable(streamtrace.merge) and callable(streamtrace.analyze) and callable(streamtrace.report)
assert callable(streamtrace.aggregate) and callable(streamtrace.validate) and callable(streamtrace.load)
assert callable(streamtrace.open) and streamtrace.open.__module__ == "streamtrace.epilogue.notebook"
assert callable(streamtrace.diff) and streamtrace.DiffOptions().name_key == "full"
assert callable(streamtrace.epilogue.run) and isinstance(streamtrace.epilogue, types.ModuleType)
import importlib, streamtrace.merge.run, streamtrace.report.diff.compare as C   # imports as usual
assert all(isinstance(getattr(streamtrace, n), types.ModuleType) and callable(getattr(streamtrace, n))
           for n in ("merge", "validate", "analyze", "report", "diff"))      # the stages' packages, callable
assert streamtrace.diff.__class__ is streamtrace.merge.__class__            # one class for all (runtime.stage)
m, a = streamtrace.merge, streamtrace.analyze
assert hasattr(m, "MergeOptions") and hasattr(a, "AnalyzeOptions") and hasattr(C, "compare")
from streamtrace import merge, EpilogueOptions, ValidateOptions, DataError, OutputError
assert merge is streamtrace.merge and EpilogueOptions().jobs == 0 and callable(streamtrace.load)
print(streamtrace.__version__)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0.2.0"


def _options():
    import streamtrace
    from streamtrace.epilogue import EpilogueOptions
    return [streamtrace.MergeOptions, streamtrace.AnalyzeOptions, streamtrace.AggregateOptions,
            streamtrace.ReportOptions, streamtrace.DiffOptions, streamtrace.ValidateOptions, EpilogueOptions]


@pytest.mark.parametrize("cls", _options(), ids=lambda c: c.__name__)
def test_every_option_field_is_documented(cls):
    doc = cls.__doc__ or ""
    for f in dataclasses.fields(cls):
        assert f"        {f.name}:" in doc, (cls.__name__, f.name)


def test_changelog_names_the_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## 0.2.0" in text


def test_to_pandas_without_pandas_is_one_line(tmp_path):
    """pandas is not a dependency: ``load(...).to_pandas()`` without it says which package to install."""
    code = f"""
from streamtrace.runtime.tuning import skip_pandas
skip_pandas()                                      # as if pandas were not installed
import pyarrow as pa, pyarrow.parquet as pq, json, pathlib, streamtrace
d = pathlib.Path({str(tmp_path)!r})
(d / "diff.json").write_text(json.dumps({{"kind": "streamtrace-diff"}}))
pq.write_table(pa.table({{"name": ["k"], "delta_ns": [1]}}), d / "kernels.parquet")
out = streamtrace.load(d)
assert out.kernels.num_rows == 1
try:
    out.to_pandas("kernels")
except streamtrace.StreamtraceError as e:
    print(e)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "pandas is not installed (pip install pandas)"


def test_py_typed_is_shipped():
    assert (ROOT / "streamtrace" / "py.typed").exists()
    assert "py.typed" in (ROOT / "pyproject.toml").read_text()


def test_epilogue_options_are_composed_of_the_report_s():
    """EpilogueOptions holds a ReportOptions, not copies of its fields (``jobs`` and ``progress`` are the
    epilogue's own: the report gets the epilogue's); keywords of the report still work with ``run``."""
    from streamtrace.epilogue import EpilogueOptions, with_options
    from streamtrace.report.options import ReportOptions
    own = {f.name for f in dataclasses.fields(EpilogueOptions)}
    assert own & {f.name for f in dataclasses.fields(ReportOptions)} == {"jobs", "progress"}
    opt = with_options(EpilogueOptions(), gpu_only=False, charts=False, tokens_per_step=4096, jobs=3)
    assert not opt.gpu_only and opt.jobs == 3 and opt.report == ReportOptions(charts=False, tokens_per_step=4096)
    with pytest.raises(TypeError):
        with_options(EpilogueOptions(), no_such_option=1)


def test_one_spelling_per_concept():
    import streamtrace
    from streamtrace.report.render import ChartOptions
    assert streamtrace.AggregateOptions(steps=[3, 4]).steps == (3, 4)
    assert streamtrace.DiffOptions(base_steps=[4, 2], test_steps=[1, 3]).base_steps == (4, 2)     # pairs keep order
    assert streamtrace.MergeOptions(steps=[12, 13]).steps == (12, 13)
    names = {f.name for cls in (streamtrace.MergeOptions, ChartOptions, streamtrace.ReportOptions)
             for f in dataclasses.fields(cls)}
    assert "iteration" not in names and "formats" not in names and "chart_formats" in names
    charts = {f.name for cls in (ChartOptions, streamtrace.ReportOptions) for f in dataclasses.fields(cls)}
    assert "ranks" not in charts and "chart_ranks" in charts     # (MergeOptions.ranks: the ranks merged)
    assert {f.name for f in dataclasses.fields(ChartOptions)} >= {"chart_ranks", "chart_formats", "progress"}


def test_chart_ranks_old_keyword_warns_once_more():
    """``ChartOptions(ranks=...)`` / ``render_all(..., ranks=...)`` of the last release: ``chart_ranks``, warned."""
    from streamtrace.report.render import ChartOptions
    with pytest.warns(DeprecationWarning, match="chart_ranks") as w:
        assert ChartOptions(ranks=[0, 3]) == ChartOptions(chart_ranks=[0, 3])
    assert w[0].filename == __file__
    assert dataclasses.replace(ChartOptions(chart_ranks=[1]), jobs=2).chart_ranks == [1]


def test_epilogue_progress_is_the_stages_spelling(tmp_path):
    """The epilogue's log lines follow ``progress`` as the stages' bars do (False: failures and the final
    line only); ``quiet`` of the last release still works for one more, with a DeprecationWarning."""
    import io
    from streamtrace.epilogue import EpilogueOptions, run
    names = {f.name for f in dataclasses.fields(EpilogueOptions)}
    assert "progress" in names and "quiet" not in names
    assert EpilogueOptions().progress is None

    def lines(**kw):
        buf = io.StringIO()
        s = run(tmp_path, log_file=buf, isolate=False, outdir=str(tmp_path / "out"), **kw)
        assert s["failures"][0]["error"] == "no rank traces found"          # an empty run folder
        return [re.sub(r"\(\d+\.\d s\)$", "(s)", x) for x in buf.getvalue().splitlines()]   # timings aside
    loud = lines()
    assert any(" run " in x and "topology" in x for x in loud) and any("FAILED discover" in x for x in loud)
    quiet = lines(progress=False)
    assert not any("topology" in x for x in quiet) and any("FAILED discover" in x for x in quiet)
    with pytest.warns(DeprecationWarning, match="progress=False") as w:
        old = lines(quiet=True)
    assert old == quiet and w[0].filename == __file__           # the warning names the caller of run()
    with pytest.warns(DeprecationWarning, match="progress=False") as w:
        assert EpilogueOptions(quiet=True).progress is False
    assert w[0].filename == __file__


def test_epilogue_gpu_only_is_merge_s_spelling():
    """The epilogue's merge keeps the GPU processes as ``MergeOptions.gpu_only`` says (default True here);
    ``full=True`` of the last release is ``gpu_only=False`` for one more, with a DeprecationWarning."""
    import streamtrace
    from streamtrace.epilogue import EpilogueOptions, with_options
    names = {f.name for f in dataclasses.fields(EpilogueOptions)}
    assert "gpu_only" in names and "full" not in names
    assert "gpu_only" in {f.name for f in dataclasses.fields(streamtrace.MergeOptions)}
    assert EpilogueOptions().gpu_only is True
    with pytest.warns(DeprecationWarning, match="gpu_only=False for full=True") as w:
        assert EpilogueOptions(full=True).gpu_only is False
    assert w[0].filename == __file__
    with pytest.warns(DeprecationWarning, match="gpu_only=False"):
        assert with_options(EpilogueOptions(), full=False).gpu_only is True
    assert dataclasses.replace(EpilogueOptions(gpu_only=False), jobs=2).gpu_only is False    # no warning, kept
