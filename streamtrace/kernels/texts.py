"""Tables of byte strings as the numba kernels look texts up in them: the strings concatenated in one
uint8 array and their offsets (:func:`text_table`), and :class:`TextTable`, such a table that grows one
string at a time (pid texts, flow categories, met while a kernel scans)."""
from __future__ import annotations

import numpy as np

__all__ = ["text_table", "TextTable"]


def text_table(texts) -> tuple[np.ndarray, np.ndarray]:
    """``(text, off)``: the byte strings ``texts`` concatenated (uint8, read-only; one NUL byte when
    empty) and their offsets (int64[len + 1]: entry k is ``text[off[k]:off[k + 1]]``), the tables
    the numba kernels look texts up in."""
    off = np.zeros(len(texts) + 1, np.int64)
    off[1:] = np.cumsum([len(t) for t in texts]) if texts else []
    return np.frombuffer(b"".join(texts) or b"\0", np.uint8), off


class TextTable:
    """A :func:`text_table` that grows: ``texts`` (the byte strings, in the order added), ``text`` /
    ``off`` (the arrays a kernel reads, rebuilt by :meth:`add`)."""

    def __init__(self, texts=()):
        self.texts = list(texts)
        self.text, self.off = text_table(self.texts)

    def __len__(self):
        return len(self.texts)

    def add(self, text: bytes) -> int:
        """Append ``text``; returns its index."""
        self.texts.append(text)
        self.text, self.off = text_table(self.texts)
        return len(self.texts) - 1
