"""A rank's spilled path segments (``critical_local.write_segments`` / ``read_segments``): every column
back with its schema's dtype and values, the texts as the str objects they were; a folder whose name
is not UTF-8 (issue 49's case) works."""
from __future__ import annotations

import os

import numpy as np

from streamtrace.aggregate.critical_graph import Texts
from streamtrace.aggregate.critical_local import SEGMENT_SCHEMA, read_segments, write_segments


def _segs(n):
    """The segment columns with ``lane`` / ``name`` as text, and as the codes of a ``Texts`` with it."""
    names = np.asarray(["aten::mm", "void gemm_kernel<128>(float*)", ""], object)
    plain = {"src": np.arange(n), "dst": np.arange(n) + 1, "t0": np.arange(n) * 10,
             "t1": np.arange(n) * 10 + 5, "w": np.full(n, 5), "cat": np.arange(n) % 3,
             "lane": np.asarray([f"thread {i % 2}" for i in range(n)], object), "name": names[np.arange(n) % 3],
             "ref": np.arange(n) - 1}
    texts = Texts()
    texts.code("not on any segment")
    return plain, dict(plain, lane=texts.codes(plain["lane"]), name=texts.codes(plain["name"])), texts.values()


def test_round_trip(tmp_path):
    plain, segs, texts = _segs(50)
    write_segments(tmp_path, _segs(7)[1], texts)                 # (another record of the same file before it)
    rec = write_segments(tmp_path, segs, texts)
    assert rec[1] > 0 and len(list(tmp_path.iterdir())) == 1
    back = read_segments(rec)
    assert list(back) == SEGMENT_SCHEMA.names
    for f in SEGMENT_SCHEMA:
        col = back[f.name]
        assert col.dtype == (object if f.name in ("lane", "name") else f.type.to_pandas_dtype())
        assert col.tolist() == plain[f.name].tolist()
    assert all(type(x) is str for x in back["name"].tolist())


def test_empty_and_non_utf8_folder(tmp_path):
    folder = os.path.join(os.fsencode(tmp_path), b"job_caf\xe9")
    os.mkdir(folder)
    _, segs, texts = _segs(0)
    back = read_segments(write_segments(os.fsdecode(folder), segs, texts))
    assert all(len(v) == 0 for v in back.values()) and back["cat"].dtype == np.int8


def test_steps_written_apart_are_read_back_joined(tmp_path):
    """A list of steps' columns (``part_paths`` writes one dict a step) reads back as their rows in
    order, as one dict of the same columns would."""
    plain, segs, texts = _segs(30)
    parts = [{c: v[a:b] for c, v in segs.items()} for a, b in ((0, 12), (12, 12), (12, 30))]
    back = read_segments(write_segments(tmp_path, parts, texts))
    assert list(back) == SEGMENT_SCHEMA.names
    for f in SEGMENT_SCHEMA:
        assert back[f.name].tolist() == plain[f.name].tolist()


def _piece(steps):
    """A ``part_paths`` piece whose anchors and edges are of ``steps`` (one row each per entry)."""
    n = len(steps)
    anchors = {"step": np.asarray(steps, np.int64), "node": np.arange(n), "kind": np.zeros(n, np.int64),
               "t_ns": np.arange(n) * 7, "correlation": np.arange(n) + 100, "stream": np.full(n, 7),
               "name": np.asarray([f"kernel {i % 3}" for i in range(n)], object),
               "lane": np.asarray(["stream 7"] * n, object)}
    edges = {"step": np.asarray(steps, np.int64), "src": np.arange(n), "dst": np.arange(n) + 1,
             "w_ns": np.arange(n) * 3}
    return {"anchors": anchors, "edges": edges, "segments": "segs.pickle", "dropped": 2, "stats": {"clipped_ns": 5}}


def test_spilled_piece_reads_back_a_step_at_a_time(tmp_path):
    """A piece spilled as one record of two pickles (``critical_pieces``): its facts read alone (the steps its anchors
    are of, ascending), each step's anchors and edges the rows of that step (all of them for a part in
    one step), names and lanes coded into the ``Texts`` given, in row order."""
    from streamtrace.aggregate.critical_pieces import PieceFile, spill_piece
    steps = [5, 3, 5, 5, 3]
    piece = _piece(steps)
    f = PieceFile(spill_piece(piece, tmp_path))
    assert f.steps == [3, 5] and f.info["dropped"] == 2 and f.info["segments"] == "segs.pickle"
    assert f.info["stats"] == {"clipped_ns": 5}
    texts = Texts()
    for st in (3, 5):
        a, e = f.graph(st, texts)
        rows = [i for i, s in enumerate(steps) if s == st]
        assert a["t_ns"].tolist() == [7 * i for i in rows] and e["w_ns"].tolist() == [3 * i for i in rows]
        assert [texts[c] for c in a["name"].tolist()] == [f"kernel {i % 3}" for i in rows]
        assert a["name"].dtype == np.int32 and {texts[c] for c in a["lane"].tolist()} == {"stream 7"}
    one = PieceFile(spill_piece(_piece([4, 4]), tmp_path))
    a, e = one.graph(4)
    assert one.steps == [4] and a["name"].tolist() == ["kernel 0", "kernel 1"] and len(e["src"]) == 2
    empty = PieceFile(spill_piece(_piece([]), tmp_path))
    assert empty.steps == []
    # the three records share this process's one file, each read from its own offset
    assert f.path == one.path == empty.path and [p.name for p in tmp_path.iterdir()] == [f.path.name]
    a, e = f.graph(5, texts)
    assert a["t_ns"].tolist() == [0, 14, 21] and e["w_ns"].tolist() == [0, 6, 9]
