"""``streamtrace.load``: output folders as tables, checked against pandas, pyarrow, DuckDB and polars
reading the same files as the README and docs/analyze.md show (their examples run as tests)."""
from __future__ import annotations

import ast
import json
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pds
import pytest

import streamtrace
from streamtrace.analyze import AnalyzeOptions, analyze
from streamtrace.runtime.errors import StreamtraceError
from streamtrace.events.load import Outputs, register
from streamtrace.aggregate import AggregateOptions, aggregate
from streamtrace.synth.job import SynthSpec, generate_job
from support import ROOT, code_blocks


@pytest.fixture(scope="module")
def outs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("load")
    generate_job(tmp / "runs" / "job42", SynthSpec(world_size=4, tp=2, pp=2, microbatches=2))
    analyze([tmp / "runs" / "job42"], tmp / "job42_iter10", AnalyzeOptions(jobs=1))
    aggregate([tmp / "job42_iter10"], tmp / "job42-agg", AggregateOptions(jobs=1))
    return tmp


def test_analysis_folder(outs):
    a = streamtrace.load(outs / "job42_iter10")
    assert a.kind == "analysis" and a.tables() == ["kernels", "ops"]
    assert a.summary == json.loads((outs / "job42_iter10" / "summary.json").read_text())
    k = a.kernels
    assert isinstance(k, pa.Table) and k.schema.field("rank").type == pa.int64()
    ref = pd.read_parquet(outs / "job42_iter10" / "kernels")                 # docs/analyze.md's pandas line
    assert k.num_rows == len(ref)
    assert k["dur_ns"].to_numpy().sum() == ref["dur_ns"].sum()
    got = a.to_pandas("kernels").groupby("rank").dur_ns.sum()
    assert got.to_dict() == ref.assign(rank=ref["rank"].astype(int)).groupby("rank").dur_ns.sum().to_dict()
    assert set(a.kernels["iteration"].to_pylist()) == {10}
    # ops keep analyze's row order: parent indexes the rank's rows
    ops = a.to_pandas("ops")
    for rank, g in ops.groupby("rank"):
        g = g.reset_index(drop=True)
        kids = g[g.parent >= 0]
        assert (g.depth[kids.parent.to_numpy()].to_numpy() == kids.depth.to_numpy() - 1).all()


def test_documented_blocks_run(outs, tmp_path, monkeypatch):
    """The README's notebook block and docs/analyze.md's "Query the outputs" block, run as written
    in a folder holding the job's traces as ``runs/job42``."""
    (tmp_path / "runs").symlink_to(outs / "runs")
    monkeypatch.chdir(tmp_path)
    readme = [b for b in code_blocks("README.md") if "streamtrace.load(" in b]
    query = [b for b in code_blocks("docs/analyze.md") if "duckdb.sql" in b]
    assert len(readme) == len(query) == 1
    for block in readme + query:
        scope = {}
        exec(compile(block, "<docs>", "exec"), scope)
    ref = pd.read_parquet(outs / "job42_iter10" / "kernels")
    assert len(scope["k"]) == len(ref) and scope["k"].dur_ns.sum() == ref.dur_ns.sum()


def test_readme_interop_examples_run(outs):
    import duckdb
    import polars as pl
    d = outs / "job42_iter10"
    k = pd.read_parquet(d / "kernels")
    by = k[k.kind == "communication"].groupby(["parallel_dim", "collective"]).dur_ns.sum()
    assert by.sum() == k[k.kind == "communication"].dur_ns.sum() > 0
    q = duckdb.sql(f"""SELECT iteration, rank, phase, microbatch, sum(dur_ns)/1e6 AS ms
                      FROM read_parquet('{d}/kernels/*/*/*.parquet', hive_partitioning=true)
                      GROUP BY ALL ORDER BY ALL""").df()
    assert q.ms.sum() == pytest.approx(k.dur_ns.sum() / 1e6)
    t = pds.dataset(d / "kernels", partitioning="hive").to_table()
    assert t.num_rows == len(k)
    p = pl.read_parquet(f"{d}/kernels/**/*.parquet", hive_partitioning=True)
    assert p.height == len(k) and p["dur_ns"].sum() == k.dur_ns.sum()
    assert streamtrace.load(d).to_polars("kernels").height == len(k)


