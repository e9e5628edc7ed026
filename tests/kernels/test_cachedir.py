"""The kernel cache that survives reinstalling the same version (streamtrace.kernels.cachedir), run in
fresh processes on copies of the package: a copy at another path with new mtimes (a reinstall, a fresh
venv) loads the compiled kernel; changed kernel sources never load the old entry; an unwritable folder
falls back to numba's default quietly; concurrent compiles leave a loadable cache.

The cache hits and misses are numba's own counters (``dispatcher.stats``), the files those numba wrote."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import numba
import pytest

from support import ROOT

# one small kernel (scan._is_ws, ~0.2 s to compile), called once; the index keys numba wrote for it
_PROBE = textwrap.dedent("""
    import json, os, sys, time
    go = os.environ.get("PROBE_GO")
    while go and not os.path.exists(go):
        time.sleep(0.005)
    from numba.core.registry import cpu_target
    from streamtrace.kernels import cachedir, scan
    disp = scan._is_ws
    ok = bool(disp(32)) and not bool(disp(65))
    cache = disp._cache
    keys = list(cache._cache_file._load_index())
    print(json.dumps({
        "installed": cachedir.installed(), "path": cache._cache_path, "ok": ok,
        "hits": sum(disp.stats.cache_hits.values()), "misses": sum(disp.stats.cache_misses.values()),
        "key_magic": [list(k[1]) for k in keys], "magic": list(cpu_target.target_context.codegen().magic_tuple()),
        "version": __import__("streamtrace").__version__}))
""")


def _copy(dest):
    """The package copied to ``dest/streamtrace`` without any cache or bytecode (a fresh install)."""
    shutil.copytree(ROOT / "streamtrace", dest / "streamtrace",
                    ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc", "*.pyc"))
    return dest


def _env(site, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "STREAMTRACE_CACHE_DIR", "XDG_CACHE_HOME", "NUMBA_CACHE_LOCATOR_CLASSES")}
    env.update(PYTHONPATH=str(site), **{k: str(v) for k, v in extra.items()})
    return env


def _probe(site, cwd, script=_PROBE, **extra):
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=cwd,
                       env=_env(site, **extra), timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1]), p.stderr


def _files(folder):
    """{name: (size, mtime_ns)} of numba's files under ``folder``."""
    return {str(f.relative_to(folder)): (f.stat().st_size, f.stat().st_mtime_ns)
            for f in folder.rglob("*") if f.suffix in (".nbi", ".nbc")}


def test_reinstall_loads_and_changed_sources_do_not(tmp_path):
    cache = tmp_path / "cache"
    a = _copy(tmp_path / "venv-a")
    first, err = _probe(a, tmp_path, STREAMTRACE_CACHE_DIR=cache)
    assert first["installed"] and first["ok"] and (first["hits"], first["misses"]) == (0, 1), first
    folder = cache / first["version"]
    assert os.path.dirname(first["path"]) == str(folder) and err == ""
    # numba keys the entry by the CPU: the codegen's magic tuple (triple, CPU name, features)
    assert first["key_magic"] == [first["magic"]]
    written = _files(cache)
    assert len(written) == 2 and all(n.startswith(os.path.relpath(first["path"], cache)) for n in written)

    # a reinstall of the same version: the same sources at another path, every mtime new
    b = _copy(tmp_path / "venv-b")
    later = time.time() + 3600
    for f in (b / "streamtrace").rglob("*.py"):
        os.utime(f, (later, later))
    again, _ = _probe(b, tmp_path, STREAMTRACE_CACHE_DIR=cache)
    assert again["ok"] and (again["hits"], again["misses"]) == (1, 0) and again["path"] == first["path"], again
    assert _files(cache) == written                     # loaded, nothing compiled or rewritten

    # the kernel's own module changed (same version, e.g. an editable install): compiled anew elsewhere
    scan = b / "streamtrace" / "kernels" / "scan.py"
    scan.write_text(scan.read_text() + "\n# changed\n")
    changed, _ = _probe(b, tmp_path, STREAMTRACE_CACHE_DIR=cache)
    assert changed["ok"] and (changed["hits"], changed["misses"]) == (0, 1), changed
    assert changed["path"] != first["path"]
    # another kernel module changed (a callee could live there): not the old entry either
    c = _copy(tmp_path / "venv-c")
    other = c / "streamtrace" / "kernels" / "intervals.py"
    other.write_text(other.read_text() + "\n# changed\n")
    callee, _ = _probe(c, tmp_path, STREAMTRACE_CACHE_DIR=cache)
    assert (callee["hits"], callee["misses"]) == (0, 1) and callee["path"] not in (first["path"], changed["path"])
    # the first install is still served by its own entry, unchanged
    back, _ = _probe(a, tmp_path, STREAMTRACE_CACHE_DIR=cache)
    assert (back["hits"], back["misses"]) == (1, 0) and back["path"] == first["path"]


