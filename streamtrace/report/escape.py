"""Untrusted text written into the report: escaped for where it goes (issue 49).

Every name in a report comes from a trace file (kernel, op, thread and process names, a process
group's description, a GPU's name), a path (the run folder's name, a topology file's) or a job
config: text anybody who passed the trace around could have written.  Written into Markdown as it
is, ``<script>pg</script>`` is raw HTML in the rendered page, ``[l](javascript:alert(1))`` a live
link, ``|`` or a newline cuts a table row, an ANSI escape (``\\x1b]0;...\\x07``) retitles the
terminal that ``cat``\\s the report, and ``$`` starts matplotlib's mathtext in a chart label.  So
each name is written through one of these, for where it goes:

* ``md_text`` -- Markdown prose and table cells: the text made printable
  (``streamtrace.runtime.console.printable``: control characters as ``\\xNN``, newlines as
  ``\\n``, the undecodable bytes of a file name as ``\\xNN``), shortened to ``NAME_LIMIT``
  characters with the count of those cut, HTML-escaped (``&``, ``<``: no tag, no entity; a ``>`` at the start escaped: no block quote)
  and Markdown-escaped (a backslash before every character that could start markup here: ``\\``,
  `````, ``*``, ``[``, ``]``, ``|``, ``~``, ``$`` and an ``_`` not inside a word): the rendered page
  shows the name's text, nothing else (a name is never written at the start of a line, where
  ``#``, ``-`` or ``1.`` would start a block).  Table helpers escape every cell this way (``md_cell``); a cell the report builds as
  Markdown itself is a ``Markup``;
* ``md_code`` -- a name shown as code: printable and shortened as above, in a code span whose
  backtick fence is longer than any run of backticks in it (inside a code span Markdown and HTML
  are shown as text; a ``|`` is escaped in a table cell, as GitHub's tables ask);
* ``chart_text`` -- a chart's title, label or tick: printable, shortened to
  ``CHART_LIMIT``, every ``$`` escaped (matplotlib would start mathtext at it, and fail on an
  unbalanced one).

``report.json`` and the Parquet tables keep the exact text (they are data, read by programs that
escape for their own output); so does the merged trace.
"""
from __future__ import annotations

import re

from ..runtime.console import printable

__all__ = ["Markup", "md_text", "md_cell", "md_code", "chart_text", "NAME_LIMIT", "CHART_LIMIT"]

NAME_LIMIT = 300
"""Characters of a name the Markdown shows; the rest is counted (``... (N more characters)``)."""
CHART_LIMIT = 80
"""Characters of a name a chart shows."""

_HTML = {"&": "&amp;", "<": "&lt;"}     # what opens a tag or an entity (a ">" alone opens neither: "0 -> 1" stays)
_MD_ANY = re.compile(r"[\\`*\[\]|~$]")
_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")      # an "_" that is not inside a word


class Markup(str):
    """Text that is Markdown already (built by the report, its untrusted parts escaped): table
    helpers write it as it is."""


def md_text(text, limit: int | None = NAME_LIMIT) -> str:
    """``text`` for Markdown prose or a table cell (see the module docstring): printable, shortened to
    ``limit`` characters (None: not shortened), HTML- and Markdown-escaped.  Any value is taken
    (``str()`` of it)."""
    s = printable(text, limit)
    if not s:
        return s
    s = _MD_ANY.sub(lambda m: "\\" + m.group(0), s)
    s = _UNDERSCORE.sub(r"\\_", s)
    s = "".join(_HTML.get(ch, ch) for ch in s) if any(ch in s for ch in _HTML) else s
    return "\\" + s if s.startswith(">") else s                      # not a block quote at a line's start


def md_cell(value) -> str:
    """A table cell: ``Markup`` as it is, ``None`` as ``-``, anything else through ``md_text``."""
    if isinstance(value, Markup):
        return value
    return "-" if value is None else md_text(value)


def md_code(text, limit: int | None = NAME_LIMIT, cell: bool = False) -> Markup:
    """``text`` as a Markdown code span (see the module docstring): printable, shortened to ``limit``
    characters, fenced by more backticks than it holds in a row; ``cell``: a ``|`` escaped as a
    table cell needs."""
    s = printable(text, limit)
    run = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (run + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and s.endswith(" ") and s.strip()) else ""
    if cell:
        s = s.replace("|", "\\|")
    return Markup(f"{fence}{pad}{s}{pad}{fence}")


def chart_text(text, limit: int | None = CHART_LIMIT) -> str:
    """``text`` for a chart's title, axis label, tick or legend: printable, shortened to ``limit``
    characters, ``$`` escaped (no mathtext)."""
    return printable(text, limit).replace("$", r"\$")
