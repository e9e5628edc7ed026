"""Where numba keeps streamtrace's compiled kernels: a per-user folder keyed by streamtrace's version
and the content of the kernel sources, so that reinstalling the same version (or installing it in a
fresh virtual environment) finds the kernels already compiled.

numba's default cache lives in ``__pycache__`` beside the installed sources (or, under
``$NUMBA_CACHE_DIR`` / ``~/.cache/numba``, in a sub-folder named after a hash of the sources' folder
path), so every new install path starts cold.  Older numba releases also stamp each index with
the source file's mtime and size, which a reinstall changes (numba/numba#10659 made it a content
hash; 0.68 has it; the project supports numba >= 0.59).  Here numba's locator is replaced, for the
files of this package only, by ``KernelCacheLocator``:

* folder: ``<root>/<streamtrace version>/<sha256 of the kernel sources, 16 hex>-numba<numba version>``
  where ``<root>`` is ``$STREAMTRACE_CACHE_DIR``, else ``$NUMBA_CACHE_DIR/streamtrace`` when the user
  set it, else ``$XDG_CACHE_HOME/streamtrace``, else ``~/.cache/streamtrace`` (the XDG base directory
  specification: a relative ``XDG_CACHE_HOME`` is ignored);
* source stamp (what numba compares before trusting an index): that same sha256 of every
  ``streamtrace/kernels/*.py``, the file content and never its mtime.  Hashing all kernel modules, not
  only the kernel's own, also retires a caller whose callee in another module changed (numba's own
  key covers only the caller's file);
* created, when it does not exist yet, as a copy of the kernels compiled when the wheel was built
  (``prebuilt/<the folder's name>`` beside these files, written by ``streamtrace.runtime.compile.prebuild``
  from ``setup.py``'s ``build_py``; ``seed``): the same sources and numba name the same folder, so an
  install from that wheel starts warm, and a different numba, or a wheel built without it, finds nothing
  to seed and compiles on first use as before; a folder that exists is never added to;
* numba keys each entry inside the folder by the signature, the codegen's ``magic_tuple()`` (LLVM
  target triple, host CPU name, CPU features) and the function's bytecode, and names the files after
  the Python version (``.py311``): a shared home on machines with different CPUs keeps one entry per
  CPU and loads only its own.

The locator is registered in numba's private ``CacheImpl._locator_classes`` list (``_CacheImpl``
before numba 0.61), ahead of numba's own locators.  That list is no public API: ``install``
checks for it and, when it is missing or the folder cannot be created and written, leaves numba's
default behaviour alone and returns False.  ``NUMBA_CACHE_LOCATOR_CLASSES``, when the user sets it,
overrides the list (numba's rule), and then this locator is not used unless named there
(``streamtrace.kernels.cachedir.KernelCacheLocator``).

Concurrency: this module writes cache files only when it seeds a folder that does not exist yet (a copy
renamed into place whole: ``seed``); numba writes every index (``.nbi``) and data
file (``.nbc``) to a unique temporary name and ``os.replace``-s it into place, so a reader never
sees a half-written file, and the folder is created with ``exist_ok``.  numba's index update is a
read-modify-write, so two processes compiling *different signatures of the same kernel* at once can
lose one entry (compiled again later); ``streamtrace.runtime.compile`` never compiles two
signatures of one kernel at the same time.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import shutil
import sys
import tempfile

__all__ = ["ENV", "NOTICE", "PREBUILT", "KernelCacheLocator", "cache_root", "kernel_cache_dir", "package_version",
           "sources_digest", "install", "installed", "ensure_cache", "seed", "copy_kernels"]

#: environment variable naming the cache root (overrides the XDG default and ``NUMBA_CACHE_DIR``)
ENV = "STREAMTRACE_CACHE_DIR"

_HERE = os.path.dirname(os.path.abspath(__file__))

PREBUILT = os.path.join(_HERE, "prebuilt")
"""Where a built wheel keeps the kernels compiled at its build, one folder named as ``kernel_cache_dir``'s
last part (``<digest16>-numba<version>``); absent from a source checkout and an editable install."""

try:        # numba's private caching API (guarded: install() says False where it is missing)
    from numba.core import caching as _caching
    _Base = _caching._CacheLocator
except (ImportError, AttributeError):
    _caching, _Base = None, object


@functools.lru_cache(maxsize=None)
def sources_digest() -> str:
    """sha256 (64 hex) of every ``streamtrace/kernels/*.py``: each file's name and bytes, in name order.
    Read once per process (~0.3 MB).  Raises OSError when a source cannot be read."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(_HERE)):
        if name.endswith(".py"):
            with open(os.path.join(_HERE, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


def cache_root() -> str | None:
    """The cache root (see the module docstring), or None when none can be named (no usable home)."""
    explicit = os.environ.get(ENV)
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    numba_dir = os.environ.get("NUMBA_CACHE_DIR")
    if numba_dir:
        return os.path.join(os.path.abspath(os.path.expanduser(numba_dir)), "streamtrace")
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(xdg):
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        xdg = os.path.join(home, ".cache")
    return os.path.join(xdg, "streamtrace")


@functools.lru_cache(maxsize=None)
def package_version() -> str:
    """streamtrace's version as its installed package metadata gives it (the kernels floor does not import
    the package root, which defines ``__version__`` and sits at the top of the layers); ``"unknown"`` when
    the package is not installed (run from a checkout on ``PYTHONPATH``: the cache is then still keyed by
    the sources)."""
    try:
        return importlib.metadata.version("streamtrace")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def kernel_cache_dir(root: str | None = None) -> str | None:
    """``<root>/<version>/<digest16>-numba<version>``: the folder the kernels are cached in
    (``root`` defaults to ``cache_root``; the version is ``package_version``); None when there is
    no root."""
    import numba
    root = root or cache_root()
    if root is None:
        return None
    return os.path.join(root, package_version(), f"{sources_digest()[:16]}-numba{numba.__version__}")


@functools.lru_cache(maxsize=None)
def writable(folder: str) -> bool:
    """numba's own test of a cache folder (create it, then a temporary file in it); remembered."""
    try:
        os.makedirs(folder, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
        return True
    except OSError:
        return False


class KernelCacheLocator(_Base):
    """numba cache locator for the functions defined in ``streamtrace/kernels/*.py``: the folder
    ``kernel_cache_dir``, the source stamp ``sources_digest`` (content, not mtime).
    Implements numba's private ``_CacheLocator`` interface (numba.core.caching)."""

    def __init__(self, py_func, py_file, folder):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = folder

    def ensure_cache_path(self):
        """Create the folder and check it can be written; raises OSError otherwise (numba's contract)."""
        os.makedirs(self._cache_path, exist_ok=True)
        tempfile.TemporaryFile(dir=self._cache_path).close()

    def get_cache_path(self):
        return self._cache_path

    def get_source_stamp(self):
        return sources_digest()

    def get_disambiguator(self):
        return str(self._lineno)      # as numba's file-backed locators: the function's first line

    @classmethod
    def from_function(cls, py_func, py_file):
        """A locator for ``py_func`` when ``py_file`` is one of this package's kernel modules and the
        folder can be written; else None (numba then tries its own locators, in its order)."""
        try:
            if os.path.dirname(os.path.abspath(py_file)) != _HERE:
                return None
            folder = kernel_cache_dir()
        except Exception:          # unreadable sources, no home: numba's default
            return None
        if folder is None or not writable(folder):
            return None
        return cls(py_func, py_file, folder)


def _locator_list():
    impl = getattr(_caching, "CacheImpl", None) or getattr(_caching, "_CacheImpl", None)
    classes = getattr(impl, "_locator_classes", None)
    return classes if isinstance(classes, list) else None


def installed() -> bool:
    """True when ``KernelCacheLocator`` is registered with numba in this process."""
    classes = _locator_list() if _caching is not None else None
    return bool(classes) and classes[0] is KernelCacheLocator


def install() -> bool:
    """Register ``KernelCacheLocator`` first in numba's locator list, before any kernel module
    is imported (numba picks a kernel's locator when the module defines it).  Returns True when
    registered and its folder is writable; False, changing nothing, when numba's private API is not
    as expected or the folder cannot be created and written (numba's default behaviour then)."""
    if _caching is None or _Base is object:
        return False
    try:
        folder = kernel_cache_dir()
    except Exception:              # unreadable sources, numba without __version__, ...
        return False
    classes = _locator_list()
    if classes is not None and folder is not None:
        seed(folder)                          # (a new folder only: before ``writable`` creates it)
    if classes is None or folder is None or not writable(folder):
        return False
    if classes[0] is not KernelCacheLocator:
        if KernelCacheLocator in classes:
            classes.remove(KernelCacheLocator)
        classes.insert(0, KernelCacheLocator)
    return True


def seed(folder: str, prebuilt: str = PREBUILT) -> int:
    """Create ``folder`` (a ``kernel_cache_dir`` that does not exist yet) as a copy of
    ``prebuilt/<folder's name>``: the files are copied into a new folder beside it, which is then renamed
    to ``folder`` in one step, so that a reader sees either no folder or all of it, and a folder that
    already exists (compiled into, or seeded, by another process or install) is left exactly as it is.
    Returns how many files it brought; 0, raising nothing, when there is nothing to seed, the folder
    exists, numba's JIT is off, or the copy fails (then the kernels compile on first use, as without it)."""
    src = os.path.join(prebuilt, os.path.basename(os.path.normpath(folder)))
    tmp = None
    try:
        if not os.path.isdir(src) or os.path.lexists(folder) or _jit_disabled():
            return 0
        parent = os.path.dirname(os.path.normpath(folder))
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, f".seed-{os.getpid()}-{os.urandom(4).hex()}")
        os.mkdir(tmp)                        # (modes as numba's own makedirs and files: the umask's)
        n = copy_kernels(src, tmp)
        os.rename(tmp, folder)               # (fails when another process made the folder meanwhile)
        tmp = None
        return n
    except Exception:                        # full, read-only, raced: compiled on first use instead
        return 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def copy_kernels(src: str, dst: str) -> int:
    """Copy numba's files (``*.nbi`` indexes, ``*.nbc`` machine code) of the folder ``src`` into the
    existing folder ``dst``; returns how many.  Raises OSError."""
    names = [n for n in sorted(os.listdir(src)) if n.endswith((".nbi", ".nbc"))]
    for n in names:
        shutil.copyfile(os.path.join(src, n), os.path.join(dst, n))
    return len(names)


def _jit_disabled() -> bool:
    from numba.core import config
    return bool(config.DISABLE_JIT)


NOTICE = ("streamtrace: note: numba cannot cache its compiled kernels beside the package or in the user's "
          "cache folder (read-only); caching them in {dir} (set STREAMTRACE_CACHE_DIR to choose)")


_ENSURED: list = []     # what ensure_cache chose, once per process


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
    """Make sure numba can cache the kernels, once per process: called by every kernel module before it
    defines its kernels (numba picks a kernel's cache folder when it is defined), never on importing
    ``streamtrace.kernels`` itself.  This module's locator first (``install``); where its folder
    cannot be written, ``$NUMBA_CACHE_DIR``, ``__pycache__`` beside these files or numba's user folder
    (numba's own choice); and when none of those can be written either (a read-only install with a
    read-only ``HOME``, where numba would refuse to define the kernels at all: "cannot cache function
    ...: no locator available"), a private folder in the temporary folder
    (``<tmp>/streamtrace-numba-<uid>``, mode 0700) with one notice on stderr.  Returns the private folder
    it switched numba's cache to, or None when streamtrace's cache folder or numba's own choice works."""
    if not _ENSURED:
        _ENSURED.append(_choose_cache())
    return _ENSURED[0]


def _choose_cache() -> str | None:
    from numba.core import config
    if install():
        return None
    if config.CACHE_DIR and writable(config.CACHE_DIR):
        return None
    if writable(os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")) \
            or writable(_user_cache_dir()):
        return None
    d = _private_dir() or tempfile.mkdtemp(prefix="streamtrace-numba-")
    config.CACHE_DIR = d
    os.environ["NUMBA_CACHE_DIR"] = d          # worker processes started afresh (dask) too
    install()                                   # keyed by version and sources, under it
    print(NOTICE.format(dir=d), file=sys.stderr)
    return d
