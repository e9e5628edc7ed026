"""``streamtrace validate``: check what Perfetto's JSON importer relies on."""
from __future__ import annotations

import json

import argh

from .common import Exit, print_validation


@argh.arg("trace", help="a trace file (.json or .json.gz)")
@argh.arg("--json", dest="as_json", help="print the report as JSON")
def validate(trace, *, as_json=False):
    """Check a trace for what Perfetto's JSON importer relies on; exit 1 on a problem."""
    if as_json:
        from ..trace.validate import validate as do_validate      # (the CLI's convention: see streamtrace.cli)
        rep = do_validate(trace)
        print(json.dumps(rep, indent=1))
    else:
        rep = print_validation(trace)
    if not rep["ok"]:
        raise Exit(1)
