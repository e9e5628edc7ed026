"""streamtrace: merge, validate and analyse PyTorch profiler (Kineto) traces of multi-rank training jobs.

Merge every rank onto one Perfetto timeline, analyse kernels, call trees and compute/communication
overlap into Parquet, and report where a whole job's time went. Start with `streamtrace demo`, or,
after a training job, `streamtrace epilogue RUN_DIR`; `streamtrace COMMAND --help` shows examples.
"""
from __future__ import annotations

import argparse
import difflib
import inspect
import re
import sys
import traceback

from ..runtime.console import printable, setup_console
from ..runtime.errors import EXIT_USAGE, StreamtraceError, UsageError
from ..runtime.lifecycle import Terminated, exit_on_sigterm
from ..runtime.tuning import few_malloc_arenas, leave, skip_numba_blas, skip_pandas, use_system_allocator
from . import aggregate, analyze, demo, diff, epilogue, merge, report, topology, validate, warmup, whatif
from .common import Exit, version_text

# Conventions of every subcommand (streamtrace/cli/<name>.py): errors of the user's command line raise
# streamtrace.runtime.errors.UsageError (exit 2, one line), bad input StreamtraceError (exit 1); -q/-v; -j 0 = all cores;
# lists as 0-7,12; a relative -o is relative to the current folder; examples in the function's EXAMPLES.
# Exit codes: 0 success, 1 bad input or an output that cannot be written (one line naming the path; -v adds the
# traceback), 2 usage error, 130 Ctrl-C, 143 SIGTERM (both after removing what the run had half-written:
# streamtrace.runtime.lifecycle).
# A subcommand imports the API it calls inside its function, not at the top of its module: building the parser
# imports every subcommand module, and the process first tunes itself (streamtrace.runtime.tuning: numba without
# SciPy's BLAS, Arrow on the system allocator) before numba and pyarrow are imported; `topology` and `--help` need
# neither.

COMMANDS = [merge.merge, analyze.analyze, validate.validate, demo.demo, epilogue.epilogue, topology.topology,
            aggregate.aggregate, report.report, whatif.whatif, diff.diff, warmup.warmup]


