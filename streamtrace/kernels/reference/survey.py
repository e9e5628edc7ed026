"""Plain-Python twin of ``streamtrace.kernels.survey``."""
from __future__ import annotations

__all__ = ["classify_event_py"]

_FLOW_PHASES = ("s", "f", "t")


def classify_event_py(ev) -> tuple:
    """What merge's pre-pass needs of one decoded event: ``("other",)``, ``("meta",)`` (``ph`` is
    ``"M"``), ``("step",)`` (``ph`` ``"X"``, a name starting with ``ProfilerStep#``), ``("flow",
    cat, id)`` (a flow with a string ``cat`` and an integer ``id`` in [0, 10**18)) or ``("decode",)``
    (any other flow).  The kernel ``classify_events`` gives the same
    answer, or S_DECODE where it does not read the event's shape itself."""
    ph = ev.get("ph") if isinstance(ev, dict) else None
    if ph == "M":
        return ("meta",)
    if ph == "X":
        name = ev.get("name")
        return ("step",) if isinstance(name, str) and name.startswith("ProfilerStep#") else ("other",)
    if ph in _FLOW_PHASES:
        cat, fid = ev.get("cat"), ev.get("id")
        if isinstance(cat, str) and type(fid) is int and 0 <= fid < 10 ** 18:
            return ("flow", cat, fid)
        return ("decode",)
    return ("other",)
