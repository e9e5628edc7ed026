"""The report of real multi-rank jobs, read as a performance engineer would (issue 28, its
presentation): ``analyze``, ``aggregate``, ``report`` (and ``epilogue``) on the two real GPU jobs of
``../shared/traces/real-multi`` and the gloo 3D job of ``../shared/traces/cpu-3d``; every expected
figure computed here from the raw JSON with plain Python."""
from __future__ import annotations

import gzip
import html
import json
import re
from pathlib import Path

import numpy as np
import pytest

from support import SHARED, run_cli, shown_bytes, shown_time

MULTI = SHARED / "traces" / "real-multi"
MEGATRON = MULTI / "megatron_tp2_v100x2"
DLRM = MULTI / "param_dlrm_v100x8"
CPU3D = SHARED / "traces" / "cpu-3d"
DTYPE_SIZE = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Long": 8, "Byte": 1, "Char": 1}


def _raw(folder):
    out = []
    for f in sorted(Path(folder).glob("*.json*")):
        with (gzip.open(f) if f.suffix == ".gz" else open(f)) as fh:
            out.append(json.load(fh))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """analyze -> aggregate -> report (charts) of each set, by the command line."""
    if not MULTI.is_dir() or not CPU3D.is_dir():
        pytest.skip("../shared/traces/real-multi or cpu-3d is absent")
    base = tmp_path_factory.mktemp("realmulti")
    out = {}
    for name, src in (("megatron", MEGATRON), ("dlrm", DLRM), ("cpu3d", CPU3D / "iteration_4")):
        d = base / name
        for args in (("analyze", src, "-o", d / "an", "-j", "2"), ("aggregate", d / "an", "-o", d / "agg", "-j", "2"),
                     ("report", d / "agg", "-o", d / "rep", "-j", "2")):
            r = run_cli(*args)
            assert r.returncode == 0, (args, r.stderr)
        md = next((d / "rep").glob("*.md")).read_text()
        out[name] = {"dir": d, "md": md, "json": json.loads((d / "rep" / "report.json").read_text())}
    return out


def _cells(md):
    """Every table cell of the Markdown (header and separator rows too)."""
    return [c.strip() for line in md.splitlines() if line.startswith("|") for c in line.strip("|").split(" | ")]


def _section(md, title):
    """The text of the report's section ``## title`` (up to the next ``## `` heading)."""
    return md.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _row(md, first, section=None):
    """The cells of the first table row whose first cell is ``first`` (inside ``## section``
    when given: other sections' tables, the critical path's and the links', start with a step or
    a collective too)."""
    for line in (_section(md, section) if section else md).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("|") and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r}")


def test_tp2_allreduce_bytes_in_units_that_fit(runs):
    """The TP=2 job's all-reduces (6,144 fp32 elements) print as KB, not "0.000 GB"."""
    md = runs["megatron"]["md"]
    raw = _raw(MEGATRON)[0]
    ks = [e for e in raw["traceEvents"] if e.get("cat") == "kernel" and "AllReduce" in e["name"]]
    total = sum(e["args"]["In msg nelems"] * DTYPE_SIZE[e["args"]["dtype"]] for e in ks)
    assert len(ks) == 13 and total > 0
    row = _row(md, "AllReduce", "Collectives")
    assert row[2] == "13" and row[3] == shown_bytes(total), row          # count, bytes
    assert shown_bytes(total).endswith(" KB")
    for name in ("megatron", "dlrm", "cpu3d"):
        assert "0.000" not in runs[name]["md"], name
    # DLRM's old kernels carry no message size: a collective that ran is never "0" bytes
    kernels = [e for t in _raw(DLRM) for e in t["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"]]
    assert kernels and not any("In msg nelems" in e.get("args", {}) for e in kernels)
    for coll in ("AllReduce",):
        assert _row(runs["dlrm"]["md"], coll, "Collectives")[3] != "0"


