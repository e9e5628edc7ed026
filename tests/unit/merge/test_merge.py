"""``streamtrace merge`` on real traces: counts, ids, processes, time, filters, bad input."""
from __future__ import annotations

import gzip
import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

from streamtrace.trace.discover import iteration_from_path, rank_from_name
from streamtrace.merge import ID_BITS, PROCESS_META, MergeOptions, merge
from streamtrace.validate.check import validate

from support import CPU3D, REAL, exact_ns, load_json, need_shared, run_cli

PROBLEMS_FREE = {"missing_field": 0, "negative_dur": 0, "duplicate_flow": 0, "cross_rank_flow": 0}


def source_problems(paths):
    tot = Counter()
    for p in paths:
        tot.update(validate(p)["problems"])
    return tot


def check_merged(out, sources, rank_of):
    """Invariants every merged trace must satisfy (independent of merge's code:
    it reads the output with plain json)."""
    doc = load_json(out)
    events = doc["traceEvents"]
    st = doc["streamtrace"]
    pmap = {int(k): v for k, v in st["process_map"].items()}
    # every event carries its rank and sits in a process of that rank
    for e in events:
        assert e["args"]["rank"] == pmap[e["pid"]]["rank"]
    # event counts: in == out, minus Kineto's process metadata that merge replaces
    n_src = Counter()
    for p in sources:
        evs = load_json(p)["traceEvents"]
        n_src[rank_of[p]] = sum(1 for e in evs if not (e.get("ph") == "M" and e.get("name") in PROCESS_META))
    n_out = Counter(e["args"]["rank"] for e in events
                    if not (e["ph"] == "M" and e["name"] in PROCESS_META))
    assert n_out == n_src
    # pids: one merged pid per (rank, original pid), each labelled
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    used = {e["pid"] for e in events}
    assert used <= set(names) and all(names[p].startswith(f"Rank {pmap[p]['rank']} · ") for p in used)
    assert len({(v["rank"], json.dumps(v["pid"])) for v in pmap.values()}) == len(pmap)
    # sort order: rank by rank, CPU above GPUs
    sort = {e["pid"]: e["args"]["sort_index"] for e in events if e["ph"] == "M" and e["name"] == "process_sort_index"}
    order = sorted(used, key=lambda p: sort[p])
    ranks_in_order = [pmap[p]["rank"] for p in order]
    assert ranks_in_order == sorted(ranks_in_order)
    for r in set(ranks_in_order):
        kinds = [pmap[p]["kind"] for p in order if pmap[p]["rank"] == r]
        if "cpu" in kinds and "gpu" in kinds:
            assert kinds.index("gpu") > max(i for i, k in enumerate(kinds) if k == "cpu")
    # ids: correlation / flow ids never shared between ranks; raw values kept
    owner = {}
    for e in events:
        keys = []
        if e["ph"] in ("s", "f", "t"):
            keys.append(("flow", e.get("cat"), e["id"]))
        if "correlation" in e["args"]:
            keys.append(("corr", e["args"]["correlation"]))
            assert e["args"]["correlation"] == (e["args"]["rank"] << ID_BITS) + e["args"]["raw correlation"]
        for k in keys:
            assert owner.setdefault(k, e["args"]["rank"]) == e["args"]["rank"]
    rep = validate(out)
    assert {k: rep["problems"][k] for k in PROBLEMS_FREE} == PROBLEMS_FREE
    assert rep["problems"]["bad_nesting"] == source_problems(sources)["bad_nesting"]
    return doc


def test_cpu3d_eight_ranks(tmp_path):
    need_shared()
    out = tmp_path / "m.json.gz"
    res = merge([CPU3D], out, MergeOptions(jobs=2))
    assert len(res) == 1 and res[0]["ranks"] == list(range(8)) and res[0]["iteration"] == 4
    sources = sorted((CPU3D / "iteration_4").glob("*.json"))
    doc = check_merged(out, sources, {p: int(p.name[5:9]) for p in sources})
    assert [r["rank"] for r in doc["streamtrace"]["ranks"]] == list(range(8))
    assert all(r["distributedInfo"]["world_size"] == 8 for r in doc["streamtrace"]["ranks"])


def _link(tmp_path, names):
    d = tmp_path / "in"
    d.mkdir()
    for n in names:
        os.symlink(REAL / n, d / n)
    return d


