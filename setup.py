"""The build: setuptools, with the project's metadata in pyproject.toml.  One addition: the wheel carries
the numba kernels compiled at its build (``streamtrace.runtime.compile.prebuild`` into
``streamtrace/kernels/prebuilt/``), so that the first command after ``pip install .`` loads them instead of
compiling them (~40 CPU-s on first use otherwise; docs/kernel-cache.md).  Skipped for an editable install
and when ``STREAMTRACE_NO_PREBUILD`` is set; a failed compile only leaves the wheel without them."""
import json
import os
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

PREBUILD = ("import json, sys; from streamtrace.runtime.compile import prebuild; "
            "r = prebuild(sys.argv[1], *sys.argv[2:]); "
            "print(json.dumps({k: r[k] for k in ('files', 'failed', 'skipped', 'seconds')}))")


def run_prebuild(build_lib, python=(sys.executable,), units=()) -> dict:
    """``prebuild`` of the package built into ``build_lib`` (its ``streamtrace/``), in a new process
    (``python``: the command that starts it) with a new empty kernel cache and ``build_lib`` first on its
    ``PYTHONPATH``, the entries already there kept after it (pip's isolated build environment, where numba
    is, reaches the process through them); ``units``: what to compile (default every unit).  Returns
    ``prebuild``'s summary (``files``, ``failed``, ``skipped``, ``seconds``), or ``{"error": text}``."""
    lib = os.path.abspath(build_lib)
    with tempfile.TemporaryDirectory(prefix="streamtrace-prebuild-") as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT")}
        path = [lib] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env.update(STREAMTRACE_CACHE_DIR=os.path.join(tmp, "cache"), PYTHONPATH=os.pathsep.join(path),
                   PYTHONDONTWRITEBYTECODE="1")
        try:
            p = subprocess.run([*python, "-c", PREBUILD, os.path.join(lib, "streamtrace"), *units], env=env,
                               cwd=tmp, capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.SubprocessError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
    if p.returncode:
        return {"error": p.stderr[-1000:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


class BuildPyWithKernels(build_py):
    """``build_py``, then the kernels compiled into the built package (module docstring)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False) or os.environ.get("STREAMTRACE_NO_PREBUILD"):
            return
        print(f"streamtrace: prebuilt kernels: {json.dumps(run_prebuild(self.build_lib))}")


if __name__ == "__main__":       # (setuptools runs this file as __main__; a test imports it for run_prebuild)
    setup(cmdclass={"build_py": BuildPyWithKernels})
