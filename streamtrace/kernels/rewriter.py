"""The Python face of merge's byte rewrite kernel (``streamtrace.kernels.rewrite.scan_rewrite``):
``Rewriter`` owns the kernel's arrays under named fields (the cursor ``cur[CUR_*]``, the running
state ``state[ST_*]``, the pid table, the output buffer, a deferred filter's records) and its status
loop; the caller answers what the kernel cannot decide alone through a ``RewriteHandler`` (the
merged pid of a pid text not seen before, an event for the Python twin, a new flow category) and
receives the rewritten bytes through ``RewriteHandler.write``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .keep import C_STEP, R_COLS
from .rewrite import (CUR_END, CUR_FOUND, CUR_LEN, CUR_NEXT, CUR_OUT, CUR_POS, INFO_END, INFO_LEN, INFO_START,
                      NEED_PYTHON, NEW_CAT, OK, OUT_FULL, ST_COMMA, ST_FIRST_IN, ST_FIRST_OUT, ST_HAS_FIRST_IN,
                      ST_HAS_FIRST_OUT, ST_LEN, ST_OUT_BASE, ST_SEQ0, ST_WRITTEN, UNKNOWN_PID, scan_rewrite)
from .slots import optional_slot, slot
from .texts import TextTable, text_table
from .validate import NF

__all__ = ["RewriteSetup", "PythonEvent", "RewriteHandler", "Rewriter"]

_NO_FIELDS = np.zeros((0, NF), np.int64)     # scan_rewrite without the validate fields


@dataclass(frozen=True)
class RewriteSetup:
    """What a rank's rewrite applies to every event (see ``scan_rewrite``):
    ``rank``, ``shift_ns`` (added to ts), ``drop_cats`` (category texts, UTF-8, whose events are dropped),
    ``gpu_only``, ``window`` (``(lo, hi)`` rank-local ns, or None), the flows kept under it (``flow_cats``:
    category texts; ``flow_keys``: sorted int64 ``cat index << 40 | id``), ``defer`` (a time filter
    decided after the pass: every event written and recorded, the flow categories then come from the
    handler)."""
    rank: int
    shift_ns: int
    drop_cats: tuple = ()
    gpu_only: bool = False
    window: tuple | None = None
    flow_cats: tuple = ()
    flow_keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    defer: bool = False


@dataclass(frozen=True)
class PythonEvent:
    """An event rewritten by the Python twin: its JSON ``data`` and, with a deferred filter, what
    decides it afterwards (``bits``: class and C_OTHER_FLOW; ``t0``/``t1`` ns; ``key``: the flow key or -1;
    ``pid``: the merged pid)."""
    data: bytes
    bits: int = 0
    t0: int = 0
    t1: int = 0
    key: int = -1
    pid: int = 0


class RewriteHandler(Protocol):
    """What ``Rewriter`` asks its caller."""

    def new_pid(self, text: bytes, offset: int) -> tuple[int, int]:
        """``(merged pid, kind)`` (KIND_CPU / KIND_GPU / KIND_OTHER) of a pid first met: its JSON
        ``text`` at file ``offset``."""

    def python(self, window: np.ndarray, s: int, e: int, offset: int) -> PythonEvent | None:
        """Event ``window[s:e]`` (at file ``offset``) through the Python twin; None when dropped."""

    def new_category(self, text: bytes) -> tuple:
        """With ``defer``: a flow category first met (its raw UTF-8 text); returns every category's
        text so far, in index order."""

    def write(self, data: memoryview) -> None:
        """Bytes of the rewritten events, in order, comma separated."""


class Rewriter:
    """One rank's rewrite through ``scan_rewrite`` (module docstring).

    ``batch``: the most events a window holds (the reader's ``batch_events``); ``fields``: the validate
    fields' buffer (int64[batch, NF], ``streamtrace.kernels.validate``) or None; ``out_bytes``: the
    output buffer's first size.  After ``rewrite``, ``kept[j]`` (1: written), ``rcls[j]`` /
    ``rec[j]`` (with ``defer``: class and record, ``streamtrace.kernels.keep``) describe event j
    of the window's batch."""

    def __init__(self, setup: RewriteSetup, handler: RewriteHandler, batch: int, fields=None,
                 out_bytes: int = 2 << 20):
        self.setup, self.handler = setup, handler
        self.pids = TextTable()
        self.new_a, self.kind_a, self.pid_used = np.zeros(16, np.int64), np.zeros(16, np.int64), np.zeros(16, np.uint8)
        self.drop_text, self.drop_off = text_table(list(setup.drop_cats))
        self.flow_text, self.flow_off = text_table(list(setup.flow_cats))
        self.nflows = len(setup.flow_cats)
        self.out_bytes = out_bytes
        self.out = np.empty(out_bytes, np.uint8)
        self.cur = np.zeros(CUR_LEN, np.int64)
        self.state = np.zeros(ST_LEN, np.int64)
        self.info = np.zeros(INFO_LEN, np.int64)
        self.kept = np.zeros(batch, np.uint8)
        self.rcls = np.zeros(batch if setup.defer else 0, np.uint8)
        self.rec = np.zeros((len(self.rcls), R_COLS), np.int64)
        self.fields = _NO_FIELDS if fields is None else fields

    def _add_pid(self, text: bytes, newpid: int, kind: int):
        """A pid text first met, its merged pid and kind; the arrays grow by doubling (issue 49)."""
        k = self.pids.add(text)
        if k >= len(self.new_a):
            grow = len(self.new_a)
            self.new_a, self.kind_a = (np.concatenate([a, np.zeros(grow, np.int64)]) for a in (self.new_a, self.kind_a))
            self.pid_used = np.concatenate([self.pid_used, np.zeros(grow, np.uint8)])
        self.new_a[k], self.kind_a[k] = newpid, kind

    def continue_after(self, offset: int) -> None:
        """The events continue an output whose last event ends at ``offset`` (a comma first; a deferred
        filter's output offsets count from it)."""
        self.state[ST_COMMA], self.state[ST_OUT_BASE] = 1, offset

    def rewrite(self, window, pos: int, n: int, starts, ends, sep, base: int, seq0: int = 0) -> tuple[int, int, int]:
        """Find and rewrite the events of ``window[pos:n]`` (scan_bounds' arguments; ``base``: the
        window's offset in the file; ``seq0``: with ``defer``, the index of the batch's first event in the
        rank), answering the kernel until the batch ends; returns scan_bounds' ``(count, status, pos)``."""
        cur, s = self.cur, self.setup
        cur[:] = 0
        cur[CUR_POS], cur[CUR_END] = pos, n
        self.kept[:] = 0
        self.rcls[:] = 0
        self.state[ST_SEQ0] = seq0
        lo, hi = s.window if s.window is not None else (0, 0)
        while True:
            status, scanned = scan_rewrite(
                window, cur, starts, ends, sep, self.out, self.state,
                self.pids.text, self.pids.off, self.new_a, self.kind_a, self.pid_used, len(self.pids), self.pids.slots,
                self.drop_text, self.drop_off, len(self.drop_off) - 1, s.rank, s.shift_ns,
                s.gpu_only, s.window is not None, lo, hi, self.flow_text, self.flow_off, self.nflows, s.flow_keys,
                self.info, self.kept, self.fields, s.defer, self.rec, self.rcls)
            if status == OK:
                break
            i = int(cur[CUR_NEXT])
            span = slice(int(self.info[INFO_START]), int(self.info[INFO_END]))
            if status == OUT_FULL:
                if cur[CUR_OUT] == 0:
                    self.out = np.empty(2 * len(self.out) + int(ends[i] - starts[i]), np.uint8)
                self.flush()
            elif status == NEW_CAT:
                cats = self.handler.new_category(window[span].tobytes())
                self.flow_text, self.flow_off = text_table(list(cats))
                self.nflows = len(cats)
            elif status == UNKNOWN_PID:
                text = window[span].tobytes()
                newpid, kind = self.handler.new_pid(text, base + span.start)
                self._add_pid(text, newpid, kind)
            elif status == NEED_PYTHON:
                s0, e0 = int(starts[i]), int(ends[i])
                self._put_python(self.handler.python(window, s0, e0, base + s0), i)
                cur[CUR_NEXT] = i + 1
            else:
                raise RuntimeError(f"scan_rewrite: unknown status {status}")
        self.flush()
        return int(cur[CUR_FOUND]), scanned, int(cur[CUR_POS])

    def _put_python(self, ev: PythonEvent | None, i: int) -> None:
        """Event ``i`` as the twin wrote it (comma first but for the output's first event), its record."""
        if ev is None:
            return
        self.kept[i] = 1
        data = ev.data
        if len(self.out) - int(self.cur[CUR_OUT]) < len(data) + 1:
            self.flush()
            if len(self.out) < len(data) + 1:
                self.out = np.empty(len(data) + self.out_bytes, np.uint8)
        o = int(self.cur[CUR_OUT])
        if self.state[ST_COMMA]:
            self.out[o] = 44
            o += 1
        self.out[o:o + len(data)] = np.frombuffer(data, np.uint8)
        self.cur[CUR_OUT] = o + len(data)
        self.state[ST_COMMA] = 1
        if self.setup.defer:
            self.rcls[i] = (int(self.rcls[i]) & C_STEP) | ev.bits
            self.rec[i] = ((int(self.state[ST_SEQ0]) + i) << 8 | ev.bits, ev.t0, ev.t1,
                           self.state[ST_OUT_BASE] + o + len(data), ev.key, ev.pid)

    def flush(self) -> None:
        """Hand the bytes in the output buffer to the handler."""
        if self.cur[CUR_OUT]:
            self.handler.write(memoryview(self.out)[:int(self.cur[CUR_OUT])])
            self.state[ST_OUT_BASE] += self.cur[CUR_OUT]
            self.cur[CUR_OUT] = 0

    written = slot("state", ST_WRITTEN, "Events the kernel wrote (the twin's are the handler's to count).")
    first_out = optional_slot("state", ST_FIRST_OUT, ST_HAS_FIRST_OUT,
                              "The earliest shifted ts the kernel wrote (ns), or None.")
    first_in = optional_slot("state", ST_FIRST_IN, ST_HAS_FIRST_IN, "With ``defer``: the earliest ts of any event but "
                             "metadata the kernel read (ns, before any filter), or None.")

    def used_pids(self) -> list[int]:
        """The merged pids the kernel wrote an event of."""
        return [int(self.new_a[k]) for k, u in enumerate(self.pid_used[:len(self.pids)].tolist()) if u]
