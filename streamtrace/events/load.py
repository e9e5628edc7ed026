"""``streamtrace.load(FOLDER)``: an output folder of streamtrace as tables, for a notebook.

Which kind of folder it is is told by the file that marks it (:data:`KINDS`, first match):

=============  ==================  ============================================================
kind           marker              tables
=============  ==================  ============================================================
``epilogue``   ``epilogue.json``   the run's aggregate tables, ``kernels``/``ops`` of every iteration
``aggregate``  ``aggregate.json``  ``ranks``, ``rank_phase``, ``pipeline``, ``collectives``, ...
``analysis``   ``summary.json``    ``kernels``, ``ops`` (hive partitions ``iteration=N/rank=R``)
``report``     ``report.json``     none: ``summary`` is the report
``diff``       ``diff.json``       ``kernels``, ``ops``, ``groups``, ``ranks`` (``streamtrace diff``)
=============  ==================  ============================================================

Every kind gives ``summary`` (its JSON, a dict), ``tables()`` (names), ``table(name)`` (a
``pyarrow.Table``; also as an attribute: ``out.kernels``), ``to_pandas(name)``, ``to_polars(name)``
(polars when installed).  An analysis' ``kernels`` and ``ops`` carry ``iteration`` and ``rank``
as int64 columns (the partition keys) and keep the rows in analyze's order, so ``ops.parent``
indexes the rank's ops rows.  A new kind of folder registers with :func:`register`.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..runtime.errors import StreamtraceError
from .dataset import partition_files, read_partition

_KEY = re.compile(r"(iteration|rank)=(-?\d+)")


def read_dataset(outdir, dataset, columns=None) -> pa.Table:
    """Every partition of ``outdir/<dataset>/`` (``"kernels"`` or ``"ops"``) as one Table, partitions
    in (iteration, rank) order, each partition's part files in order, with ``iteration`` and
    ``rank`` int64 columns appended.  An empty table of the dataset's schema when there is none."""
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
            t = read_partition(files, columns)
            parts.append(t.append_column("iteration", pa.array([it] * t.num_rows, pa.int64()))
                          .append_column("rank", pa.array([rank] * t.num_rows, pa.int64())))
    if not parts:
        t = read_partition([], columns, dataset)
        return t.append_column("iteration", pa.array([], pa.int64())).append_column("rank", pa.array([], pa.int64()))
    return pa.concat_tables(parts)


