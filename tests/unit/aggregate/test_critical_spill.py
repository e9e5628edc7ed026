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
    path = tmp_path / "critical-000003.pickle"
    write_segments(path, segs, texts)
    back = read_segments(path)
    assert list(back) == SEGMENT_SCHEMA.names
    for f in SEGMENT_SCHEMA:
        col = back[f.name]
        assert col.dtype == (object if f.name in ("lane", "name") else f.type.to_pandas_dtype())
        assert col.tolist() == plain[f.name].tolist()
    assert all(type(x) is str for x in back["name"].tolist())


def test_empty_and_non_utf8_folder(tmp_path):
    folder = os.path.join(os.fsencode(tmp_path), b"job_caf\xe9")
    os.mkdir(folder)
    path = os.fsdecode(os.path.join(folder, b"critical-000000.pickle"))
    _, segs, texts = _segs(0)
    write_segments(path, segs, texts)
    back = read_segments(path)
    assert all(len(v) == 0 for v in back.values()) and back["cat"].dtype == np.int8


def test_steps_written_apart_are_read_back_joined(tmp_path):
    """A list of steps' columns (``part_paths`` writes one dict a step) reads back as their rows in
    order, as one dict of the same columns would."""
    plain, segs, texts = _segs(30)
    parts = [{c: v[a:b] for c, v in segs.items()} for a, b in ((0, 12), (12, 12), (12, 30))]
    path = tmp_path / "critical-000001.pickle"
    write_segments(path, parts, texts)
    back = read_segments(path)
    assert list(back) == SEGMENT_SCHEMA.names
    for f in SEGMENT_SCHEMA:
        assert back[f.name].tolist() == plain[f.name].tolist()