GROUP = ["a100_resnet_ddp_rank0_of2.json.gz", "v100_ddp_rank1_of2.json.gz", "a100_rank3_of8.json.gz",
         "cpu_only_gloo_rank34_of300.json.gz"]


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_real_traces_as_ranks(tmp_path, suffix):
    need_shared()
    d = _link(tmp_path, GROUP)
    out = tmp_path / f"m{suffix}"
    res = merge([d], out, MergeOptions(jobs=2))[0]
    assert res["ranks"] == [0, 1, 3, 34]
    assert (gzip.open(out).read(2) if suffix.endswith("gz") else out.read_bytes()[:2]) == b'{"'
    check_merged(out, [d / n for n in GROUP], {d / n: r for n, r in zip(GROUP, [0, 1, 3, 34])})


def test_real_pair_and_rank_map(tmp_path):
    need_shared()
    names = ["a100_recsys_sampled_rank0_of128.json.gz", "a100_recsys_sampled_rank1_of128.json.gz",
             "no_rank_metadata.json.gz", "no_distributed_info.json.gz", "legacy_format_rank1.json.gz"]
    d = _link(tmp_path, names[:2] + names[2:4])
    rmap = tmp_path / "ranks.txt"
    rmap.write_text("no_rank_metadata.json.gz 5\nno_distributed_info.json.gz 6\n")
    out = tmp_path / "m.json"
    res = merge([d], out, MergeOptions(jobs=1), rank_map=str(rmap))[0]
    assert res["ranks"] == [0, 1, 5, 6]
    check_merged(out, [d / n for n in names[:4]], {d / n: r for n, r in zip(names[:4], [0, 1, 5, 6])})


def test_one_rank_merge_equals_source(tmp_path):
    """Modulo the documented rewrites, a one-rank merge is the source."""
    need_shared()
    src = REAL / "v100_ddp_rank1_of2.json.gz"
    out = tmp_path / "one.json"
    merge([src], out, MergeOptions(jobs=1))
    srcdoc = load_json(src)
    dec = load_json(out, decimal=True)["traceEvents"]
    srcdec = load_json(src, decimal=True)["traceEvents"]
    got = [e for e in load_json(out)["traceEvents"]]
    kept = [i for i, e in enumerate(srcdoc["traceEvents"]) if not (e.get("ph") == "M" and e.get("name") in PROCESS_META)]
    assert len(got) - sum(1 for e in got if e["ph"] == "M" and e["name"] in PROCESS_META) == len(kept)
    pmap = {int(k): v for k, v in load_json(out)["streamtrace"]["process_map"].items()}
    for j, i in enumerate(kept):
        a, b = srcdoc["traceEvents"][i], dict(got[j])
        assert pmap[b["pid"]]["pid"] == a["pid"]
        assert exact_ns(dec[j]["ts"]) == exact_ns(srcdec[i]["ts"])   # same clock: one rank, shift 0
        args = dict(b["args"])
        assert args.pop("rank") == 1
        for k in ("correlation", "External id"):
            if k in args:
                assert args[k] == (1 << ID_BITS) + args.pop(f"raw {k}")
                args[k] = a["args"][k]
        if b["ph"] in ("s", "f"):
            assert b["id"] == (1 << ID_BITS) + a["id"]
            b["id"] = a["id"]
        b["args"], b["pid"], b["ts"] = args, a["pid"], a["ts"]
        if "args" not in a and not args:
            del b["args"]
        assert b == a


def test_gzip_output_is_reproducible(tmp_path):
    """The same inputs merged twice into a .json.gz give the same bytes (no file name, no time in
    any gzip member header), with 1 and 2 worker processes."""
    from streamtrace.synth.job import SynthSpec, generate_job
    generate_job(tmp_path / "job", SynthSpec(world_size=4, tp=2, pp=2, microbatches=2))
    outs = []
    for k, jobs in enumerate((1, 2, 2)):
        (tmp_path / f"o{k}").mkdir()
        merge([tmp_path / "job"], tmp_path / f"o{k}" / "m.json.gz", MergeOptions(jobs=jobs))
        outs.append((tmp_path / f"o{k}" / "m.json.gz").read_bytes())
    assert outs[0] == outs[1] == outs[2]
    assert json.loads(gzip.decompress(outs[0]))["traceEvents"]
    import zlib
    rest, members = outs[0], 0
    while rest:                                     # every member: no FNAME flag, mtime 0 (RFC 1952)
        assert rest[:2] == b"\x1f\x8b" and not rest[3] & 0x08 and rest[4:8] == b"\0\0\0\0", members
        d = zlib.decompressobj(31)
        d.decompress(rest)
        rest, members = d.unused_data, members + 1
    assert members >= 1


