"""An Nsight Systems SQLite export (``nsys export --type sqlite``), opened read-only: what it is
(``is_sqlite``, by the 16-byte SQLite header, not the name), its tables and columns, the
schema version it was written with, its session clock, and its ``StringIds`` resolved lazily
(``Strings``: only the ids asked for are read).

Source of the layout: NVIDIA Nsight Systems, "SQLite Schema Reference" and "Common SQLite
examples" of the Exporter documentation; the fixtures in ``../shared/traces/nsys/`` (schemas
2.9.1 to 3.25.0) show which tables and columns each version has.  Tables are created lazily by
the exporter, so any of them may be missing; every reader here tolerates that."""
from __future__ import annotations

import os
import stat

import sqlite3
from pathlib import Path
from urllib.parse import quote

from ...runtime.errors import TraceError

#: the first 16 bytes of every SQLite 3 database file (sqlite.org, "Database File Format" 1.3)
SQLITE_MAGIC = b"SQLite format 3\x00"
#: the one line a ``.nsys-rep`` (or an older ``.qdrep``) report gets: it must be exported first
NSYS_REP_HINT = ("is an Nsight Systems report: export it first with "
                 "`nsys export --type sqlite --output {stem}.sqlite {name}` and give streamtrace the .sqlite")
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


def is_sqlite(path) -> bool:
    """True when ``path`` starts with the SQLite header (whatever its name); False for an
    unreadable or shorter file, and for anything that is not a regular file (opening a FIFO would
    wait for a writer: the input checks name it)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            return f.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def is_nsys_report(path) -> bool:
    """True for an Nsight Systems report file (``.nsys-rep``, ``.qdrep``), by its name: the
    report's own format is not documented, only its exports are."""
    return str(path).lower().endswith(REPORT_SUFFIXES)


def report_hint(path) -> str:
    """The one-line message for a report given where an export is expected."""
    p = Path(path)
    return f"{p}: " + NSYS_REP_HINT.format(stem=p.name.rsplit(".", 1)[0], name=p.name)


def lenient_text(raw: bytes) -> str:
    """Decode a TEXT value: UTF-8, else Windows-1252 (exports written on Windows hold such text;
    bytes it leaves undefined become U+FFFD).  Python's default ``text_factory`` raises instead."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("cp1252", "replace")


def open_export(path) -> sqlite3.Connection:
    """Open an export read-only and immutable (nothing is written beside it, no lock taken), with
    ``lenient_text`` as text factory.  Raises ``TraceError`` for a file
    that is not an SQLite database."""
    if not is_sqlite(path):
        raise TraceError(path, "not an SQLite database (no SQLite header)")
    uri = "file:" + quote(str(Path(path).resolve())) + "?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True)
        conn.text_factory = lenient_text
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as e:
        raise TraceError(path, f"cannot read the SQLite database ({e})") from None
    return conn


def table_columns(conn) -> dict[str, set[str]]:
    """``{table: {column, ...}}`` of every table and view of the export (a view is read as the table of
    its name would be: the exporter writes none, so one there was made to be read)."""
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
    return {t: {r[1] for r in conn.execute(f"PRAGMA table_info([{t}])")} for t in names}


def has_rowid(conn, table) -> bool:
    """True when ``table`` is a table with a rowid: False for a ``WITHOUT ROWID`` table or a view (the
    exporter's tables all have one; these are read without it)."""
    row = conn.execute("SELECT type FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    if row is None or row[0] != "table":
        return False
    try:
        conn.execute(f"SELECT rowid FROM [{table}] LIMIT 0")
    except sqlite3.OperationalError:                      # "no such column: rowid"
        return False
    return True


def export_meta(conn, tables) -> dict[str, str]:
    """The export's ``name -> value`` metadata: ``META_DATA_EXPORT`` (schema 3.x) or
    ``EXPORT_META_DATA`` (2.x); {} when neither is there."""
    for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if t in tables and {"name", "value"} <= tables[t]:
            return {str(k): str(v) for k, v in conn.execute(f"SELECT name, value FROM [{t}]")}
    return {}


def session_start_ns(conn, tables) -> int | None:
    """``TARGET_INFO_SESSION_START_TIME.utcEpochNs``: the UTC time (ns since the epoch) of the
    session's time 0; every ``start``/``end`` of the export counts ns from it.  None when absent."""
    t = "TARGET_INFO_SESSION_START_TIME"
    if t in tables and "utcEpochNs" in tables[t]:
        row = conn.execute(f"SELECT utcEpochNs FROM [{t}] LIMIT 1").fetchone()
        if row and isinstance(row[0], int):
            return row[0]
    return None


def gpu_names(conn, tables) -> dict[int, str]:
    """``{device id: GPU name}`` from ``TARGET_INFO_GPU`` ({} when absent)."""
    t = "TARGET_INFO_GPU"
    if t in tables and {"id", "name"} <= tables[t]:
        return {int(i): str(n) for i, n in conn.execute(f"SELECT id, name FROM [{t}]") if isinstance(i, int)}
    return {}


class Strings:
    """``StringIds`` resolved on demand: ``get`` reads only the ids not seen before, so a
    run holds the names it uses, never the whole table."""

    BATCH = 500            # ids per query (SQLite's default limit on host parameters is 999)

    def __init__(self, conn, tables):
        self.conn = conn
        self.ok = "StringIds" in tables
        self.cache: dict[int, str] = {}

    def get(self, ids) -> dict[int, str]:
        """``{id: text}`` for ``ids`` (ints); an id missing from ``StringIds`` gives ``"<string id N>"``."""
        want = [i for i in set(ids) if i not in self.cache]
        for a in range(0, len(want), self.BATCH):
            part = want[a:a + self.BATCH]
            if self.ok:
                q = f"SELECT id, value FROM StringIds WHERE id IN ({','.join('?' * len(part))})"
                for i, v in self.conn.execute(q, part):
                    self.cache[int(i)] = v if isinstance(v, str) else str(v)
            for i in part:
                self.cache.setdefault(i, f"<string id {i}>")
        return {i: self.cache[i] for i in ids}