def main(argv=None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    skip_numba_blas()
    use_system_allocator()
    exit_on_sigterm()
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        build_parser().print_usage(sys.stderr)
        print("streamtrace: error: give a command (streamtrace --help lists them; start with streamtrace demo)",
              file=sys.stderr)
        return EXIT_USAGE
    if argv and argv[0] in ("--version", "-V", "version"):
        print(version_text())
        return 0
    parser = build_parser()
    argv = spell_options(parser, argv)
    verbose = any(a in ("-v", "--verbose") for a in argv)
    try:
        options = parser.parse_args(argv)
        if getattr(options, "run", None) is None:
            parser.error("give a command (streamtrace --help lists them; start with streamtrace demo)")
        call(options.run, options)
    except Exit as e:
        return e.code
    except StreamtraceError as e:
        if verbose:
            traceback.print_exc()
        print(f"streamtrace: error: {printable(e)}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:       # e.g. piped into `head`
        return 0
    except Terminated:
        print("streamtrace: terminated (SIGTERM)", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("streamtrace: interrupted", file=sys.stderr)
        return 130
    return 0


def call(fn, options: argparse.Namespace):
    """Run the subcommand ``fn`` with the parsed ``options``: each by its parameter's name (``*args``
    from its list), an option not given left to ``fn``'s default (the parsers' ``argument_default`` is
    ``SUPPRESS``)."""
    kwargs = {k: v for k, v in vars(options).items() if k not in ("run", "version")}
    no_stdout(kwargs)
    args = ()
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            args = tuple(kwargs.pop(p.name, ()))
    fn(*args, **kwargs)


#: the parameters that name a command's output, and their spelling
OUTPUT_OPTIONS = {"outdir": "-o/--outdir", "output_file": "-o/--output-file", "legacy_output_file": "--output_file",
                  "output": "-o/--output"}


def no_stdout(kwargs):
    """``UsageError`` when an output is ``-``: no command writes to standard output (each output is
    written to a temporary file or folder renamed into place); a file or folder named ``-`` was made."""
    for k, spelled in OUTPUT_OPTIONS.items():
        if kwargs.get(k) == "-":
            raise UsageError(f"{spelled} -: the output cannot be standard output (it is written to a temporary "
                             f"file or folder renamed into place); give a path, ./- for one named \"-\"")


class _Parser(argparse.ArgumentParser):
    """argparse with one plain line on a usage error (and exit 2, as argparse): an unknown option
    gets the closest known ones ("did you mean") and points to its subcommand's ``--help``.
    ``commands``: the subcommands' parsers by name; ``options``: the option strings shown in
    ``--help``; ``command``: the subcommand's parser, when main found one in the command line."""

    command = None
    commands: dict = {}
    options: tuple = ()

    def error(self, message):
        prog = self.command.prog if self.command is not None and self.prog == "streamtrace" else self.prog
        if message.startswith("unrecognized arguments:"):
            known = list((self.command or self).options)
            close = [m for w in message.split(":", 1)[1].split() if w.startswith("-")
                     for m in difflib.get_close_matches(w.split("=", 1)[0], known, n=2, cutoff=0.6)]
            if close:
                message += f" (did you mean {' or '.join(dict.fromkeys(close))}?)"
        self.exit(EXIT_USAGE, f"{prog}: error: {message} (see {prog} --help)\n")


def spell_options(parser, argv) -> list:
    """The command line ``argv`` with every option as the subcommand knows it: Megatron's spellings of
    merge (``ALIASES``), and ``--snake_case`` for a known ``--snake-case``
    (``--gpu_only``, ``--world_size``).  Notes the subcommand's parser on ``parser`` for its errors."""
    sub = next((parser.commands[a] for a in argv if a in parser.commands), None)
    parser.command = sub
    known = set(sub.options) | set(sub.hidden) if sub is not None else set()
    out = []
    for a in argv:
        if a.startswith("--"):
            name, eq, value = a.partition("=")
            name = merge.ALIASES.get(name, name)
            if name not in known and name.replace("_", "-") in known:
                name = name.replace("_", "-")
            a = name + eq + value
        out.append(a)
    return out


def build_parser() -> argparse.ArgumentParser:
    """The ``streamtrace`` parser: one subparser per function of ``COMMANDS``, its options as the
    function declares them (``option``), its examples as the epilog."""
    parser = _Parser(prog="streamtrace", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-V", "--version", action="store_true", help="print the version and the ijson backend")
    subs = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)
    parser.commands = {}
    for fn in COMMANDS:
        doc = inspect.cleandoc(fn.__doc__ or "")
        sub = subs.add_parser(fn.__name__, help=first_sentence(doc), description=doc,
                              epilog="examples:\n" + fn.EXAMPLES.strip("\n") if getattr(fn, "EXAMPLES", None) else None,
                              formatter_class=argparse.RawDescriptionHelpFormatter, argument_default=argparse.SUPPRESS)
        for names, kwargs in fn.OPTIONS:
            sub.add_argument(*names, **kwargs)
        sub.set_defaults(run=fn)
        shown = [n for names, kw in fn.OPTIONS if kw.get("help") != argparse.SUPPRESS for n in names]
        sub.options = tuple(n for n in ["-h", "--help", *shown] if n.startswith("-"))
        sub.hidden = tuple(n for names, kw in fn.OPTIONS if kw.get("help") == argparse.SUPPRESS for n in names)
        parser.commands[fn.__name__] = sub
    return parser


def first_sentence(doc) -> str | None:
    """The first sentence of a docstring's first paragraph, whole (the top-level ``--help`` lists it)."""
    para = " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())
    if not para:
        return None
    end = re.search(r"(?<!e\.g)(?<!i\.e)\.\s", para)            # not after e.g. / i.e.
    return para if end is None else para[:end.start() + 1]


def command():
    """Entry point of the ``streamtrace`` command: ``main``, then leave the process at once
    with its exit code (``streamtrace.runtime.tuning.leave``).  Usage errors (argparse's
    ``SystemExit``) keep their code; an unexpected exception still ends the normal way, with
    its traceback.  The command's process never imports pandas
    (``skip_pandas``), and its threads share two of glibc's arenas (``few_malloc_arenas``)."""
    setup_console()
    skip_pandas()
    few_malloc_arenas()
    try:
        code = main()
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(printable(e.code), file=sys.stderr)
            code = 1
    leave(code)
