"""The documentation site builds without warnings, and its code examples run.

* ``mkdocs build --strict`` (warnings are errors: a broken link or anchor, a page
  missing from the nav, an API object that does not resolve) into a temporary
  directory, once per run (tests/docs_site.py: test_api_reference.py reads the
  same build); skipped, saying why, where MkDocs is not installed (``scripts/env.sh``
  installs the ``docs`` extra, so the project's test run always builds).
* Every ```` ```python ```` block of ``README.md`` and of the pages under ``docs/``
  (``docs/incoming/`` excepted: not built yet) runs. A page's blocks run in order in
  one fresh interpreter (``distrib.testing.run_python``: a fork of a preloaded
  server where that starts exactly as a new ``python`` would), like a notebook,
  so a page may set up names in one block and use them in the next; a traceback names the page and the line in it. A block
  preceded by ``<!-- no-run: REASON -->`` is skipped; the reason must say which
  tested program runs the same code instead. A block whose text already ran on an
  earlier page is not run twice.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
import re
import textwrap
from typing import Dict, List

import pytest
from docs_site import BuiltSite, clean_env

from distrib.testing import run_python

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLE_TIMEOUT_S = 180
_FENCE_OPEN = re.compile(r"^```python[ \t]*$")
_NO_RUN = re.compile(r"^<!--\s*no-run(?::\s*(?P<reason>.*?))?\s*-->\s*$")


@dataclasses.dataclass(frozen=True)
class CodeBlock:
    """One ```python block: where it is, its source, and its no-run reason if any."""

    page: str
    line: int  # the first line of code, 1-based, in the page
    source: str
    no_run: str | None = None


def python_blocks(text: str, page: str) -> List[CodeBlock]:
    """The ```python blocks of a Markdown text, with their ``no-run`` markers.

    Example:
        >>> [b.source for b in python_blocks("x\\n```python\\nprint(1)\\n```\\n", "p.md")]
        ['print(1)\\n']
    """
    lines = text.splitlines()
    blocks: List[CodeBlock] = []
    i = 0
    while i < len(lines):
        if not _FENCE_OPEN.match(lines[i]):
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{page}:{i + 1}: a ```python block is never closed")
        previous = i - 1
        while previous >= 0 and not lines[previous].strip():
            previous -= 1
        marker = _NO_RUN.match(lines[previous]) if previous >= 0 else None
        if marker and not (marker.group("reason") or "").strip():
            raise ValueError(f"{page}:{previous + 1}: a no-run marker needs a reason: "
                             "<!-- no-run: which tested program runs this code -->")
        source = "".join(line + "\n" for line in lines[i + 1:end])
        blocks.append(CodeBlock(page, i + 2, source, marker.group("reason").strip() if marker else None))
        i = end + 1
    return blocks


def doc_pages() -> List[pathlib.Path]:
    """README.md and the built pages under docs/ (docs/incoming/ is not built yet)."""
    pages = sorted(p for p in DOCS.rglob("*.md") if "incoming" not in p.relative_to(DOCS).parts)
    return [ROOT / "README.md", *pages]


def runnable_blocks() -> Dict[str, List[CodeBlock]]:
    """Page (relative path) -> its blocks to run, in order; repeated blocks run once."""
    seen: set = set()
    by_page: Dict[str, List[CodeBlock]] = {}
    for path in doc_pages():
        page = str(path.relative_to(ROOT))
        for block in python_blocks(path.read_text(encoding="utf-8"), page):
            if block.no_run is None and block.source not in seen:
                seen.add(block.source)
                by_page.setdefault(page, []).append(block)
    return by_page


def _runner(blocks: List[CodeBlock]) -> str:
    """A program that runs the blocks in one namespace; tracebacks name page and line."""
    calls = "\n".join(f"_run({str(ROOT / b.page)!r}, {b.line}, {b.source!r})" for b in blocks)
    return textwrap.dedent("""\
        import __main__
        def _run(page, line, source):
            exec(compile("\\n" * (line - 1) + source, page, "exec"), __main__.__dict__)
        """) + calls + "\n"


def test_block_parser_reads_markers_and_lines() -> None:
    text = ("# T\n\n```python\na = 1\n```\n\n<!-- no-run: examples/x.py runs it -->\n"
            "```python\nb = a\n```\n```bash\nls\n```\n")
    blocks = python_blocks(text, "t.md")
    assert [(b.line, b.source, b.no_run) for b in blocks] == [
        (4, "a = 1\n", None), (9, "b = a\n", "examples/x.py runs it")]
    with pytest.raises(ValueError, match=r"t\.md:1: a no-run marker needs a reason"):
        python_blocks("<!-- no-run -->\n```python\nx\n```\n", "t.md")
    with pytest.raises(ValueError, match="never closed"):
        python_blocks("```python\nx\n", "t.md")


def test_no_run_blocks_point_at_a_program_that_exists() -> None:
    skipped = [b for p in doc_pages() for b in python_blocks(p.read_text(encoding="utf-8"), p.name)
               if b.no_run is not None]
    for block in skipped:
        named = re.findall(r"(?:examples|tests)/[\w/]+\.py", block.no_run or "")
        assert named and all((ROOT / n).is_file() for n in named), (
            f"{block.page}:{block.line}: no-run reason names no existing example or test: {block.no_run!r}")
    # 7: the cluster programs (parameter server x4, elastic x2, sidecar), each a tested example.
    assert len(skipped) <= 7, "no-run is for fragments that cannot run alone; make the others runnable"


_REPO_PATH = re.compile(r"(?<![\w/.])((?:examples|tests|bench|scripts|src)/[\w/.-]+\.(?:py|sh|md|json|png))")


def test_files_the_docs_name_exist_and_every_example_is_listed() -> None:
    named = {m for page in doc_pages() for m in _REPO_PATH.findall(page.read_text(encoding="utf-8"))}
    assert named, "the pages name the example programs and their tests"
    assert not sorted(n for n in named if not (ROOT / n).exists()), "the docs name files that do not exist"
    listing = (DOCS / "examples.md").read_text(encoding="utf-8")
    sources = {p: p.read_text(encoding="utf-8") for p in (ROOT / "examples").glob("*.py")}
    helpers = {p for p in sources if any(re.search(rf"^(?:from|import) {p.stem}\b", s, re.M) for s in sources.values())}
    unlisted = sorted(p.name for p in sources if p not in helpers and f"examples/{p.name}" not in listing)
    assert not unlisted, f"docs/examples.md does not list {unlisted}"


@pytest.mark.parametrize("page", sorted(runnable_blocks()))
def test_page_examples_run(page: str, tmp_path: pathlib.Path) -> None:
    blocks = runnable_blocks()[page]
    script = tmp_path / "run_examples.py"
    script.write_text(_runner(blocks), encoding="utf-8")
    result = run_python([script], cwd=tmp_path, env=clean_env(), timeout=EXAMPLE_TIMEOUT_S)
    assert result.returncode == 0, (
        f"the python examples of {page} failed (exit {result.returncode}):\n"
        f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}")


def test_readme_example_is_the_site_example() -> None:
    readme = [b.source for b in python_blocks((ROOT / "README.md").read_text(encoding="utf-8"), "README.md")]
    index = [b.source for b in python_blocks((DOCS / "index.md").read_text(encoding="utf-8"), "index.md")]
    assert readme and readme[0] in index
    assert len(readme[0].splitlines()) <= 20, "the README's example is a first-screen example"


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
                    reason="MkDocs is not installed: pip install -c constraints.txt -e '.[docs]' "
                           "(scripts/env.sh does) to build the documentation site")
def test_docs_build_strict(docs_site: BuiltSite) -> None:
    site = docs_site.site
    assert docs_site.returncode == 0, f"mkdocs build --strict failed:\n{docs_site.stderr[-6000:]}"
    assert "WARNING" not in docs_site.stderr, docs_site.stderr[-6000:]
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "MultiWorkerMirroredStrategy" in home
    api = (site / "api" / "strategies" / "index.html").read_text(encoding="utf-8")
    # the reference is generated from the docstrings: the class and its methods' signatures
    assert 'id="distrib.strategies.mirrored.MirroredStrategy"' in api
    assert "experimental_distribute_dataset" in api
    assert not (site / "incoming").exists(), "docs/incoming/ pages are folded in by hand, not built"


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="MkDocs is not installed")
def test_incoming_pages_are_left_out_of_the_build() -> None:
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"))
    assert config.exclude_docs.match_file("incoming/ux.md")
    assert not config.exclude_docs.match_file("quickstart.md")
