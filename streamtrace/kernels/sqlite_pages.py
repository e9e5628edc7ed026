"""Numba kernels that decode the pages of an SQLite database file: the child pointers of a table
b-tree's interior pages (``interior_children``) and the integer columns of the records on its
leaf pages (``decode_leaves``, one record: ``decode_record``).

Source of every layout here: sqlite.org, "Database File Format", sections 1.3 (the 100-byte header
on page 1), 1.6 (b-tree pages: 8-byte leaf / 12-byte interior header, 2-byte big-endian cell
pointers, table leaf cell = varint payload size, varint rowid, payload, 4-byte first overflow page;
table interior cell = 4-byte child page, varint rowid; the right-most pointer at header offset 8;
the local payload size: U = usable size, X = U-35, M = ((U-12)*32/255)-23, K = M+((P-M)%(U-4)),
local = P if P <= X, else K if K <= X, else M), 2.1 (the record format: varint header size, one
varint serial type per column, then the bodies; serial types 0 NULL, 1-6 big-endian two's-complement
integers of 1, 2, 3, 4, 6, 8 bytes, 7 IEEE float64, 8 the integer 0, 9 the integer 1, 10-11
reserved, N >= 12 even a BLOB of (N-12)/2 bytes, N >= 13 odd a TEXT of (N-13)/2 bytes) and the
varint (1-9 bytes, big-endian 7-bit groups with the high bit set on all but the last; a 9th byte
gives all its 8 bits).

Buffers are uint8 arrays holding whole pages (``page_size`` bytes each, read by the caller); values
are int64.  Errors are returned as negative status codes (``CORRUPT``), never raised, so that
the caller can name the file and page.  Plain-Python twin: ``streamtrace.kernels.reference.sqlite_pages``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["ABSENT", "CORRUPT", "NULL", "ODD", "NEED_OVERFLOW", "OK", "varint", "decode_record", "decode_leaves",
           "interior_children", "local_size"]

#: status of a column value in the ``flags`` output: an integer, NULL, ODD (a REAL, TEXT or BLOB where
#: an integer was asked for), ABSENT (past the end of a shorter record: a column added by ALTER TABLE
#: after the row was written, whose value is the column's default)
OK, NULL, ODD, ABSENT = 0, 1, 2, 3
#: ``decode_record``: the asked columns reach past the bytes at hand (the payload overflows)
NEED_OVERFLOW = -1
#: a structure that cannot be: a cell pointer or record outside its page, a bad page type
CORRUPT = -2


@njit(cache=True, nogil=True)
def varint(buf, pos, end):
    """SQLite varint at ``buf[pos:end]``: returns (value as int64, position after it); the
    position is -1 when the varint runs past ``end``.  O(1), at most 9 bytes read."""
    v = np.int64(0)
    for i in range(9):
        if pos + i >= end:
            return np.int64(0), np.int64(-1)
        b = np.int64(buf[pos + i])
        if i == 8:
            return (v << 8) | b, pos + 9
        v = (v << 7) | (b & 0x7F)
        if b < 0x80:
            return v, pos + i + 1
    return v, np.int64(-1)   # not reached


@njit(cache=True, nogil=True)
def local_size(p, usable):
    """Bytes of a table leaf cell's payload of ``p`` bytes stored on the page itself (the rest is
    on overflow pages); ``usable`` = page size - reserved bytes.  Formula: "Database File Format" 1.6."""
    x = usable - 35
    if p <= x:
        return p
    m = ((usable - 12) * 32 // 255) - 23
    k = m + ((p - m) % (usable - 4))
    return k if k <= x else m


@njit(cache=True, nogil=True)
def _int_body(buf, pos, n):
    """Big-endian two's-complement integer of ``n`` bytes (1..8) at ``buf[pos]``."""
    v = np.int64(buf[pos])
    if v >= 128:
        v -= 256                                 # the sign comes from the first byte
    for i in range(1, n):
        v = (v << 8) | np.int64(buf[pos + i])
    return v


