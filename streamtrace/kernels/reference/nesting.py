"""Plain-Python twin of ``streamtrace.kernels.nesting``."""
from __future__ import annotations

__all__ = ["count_bad_nesting_py"]


def count_bad_nesting_py(start, end) -> int:
    """Plain-Python twin of ``count_bad_nesting`` (same contract), written as a
    direct search for the innermost enclosing slice rather than a stack."""
    kept = []   # (start, end) of accepted slices
    bad = 0
    for s, e in zip(list(start), list(end)):
        parents = [(ps, pe) for ps, pe in kept if ps <= s < pe]
        if parents:
            inner = max(parents, key=lambda p: (p[0], -p[1]))
            if e > inner[1]:
                bad += 1
                continue
        kept.append((s, e))
    return bad
