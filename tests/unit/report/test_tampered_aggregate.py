"""An aggregate folder tampered with, fed to ``report`` and ``whatif`` (a fuzzing pass): ``aggregate.json`` that
is not JSON, not an object, or has a field of another type; a table with a column of another type or without
one; a ``timeline.parquet`` of no rows.  A damaged file is one line naming it, exit 1, no traceback, nothing
written; the empty timeline is a report without the per-rank time-line charts, saying why.

The edits are made with json and pyarrow here; the names the messages must hold (the file, the field, the
column) are the test's own."""
from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from streamtrace.synth.job import SynthSpec, generate_job

from support import run_cli


@pytest.fixture(scope="module")
def aggregated(tmp_path_factory):
    root = tmp_path_factory.mktemp("agg")
    generate_job(root / "traces", SynthSpec(world_size=4, tp=2, pp=2, microbatches=2, layers=1))
    for args in (("analyze", root / "traces", "-o", root / "an"), ("aggregate", root / "an", "-o", root / "ag")):
        r = run_cli(*args, "-q", "-j", "1")
        assert r.returncode == 0, r.stderr
    return root / "ag"


def _copy(aggregated, tmp_path):
    d = tmp_path / "ag"
    shutil.copytree(aggregated, d)
    return d


def _listing(d):
    return sorted((p.relative_to(d).as_posix(), p.stat().st_mtime_ns) for p in d.rglob("*"))


def _refused(d, args, *words):
    before = _listing(d)
    r = run_cli(*args)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1, (args, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert lines and lines[-1].startswith("streamtrace: error: "), r.stderr
    for w in words:
        assert str(w) in lines[-1], (w, lines[-1])
    assert _listing(d) == before             # no report, no chart, no table written or touched
    return lines[-1]


def _both(d):
    return [("report", d, "-q", "-j", "1"), ("whatif", d, "--change", "host_gaps:rank=0", "-q", "-j", "1")]


def test_a_timeline_of_no_rows_skips_the_time_line_charts_and_says_why(aggregated, tmp_path):
    d = _copy(aggregated, tmp_path)
    p = d / "timeline.parquet"
    pq.write_table(pq.read_table(p).slice(0, 0), p)
    r = run_cli("report", d, "-q", "-j", "1")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    charts = sorted(x.name for x in (d / "charts").iterdir())
    assert not [c for c in charts if "_timeline" in c], charts
    assert [c for c in charts if c.startswith("ranks_overview")], charts      # the other charts are drawn
    rep = json.loads((d / "report.json").read_text())
    why = rep["missing"].get("rank_timeline", "")
    assert "timeline.parquet" in why and "no rows" in why, rep["missing"]
    md = next(d.glob("*.md")).read_text()
    assert "timeline.parquet" in md