@njit(cache=True, nogil=True)
def decode_record(buf, pos, end, slot, last, out, flags, row):
    """Decode the record at ``buf[pos:end]`` (all of it, or the part of an overflowing payload that
    is on the page): for every record column ``i`` with ``slot[i] >= 0`` (``slot``: int64, one entry
    per declared column), write its integer to ``out[slot[i], row]`` and its status (``OK``,
    ``NULL``, ``ODD``, ``ABSENT``: past the record's end) to ``flags[slot[i], row]``;
    ``last`` is the largest such ``i``; the value is 0 unless the status is OK.  Returns ``OK``, ``NEED_OVERFLOW`` when the
    header or an asked column's body reaches past ``end``, or ``CORRUPT`` (a reserved serial
    type 10/11, a header size past the payload's).  O(columns up to ``last``)."""
    if pos < end and buf[pos] < 0x80:               # the usual 1-byte varints, read inline
        hsize, q = np.int64(buf[pos]), pos + 1
    else:
        hsize, q = varint(buf, pos, end)
        if q < 0:
            return NEED_OVERFLOW
    if hsize < q - pos:
        return CORRUPT
    hend = pos + hsize
    if hend > end:
        return NEED_OVERFLOW
    body = hend
    i = 0
    while i <= last:
        if q >= hend:                             # a shorter record: the rest are absent
            for j in range(i, last + 1):
                s = slot[j]
                if s >= 0:
                    out[s, row] = 0
                    flags[s, row] = ABSENT
            return OK
        if buf[q] < 0x80:
            t = np.int64(buf[q])
            q += 1
        else:
            t, q = varint(buf, q, hend)
            if q < 0:
                return CORRUPT
        if t == 10 or t == 11:
            return CORRUPT
        if t <= 4:
            n = t
        elif t == 5:
            n = 6
        elif t <= 7:
            n = 8
        elif t <= 9:
            n = 0
        else:
            n = (t - 12) // 2
        s = slot[i]
        if s >= 0:
            if body + n > end:
                return NEED_OVERFLOW
            if t == 0:
                out[s, row] = 0
                flags[s, row] = NULL
            elif t <= 6:
                out[s, row] = _int_body(buf, body, n)
                flags[s, row] = OK
            elif t == 8 or t == 9:
                out[s, row] = t - 8
                flags[s, row] = OK
            else:
                out[s, row] = 0
                flags[s, row] = ODD
        body += n
        i += 1
    return OK


_TWO = np.int64(2)      # _be's widths typed: a literal 2 or 4 would be a compile of its own each
_FOUR = np.int64(4)


@njit(cache=True, nogil=True)
def _be(buf, pos, n):
    v = np.int64(0)
    for i in range(n):
        v = (v << 8) | np.int64(buf[pos + i])
    return v