def test_time_alignment_global_and_first_step(tmp_path):
    need_shared()
    # two ranks of one job with different base times: one clock via baseTimeNanoseconds
    d = tmp_path / "in"
    d.mkdir()
    for r, base in ((0, 1_000_000_000), (1, 1_000_500_000)):   # rank 1's clock starts 500 us later
        evs = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 10 + r, "tid": 1,
                "ts": 100.25 + r, "dur": 50}]
        (d / f"rank{r}_trace.json").write_text(json.dumps({"traceEvents": evs, "baseTimeNanoseconds": base}))
    out = tmp_path / "g.json"
    merge([d], out, MergeOptions(jobs=1))
    doc = load_json(out, decimal=True)
    ts = {e["args"]["rank"]: exact_ns(e["ts"]) for e in doc["traceEvents"] if e["ph"] == "X"}
    assert ts == {0: 100_250, 1: 101_250 + 500_000}
    assert doc["baseTimeNanoseconds"] == 1_000_000_000
    merge([d], out, MergeOptions(jobs=1, align="first-step"))
    doc = load_json(out, decimal=True)
    ts = {e["args"]["rank"]: exact_ns(e["ts"]) for e in doc["traceEvents"] if e["ph"] == "X"}
    assert ts[0] == ts[1]


def test_filters(tmp_path):
    need_shared()
    out = tmp_path / "f.json"
    merge([CPU3D], out, MergeOptions(jobs=1, ranks={0, 5}, drop_cat=frozenset({"cpu_op"})))
    evs = load_json(out)["traceEvents"]
    assert {e["args"]["rank"] for e in evs} == {0, 5}
    assert not any(e.get("cat") == "cpu_op" for e in evs)
    assert any(e.get("cat") == "user_annotation" for e in evs)


def test_gpu_only_and_window(tmp_path):
    need_shared()
    d = _link(tmp_path, GROUP[:2])
    out = tmp_path / "g.json"
    merge([d], out, MergeOptions(jobs=1, gpu_only=True))
    doc = load_json(out)
    pmap = {int(k): v for k, v in doc["streamtrace"]["process_map"].items()}
    assert doc["traceEvents"] and all(pmap[e["pid"]]["kind"] == "gpu" for e in doc["traceEvents"])
    assert validate(out)["ok"]
    out2 = tmp_path / "w.json"
    merge([d], out2, MergeOptions(jobs=1, window_ms=(100, 150)))
    rep = validate(out2)
    assert rep["ok"] and rep["notices"]["unmatched_flow"] <= validate(REAL / GROUP[0])["notices"]["unmatched_flow"] \
        + validate(REAL / GROUP[1])["notices"]["unmatched_flow"]
    doc = load_json(out2, decimal=True)
    full = tmp_path / "full.json"
    merge([d], full, MergeOptions(jobs=1))
    t0 = min(exact_ns(e["ts"]) for e in load_json(full, decimal=True)["traceEvents"] if e["ph"] != "M")
    lo, hi = t0 + 100_000_000, t0 + 150_000_000
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    want = [e for e in load_json(full, decimal=True)["traceEvents"] if e["ph"] == "X"
            and exact_ns(e["ts"]) <= hi and exact_ns(e["ts"]) + exact_ns(e["dur"]) >= lo]
    assert xs and len(xs) == len(want)


