"""The build: setuptools, with the project's metadata in pyproject.toml.  One addition: the wheel carries
the numba kernels compiled at its build (``streamtrace.runtime.compile.prebuild`` into
``streamtrace/kernels/prebuilt/``), so that the first command after ``pip install .`` loads them instead of
compiling them (~40 CPU-s on first use otherwise; docs/install.md).  Skipped for an editable install and
when ``STREAMTRACE_NO_PREBUILD`` is set; a failed compile only leaves the wheel without them."""
import os
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

PREBUILD = ("import json, sys; from streamtrace.runtime.compile import prebuild; "
            "r = prebuild(sys.argv[1]); "
            "print(json.dumps({k: r[k] for k in ('files', 'failed', 'skipped', 'seconds')}))")


class BuildPyWithKernels(build_py):
    """``build_py``, then the kernels compiled into the built package (module docstring)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False) or os.environ.get("STREAMTRACE_NO_PREBUILD"):
            return
        lib = os.path.abspath(self.build_lib)
        with tempfile.TemporaryDirectory(prefix="streamtrace-prebuild-") as tmp:
            env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT")}
            env.update(STREAMTRACE_CACHE_DIR=os.path.join(tmp, "cache"), PYTHONPATH=lib, PYTHONDONTWRITEBYTECODE="1")
            try:
                p = subprocess.run([sys.executable, "-c", PREBUILD, os.path.join(lib, "streamtrace")], env=env,
                                   cwd=tmp, capture_output=True, text=True, timeout=1800)
                print(f"streamtrace: prebuilt kernels: {(p.stdout.strip().splitlines() or [p.stderr[-500:]])[-1]}")
            except (OSError, subprocess.SubprocessError) as exc:
                print(f"streamtrace: prebuilt kernels: none ({type(exc).__name__}: {exc})")


setup(cmdclass={"build_py": BuildPyWithKernels})
