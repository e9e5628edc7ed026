"""An analysed folder tampered with, fed to ``aggregate`` (a fuzzing pass): a Parquet part whose column is of
another type than analyze writes, lacks a column, holds a null time, a negative duration or an interval that
ends before it starts; a ``summary.json`` listing one rank twice.  Each is one line naming the file, exit 1, no
traceback and no aggregate folder left behind.

The tables are edited with pyarrow here, and the expected file and column names are the test's own (the
partition path spelled out, the column edited), not read from streamtrace."""
from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from streamtrace.synth.job import SynthSpec, generate_job

from support import run_cli

ITERATION = 10        # SynthSpec's default: the traces are iteration_10/, analyze's partitions iteration=10


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    root = tmp_path_factory.mktemp("tampered")
    generate_job(root / "traces", SynthSpec(world_size=2, tp=2, pp=1, microbatches=1, layers=1,
                                            iteration=ITERATION))
    r = run_cli("analyze", root / "traces", "-o", root / "an", "-q", "-j", "1")
    assert r.returncode == 0, r.stderr
    return root / "an"


def _copy(analysed, tmp_path):
    d = tmp_path / "an"
    shutil.copytree(analysed, d)
    return d


def _part(an, dataset, rank=1):
    return an / dataset / f"iteration={ITERATION}" / f"rank={rank}" / "part-0.parquet"


def _edit_column(path, column, make):
    t = pq.read_table(path)
    i = t.schema.get_field_index(column)
    pq.write_table(t.set_column(i, column, make(t[column])), path)


def _refused(an, tmp_path, *words):
    out = tmp_path / "ag"
    r = run_cli("aggregate", an, "-o", out, "-q", "-j", "1")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert lines and lines[-1].startswith("streamtrace: error: "), r.stderr
    for w in words:
        assert str(w) in lines[-1], (w, lines[-1])
    assert not out.exists() or not any(out.iterdir()), sorted(out.iterdir())
    return lines[-1]


def _to_string(a):
    return pc.cast(a, pa.string())


def _to_float(a):
    return pc.cast(a, pa.float64(), safe=False)


@pytest.mark.parametrize("dataset,column,make,typ", [
    ("kernels", "ts_ns", _to_string, "string"),
    ("kernels", "ts_ns", _to_float, "double"),
    ("kernels", "stream", _to_string, "string"),
    ("kernels", "kind", lambda a: pa.array(range(len(a)), pa.int64()), "int64"),
    ("ops", "ts_ns", _to_string, "string"),
    ("ops", "dur_ns", _to_float, "double"),
    ("ops", "name", lambda a: pa.array(range(len(a)), pa.int64()), "int64"),
    ("ops", "depth", _to_string, "string"),
])
def test_a_column_of_another_type_is_an_input_error(analysed, tmp_path, dataset, column, make, typ):
    an = _copy(analysed, tmp_path)
    p = _part(an, dataset)
    _edit_column(p, column, make)
    _refused(an, tmp_path, p, repr(column), typ)


@pytest.mark.parametrize("dataset,column", [("kernels", "end_ns"), ("kernels", "kind"), ("ops", "dur_ns")])
def test_a_missing_column_is_an_input_error(analysed, tmp_path, dataset, column):
    an = _copy(analysed, tmp_path)
    p = _part(an, dataset)
    pq.write_table(pq.read_table(p).drop_columns([column]), p)
    _refused(an, tmp_path, p, repr(column))


def test_a_null_time_is_an_input_error(analysed, tmp_path):
    an = _copy(analysed, tmp_path)
    p = _part(an, "kernels")
    _edit_column(p, "ts_ns", lambda a: pa.nulls(len(a), pa.int64()))
    _refused(an, tmp_path, p, "'ts_ns'", "null")


def test_a_kernel_that_ends_before_it_starts_is_an_input_error(analysed, tmp_path):
    an = _copy(analysed, tmp_path)
    p = _part(an, "kernels")
    _edit_column(p, "end_ns", lambda a: pc.subtract(a, pa.scalar(10 ** 9)))
    line = _refused(an, tmp_path, p, "end_ns", "ts_ns")
    first = pq.read_table(p).slice(0, 1)          # row 0 is reversed: the message gives its times
    assert str(first["end_ns"][0].as_py()) in line.replace(",", ""), line


def test_a_negative_duration_is_an_input_error(analysed, tmp_path):
    an = _copy(analysed, tmp_path)
    p = _part(an, "ops")
    _edit_column(p, "dur_ns", lambda a: pc.multiply(a, pa.scalar(-1)))
    _refused(an, tmp_path, p, "'dur_ns'", "negative")



def test_a_rank_listed_twice_in_summary_json_is_an_input_error(analysed, tmp_path):
    an = _copy(analysed, tmp_path)
    p = an / "summary.json"
    summ = json.loads(p.read_text())
    second = dict(summ["ranks"][0])           # rank 0 again, as ranks[2]
    summ["ranks"].append(second)
    p.write_text(json.dumps(summ))
    _refused(an, tmp_path, p, f"rank {second['rank']}", "ranks[2]")