def test_steps_filter(tmp_path):
    need_shared()
    d = _link(tmp_path, ["a100_resnet_ddp_rank0_of2.json.gz"])
    src = load_json(d / "a100_resnet_ddp_rank0_of2.json.gz", decimal=True)["traceEvents"]
    steps = {e["name"]: (exact_ns(e["ts"]), exact_ns(e["ts"]) + exact_ns(e["dur"])) for e in src
             if e.get("name", "").startswith("ProfilerStep#")}
    nums = sorted(int(k[13:]) for k in steps)
    lo, hi = steps[f"ProfilerStep#{nums[1]}"][0], steps[f"ProfilerStep#{nums[1]}"][1]
    out = tmp_path / "s.json"
    merge([d], out, MergeOptions(jobs=1, steps=(nums[1], nums[1])))
    got = load_json(out, decimal=True)["traceEvents"]
    want = [e for e in src if e.get("ph") not in ("M",) and "ts" in e and
            exact_ns(e["ts"]) <= hi and exact_ns(e["ts"]) + exact_ns(e.get("dur", 0)) >= lo and
            e.get("ph") not in ("s", "f")]
    got_x = [e for e in got if e["ph"] not in ("M", "s", "f")]
    assert len(got_x) == len(want)
    assert validate(out)["ok"]


def test_iterations(tmp_path):
    need_shared()
    for it in (4, 5):
        dd = tmp_path / "run" / f"iteration_{it}"
        dd.mkdir(parents=True)
        for p in sorted((CPU3D / "iteration_4").glob("*.json"))[:2]:
            os.symlink(p, dd / p.name.replace("iter_4", f"iter_{it}"))
    out = tmp_path / "m.json"
    res = merge([tmp_path / "run"], out, MergeOptions(jobs=1))
    assert [Path(r["output"]).name for r in res] == ["m_iter4.json", "m_iter5.json"]
    res = merge([tmp_path / "run"], out, MergeOptions(jobs=1, iterations=[5]))
    assert len(res) == 1 and res[0]["output"] == str(out) and res[0]["iteration"] == 5


@pytest.mark.parametrize("path,rank,it", [
    ("x/iteration_10/rank_0003_iter_10.pt.trace.json", 3, 10),
    ("x/torch_profile/rank-3.json.gz", 3, None),
    ("x/profile_traces/iteration_10/rank3_trace.json", 3, 10),
    ("x/profile_traces/iteration_10/rank12_trace.json.gz", 12, 10),
    ("x/node07_41523.1700000000123.pt.trace.json", None, None),
])
def test_layouts(path, rank, it):
    assert rank_from_name(path) == rank
    assert iteration_from_path(path) == it


# -- CLI and bad input -------------------------------------------------------------

def test_cli_merge_and_validate(tmp_path):
    need_shared()
    out = tmp_path / "cli.json.gz"
    r = run_cli("merge", CPU3D, "-o", out, "-j", "2")
    assert r.returncode == 0, r.stderr
    assert "merged 8 ranks" in r.stdout and "ui.perfetto.dev" in r.stdout
    # gloo annotations overlap in the source too: reported as the inputs' own, not a failure of merge
    assert "merge added no problem (kept from the inputs: bad_nesting 32)" in r.stdout
    r = run_cli("validate", out)
    assert r.returncode == 1 and "PROBLEMS" in r.stdout and "bad_nesting 32" in r.stdout


def test_cli_megatron_options(tmp_path):
    need_shared()
    d = tmp_path / "torch_profiler"
    shutil.copytree(CPU3D / "iteration_4", d)
    r = run_cli("merge", "--input_dir", d, "--output_file", "merged.json")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "merged.json").exists()       # a bare name goes beside the input folder


def _bad_inputs(tmp_path):
    good = b'{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":1,"pid":1,"tid":1}],"distributedInfo":{"rank":0}}'
    cases = {
        "truncated": good[:40],
        "corrupt_gzip": gzip.compress(good)[:12] + b"\x00" * 30 + gzip.compress(good)[42:],
        "truncated_gzip": gzip.compress(good * 1)[:-12],
        "invalid_utf8": good.replace(b'"a"', b'"\xff"'),
        "not_json": b"<html>",
        "missing_comma": good.replace(b"}],", b"} {}],"),
    }
    return {k: (tmp_path / f"rank_{i}.json", v) for i, (k, v) in enumerate(cases.items())}


@pytest.mark.parametrize("case", ["truncated", "corrupt_gzip", "truncated_gzip", "invalid_utf8", "not_json",
                                  "missing_comma"])
