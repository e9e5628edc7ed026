"""The documentation holds together: every relative link of README.md, CONTRIBUTING.md and docs/*.md names a file
that exists (and a heading of it, for ``page.md#anchor``), mkdocs.yml's navigation lists every page,
the README stays a front door (<= 200 lines), and its Python blocks are Python.  (The README's notebook
block and analyze's "Query the outputs" block are run in tests/unit/events/test_load.py.)"""
from __future__ import annotations

import ast
import re

import pytest

from support import ROOT, code_blocks

PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path) -> set:
    """The anchors of a Markdown file's headings as mkdocs and GitHub spell them: lower case,
    punctuation dropped, spaces to hyphens (fenced code skipped)."""
    out, fence = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            out.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text)))
    return out


def links(path):
    text = re.sub(r"(?ms)^```.*?^```", "", path.read_text())      # not the examples' brackets
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    bad = []
    for target in links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not bad, f"{page.name}: " + "; ".join(bad)


def test_mkdocs_nav_lists_every_page():
    text = (ROOT / "mkdocs.yml").read_text()
    nav = set(re.findall(r":\s*([\w.-]+\.md)\s*$", text, re.M))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert nav == pages, f"in nav only: {nav - pages}; pages not in nav: {pages - nav}"


def test_readme_is_a_front_door():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_readme_python_blocks_parse():
    blocks = code_blocks("README.md")
    assert len(blocks) >= 2
    for b in blocks:
        ast.parse(b)


def test_readme_setup_commands_are_ci_s():
    """CI (.ci/run) runs the README's two set-up commands; they must be the same text."""
    ci = (ROOT / ".ci" / "run").read_text()
    cmds = [line.split("#")[0].strip() for line in code_blocks("README.md", "bash")[0].splitlines() if line.strip()]
    assert cmds and all(c in ci for c in cmds)


def test_no_page_links_outside_docs():
    """Issue 47: mkdocs builds the site of docs/ only, so a page's link to a file outside it (../CHANGELOG.md)
    is a broken link there; such files are named as paths instead."""
    bad = [f"{p.name}: {t}" for p in sorted((ROOT / "docs").glob("*.md")) for t in links(p)
           if (ROOT / "docs") not in (p.parent / t.partition("#")[0]).resolve().parents
           and (p.parent / t.partition("#")[0]).resolve() != (ROOT / "docs")]
    assert not bad, bad
    assert "not_found: info" not in (ROOT / "mkdocs.yml").read_text()     # a broken link is a warning again


def test_readme_set_up_told_truthfully():
    """Issue 47: the CPU build of torch before the test extra, one compile figure (the notice's own terms:
    CPU-s and seconds on idle cores), the full suite's time and the fast lane; the epilogue's exit codes as
    docs/failure-behaviour.md has them (exit 1 when there is no job)."""
    text = " ".join((ROOT / "README.md").read_text().split())
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in text
    assert "CPU-s" in text and "~10 s on 2 cores" not in text
    assert re.search(r"full suite takes ~\d+ min on 2 (idle )?cores", text) and '-m "not slow"' in text
    assert "exits 0 unless `--strict`" not in text and "exits 1 only when there is no job" in text
    fb = " ".join((ROOT / "docs" / "failure-behaviour.md").read_text().split())
    assert "no rank traces found" in fb and "exit 1" in fb
    contrib = " ".join((ROOT / "CONTRIBUTING.md").read_text().split())
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in contrib


ROLE = re.compile(r":(?:py:)?(?:func|class|mod|data|meth|attr|exc|obj|const|term|ref|doc):`")


def test_docstrings_use_plain_names():
    """Docstrings name code in ``double backticks`` (numpydoc's plain form): no Sphinx role, which
    nothing here renders (issue 45: 2,283 of them were written for a reader who never came)."""
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "streamtrace").rglob("*.py"))
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if ROLE.search(line)]
    assert not bad, bad[:20]
    assert ROLE.search("see :func:`streamtrace.load`")            # the check can fail
