"""Progress bars (tqdm) for the steps that can take more than a couple of seconds, on a terminal
only: ``show`` None means "when stderr is a terminal"; False (``-q``) never."""
from __future__ import annotations

import sys

from tqdm import tqdm


def progress_bar(total: int, desc: str, unit: str = "it", show: bool | None = None) -> tqdm:
    """A tqdm bar on stderr of ``total`` ``unit`` s, disabled off a terminal (``show`` None) or
    when ``show`` is False; use it as a context manager and call ``update()`` per item done."""
    on = sys.stderr.isatty() if show is None else bool(show)
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not on, leave=False)
