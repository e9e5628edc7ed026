"""Integer columns of an SQLite table read straight from the file's pages (``scan_columns``),
in rowid order, as numpy batches: the table b-tree walked from its root page, its leaf pages read
with ``pread`` in batches of about ``BATCH_BYTES`` and decoded by the numba kernels of
``streamtrace.kernels.sqlite_pages``.  The stdlib ``sqlite3`` module reads the schema only
(``sqlite_master.rootpage``, ``PRAGMA table_info``); no SQL runs over the rows, so no row becomes a
Python tuple (``fetchmany`` costs ~1.3 us a row on a large export; the kernels ~0.15 us a row of
6-7 columns, bench/RESULTS.md).

Source of the file layout: sqlite.org, "Database File Format" (the header: page size at offset 16,
1 meaning 65536; reserved bytes per page at 20; the in-header page count at 28, valid when the
change counter at 24 equals the version-valid-for number at 92); the column order of a record is
the declared order, which ``PRAGMA table_info``'s ``cid`` gives; an ``INTEGER PRIMARY KEY`` column
is an alias of the rowid and stored as NULL in the record (sqlite.org, "CREATE TABLE", "ROWIDs and
the INTEGER PRIMARY KEY").

What it does with what it meets: NULL reads as ``default`` with a null flag; a column missing from
a shorter record (added by ``ALTER TABLE ... ADD COLUMN`` after the row was written) takes the
column's declared default (``PRAGMA table_info.dflt_value``) as SQLite does: NULL when there is
none, an integer literal as its value; a REAL, TEXT or BLOB where an integer is asked for (or a
non-integer declared default) reads as ``default`` too, flagged and counted (``ColumnBatch.odd``); a payload too large for its page is assembled from its overflow
pages when it holds an asked column.  A ``WITHOUT ROWID`` table, a view, or a table with generated columns raises
``Unscannable`` before any row is read (the caller reads it with SQL instead).  A file cut
short or a page that cannot be what the b-tree says raises
``TraceError`` naming the file (and the page)."""
from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass, field

import numpy as np

from ...kernels import sqlite_pages
from ...runtime.errors import TraceError
from .db import open_export, SQLITE_MAGIC

#: bytes of leaf pages read and decoded at once (~25,000 rows of a CUPTI table at 4 KiB pages)
BATCH_BYTES = 1 << 20


class Unscannable(Exception):
    """A table the page reader does not read (``WITHOUT ROWID``, a view, generated columns, a column added
    with a default); the message says why.  Raised before any row is read."""


@dataclass
class ColumnBatch:
    """Rows of one batch, in rowid order: ``rowid`` int64[n]; ``values`` ``{column: int64[n]}``
    (``default`` where ``null`` is set); ``null`` ``{column: bool[n]}`` (NULL, absent, or odd);
    ``odd``: values that were REAL, TEXT or BLOB, not integers."""
    rowid: np.ndarray
    values: dict
    null: dict
    odd: int = 0

    def __len__(self):
        return len(self.rowid)


@dataclass
class Layout:
    """Where a table lives: its root page, each column's position in the record, the column that
    aliases the rowid (or None)."""
    root: int
    position: dict = field(default_factory=dict)
    alias: str | None = None
    defaults: dict = field(default_factory=dict)      # column -> its declared default (SQL text)