def test_where_the_cache_lives(tmp_path):
    """$STREAMTRACE_CACHE_DIR, else $NUMBA_CACHE_DIR/streamtrace, else $XDG_CACHE_HOME/streamtrace, else
    ~/.cache/streamtrace; then <version>/<sources sha256, 16 hex>-numba<numba version>."""
    script = ("import json; from streamtrace.kernels import scan, cachedir; "
              "print(json.dumps([cachedir.installed(), scan._is_ws._cache._cache_path]))")
    home = tmp_path / "home"
    home.mkdir()
    cases = [({"STREAMTRACE_CACHE_DIR": tmp_path / "st", "NUMBA_CACHE_DIR": tmp_path / "nb"}, tmp_path / "st"),
             ({"NUMBA_CACHE_DIR": tmp_path / "nb", "XDG_CACHE_HOME": tmp_path / "xdg"},
              tmp_path / "nb" / "streamtrace"),
             ({"XDG_CACHE_HOME": tmp_path / "xdg", "HOME": home}, tmp_path / "xdg" / "streamtrace"),
             ({"XDG_CACHE_HOME": "relative/ignored", "HOME": home}, home / ".cache" / "streamtrace")]
    for extra, root in cases:
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                           env=_env(ROOT, **extra), timeout=300)
        assert p.returncode == 0, p.stderr
        installed, path = json.loads(p.stdout)
        version, key = os.path.relpath(path, root).split(os.sep)
        assert installed and version == __import__("streamtrace").__version__, (extra, path)
        assert key.endswith(f"-numba{numba.__version__}") and len(key.split("-")[0]) == 16, path


