"""Where the what-if's re-reductions (``streamtrace.aggregate.whatif_local.part_replays``) get a
part's step graphs (``step_graphs``):

* **spilled by aggregate's rank pass** (``GraphSpill``): the worker that builds a part's step graphs
  for the critical path pickles each one into the what-if's spill folder as it goes, and the
  candidates' re-reductions read them back instead of reading the part's tables and building the
  graphs again (on the 8 x A100 job: ~0.07 s a part to build, ~0.02 s to read back; docs/whatif.md).
  Only when the report's job-wide candidates re-reduce every rank (``whatif_candidates
  .MAX_RANKS_GLOBAL`` ranks at most) and within ``SPILL_BYTES`` over the job (``spill_share``);
* **kept in memory** between the replays of one process (``kept_graphs``), those not spilled;
* else **built again** from the part's analysed tables (``streamtrace whatif`` after the aggregate).

A step graph is a pure function of the part's analysed tables and the job's alignment: the rows do
not depend on where it came from (tests/unit/aggregate/test_whatif.py).
"""
from __future__ import annotations

import pickle
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np

from .critical_local import WHOLE_CAPTURE, graph_reads, part_graphs
from .whatif_candidates import MAX_RANKS_GLOBAL

SPILL_BYTES = 1 << 30
"""The most bytes of pickled step graphs aggregate's rank pass spills for the what-if, over all parts."""


def spill_share(ranks: int, parts: int) -> int:
    """Bytes of step graphs each of ``parts`` parts (of ``ranks`` ranks) may spill: ``SPILL_BYTES //
    parts`` when the report's job-wide candidates re-reduce every part (at most ``MAX_RANKS_GLOBAL``
    ranks), else 0 (a few ranks are re-reduced: built again)."""
    return SPILL_BYTES // max(parts, 1) if ranks <= MAX_RANKS_GLOBAL else 0


class GraphSpill:
    """Part ``index``'s step graphs pickled into ``folder/graphs-<index>.pickle``, one step after
    another (``add``: the ``on_step`` of ``critical_local.part_paths``); past ``limit`` bytes the
    file is removed and no more is written (``close`` then returns None: the part is built again)."""

    def __init__(self, folder, index: int, limit: int):
        self.path = Path(folder) / f"graphs-{index:06d}.pickle"
        self.limit = limit
        self.file = open(self.path, "wb")

    def add(self, graphs, step, t, cols, anc, order):
        """Spill one step's graph (``part_paths``' ``on_step`` arguments)."""
        if self.file is None:
            return
        graph = pickle.dumps((t, cols, anc, order), protocol=pickle.HIGHEST_PROTOCOL)   # (a step not read: skipped)
        pickle.dump((int(step), graph), self.file, protocol=pickle.HIGHEST_PROTOCOL)
        if self.file.tell() > self.limit:
            self.file.close()
            self.file = None
            self.path.unlink(missing_ok=True)

    def close(self) -> str | None:
        """The file's path, or None when past the limit."""
        if self.file is None:
            return None
        self.file.close()
        self.file = None
        return str(self.path)


class _LazyOps(Mapping):
    """A part's op columns (``PartGraphs.ops``), read and aligned when a change first looks at them
    (``EdgeView.inside``: the ``ops`` change)."""

    def __init__(self, job, part):
        self.job, self.part, self._ops = job, part, None

    def _load(self) -> dict:
        if self._ops is None:
            graphs = part_graphs(self.job, self.part, graph_reads(self.part))
            self._ops = graphs.ops if graphs is not None else {}
        return self._ops

    def __getitem__(self, key):
        return self._load()[key]

    def __iter__(self):
        return iter(self._load())

    def __len__(self):
        return len(self._load())


def step_graphs(job, part, spilled=None):
    """``(graphs, step, (t, cols, anchors, order))`` for each step window of ``part`` that
    ``job.steps`` selects, in the windows' order: read from ``spilled`` (a ``GraphSpill`` file;
    ``graphs`` then lends only ``ops``, read when first looked at), else taken from ``kept_graphs``
    or built from the part's tables."""
    if spilled is not None:
        graphs = SimpleNamespace(ops=_LazyOps(job, part))
        with open(spilled, "rb") as f:
            while True:
                try:
                    step, graph = pickle.load(f)
                except EOFError:
                    return
                if job.steps is None or step in job.steps or step == WHOLE_CAPTURE:
                    yield graphs, step, pickle.loads(graph)
    kept = KEPT.part(job, part) if KEPT.budget else None
    graphs = kept.graphs if kept is not None else part_graphs(job, part, graph_reads(part))
    if graphs is None:
        return
    for window in graphs.windows(job.steps):
        graph = kept.steps.get(window) if kept is not None else None
        if graph is None:
            graph = graphs.build(*window)
            if kept is not None:
                KEPT.keep(kept, window, graph)
        yield graphs, window[0], graph


GRAPH_BYTES = 64 << 20
"""The most bytes of parts' columns and step graphs ``kept_graphs`` keeps in one process."""


class _Kept(NamedTuple):
    graphs: object          # the part's PartGraphs (None: it has no op)
    steps: dict             # (step, tid, start, end) -> (t, cols, anchors, order)


class KeptGraphs:
    """The parts' step graphs kept between the replays of one process (``kept_graphs``): the
    candidate changes replay the same ranks again (a rank's at-median change once per step, then
    its host gaps, then every rank's launches, kernels...), and a graph is a pure function of the
    part's analysed tables.  The first parts and steps built are kept until ``budget`` bytes
    (their arrays' ``nbytes``) are held; past it, a graph is built each time as without."""

    def __init__(self):
        self.budget, self.held, self.parts = 0, 0, {}

    def part(self, job, part) -> _Kept:
        """The part's entry (``part_graphs`` of ``job``, ``part``): the kept one, else its columns read
        and kept when there is room (else returned without being kept)."""
        key = (str(part.dir), part.index, part.rank, part.shift_ns, part.clock_offset_ns)
        if key not in self.parts:
            graphs = part_graphs(job, part, graph_reads(part))
            size = sum(_nbytes(c) for c in (graphs.ops, graphs.k)) if graphs is not None else 0
            if self.held + size > self.budget:
                return _Kept(graphs, {})          # (used once, not kept)
            self.held += size
            self.parts[key] = _Kept(graphs, {})
        return self.parts[key]

    def keep(self, kept: _Kept, window, graph):
        """Keep one step's ``graph`` of ``kept``'s part when there is room."""
        size = _nbytes(graph)
        if self.held + size <= self.budget and any(k is kept for k in self.parts.values()):
            self.held += size
            kept.steps[window] = graph


def _nbytes(x) -> int:
    if isinstance(x, np.ndarray):
        return x.nbytes
    if isinstance(x, dict):
        return sum(_nbytes(v) for v in x.values())
    if isinstance(x, (tuple, list)):
        return sum(_nbytes(v) for v in x)
    return 0


KEPT = KeptGraphs()


@contextmanager
def kept_graphs(budget: int = GRAPH_BYTES):
    """Within it, ``part_replay`` keeps the graphs it builds in this process (``KeptGraphs``, at most
    ``budget`` bytes) for the next replay of the same part; all dropped on leaving."""
    KEPT.budget, KEPT.held, KEPT.parts = budget, 0, {}
    try:
        yield KEPT
    finally:
        KEPT.budget, KEPT.held, KEPT.parts = 0, 0, {}