class PageFile:
    """An SQLite file opened for page reads (``os.pread``; nothing mapped, so only the batch being
    decoded counts in the process's memory).  Attributes: ``page_size``, ``usable`` (page size less
    the reserved bytes), ``pages`` (the number of pages).  Raises
    ``TraceError`` for a file without the SQLite header, a bad page
    size, or a file shorter than its header says."""

    def __init__(self, path):
        self.path = str(path)
        try:
            self.fd = os.open(self.path, os.O_RDONLY)
        except OSError as e:
            raise TraceError(path, f"cannot open ({e.strerror})") from None
        try:
            self._header()
        except BaseException:
            os.close(self.fd)
            raise

    def _header(self):
        h = os.pread(self.fd, 100, 0)
        if len(h) < 100 or h[:16] != SQLITE_MAGIC:
            raise TraceError(self.path, "not an SQLite database (no SQLite header)")
        ps = int.from_bytes(h[16:18], "big")
        ps = 65536 if ps == 1 else ps
        if ps < 512 or ps & (ps - 1):
            raise TraceError(self.path, f"not a valid SQLite database (page size {ps})")
        self.page_size, self.usable = ps, ps - h[20]
        if self.usable < 480:
            raise TraceError(self.path, f"not a valid SQLite database ({h[20]} reserved bytes a page)")
        size = os.fstat(self.fd).st_size
        n = int.from_bytes(h[28:32], "big")
        if n and h[24:28] == h[92:96]:
            if n * ps > size:
                raise TraceError(self.path, f"the file is cut short: {size:,} bytes of the {n * ps:,} "
                                            f"its header gives ({n:,} pages of {ps:,} bytes)")
        else:
            n = size // ps
        self.pages = n

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- reading
    def read_pages(self, numbers) -> np.ndarray:
        """Pages ``numbers`` (1-based, int64 array) into one uint8 buffer, page ``j`` at
        ``j * page_size``; runs of consecutive pages in one ``preadv``."""
        ps = self.page_size
        nums = np.asarray(numbers, np.int64)
        if len(nums) and (nums.min() < 1 or nums.max() > self.pages):
            bad = int(nums[(nums < 1) | (nums > self.pages)][0])
            raise TraceError(self.path, f"corrupt SQLite database: page {bad:,} is outside the file's "
                                        f"{self.pages:,} pages (cut short?)")
        buf = np.empty(len(nums) * ps, np.uint8)
        cuts = np.flatnonzero(np.diff(nums) != 1) + 1
        starts = np.concatenate(([0], cuts)).tolist()
        ends = np.concatenate((cuts, [len(nums)])).tolist()
        view = memoryview(buf)
        for a, b in zip(starts, ends):
            want = (b - a) * ps
            got = os.preadv(self.fd, [view[a * ps:b * ps]], (int(nums[a]) - 1) * ps)
            if got != want:
                raise TraceError(self.path, f"corrupt SQLite database: page {int(nums[a]):,} cut short")
        return buf

    def leaves(self, root) -> np.ndarray:
        """The leaf pages of the table b-tree rooted at ``root``, left to right (= rowid order),
        int64.  Walked a level at a time (every leaf of an SQLite b-tree is at the same depth):
        a level of interior pages (about one page in a hundred) is read in batches and its
        children become the next level; the first level whose first page is a leaf is the answer
        (the decoder checks the type of every leaf page it reads)."""
        level = np.asarray([int(root)], np.int64)
        per = max(1, BATCH_BYTES // self.page_size)
        for _ in range(64):                          # a b-tree of 4 G rows is ~6 levels deep
            first = int(level[0])
            if self.read_pages(level[:1])[100 if first == 1 else 0] == 13:
                return level
            kids = []
            for a in range(0, len(level), per):
                part = level[a:a + per]
                buf = self.read_pages(part)
                for j, pg in enumerate(part.tolist()):
                    page = buf[j * self.page_size:(j + 1) * self.page_size]
                    k, st = sqlite_pages.interior_children(page, np.int64(pg), np.int64(self.usable))
                    if st != sqlite_pages.OK:
                        raise TraceError(self.path, f"corrupt SQLite database: page {pg:,} is not a table "
                                                    f"b-tree page")
                    kids.append(k)
            level = np.concatenate(kids)
            if len(level) > self.pages:
                break
        raise TraceError(self.path, f"corrupt SQLite database: the b-tree from page {root} loops")

    def payload(self, buf, at, size) -> np.ndarray:
        """The whole payload of an overflowing cell: its on-page part at ``buf[at:]`` (whose first
        overflow page number follows it), then the overflow chain (each page: 4-byte next page
        number, then up to ``usable - 4`` bytes)."""
        loc = int(sqlite_pages.local_size(np.int64(size), np.int64(self.usable)))
        parts = [bytes(buf[at:at + loc])]
        nxt = int.from_bytes(bytes(buf[at + loc:at + loc + 4]), "big")
        have, hops = loc, 0
        while have < size:
            hops += 1
            if nxt < 1 or hops > self.pages:
                raise TraceError(self.path, "corrupt SQLite database: an overflow chain ends early")
            page = self.read_pages([nxt])
            take = min(size - have, self.usable - 4)
            parts.append(page[4:4 + take].tobytes())
            have += take
            nxt = int.from_bytes(page[:4].tobytes(), "big")
        return np.frombuffer(bytearray(b"".join(parts)), np.uint8)


def table_layout(conn, table) -> Layout:
    """The root page and record positions of ``table`` from ``sqlite_master`` and ``PRAGMA
    table_xinfo``.  Raises ``Unscannable`` for a table the page reader does not read, KeyError
    for a missing one."""
    row = conn.execute("SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                       (table,)).fetchone()
    if row is None:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'view' AND name = ?", (table,)).fetchone():
            raise Unscannable(f"{table} is a view")
        raise KeyError(table)
    root, sql = row
    if re.search(r"\bWITHOUT\s+ROWID\b", sql or "", re.I):
        raise Unscannable(f"{table} is a WITHOUT ROWID table")
    info = conn.execute(f"PRAGMA table_xinfo([{table}])").fetchall()      # SQLite >= 3.26
    if not info:                                         # an older SQLite: no generated columns then
        info = [tuple(r) + (0,) for r in conn.execute(f"PRAGMA table_info([{table}])")]
    if any(r[6] != 0 for r in info):                     # hidden or generated columns
        raise Unscannable(f"{table} has generated or hidden columns")
    lay = Layout(int(root))
    pks = [r for r in info if r[5]]
    for r in info:
        lay.position[r[1]] = r[0]
    if len(pks) == 1 and str(pks[0][2]).upper() == "INTEGER" and not re.search(
            r"\bPRIMARY\s+KEY\s+DESC\b", sql or "", re.I):
        lay.alias = pks[0][1]
    lay.defaults = {r[1]: r[4] for r in info if r[4] is not None}
    return lay


def scan_columns(path, table, columns, default=-1, conn=None, batch_bytes=BATCH_BYTES):
    """Yield ``ColumnBatch`` es of the integer ``columns`` (names) of ``table`` of the SQLite
    file ``path``, in rowid order (the order of ``SELECT ... ORDER BY rowid``), each about
    ``batch_bytes`` of leaf pages.  ``conn``: an open ``sqlite3`` connection to the same file, for
    the schema (else one is opened read-only).  Raises ``Unscannable`` (see ``table_layout``),
    KeyError for a table or column the file lacks, ``TraceError``
    for a damaged or cut-short file.  Memory: one batch's pages and columns."""
    own = conn is None
    if own:
        conn = open_export(path)
    try:
        lay = table_layout(conn, table)
    except sqlite3.DatabaseError as e:
        raise TraceError(path, f"cannot read the SQLite database ({e})") from None
    finally:
        if own:
            conn.close()
    for c in columns:
        if c not in lay.position:
            raise KeyError(f"{table}.{c}")
    yield from _scan(path, lay, list(columns), default, batch_bytes)


def _scan(path, lay, columns, default, batch_bytes):
    stored = [c for c in columns if c != lay.alias]
    slot = np.full(max([lay.position[c] for c in stored], default=-1) + 1, -1, np.int64)
    for k, c in enumerate(stored):
        slot[lay.position[c]] = k
    last = np.int64(len(slot) - 1)
    with PageFile(path) as pf:
        leaves = pf.leaves(lay.root)
        per = max(1, batch_bytes // pf.page_size)
        for a in range(0, len(leaves), per):
            yield _batch(pf, leaves[a:a + per], lay, columns, stored, slot, last, default)


def _batch(pf, pages, lay, columns, stored, slot, last, default):
    """Decode one batch of leaf pages (overflowing cells' records assembled here)."""
    buf = pf.read_pages(pages)
    n, rowid, out, flags, ovf, n_ovf, st, bad = sqlite_pages.decode_leaves(
        buf, pages, np.int64(pf.page_size), np.int64(pf.usable), slot, last)
    if st != sqlite_pages.OK:
        raise TraceError(pf.path, f"corrupt SQLite database: page {int(bad):,} is not a table leaf page "
                                  f"its b-tree can hold")
    for r, at, size, _ in ovf[:n_ovf].tolist():
        whole = pf.payload(buf, at, size)
        if sqlite_pages.decode_record(whole, np.int64(0), np.int64(len(whole)), slot, last, out, flags,
                                      np.int64(r)) != sqlite_pages.OK:
            raise TraceError(pf.path, f"corrupt SQLite database: a record of rowid {int(rowid[r])} is damaged")
    values, null, odd = {}, {}, 0
    for c in columns:
        if c == lay.alias:
            values[c], null[c] = rowid[:n], np.zeros(n, bool)
            continue
        k = stored.index(c)
        f = flags[k, :n]
        v = out[k, :n]
        if (f != sqlite_pages.OK).any():
            f = f.copy()
            absent = f == sqlite_pages.ABSENT
            if absent.any():
                dv = _int_literal(lay.defaults.get(c))
                f[absent] = (sqlite_pages.NULL if dv is None else sqlite_pages.OK if isinstance(dv, int)
                             else sqlite_pages.ODD)
                if isinstance(dv, int):
                    v = np.where(absent, dv, v)
            miss = f != sqlite_pages.OK
            v = np.where(miss, default, v)
            odd += int(np.count_nonzero(f == sqlite_pages.ODD))
        else:
            miss = np.zeros(n, bool)
        values[c], null[c] = v, miss
    return ColumnBatch(rowid[:n], values, null, odd)


def _int_literal(sql):
    """A declared default (``dflt_value``: SQL text): None for none or NULL, the int of an integer
    literal, else the text itself (not an integer: the caller counts it odd)."""
    if sql is None or str(sql).strip().upper() == "NULL":
        return None
    t = str(sql).strip().strip("()").strip()
    try:
        v = int(t, 10)
    except ValueError:
        return t
    return v if -2**63 <= v < 2**63 else t