@njit(cache=True, nogil=True)
def decode_leaves(buf, pages, page_size, usable, slot, last):
    """Decode every cell of the table leaf pages in ``buf``: page ``j`` (its page number
    ``pages[j]``, int64; page 1 has its b-tree header at offset 100) at ``buf[j*page_size:]``.

    Returns ``(n, rowid, out, flags, ovf, n_ovf, status, bad_page)``: ``n`` cells in page and cell
    order (= rowid order in a table b-tree); ``rowid`` int64[n]; ``out`` int64[k, n] and ``flags``
    uint8[k, n] (k = ``slot.max() + 1``) as ``decode_record`` fills them; ``ovf`` int64[n_ovf, 4]:
    the cells whose asked columns are not all on the page (row, buffer offset of the payload, payload
    size, first overflow page), left for the caller to assemble.  ``status`` is 0, or ``CORRUPT``
    with ``bad_page`` the page number.  O(bytes of the pages' records up to column ``last``)."""
    k = 0
    for i in range(len(slot)):
        if slot[i] + 1 > k:
            k = slot[i] + 1
    npg = len(pages)
    total = 0
    for j in range(npg):                          # the cell counts, to size the outputs
        base = j * page_size
        h = base + (100 if pages[j] == 1 else 0)
        if buf[h] != 13:
            return 0, np.empty(0, np.int64), np.empty((k, 0), np.int64), np.empty((k, 0), np.uint8), \
                np.empty((0, 4), np.int64), 0, CORRUPT, pages[j]
        total += _be(buf, h + 3, _TWO)
    rowid = np.empty(total, np.int64)
    out = np.empty((k, total), np.int64)
    flags = np.empty((k, total), np.uint8)
    ovf = np.empty((16, 4), np.int64)
    n_ovf = 0
    row = np.int64(0)
    for j in range(npg):
        base = j * page_size
        h = base + (100 if pages[j] == 1 else 0)
        ncell = _be(buf, h + 3, _TWO)
        lo = h + 8 + 2 * ncell - base              # cell content lies past the pointer array
        for c in range(ncell):
            ptr = _be(buf, h + 8 + 2 * c, _TWO)
            if ptr < lo or ptr >= usable:
                return row, rowid, out, flags, ovf, n_ovf, CORRUPT, pages[j]
            end = base + usable
            q = base + ptr
            if buf[q] < 0x80:                     # a payload under 128 bytes: 1-byte varint
                p = np.int64(buf[q])
                q += 1
            else:
                p, q = varint(buf, q, end)
            if q < 0 or p < 0:
                return row, rowid, out, flags, ovf, n_ovf, CORRUPT, pages[j]
            r, q = varint(buf, q, end)
            if q < 0:
                return row, rowid, out, flags, ovf, n_ovf, CORRUPT, pages[j]
            loc = local_size(p, usable)
            if q + loc + (4 if loc < p else 0) > end:
                return row, rowid, out, flags, ovf, n_ovf, CORRUPT, pages[j]
            rowid[row] = r
            st = decode_record(buf, q, q + loc, slot, last, out, flags, row)
            if st == NEED_OVERFLOW and loc < p:
                if n_ovf == len(ovf):
                    grown = np.empty((2 * len(ovf), 4), np.int64)
                    for a in range(n_ovf):      # (a loop: a 2-d slice assignment costs seconds to compile)
                        for b in range(4):
                            grown[a, b] = ovf[a, b]
                    ovf = grown
                ovf[n_ovf, 0] = row
                ovf[n_ovf, 1] = q
                ovf[n_ovf, 2] = p
                ovf[n_ovf, 3] = _be(buf, q + loc, _FOUR)
                n_ovf += 1
            elif st != OK:
                return row, rowid, out, flags, ovf, n_ovf, CORRUPT, pages[j]
            row += 1
    return row, rowid, out, flags, ovf, n_ovf, OK, np.int64(0)


@njit(cache=True, nogil=True)
def interior_children(buf, page_no, usable):
    """The child page numbers of the table interior page in ``buf`` (one page; page 1's header at
    offset 100), left to right: each cell's 4-byte child, then the right-most pointer.  Returns
    ``(children int64[], status)``; status ``CORRUPT`` (children empty) for a page that is not a
    table interior page (type 5) or a cell pointer outside it.  O(cells)."""
    h = 100 if page_no == 1 else 0
    if buf[h] != 5:
        return np.empty(0, np.int64), CORRUPT
    ncell = _be(buf, h + 3, _TWO)
    kids = np.empty(ncell + 1, np.int64)
    lo = h + 12 + 2 * ncell
    for c in range(ncell):
        ptr = _be(buf, h + 12 + 2 * c, _TWO)
        if ptr < lo or ptr + 4 > usable:
            return np.empty(0, np.int64), CORRUPT
        kids[c] = _be(buf, ptr, _FOUR)
    kids[ncell] = _be(buf, h + 8, _FOUR)
    return kids, OK
