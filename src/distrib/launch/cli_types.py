"""Argument types of the ``distrib`` command line: counts, ranges, seconds, ports.

Each raises `argparse.ArgumentTypeError` with one line that says what was
expected, which argparse prints after the option's name.

Example:
    >>> count_or_range("2:4"), count_or_range("3")
    ((2, 4), (3, 3))
    >>> range_text(2, 2), range_text(2, 4)
    ('2', '2:4')
"""
from __future__ import annotations

import argparse
from typing import Tuple

__all__ = ["count_or_range", "count", "range_text", "seconds", "port"]


def count_or_range(text: str) -> Tuple[int, int]:
    """``N`` or ``MIN:MAX`` (as torchrun's ``--nnodes``): ``(MIN, MAX)``, ``(N, N)`` for a plain count."""
    low, sep, high = text.partition(":")
    if not sep:
        number = count(text)
        return number, number
    first, last = count(low), count(high)
    if not 1 <= first <= last:
        raise argparse.ArgumentTypeError(f"expected MIN:MAX with 1 <= MIN <= MAX, got {text!r}")
    return first, last


def count(text: str) -> int:
    """An integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def range_text(low: int, high: int) -> str:
    """How `count_or_range`'s value is written back: ``N`` or ``MIN:MAX``."""
    return str(high) if low == high else f"{low}:{high}"


def seconds(text: str) -> float:
    """A number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def port(text: str) -> int:
    """A TCP port, 1..65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port in 1..65535, got {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 1..65535, got {value}")
    return value
