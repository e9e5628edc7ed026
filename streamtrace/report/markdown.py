"""``streamtrace report``: one Markdown report per run (``<name>.md``) plus ``report.json`` and the
charts (``streamtrace.report.charts``), from the tables ``streamtrace aggregate`` wrote.

Every number in the report is read from, or computed in one step from, an aggregate output file,
named beside each section of ``report.json`` (``"from"``):

* configuration: world size, TP/CP/EP/DP/PP and rank order (topology), GPU names, ranks, iterations;
* throughput (when ``tokens_per_step``, or ``global_batch`` and ``seq_len``, are given):
  tokens/s = tokens per step x profiled steps / the sum of their step times, a step's time being
  the median over ranks of its ``ProfilerStep#N`` duration (``iterations.parquet``:
  ``step_ns_median``; the GPU span when no step annotation exists) — the profiled steps only;
* per rank (``ranks.parquet``, each rank's mean over the iterations): compute, comm, overlap,
  exposed comm, idle, busy and wall time, min / median / max across ranks and which rank;
* collectives (``collectives_summary.parquet``): count, bytes, time, bus bandwidth distribution
  per collective type and parallel dimension; traffic share per dimension;
* stragglers (``stragglers.parquet``): per group-collective kind, the ranks that were last to arrive
  most (lag caused);
* point-to-point (``p2p.parquet``, ``streamtrace.report.p2p``): waiting per pipeline stage pair;
* pipeline bubbles (``pipeline.parquet``): per PP group and stage, and the mean per stage;
* top kernels by total time over all ranks (``top_kernels.parquet``).

Times in ``report.json`` are int ns (``*_ns``) or as stored; the Markdown shows ms.
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

from ..runtime.errors import StreamtraceError
from ..aggregate.folder import CHARTS, TIMELINE, Aggregate, table_path
from ..events.dataset import num_rows
from ..runtime.tuning import trim
from ..runtime.files import atomic_output, write_json
from .render import ChartOptions, render_all
from .config import inferred_phases, step_patterns_used
from .escape import md_code, md_text
from .options import ReportOptions
from .outputs import Report
from .section import ChartJob, ReportInput, plain
from .sections import SECTIONS
from .units import short_names  # noqa: F401 (re-exported: tests and tools shorten names as the report does)

DIMS = ("tp", "cp", "ep", "dp", "pp")


def _step_patterns(inputs) -> dict:
    """``{"step_patterns": [...]}`` for the configuration when analyze took other step names than
    ``ProfilerStep#N`` (``step_patterns_used``), else ``{}``."""
    used = step_patterns_used(inputs)
    return {"step_patterns": used} if used else {}


def check_throughput(tokens_per_step, global_batch, seq_len) -> None:
    """Raise ``StreamtraceError`` unless the throughput options are complete: tokens per step, or both
    the global batch and the sequence length, or none of them."""
    if tokens_per_step is None and (global_batch is None) != (seq_len is None):
        raise StreamtraceError("give --tokens-per-step, or both --global-batch and --seq-len")


