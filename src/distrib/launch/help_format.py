"""Help text that fits the terminal, and never more than 80 columns.

argparse wraps option help to the terminal's width, however wide, and
prints a raw description or epilog as written. `FittedHelpFormatter` caps
the width at 80 columns (narrower terminals get their own width) and fills
the description and epilog too: a paragraph of unindented lines is filled as
one; an indented line (an example command, its explanation) keeps its
indentation and is filled on its own, so an example command shorter than the
width is never broken.

Example:
    >>> text = "Run tasks " * 20 + "\\n\\nexamples:\\n  distrib launch train.py\\n"
    >>> print(fill_help_text(text, 40))
    Run tasks Run tasks Run tasks Run tasks
    Run tasks Run tasks Run tasks Run tasks
    Run tasks Run tasks Run tasks Run tasks
    Run tasks Run tasks Run tasks Run tasks
    Run tasks Run tasks Run tasks Run tasks
    <BLANKLINE>
    examples:
      distrib launch train.py
"""
from __future__ import annotations

import argparse
import shutil
import textwrap
from typing import List, Optional

__all__ = ["FittedHelpFormatter", "fill_help_text", "MAX_HELP_COLUMNS"]

MAX_HELP_COLUMNS = 80
"""The widest help ``distrib`` prints, whatever the terminal's width."""


def fill_help_text(text: str, width: int, indent: str = "") -> str:
    """Fill ``text`` to ``width`` columns, each line after ``indent``: paragraphs as wholes,
    indented lines one by one (keeping their indentation), headings (``examples:``) as they are."""
    out: List[str] = []
    paragraph: List[str] = []

    def flush() -> None:
        if paragraph:
            out.append(_fill(" ".join(paragraph), width, indent))
            paragraph.clear()

    for line in text.rstrip("\n").split("\n"):
        stripped = line.strip()
        if not stripped:
            flush()
            out.append("")
        elif line[0].isspace():
            flush()
            out.append(_fill(stripped, width, indent + line[:len(line) - len(line.lstrip())]))
        elif stripped.endswith(":"):  # a heading such as "examples:"
            flush()
            out.append(indent + stripped)
        else:
            paragraph.append(stripped)
    flush()
    return "\n".join(out)


def _fill(text: str, width: int, indent: str) -> str:
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


class FittedHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's formatter, at most `MAX_HELP_COLUMNS` wide, filling the description and epilog."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 28,
                 width: Optional[int] = None) -> None:
        if width is None:
            width = min(shutil.get_terminal_size().columns, MAX_HELP_COLUMNS) - 1
        super().__init__(prog, indent_increment, max_help_position, max(width, 40))

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return fill_help_text(text, width, indent)

    def _split_lines(self, text: str, width: int) -> List[str]:
        # an option's help: never split "--max-restarts" at its hyphen
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False, break_long_words=False)
