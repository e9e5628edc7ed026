"""streamtrace.topology.capture (profiler schedule from the environment, trace handler, topology dump),
streamtrace.topology_io (topology JSON and Megatron-TraceViz text writers) and, marked slow, a
real 4-process gloo job profiled with them (tests/integration/e2e_job.py) whose output goes through
merge, validate and analyze."""
from __future__ import annotations

import datetime as dt
import gzip
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT, TRACEVIZ_TXT, load_json, run_cli
from streamtrace import capture
from streamtrace.topology import parse_traceviz_txt
from streamtrace.topology.sources import load_topology
from streamtrace.topology import format_traceviz_txt, parse_order, topology_from_groups, write_topology_files
from streamtrace.topology.model import replicas_by_order

ENV = ("PROFILE_ALLRANKS", "PROFILER_WAIT_STEPS", "PROFILER_WARMUP_STEPS", "PROFILER_ACTIVE_STEPS",
       "PROFILER_REPEAT", "RANK")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


# ------------------------------------------------------------------ schedule from the environment

def test_schedule_defaults():
    assert capture.schedule_params() == {"wait": 10, "warmup": 3, "active": 1, "repeat": 1}


def test_schedule_env_overrides(monkeypatch):
    monkeypatch.setenv("PROFILER_WAIT_STEPS", " 2 ")
    monkeypatch.setenv("PROFILER_WARMUP_STEPS", "0")
    monkeypatch.setenv("PROFILER_ACTIVE_STEPS", "4")
    monkeypatch.setenv("PROFILER_REPEAT", "0")
    assert capture.schedule_params() == {"wait": 2, "warmup": 0, "active": 4, "repeat": 0}


def test_schedule_keywords_are_defaults_env_wins(monkeypatch):
    assert capture.schedule_params(wait=9, warmup=1, active=2, repeat=1) == {"wait": 9, "warmup": 1, "active": 2, "repeat": 1}
    monkeypatch.setenv("PROFILER_ACTIVE_STEPS", "5")
    monkeypatch.setenv("PROFILER_WAIT_STEPS", "")          # empty = unset
    assert capture.schedule_params(wait=9, warmup=1, active=2) == {"wait": 9, "warmup": 1, "active": 5, "repeat": 1}


@pytest.mark.parametrize("name,value", [
    ("PROFILER_WAIT_STEPS", "ten"), ("PROFILER_WAIT_STEPS", "-1"), ("PROFILER_WARMUP_STEPS", "1.5"),
    ("PROFILER_ACTIVE_STEPS", "0"), ("PROFILER_ACTIVE_STEPS", "0x2"), ("PROFILER_REPEAT", "-3"),
    ("PROFILER_REPEAT", "once")])