def test_unwritable_folder_falls_back_to_numba_quietly(tmp_path):
    """A cache root that cannot be created: numba's default (here $NUMBA_CACHE_DIR, its own layout),
    no message, the kernel runs; a function of another package keeps numba's default anyway."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    numba_dir = tmp_path / "numba"
    out, err = _probe(ROOT, tmp_path, STREAMTRACE_CACHE_DIR=blocker / "cache", NUMBA_CACHE_DIR=numba_dir)
    assert out["ok"] and not out["installed"] and err == ""
    assert out["path"].startswith(str(numba_dir)) and "streamtrace" not in os.path.relpath(out["path"], numba_dir)
    assert _files(numba_dir)

    mod = tmp_path / "userpkg"
    mod.mkdir()
    (mod / "userkern.py").write_text("from numba import njit\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n")
    script = ("import json, streamtrace.kernels.scan, userkern; from streamtrace.kernels import cachedir; "
              "print(json.dumps([cachedir.installed(), userkern.f._cache._cache_path]))")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                       env=_env(f"{ROOT}{os.pathsep}{mod}", STREAMTRACE_CACHE_DIR=tmp_path / "st"), timeout=300)
    assert p.returncode == 0, p.stderr
    installed, path = json.loads(p.stdout)
    assert installed and path == str(mod / "__pycache__")


def test_concurrent_first_compiles_leave_a_loadable_cache(tmp_path):
    """Three processes compile the same kernel into an empty cache at once (as analyze -j N or dask workers
    can): all succeed, no temporary file is left, and a fourth process loads the entry."""
    cache, go = tmp_path / "cache", tmp_path / "go"
    env = _env(ROOT, STREAMTRACE_CACHE_DIR=cache, PROBE_GO=go)
    procs = [subprocess.Popen([sys.executable, "-c", _PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=tmp_path, env=env) for _ in range(3)]
    time.sleep(2.0)                  # let them import numba and wait at the same line
    go.write_text("")
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert all(json.loads(o.splitlines()[-1])["ok"] for o, _ in outs)
    assert not [f for f in cache.rglob("*") if ".tmp." in f.name]
    last, _ = _probe(ROOT, tmp_path, STREAMTRACE_CACHE_DIR=cache)
    assert (last["hits"], last["misses"]) == (1, 0) and last["ok"]


@pytest.mark.parametrize("missing", ["CacheImpl", "_CacheLocator"])
def test_missing_private_api_leaves_numba_default(tmp_path, missing):
    """numba without the private names this relies on: install() says False and numba's default applies."""
    script = textwrap.dedent(f"""
        import json, numba.core.caching as c
        if {missing!r} == "CacheImpl":
            del c.CacheImpl          # the name only: numba's FunctionCache still holds the class
        else:
            del c._CacheLocator
        from streamtrace.kernels import cachedir, scan
        print(json.dumps([cachedir.install(), bool(scan._is_ws(32)), scan._is_ws._cache._cache_path]))
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                       env=_env(ROOT, STREAMTRACE_CACHE_DIR=tmp_path / "st", NUMBA_CACHE_DIR=tmp_path / "nb"),
                       timeout=300)
    assert p.returncode == 0, p.stderr
    installed, ok, path = json.loads(p.stdout)
    assert not installed and ok and path.startswith(str(tmp_path / "nb"))
    assert "streamtrace" not in os.path.relpath(path, tmp_path / "nb")


# -- the kernels a built wheel carries (setup.py -> runtime.compile.prebuild -> cachedir.seed) -----------

def _digest(kernels_dir) -> str:
    """sha256 of the kernel sources as the module docstring defines it (each ``*.py`` by name: its name, a
    NUL, its bytes, a NUL), computed here from the files."""
    import hashlib
    h = hashlib.sha256()
    for f in sorted(p for p in os.listdir(kernels_dir) if p.endswith(".py")):
        h.update(f.encode() + b"\0" + open(os.path.join(kernels_dir, f), "rb").read() + b"\0")
    return h.hexdigest()


def test_seed_creates_a_new_folder_whole_and_never_adds_to_one(tmp_path):
    """seed: a folder that does not exist yet becomes a copy of the prebuilt folder of its own name (its
    numba files only, with the umask's modes as numba's own files have), nothing left beside it; an existing
    folder, even empty, is left as it is; another name, or a place it cannot write: 0, nothing raised."""
    from streamtrace.kernels import cachedir
    pre = tmp_path / "prebuilt" / "0123456789abcdef-numba9.9"
    pre.mkdir(parents=True)
    files = {"a-1.py311.nbi": b"A" * 1000, "a-1.py311.1.nbc": b"B", "b-2.py311.nbi": b"C"}
    for name, data in files.items():
        (pre / name).write_bytes(data)
    (pre / "notes.txt").write_text("not numba's")
    folder = tmp_path / "cache" / "0.2.0" / pre.name
    assert cachedir.seed(str(folder), prebuilt=str(pre.parent)) == 3
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == files
    mask = os.umask(0)
    os.umask(mask)
    assert all((f.stat().st_mode & 0o777) == (0o666 & ~mask) for f in folder.iterdir())
    assert (folder.stat().st_mode & 0o777) == (0o777 & ~mask)
    assert sorted(p.name for p in folder.parent.iterdir()) == [pre.name]       # (no temporary left)
    (folder / "a-1.py311.nbi").unlink()
    assert cachedir.seed(str(folder), prebuilt=str(pre.parent)) == 0 and not (folder / "a-1.py311.nbi").exists()
    empty = tmp_path / "cache2" / pre.name
    empty.mkdir(parents=True)
    assert cachedir.seed(str(empty), prebuilt=str(pre.parent)) == 0 and not list(empty.iterdir())
    other = tmp_path / "cache" / "0.2.0" / "fedcba9876543210-numba9.9"
    assert cachedir.seed(str(other), prebuilt=str(pre.parent)) == 0 and not other.exists()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert cachedir.seed(str(blocker / pre.name), prebuilt=str(pre.parent)) == 0


def test_seeding_processes_at_once_leave_one_whole_folder(tmp_path):
    """Four processes seed the same new folder at once: one folder, every file whole, no temporary left."""
    pre = tmp_path / "prebuilt" / "0123456789abcdef-numba9.9"
    pre.mkdir(parents=True)
    for i in range(40):
        (pre / f"k{i}-1.py311.nbi").write_bytes(bytes([i]) * 20_000)
    folder, go = tmp_path / "cache" / pre.name, tmp_path / "go"
    script = ("import os, sys, time\nwhile not os.path.exists(sys.argv[3]): time.sleep(0.002)\n"
              "from streamtrace.kernels import cachedir\nprint(cachedir.seed(sys.argv[1], prebuilt=sys.argv[2]))")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(folder), str(pre.parent), str(go)],
                              stdout=subprocess.PIPE, text=True, env=_env(ROOT)) for _ in range(4)]
    time.sleep(1.0)
    go.write_text("")
    counts = sorted(int(p.communicate(timeout=120)[0]) for p in procs)
    assert counts[-1] == 40 and all(c in (0, 40) for c in counts), counts
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == {f.name: f.read_bytes() for f in pre.iterdir()}
    assert sorted(p.name for p in folder.parent.iterdir()) == [pre.name]


_PREBUILD = ("import json, sys; from streamtrace.runtime.compile import prebuild; "
             "r = prebuild(sys.argv[1], 'scan._is_ws'); "
             "print(json.dumps([r['files'], r['folder'], r['failed'], r['compiled']]))")


_UNIT_PROBE = ("import json; from streamtrace.runtime import compile as C; from streamtrace.kernels import scan; "
               "todo = C.pending('scan._is_ws'); C.load('scan._is_ws'); d = scan._is_ws; "
               "print(json.dumps({'pending': todo, 'hits': sum(d.stats.cache_hits.values()), "
               "'misses': sum(d.stats.cache_misses.values()), 'path': d._cache._cache_path}))")
"""The unit ``scan._is_ws`` (its signature in ``runtime.compile.UNITS``) loaded in a fresh process."""


def test_prebuilt_kernels_load_in_a_fresh_install_and_only_for_their_sources(tmp_path):
    """prebuild into a built package (a copy, its own empty cache), then that package installed elsewhere
    with an empty user cache: the kernel loads (numba's hit counter), nothing compiled; the same package with
    one kernel source changed finds no prebuilt folder of its sources and compiles."""
    built = _copy(tmp_path / "build")
    p = subprocess.run([sys.executable, "-c", _PREBUILD, str(built / "streamtrace")], capture_output=True, text=True,
                       cwd=tmp_path, env=_env(built, STREAMTRACE_CACHE_DIR=tmp_path / "build-cache"), timeout=300)
    assert p.returncode == 0, p.stderr
    files, folder, failed, units = json.loads(p.stdout.splitlines()[-1])
    name = f"{_digest(built / 'streamtrace' / 'kernels')[:16]}-numba{numba.__version__}"
    assert failed == {} and files >= 2 and folder == str(built / "streamtrace" / "kernels" / "prebuilt" / name)
    assert units == ["scan._is_ws"]
    (compiled,) = (tmp_path / "build-cache").glob(f"*/{name}")     # (<version>/: the installed one, or unknown)
    assert sorted(os.listdir(folder)) == sorted(f.name for f in compiled.iterdir() if f.suffix in (".nbi", ".nbc"))
    before = {f: open(os.path.join(folder, f), "rb").read() for f in os.listdir(folder)}
    stale = built / "streamtrace" / "kernels" / "prebuilt" / "0123456789abcdef-numba9.9"
    stale.mkdir()
    again = subprocess.run([sys.executable, "-c", _PREBUILD, str(built / "streamtrace")], capture_output=True,
                           text=True, cwd=tmp_path, env=_env(built, STREAMTRACE_CACHE_DIR=tmp_path / "build-cache2"),
                           timeout=300)                  # (an in-tree rebuild: its earlier kernels reused)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.splitlines()[-1])[2:] == [{}, []]
    assert {f: open(os.path.join(folder, f), "rb").read() for f in os.listdir(folder)} == before
    assert os.listdir(built / "streamtrace" / "kernels" / "prebuilt") == [name]
    site = tmp_path / "site"
    shutil.copytree(built, site)                                   # installed from the wheel, elsewhere
    out, err = _probe(site, tmp_path, _UNIT_PROBE, STREAMTRACE_CACHE_DIR=tmp_path / "user")
    assert out["pending"] == [] and (out["hits"], out["misses"]) == (1, 0) and err == ""
    assert os.path.basename(out["path"]) == name
    changed = tmp_path / "changed"
    shutil.copytree(built, changed)
    with open(changed / "streamtrace" / "kernels" / "scan.py", "a") as f:
        f.write("\n# changed\n")
    out, _ = _probe(changed, tmp_path, _UNIT_PROBE, STREAMTRACE_CACHE_DIR=tmp_path / "user2")
    assert out["pending"] == ["scan._is_ws"] and (out["hits"], out["misses"]) == (0, 1)
    assert os.path.basename(out["path"]) != name


def test_the_installed_wheel_carries_the_kernels_of_its_own_sources():
    """``pip install .`` (the README's set-up, CI's install) built a wheel whose package holds
    ``kernels/prebuilt/<its sources' digest>-numba<this numba>/`` with an index per compiled kernel: the first
    command after it seeds its cache from them.  An editable install builds no wheel: skipped there."""
    import importlib.metadata
    import sysconfig
    where = list(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")))   # (not the checkout)
    dists = [d for d in importlib.metadata.distributions(path=where) if d.metadata["Name"] == "streamtrace"]
    if not dists:
        pytest.skip("streamtrace is not installed in this environment (tests run from the checkout)")
    url = json.loads(dists[0].read_text("direct_url.json") or "{}")
    if url.get("dir_info", {}).get("editable") or os.environ.get("STREAMTRACE_NO_PREBUILD"):
        pytest.skip("an editable install (or STREAMTRACE_NO_PREBUILD): no wheel was built")
    kernels = dists[0].locate_file("streamtrace/kernels")
    (folder,) = os.listdir(os.path.join(kernels, "prebuilt"))
    digest, built_with = folder.split("-numba")
    files = os.listdir(os.path.join(kernels, "prebuilt", folder))
    assert digest == _digest(kernels)[:16]
    assert len([f for f in files if f.endswith(".nbi")]) >= 40 and any(f.endswith(".nbc") for f in files), files
    if built_with != numba.__version__:      # (pip's build environment took another numba: nothing to seed)
        pytest.skip(f"the wheel's kernels were compiled with numba {built_with}, this is {numba.__version__}")


def test_the_build_hook_reaches_numba_through_the_path_it_was_given(tmp_path, monkeypatch):
    """setup.py's ``run_prebuild`` as pip runs it: numba importable only through ``PYTHONPATH`` (pip's
    isolated build environment; here ``python -S``, no site-packages, and numba's folder on the path): the
    built package's kernel compiles into its ``prebuilt`` folder. Replacing the path instead of extending it
    (the first version) left the wheel without kernels."""
    import importlib.util
    import sysconfig
    spec = importlib.util.spec_from_file_location("streamtrace_setup", ROOT / "setup.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    lib = _copy(tmp_path / "lib")
    site = os.path.dirname(os.path.dirname(numba.__file__))
    stdlib = sysconfig.get_paths()["stdlib"]
    assert site != stdlib
    monkeypatch.setenv("PYTHONPATH", site)
    monkeypatch.setenv("NUMBA_CACHE_LOCATOR_CLASSES",    # (a numba setting of the build machine's: not passed
                       "numba.core.caching._UserProvidedCacheLocator")   # on, else no kernel would be ours)
    got = hook.run_prebuild(lib, python=(sys.executable, "-S"), units=("scan._is_ws",))
    assert got.get("files", 0) >= 2 and got["failed"] == {}, got
    name = f"{_digest(lib / 'streamtrace' / 'kernels')[:16]}-numba{numba.__version__}"
    assert any(f.endswith(".nbi") for f in os.listdir(lib / "streamtrace" / "kernels" / "prebuilt" / name))


def test_a_build_without_kernels_ships_no_earlier_ones(tmp_path):
    """``setup.py build_py`` with ``STREAMTRACE_NO_PREBUILD=1`` into a build folder that holds an earlier
    build's ``prebuilt`` kernels (pip builds in the source tree, ``build/lib``): they are removed, none made."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "streamtrace", src / "streamtrace", ignore=shutil.ignore_patterns("__pycache__", "prebuilt"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    stale = tmp_path / "lib" / "streamtrace" / "kernels" / "prebuilt" / "0123456789abcdef-numba9.9"
    stale.mkdir(parents=True)
    (stale / "k-1.py311.nbi").write_bytes(b"old")
    env = _env(ROOT, STREAMTRACE_NO_PREBUILD="1")
    del env["PYTHONPATH"]
    p = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path / "lib")],
                       capture_output=True, text=True, cwd=src, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "lib" / "streamtrace" / "kernels" / "cachedir.py").exists()
    assert not (tmp_path / "lib" / "streamtrace" / "kernels" / "prebuilt").exists()