def test_bad_input_exit_1_no_output(tmp_path, case):
    path, data = _bad_inputs(tmp_path)[case]
    path.write_bytes(data)
    out = tmp_path / "out" / "m.json.gz"
    r = run_cli("merge", path, "-o", out)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in r.stderr
    assert not out.exists() and not any(p.name != "m.json.gz" for p in out.parent.glob("*")) if out.parent.exists() else True


def test_salvage_keeps_complete_events(tmp_path):
    good = (b'{"traceEvents":[' + b",".join(b'{"ph":"X","name":"a","ts":%d,"dur":1,"pid":1,"tid":1}' % i
                                            for i in range(10)) + b'],"distributedInfo":{"rank":0}}')
    p = tmp_path / "rank_0.json"
    p.write_bytes(good[:good.index(b'"ts":7')])
    out = tmp_path / "m.json"
    r = run_cli("merge", p, "-o", out, "--salvage")
    assert r.returncode == 0 and "warning" in r.stderr and "kept 7" in r.stderr
    assert sum(1 for e in load_json(out)["traceEvents"] if e["ph"] == "X") == 7


def test_duplicate_ranks(tmp_path):
    need_shared()
    d = tmp_path / "in"
    d.mkdir()
    for name in ("a.json", "b.json"):
        shutil.copy(CPU3D / "iteration_4" / "rank_0001_iter_4.pt.trace.json", d / name)
    r = run_cli("merge", d, "-o", tmp_path / "m.json")
    assert r.returncode == 1 and "a.json" in r.stderr and "b.json" in r.stderr and "rank 1" in r.stderr


def test_usage_error_exit_2(tmp_path):
    assert run_cli("merge", "--no-such-option").returncode == 2
    assert run_cli("frobnicate").returncode == 2


def test_version_names_ijson_backend():
    r = run_cli("--version")
    assert r.returncode == 0 and "yajl2_c" in r.stdout


def test_workers_inherit_loaded_kernels(tmp_path):
    """The parent loads merge's kernels before forking (rankmerge.warm_kernels), with
    each plan's options, and leaves nothing behind in the output folder."""
    from streamtrace.merge.rank import RankPlan, merge_rank, warm_kernels
    src = tmp_path / "rank_0.json"
    src.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 5, "dur": 2}]}))
    for compress, keep in ((False, None), (True, (0, 10 ** 12))):
        plan = RankPlan(str(src), 0, 0, str(tmp_path / "seg"), compress, 1, frozenset({"x"}), False, keep,
                        set() if keep else None, False)
        warm_kernels(plan)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["rank_0.json"]
        assert merge_rank(plan).events_fast == 1
        os.unlink(tmp_path / "seg")
    out = tmp_path / "out" / "m.json"
    out.parent.mkdir()
    merge([str(src)], out, MergeOptions(jobs=2))
    assert [p.name for p in out.parent.iterdir()] == ["m.json"] and validate(out)["ok"]


@pytest.mark.parametrize("jobs", [1, 2])
def test_events_larger_than_the_read_block_and_output_buffer(tmp_path, jobs):
    """An event bigger than merge's read block and output buffer (several MB of args: a huge
    stack) is rewritten whole, as a small one is; the events around it too."""
    from streamtrace.merge.rank import OUT_BYTES, READ_BLOCK
    big = "x" * (2 * max(OUT_BYTES, READ_BLOCK) + 12345)
    evs = [{"ph": "X", "name": f"k{i}", "ts": 1000 + 10 * i, "dur": 5, "pid": 7, "tid": 1,
            "args": {"correlation": i, **({"stack": big} if i in (3, 4) else {})}} for i in range(9)]
    for r in range(2):
        (tmp_path / f"rank{r}_trace.json").write_text(json.dumps({"traceEvents": evs,
                                                                  "distributedInfo": {"rank": r}}))
    out = tmp_path / "merged.json"
    res = merge([tmp_path / "rank0_trace.json", tmp_path / "rank1_trace.json"], out, MergeOptions(jobs=jobs))[0]
    assert res["validation"]["ok"]
    got = [e for e in load_json(out)["traceEvents"] if e["ph"] == "X"]
    assert [(e["args"]["rank"], e["name"], e["args"]["raw correlation"], len(e["args"].get("stack", "")))
            for e in got] == [(r, f"k{i}", i, len(big) if i in (3, 4) else 0) for r in range(2) for i in range(9)]
