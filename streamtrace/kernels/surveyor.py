"""The Python face of merge's pre-pass kernel (``streamtrace.kernels.survey.scan_survey``):
``Surveyor`` owns the kernel's per-event arrays (times, flags, kinds, flow keys) and its table of
flow categories, and its status loop (a category met for the first time is added and the scan goes on)."""
from __future__ import annotations

import numpy as np

from .survey import NEW_CAT, scan_survey
from .texts import TextTable

__all__ = ["Surveyor"]


class Surveyor:
    """``scan_survey`` over a reader's windows, ``batch`` events at most
    each.  After ``scan``, event j of the window's batch has ``ts[j]`` / ``dur[j]`` (int64 ns),
    ``flags[j]`` (``streamtrace.kernels.scan``'s bits), ``kind[j]`` (S_OTHER, S_META, S_FLOW, S_DECODE)
    and, for S_FLOW, ``cat_k[j]`` (its category's index in ``categories``) and ``flow_id[j]``."""

    def __init__(self, batch: int):
        self.ts, self.dur, self.cat_k, self.flow_id = (np.zeros(batch, np.int64) for _ in range(4))
        self.flags = np.zeros(batch, np.uint8)
        self.kind = np.zeros(batch, np.uint8)
        self.info = np.zeros(2, np.int64)
        self.cats = TextTable()

    @property
    def categories(self) -> list[bytes]:
        """The flow categories met so far (raw UTF-8), in index order."""
        return self.cats.texts

    def scan(self, window, pos: int, n: int, starts, ends, sep) -> tuple[int, int, int]:
        """Find and classify the events of ``window[pos:n]`` (scan_bounds' arguments); returns its
        ``(count, status, pos)``."""
        k = 0
        while True:
            k, status, pos = scan_survey(window, pos, n, starts, ends, self.ts, self.dur, self.flags, sep, k,
                                         self.kind, self.cat_k, self.flow_id, self.cats.text, self.cats.off,
                                         len(self.cats), self.info)
            if status != NEW_CAT:
                return k, status, pos
            self.cats.add(window[int(self.info[0]):int(self.info[1])].tobytes())
