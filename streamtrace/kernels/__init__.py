"""Numba kernels of streamtrace and their plain-Python reference twins.

Every kernel is compiled with ``cache=True``.  Before any kernel module is imported,
:func:`ensure_cache` has numba keep the machine code in a per-user folder keyed by streamtrace's
version and the kernel sources (``~/.cache/streamtrace/<version>/...``,
:mod:`~streamtrace.kernels.cachedir`), which survives reinstalling the same version.  When that
folder cannot be written (or numba's private locator API is not as expected), numba's default
applies: ``$NUMBA_CACHE_DIR``, else ``__pycache__`` beside these files, else ``~/.cache/numba``.
On a read-only install (a shared site-packages on a cluster) with a ``HOME`` that cannot be
written either, numba would refuse to define the kernels at all ("cannot cache function ...: no
locator available"), so :func:`ensure_cache` then points numba's cache at a private folder in the
temporary folder (``<tmp>/streamtrace-numba-<uid>``, mode 0700) with one notice on stderr.
"""
import os
import sys
import tempfile

from .cachedir import writable

NOTICE = ("streamtrace: note: numba cannot cache its compiled kernels beside the package or in the user's "
          "cache folder (read-only); caching them in {dir} (set STREAMTRACE_CACHE_DIR to choose)")


def _user_cache_dir() -> str:
    try:
        from numba.misc.appdirs import AppDirs
        return AppDirs(appname="numba", appauthor=False).user_cache_dir
    except ImportError:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "numba")


def _private_dir():
    """``<tmp>/streamtrace-numba-<uid>``, created 0700; None when it exists and is not this
    user's private folder (someone else's could hold code numba would load)."""
    d = os.path.join(tempfile.gettempdir(), f"streamtrace-numba-{os.getuid() if hasattr(os, 'getuid') else 0}")
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        st = os.stat(d)
        if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o077):
            return None
    except OSError:
        return None
    return d if writable(d) else None


def ensure_cache() -> str | None:
    """Make sure numba can cache the kernels (see the module docstring).  Returns the private folder
    it switched numba's cache to, or None when streamtrace's cache folder or numba's own choice works."""
    from numba.core import config
    from . import cachedir
    if cachedir.install():
        return None
    if config.CACHE_DIR and writable(config.CACHE_DIR):
        return None
    if writable(os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")) \
            or writable(_user_cache_dir()):
        return None
    d = _private_dir() or tempfile.mkdtemp(prefix="streamtrace-numba-")
    config.CACHE_DIR = d
    os.environ["NUMBA_CACHE_DIR"] = d          # worker processes started afresh (dask) too
    cachedir.install()                          # keyed by version and sources, under it
    print(NOTICE.format(dir=d), file=sys.stderr)
    return d


ensure_cache()
