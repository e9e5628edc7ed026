"""What the subcommands share: the value parsers of their options (usage errors exit 2), the
console (``-q``/``-v``), the validation printout, the exit exception, the version text, and the
report options of ``report`` and ``epilogue``."""
from __future__ import annotations

import sys

import ijson

from .. import __version__
from ..runtime.console import printable
from ..runtime.errors import UsageError
from ..runtime.tuning import quiet_llvm_lock, release_library_pages


def version_text() -> str:
    """``streamtrace --version``: the version and the ijson backend (it should be ``yajl2_c``)."""
    note = "" if ijson.backend == "yajl2_c" else "  (warning: not the C backend yajl2_c; reading is slower)"
    return f"streamtrace {__version__}\nijson backend: {ijson.backend}{note}"


def parse_window(spec) -> tuple:
    """``"100:250"`` -> ``(100.0, 250.0)`` (ms); ``UsageError`` on bad input."""
    try:
        a, b = spec.split(":", 1)
        lo, hi = float(a), float(b)
    except ValueError:
        raise UsageError(f"bad --window {spec!r}: expected START_MS:END_MS, e.g. 100:250") from None
    if hi < lo:
        raise UsageError(f"bad --window {spec!r}: end before start")
    return lo, hi


def parse_list(spec, option) -> list:
    """The tool's one list syntax: ``"0-7,12"`` -> ``[0, 1, ..., 7, 12]`` (sorted, unique ints).
    ``UsageError`` naming ``option`` on bad input."""
    out = set()
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part[1:]:
                a, b = part[0] + part[1:].split("-", 1)[0], part[1:].split("-", 1)[1]
                lo, hi = int(a), int(b)
                if hi < lo:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise UsageError(f"bad {option} {spec!r}: expected a list such as 0-7,12") from None
    if not out:
        raise UsageError(f"bad {option} {spec!r}: expected a list such as 0-7,12")
    return sorted(out)


def parse_steps(spec) -> tuple:
    """merge's ``--steps``: ``"12-13"`` -> ``(12, 13)``, ``"12"`` -> ``(12, 12)`` (a window: one
    range of the list syntax); ``UsageError`` on bad input."""
    steps = parse_list(spec, "--steps")
    if steps != list(range(steps[0], steps[-1] + 1)):
        raise UsageError(f"bad --steps {spec!r}: merge keeps one window, N or N-M, e.g. 12-13")
    return steps[0], steps[-1]


def parse_jobs(jobs) -> int:
    """``-j``: 0 = all cores, else that many processes; ``UsageError`` when negative."""
    if jobs < 0:
        raise UsageError(f"bad --jobs {jobs}: give a number of processes, or 0 for all cores")
    return jobs


def parse_formats(text) -> tuple:
    """``--chart-format png,svg`` -> ``("png", "svg")``; ``UsageError`` for
    anything but png and svg."""
    out = tuple(dict.fromkeys(x.strip().lower() for x in str(text).split(",") if x.strip()))
    if not out or any(x not in ("png", "svg") for x in out):
        raise UsageError(f"bad --chart-format {text!r}: png, svg or png,svg")
    return out


def need(values, what):
    """``UsageError`` ``give {what}`` when ``values`` is empty."""
    if not values:
        raise UsageError(f"give {what}")


class Console:
    """What a subcommand prints, under ``-q/--quiet`` (warnings and errors only, no progress
    bars) and ``-v/--verbose`` (details; tracebacks of unexpected errors).

    ``progress``: the ``progress`` option of the API (False when quiet, None = on a terminal)."""

    def __init__(self, quiet=False, verbose=False):
        if quiet and verbose:
            raise UsageError("give -q/--quiet or -v/--verbose, not both")
        self.quiet, self.verbose = quiet, verbose
        self.progress = False if quiet else None

    def info(self, msg):
        """A line of the normal output (stdout), not shown with -q."""
        if not self.quiet:
            print(printable(msg), flush=True)

    def detail(self, msg):
        """A line shown only with -v (stdout)."""
        if self.verbose:
            print(printable(msg), flush=True)

    def warn(self, msg):
        """A warning (stderr), shown even with -q."""
        print(f"warning: {printable(msg)}", file=sys.stderr, flush=True)

    def notice(self, msg):
        """A notice (stderr), not shown with -q."""
        if not self.quiet:
            print(f"notice: {printable(msg)}", file=sys.stderr, flush=True)


def validation_line(rep) -> str:
    """One line for a validate report: ``validate PATH: OK|PROBLEMS: N events, T tracks, F flows``, then
    every non-zero problem and notice."""
    bad = ", ".join(f"{k} {v:,}" for k, v in rep["problems"].items() if v)
    notes = ", ".join(f"{k} {v:,} (notice)" for k, v in rep["notices"].items() if v)
    status = "OK" if rep["ok"] else "PROBLEMS"
    return (f"validate {rep['path']}: {status}: {rep['events']:,} events, {rep['tracks']:,} tracks, "
            f"{rep['flows']:,} flows" + "".join(f"; {x}" for x in (bad, notes) if x))


