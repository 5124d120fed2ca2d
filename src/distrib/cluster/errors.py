"""The one error type of the cluster package and helpers that phrase its messages.

Every `ClusterConfigError` is one line that starts with the field at fault
(``TF_CONFIG['task']['index']``, ``SLURM_NTASKS``, ``cluster['worker'][1]``)
and says what was expected, so a user can fix the configuration without
reading distrib's source.
"""
from __future__ import annotations

from distrib.errors import DistribError

import difflib
import json
from typing import Any, Iterable

__all__ = ["ClusterConfigError", "TASK_TYPES", "kind_of", "show", "did_you_mean", "quoted_list"]

TASK_TYPES: tuple[str, ...] = ("chief", "worker", "ps", "evaluator")
"""The job names TensorFlow's TF_CONFIG knows, in canonical (rank) order."""


class ClusterConfigError(DistribError, ValueError):
    """A cluster description (TF_CONFIG, environment, ClusterSpec) is malformed.

    The message is a single line naming the culprit field, e.g.
    ``TF_CONFIG['task']['index']: 2 is out of range for job 'worker' with 2 tasks (valid 0..1)``.
    """


def kind_of(value: Any) -> str:
    """Names a value's type the way a JSON author thinks of it ("a string", "null")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def show(value: Any, limit: int = 60) -> str:
    """Renders a value as its author wrote it (JSON when possible), cut to ``limit`` characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def did_you_mean(word: Any, choices: Iterable[str]) -> str:
    """Returns `` (did you mean 'x'?)`` for a close match, else an empty string."""
    if not isinstance(word, str):
        return ""
    match = difflib.get_close_matches(word.lower(), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def quoted_list(names: Iterable[Any]) -> str:
    """``['a', 'b']`` -> ``'a', 'b'``."""
    return ", ".join(repr(n) for n in names)
