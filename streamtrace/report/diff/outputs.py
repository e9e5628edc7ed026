"""The diff folder (``streamtrace diff -o DIR``) as a kind of output folder
(``OutputKind``)."""
from __future__ import annotations

from pathlib import Path

from ...events.load import Outputs, register

KERNELS, OPS, GROUPS, RANKS = "kernels", "ops", "groups", "ranks"
TABLES = (KERNELS, OPS, GROUPS, RANKS)
"""The tables diff writes (each ``NAME.parquet`` and ``NAME.csv``)."""


def table_file(name: str, ext: str = "parquet") -> str:
    """The file name of diff's table ``name`` (one of ``TABLES``): ``NAME.parquet`` (``ext="csv"``:
    ``NAME.csv``)."""
    return f"{name}.{ext}"


def table_path(outdir, name: str, ext: str = "parquet") -> Path:
    """The path of diff's table ``name`` (one of ``TABLES``) in ``outdir`` (``table_file``)."""
    return Path(outdir) / table_file(name, ext)


@register
class Diff(Outputs):
    """``streamtrace diff -o DIR``: ``kernels``, ``ops``, ``groups``, ``ranks`` (one row per name,
    group or rank pair; docs/diff.md); ``summary`` is ``diff.json``.  Analyses diff made of traces
    (``analysis-base``, ``analysis-test``) open with ``load(DIR / name)``."""
    kind, marker, precedence = "diff", "diff.json", 0
    MARKDOWN = "diff.md"
    """The diff in Markdown, beside its marker."""

    @classmethod
    def owns(cls, name: str) -> bool:
        """What an earlier ``diff`` wrote at the top of its folder (replaced as a whole)."""
        return (name in (cls.MARKDOWN, cls.marker, "charts") or name.startswith("analysis-")
                or name.rsplit(".", 1)[-1] in ("parquet", "csv"))

    def tables(self):
        return [n for n in TABLES if table_path(self.path, n).is_file()]

    def _read(self, name):
        from ...events.dataset import read_arrow
        return read_arrow(table_path(self.path, name))
