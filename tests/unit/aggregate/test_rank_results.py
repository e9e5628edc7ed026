"""What aggregate's parent keeps of the ranks' results as they come back (``aggregate.rank_results``):
the top kernels summed in any order of arrival against the plain sum in part order."""
from __future__ import annotations

import pickle

from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamtrace.aggregate.rank_results import GATHERED, PART, PHASE, REPLAY, TOP, Kept, TopKernels, phase_rows


def _plain_sum(tops: list) -> dict:
    """The job's top kernels as the parts' dicts summed in part order: a name's kind from its first part."""
    out: dict = {}
    for top in tops:
        for name, (kind, count, total) in top.items():
            a = out.setdefault(name, [kind, 0, 0])
            a[1] += count
            a[2] += total
    return out


_TOPS = st.lists(st.dictionaries(st.sampled_from("abcdefg"), st.tuples(st.sampled_from(["gemm", "comm", "other"]),
                                                                     st.integers(0, 9), st.integers(0, 10**12)),
                                 max_size=5), max_size=6)


@settings(max_examples=300, deadline=None)
@given(_TOPS, st.randoms(use_true_random=False))
def test_top_kernels_in_any_arrival_order_equal_the_part_order_sum(tops, rnd):
    order = list(range(len(tops)))
    rnd.shuffle(order)
    acc = TopKernels()
    for part in order:
        acc.add(part, tops[part])
    want = _plain_sum(tops)
    got = acc.result()
    assert list(got.items()) == list(want.items())       # the values, and the names' order


def test_kept_result_takes_the_top_kernels_and_pickles_the_phase_rows():
    rows = [{"rank": 3, "phase": "forward", "ns": 5}]
    result = (rows, ["rank row"], {}, "timeline", {"k": ("gemm", 2, 7)}, {}, "explain", "piece", "replay", 3)
    kept = Kept()
    r = kept(result)
    assert len(r) == len(result) and r[TOP] is None and isinstance(r[PHASE], bytes)
    assert r[1:TOP] == result[1:TOP] and r[TOP + 1:] == result[TOP + 1:] and r[PART] == 3
    assert phase_rows(r[PHASE]) == rows and phase_rows(rows) == rows and pickle.loads(r[PHASE]) == rows
    assert kept.top.result() == {"k": ["gemm", 2, 7]}



def _result(part: int, rnd) -> tuple:
    """A rank's result as ``_part_job`` returns it: phase rows, rank rows, compute windows, timeline, top
    kernels, step durations, explaining tables, piece, replay rows, part."""
    rows = [{"rank": part, "phase": rnd.choice(["forward", "backward"]), "ns": rnd.randrange(10**15)}
            for _ in range(rnd.randrange(4))]
    return (rows, [{"rank": part, "x": rnd.random()}] * rnd.randrange(3), {(0, 1, part): (1, 2, 3)},
            f"timeline-{part}", {"k": ("gemm", 1, part)}, {part: (part * 10, 5)}, ("explain", part), f"piece-{part}",
            {"replay": part} if rnd.random() < 0.8 else None, part)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 12), st.randoms(use_true_random=False))
def test_spilled_results_gather_what_the_results_held(tmp_path_factory, n, rnd):
    results = [_result(p, rnd) for p in range(n)]
    order = list(range(n))
    rnd.shuffle(order)                                   # (they come back in any order)
    spill = tmp_path_factory.mktemp("kept") / "gathered.pickle"
    held, spilled = Kept(), Kept(spill)
    kept_held, kept_spilled = [None] * n, [None] * n
    for p in order:
        kept_held[p], kept_spilled[p] = held(results[p]), spilled(results[p])
    for r, k in zip(results, kept_spilled):          # the rest of the result as it came; nothing gathered held
        assert all(k[i] is None for i in GATHERED[1:] + (TOP,)) and isinstance(k[PHASE], int)
        assert (k[REPLAY] is None) == (r[REPLAY] is None)
        assert all(k[i] == r[i] for i in range(len(r)) if i not in GATHERED + (TOP, REPLAY))
    want = [tuple(r[i] for i in GATHERED) for r in results]
    assert list(spilled.gathered(kept_spilled)) == want == list(held.gathered(kept_held))
    assert list(spilled.replay_rows(kept_spilled)) == [r[REPLAY] for r in results] == \
        list(held.replay_rows(kept_held))
    assert spilled.top.result() == held.top.result()

