"""Named fields over a kernel's state array, for its facade: ``slot`` (an int64 slot read as an
``int``) and ``optional_slot`` (a slot that holds a value once its flag slot is set, else None)."""
from __future__ import annotations

__all__ = ["slot", "optional_slot"]


def slot(array: str, index: int, doc: str) -> property:
    """A read-only property: ``int(self.<array>[index])``."""
    return property(lambda self: int(getattr(self, array)[index]), doc=doc)


def optional_slot(array: str, index: int, flag: int, doc: str) -> property:
    """A read-only property: ``int(self.<array>[index])`` when ``self.<array>[flag]`` is set, else None."""
    def get(self):
        a = getattr(self, array)
        return int(a[index]) if a[flag] else None
    return property(get, doc=doc)
