"""Whether the two sides of a diff look like runs of one job (``unrelated_jobs``): a diff of an H100
job against an A100 job of another model and world size compares nothing that a change of code or
settings made, so it is said first, as warnings, never silently.

Three facts, each side's from its analysed folders' ``summary.json`` (``trace_metadata``) and the
kernels table of the comparison:

* the GPU model (``device_name``, the traces' ``deviceProperties`` name);
* the world size (``world_size``, the traces' ``distributedInfo``);
* the model, by what it runs: the share of each side's kernel time spent in kernels (by name) the
  other side runs too; below ``SHARED_MIN`` on either side, the two ran different code (another
  model shape gives other GEMM and attention kernels; a tuning change moves a few of them, not most).
"""
from __future__ import annotations

from ...analyze.outputs import Analysis

#: the least share of a side's kernel time in kernels both sides run, for one job
SHARED_MIN = 0.5


def _facts(dirs) -> tuple[set, set]:
    """(GPU model names, world sizes) the analysed folders ``dirs`` state (empty when unknown)."""
    gpus, worlds = set(), set()
    for d in dirs:
        for r in Analysis.read(d).summary.get("ranks", []):
            tm = r.get("trace_metadata") or {}
            if tm.get("device_name"):
                gpus.add(str(tm["device_name"]))
            if isinstance(tm.get("world_size"), int) and tm["world_size"] > 0:
                worlds.add(int(tm["world_size"]))
    return gpus, worlds


def shared_share(kernels) -> tuple[float | None, float | None]:
    """(base, test): the share of each side's kernel time in kernels the other side runs too (None
    for a side without kernel time); ``kernels``: the comparison's table (``base_total_ns``,
    ``test_total_ns`` per kernel)."""
    b = [x or 0 for x in kernels.column("base_total_ns").to_pylist()]
    t = [x or 0 for x in kernels.column("test_total_ns").to_pylist()]
    both_b = sum(x for x, y in zip(b, t) if x > 0 and y > 0)
    both_t = sum(y for x, y in zip(b, t) if x > 0 and y > 0)
    return (both_b / sum(b) if sum(b) else None), (both_t / sum(t) if sum(t) else None)


def unrelated_jobs(base_dirs, test_dirs, kernels, labels=("base", "test")) -> list[str]:
    """One warning naming each fact (module docstring) that differs between the sides; [] for one job."""
    (gb, wb), (gt, wt) = _facts(base_dirs), _facts(test_dirs)
    lb, lt = labels
    out = []
    if gb and gt and gb != gt:
        out.append(f"different GPU models: {lb} {', '.join(sorted(gb))}, {lt} {', '.join(sorted(gt))}")
    if wb and wt and wb != wt:
        out.append(f"different world sizes: {lb} {', '.join(map(str, sorted(wb)))}, "
                   f"{lt} {', '.join(map(str, sorted(wt)))}")
    sb, st = shared_share(kernels)
    if sb is not None and st is not None and min(sb, st) < SHARED_MIN:
        out.append(f"different models or code: the kernels both sides run hold {100 * sb:.0f} % of {lb}'s kernel time "
                   f"and {100 * st:.0f} % of {lt}'s")
    if not out:
        return []
    return [f"these look like runs of different jobs ({'; '.join(out)}): the differences below are not what "
            f"a change of code or settings did"]
