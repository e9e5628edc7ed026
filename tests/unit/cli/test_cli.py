"""The command line's conventions (issue 17): exit codes and one-line messages, --help with examples,
one short flag per meaning, -q/-v on every subcommand, one -j default, one list syntax."""
from __future__ import annotations

import inspect
import re

import pytest

from support import run_cli
from streamtrace.cli import COMMANDS, build_parser
from streamtrace.cli.common import SHORT_FLAGS, parse_list
from streamtrace.runtime.errors import UsageError


def _subparsers():
    return build_parser().commands


def test_bare_command_exits_2_with_usage():
    r = run_cli()
    assert r.returncode == 2
    assert r.stderr.startswith("usage: streamtrace") and "streamtrace demo" in r.stderr


@pytest.mark.parametrize("args, needle", [
    (["merge"], "give at least one INPUT"),
    (["merge", "x.json", "--ranks", "abc"], "bad --ranks 'abc'"),
    (["merge", "x.json", "--window", "5"], "bad --window '5'"),
    (["merge", "x.json", "--steps", "3,7"], "one window"),
    (["merge", "x.json", "-j", "-1"], "bad --jobs -1"),
    (["merge", "x.json", "-w", "1:2"], "unrecognized arguments: -w"),
    (["analyze"], "give at least one INPUT"),
    (["aggregate"], "give at least one analysed folder"),
    (["aggregate", "a", "--iterations", "x"], "bad --iterations 'x'"),
    (["report", "a", "--global-batch", "16"], "--seq-len"),
    (["topology"], "give --world-size N"),
    (["epilogue", "r", "--seq-len", "10"], "--global-batch"),
    (["demo", "d", "--world-size", "6"], "bad --world-size 6"),
])
def test_usage_errors_exit_2_with_one_plain_line(args, needle):
    r = run_cli(*args)
    assert r.returncode == 2, (args, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "Error:" not in r.stderr and "Traceback" not in r.stderr      # no class names (CommandError:)


def test_input_errors_exit_1(tmp_path):
    r = run_cli("merge", tmp_path / "nothing-here", "-o", tmp_path / "o.json")
    assert r.returncode == 1 and "no such file" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("aggregate", tmp_path, "-o", tmp_path / "o")
    assert r.returncode == 1 and "summary.json" in r.stderr


def test_verbose_shows_the_traceback(tmp_path):
    r = run_cli("aggregate", tmp_path, "-o", tmp_path / "o", "-v")
    assert r.returncode == 1 and "Traceback" in r.stderr


@pytest.mark.parametrize("name", [f.__name__ for f in COMMANDS])
def test_help_has_examples_and_no_noise(name):
    r = run_cli(name, "--help")
    assert r.returncode == 0
    out = r.stdout
    examples = out.split("examples:", 1)[1] if "examples:" in out else ""
    assert len(re.findall(rf"^  streamtrace {name}\b", examples, re.M)) >= 2, out
    assert "(default: -)" not in out and "(default: None)" not in out
    flat = " ".join(out.split())
    for opt in re.split(r"\s(?=-{1,2}[a-z])", flat):
        assert opt.count("(default:") <= 1, opt
    assert re.search(r"-q, --quiet", out) and re.search(r"-v, --verbose", out)


def test_top_level_help_speaks_to_users():
    r = run_cli("--help")
    assert r.returncode == 0
    assert ":mod:" not in r.stdout and "argh" not in r.stdout and "Python API" not in r.stdout
    assert "streamtrace epilogue RUN_DIR" in r.stdout and "examples" in r.stdout
    for f in COMMANDS:
        assert f.__name__ in r.stdout


def test_one_short_flag_per_meaning_and_one_jobs_default():
    meaning: dict = {}
    for name, sub in _subparsers().items():
        for a in sub._actions:
            shorts = [o for o in a.option_strings if len(o) == 2]
            longs = [o for o in a.option_strings if o.startswith("--")]
            for s in shorts:
                meaning.setdefault(s, set()).add(a.dest if s != "-o" else "output")
            if "--jobs" in longs:                      # 0 = all cores, everywhere (the function's default)
                fn = {f.__name__: f for f in COMMANDS}[name]
                assert inspect.signature(fn).parameters[a.dest].default == 0, name
            if set(longs) & {"--ranks", "--iterations", "--steps", "--chart-ranks"}:
                assert a.nargs is None, (name, longs)  # one value in the list syntax, not nargs="+"
    for s, dests in meaning.items():
        assert len(dests) == 1, (s, dests)
    assert set(meaning) <= {"-h", "-o", "-j", "-q", "-v", "-i"} == set(SHORT_FLAGS)
    assert all(set(SHORT_FLAGS[s]) >= {o for a in sub._actions if s in a.option_strings for o in a.option_strings
                                       if o.startswith("--")} for sub in _subparsers().values() for s in meaning)


def test_options_are_declared_not_inferred():
    """Every option of a subcommand is one it declares (cli/common.option, no name inferred from its parameters:
    no ``-s`` for ``--strict``, no ``--as-json`` beside ``--json``), and each declared parameter is one of the
    function's, so that its signature's default is the option's."""
    for name, sub in _subparsers().items():
        fn = {f.__name__: f for f in COMMANDS}[name]
        declared = {n for names, _ in fn.OPTIONS for n in names} | {"-h", "--help"}
        assert {o for a in sub._actions for o in a.option_strings} == {o for o in declared if o.startswith("-")}
        params = inspect.signature(fn).parameters
        assert {a.dest for a in sub._actions if a.dest != "help"} <= set(params), name
    r = run_cli("validate", "-s", "x")
    assert r.returncode == 2 and "unrecognized arguments: -s" in r.stderr


def test_every_subcommand_has_quiet_verbose_and_jobs_where_it_works():
    for name, sub in _subparsers().items():
        opts = {o for a in sub._actions for o in a.option_strings}
        assert {"-q", "--quiet", "-v", "--verbose"} <= opts, name


def test_list_syntax():
    assert parse_list("0-3,7", "--ranks") == [0, 1, 2, 3, 7]
    assert parse_list("12", "--steps") == [12]
    assert parse_list("5,5,1", "--x") == [1, 5]
    for bad in ("abc", "3-1", "", "1-2-3"):
        with pytest.raises(UsageError):
            parse_list(bad, "--ranks")


def test_progress_bar_only_on_a_terminal_or_when_asked():
    from streamtrace.runtime.progress import progress_bar
    assert progress_bar(3, "x", show=False).disable
    assert not progress_bar(3, "x", show=True).disable
    assert progress_bar(3, "x").disable          # pytest's stderr is no terminal


def test_analyze_prints_one_summary_line_for_many_ranks(monkeypatch, capsys):
    """64 ranks: one line (min/median/max), not 64; -v: one line per rank; -q: nothing."""
    import importlib

    from streamtrace.cli import main
    A = importlib.import_module("streamtrace.analyze")      # the package (streamtrace.analyze is the function)
    ranks = [{"rank": r, "iteration": 10, "warnings": [],
              "devices": {str(r % 8): {"busy_us": 1000.0 * (r + 1), "comm_us": 500.0, "overlap_pct": 10.0 + r}}}
             for r in range(64)]
    monkeypatch.setattr(A, "analyze", lambda inputs, outdir, opt: {"ranks": ranks, "failed": [], "seconds": 1.0})
    assert main(["analyze", "x", "-o", "y"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2, out
    assert "64 ranks, 64 GPUs: busy median 32.5 ms (min 1.0, max 64.0)" in out[0]
    assert "overlap median 41.5 % of comm (min 10.0, max 73.0)" in out[0]
    assert main(["analyze", "x", "-o", "y", "-v"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("rank ") for line in out) == 64
    assert main(["analyze", "x", "-o", "y", "-q"]) == 0
    assert capsys.readouterr().out == ""


def _usage_error(argv, capsys):
    """``main(argv)`` as the command runs it: a usage error's exit code and its stderr."""
    from streamtrace.cli import main
    with pytest.raises(SystemExit) as e:
        main(argv)
    return e.value.code, capsys.readouterr().err


def test_option_typo_gets_did_you_mean_and_the_subcommand_help(capsys):
    code, err = _usage_error(["merge", "x.json", "--gpu-onyl"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--gpu-onyl" in err and "did you mean --gpu-only?" in err and "see streamtrace merge --help" in err
    code, err = _usage_error(["analyze", "x.json", "--chuncked"], capsys)
    assert code == 2 and "did you mean --chunked" in err and "streamtrace analyze --help" in err
    code, err = _usage_error(["report", "x", "--zzzzzz"], capsys)      # nothing close: no guess
    assert code == 2 and "did you mean" not in err and "streamtrace report --help" in err


def test_snake_case_options_are_accepted_like_input_dir(tmp_path):
    """``--gpu_only`` is ``--gpu-only``, as Megatron's ``--input_dir`` is accepted."""
    from streamtrace.cli import build_parser, spell_options
    p = build_parser()
    assert spell_options(p, ["merge", "a", "--gpu_only", "--drop_cat=x"]) == ["merge", "a", "--gpu-only",
                                                                              "--drop-cat=x"]
    assert spell_options(p, ["merge", "--input_dir", "d"]) == ["merge", "--legacy-input-dir", "d"]
    assert spell_options(p, ["topology", "--world_size", "8"]) == ["topology", "--world-size", "8"]
    assert spell_options(p, ["demo", "x_y"]) == ["demo", "x_y"]                    # values are left alone


def test_top_level_help_keeps_whole_sentences():
    text = build_parser().format_help()
    helps = {name: " ".join(sub.description.split()) for name, sub in _subparsers().items()}
    flat = " ".join(text.split())
    for name, desc in helps.items():
        first = re.split(r"(?<!e\.g)(?<!i\.e)\.\s", desc)[0].rstrip(".") + "."
        assert first in flat, (name, first)


def test_topology_sizes_that_do_not_fit_are_a_usage_error(capsys, tmp_path):
    from streamtrace.cli import main
    assert main(["topology", "--tp", "3", "--world-size", "8"]) == 2
    assert "not a multiple" in capsys.readouterr().err
    assert main(["topology", "--from", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "--topology FILE" not in err and "streamtrace topology --tp" in err


def test_epilogue_quiet_and_verbose_flags(tmp_path):
    """-q/--quiet is the epilogue's ``progress=False`` (no progress lines, the failure and final line
    stay); -v is ``verbose``; both at once is a usage error."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    loud = run_cli("epilogue", str(run_dir), "-o", str(tmp_path / "a"))
    quiet = run_cli("epilogue", str(run_dir), "-o", str(tmp_path / "b"), "--quiet")
    q = run_cli("epilogue", str(run_dir), "-o", str(tmp_path / "c"), "-q")
    assert loud.returncode == quiet.returncode == q.returncode == 1
    assert "topology" in loud.stderr and "FAILED discover" in loud.stderr
    for r in (quiet, q):
        assert "topology" not in r.stderr and "FAILED discover" in r.stderr, r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith("streamtrace: ")     # the one-line error stays
    both = run_cli("epilogue", str(run_dir), "-q", "-v")
    assert both.returncode == 2 and "not both" in both.stderr


def test_epilogue_full_flag_is_gpu_only_false(tmp_path):
    """--full (EpilogueOptions.gpu_only=False, merge's spelling): merged.json.gz with the CPU processes too;
    without it, merged_gpu.json.gz holds none of the CPU ops (counted in the raw output with gzip + json)."""
    import gzip
    import json
    from streamtrace.synth.job import SynthSpec, generate_job
    run_dir = tmp_path / "run"
    generate_job(run_dir, SynthSpec(world_size=2, tp=2, pp=1, layers=1, microbatches=1))

    def cpu_ops(path):
        return sum(e.get("cat") == "cpu_op" for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"])
    full = run_cli("epilogue", run_dir, "-o", tmp_path / "full", "--full", "--no-charts", "-j", "1", "-q")
    assert full.returncode == 0, full.stderr
    merged = list((tmp_path / "full").glob("*/merged*.json.gz"))
    assert [p.name for p in merged] == ["merged.json.gz"] and cpu_ops(merged[0]) > 0
    gpu = run_cli("epilogue", run_dir, "-o", tmp_path / "gpu", "--no-charts", "-j", "1", "-q")
    assert gpu.returncode == 0, gpu.stderr
    merged = list((tmp_path / "gpu").glob("*/merged*.json.gz"))
    assert [p.name for p in merged] == ["merged_gpu.json.gz"] and cpu_ops(merged[0]) == 0


@pytest.mark.parametrize("args", [("merge", "{t}", "-o", "-"), ("merge", "{t}", "--output-file=-"),
                                  ("merge", "--input_dir", "{d}", "--output_file", "-"),
                                  ("analyze", "{t}", "-o", "-"), ("aggregate", "{d}", "-o", "-"),
                                  ("whatif", "{d}", "--change", "comm=0.5", "-o", "-")])
def test_dash_as_an_output_is_a_usage_error_and_writes_nothing(tmp_path, args):
    """``-o -`` is not standard output (every output is written to a temporary file or folder and renamed into
    place): a usage error, no file or folder named "-" (merge wrote one); ``./-`` still names one."""
    from kineto import KinetoDoc
    work = tmp_path / "work"
    work.mkdir()
    doc = KinetoDoc().cpu("ProfilerStep#1", 0, 10)
    doc.launch(1, 2)
    t = doc.write(tmp_path / "rank0.json")
    r = run_cli(*(a.format(t=t, d=tmp_path) for a in args), cwd=work)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "standard output" in r.stderr and "./-" in r.stderr
    assert list(work.iterdir()) == []
