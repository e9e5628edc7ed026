"""The build: setuptools, with the project's metadata in pyproject.toml.  One addition: the wheel carries
the numba kernels compiled at its build (``streamtrace.runtime.compile.prebuild`` into
``streamtrace/kernels/prebuilt/``), so that the first command after ``pip install .`` loads them instead of
compiling them (~40 CPU-s on first use otherwise; docs/kernel-cache.md).  Skipped for an editable install
and when ``STREAMTRACE_NO_PREBUILD=1`` (a wheel for other machines: the files are for this CPU and Python);
a failed compile only leaves the wheel without them."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

PREBUILD = ("import json, sys; from streamtrace.runtime.compile import prebuild; "
            "r = prebuild(sys.argv[1], *sys.argv[2:]); "
            "print(json.dumps({k: r[k] for k in ('files', 'failed', 'skipped', 'seconds')}))")
TIMEOUT_S = 1800


def run_prebuild(build_lib, python=(sys.executable,), units=()) -> dict:
    """``prebuild`` of the package built into ``build_lib`` (its ``streamtrace/``), in a new process
    (``python``: the command that starts it) with a new empty kernel cache, no ``NUMBA_*`` setting of this
    machine's (none is in numba's cache key: ``NUMBA_OPT=0`` would ship slow kernels) and ``build_lib``
    first on its ``PYTHONPATH``, the entries already there kept after it (pip's isolated build environment,
    where numba is, reaches the process through them); ``units``: what to compile (default every unit).
    Returns ``prebuild``'s summary (``files``, ``failed``, ``skipped``, ``seconds``), or ``{"error": text}``;
    never raises."""
    lib = os.path.abspath(build_lib)
    with tempfile.TemporaryDirectory(prefix="streamtrace-prebuild-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_") and k != "STREAMTRACE_CACHE_DIR"}
        path = [lib] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env.update(STREAMTRACE_CACHE_DIR=os.path.join(tmp, "cache"), PYTHONPATH=os.pathsep.join(path),
                   PYTHONDONTWRITEBYTECODE="1")
        try:
            p = subprocess.Popen([*python, "-c", PREBUILD, os.path.join(lib, "streamtrace"), *units], env=env,
                                 cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=hasattr(os, "killpg"))
            try:
                out, err = p.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                if hasattr(os, "killpg"):
                    os.killpg(p.pid, signal.SIGKILL)      # (its forked compile workers too)
                else:
                    p.kill()
                p.communicate()
                return {"error": f"no result in {TIMEOUT_S} s"}
            if p.returncode:
                return {"error": err[-1000:]}
            return json.loads(out.strip().splitlines()[-1])
        except Exception as exc:          # (not started, no summary printed: the wheel goes without them)
            return {"error": f"{type(exc).__name__}: {exc}"}


def _wanted() -> bool:
    return os.environ.get("STREAMTRACE_NO_PREBUILD", "").strip().lower() in ("", "0", "false", "no")


class BuildPyWithKernels(build_py):
    """``build_py``, then the kernels compiled into the built package (module docstring)."""

    def _prebuilt(self) -> str:
        return os.path.join(self.build_lib, "streamtrace", "kernels", "prebuilt")

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False) or not _wanted():
            shutil.rmtree(self._prebuilt(), ignore_errors=True)      # (an earlier in-tree build's: not shipped)
            return
        got = run_prebuild(self.build_lib)                  # (it replaces an earlier build's, reusing it)
        if "error" in got:
            shutil.rmtree(self._prebuilt(), ignore_errors=True)
        print(f"streamtrace: prebuilt kernels: {json.dumps(got)}")

    def get_outputs(self, *args, **kwargs):
        out = list(super().get_outputs(*args, **kwargs))
        for folder, _, names in os.walk(self._prebuilt()):
            out += [os.path.join(folder, n) for n in names]
        return out


if __name__ == "__main__":       # (setuptools runs this file as __main__; a test imports it for run_prebuild)
    setup(cmdclass={"build_py": BuildPyWithKernels})
