"""How many activity rows an export holds (``activity_rows``): the total of a progress bar over
its rows.  ``max(rowid)`` of each table (the exporter appends rows, so it is their count, read from
the table's b-tree without a scan); ``count(*)`` of a ``WITHOUT ROWID`` table or a view; tables it
lacks count 0."""
from __future__ import annotations

from .db import has_rowid, open_export, table_columns

#: the tables the reader streams (``streamtrace.trace.nsys.reader``)
ACTIVITY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                   "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def activity_rows(conn, tables, which=ACTIVITY_TABLES) -> int:
    """Rows of the tables ``which`` of the open export ``conn`` (``tables``: its
    ``table_columns``)."""
    n = 0
    for t in which:
        if t in tables:
            row = conn.execute(f"SELECT {'max(rowid)' if has_rowid(conn, t) else 'count(*)'} FROM [{t}]").fetchone()
            n += int(row[0] or 0) if row else 0
    return n


def export_rows(path, which=ACTIVITY_TABLES) -> int:
    """``activity_rows`` of the export at ``path``."""
    conn = open_export(path)
    try:
        return activity_rows(conn, table_columns(conn), which)
    finally:
        conn.close()
