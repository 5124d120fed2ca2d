"""Keras's progress-line pieces: step counter, times and ``- name: value`` log entries.

Example:
    >>> format_count(7, 70)
    ' 7/70'
    >>> format_step_time(0.028)
    ' 28ms/step'
    >>> format_eta(75.0)
    ' 1:15'
    >>> format_logs({"accuracy": 0.83, "loss": 0.54})
    ' - accuracy: 0.8300 - loss: 0.5400'
    >>> fit_line(" 7/70", 0.1, " 1:15", " 28ms/step", {"accuracy": 0.83, "loss": 0.54}, 40)
    ' 7/70 ━───────── 1:15 - loss: 0.5400'
"""
from __future__ import annotations

import math
from typing import Any, Iterator, List, Mapping, Optional

__all__ = ["format_count", "format_step_time", "format_eta", "format_value", "format_logs",
           "format_bar", "fit_line", "BAR_WIDTH"]

BAR_WIDTH = 20
_MIN_BAR_WIDTH = 10


def format_count(current: int, target: Optional[int]) -> str:
    """``current/target`` right-aligned to the target's width, or ``current/Unknown``."""
    if not target:
        return f"{current:7d}/Unknown"
    digits = int(math.log10(target)) + 1
    return f"{current:{digits}d}/{target}"


def format_step_time(seconds: float, unit: str = "step") -> str:
    """Time per step the way Keras prints it: ``2s/step``, ``28ms/step`` or ``350us/step``."""
    if seconds >= 1 or seconds == 0:
        return f" {seconds:.0f}s/{unit}"
    if seconds >= 1e-3:
        return f" {seconds * 1e3:.0f}ms/{unit}"
    return f" {seconds * 1e6:.0f}us/{unit}"


def format_eta(seconds: float) -> str:
    """Remaining time: ``42s``, ``1:15`` or ``1:02:03``."""
    s = int(max(seconds, 0))
    if s > 3600:
        return f" {s // 3600}:{(s % 3600) // 60:02d}:{s % 60:02d}"
    if s > 60:
        return f" {s // 60}:{s % 60:02d}"
    return f" {s}s"


def format_value(value: Any) -> str:
    """A log value: 4 decimals, scientific notation for tiny magnitudes, ``str`` for non-numbers."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if number != number or abs(number) > 1e-3 or number == 0.0:
        return f"{number:.4f}"
    return f"{number:.4e}"


def format_logs(logs: Optional[Mapping[str, Any]]) -> str:
    """`` - name: value`` for each entry, training entries first, then ``val_*``, each alphabetical."""
    if not logs:
        return ""
    names = sorted(logs, key=lambda k: (k.startswith("val_"), k))
    return "".join(f" - {k}: {format_value(logs[k])}" for k in names)


def format_bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """Keras's bar: ``━`` for the done part, ``─`` for the rest (``width`` characters)."""
    done = min(width, max(0, int(fraction * width)))
    return "━" * done + "─" * (width - done)


def _loss_first(names: List[str]) -> List[str]:
    """Log names in the order they are given up: last dropped is ``loss``, then ``val_loss``."""
    keep = [n for n in ("loss", "val_loss") if n in names]
    return [n for n in reversed(names) if n not in keep] + list(reversed(keep))


def _candidates(count: str, fraction: Optional[float], clock: str, step_time: str,
                logs: Mapping[str, Any]) -> Iterator[str]:
    """The line from fullest to barest; each drops the least useful part left."""
    names = sorted(logs, key=lambda k: (k.startswith("val_"), k))
    bars = [BAR_WIDTH, _MIN_BAR_WIDTH] if fraction is not None else [0]

    def line(bar: int, clock_part: str, step: str, shown: List[str]) -> str:
        drawn = f" {format_bar(fraction or 0.0, bar)}" if bar else ""
        return count + drawn + clock_part + step + format_logs({k: logs[k] for k in shown})

    yield line(bars[0], clock, step_time, names)
    for bar in bars:
        yield line(bar, clock, "", names)
    shown = list(names)
    for name in _loss_first(names)[:-1]:  # the other metrics go before the bar does
        shown.remove(name)
        yield line(bars[-1], clock, "", shown)
    yield line(0, clock, "", shown)
    yield line(0, "", "", shown)


def fit_line(count: str, fraction: Optional[float], clock: str, step_time: str,
             logs: Optional[Mapping[str, Any]], width: int) -> str:
    """The progress line in at most ``width`` characters, dropping parts before it cuts ``loss``.

    Given up in this order: the step time, half the bar, the metrics other
    than ``loss`` (``val_*`` first, then the last alphabetically; ``val_loss``
    last), the bar, the time. Only a width too small for ``count - loss:
    value`` cuts the line.

    Example:
        >>> logs = {"accuracy": 0.83, "loss": 0.54, "val_loss": 0.6}
        >>> fit_line("70/70", 1.0, " 2s", " 28ms/step", logs, 79)
        '70/70 ━━━━━━━━━━ 2s - accuracy: 0.8300 - loss: 0.5400 - val_loss: 0.6000'
        >>> fit_line("70/70", 1.0, " 2s", " 28ms/step", logs, 30)
        '70/70 2s - loss: 0.5400'
    """
    last = ""
    for last in _candidates(count, fraction, clock, step_time, logs or {}):
        if len(last) <= width:
            return last
    return last[:max(width, 0)]
