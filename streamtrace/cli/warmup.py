"""``streamtrace warmup``: compile every numba kernel into the kernel cache now (container images, shared
installs), so that no command of this install compiles on its first run.  The cache is per user
(``~/.cache/streamtrace/<version>/...``, ``streamtrace.kernels.cachedir``): a later install of the same
version by the same user finds it filled."""
from __future__ import annotations

from .common import Console, option, parse_jobs

EXAMPLES = """
  streamtrace warmup                     # e.g. in a Dockerfile, right after pip install
  streamtrace warmup -j 2 -v
"""


@option("-j", "--jobs", type=int, help="compiling processes (default: 0 = all cores, at most 4)")
@option("-q", "--quiet", action="store_true", help="print only warnings and errors")
@option("-v", "--verbose", action="store_true", help="each kernel compiled, with its CPU seconds")
def warmup(*, jobs=0, quiet=False, verbose=False):
    """Compile every numba kernel into numba's cache now (run once per install, e.g. in a container image)."""
    from ..runtime.compile import COMMANDS, cache_writable, cache_folder, prepare   # (the CLI's convention)
    con = Console(quiet, verbose)
    jobs = parse_jobs(jobs)
    units = COMMANDS["all"]
    folder = cache_folder()
    if folder is None:
        con.warn("numba caches nothing here (NUMBA_DISABLE_JIT, or caching off): every process compiles what "
                 "it uses; nothing to warm up")
        return
    if not cache_writable():
        con.warn(f"numba's cache folder {folder} is not writable: every process compiles what it uses; run "
                 "warmup as the install's owner, or set STREAMTRACE_CACHE_DIR to a writable folder")
        return
    res = prepare("all", jobs=jobs or None, notice=None)
    for name, cpu in res["cpu"].items():
        con.detail(f"  {name}: {cpu:.2f} s CPU")
    for name, err in res["failed"].items():
        con.warn(f"{name} did not compile ({err}); it compiles on first use")
    if res["compiled"]:
        con.info(f"compiled {len(res['compiled'])} kernels in {res['seconds']:.1f} s "
                 f"({sum(res['cpu'].values()):.1f} s CPU in the compiling processes) into {folder}")
    else:
        con.info(f"all {len(units)} kernels already compiled, in {folder}")


warmup.EXAMPLES = EXAMPLES
