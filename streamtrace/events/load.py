"""``streamtrace.load(FOLDER)``: an output folder of streamtrace as tables, for a notebook; and the one
protocol every kind of output folder implements (``OutputKind``).

A kind of folder is one ``Outputs`` subclass, written once, in the lowest stage that writes or
reads such folders: its ``kind``, its ``marker`` (the file that marks such a folder, written last),
``owns(name)`` (the top-level entries the stage writes there: what
``output_folder`` may replace), ``tables()`` and how one is read: ``load``
opens it as it is, ``Outputs.read`` (what a later stage reads it with) checks its marker first
(``Outputs.check``).  Only these classes name the files of an output folder.  The stages register
their kinds (``register``):

=============  ==================  ===========================================  =============================
kind           marker              tables                                       implemented in
=============  ==================  ===========================================  =============================
``diff``       ``diff.json``       ``kernels``, ``ops``, ``groups``, ``ranks``  ``streamtrace.report.diff.outputs``
``epilogue``   ``epilogue.json``   the aggregate's, ``kernels``/``ops`` of all  ``streamtrace.report.outputs``
``aggregate``  ``aggregate.json``  ``ranks``, ``rank_phase``, ``pipeline``, ..  ``streamtrace.aggregate.folder``
``analysis``   ``summary.json``    ``kernels``, ``ops`` (``iteration=N/rank=R``)  ``streamtrace.analyze.outputs``
``report``     ``report.json``     none: ``summary`` is the report              ``streamtrace.report.outputs``
=============  ==================  ===========================================  =============================

(The epilogue's kind lives in ``report``, below the epilogue, since ``diff`` reads such folders; the
report's file names in ``streamtrace.aggregate.folder``, since an aggregate folder holds its report.)

A folder holding several markers is the kind of lowest ``precedence`` (the order above: an epilogue's
folder holds its report's ``report.json`` too).  Every kind gives ``summary`` (its JSON, a dict),
``tables()`` (names), ``table(name)`` (a ``pyarrow.Table``; also as an attribute: ``out.kernels``),
``to_pandas(name)``, ``to_polars(name)`` (a one-line error naming the package when it is not installed).
``load`` finds the kind among those registered; ``streamtrace.load`` registers every stage's first.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from ..runtime.errors import StreamtraceError

if TYPE_CHECKING:                       # annotations only
    import pyarrow as pa

# pyarrow and the datasets are imported where tables are read: the stages import this module for
# their kind of folder (the epilogue's process among them, which stays free of pyarrow)

_KEY = re.compile(r"(iteration|rank)=(-?\d+)")


def read_dataset(outdir, dataset, columns=None, schema=None) -> pa.Table:
    """Every partition of ``outdir/<dataset>/`` as one Table, partitions in (iteration, rank) order,
    each partition's part files in order, with ``iteration`` and ``rank`` int64 columns appended.
    An empty table of ``schema`` (the dataset's pyarrow schema) when there is none
    (``FileNotFoundError`` when ``schema`` is None)."""
    import pyarrow as pa
    from .dataset import partition_files, read_partition
    root = Path(outdir) / dataset
    keys = []
    for d in root.glob("iteration=*/rank=*"):
        kv = dict((k, int(v)) for k, v in _KEY.findall(str(d.relative_to(root))))
        if len(kv) == 2:
            keys.append((kv["iteration"], kv["rank"]))
    parts = []
    for it, rank in sorted(keys):
        files = partition_files(outdir, dataset, rank, it)
        if files:
            t = read_partition(files, columns, schema)
            parts.append(t.append_column("iteration", pa.array([it] * t.num_rows, pa.int64()))
                          .append_column("rank", pa.array([rank] * t.num_rows, pa.int64())))
    if not parts:
        t = read_partition([], columns, schema)
        return t.append_column("iteration", pa.array([], pa.int64())).append_column("rank", pa.array([], pa.int64()))
    return pa.concat_tables(parts)


@runtime_checkable
class OutputKind(Protocol):
    """What every kind of output folder says about itself (see the module docstring): implemented once
    per kind, by an ``Outputs`` subclass in the stage that writes such folders."""
    kind: ClassVar[str]           # "analysis", "aggregate", ...
    marker: ClassVar[str]         # the file that marks such a folder (its summary, written last)
    precedence: ClassVar[int]     # tried in increasing order (a folder may hold several markers)

    @classmethod
    def owns(cls, name: str) -> bool:
        """Whether the top-level entry ``name`` of such a folder is one its stage writes."""

    @classmethod
    def read(cls, path) -> OutputKind:
        """The folder ``path``, its marker read and checked: how a later stage reads it."""

    def tables(self) -> list[str]:
        """The names of the tables this folder holds."""

    def table(self, name: str) -> pa.Table:
        """Table ``name``, read."""


class SummaryMapping(Mapping):
    """A stage's result as a read-only mapping over its ``summary`` (a dict: what the stage returned
    before it returned an object): ``result[key]``, ``result.get(...)``, ``key in result``, ``len``,
    ``==`` a dict compares ``summary``.  The base of ``Outputs`` and ``streamtrace.merge.MergeResult``."""
    summary: dict

    def _fields(self) -> dict:
        """The dict the mapping reads: ``summary`` (a kind may give its fields without making all of them)."""
        return self.summary

    def __getitem__(self, key):
        return self._fields()[key]

    def __iter__(self):
        return iter(self._fields())

    def __len__(self):
        return len(self._fields())


class Outputs(SummaryMapping):
    """One output folder (see the module docstring), the base of every kind's implementation.
    ``path``: the folder; ``kind``; ``summary``: its JSON marker file as a dict.

    Also what the stage that writes such a folder returns (``streamtrace.analyze`` an ``Analysis``,
    ``aggregate`` an ``Aggregate``, ``report`` a ``Report``, ``diff`` a ``Diff``; ``of``), with
    ``summary`` the dict the stage returned before it returned this object.  For the callers of that
    dict, the object is also a read-only mapping over ``summary``: ``result["ranks"]``,
    ``result.get(...)``, ``"ranks" in result``, ``keys()``/``items()``, ``len``, ``==`` a dict compare
    ``summary`` (``dict(result)`` or ``result.summary`` for the dict itself, e.g. for ``json.dumps``)."""
    kind: ClassVar[str] = ""
    marker: ClassVar[str] = ""
    precedence: ClassVar[int] = 100
    missing: ClassVar[str] = "{path}: not a streamtrace {kind} folder (no {marker})"
    """The one-line error of ``read`` for a folder without the marker (``{path}``, ``{kind}``, ``{marker}``)."""

    @classmethod
    def owns(cls, name: str) -> bool:
        """Whether the top-level entry ``name`` is one this kind's stage writes (default: its marker)."""
        return name == cls.marker

    def __init__(self, path):
        self.path = Path(path)
        try:
            self.summary = json.loads((self.path / self.marker).read_text())
        except (OSError, ValueError) as e:
            raise StreamtraceError(f"{self.path / self.marker}: cannot read it ({e})") from None
        self._cache: dict = {}

    @classmethod
    def read(cls, path):
        """The folder ``path`` of this kind, as a later stage reads it: its marker read
        (``read_json``) and checked (``check``).  Raises
        ``StreamtraceError`` (``missing``) when ``path`` holds no
        marker, ``DataError`` naming the marker (or a file it lists) when it
        is damaged or of another shape."""
        if not (Path(path) / cls.marker).is_file():
            raise StreamtraceError(cls.missing.format(path=path, kind=cls.kind, marker=cls.marker))
        from .dataset import read_json           # (pyarrow: only where a folder is read)
        self = cls.of(path, read_json(Path(path) / cls.marker))
        self.check()
        return self

    def check(self):
        """Raise ``DataError`` naming the marker when ``summary`` is not of
        this kind's shape (default: any JSON)."""

    @classmethod
    def of(cls, path, summary: dict):
        """The folder ``path`` a stage has just written, with ``summary`` the dict the stage made (not
        read back from the marker file: it may hold more, e.g. ``report``'s ``files``)."""
        self = cls.__new__(cls)
        self.path, self.summary, self._cache = Path(path), summary, {}
        return self

    def tables(self) -> list[str]:
        """The names of the tables this folder holds."""
        return []

    def _read(self, name) -> pa.Table:
        raise KeyError(name)

    def table(self, name) -> pa.Table:
        """Table ``name`` (one of ``tables``) as a ``pyarrow.Table`` (read once, then cached)."""
        if name not in self.tables():
            raise StreamtraceError(f"{self.path}: no table {name!r} in this {self.kind} folder "
                                   f"(it has: {', '.join(self.tables()) or 'none'})")
        if name not in self._cache:
            self._cache[name] = self._read(name)
        return self._cache[name]

    def to_pandas(self, name):
        """Table ``name`` as a pandas DataFrame.  Raises ``StreamtraceError``
        (one line naming the package) when pandas is not installed: it is not a dependency of streamtrace."""
        try:
            import pandas  # noqa: F401 - optional: only for this call (pyarrow's to_pandas needs it)
        except ImportError:
            raise StreamtraceError("pandas is not installed (pip install pandas)") from None
        return self.table(name).to_pandas()

    def to_polars(self, name):
        """Table ``name`` as a polars DataFrame (polars must be installed)."""
        try:
            import polars as pl      # optional: only for this call
        except ImportError:
            raise StreamtraceError("polars is not installed (pip install polars)") from None
        return pl.from_arrow(self.table(name))

    def __getattr__(self, name):
        if name.startswith("_") or name not in self.tables():
            raise AttributeError(f"{type(self).__name__} ({self.kind}) has no attribute or table {name!r}")
        return self.table(name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self.tables()))

    def __repr__(self):
        return f"<streamtrace {self.kind} {self.path}: {', '.join(self.tables()) or 'no tables'}>"


