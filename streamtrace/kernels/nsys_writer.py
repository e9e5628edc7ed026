"""The Python face of the Nsight Systems text kernel (``streamtrace.kernels.nsys_text.nsys_event_text``):
a batch of rows as named columns (``NsysRows``), the JSON text table and the output buffer sized for
them, the events' bytes back (``event_text``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .nsys_text import ROW_BYTES, nsys_event_text
from .texts import text_table

__all__ = ["NsysRows", "event_text"]


@dataclass(frozen=True)
class NsysRows:
    """One batch of rows, a column each (int64[n] unless said; see nsys_event_text): ``ts`` (ns,
    shifted), ``dur`` (ns), ``cat`` / ``name`` (indices into the text table), ``pid`` (merged), ``track``
    (tid, or the GPU stream), ``rank``, ``corr`` (raw correlation id; < 0: none), ``dev``, ``stream``,
    ``flow`` (index of the flow the row starts in the ``done`` flags; < 0: none), ``gpu`` (bool: GPU
    rows, written with device and stream)."""
    ts: np.ndarray
    dur: np.ndarray
    cat: np.ndarray
    name: np.ndarray
    pid: np.ndarray
    track: np.ndarray
    rank: np.ndarray
    corr: np.ndarray
    dev: np.ndarray
    stream: np.ndarray
    flow: np.ndarray
    gpu: bool


def event_text(rows: NsysRows, texts: list[bytes], done: np.ndarray) -> tuple[bytes, int, int]:
    """``(bytes, events written, flow ends written)``: the rows' events, comma-separated, no brackets.
    ``texts``: the JSON texts (quoted) that ``cat`` / ``name`` index; ``done``: bool or uint8 per flow,
    set for each flow whose end is written (a flow's end is written once)."""
    table, table_at = text_table(texts)
    lens = np.diff(table_at)
    out = np.empty(len(rows.ts) * ROW_BYTES + int(lens[rows.cat].sum() + lens[rows.name].sum()), np.uint8)
    nb, n, nflow = nsys_event_text(rows.ts, rows.dur, rows.cat, rows.name, rows.pid, rows.track,
                                   np.asarray(rows.rank, np.int64), rows.corr, rows.dev, rows.stream,
                                   np.asarray(rows.flow, np.int64), rows.gpu, table, table_at, done.view(np.uint8), out)
    return out[:nb].tobytes(), n, nflow