def test_aggregate_folder(outs):
    g = streamtrace.load(outs / "job42-agg")
    assert g.kind == "aggregate" and {"ranks", "rank_phase", "collectives", "pipeline"} <= set(g.tables())
    ranks = g.to_pandas("ranks")
    ref = pd.read_parquet(outs / "job42-agg" / "ranks.parquet")
    pd.testing.assert_frame_equal(ranks, ref)
    assert g.summary["kind"] == "streamtrace-aggregate" and g.report is None
    assert {"kernel_stats", "op_stats", "launch_stats", "idle_breakdown"} <= set(g.tables())
    idle = g.to_pandas("idle_breakdown").query("stream == -1").groupby("rank")[["host_wait_ns", "other_ns"]].sum()
    assert list(idle.index) == [0, 1, 2, 3]                             # docs/api.md's line
    with pytest.raises(StreamtraceError, match="no table 'kernels'"):
        g.table("kernels")
    with pytest.raises(AttributeError):
        g.kernels


def test_diff_folder(outs):
    d = streamtrace.diff(outs / "job42_iter10", outs / "job42_iter10", outs / "diff-41-42",
                         streamtrace.DiffOptions(jobs=1, steps=[10]))
    again = streamtrace.load(outs / "diff-41-42")
    assert d.kind == again.kind == "diff" and again.tables() == ["kernels", "ops", "groups", "ranks"]
    assert again.summary["kind"] == "streamtrace-diff"
    assert len(again.to_pandas("kernels").query("change == 'added'")) == 0     # docs/api.md's line
    pd.testing.assert_frame_equal(again.to_pandas("ops"), pd.read_parquet(outs / "diff-41-42" / "ops.parquet"))
    via_agg = streamtrace.diff(outs / "job42-agg", outs / "job42_iter10", outs / "diff-agg",   # an aggregate: its inputs
                               streamtrace.DiffOptions(jobs=1, charts=False))
    assert via_agg.summary["base"]["dirs"] == [str(outs / "job42_iter10")]
    assert set(via_agg.to_pandas("kernels")["change"]) == {"unchanged"}


def test_epilogue_run_folder(tmp_path):
    from streamtrace.epilogue import run
    d = tmp_path / "tb"
    generate_job(d, SynthSpec(world_size=4, tp=2, pp=2, microbatches=1))
    s = run(d, jobs=1, charts=False)
    assert not s["failures"]
    e = streamtrace.load(d / "streamtrace")
    assert e.kind == "epilogue" and list(e.analyses) == ["iteration_10"]
    assert e.kernels.num_rows == e.analyses["iteration_10"].kernels.num_rows > 0
    assert e.ranks.num_rows == e.aggregate.ranks.num_rows == 4
    assert e.summary["summary"]["ranks"] == 4
    # diff finds the analysed iterations of an epilogue folder through its kind (EpilogueRun, below diff)
    from streamtrace.report.diff.inputs import analysed_dirs
    an = d / "streamtrace" / "iteration_10" / "analysis"
    assert analysed_dirs(d / "streamtrace") == [an]
    dd = streamtrace.diff(d / "streamtrace", an, tmp_path / "diff", streamtrace.DiffOptions(jobs=1, charts=False))
    assert dd.summary["base"]["dirs"] == dd.summary["test"]["dirs"] == [str(an)]
    assert set(dd.to_pandas("kernels")["change"]) == {"unchanged"}
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "epilogue.json").write_text("{}")                   # the marker alone, no analysed iteration
    with pytest.raises(StreamtraceError, match="an epilogue output without analysed iterations"):
        analysed_dirs(empty)


def test_not_an_output_folder_and_new_kinds(tmp_path):
    with pytest.raises(StreamtraceError, match="not a streamtrace output folder"):
        streamtrace.load(tmp_path)

    class Example(Outputs):
        kind, marker = "example", "example.json"

        def tables(self):
            return ["changes"]

        def _read(self, name):
            return pa.table({"x": np.arange(3)})
    (tmp_path / "example.json").write_text("{}")
    from streamtrace.events import load as L
    saved = list(L.KINDS)
    register(Example)
    try:
        out = streamtrace.load(tmp_path)
        assert out.kind == "example" and out.changes.num_rows == 3
    finally:
        L.KINDS[:] = saved
    assert [c.kind for c in L.KINDS] == ["diff", "epilogue", "aggregate", "analysis", "report"]


