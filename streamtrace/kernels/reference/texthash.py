"""Twin of ``streamtrace.kernels.texthash``: the table's entries in a dict (bytes -> first index)."""
from __future__ import annotations

__all__ = ["find_text_py"]


def find_text_py(buf, s, e, text, off, n):
    """The index of the first of the table's ``n`` entries equal to ``buf[s:e]``, -1 when none."""
    want = bytes(buf[s:e])
    table = {}
    for k in range(n):
        table.setdefault(bytes(text[off[k]:off[k + 1]]), k)
    return table.get(want, -1)