def prepare_kernels(command, con, jobs=0) -> float:
    """Have numba's cache hold the kernels ``command`` (a key of
    ``streamtrace.runtime.compile.COMMANDS``, or a tuple of them) uses before it runs: on a fresh install they are
    compiled in ``jobs`` parallel processes (0: all cores, at most 4), after one notice line
    "compiling kernels, first run only" (not shown with -q).  Returns the wall seconds spent
    compiling (0.0 when the cache held them).  Never raises: whatever is not compiled here is
    compiled on first use, as without it."""
    try:
        from ..runtime.compile import prepare     # (the CLI's convention: see streamtrace.cli)
        quiet_llvm_lock()                         # (numba is imported now)
        res = prepare(*((command,) if isinstance(command, str) else command), jobs=jobs or None, notice=con.notice)
        release_library_pages()                   # (LLVM's code numba's import touched: ~36 MB, before the set-up)
        if res["compiled"]:
            con.detail(f"compiled {len(res['compiled'])} kernels in {res['seconds']:.1f} s")
        return float(res["seconds"]) if res["compiled"] else 0.0
    except Exception:                             # warm-up never fails a command
        return 0.0


def kernels_pending(command) -> bool:
    """Whether numba's cache lacks a kernel ``command`` (as ``prepare_kernels``'s) uses; True when that
    cannot be told (the cache unreadable, numba's internals changed).  Imports numba here."""
    try:
        from ..runtime.compile import pending     # (the CLI's convention: see streamtrace.cli)
        quiet_llvm_lock()
        return bool(pending(*((command,) if isinstance(command, str) else command)))
    except Exception:                             # noqa: BLE001 - unknown: prepare as on a fresh install
        return True


def print_validation(path, quiet=False, opt=None) -> dict:
    """Validate ``path`` (``opt``: a ``ValidateOptions``) and print
    its one-line result (``validation_line``; nothing when ``quiet`` and the trace has no
    problem); returns the report."""
    from ..validate.check import require_events, validate      # (the CLI's convention: see streamtrace.cli)
    rep = require_events(validate(path, opt=opt))
    if not (quiet and rep["ok"]):
        print(printable(validation_line(rep)), flush=True)
    return rep


class Exit(Exception):
    """Leave the command with exit code ``code`` (what went wrong was printed already)."""

    def __init__(self, code):
        self.code = code


#: the short flags of the whole tool, one meaning each (a test checks that the subcommands declare no other)
SHORT_FLAGS = {"-o": ("--outdir", "--output-file", "--output"), "-j": ("--jobs",), "-q": ("--quiet",),
               "-v": ("--verbose",), "-i": ("--input-dir",), "-h": ("--help",)}


REPORT_ARGS = (
    (("--tokens-per-step",), dict(type=int, help="tokens per training step, for tokens/s")),
    (("--global-batch",), dict(type=int, help="global batch size (sequences), with --seq-len, for tokens/s")),
    (("--seq-len",), dict(type=int, help="sequence length (tokens), with --global-batch")),
    (("--torchtitan-config",), dict(help="the job's TorchTitan TOML: tokens per step, model, parallel mesh")),
    (("--peak-tflops",), dict(type=float, help="dense peak TFLOP/s of one GPU, for MFU (default: the datasheet's "
                                               "for the traces' GPU)")),
    (("--flops-per-token",), dict(type=float, help="model FLOPs per token, forward + backward (default: from the "
                                                   "config's model)")),
    (("--nic-gbps",), dict(type=float, help="network GB/s per GPU for collectives across hosts (default: the "
                                            "platform's)")),
    (("--gpus-per-node",), dict(type=int, help="ranks per host when the trace file names give no host (default 8)")),
    (("--no-charts",), dict(action="store_true", help="skip the charts")),
    (("--chart-format",), dict(help="chart files: png (default), svg, or png,svg")),
    (("--chart-ranks",), dict(help="ranks that get per-rank charts, e.g. 0-3,12 (default: all up to 8, else a "
                                   "selection)")),
)
"""The report's options, the same on ``report`` and ``epilogue`` (``report_args``)."""


def check_efficiency_flags(peak_tflops, flops_per_token, nic_gbps, gpus_per_node):
    """``UsageError`` for a non-positive ``--peak-tflops``,
    ``--flops-per-token``, ``--nic-gbps`` or ``--gpus-per-node``."""
    from ..runtime.errors import UsageError
    for flag, v in (("--peak-tflops", peak_tflops), ("--flops-per-token", flops_per_token),
                    ("--nic-gbps", nic_gbps), ("--gpus-per-node", gpus_per_node)):
        if v is not None and v <= 0:
            raise UsageError(f"bad {flag} {v}: give a positive number")


def option(*names, **kwargs):
    """Decorator: the subcommand ``fn`` takes the option (or positional) ``names``, declared with
    ``argparse.ArgumentParser.add_argument``'s ``names`` and ``kwargs`` as they are (each name,
    action and ``nargs`` explicit: nothing is inferred from ``fn``'s signature, whose defaults are the
    option's).  The declarations are kept on ``fn.OPTIONS`` in the order they are written, which is
    the order of ``--help``; ``streamtrace.cli.build_parser`` adds them."""
    def declare(fn):
        fn.__dict__.setdefault("OPTIONS", []).insert(0, (names, kwargs))
        return fn
    return declare


def report_args(fn):
    """Decorator: the ``REPORT_ARGS`` options on the subcommand ``fn`` (``option``), in that order."""
    for names, kw in reversed(REPORT_ARGS):
        fn = option(*names, **kw)(fn)
    return fn
