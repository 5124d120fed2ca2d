"""Griffe extension for the API reference: read ``Example:`` sections as examples.

distrib's docstrings head their worked examples ``Example:`` (the Google style
guide's spelling). Griffe reads that heading as an admonition of Markdown text,
so the ``>>>`` lines would render as nested block quotes; read as an
``Examples:`` section they render as Python code. Loaded by ``mkdocs.yml``.
"""
from __future__ import annotations

import re
from typing import Any

import griffe

__all__ = ["ExampleSections"]

_EXAMPLE_HEADING = re.compile(r"^(?P<indent>[ \t]*)Example:[ \t]*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Renames each docstring's ``Example:`` heading to ``Examples:``."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        docstring = obj.docstring
        if docstring is not None and "Example:" in docstring.value:
            docstring.value = _EXAMPLE_HEADING.sub(r"\g<indent>Examples:", docstring.value)