class Outputs:
    """One output folder (see the module docstring).  ``path``: the folder; ``kind``; ``summary``:
    its JSON marker file as a dict."""
    kind = ""
    marker = ""

    def __init__(self, path):
        self.path = Path(path)
        try:
            self.summary = json.loads((self.path / self.marker).read_text())
        except (OSError, ValueError) as e:
            raise StreamtraceError(f"{self.path / self.marker}: cannot read it ({e})") from None
        self._cache: dict = {}

    def tables(self) -> list[str]:
        """The names of the tables this folder holds."""
        return []

    def _read(self, name) -> pa.Table:
        raise KeyError(name)

    def table(self, name) -> pa.Table:
        """Table ``name`` (one of :meth:`tables`) as a ``pyarrow.Table`` (read once, then cached)."""
        if name not in self.tables():
            raise StreamtraceError(f"{self.path}: no table {name!r} in this {self.kind} folder "
                                   f"(it has: {', '.join(self.tables()) or 'none'})")
        if name not in self._cache:
            self._cache[name] = self._read(name)
        return self._cache[name]

    def to_pandas(self, name):
        """Table ``name`` as a pandas DataFrame.  Raises :class:`~streamtrace.runtime.errors.StreamtraceError`
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


class Analysis(Outputs):
    """``streamtrace analyze -o DIR``: ``kernels`` and ``ops`` (with ``iteration``, ``rank``)."""
    kind, marker = "analysis", "summary.json"

    def tables(self):
        return [n for n in ("kernels", "ops") if (self.path / n).is_dir()]

    def _read(self, name):
        return read_dataset(self.path, name)


class Aggregate(Outputs):
    """``streamtrace aggregate -o DIR``: every ``*.parquet`` table by its name; ``report``: the
    ``report.json`` written there (None when there is none)."""
    kind, marker = "aggregate", "aggregate.json"

    def tables(self):
        return sorted(p.stem for p in self.path.glob("*.parquet"))

    def _read(self, name):
        return pq.read_table(self.path / f"{name}.parquet")

    @property
    def report(self):
        p = self.path / "report.json"
        return json.loads(p.read_text()) if p.is_file() else None


class Report(Outputs):
    """``streamtrace report -o DIR`` (without the aggregate tables): ``summary`` is ``report.json``."""
    kind, marker = "report", "report.json"


class EpilogueRun(Outputs):
    """``streamtrace epilogue`` output (``RUN_DIR/streamtrace`` or its ``-o``): the aggregate's tables,
    and ``kernels``/``ops`` of every analysed iteration together.  ``analyses``: ``{folder name:
    Analysis}``; ``aggregate``: the :class:`Aggregate` (None when it was not written)."""
    kind, marker = "epilogue", "epilogue.json"

    @property
    def analyses(self) -> dict:
        return {p.parent.name: Analysis(p) for p in sorted(self.path.glob("*/analysis"))
                if (p / "summary.json").is_file()}

    @property
    def aggregate(self):
        p = self.path / "aggregate"
        return Aggregate(p) if (p / "aggregate.json").is_file() else None

    def tables(self):
        agg = self.aggregate
        own = [n for n in ("kernels", "ops") if any(n in a.tables() for a in self.analyses.values())]
        return own + (agg.tables() if agg is not None else [])

    def _read(self, name):
        if name in ("kernels", "ops"):
            return pa.concat_tables([a.table(name) for a in self.analyses.values() if name in a.tables()])
        return self.aggregate.table(name)


class Diff(Outputs):
    """``streamtrace diff -o DIR``: ``kernels``, ``ops``, ``groups``, ``ranks`` (one row per name,
    group or rank pair; README "streamtrace diff"); ``summary`` is ``diff.json``.  Analyses
    diff made of traces (``analysis-base``, ``analysis-test``) open with ``load(DIR / name)``."""
    kind, marker = "diff", "diff.json"

    def tables(self):
        return [n for n in ("kernels", "ops", "groups", "ranks") if (self.path / f"{n}.parquet").is_file()]

    def _read(self, name):
        return pq.read_table(self.path / f"{name}.parquet")


#: folder kinds in the order they are tried: (marker file, class); see :func:`register`
KINDS: list = [("diff.json", Diff), ("epilogue.json", EpilogueRun), ("aggregate.json", Aggregate),
               ("summary.json", Analysis), ("report.json", Report)]


def register(cls, first=True):
    """Add a folder kind: ``cls`` an :class:`Outputs` subclass with its ``kind`` and ``marker``
    (the file that marks such a folder); tried before the others when ``first``."""
    entry = (cls.marker, cls)
    KINDS[:] = [k for k in KINDS if k[1].kind != cls.kind]
    KINDS.insert(0, entry) if first else KINDS.append(entry)


def load(path) -> Outputs:
    """The streamtrace output folder ``path`` as tables (see the module docstring): an analysis
    (``analyze -o``), an aggregate (``aggregate -o``, ``report`` of analysed folders), an epilogue
    run folder, a report, a diff (``diff -o``).  Raises :class:`~streamtrace.runtime.errors.StreamtraceError` when ``path`` is
    none of these."""
    p = Path(path)
    for marker, cls in KINDS:
        if (p / marker).is_file():
            return cls(p)
    raise StreamtraceError(f"{path}: not a streamtrace output folder (none of "
                           f"{', '.join(m for m, _ in KINDS)} in it)")
