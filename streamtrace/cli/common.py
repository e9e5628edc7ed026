"""What the subcommands share: the value parsers of their options, the validation printout, the
exit exception, the version text."""
from __future__ import annotations

import os

import ijson

from .. import __version__
from ..errors import StreamtraceError

def version_text() -> str:
    """``streamtrace --version``: the version and the ijson backend (it should be ``yajl2_c``)."""
    note = "" if ijson.backend == "yajl2_c" else "  (warning: not the C backend yajl2_c; reading is slower)"
    return f"streamtrace {__version__}\nijson backend: {ijson.backend}{note}"


def parse_window(spec) -> tuple:
    """``"100:250"`` -> ``(100.0, 250.0)`` (ms); :class:`~streamtrace.errors.StreamtraceError` on bad input."""
    try:
        a, b = spec.split(":", 1)
        lo, hi = float(a), float(b)
    except ValueError:
        raise StreamtraceError(f"bad --window {spec!r}: expected START_MS:END_MS, e.g. 100:250") from None
    if hi < lo:
        raise StreamtraceError(f"bad --window {spec!r}: end before start")
    return lo, hi


def parse_steps(spec) -> tuple:
    """``"12-13"`` -> ``(12, 13)``, ``"12"`` -> ``(12, 12)``; :class:`~streamtrace.errors.StreamtraceError` on bad input."""
    try:
        if "-" in spec:
            a, b = spec.split("-", 1)
            return int(a), int(b)
        return int(spec), int(spec)
    except ValueError:
        raise StreamtraceError(f"bad --steps {spec!r}: expected N or N-M, e.g. 12-13") from None


def default_output(inputs) -> str:
    """merge's default output: ``<folder>_merged.json.gz`` beside a single input folder, else ``merged.json.gz``."""
    if len(inputs) == 1 and os.path.isdir(inputs[0]):
        d = os.path.abspath(inputs[0]).rstrip("/")
        return os.path.join(os.path.dirname(d), os.path.basename(d) + "_merged.json.gz")
    return "merged.json.gz"


def print_validation(path, quiet=False) -> dict:
    """Validate ``path`` and print the result (only the problems when ``quiet``); returns the report."""
    from ..trace.validate import validate      # (the CLI's convention: see streamtrace.cli)
    rep = validate(path)
    bad = {k: v for k, v in rep["problems"].items() if v}
    if bad or not quiet:
        status = "OK" if rep["ok"] else "PROBLEMS"
        print(f"validate {path}: {status}: {rep['events']:,} events, {rep['tracks']:,} tracks, {rep['flows']:,} flows")
        for k, v in rep["problems"].items():
            print(f"  {k}: {v}")
        for k, v in rep["notices"].items():
            print(f"  {k}: {v} (notice)")
    return rep


class Exit(Exception):
    """Leave the command with exit code ``code`` (what went wrong was printed already)."""

    def __init__(self, code):
        self.code = code


#: Megatron's merge script spells these with underscores; both are accepted
ALIASES = {"--input_dir": "--input-dir", "--output_file": "--output-file"}
