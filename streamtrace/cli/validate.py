"""``streamtrace validate``: check what Perfetto's JSON importer relies on."""
from __future__ import annotations

import json
import sys

from ..runtime.console import printable
from ..runtime.errors import StreamtraceError
from .common import Console, Exit, option, parse_jobs, prepare_kernels, print_validation

EXAMPLES = """
  streamtrace validate job42_iter10.json.gz
  streamtrace validate merged_iter*.json.gz
  streamtrace validate --json job42_iter10.json.gz > problems.json
  streamtrace validate -q merged.json && echo valid
  streamtrace validate -j 1 big_merged.json            # one process (default: all cores on a big file)
"""


@option("traces", nargs="+", help="trace files (.json or .json.gz)")
@option("--json", dest="as_json", action="store_true",
        help="print the reports as JSON (a list when several files are given)")
@option("-j", "--jobs", type=int, help="worker processes reading byte ranges of a trace of 256 MB or more "
        "(default: 0 = all cores); the result is the same")
@option("-q", "--quiet", action="store_true", help="print only the problems (nothing when every trace is valid)")
@option("-v", "--verbose", action="store_true", help="tracebacks of errors")
def validate(*traces, as_json=False, jobs=0, quiet=False, verbose=False):
    """Check traces for what Perfetto's JSON importer relies on, one result line each; exit 1 when
    any has a problem or cannot be read."""
    from ..validate.check import ValidateOptions, require_events, validate as do_validate   # (the CLI's convention)
    from ..runtime.files import input_file_problem
    if len(traces) == 1 and (why := input_file_problem(traces[0])):     # before compiling anything
        raise StreamtraceError(f"{traces[0]}: {why}")
    prepare_kernels("validate", Console(quiet or as_json, verbose))
    opt = ValidateOptions(jobs=parse_jobs(jobs))
    reps = []
    failed = False
    for t in traces:
        try:
            reps.append(require_events(do_validate(t, opt=opt)) if as_json
                        else print_validation(t, quiet=quiet, opt=opt))
        except StreamtraceError as e:
            if len(traces) == 1:
                raise
            print(f"streamtrace: error: {printable(e)}", file=sys.stderr)    # the other files are still checked
            failed = True
    if as_json:
        print(json.dumps(reps[0] if len(traces) == 1 else reps, indent=1))
    if failed or not all(r["ok"] for r in reps):
        raise Exit(1)


validate.EXAMPLES = EXAMPLES