def test_one_protocol_per_kind_of_folder(tmp_path):
    """Every kind is implemented once, in its stage, and says which files it owns: what the stage writes
    (and what its output folder may replace) is what load reads."""
    from streamtrace.events.load import KINDS, OutputKind
    with pytest.raises(StreamtraceError):
        streamtrace.load(tmp_path)                 # registers every stage's kind
    where = {c.kind: c.__module__ for c in KINDS}
    assert where == {"diff": "streamtrace.report.diff.outputs", "epilogue": "streamtrace.report.outputs",
                     "aggregate": "streamtrace.aggregate.folder", "analysis": "streamtrace.analyze.outputs",
                     "report": "streamtrace.report.outputs"}
    for c in KINDS:
        assert isinstance(c, OutputKind) or issubclass(c, Outputs)
        assert c.owns(c.marker), c.kind
    A = {c.kind: c for c in KINDS}
    assert A["analysis"].owns("kernels") and not A["analysis"].owns("notes.txt")
    assert A["aggregate"].owns("ranks.parquet") and A["aggregate"].owns("report.json")
    assert A["diff"].owns("analysis-base") and A["epilogue"].owns("iteration_10")


def test_only_the_kinds_name_their_files():
    """The marker and file names of every kind of output folder are written in the code of that kind's class
    only (the stages write and read ``Kind.marker``); a string constant equal to one elsewhere is a second place."""
    from streamtrace.events.load import KINDS
    from streamtrace.report.diff.outputs import Diff
    with pytest.raises(StreamtraceError):
        streamtrace.load(ROOT)                          # registers every stage's kind
    home = {c.marker: c.__module__ for c in KINDS}
    home[Diff.MARKDOWN] = Diff.__module__
    home["report.json"] = "streamtrace.aggregate.folder"     # REPORT_MARKER: an aggregate folder holds its report too
    assert set(home) >= {"summary.json", "aggregate.json", "report.json", "diff.json", "epilogue.json"}
    table_home = _table_homes()
    stray = []
    for path in sorted((ROOT / "streamtrace").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}     # docstrings (attributes' too)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
                continue
            if node.value in home and home[node.value] != module:
                stray.append(f"{module}:{node.lineno} {node.value!r}")
            names = {m.group(1) for m in TABLE_FILE.finditer(node.value)} if id(node) not in docs else set()
            stray += [f"{module}:{node.lineno} {node.value!r}" for n in names
                      if module not in table_home.get(n, {module})]
    assert not stray, stray


TABLE_FILE = re.compile(r"\b(\w+)\.(?:parquet|csv)\b")


def _table_homes() -> dict:
    """``{table name: {owner modules}}``: every table an output kind writes as ``NAME.parquet`` (and
    ``NAME.csv``), and the module that names it (a diff and an aggregate both have ``ranks``)."""
    from streamtrace.aggregate import folder
    from streamtrace.report.diff import outputs
    homes = {}
    for module, names in ((folder, folder.TABLES), (outputs, outputs.TABLES)):
        for n in names:
            homes.setdefault(n, set()).add(module.__name__)
    return homes


TABLE_CALLS = {"read_aggregate_table": 1, "write_table": 1, "table_path": 1, "table_file": 0}
"""The functions that take a table's name, and the position of that name among their arguments."""


