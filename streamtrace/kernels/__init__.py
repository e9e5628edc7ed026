"""Numba kernels of streamtrace and their plain-Python reference twins.

Every kernel is compiled with ``cache=True``: numba keeps the machine code in ``__pycache__``
beside these files, else in the user's cache folder (``~/.cache/numba``).  On a read-only install
(a shared site-packages on a cluster) with a ``HOME`` that cannot be written either, numba would
refuse to define the kernels at all ("cannot cache function ...: no locator available"), so
before any kernel module is imported :func:`ensure_cache` checks those places the way numba
does and, when neither can be written, points numba's cache at a private folder in the temporary
folder (``<tmp>/streamtrace-numba-<uid>``, mode 0700) with one notice on stderr.
``NUMBA_CACHE_DIR``, when set and writable, is used as numba uses it.
"""
import os
import sys
import tempfile

NOTICE = ("streamtrace: note: numba cannot cache its compiled kernels beside the package or in the user's "
          "cache folder (read-only); caching them in {dir} (set NUMBA_CACHE_DIR to choose)")


def _writable(folder) -> bool:
    """numba's own test of a cache folder: create it, then a temporary file in it."""
    try:
        os.makedirs(folder, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
        return True
    except OSError:
        return False


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
    return d if _writable(d) else None


def ensure_cache() -> str | None:
    """Make sure numba can cache the kernels (see the module docstring).  Returns the folder it
    switched numba's cache to, or None when numba's own choice works."""
    from numba.core import config
    if config.CACHE_DIR and _writable(config.CACHE_DIR):
        return None
    if _writable(os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")) \
            or _writable(_user_cache_dir()):
        return None
    d = _private_dir() or tempfile.mkdtemp(prefix="streamtrace-numba-")
    config.CACHE_DIR = d
    os.environ["NUMBA_CACHE_DIR"] = d          # worker processes started afresh (dask) too
    print(NOTICE.format(dir=d), file=sys.stderr)
    return d


ensure_cache()