def test_every_time_cell_fits_its_unit_and_counts_have_separators(runs):
    for name in ("megatron", "dlrm", "cpu3d"):
        for c in _cells(runs[name]["md"]):
            m = re.fullmatch(r"(-?[\d,]+(?:\.\d+)?) (ns|us|ms|s|B|KB|MB|GB|TB)(/s)?", c)
            if m:
                v = float(m.group(1).replace(",", ""))
                assert 1 <= v < 1000 or m.group(2) in ("s", "TB"), (name, c)
            assert not re.fullmatch(r"-?\d{4,}(\.\d+)?( \w+)?", c), (name, c)   # 2116 -> 2,116
    # the step time: ProfilerStep#10's median over the 8 ranks, from the raw JSON
    durs = [e["dur"] * 1e3 for t in _raw(DLRM) for e in t["traceEvents"]
            if e.get("name") == "ProfilerStep#10" and e.get("cat") == "user_annotation"]
    assert len(durs) == 8
    assert _row(runs["dlrm"]["md"], "10", "Steps and throughput")[1] == f"{np.median(durs) / 1e6:.{4 - len(str(int(np.median(durs) / 1e6)))}f} ms"


def test_no_iteration_folder_and_unknown_topology_said_once(runs):
    for name, src, world in (("megatron", MEGATRON, 2), ("dlrm", DLRM, 8)):
        md = runs[name]["md"]
        assert {t["distributedInfo"]["world_size"] for t in _raw(src)} == {world}
        assert f"World size {world} from distributedInfo" in md and "not named in the trace" in md
        assert "no iteration folder" in md
        cells = _cells(md)
        assert "-1" not in cells and "?" not in cells, name               # one convention: "-"
        assert "iteration -1" not in md
    md = runs["cpu3d"]["md"]                                              # a topology: the sizes, no such note
    # CPU-only: no GPU kernels at all in the raw traces, so no overlap on any rank: said once, not "rank 0"
    assert not any(e.get("cat") == "kernel" for t in _raw(CPU3D / "iteration_4") for e in t["traceEvents"])
    assert _row(md, "overlap") == ["overlap", "0 (all ranks)", "0", "0 (all ranks)"]
    assert "| 8 | 2 | 1 | 1 | 2 | 2 |" in md and "no iteration folder" not in md


def test_rank_steps_counted_without_events_outside_the_step(runs):
    raws = _raw(DLRM)
    steps = {e["name"] for t in raws for e in t["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")
             and e.get("cat") == "user_annotation"}
    cells = len(raws) * len(steps)                                         # 8 ranks x 1 step
    md = runs["dlrm"]["md"]
    assert cells == 8 and f"over {cells} rank-steps (1 step x 8 ranks)" in md
    assert "16 rank-step" not in md
    assert f"Summed over {cells} rank-steps (1 step x 8 ranks), plus the time of 8 ranks outside any " \
           f"ProfilerStep" in md


def test_long_kernel_names_are_cut_in_tables_and_whole_in_json(runs):
    md, rep = runs["dlrm"]["md"], runs["dlrm"]["json"]
    longest = max((e["name"] for t in _raw(DLRM) for e in t["traceEvents"] if e.get("cat") == "kernel"), key=len)
    assert len(longest) > 300
    table = md.split("## Top kernels by time")[1].split("##")[0]
    names = [line.split(" | ")[0].lstrip("| ") for line in table.splitlines() if line.startswith("| ")][1:]
    assert names and max(len(n) for n in names) <= 140
    full = [r["name"] for r in rep["top_kernels"]["rows"]]
    assert any(len(n) > 300 for n in full)                                 # report.json keeps them whole
    for n, f in zip(names, full):
        n = html.unescape(re.sub(r"\\(.)", r"\1", n))         # the Markdown's escapes undone (report/escape.py)
        assert n == f or (n.startswith(f[:60]) and "…" in n)
    assert len(set(names)) == len(names)


