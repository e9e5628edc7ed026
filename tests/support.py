"""Shared test fixtures.  Real traces come from ``../shared`` beside the repository
(read-only); tests that need them skip cleanly when it is absent."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
REAL = SHARED / "traces" / "real"
CPU3D = SHARED / "traces" / "cpu-3d"


def real_traces():
    return sorted(REAL.glob("*.json.gz")) if REAL.is_dir() else []


def need_shared():
    if not REAL.is_dir():
        pytest.skip("../shared/traces is absent")


def load_json(path, decimal=False):
    """Plain whole-file json load (the independent reference for the reader)."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_float=Decimal) if decimal else json.loads(raw)


def exact_ns(v) -> int:
    """Microseconds (int, float text as Decimal) -> int ns, rounding half up."""
    from decimal import ROUND_HALF_UP
    d = Decimal(v) * 1000 if not isinstance(v, Decimal) else v * 1000
    return int(d.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def step_span(folder) -> int:
    """The span of a synthetic job's step from its raw files (``folder/iteration_*/*.json``, one
    ``ProfilerStep`` each, one clock): the last rank's end (its step's end or its last GPU end, whichever
    is later) - the first rank's ``ProfilerStep`` start, int ns."""
    starts, ends = [], []
    for f in sorted(Path(folder).glob("iteration_*/*.json")):
        ev = load_json(f)["traceEvents"]
        step = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")][0]
        gpu = [exact_ns(e["ts"]) + exact_ns(e["dur"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy",
                                                                                       "gpu_memset")]
        starts.append(exact_ns(step["ts"]))
        ends.append(max([exact_ns(step["ts"]) + exact_ns(step["dur"])] + gpu))
    return max(ends) - min(starts)


def run_cli(*args, cwd=None):
    """Run ``python -m streamtrace ARGS`` (this checkout's, whatever ``cwd``) and return the CompletedProcess."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    return subprocess.run([sys.executable, "-m", "streamtrace", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=env)


# The Megatron-TraceViz topology text of the issue (TP2 x PP2 x DP2, 8 ranks), written
# by hand from the issue, not by streamtrace.
TRACEVIZ_TXT = """\
================================================================================
MEGATRON PARALLEL CONFIGURATION
================================================================================
Timestamp: 2026-01-05 14:48:40.123456
TP Size: 2
PP Size: 2
CP Size: 1
EP Size: 1
World Size: 8

Global Batch Size: 16

STATISTICS
--------------------------------------------------
Total Ranks: 8
Valid Ranks: 8
Error Ranks: 0

TENSOR PARALLEL (TP) GROUPS
--------------------------------------------------
Group 1: [0, 1]
Group 2: [2, 3]
Group 3: [4, 5]
Group 4: [6, 7]
Total groups: 4

PIPELINE PARALLEL (PP) GROUPS
--------------------------------------------------
Group 1: [0, 4]
Group 2: [1, 5]
Group 3: [2, 6]
Group 4: [3, 7]
Total groups: 4

DATA PARALLEL (DP) GROUPS
--------------------------------------------------
Group 1: [0, 2]
Group 2: [1, 3]
Group 3: [4, 6]
Group 4: [5, 7]
Total groups: 4

FULL MODEL RANK GROUPS (by DP Rank)
--------------------------------------------------
Each DP rank contains ONE complete model replica with ALL shards.
Full model = TP2 x EP1 x PP2 x CP1 = 4 ranks
--------------------------------------------------
Group 0: [0, 1, 4, 5]
Group 1: [2, 3, 6, 7]

Total model replicas (DP): 2
"""


# -- shared by the byte-range tests (tests/unit/trace/test_trace_ranges.py, tests/unit/events/test_parallel_ingest.py)

def events_of(reader):
    """Every event of a ``TraceReader``, as dicts."""
    return [e for b in reader.raw_batches() for e in b.events]


def proven(path, ranges):
    """The events of ``ranges`` if every range parses to exactly its end (the proof
    ``streamtrace.events.parallel_ingest.ingest_parallel`` relies on for guessed ranges), else None."""
    from streamtrace.runtime.errors import TraceError
    from streamtrace.trace.ranges import range_events
    out = []
    for a, b in ranges:
        r = range_events(path, (a, b))
        try:
            out += events_of(r)
        except TraceError:
            return None
        if r.events_end != b - a + 2:
            return None
    return out


def _tricky():
    from hypothesis import strategies as st
    return st.text(alphabet=st.sampled_from(list('ab{}[]",:\\é😀 \n')), max_size=10)


#: hypothesis strings full of what confuses a byte scanner: braces, brackets, quotes, escapes, unicode
tricky = _tricky()


def _three_digits(x, unit, scales) -> str:
    """``x`` in the largest unit of ``scales`` (``(unit, factor)`` ascending) that keeps it >= 1, else in
    ``unit``: three significant digits, the report's rule, written out independently of streamtrace.report.units."""
    f = 1.0
    for u, g in scales:
        if x >= g:
            unit, f = u, g
    v = x / f
    d = 2 if v < 10 else 1 if v < 100 else 0
    return f"{v:,.{d}f} {unit}"


def shown_time(ns) -> str:
    """A time (ns) as the report prints it: the largest of us, ms, s keeping the value >= 1."""
    return _three_digits(ns, "ns", (("us", 1e3), ("ms", 1e6), ("s", 1e9))) if ns else "0"


def shown_bytes(n) -> str:
    """Bytes as the report prints them (B, KB, MB, GB, TB = powers of 1,000; whole bytes below 1 KB)."""
    if not n:
        return "0"
    if n < 1000:
        return f"{int(n)} B"
    return _three_digits(n, "KB", (("KB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12)))


def code_blocks(path, lang="python") -> list:
    """The fenced code blocks of language ``lang`` in the Markdown file ``path`` (relative to the
    repository root), as text, in order: the documentation's examples, to run as tests."""
    blocks, cur, fence = [], None, None
    for line in (ROOT / path).read_text().splitlines():
        if cur is None and line.startswith("```"):
            fence, cur = line[3:].strip(), []
        elif cur is not None and line.startswith("```"):
            if fence == lang:
                blocks.append("\n".join(cur) + "\n")
            cur = None
        elif cur is not None:
            cur.append(line)
    return blocks


def stalled_job(tmp, rank: int, delay_ns: int) -> Path:
    """A small synthetic job (4 ranks, TP2 x DP2) whose ``rank`` stalls ``delay_ns`` in its data loader,
    generated into ``tmp/traces``, analysed into ``tmp/an`` and aggregated into ``tmp/agg`` (each with
    ``jobs=1``); returns ``tmp``."""
    from streamtrace.aggregate import AggregateOptions, aggregate
    from streamtrace.analyze import AnalyzeOptions, analyze
    from streamtrace.synth.faults import Fault
    from streamtrace.synth.job import SynthSpec, generate_job
    tmp = Path(tmp)
    generate_job(tmp / "traces", SynthSpec(world_size=4, tp=2, pp=1, layers=1, microbatches=1,
                                           faults=(Fault("cpu_stall", rank, delay_ns=delay_ns),)))
    analyze([tmp / "traces"], tmp / "an", AnalyzeOptions(jobs=1))
    aggregate([tmp / "an"], tmp / "agg", AggregateOptions(jobs=1))
    return tmp


NSYS_PAYLOAD_SCHEMA = """
      CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
      CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, [end] INT, deviceId INT, streamId INT, correlationId INT,
                                               globalPid INT, demangledName INT, shortName INT);
      CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, [end] INT, eventClass INT, globalTid INT,
                                                correlationId INT, nameId INT);
      CREATE TABLE NVTX_EVENTS (start INT, [end] INT, eventType INT, text TEXT, globalTid INT, textId INT,
                                domainId INT, jsonText TEXT, binaryData BLOB);
      CREATE TABLE NVTX_PAYLOAD_SCHEMAS (domainId INT, schemaId INT, name TEXT, type INT, flags INT,
                                         numEntries INT, payloadSize INT, alignTo INT);
      CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INT, schemaId INT, idx INT, flags INT, type INT,
                                                name TEXT, description TEXT, arrayOrUnionDetail INT, offset INT);
      CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
    """
"""The tables of a small Nsight Systems SQLite export with NCCL's NVTX payloads (export schema 3.25),
written by hand from the export's documented layout, for tests that build one with ``sqlite3``."""


_WORKERS_LOAD = """
import importlib, json, os, sys
from numba.core.registry import CPUDispatcher
mod = importlib.import_module({module!r})


def loaded():
    return {{(m.__name__, k, sig) for m in list(sys.modules.values())
            if getattr(m, "__name__", "").startswith("streamtrace.kernels")
            for k, v in list(vars(m).items()) if isinstance(v, CPUDispatcher) for sig in v.overloads}}


task = mod.{task}


def spy(*args):
    before = loaded()
    out = task(*args)
    with open(os.path.join(sys.argv[2], f"{{os.getpid()}}-{{{key}}}.json"), "w") as f:
        json.dump([f"{{m}}.{{k}}" for m, k, _ in loaded() - before], f)
    return out


mod.{task} = spy
{run}
print(os.getpid())
"""


def workers_loaded_kernels(module: str, task: str, key: str, run: str, source, tmp) -> tuple[str, list]:
    """Run ``run`` (Python source: a stage over ``sys.argv[1]``, writing into ``sys.argv[2]``) in a fresh
    process with ``module.task`` (a per-task worker function; ``key``: an expression of its ``args``
    naming the task) spied on: each call writes the kernels it loaded itself into ``tmp``.  Returns
    ``(the parent's pid, [(report file name, [kernel names])])``."""
    script = _WORKERS_LOAD.format(module=module, task=task, key=key, run=run)
    p = subprocess.run([sys.executable, "-c", script, str(source), str(tmp)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    reports = sorted(Path(tmp).glob("*.json"))
    return p.stdout.split()[-1], [(r.name, json.loads(r.read_text())) for r in reports]
