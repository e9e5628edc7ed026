"""``streamtrace validate``: check what Perfetto's JSON importer relies on."""
from __future__ import annotations

import json

import argh

from .common import Console, Exit, prepare_kernels, print_validation

EXAMPLES = """
  streamtrace validate job42_iter10.json.gz
  streamtrace validate --json job42_iter10.json.gz > problems.json
  streamtrace validate -q merged.json && echo valid
"""


@argh.arg("trace", help="a trace file (.json or .json.gz)")
@argh.arg("--json", dest="as_json", help="print the report as JSON")
@argh.arg("-q", "--quiet", help="print only the problems (nothing when the trace is valid)")
@argh.arg("-v", "--verbose", help="tracebacks of errors")
def validate(trace, *, as_json=False, quiet=False, verbose=False):
    """Check a trace for what Perfetto's JSON importer relies on; exit 1 on a problem."""
    prepare_kernels("validate", Console(quiet or as_json, verbose))
    if as_json:
        from ..trace.validate import validate as do_validate      # (the CLI's convention: see streamtrace.cli)
        rep = do_validate(trace)
        print(json.dumps(rep, indent=1))
    else:
        rep = print_validation(trace, quiet=quiet)
    if not rep["ok"]:
        raise Exit(1)


validate.EXAMPLES = EXAMPLES
validate.HIDDEN_NAMES = ("--as-json",)