_ROW = st.fixed_dictionaries(
    {"iteration": st.integers(0, 2), "step": st.integers(0, 2), "rank": st.integers(0, 5), "device": st.integers(-1, 1),
     "phase": st.sampled_from(["forward", "backward", "recompute", "optimizer"]),
     "start_ns": st.one_of(st.none(), st.integers(0, 50)), "end_ns": st.one_of(st.none(), st.integers(50, 99)),
     "overlap_ns": st.integers(0, 9), "comm_ns": st.integers(0, 9),
     "microbatch": st.one_of(st.none(), st.integers(-1, 3))},
    optional={"kernels": st.integers(0, 10**12), "source": st.sampled_from(["gpu", "cpu"]),
              "x": st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=False), st.booleans())})
_COLUMNS = ("iteration", "step", "rank", "device", "source", "phase", "microbatch", "replica", "stage", "start_ns",
            "end_ns", "kernels", "x", "overlap_ns", "comm_ns", "overlap_pct", "step_ns")


_BIG = {"iteration": 0, "step": 0, "rank": 0, "device": 0, "phase": "forward", "start_ns": None, "end_ns": None,
        "overlap_ns": 0, "comm_ns": 0, "microbatch": None, "x": -2**63 - 1}
"""A row whose ``x`` is one past int64 (found by hypothesis in a CI run): an object column, as numpy makes it."""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_ROW, max_size=5), max_size=8),
       st.dictionaries(st.integers(0, 6), st.fixed_dictionaries({"replica": st.integers(0, 2)},
                                                                optional={"stage": st.integers(0, 3)})),
       st.sampled_from([1, 2, 3, 256]))
@example([[_BIG]], {}, 256)
@example([[_BIG | {"x": 2**63}, _BIG | {"x": 1}]], {}, 256)
@example([[_BIG | {"x": 1}], [_BIG | {"x": 2}], [], [_BIG | {"x": True}], [_BIG | {"x": 2**63}]], {}, 2)
def test_row_columns_are_the_rows_as_dicts_written(parts, coords, join_parts):
    """``RowColumns`` (a part's rows at a time, their chunks joined every ``join_parts`` parts) against
    the rows as dicts: each updated with its rank's coordinates, its overlap share and a column of three
    others, sorted by (iteration, step, rank, device, start or -1, phase), a column an object array where a
    value is None or a str."""
    import numpy as np
    from streamtrace.aggregate import rank_results
    from streamtrace.aggregate.rank_phase import phase_order
    from streamtrace.aggregate.rank_results import RowColumns, RowRules
    pct = lambda o, c: None if not c else round(100.0 * o / c, 3)  # noqa: E731
    step_of = {(0, 0, 0): 7, (1, 0, 1): None, (2, 2, 2): 2**40}
    rules = RowRules(coords, {"overlap_pct": (pct, ("overlap_ns", "comm_ns")),
                              "step_ns": (lambda r, i, st: step_of.get((r, i, st)), ("rank", "iteration", "step"))})
    cols = RowColumns(_COLUMNS, rules)
    was, rank_results.JOIN_PARTS = rank_results.JOIN_PARTS, join_parts
    try:
        for rows in parts:         # (each text a new str object, as a part's unpickled rows hold them)
            cols.add([{k: "".join(list(v)) if isinstance(v, str) else v for k, v in r.items()} for r in rows])
    finally:
        rank_results.JOIN_PARTS = was
    got, order = cols.columns(_COLUMNS, phase_order)
    assert sorted(order.tolist()) == list(range(cols.n)) and order.dtype == np.int64
    got = {c: v[order] for c, v in got.items()}
    rows = [dict(r) for rows in parts for r in rows]
    for r in rows:
        r.update(coords.get(r["rank"], {}))
        r["overlap_pct"] = pct(r["overlap_ns"], r["comm_ns"])
        r["step_ns"] = step_of.get((r["rank"], r["iteration"], r["step"]))
    rows.sort(key=lambda r: (r["iteration"], r["step"], r["rank"], r["device"],
                             -1 if r["start_ns"] is None else r["start_ns"], r["phase"]))
    assert list(got) == list(_COLUMNS)
    for name in _COLUMNS:
        vals = [r.get(name) for r in rows]
        assert got[name].tolist() == vals, name
        mixed = any(v is None or isinstance(v, str) for v in vals)      # (or an int past int64: numpy's object)
        assert (got[name].dtype == object) == (mixed or np.asarray(vals).dtype == object) or not vals, name
        if vals and not mixed:
            assert got[name].dtype == np.asarray(vals).dtype
        texts = [v for v in got[name].tolist() if type(v) is str]       # one str object a distinct text
        assert len({id(v) for v in texts}) == len(set(texts)), name