#: the registered kinds (``register``), in the order they are tried
KINDS: list = []


def register(cls, first=None):
    """Register a kind of output folder: ``cls``, an ``Outputs`` subclass implementing
    ``OutputKind``; it replaces a kind of the same name.  ``first``: True tries it before every
    other, False after; None (default) by its ``precedence``.  Returns ``cls`` (a class decorator)."""
    if not isinstance(cls, type) or not issubclass(cls, Outputs) or not cls.kind or not cls.marker:
        raise TypeError(f"{cls!r}: not a kind of output folder (an Outputs subclass with kind and marker)")
    KINDS[:] = [k for k in KINDS if k.kind != cls.kind]
    if first is None:
        KINDS.append(cls)
        KINDS.sort(key=lambda k: k.precedence)
    else:
        KINDS.insert(0 if first else len(KINDS), cls)
    return cls


def kind_of(path):
    """The registered kind (class) of the output folder ``path``, or None."""
    p = Path(path)
    return next((cls for cls in KINDS if (p / cls.marker).is_file()), None)


def load(path) -> Outputs:
    """The streamtrace output folder ``path`` as tables (see the module docstring), of the kinds
    registered so far (``streamtrace.load`` registers every stage's).  Raises
    ``StreamtraceError`` when ``path`` is none of these."""
    cls = kind_of(path)
    if cls is None:
        raise StreamtraceError(f"{path}: not a streamtrace output folder (none of "
                               f"{', '.join(k.marker for k in KINDS)} in it)")
    return cls(path)
