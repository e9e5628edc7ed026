"""What a Parquet table an earlier stage wrote must be before a later stage computes on it: its columns of
the types the writer gives them (from the file's footer: nothing read), and, for an analysis folder's
datasets, sound times (``ts_ns``, ``dur_ns``, ``end_ns`` of rows already read: no null, no negative
duration, no end before its start).  analyze never writes such a row (an event with a negative duration is
left out of the analysis and counted), so one is damage: a ``DataError`` naming the file, never a
traceback further on (a string ``ts_ns`` made numpy's, a reversed kernel ``kernels.intervals``', a
negative step an empty step window's ``StopIteration``).  ``streamtrace.events.dataset`` calls these."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..runtime.errors import DataError

#: the time columns ``check_times`` looks at, where a table has them
TIME_COLUMNS = ("ts_ns", "dur_ns", "end_ns")
_DAMAGED = "(damaged, or not written by streamtrace)"


def _is_text(t) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def same_type(have, want) -> bool:
    """Whether a column read as ``have`` is of the type ``want`` a schema gives it: the same type, a text
    as plain, large or dictionary-encoded text."""
    return have == want or (_is_text(want) and _is_text(have))


def check_types(path, file_schema: pa.Schema, schema: pa.Schema) -> None:
    """Raise ``DataError`` naming ``path`` when a column of ``file_schema`` (a Parquet file's, from its
    footer) that ``schema`` also names is of another type (``same_type``).  Columns the file lacks are not
    this check's: the readers ask for theirs (older analysed files lack a few optional ones)."""
    for want in schema:
        i = file_schema.get_field_index(want.name)
        if i >= 0 and not same_type(file_schema.field(i).type, want.type):
            raise DataError(path, f"column {want.name!r} is {file_schema.field(i).type}, not {want.type} {_DAMAGED}")


def check_times(path, t: pa.Table) -> None:
    """Raise ``DataError`` naming ``path`` when the rows ``t`` read from it hold a null time, a negative
    ``dur_ns`` or an ``end_ns`` before its ``ts_ns`` (of ``TIME_COLUMNS``, those ``t`` has)."""
    have = [c for c in TIME_COLUMNS if c in t.column_names]
    for c in have:
        if t[c].null_count:
            raise DataError(path, f"column {c!r} has {t[c].null_count:,} null value(s) {_DAMAGED}")
    if "dur_ns" in have and t.num_rows and pc.min(t["dur_ns"]).as_py() < 0:
        i = pc.index(pc.less(t["dur_ns"], 0), True).as_py()
        raise DataError(path, f"row {i:,} has a negative 'dur_ns' ({t['dur_ns'][i].as_py():,} ns) {_DAMAGED}")
    if "ts_ns" in have and "end_ns" in have and t.num_rows:
        bad = pc.less(t["end_ns"], t["ts_ns"])
        if pc.any(bad).as_py():
            i = pc.index(bad, True).as_py()
            raise DataError(path, f"row {i:,} ends before it starts ('end_ns' {t['end_ns'][i].as_py():,} < "
                                  f"'ts_ns' {t['ts_ns'][i].as_py():,}) {_DAMAGED}")


def _is_number(t) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_null(t)


def check_kinds(path, file_schema: pa.Schema, text: set) -> None:
    """Raise ``DataError`` naming ``path`` when a column of ``file_schema`` (a table's, from its footer) named in
    ``text`` is not text, or another is not a number (int, float, bool; null: a table of no rows).  For the
    tables whose writers give a column its kind but not always one type (an aggregate folder's: ints or
    floats by the values, null when empty)."""
    for f in file_schema:
        if pa.types.is_null(f.type) or (_is_text(f.type) if f.name in text else _is_number(f.type)):
            continue
        want = "text" if f.name in text else "a number"
        raise DataError(path, f"column {f.name!r} is {f.type}, not {want} {_DAMAGED}")
