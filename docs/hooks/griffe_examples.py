"""Griffe extension for the API reference: read ``Example ...:`` sections as examples.

distrib's docstrings head their worked examples ``Example:`` or
``Example (what it shows):``. Griffe reads such a heading as an admonition of
Markdown text, so the ``>>>`` lines would render as run-on text; read as an
``Examples:`` section (the note kept as its first line) they render as Python
code. Sections without ``>>>`` lines are left alone. Loaded by ``mkdocs.yml``.
"""
from __future__ import annotations

import re
from typing import Any, List

import griffe

__all__ = ["ExampleSections", "examples_sections"]

_HEADING = re.compile(r"^(?P<indent>[ \t]*)Example(?P<note>\b[^\n]*?)?:{1,2}[ \t]*$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def examples_sections(text: str) -> str:
    """``text`` with each ``Example ...:`` heading over ``>>>`` lines made an ``Examples:`` section.

    Example:
        >>> examples_sections("Sum.\\n\\nExample (two numbers):\\n    >>> 1 + 1\\n    2")
        'Sum.\\n\\nExamples:\\n    two numbers:\\n    >>> 1 + 1\\n    2'
    """
    lines = text.splitlines()
    out: List[str] = []
    for i, line in enumerate(lines):
        match = _HEADING.match(line)
        if match is None:
            out.append(line)
            continue
        body: List[str] = []
        for following in lines[i + 1:]:
            if following.strip() and _indent(following) <= _indent(line):
                break
            body.append(following)
        if not any(b.lstrip().startswith(">>>") for b in body):
            out.append(line)
            continue
        indent = match.group("indent")
        out.append(f"{indent}Examples:")
        note = (match.group("note") or "").strip().lstrip("—-").strip()
        if note.startswith("(") and note.endswith(")"):
            note = note[1:-1]
        if note:
            body_indent = next((b[:_indent(b)] for b in body if b.strip()), indent + "    ")
            out.append(f"{body_indent}{note}:")
    return "\n".join(out)


class ExampleSections(griffe.Extension):
    """Rewrites each docstring's ``Example ...:`` headings as ``Examples:`` sections."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        docstring = obj.docstring
        if docstring is not None and "Example" in docstring.value:
            docstring.value = examples_sections(docstring.value)