def test_pipeline_section_only_with_pipeline_parallelism(runs, tmp_path):
    assert "## Pipeline bubbles" not in runs["megatron"]["md"] and "## Pipeline bubbles" not in runs["dlrm"]["md"]
    # the TP-only job with its topology named: PP = 1, still no "bubble"
    r = run_cli("topology", "--tp", 2, "--world-size", 2, "--write", tmp_path / "tp2.json", "-q")
    assert r.returncode == 0, r.stderr
    d = runs["megatron"]["dir"]
    r = run_cli("report", d / "an", "-o", tmp_path / "rep", "--topology", tmp_path / "tp2.json", "-j", "1")
    assert r.returncode == 0, r.stderr
    md = next((tmp_path / "rep").glob("*.md")).read_text()
    assert "| 2 | 2 | 1 | 1 | 1 | 1 |" in md and "PP = 1: no pipeline section" in md
    assert "## Pipeline bubbles" not in md and "bubble" not in md.lower().split("## configuration")[1].split("##")[0]
    assert not list((tmp_path / "rep" / "charts").glob("pp_group_*")) and not list(
        (tmp_path / "rep" / "charts").glob("replica_*"))


def _windows(trace, step_name="ProfilerStep#3"):
    """(start, end) ns of the forward_step / backward_step annotations inside the step, on the
    trace's global clock (baseTimeNanoseconds + ts)."""
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    base = trace.get("baseTimeNanoseconds", 0)
    (st,) = [e for e in ev if e["name"] == step_name]
    return [(base + round(e["ts"] * 1e3), base + round((e["ts"] + e["dur"]) * 1e3)) for e in ev
            if e["name"] in ("forward_step", "backward_step") and st["ts"] <= e["ts"] <= st["ts"] + st["dur"]]


def _union(ws):
    total, reach = 0, None
    for s, e in sorted(ws):
        if reach is None or s > reach:
            total, reach = total + e - s, e
        elif e > reach:
            total, reach = total + e - reach, e
    return total


def _clipped(windows, spans):
    """The pieces of ``spans`` inside ``windows`` (both lists of (start, end))."""
    return [(max(s, a), min(e, b)) for s, e in spans for a, b in windows if max(s, a) < min(e, b)]


def test_pipeline_bubble_of_the_gloo_3d_job_counts_receive_waits(runs):
    """Bubble = the time a stage waits for its neighbour stage, however it waits (issue 47): the PP
    group's span - the stage's forward/backward windows + its blocking pipeline sends and receives
    inside them (``c10d::send`` / ``c10d::recv_`` and their ``gloo:`` annotations: a CPU-only job's
    receive waits in the op); the other split (outside micro-batches only) kept beside it."""
    raws = {t["distributedInfo"]["rank"]: t for t in _raw(CPU3D / "iteration_4")}
    topo = json.loads((CPU3D / "parallel_topology.json").read_text())
    groups = topo["pp_groups"]
    rows = {r["rank"]: r for r in runs["cpu3d"]["json"]["pipeline"]["rows"]}
    md = runs["cpu3d"]["md"]
    assert "## Pipeline bubbles" in md and "however it waits" in md
    p2p = ("c10d::send", "c10d::recv_", "gloo:send", "gloo:recv")
    for gi, g in enumerate(groups):
        ws = {r: _windows(raws[r]) for r in g}
        lo = min(s for v in ws.values() for s, _ in v)
        hi = max(e for v in ws.values() for _, e in v)
        for stage, r in enumerate(g):
            inside = _union(ws[r])
            base = raws[r].get("baseTimeNanoseconds", 0)
            sends = [(base + round(e["ts"] * 1e3), base + round((e["ts"] + e["dur"]) * 1e3))
                     for e in raws[r]["traceEvents"] if e.get("ph") == "X" and e["name"] in p2p]
            waits = _union(_clipped(ws[r], sends))
            got = rows[r]
            assert abs(got["microbatch_ns"] - inside) <= 2_000 and abs(got["span_ns"] - (hi - lo)) <= 2_000
            assert abs(got["outside_microbatch_ns"] - (hi - lo - inside)) <= 4_000
            assert waits > 0 and abs(got["p2p_wait_ns"] - waits) <= 4_000
            assert abs(got["bubble_ns"] - (hi - lo - inside + waits)) <= 8_000
            line = next(line for line in md.splitlines()
                        if line.startswith(f"| 4 | 3 | {gi} | {stage} | {r} |"))
            assert f"| {shown_time(inside)} |" in line and f"| {shown_time(waits)} |" in line, line


