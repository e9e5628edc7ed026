"""Shared test fixtures.  Real traces come from ``../shared`` beside the repository
(read-only); tests that need them skip cleanly when it is absent."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
REAL = SHARED / "traces" / "real"
CPU3D = SHARED / "traces" / "cpu-3d"


def real_traces():
    return sorted(REAL.glob("*.json.gz")) if REAL.is_dir() else []


def need_shared():
    if not REAL.is_dir():
        pytest.skip("../shared/traces is absent")


def load_json(path, decimal=False):
    """Plain whole-file json load (the independent reference for the reader)."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_float=Decimal) if decimal else json.loads(raw)


def exact_ns(v) -> int:
    """Microseconds (int, float text as Decimal) -> int ns, rounding half up."""
    from decimal import ROUND_HALF_UP
    d = Decimal(v) * 1000 if not isinstance(v, Decimal) else v * 1000
    return int(d.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def run_cli(*args, cwd=None):
    """Run ``python -m streamtrace ARGS`` and return the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", "streamtrace", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)
