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


def _set(key, value):
    def edit(meta):
        meta[key] = value
        return json.dumps(meta)
    return edit


@pytest.mark.parametrize("edit,words", [
    (lambda meta: "{not json", ["invalid JSON"]),
    (lambda meta: "[1, 2]", ["expected an object"]),
    (_set("world_size", "4"), ["'world_size'"]),
    (_set("iterations", ["x"]), ["'iterations'"]),
    (_set("steps", "x"), ["'steps'"]),
    (_set("steps", [1, 2]), ["'steps'"]),
    (_set("parts", "x"), ["'parts'"]),
    (_set("parts", [1]), ["'parts'"]),
    (_set("topology", "x"), ["'topology'"]),
    (_set("devices", [1]), ["'devices'"]),
    (_set("job_name", 1), ["'job_name'"]),
    (_set("clock_offsets_ns", "x"), ["'clock_offsets_ns'"]),
    (_set("clock_offsets_ns", {"0": "x"}), ["'clock_offsets_ns'"]),
    (_set("inputs", [1]), ["'inputs'"]),
    (_set("train_config", "x"), ["'train_config'"]),
], ids=lambda x: x if isinstance(x, str) else None)
def test_a_damaged_aggregate_json_is_an_input_error(aggregated, tmp_path, edit, words):
    d = _copy(aggregated, tmp_path)
    p = d / "aggregate.json"
    p.write_text(edit(json.loads(p.read_text())))
    for args in _both(d):
        _refused(d, args, p, *words)


@pytest.mark.parametrize("table,column,make,typ", [
    ("timeline", "start_ns", lambda a: pc.cast(a, pa.string()), "string"),
    ("ranks", "busy_ns", lambda a: pc.cast(a, pa.string()), "string"),
    ("pipeline", "bubble_pct", lambda a: pc.cast(a, pa.string()), "string"),
    ("kernel_stats", "total_ns", lambda a: pc.cast(a, pa.string()), "string"),
    ("collectives_summary", "time_ns", lambda a: pc.cast(a, pa.string()), "string"),
    ("launch_stats", "kernels", lambda a: pc.cast(a, pa.string()), "string"),
    ("whatif_edges", "w_ns", lambda a: pc.cast(a, pa.string()), "string"),
    ("collectives_ranks", "rank", lambda a: pc.cast(a, pa.string()), "string"),
    ("top_kernels", "name", lambda a: pa.array(range(len(a)), pa.int64()), "int64"),
])
def test_a_table_column_of_another_type_is_an_input_error(aggregated, tmp_path, table, column, make, typ):
    d = _copy(aggregated, tmp_path)
    p = d / f"{table}.parquet"
    t = pq.read_table(p)
    pq.write_table(t.set_column(t.schema.get_field_index(column), column, make(t[column])), p)
    for args in _both(d):
        _refused(d, args, p, repr(column), typ)


@pytest.mark.parametrize("command,table,column", [("report", "ranks", "busy_ns"), ("whatif", "whatif_anchors", "t_ns")])
def test_a_table_without_a_column_it_reads_is_an_input_error(aggregated, tmp_path, command, table, column):
    d = _copy(aggregated, tmp_path)
    p = d / f"{table}.parquet"
    pq.write_table(pq.read_table(p).drop_columns([column]), p)
    _refused(d, next(a for a in _both(d) if a[0] == command), p, repr(column))


def test_what_aggregate_writes_is_not_refused(aggregated, tmp_path):
    """The checks take every value aggregate writes: a topology whose ``order`` is unknown (null: a topology
    read from one rank's process groups) and without ``source`` (the CI run of the thirtieth session found
    ``order: null`` refused), an unknown world size, no inferred layout."""
    from streamtrace.aggregate.folder import Aggregate
    d = _copy(aggregated, tmp_path)
    p = d / "aggregate.json"
    meta = json.loads(p.read_text())
    assert isinstance(meta["topology"], dict)
    meta["topology"]["order"] = None
    meta["topology"].pop("source", None)
    meta["world_size"], meta["inferred_layout"] = None, None
    p.write_text(json.dumps(meta))
    assert Aggregate.read(d).summary["topology"]["order"] is None