def build_report(aggdir, name=None, tokens_per_step=None, global_batch=None, seq_len=None, top=15,
                 shown=None, efficiency=None, meta=None) -> dict:
    """The report as a dict (the content of ``report.json``; ``shown``: the aggregate folder's
    path to record, default ``aggdir``; ``meta``: its ``aggregate.json`` dict, read unless
    given).  Raises ``StreamtraceError`` when ``aggdir`` holds
    no ``aggregate.json`` or the throughput options are incomplete, and
    ``DataError`` naming a damaged or missing file of ``aggdir``."""
    d = Path(aggdir)
    meta = Aggregate.read(d).summary if meta is None else meta
    check_throughput(tokens_per_step, global_batch, seq_len)
    topo = meta.get("topology") or {}
    sizes = (topo.get("sizes") or {k: max((len(g) for g in topo.get(k) or []), default=1) for k in DIMS}) if topo \
        else dict.fromkeys(DIMS)          # unknown without a topology, not 1
    cpu_only = meta.get("sources") == ["cpu"]
    rep = {"name": name or meta.get("job_name") or _default_name(meta, Path(shown or d)),
           "generated": _dt.datetime.now().isoformat(timespec="seconds"),
           "aggregate": str(shown or d), "inputs": meta["inputs"],
           "configuration": {"world_size": meta.get("world_size"), "world_size_from": meta.get("world_size_from"),
                             **{k: sizes.get(k) for k in DIMS}, "topology_from": topo.get("source") if topo else None,
                             "order": topo.get("order"), "devices": meta.get("devices") or [],
                             "ranks": len(meta["ranks"]), "iterations": meta["iterations"],
                             "cpu_only": cpu_only, "phases_inferred": inferred_phases(meta["inputs"]),
                             **_step_patterns(meta["inputs"]),
                             "time_alignment": meta["time_alignment"], "clock_sync": meta["clock_sync"],
                             "from": Aggregate.marker}}
    inp = ReportInput(d, meta, sizes, cpu_only, top, tokens_per_step, global_batch, seq_len, efficiency)
    for section in SECTIONS:
        rep.update(section.data(inp, rep))
        trim()                      # (what the section's reads left in glibc's heap: ~10 MB at 4,096 ranks)
    rep["missing"] = _missing(rep, meta, cpu_only, d)
    rep["warnings"] = meta.get("warnings", []) + ([rep["missing"]["rank_timeline"]] if "rank_timeline" in
                                                  rep["missing"] else [])
    return rep


def _missing(rep, meta, cpu_only, d) -> dict:
    """Why a section of the report (or the per-rank time-line charts of the aggregate folder ``d``) is empty:
    ``{section: reason}``."""
    out = {}
    nranks = len(meta["ranks"])
    if rep["configuration"]["tp"] is None:
        out["configuration"] = ("no topology (no pg_config naming TP/DP/PP groups in the traces and no topology file): "
                                "parallel sizes unknown; give --topology")
    if not rep["collectives"]["by_type"]:
        out["collectives"] = ("no GPU communication kernels: a CPU-only run (gloo); its c10d::/gloo: ops count as "
                              "communication in the per-rank table" if cpu_only else
                              "no communication kernels in the traces")
    if not rep["stragglers"]["top"] or not any(r["straggler_count"] or r["waiter_count"] for r in rep["stragglers"]["top"]):
        out["stragglers"] = (out.get("collectives") or
                             ("one rank: stragglers need collectives matched across at least 2 ranks" if nranks < 2
                              else "no group collective was matched across 2 or more ranks"))
    if not rep["pipeline"]["shown"]:
        pp = rep["configuration"]["pp"]
        out["pipeline"] = ("pipeline-parallel size not named in the trace: give --topology" if pp is None else
                           "no pipeline parallelism (PP = 1): no bubble" if pp == 1 else "no forward/backward work")
    if not rep["top_kernels"]["rows"]:
        out["top_kernels"] = "no GPU kernels: a CPU-only run" if cpu_only else "no GPU kernels in the traces"
    tl = table_path(d, TIMELINE)
    if tl.is_file() and not num_rows(tl):        # (charts.rank_timeline draws none: no time axis)
        out["rank_timeline"] = (f"{tl} has no rows: the per-rank time-line charts are not drawn "
                                f"(damaged or edited; run streamtrace aggregate again)")
    return out


def _default_name(meta, d):
    ins = meta.get("inputs") or []
    p = Path(ins[0]) if ins else d
    name = p.resolve().name
    return name if name not in ("", ".") else d.resolve().name


