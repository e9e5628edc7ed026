"""The ``streamtrace`` command line: one module per subcommand (:mod:`~streamtrace.cli.merge`,
:mod:`~streamtrace.cli.analyze`, ...), each only parsing its options (argh) and printing what the
Python API returns.

Exit codes (:mod:`streamtrace.errors`): 0 success, 1 user/input error (one line on stderr, no
traceback), 2 usage error (argparse).

Convention: a subcommand imports the API it calls inside its function, not at the top of its
module.  Building the parser imports every subcommand module, and the command's process first
tunes itself (:mod:`streamtrace.runtime.tuning`: numba without SciPy's BLAS, Arrow on the system
allocator), which must happen before numba and pyarrow are imported; and ``streamtrace topology``
or ``--help`` need neither.
"""
from __future__ import annotations

import argparse
import sys

import argh

from ..errors import StreamtraceError
from ..runtime.tuning import leave, skip_numba_blas, use_system_allocator
from . import aggregate, analyze, demo, epilogue, merge, report, topology, validate
from .common import ALIASES, Exit, version_text

COMMANDS = [merge.merge, analyze.analyze, validate.validate, demo.demo, epilogue.epilogue, topology.topology,
            aggregate.aggregate, report.report]


def main(argv=None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    skip_numba_blas()
    use_system_allocator()
    argv = sys.argv[1:] if argv is None else argv
    argv = [ALIASES.get(a.split("=", 1)[0], a.split("=", 1)[0]) + (a[a.index("="):] if "=" in a else "")
            if a.startswith("--") else a for a in argv]
    if argv and argv[0] in ("--version", "-V", "version"):
        print(version_text())
        return 0
    parser = argparse.ArgumentParser(prog="streamtrace", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="store_true", help="print the version and the ijson backend")
    argh.add_commands(parser, COMMANDS, name_mapping_policy=argh.assembling.NameMappingPolicy.BY_NAME_IF_KWONLY)
    try:
        argh.dispatch(parser, argv=argv)
    except Exit as e:
        return e.code
    except StreamtraceError as e:
        print(f"streamtrace: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:       # e.g. piped into `head`
        return 0
    except KeyboardInterrupt:
        print("streamtrace: interrupted", file=sys.stderr)
        return 130
    return 0


def command():
    """Entry point of the ``streamtrace`` command: :func:`main`, then leave the process at once
    with its exit code (:func:`streamtrace.runtime.tuning.leave`).  Usage errors (argparse's
    ``SystemExit``) keep their code; an unexpected exception still ends the normal way, with
    its traceback."""
    try:
        code = main()
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    leave(code)
