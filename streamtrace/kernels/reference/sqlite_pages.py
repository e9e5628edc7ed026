"""Plain-Python twin of ``streamtrace.kernels.sqlite_pages``: a whole table read from the bytes of
an SQLite file (``read_table_py``), and one record decoded (``record_py``), by a different
route: the b-tree walked recursively, page header fields with ``struct``, integers with
``int.from_bytes(..., signed=True)``, every payload assembled whole (overflow chain followed) before
its record is split into values.  Same layout source: sqlite.org, "Database File Format"."""
from __future__ import annotations

import struct

__all__ = ["varint_py", "record_py", "read_table_py"]

OK, NULL, ODD, ABSENT = 0, 1, 2, 3          # as the kernel's flags
_WIDTH = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8, 7: 8, 8: 0, 9: 0}


def varint_py(data: bytes, pos: int):
    """``(value, next position)`` of the varint at ``data[pos]``: up to 8 bytes of 7 bits, a 9th of
    8; the value as a signed 64-bit integer.  IndexError when it runs off ``data``."""
    bits = []
    for i in range(9):
        b = data[pos + i]
        if i == 8:
            bits.append(format(b, "08b"))
            break
        bits.append(format(b & 0x7F, "07b"))
        if not b & 0x80:
            break
    v = int("".join(bits), 2)
    if v >= 1 << 63:
        v -= 1 << 64
    return v, pos + len(bits)


def _body_size(t):
    if t in _WIDTH:
        return _WIDTH[t]
    if t in (10, 11):
        raise ValueError("reserved serial type")
    return (t - 12) // 2 if t % 2 == 0 else (t - 13) // 2


def record_py(payload: bytes):
    """The values of a record, in column order: ``(flag, value)`` each, value an int for OK, else 0."""
    hsize, q = varint_py(payload, 0)
    types = []
    while q < hsize:
        t, q = varint_py(payload, q)
        types.append(t)
    if q != hsize:
        raise ValueError("record header overruns its size")
    out, body = [], hsize
    for t in types:
        n = _body_size(t)
        raw = payload[body:body + n]
        if len(raw) != n:
            raise ValueError("record body past the payload")
        if t == 0:
            out.append((NULL, 0))
        elif 1 <= t <= 6:
            out.append((OK, int.from_bytes(raw, "big", signed=True)))
        elif t in (8, 9):
            out.append((OK, t - 8))
        else:
            out.append((ODD, 0))
        body += n
    return out


def _cells(data, page_size, usable, pg):
    """``(kind, header offset, page bytes, cell offsets)`` of page ``pg``."""
    page = data[(pg - 1) * page_size: pg * page_size]
    if len(page) < page_size:
        raise ValueError(f"page {pg} past the end of the file")
    h = 100 if pg == 1 else 0
    kind, _, ncell, _, _ = struct.unpack_from(">BHHHB", page, h)
    width = 12 if kind in (2, 5) else 8
    ptrs = struct.unpack_from(f">{ncell}H", page, h + width)
    return kind, h, page, list(ptrs)


def _payload(data, page_size, usable, page, at, size):
    x = usable - 35
    m = ((usable - 12) * 32 // 255) - 23
    k = m + (size - m) % (usable - 4)
    local = size if size <= x else (k if k <= x else m)
    got = bytearray(page[at:at + local])
    nxt = struct.unpack_from(">I", page, at + local)[0] if local < size else 0
    while len(got) < size:
        o = data[(nxt - 1) * page_size: nxt * page_size]
        nxt = struct.unpack_from(">I", o, 0)[0]
        got += o[4:4 + min(usable - 4, size - len(got))]
    return bytes(got)


def read_table_py(data: bytes, root: int, positions):
    """Every row of the table b-tree rooted at page ``root`` of the database ``data`` (the whole
    file), in rowid order: ``(rowids, rows)``, ``rows[i]`` a list of ``(flag, value)`` for the
    record positions ``positions`` (past the record's end: ``(ABSENT, 0)``)."""
    page_size = struct.unpack_from(">H", data, 16)[0]
    page_size = 65536 if page_size == 1 else page_size
    usable = page_size - data[20]
    rowids, rows = [], []

    def walk(pg):
        kind, h, page, ptrs = _cells(data, page_size, usable, pg)
        if kind == 5:
            for p in ptrs:
                walk(struct.unpack_from(">I", page, p)[0])
            walk(struct.unpack_from(">I", page, h + 8)[0])
            return
        if kind != 13:
            raise ValueError(f"page {pg}: type {kind} in a table b-tree")
        for p in ptrs:
            size, q = varint_py(page, p)
            rowid, q = varint_py(page, q)
            vals = record_py(_payload(data, page_size, usable, page, q, size))
            rowids.append(rowid)
            rows.append([vals[i] if i < len(vals) else (ABSENT, 0) for i in positions])

    walk(root)
    return rowids, rows