def test_row_columns_hold_a_chunk_per_run_not_per_part():
    """Every ``JOIN_PARTS`` parts, a column's parts of one type are one array (the parts' own small arrays
    let go: 655,360 of them at 16,384 synthetic ranks), a part with a None among them too (a masked array,
    not a Python object a value); a part of another type breaks the run."""
    from streamtrace.aggregate.rank_results import JOIN_PARTS, RowColumns
    cols = RowColumns(("rank", "x", "y", "none"))
    for p in range(2 * JOIN_PARTS):
        cols.add([{"rank": p, "x": None if p == 3 else p * 0.5, "y": "s" if p == 5 else p},
                  {"rank": p, "x": 1.0, "y": None}])
    assert [len(c) for c in cols._chunks["rank"]] == [2 * JOIN_PARTS, 2 * JOIN_PARTS]
    assert [type(c).__name__ for c in cols._chunks["x"]] == ["MaskedArray", "ndarray"]
    assert [type(c).__name__ for c in cols._chunks["y"]] == ["MaskedArray", "list", "MaskedArray", "MaskedArray"]
    assert [type(c).__name__ for c in cols._chunks["none"]] == ["MaskedArray", "MaskedArray"]
    assert cols.column("x") == [None if p == 3 and i == 0 else (p * 0.5 if i == 0 else 1.0)
                                for p in range(2 * JOIN_PARTS) for i in range(2)]
    assert cols.column("y") == [("s" if p == 5 else p) if i == 0 else None for p in range(2 * JOIN_PARTS)
                                for i in range(2)]
    assert cols.column("none") == [None] * (4 * JOIN_PARTS)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 3), st.integers(0, 1),
                          st.one_of(st.none(), st.integers(-3, 2**62)),
                          st.sampled_from([None, "", "a", "b", "ab", "é"])), max_size=40),
       st.sampled_from(["ints", "device None", "device str"]))
def test_phase_order_is_python_sort_of_the_row_keys(rows, devices):
    """``rank_phase.phase_order``: the rows in the order Python's stable sort of (iteration, step, rank, device,
    start or -1, phase or "") gives them, on its numpy path (every key an int) and off it (devices None
    alike, or text)."""
    from streamtrace.aggregate.rank_phase import phase_order
    if devices == "device None":
        rows = [r[:3] + (None,) + r[4:] for r in rows]
    elif devices == "device str":
        rows = [r[:3] + (f"cuda:{r[3]}",) + r[4:] for r in rows]
    cols = dict(zip(("iteration", "step", "rank", "device", "start_ns", "phase"), (list(c) for c in zip(*rows))))
    if not rows:
        cols = {c: [] for c in ("iteration", "step", "rank", "device", "start_ns", "phase")}
    key = lambda i: rows[i][:4] + (-1 if rows[i][4] is None else rows[i][4], rows[i][5] or "")  # noqa: E731
    assert phase_order(cols).tolist() == sorted(range(len(rows)), key=key)
    from streamtrace.aggregate.rank_results import column_array        # (as ``RowColumns.columns`` passes them)
    assert phase_order({c: column_array(v) for c, v in cols.items()}).tolist() == sorted(range(len(rows)), key=key)