def test_forward_inferred_without_forward_annotations(runs):
    """Megatron without the patch: each step's GPU work launched before its first autograd op (and
    outside the optimizer's windows) is forward, said as inferred."""
    import pyarrow.dataset as ds
    k = ds.dataset(runs["megatron"]["dir"] / "an" / "kernels", format="parquet", partitioning="hive").to_table(
        columns=["rank", "phase"]).to_pydict()
    summ = json.loads((runs["megatron"]["dir"] / "an" / "summary.json").read_text())
    for t in _raw(MEGATRON):
        rank = t["distributedInfo"]["rank"]
        x = [e for e in t["traceEvents"] if e.get("ph") == "X"]
        (step,) = [e for e in x if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation"]
        s0, s1 = step["ts"], step["ts"] + step["dur"]
        first = min(e["ts"] for e in x if e["name"].startswith("autograd::engine::evaluate_function")
                    and s0 <= e["ts"] < s1)
        opt = [(e["ts"], e["ts"] + e["dur"]) for e in x if e["name"].startswith(("Optimizer.step", "Optimizer.zero"))]
        launch = {e["args"]["correlation"]: e["ts"] for e in x if e.get("cat") in ("cuda_runtime", "cuda_driver")}
        gpu = [e for e in x if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
        want = sum(1 for g in gpu if s0 <= launch.get(g["args"].get("correlation"), g["ts"]) < first
                   and not any(a <= launch.get(g["args"].get("correlation"), g["ts"]) <= b for a, b in opt))
        got = sum(1 for r, p in zip(k["rank"], k["phase"]) if r == rank and p == "forward")
        assert want > 50 and got == want, (rank, got, want)
        (rs,) = [r for r in summ["ranks"] if r["rank"] == rank]
        assert rs["phases_inferred"]["forward"]["gpu_events"] == want
    md = runs["megatron"]["md"]
    assert "forward phase is **inferred** on rank(s) 0-1" in md
    charts = runs["megatron"]["dir"] / "rep" / "charts"
    assert (charts / "rank_0_microbatches_step6.png").is_file()


def test_charts_read_well(runs):
    """The micro-batch chart: a legend of distinct colours, no empty panel, no micro-batch -1; the
    skew heat map: integer instance ticks, its colour bar's label on the canvas; the bus bandwidth
    chart: two or more labels on each log axis."""
    from streamtrace.report import charts as C
    from streamtrace.report.render import load, skew_grids
    from streamtrace.report.skew import HeatGrid
    d = runs["megatron"]["dir"] / "agg"
    data = load(d)
    fig = C.rank_microbatches(data, 0, (-1, 6))
    assert len(fig.axes) == 2 and {a.get_title() for a in fig.axes} == {"forward", "backward"}
    for ax in fig.axes:
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert labels == ["step"] and all(float(p).is_integer() for p in ax.get_xticks())
    patches = [h for h in fig.legends[0].legend_handles if hasattr(h, "get_facecolor") and h.get_label() != "wall clock"]
    assert len({tuple(h.get_facecolor()) for h in patches}) == 3
    fig.canvas.draw()
    fig = C.busbw_chart(data)
    fig.canvas.draw()
    for axis in (fig.axes[0].xaxis, fig.axes[0].yaxis):
        lo, hi = sorted(axis.get_view_interval())
        shown = [t for t in axis.get_majorticklabels() if t.get_text() and lo <= t.get_position()[axis is fig.axes[0].yaxis] <= hi]
        assert len(shown) >= 2, [t.get_text() for t in shown]
    for name, kind in (("dlrm", "AllReduce"), ("megatron", "AllReduce")):
        agg = runs[name]["dir"] / "agg"
        grids = skew_grids(agg, load(agg)["collectives"])
        (key,) = [k for k in grids if k[0] == kind]
        fig = C.skew_heatmap(HeatGrid.of(grids[key]), " ".join(key))
        ax = fig.axes[0]
        assert all(float(p).is_integer() for p in ax.get_xticks()), ax.get_xticks()
        fig.canvas.draw()
        cbar = fig.axes[1]
        box = cbar.yaxis.label.get_window_extent()
        w, h = fig.canvas.get_width_height()
        assert box.y0 >= 0 and box.y1 <= h and box.x1 <= w, (name, box)


def test_epilogue_of_the_real_tp2_job(tmp_path):
    if not MEGATRON.is_dir():
        pytest.skip("../shared/traces/real-multi is absent")
    r = run_cli("epilogue", MEGATRON, "-o", tmp_path / "e", "-j", "2", "-q")
    assert r.returncode == 0, r.stderr
    md = next((tmp_path / "e").glob("*.md")).read_text()
    assert "0.000" not in md and "## Pipeline bubbles" not in md and "no iteration folder" in md


def _links_md(md):
    """The text of the Efficiency section's ``### Collectives against their links``."""
    return md.split("### Collectives against their links\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]


def test_dlrm_ranks_on_one_v100_sxm2_node_within_their_link(runs):
    """DLRM's 8 ranks (``worker<i>_step_12.<13-digit ms>``: not the profiler's ``<host>_<pid>.<19-digit ns>``
    default, no host in the trace metadata) are one V100 SXM2 8-GPU node: every collective intra-node
    on NVLink (150 GB/s per direction, the datasheet's 300 GB/s bidirectional), none above 100 %."""
    names = sorted(f.name for f in DLRM.glob("*.pt.trace.json.gz"))
    assert len(names) == 8 and not any(re.match(r"^.+_\d+\.\d{19}\.pt\.trace", n) for n in names)
    raws = _raw(DLRM)
    assert all(not any(k in r or k in r.get("distributedInfo", {}) for k in ("host_name", "hostname")) for r in raws)
    assert all("SXM2" in r["deviceProperties"][0]["name"] for r in raws)
    links = runs["dlrm"]["json"]["efficiency"]["links"]
    assert "packed 8 to a host" in links["hosts_from"] and not links["cpu_only"]
    assert links["rows"] and links["traffic"]["inter"]["bytes"] == 0
    for row in links["rows"]:
        assert row["scope"] == "intra" and row["link"] == "NVLink 2" and row["link_gbps"] == 150
        assert row["pct_of_link"] is None or row["pct_of_link"] <= 100
        assert not row["over_peak"]
    sec = _links_md(runs["dlrm"]["md"])
    assert "packed 8 to a host" in sec and "(!)" not in sec and "| network |" not in sec


def test_cpu_only_gloo_job_has_no_gpu_link(runs):
    """The gloo job's ranks have no GPU event (every trace without a kernel): no NVLink, no % of link."""
    raws = _raw(CPU3D / "iteration_4")
    assert not any(e.get("cat") == "kernel" for r in raws for e in r["traceEvents"])
    links = runs["cpu3d"]["json"]["efficiency"]["links"]
    assert links["cpu_only"] and links["rows"]
    for row in links["rows"]:
        assert "CPU-only" in row["link"] and row["link_gbps"] is None and row["pct_of_link"] is None
    sec = _links_md(runs["cpu3d"]["md"])
    assert "NVLink" not in sec and "no % of link" in sec
    assert "- link per collective: none (CPU-only job)" in runs["cpu3d"]["md"]
    assert "- link per collective: hosts of the ranks from ranks packed 8 to a host" in runs["dlrm"]["md"]
