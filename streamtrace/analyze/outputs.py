"""The analysis folder (``streamtrace analyze -o DIR``) as a kind of output folder
(``OutputKind``): ``summary.json``, ``kernels/`` and ``ops/``, and where
written ``cpu_collectives/`` (a CPU-only rank's gloo collectives), ``op_perf/`` and ``kernel_perf/``
(``analyze --op-perf``), ``cuda_sync/`` (newer Kineto's GPU sync events: ``streamtrace.analyze.cuda_sync``)."""
from __future__ import annotations

from ..events.load import Outputs, read_dataset, register
from ..runtime.errors import DataError

# The analysis folder's datasets (one Parquet file per iteration and rank), by name: every module that
# writes or reads one names it by these constants.
KERNELS = "kernels"
OPS = "ops"
CPU_COLLECTIVES = "cpu_collectives"
OP_PERF = "op_perf"
KERNEL_PERF = "kernel_perf"
CUDA_SYNC = "cuda_sync"
#: the analysis folder's datasets, in the order ``tables()`` lists them
TABLES = (KERNELS, OPS, CPU_COLLECTIVES, OP_PERF, KERNEL_PERF, CUDA_SYNC)
#: a rank's key in ``summary.json`` listing the step patterns analyze marked its steps by (list of str;
#: written only when they are not the Kineto default ``^ProfilerStep#(\\d+)$``: absent means that)
STEP_PATTERNS_KEY = "step_patterns"


def schema_of(dataset: str):
    """The pyarrow schema of the dataset named ``dataset``: ``KERNELS`` and ``OPS`` have fixed ones
    (``streamtrace.events.dataset.schemas``); None for the others (their files say theirs)."""
    from ..events.dataset import schemas
    return dict(zip((KERNELS, OPS), schemas())).get(dataset)


@register
class Analysis(Outputs):
    """``streamtrace analyze -o DIR``: ``kernels`` and ``ops`` (with ``iteration``, ``rank`` int64
    columns, rows in analyze's order), and ``cpu_collectives``, ``op_perf``, ``kernel_perf``,
    ``cuda_sync`` where written; ``summary`` is ``summary.json``."""
    kind, marker, precedence = "analysis", "summary.json", 3
    missing = "{path}: not an analysed folder (no {marker}; run streamtrace analyze first)"

    @classmethod
    def owns(cls, name) -> bool:
        """The top-level entries of an analysis folder (old spill folders included)."""
        return name in (cls.marker, *TABLES) or name.startswith(".streamtrace-")

    def check(self):
        """``summary.json`` (``read``): an object whose ``"ranks"`` is a list of objects with an int
        ``"rank"`` >= 0, an int or null ``"iteration"`` and a string ``"source"``; else a
        ``DataError`` naming it."""
        sp, summ = self.path / self.marker, self.summary
        if not isinstance(summ, dict) or not isinstance(summ.get("ranks"), list):
            raise DataError(sp, 'not an analysis summary (expected an object with a "ranks" list)')
        for i, r in enumerate(summ["ranks"]):
            ok = isinstance(r, dict) and type(r.get("rank")) is int and r["rank"] >= 0 \
                and (r.get("iteration") is None or type(r["iteration"]) is int) \
                and isinstance(r.get("source", ""), str)
            if not ok:
                raise DataError(sp, f'ranks[{i}] is not {{"rank": int >= 0, "iteration": int or null, "source": str}}')

    @staticmethod
    def step_patterns(rank_entry) -> list | None:
        """The step patterns one ``ranks[*]`` entry of ``summary.json`` records (``STEP_PATTERNS_KEY``,
        a list of str); None when it records none or not a non-empty list of str (the Kineto default)."""
        v = rank_entry.get(STEP_PATTERNS_KEY) if isinstance(rank_entry, dict) else None
        return list(v) if isinstance(v, list) and v and all(isinstance(x, str) for x in v) else None

    def tables(self):
        return [n for n in TABLES if (self.path / n).is_dir()]

    def _read(self, name):
        return read_dataset(self.path, name, schema=schema_of(name))
