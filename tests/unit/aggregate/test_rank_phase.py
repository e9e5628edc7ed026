"""``rank_phase``'s rows streamed through aggregate's parent (``aggregate.rank_phase.PhaseTable``) against the
plain definition: the rows as dicts completed, sorted and written whole by ``events.dataset.write_table``."""
from __future__ import annotations

import itertools

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

_ROW = st.fixed_dictionaries(
    {"iteration": st.integers(0, 2), "step": st.integers(0, 2), "rank": st.integers(0, 5), "device": st.integers(-1, 1),
     "phase": st.sampled_from([None, "forward", "backward", "recompute", "optimizer"]),
     "start_ns": st.one_of(st.none(), st.integers(0, 50)), "end_ns": st.one_of(st.none(), st.integers(50, 99)),
     "overlap_ns": st.integers(0, 9), "comm_ns": st.integers(0, 9)},
    optional={"microbatch": st.one_of(st.none(), st.integers(-1, 3)), "source": st.sampled_from(["gpu", "cpu"]),
              "x": st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False),
                             st.sampled_from(["t", 2**64]))})
_COLUMNS = ("iteration", "step", "rank", "device", "source", "phase", "microbatch", "replica", "stage", "start_ns",
            "end_ns", "x", "overlap_ns", "comm_ns", "overlap_pct")
_PHASES = ("forward", "backward", "recompute")


def _pct(o, c):
    return None if not c else round(100.0 * o / c, 3)


def _plain(parts, coords, outdir):
    """The plain definition: every row a dict, updated with its rank's coordinates and its overlap share,
    Python's stable sort by (iteration, step, rank, device, start or -1, phase or ""), each column an object
    array where a value is None or a str (else numpy's), written whole."""
    import numpy as np
    from streamtrace.events.dataset import write_table
    rows = [dict(r) for rows in parts for r in rows]
    for r in rows:
        r.update(coords.get(r["rank"], {}))
        r["overlap_pct"] = _pct(r["overlap_ns"], r["comm_ns"])
    rows.sort(key=lambda r: (r["iteration"], r["step"], r["rank"], r["device"],
                             -1 if r["start_ns"] is None else r["start_ns"], r["phase"] or ""))
    cols = {}
    for c in _COLUMNS:
        v = [r.get(c) for r in rows]
        cols[c] = np.asarray(v, object) if any(x is None or isinstance(x, str) for x in v) else np.asarray(v)
    return write_table(outdir, "rank_phase", cols, csv=True)


def test_streamed_rank_phase_equals_the_rows_as_dicts_written(tmp_path):
    """``PhaseTable`` (a part's rows at a time: coordinates and the overlap share set, a chunk a (iteration,
    step, rank) of the part, held or spilled, written ``ROW_GROUP_ROWS`` rows at a time from the chunks'
    kinds, read ``KINDS_ROWS`` rows at a time, or whole where they cannot type a column) writes what the
    plain definition writes: the Parquet rows and schema, the CSV byte for byte; it fails where that fails
    (text among numbers, an int past int64: pyarrow's errors); its pipeline windows are each key's (start,
    end) of the forward, backward and recompute rows with both ends, in part order (hypothesis)."""
    import numpy as np
    from streamtrace.aggregate import explain
    from streamtrace.aggregate.pipeline import phase_windows
    from streamtrace.aggregate import rank_phase
    from streamtrace.aggregate.rank_phase import PhaseTable
    from streamtrace.aggregate.rank_results import RowRules
    runs = itertools.count()

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.lists(_ROW, max_size=6), max_size=6),
           st.dictionaries(st.integers(0, 6), st.fixed_dictionaries({"replica": st.integers(0, 2)},
                                                                    optional={"stage": st.integers(0, 3)})),
           st.booleans(), st.sampled_from([1, 2, 65_536]), st.sampled_from([1, 3, explain.ARROW_ROWS]),
           st.sampled_from([1, 4, rank_phase.KINDS_ROWS]))
    def check(parts, coords, spilled, group_rows, arrow_rows, kinds_rows):
        d = tmp_path / str(next(runs))
        for sub in ("spill", "got", "want"):
            (d / sub).mkdir(parents=True)
        errors = (pa.ArrowException, TypeError, ValueError, OverflowError)
        try:
            _plain(parts, coords, d / "want")
            want = None
        except errors as e:
            want = type(e)
        table = PhaseTable(_COLUMNS, RowRules(coords, {"overlap_pct": (_pct, ("overlap_ns", "comm_ns"))}),
                           phase_windows, d / "spill" if spilled else None)
        old_kinds, rank_phase.KINDS_ROWS = rank_phase.KINDS_ROWS, kinds_rows
        try:
            for rows in parts:
                table.add([{k: "".join(list(v)) if isinstance(v, str) else v for k, v in r.items()} for r in rows])
        finally:
            rank_phase.KINDS_ROWS = old_kinds
        old = explain.ROW_GROUP_ROWS, explain.ARROW_ROWS
        explain.ROW_GROUP_ROWS, explain.ARROW_ROWS = group_rows, arrow_rows
        try:
            if want is not None:
                with pytest.raises(errors):
                    table.write(d / "got", "rank_phase")
                return
            files = table.write(d / "got", "rank_phase")
        finally:
            explain.ROW_GROUP_ROWS, explain.ARROW_ROWS = old
        assert sorted(p.name for p in files) == ["rank_phase.csv", "rank_phase.parquet"]
        got, exp = (pq.read_table(d / s / "rank_phase.parquet") for s in ("got", "want"))
        assert got.schema == exp.schema and got.to_pylist() == exp.to_pylist()
        assert (d / "got" / "rank_phase.csv").read_bytes() == (d / "want" / "rank_phase.csv").read_bytes()
        assert table.n == sum(map(len, parts)) == got.num_rows
        assert bool(list((d / "spill").iterdir())) == (spilled and table.n > 0)
        windows: dict = {}
        for r in (r for rows in parts for r in rows):
            if r["phase"] in _PHASES and r["start_ns"] is not None and r["end_ns"] is not None:
                windows.setdefault((r["rank"], r["iteration"], r["step"]), []).append((r["start_ns"], r["end_ns"]))
        assert {k: [tuple(w) for w in v.tolist()] for k, v in table.windows.items()} == windows
        assert all(v.dtype == np.int64 and v.shape == (len(windows[k]), 2) for k, v in table.windows.items())
    check()


def test_an_empty_rank_phase_is_written_as_before(tmp_path):
    """No phase rows (a CPU trace without forward/backward): the table's file still written, no rows, each
    column as ``write_table`` writes an empty float column."""
    from streamtrace.aggregate.rank_phase import PhaseTable
    table = PhaseTable(_COLUMNS, spill=tmp_path)
    table.add([])
    files = table.write(tmp_path, "rank_phase")
    t = pq.read_table(files[0])
    assert t.num_rows == 0 and t.column_names == list(_COLUMNS)
    assert all(f.type == pa.float64() for f in t.schema)
    assert files[1].read_text().splitlines() == [",".join(f'"{c}"' for c in _COLUMNS)]
