"""The folders a report is written into, as kinds of output folder
(``OutputKind``): a report of its own (``streamtrace report -o DIR`` of
analysed folders, without the aggregate's tables: ``Report``), and the epilogue's output folder
(``EpilogueRun``: the report with the analyses and the aggregate it was made from).  The
epilogue's kind lives here, below the epilogue, because ``diff`` (this stage) reads such folders."""
from __future__ import annotations

from pathlib import Path

from ..analyze.outputs import KERNELS, OPS, Analysis
from ..events.load import Outputs, register
from ..aggregate.folder import REPORT_MARKER, Aggregate, report_owns


@register
class Report(Outputs):
    """``streamtrace report -o DIR``: no tables; ``summary`` is ``report.json``."""
    kind, marker, precedence = "report", REPORT_MARKER, 4

    @classmethod
    def owns(cls, name: str) -> bool:
        """What a report writes at the top of its folder: ``report.json``, ``charts/``, ``*.md``
        (``report_owns``)."""
        return report_owns(name)

    def tables(self):
        return []


@register
class EpilogueRun(Outputs):
    """The epilogue's output folder (``RUN_DIR/streamtrace`` or its ``-o``; ``streamtrace.epilogue``)
    as a kind of output folder: the aggregate's tables, and ``kernels``/``ops`` of every analysed
    iteration together.  ``analyses``: ``{folder name: Analysis}``; ``aggregate``: the
    ``Aggregate`` (None when it was not written).  Its layout:
    one folder per iteration (``iteration``) holding its analysis (``ANALYSIS``) and merged trace
    (``merged``), the aggregate (``AGGREGATE``), the report at the top, and ``epilogue.json``
    (``{"summary", "state"}``) last."""
    kind, marker, precedence = "epilogue", "epilogue.json", 1
    AGGREGATE = "aggregate"
    """The aggregate folder in it."""
    ANALYSIS = "analysis"
    """An iteration's analysis folder in its iteration folder."""
    ITERATION, TRACES = "iteration_", "traces"
    """An iteration's folder: ``iteration_<N>``, or ``traces`` for traces without iteration folders."""

    @classmethod
    def iteration(cls, it) -> str:
        """The folder of iteration ``it`` (int; None: traces without iteration folders)."""
        return f"{cls.ITERATION}{it}" if it is not None else cls.TRACES

    @staticmethod
    def merged(full: bool) -> str:
        """An iteration's merged trace: every event (``full``) or the GPU processes only."""
        return "merged.json.gz" if full else "merged_gpu.json.gz"

    @classmethod
    def owns(cls, name: str) -> bool:
        """What the epilogue writes at the top of its folder: ``epilogue.json``, ``aggregate/``, the report
        (``report.json``, ``charts/``, ``*.md``) and one folder per iteration (``iteration_<N>/``, ``traces/``)."""
        return (name in (cls.marker, cls.AGGREGATE, cls.TRACES) or report_owns(name)
                or name.startswith(cls.ITERATION))

    @classmethod
    def analysis_folders(cls, path) -> list:
        """The analysis folders of every iteration in the folder ``path`` (sorted; those holding their
        marker), whether or not ``path`` holds the epilogue's marker (``streamtrace.open``'s cache too)."""
        return sorted(q.parent for q in Path(path).glob(f"*/{cls.ANALYSIS}/{Analysis.marker}"))

    @property
    def analyses(self) -> dict:
        return {p.parent.name: Analysis(p) for p in self.analysis_folders(self.path)}

    @property
    def aggregate(self):
        p = self.path / self.AGGREGATE
        return Aggregate(p) if (p / Aggregate.marker).is_file() else None

    def tables(self):
        agg = self.aggregate
        own = [n for n in (KERNELS, OPS) if any(n in a.tables() for a in self.analyses.values())]
        return own + (agg.tables() if agg is not None else [])

    def _read(self, name):
        import pyarrow as pa
        if name in (KERNELS, OPS):
            return pa.concat_tables([a.table(name) for a in self.analyses.values() if name in a.tables()])
        return self.aggregate.table(name)
