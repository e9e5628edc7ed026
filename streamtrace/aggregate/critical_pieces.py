"""A part's critical-path piece (``streamtrace.aggregate.critical_local.part_paths``) as aggregate's rank
worker spills it and the job level reads it back.

One record of the spill folder (``runtime.spillfile``: one file a worker process), two pickles: first
the piece's facts (``segments`` the record of its local path segments or None,
``dropped``, ``stats``, and ``steps``: the steps its anchors are of, ascending), then its ``anchors`` and
``edges`` columns.  The job's critical path (``streamtrace.aggregate.critical_path.critical_paths``) reads
every part's facts first, each part's graph only when it builds a step the part is in, and lets it go
once added to that step's job graph: the parts' graphs are never all held at once (4,096 synthetic
ranks: 113 MB of the critical path process's heap, every piece read before the first step was built).
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from ..runtime import spillfile

GRAPH = ("anchors", "edges")
"""The piece's columns kept in the file's second pickle."""


def spill_piece(piece: dict, folder) -> tuple:
    """A part's piece (``part_paths``' dict) pickled into ``folder`` as the two pickles above,
    one record (``spillfile.Record``); returns its ``(path, offset, size)`` (for ``PieceFile``)."""
    facts = {k: v for k, v in piece.items() if k not in GRAPH}
    steps = piece["anchors"]["step"] if piece.get("anchors") else np.zeros(0, np.int64)
    facts["steps"] = sorted(set(np.asarray(steps).tolist()))
    rec = spillfile.Record(folder)
    with rec as f:
        pickle.dump(facts, f, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.dump({k: piece.get(k) for k in GRAPH}, f, protocol=pickle.HIGHEST_PROTOCOL)
    return rec.rec


class PieceFile:
    """A spilled piece (``spill_piece``'s record): ``info`` its facts (``segments``, ``dropped``, ``stats``,
    ``steps``), read when made; ``graph(step, texts)`` its anchors and edges of one step, read from the
    file at each call (a part in several steps is read once a step, nothing kept in between).  Raises
    OSError or ``pickle.UnpicklingError`` on a file that is not one (aggregate made it a moment ago)."""

    def __init__(self, rec):
        """``rec``: ``spill_piece``'s ``(path, offset, size)``."""
        self.path = Path(rec[0])
        with spillfile.opened(rec) as f:
            self.info = pickle.load(f)
            self._at = f.tell()

    @property
    def steps(self) -> list:
        """The steps the part's anchors are of (ints, ascending)."""
        return self.info["steps"]

    def graph(self, step: int, texts=None) -> tuple:
        """``(anchors, edges)`` of ``step``: dicts of ``part_paths``' columns (the rows of that step when
        the part is in several, else all of them); ``texts`` (a ``critical_graph.Texts``): the anchors'
        ``name`` and ``lane`` made its int32 codes (None: left as text)."""
        with open(self.path, "rb") as f:
            f.seek(self._at)
            cols = pickle.load(f)
        a, e = cols["anchors"], cols["edges"]
        if len(self.steps) > 1:
            ma, me = a["step"] == step, e["step"] == step
            a, e = {c: v[ma] for c, v in a.items()}, {c: v[me] for c, v in e.items()}
        for c in ("name", "lane") if texts is not None else ():
            a[c] = texts.codes(a[c])
        return a, e