def to_markdown(rep: dict, charts=()) -> str:
    """The report as Markdown: times, bytes and bandwidths each in the unit that fits it
    (``streamtrace.report.units``; KB/MB/GB = 1e3/1e6/1e9 bytes), counts with thousands
    separators, unknown cells ``-`` (``streamtrace.report.config``)."""
    c = rep["configuration"]
    L = [f"# {md_text(rep['name'])}", "",          # names and paths escaped for Markdown (report/escape.py)
         f"Generated {rep['generated']} by streamtrace from {md_code(rep['aggregate'])} "
         f"(time alignment: {c['time_alignment']}, clock sync: {c['clock_sync']}). Times, sizes and bandwidths are "
         "shown in the unit that fits each value (us, ms, s; B, KB, MB, GB = powers of 1,000); report.json and the "
         "Parquet tables hold the exact values (ns, bytes).", ""]
    for section in SECTIONS:
        L += section.markdown(rep, list(charts))
    shown = {stem for section in SECTIONS for stem in section.shown_charts}
    charts = [p for p in charts if Path(p).stem not in shown]
    if charts:
        L += ["## Charts", ""]
        L += [f"![{Path(p).stem}]({p})" for p in charts]
        L += [""]
    if rep["warnings"]:
        L += ["## Warnings", ""] + [f"- {md_text(w, None)}" for w in rep["warnings"]] + [""]
    return "\n".join(L)


def write_report(aggdir, outdir=None, opt: ReportOptions | None = None, log=None, final=None, shown=None) -> dict:
    """Write ``<outdir>/<name>.md``, ``<outdir>/report.json`` and (``opt.charts``) ``<outdir>/charts/``
    into the existing folder ``outdir`` (default ``aggdir``): the files one by one, see
    ``streamtrace.report.run.report`` for the report as one unit.  ``opt``: the report's options
    (``ReportOptions``, default ``ReportOptions()``: the job's name, the folder of its traces; a bar
    over the charts only on a terminal; PNG charts drawn on all cores); ``log``: a function taking
    one line, or None; ``final``: the path ``outdir`` will have (a staging folder's), for the paths
    returned and printed; ``shown``: the aggregate folder's path to record.  The Markdown shows the
    PNGs (the SVGs when only those were written).  Returns the report dict (with ``files``)."""
    opt = opt or ReportOptions()
    made: dict = {}
    meta = Aggregate.read(aggdir).summary       # (read once: 24 MB of objects at 16,384 ranks)

    def make() -> dict:
        made["rep"] = build_report(aggdir, opt.name, opt.tokens_per_step, opt.global_batch, opt.seq_len, shown=shown,
                                   efficiency=opt.efficiency, meta=meta)
        return made["rep"]
    out = Path(outdir or aggdir)
    files = []
    chart_formats = opt.chart_formats
    if opt.charts:
        fmts = tuple(chart_formats)
        job = ChartJob(Path(aggdir), out / CHARTS, meta, fmts)
        check_throughput(opt.tokens_per_step, opt.global_batch, opt.seq_len)     # before any chart is drawn

        def sections_charts() -> list:    # made while the chart workers draw the planned charts
            rep = make()
            return [t for section in sorted(SECTIONS, key=lambda x: x.chart_rank) for t in section.charts(job, rep)]
        files = render_all(aggdir, out / CHARTS, extra=sections_charts,
                           opt=ChartOptions(chart_formats=fmts, jobs=opt.jobs, chart_ranks=opt.chart_ranks,
                                            progress=opt.progress), meta=meta)
    rep = made.get("rep") or make()
    trim()                          # (the charts' plan and the sections' reads, freed: ~25 MB before the writes)
    ext = ".png" if "png" in chart_formats else ".svg"
    pngs = [str(Path(p).relative_to(out)) for p in files if str(p).endswith(ext)]
    rep["charts"] = pngs
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in rep["name"]) or "report"
    md = out / f"{safe}.md"
    with atomic_output(md, compress=False) as f:
        f.write(to_markdown(rep, pngs).encode())
    with atomic_output(out / Report.marker, compress=False) as f:
        write_json(f, rep, plain)
    fin = Path(final or out)
    rep["files"] = [str(fin / md.name), str(fin / Report.marker)] + [str(fin / Path(p).relative_to(out)) for p in files]
    if log:
        log(f"report: {rep['files'][0]} and {rep['files'][1]}"
            + (f", {len(files)} chart files in {fin / CHARTS}" if files else ""))
    return rep
