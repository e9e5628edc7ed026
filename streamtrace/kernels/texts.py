"""Tables of byte strings as the numba kernels look texts up in them: the strings concatenated in one
uint8 array and their offsets (``text_table``), and ``TextTable``, such a table that grows one
string at a time (pid texts, flow categories, met while a kernel scans)."""
from __future__ import annotations

import numpy as np

from . import texthash

__all__ = ["text_table", "TextTable"]


def text_table(texts) -> tuple[np.ndarray, np.ndarray]:
    """``(text, off)``: the byte strings ``texts`` concatenated (uint8, read-only; one NUL byte when
    empty) and their offsets (int64[len + 1]: entry k is ``text[off[k]:off[k + 1]]``), the tables
    the numba kernels look texts up in."""
    off = np.zeros(len(texts) + 1, np.int64)
    off[1:] = np.cumsum([len(t) for t in texts]) if texts else []
    return np.frombuffer(b"".join(texts) or b"\0", np.uint8), off


class TextTable:
    """A ``text_table`` that grows: ``texts`` (the byte strings, in the order added), ``text`` /
    ``off`` (the arrays a kernel reads: ``text`` read-only, both longer than what they hold) and
    ``slots``, their hash index (``streamtrace.kernels.texthash``).  The arrays grow by doubling and
    a new text goes into the index: a million texts (pids) cost linear time (the table rebuilt whole
    per text, searched linearly per event, was quadratic: issue 49)."""

    def __init__(self, texts=()):
        self.texts = []
        self._text = np.zeros(256, np.uint8)
        self.off = np.zeros(17, np.int64)
        self.slots = np.zeros(texthash.slots_for(16), np.int64)
        self._view()
        for t in texts:
            self.add(t)

    def _view(self):
        self.text = self._text.view()
        self.text.flags.writeable = False       # the kernels take the texts read-only

    def __len__(self):
        return len(self.texts)

    def add(self, text: bytes) -> int:
        """Append ``text`` (not in the table yet); returns its index."""
        k = len(self.texts)
        end = int(self.off[k]) + len(text)
        if end > len(self._text):
            self._text = np.concatenate([self._text, np.zeros(max(end, 2 * len(self._text)), np.uint8)])
        if k + 2 > len(self.off):
            self.off = np.concatenate([self.off, np.zeros(len(self.off), np.int64)])
        self._text[int(self.off[k]):end] = np.frombuffer(text, np.uint8)
        self.off[k + 1] = end
        self.texts.append(text)
        self._view()
        if 2 * len(self.texts) > len(self.slots):
            self.slots = np.zeros(texthash.slots_for(len(self.texts)), np.int64)
            texthash.index_texts(self.text, self.off, len(self.texts), self.slots)
        else:
            texthash.insert_text(self.text, self.off, k, self.slots)
        return k