def _spelled_tables(tree, module: str, homes: dict) -> list:
    """Calls in ``tree`` that spell a table's name (a str constant) where ``TABLE_CALLS`` take it, outside
    the table's owners, and calls of ``read_aggregate_table`` with a literal list of columns (the owner's
    ``columns`` hands a reader its columns)."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        at = TABLE_CALLS.get(fn)
        if at is None:
            continue
        name = node.args[at] if len(node.args) > at else None
        if isinstance(name, ast.Constant) and name.value in homes and module not in homes[name.value]:
            out.append(f"{module}:{node.lineno} {fn}({name.value!r})")
        cols = [*node.args[2:3], *(k.value for k in node.keywords if k.arg == "columns")]
        if fn == "read_aggregate_table" and any(isinstance(c, (ast.List, ast.Tuple)) for c in cols):
            out.append(f"{module}:{node.lineno} {fn}(..., [columns spelled])")
    return out


def test_readers_and_writers_take_table_names_and_columns_from_the_owner():
    """No module but a table's owner passes its name as a string to the functions that take a table's name,
    and no reader spells a list of an aggregate table's columns (``aggregate.folder.columns`` gives them):
    checked on the package, and on a snippet that does both, so the check can fail."""
    homes = _table_homes()
    stray = []
    for path in sorted((ROOT / "streamtrace").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        stray += _spelled_tables(ast.parse(path.read_text()), module, homes)
    assert not stray, stray
    bad = ast.parse('t = read_aggregate_table(agg, "op_stats", ["rank", "name"])\n'
                    'write_table(out, "ranks", cols)\nread_aggregate_table(agg, RANKS, columns=("rank",))')
    assert len(_spelled_tables(bad, "streamtrace.report.x", homes)) == 4


def test_only_the_owners_name_their_tables():
    """A table's name has one home: the aggregate's tables are the constants of
    ``streamtrace.aggregate.folder`` (each one of ``TABLES``, none twice) and the diff's are
    ``report.diff.outputs.TABLES``; a ``NAME.parquet`` / ``NAME.csv`` spelled in any other module's code
    (docstrings aside) fails ``test_only_the_kinds_name_their_files``, which this checks can fail."""
    from streamtrace.aggregate import folder
    consts = {k: v for k, v in vars(folder).items() if k.isupper() and isinstance(v, str)
              and k not in ("REPORT_MARKER", "CHARTS")}
    assert sorted(consts.values()) == sorted(folder.TABLES) and len(set(folder.TABLES)) == len(folder.TABLES)
    assert all(k == v.upper() for k, v in consts.items())
    homes = _table_homes()
    found = [m.group(1) for m in TABLE_FILE.finditer('p = agg / "critical_path.parquet", "ranks.csv", "x.parquet"')]
    assert [n for n in found if n in homes] == ["critical_path", "ranks"]
    assert homes["ranks"] == {"streamtrace.aggregate.folder", "streamtrace.report.diff.outputs"}


def test_read_checks_the_marker_as_the_stages_need_it(tmp_path):
    """``Kind.read(DIR)``, how a later stage reads a folder (what ``read_meta`` / ``read_summary`` did):
    a one-line StreamtraceError without the marker, a DataError naming the damaged file."""
    from streamtrace.analyze.outputs import Analysis
    from streamtrace.aggregate.folder import Aggregate
    from streamtrace.runtime.errors import DataError
    d = tmp_path / "x"
    d.mkdir()
    with pytest.raises(StreamtraceError, match=r"x: no aggregate.json \(run streamtrace aggregate first\)$"):
        Aggregate.read(d)
    with pytest.raises(StreamtraceError, match=r"not an analysed folder \(no summary.json; run streamtrace analyze"):
        Analysis.read(d)
    (d / "aggregate.json").write_text("[]")
    with pytest.raises(DataError, match="expected an object"):
        Aggregate.read(d)
    meta = {"inputs": [], "time_alignment": "global", "clock_sync": "none", "iterations": [], "ranks": [],
            "collectives": {}, "files": ["ranks.parquet", "aggregate.json"]}
    (d / "aggregate.json").write_text(json.dumps(meta))
    with pytest.raises(DataError) as e:
        Aggregate.read(d)
    assert e.value.path == str(d / "ranks.parquet") and "aggregate.json lists it" in str(e.value)
    (d / "ranks.parquet").write_bytes(b"")          # its tables' footers are read too (their columns' kinds)
    with pytest.raises(DataError, match="not a readable Parquet file") as e:
        Aggregate.read(d)
    assert e.value.path == str(d / "ranks.parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"rank": pa.array([0], pa.int64()), "source": ["gpu"]}), d / "ranks.parquet")
    assert Aggregate.read(d).summary == meta
    (d / "summary.json").write_text('{"ranks": [{"rank": -1}]}')
    with pytest.raises(DataError, match=r"ranks\[0\] is not"):
        Analysis.read(d)
    (d / "summary.json").write_text('{"ranks": [{"rank": 3, "iteration": 10, "source": "r3.json"}]}')
    assert Analysis.read(d)["ranks"][0]["rank"] == 3
    (d / "summary.json").write_text('{"ranks": [')
    with pytest.raises(DataError, match="invalid JSON"):
        Analysis.read(d)