def test_schedule_bad_env_names_the_variable(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        capture.schedule_params()


@pytest.mark.parametrize("kw", [{"wait": -1}, {"active": 0}, {"warmup": 1.5}, {"repeat": True}])
def test_schedule_bad_keywords(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        capture.schedule_params(**kw)


@pytest.mark.parametrize("value,expected", [("1", True), ("true", True), ("YES", True), (" On ", True),
                                            ("", False), ("0", False), ("False", False), ("no", False),
                                            ("off", False)])
def test_profile_allranks_values(monkeypatch, value, expected):
    monkeypatch.setenv("PROFILE_ALLRANKS", value)
    assert capture.profile_all_ranks() is expected
    assert capture.should_profile(3) is expected
    assert capture.should_profile(0) is True


def test_profile_allranks_bad_value(monkeypatch):
    monkeypatch.setenv("PROFILE_ALLRANKS", "maybe")
    with pytest.raises(ValueError, match="PROFILE_ALLRANKS"):
        capture.should_profile(0)


def test_should_profile_ranks(monkeypatch):
    assert capture.should_profile(0) and not capture.should_profile(1)
    assert capture.should_profile(3, ranks=[1, 3]) and not capture.should_profile(0, ranks=[1, 3])
    assert all(capture.should_profile(r, ranks=[]) for r in range(8))      # Megatron: [] = every rank
    monkeypatch.setenv("RANK", "2")                                          # rank from the environment
    assert capture.global_rank() == 2 and not capture.should_profile()
    monkeypatch.setenv("PROFILE_ALLRANKS", "1")
    assert capture.should_profile() and capture.should_profile(5, ranks=[0])
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(ValueError, match="RANK"):
        capture.global_rank()


def test_profiler_schedule_actions(monkeypatch):
    torch = pytest.importorskip("torch")
    A = torch.profiler.ProfilerAction
    s = capture.profiler_schedule()
    acts = [s(k) for k in range(30)]
    assert acts[:10] == [A.NONE] * 10 and acts[10:13] == [A.WARMUP] * 3
    assert acts[13] == A.RECORD_AND_SAVE and set(acts[14:]) == {A.NONE}          # repeat=1: one window
    monkeypatch.setenv("PROFILER_REPEAT", "0")                                     # 0: forever
    monkeypatch.setenv("PROFILER_ACTIVE_STEPS", "2")
    s = capture.profiler_schedule()
    assert [k for k in range(100) if s(k) == A.RECORD_AND_SAVE] == list(range(14, 100, 15))
    assert s(13) == A.RECORD


# ------------------------------------------------------------------ trace handler (fake profiler)

class FakeProfiler:
    """Mimics torch.profiler.profile's step()/stop() around on_trace_ready: a window of
    ``active`` recorded steps ending at step ``last``; step() advances step_num before calling
    the handler, stop() does not."""

    def __init__(self, handler, last, fail=False):
        self.step_num, self.last, self.handler, self.fail, self.exported = 0, last, handler, fail, []
        self.result = None

    def export_chrome_trace(self, path):
        if self.fail:
            Path(path).write_text('{"traceEvents": [')        # a partial write, then a failure
            raise OSError(28, "No space left on device")
        k = self.step_num
        events = [{"ph": "X", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": s, "dur": 1} for s in range(k - 1, k + 1)]
        Path(path).write_text(json.dumps({"traceEvents": events, "traceName": str(path)}))   # as Kineto does
        self.exported.append(path)

    def step(self):
        self.step_num += 1
        if self.step_num - 1 == self.last:
            self.result = self.handler(self)

    def stop(self):
        self.result = self.handler(self)


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*") if p.is_file())


def test_handler_names_and_atomic_write(tmp_path):
    h = capture.trace_handler(tmp_path, rank=3)
    p = FakeProfiler(h, last=12)
    for _ in range(14):
        p.step()
    assert p.result == tmp_path / "iteration_12" / "rank_0003_iter_12.pt.trace.json.gz"
    assert _files(tmp_path) == ["iteration_12/rank_0003_iter_12.pt.trace.json.gz"]   # no temporary left
    raw = p.result.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    doc = json.loads(gzip.decompress(raw))
    assert doc["traceEvents"][-1]["name"] == "ProfilerStep#13" and doc["traceName"] == str(p.result)
    assert Path(p.exported[0]).parent == p.result.parent          # Kineto wrote into the target folder
    assert oct(p.result.stat().st_mode & 0o777) == oct(0o666 & ~capture._umask())


def test_handler_step_vs_stop_and_iteration_callable(tmp_path, monkeypatch):
    # closed by stop(): the last recorded step is step_num itself
    h = capture.trace_handler(tmp_path, compress=False, iteration=lambda k: k + 100)
    monkeypatch.setenv("RANK", "12345")
    p = FakeProfiler(h, last=99)
    for _ in range(4):
        p.step()
    p.stop()
    assert p.result == tmp_path / "iteration_104" / "rank_12345_iter_104.pt.trace.json"
    assert json.loads(p.result.read_text())["traceEvents"]
    # called by hand (neither step nor stop on the stack): K = step_num
    assert capture.trace_handler(tmp_path, rank=0, compress=False)(p).name == "rank_0000_iter_4.pt.trace.json"


def test_handler_failure_is_logged_not_raised(tmp_path, caplog):
    h = capture.trace_handler(tmp_path, rank=1)
    p = FakeProfiler(h, last=0, fail=True)
    with caplog.at_level(logging.ERROR, logger="streamtrace.topology.capture"):
        p.step()
    assert p.result is None and "No space left" in caplog.text and "rank_0001_iter_0" in caplog.text
    assert _files(tmp_path) == []                                  # temporary files removed
    strict = FakeProfiler(capture.trace_handler(tmp_path, rank=1, strict=True), last=0, fail=True)
    with pytest.raises(OSError):
        strict.step()
    assert _files(tmp_path) == []


def test_handler_arguments():
    with pytest.raises(ValueError, match="tensorboard-dir"):
        capture.trace_handler(None)
    with pytest.raises(ValueError, match="callable"):
        capture.trace_handler("x", iteration=5)
    assert capture.trace_path("o", 7, 2, compress=False) == Path("o/iteration_7/rank_0002_iter_7.pt.trace.json")


def _last_profiler_step(path) -> int:
    doc = load_json(path)
    return max(int(e["name"].split("#")[1]) for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))


def test_handler_with_torch_profiler(tmp_path, monkeypatch):
    """Real torch: N is the last ProfilerStep#K in the file, whether step() or stop() closes the window."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("PROFILER_WAIT_STEPS", "1")
    monkeypatch.setenv("PROFILER_WARMUP_STEPS", "1")
    monkeypatch.setenv("PROFILER_ACTIVE_STEPS", "2")
    for name, steps in (("closed_by_step", 6), ("closed_by_stop", 3)):
        out = tmp_path / name
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    schedule=capture.profiler_schedule(),
                                    on_trace_ready=capture.trace_handler(out, strict=True)) as prof:
            for _ in range(steps):
                torch.ones(8, 8).sum()
                prof.step()
        (f,) = _files(out)
        n = 3 if name == "closed_by_step" else steps
        assert f == f"iteration_{n}/rank_0000_iter_{n}.pt.trace.json.gz"
        assert _last_profiler_step(out / f) == n
        assert load_json(out / f)["traceName"] == str(out / f)          # not the temporary file's name


def test_megatron_style_loop(tmp_path):
    """The patch's use in Megatron's train(): prof.start() before the loop, prof.step() at the top of
    each iteration, prof.stop() when iteration == --profile-step-end; N = Megatron's iteration number
    (as logged) of the last recorded step."""
    torch = pytest.importorskip("torch")
    start_step, end_step, iteration = 4, 6, 0
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=capture.profiler_schedule(wait=max(start_step - 1, 0), warmup=1 if start_step > 0 else 0,
                                           active=end_step - start_step, repeat=1),
        on_trace_ready=capture.trace_handler(tmp_path, strict=True, iteration=lambda step, start=iteration: start + step))
    prof.start()
    while iteration < 8:
        prof.step()
        with torch.profiler.record_function(f"megatron_iteration#{iteration + 1}"):   # logged as iteration+1
            torch.ones(4).sum()
        iteration += 1
        if iteration == end_step:
            prof.stop()
    (f,) = _files(tmp_path)
    doc = load_json(tmp_path / f)
    logged = sorted(int(e["name"].split("#")[1]) for e in doc["traceEvents"] if e.get("name", "").startswith("megatron_iteration#"))
    assert logged == [4, 5] and f == "iteration_5/rank_0000_iter_5.pt.trace.json.gz"


# ------------------------------------------------------------------ topology writers

def _groups(parsed: dict) -> dict:
    """The group sections of a parse_traceviz_txt result (it may carry more keys: sizes, replicas)."""
    return {k: v for k, v in parsed.items() if k in ("tp", "cp", "ep", "dp", "pp")}


def megatron_groups(world, tp=1, cp=1, ep=1, pp=1, order="tp-cp-ep-dp-pp"):
    """Groups of every dimension for a rank layout (first dimension of ``order`` fastest), the
    way Megatron's RankGenerator lays them out (ep treated as its own dimension)."""
    dims = parse_order(order)
    sizes = {"tp": tp, "cp": cp, "ep": ep, "pp": pp}
    sizes["dp"] = world // (tp * cp * ep * pp)
    coords = []
    for r in range(world):
        c, x = {}, r
        for d in dims:
            c[d], x = x % sizes[d], x // sizes[d]
        coords.append(c)
    out = {}
    for d in ("tp", "cp", "ep", "dp", "pp"):
        g = {}
        for r, c in enumerate(coords):
            g.setdefault(tuple(v for k, v in sorted(c.items()) if k != d), []).append(r)
        out[d] = sorted(g.values())
    return out


def test_traceviz_text_is_exactly_the_issue_layout():
    topo = topology_from_groups({k: v for k, v in megatron_groups(8, tp=2, pp=2).items() if k in ("tp", "pp", "dp")}, 8)
    text = format_traceviz_txt(topo, dt.datetime(2026, 1, 5, 14, 48, 40, 123456), global_batch_size=16)
    assert text == TRACEVIZ_TXT
    assert _groups(parse_traceviz_txt(text)) == {d: topo[d] for d in ("tp", "pp", "dp")}


@pytest.mark.parametrize("world,sizes,order", [
    (8, dict(tp=2, pp=2), "tp-cp-ep-dp-pp"), (16, dict(tp=2, ep=2, pp=2), "tp-cp-ep-dp-pp"),
    (16, dict(tp=2, cp=2, pp=2), "tp-cp-ep-dp-pp"), (8, dict(tp=2, pp=2), "tp-cp-ep-pp-dp"),
    (4, dict(tp=2), "tp-cp-ep-dp-pp"), (1, {}, "tp-cp-ep-dp-pp"), (32, dict(tp=4, ep=2, pp=2), "tp-cp-ep-dp-pp")])
def test_traceviz_round_trip(tmp_path, world, sizes, order):
    groups = megatron_groups(world, order=order, **sizes)
    topo = topology_from_groups(groups, world, order)
    assert {d: topo[d] for d in groups} == groups
    # replicas: every rank with one DP coordinate, i.e. a full model (tp*cp*ep*pp ranks)
    model = sizes.get("tp", 1) * sizes.get("cp", 1) * sizes.get("ep", 1) * sizes.get("pp", 1)
    assert len(topo["replicas"]) == world // model and all(len(r) == model for r in topo["replicas"])
    assert sorted(r for rep in topo["replicas"] for r in rep) == list(range(world))
    assert topo["replicas"] == replicas_by_order(sizes, world, order)
    json_path, txt_path = write_topology_files(tmp_path, topo, dt.datetime(2026, 1, 5, 14, 48, 40))
    assert txt_path.name == "unique_parallel_groups_20260105_144840.txt"
    text = txt_path.read_text()
    parsed = parse_traceviz_txt(text)
    if "replicas" in parsed:
        assert parsed["replicas"] == topo["replicas"]
    parsed = _groups(parsed)
    expected = {d: topo[d] for d in ("tp", "pp", "dp")}
    expected |= {d: topo[d] for d in ("ep", "cp") if sizes.get(d, 1) > 1}          # EP / CP sections only when > 1
    assert parsed == expected
    assert ("EXPERT PARALLEL (EP) GROUPS" in text) == (sizes.get("ep", 1) > 1)
    assert json.loads(json_path.read_text()) == topo
    assert set(topo) == {"world_size", "order", "sizes", "tp", "cp", "ep", "dp", "pp", "replicas"}
    assert topo["sizes"] == {d: sizes.get(d, 1) for d in ("tp", "cp", "ep", "pp")} | {"dp": world // model}
    for path in (json_path, txt_path):
        assert load_topology(path).groups["tp"] == topo["tp"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("world,kw", [(8, dict(tp=2, pp=2)), (16, dict(tp=2, ep=2, pp=2)), (16, dict(tp=2, cp=2, ep=2)),
                                      (16, dict(tp=2, pp=2, order="tp-cp-ep-pp-dp")), (32, dict(tp=2, cp=2, ep=4, pp=2))])
def test_replicas_agree_with_topology_module(world, kw):
    """Megatron's real layout (EP carved out of DP, expert groups from their own rank generator), as
    streamtrace.topology.from_sizes builds it: the same replicas from the groups alone."""
    from streamtrace.topology import model as topology
    if not hasattr(topology, "from_sizes"):
        pytest.skip("streamtrace.topology.from_sizes is not available")
    ref = topology.from_sizes(world, **kw)
    mine = topology_from_groups(ref.groups, world, kw.get("order", "tp-cp-ep-dp-pp"))
    assert {d: mine[d] for d in ref.groups} == ref.groups and mine["replicas"] == ref.replicas


def test_topology_matches_synth_demo():
    from streamtrace.synth.job import SynthSpec, build_topology
    spec = SynthSpec(world_size=8, tp=2, pp=2)
    demo = build_topology(spec)
    mine = topology_from_groups({d: demo[d] for d in ("tp", "dp", "pp")}, 8)
    assert mine.pop("sizes") == {"tp": 2, "cp": 1, "ep": 1, "dp": 2, "pp": 2}
    assert mine == demo


def test_topology_errors():
    with pytest.raises(ValueError, match="TP groups do not split"):
        topology_from_groups({"tp": [[0, 1], [1, 2]]}, 4)
    with pytest.raises(ValueError, match="different sizes"):
        topology_from_groups({"dp": [[0, 1, 2], [3]]}, 4)
    with pytest.raises(ValueError, match="rank order"):
        topology_from_groups({}, 4, order="tp-xx-pp")
    with pytest.raises(ValueError, match="unknown parallel dimension"):
        topology_from_groups({"sp": [[0, 1]]}, 2)
    assert topology_from_groups({"tp": [[1, 0], [0, 1], [3, 2]]}, 4)["tp"] == [[0, 1], [2, 3]]   # de-duplicated


def test_dump_topology_single_process(tmp_path, caplog):
    """Without an initialised process group: the groups given as every group of each dimension."""
    groups = megatron_groups(8, tp=2, pp=2)
    topo = capture.dump_topology(tmp_path, groups={d: groups[d] for d in ("tp", "dp", "pp")}, world_size=8,
                                 global_batch_size=32)
    assert {d: topo[d] for d in groups} == groups and topo["replicas"] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert json.loads((tmp_path / "streamtrace_topology.json").read_text()) == topo
    (txt,) = tmp_path.glob("unique_parallel_groups_*.txt")
    assert "Global Batch Size: 32" in txt.read_text()
    assert _groups(parse_traceviz_txt(txt.read_text())) == {d: groups[d] for d in ("tp", "pp", "dp")}
    with pytest.raises(ValueError, match="do not split"):        # this rank's group only, but world 8
        capture.dump_topology(tmp_path / "x", groups={"tp": [0, 1]}, world_size=8)
    with pytest.raises(ValueError, match="tensorboard-dir"):
        capture.dump_topology(None)
    # unwritable folder: logged, not raised
    blocker = tmp_path / "file"
    blocker.write_text("")
    with caplog.at_level(logging.ERROR, logger="streamtrace.topology.capture"):
        assert capture.dump_topology(blocker / "sub", groups={"tp": [0]})["tp"] == [[0]]
    assert "could not write the topology" in caplog.text


def test_dump_topology_from_megatron_parallel_state(tmp_path, monkeypatch):
    """Megatron's parallel_state (faked: a single process) is used when it is initialised and no
    groups are passed; the global batch size comes from Megatron's args."""
    import types
    ps = types.ModuleType("megatron.core.parallel_state")
    calls = []

    def getter(name):
        def get(**kw):
            calls.append((name, kw))
            return [0]
        return get
    ps.model_parallel_is_initialized = lambda: True
    for name in ("get_tensor_model_parallel_group", "get_context_parallel_group", "get_expert_model_parallel_group",
                 "get_data_parallel_group", "get_pipeline_model_parallel_group"):
        setattr(ps, name, getter(name))
    core = types.ModuleType("megatron.core")
    core.parallel_state = ps
    gv = types.ModuleType("megatron.training.global_vars")
    gv.get_args = lambda: types.SimpleNamespace(global_batch_size=64)
    for name, mod in (("megatron", types.ModuleType("megatron")), ("megatron.core", core),
                      ("megatron.core.parallel_state", ps), ("megatron.training", types.ModuleType("megatron.training")),
                      ("megatron.training.global_vars", gv)):
        monkeypatch.setitem(sys.modules, name, mod)
    topo = capture.dump_topology(tmp_path)
    assert topo["world_size"] == 1 and topo["replicas"] == [[0]]
    assert ("get_data_parallel_group", {"with_context_parallel": False}) in calls and len(calls) == 5
    (txt,) = tmp_path.glob("unique_parallel_groups_*.txt")
    assert "Global Batch Size: 64" in txt.read_text()
    calls.clear()
    capture.dump_topology(tmp_path / "explicit", groups={"tp": [0]})      # explicit groups win
    assert calls == []


# ------------------------------------------------------------------ end to end: a real 4-process job

@pytest.mark.slow
def test_end_to_end_gloo_job(tmp_path):
    pytest.importorskip("torch")
    out, gjson = tmp_path / "run", tmp_path / "groups.json"
    env = dict(os.environ, PROFILE_ALLRANKS="1", PROFILER_WAIT_STEPS="1", PROFILER_WARMUP_STEPS="1",
               PROFILER_ACTIVE_STEPS="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("PROFILER_REPEAT", None)
    job = subprocess.run([sys.executable, str(ROOT / "tests" / "integration" / "e2e_job.py"), str(out), "--steps", "5",
                          "--groups-json", str(gjson)], env=env, capture_output=True, text=True, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]

    # one trace per rank, in iteration_<N>/ with N = the last recorded profiler step (wait 1, warm-up 1, active 1)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["iteration_2"]
    assert _files(out / "iteration_2") == [f"rank_{r:04d}_iter_2.pt.trace.json.gz" for r in range(4)]
    for r in range(4):
        doc = load_json(out / "iteration_2" / f"rank_{r:04d}_iter_2.pt.trace.json.gz")
        assert doc["distributedInfo"]["rank"] == r
        names = {e.get("name") for e in doc["traceEvents"]}
        assert {"forward_step", "backward_step", "optimizer", "ProfilerStep#2"} <= names
        assert doc["traceName"].endswith(f"rank_{r:04d}_iter_2.pt.trace.json.gz")

    # the topology equals the groups the job created
    made = json.loads(gjson.read_text())
    topo = json.loads((out / "streamtrace_topology.json").read_text())
    assert topo["world_size"] == 4 and topo["tp"] == made["tp"] == [[0, 1], [2, 3]] and topo["dp"] == made["dp"]
    assert topo["pp"] == topo["cp"] == topo["ep"] == [[0], [1], [2], [3]] and topo["replicas"] == [[0, 1], [2, 3]]
    (txt,) = out.glob("unique_parallel_groups_*.txt")
    assert _groups(parse_traceviz_txt(txt.read_text())) == {"tp": made["tp"], "pp": topo["pp"], "dp": made["dp"]}
    from streamtrace.topology import model as topology
    if hasattr(topology, "from_trace_folder"):           # the traces' pg_config tells the same story
        from_traces = topology.load_topology(out / "iteration_2")
        assert from_traces.groups["tp"] == made["tp"] and from_traces.groups["dp"] == made["dp"]

    merged = tmp_path / "merged.json"
    r = run_cli("merge", out, "-o", merged)
    assert r.returncode == 0, r.stderr
    r = run_cli("validate", "--json", merged)
    report = json.loads(r.stdout)
    assert {k: report["problems"][k] for k in ("missing_field", "duplicate_flow", "cross_rank_flow")} == \
        {"missing_field": 0, "duplicate_flow": 0, "cross_rank_flow": 0}
    assert sorted(x["rank"] for x in load_json(merged)["streamtrace"]["ranks"]) == [0, 1, 2, 3]

    r = run_cli("analyze", out, "-o", tmp_path / "A")
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "A" / "summary.json").read_text())
    assert sorted(x["rank"] for x in summary["ranks"]) == [0, 1, 2, 3] and not summary.get("failed")

    # the epilogue on the job's output: report naming all 4 ranks, charts, a merged trace validate accepts
    r = run_cli("epilogue", out, "--strict")
    assert r.returncode == 0, r.stderr
    st = out / "streamtrace"
    rep = json.loads((st / "report.json").read_text())
    md = (st / "run.md").read_text()
    assert rep["configuration"]["world_size"] == 4
    assert sorted(x["rank"] for x in rep["ranks"]["per_rank"]) == [0, 1, 2, 3]
    assert md.startswith("# run") and "## Where the time went, per rank" in md
    assert list((st / "charts").glob("*.png"))
    merged_gpu = st / "iteration_2" / "merged_gpu.json.gz"
    r = run_cli("validate", "--json", merged_gpu)
    v = json.loads(r.stdout)
    assert {k: v["problems"][k] for k in ("missing_field", "duplicate_flow", "cross_rank_flow")} == \
        {"missing_field": 0, "duplicate_flow": 0, "cross_rank_flow": 0}


@pytest.mark.slow
def test_dump_topology_with_real_megatron_parallel_state(tmp_path):
    """Megatron-LM's own parallel_state (MEGATRON_LM_DIR) makes a TP2 x DP2 layout on 4 gloo processes;
    dump_topology, given no groups, reads it from there."""
    pytest.importorskip("torch")
    mdir = os.environ.get("MEGATRON_LM_DIR")
    if not mdir:
        pytest.skip("MEGATRON_LM_DIR is not set")
    out, gjson = tmp_path / "run", tmp_path / "groups.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    job = subprocess.run([sys.executable, str(ROOT / "tests" / "integration" / "e2e_job.py"), str(out), "--steps", "0",
                          "--megatron", mdir, "--groups-json", str(gjson)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    made = json.loads(gjson.read_text())
    topo = json.loads((out / "streamtrace_topology.json").read_text())
    assert topo["tp"] == made["tp"] and topo["dp"] == made["dp"] and topo["replicas"] == [[0, 1], [2, 3]]
    (txt,) = out.glob("unique_parallel_groups_*.txt")
    assert _groups(parse_traceviz_txt(txt.read_text())) == {"tp": made["tp"], "pp": topo["pp"], "dp": made["dp"]}
