"""Whether this process is the chief, as seen through a callback's model."""
from __future__ import annotations

from typing import Any, Optional, Protocol

__all__ = ["is_chief", "ChiefRole", "model_strategy"]


class ChiefRole(Protocol):
    """What chief-only callbacks need of a strategy (every `distrib.Strategy` is one)."""

    @property
    def is_chief(self) -> bool:
        """True on the task that writes logs and progress."""


def is_chief(model: Any) -> bool:
    """``model.distribute_strategy.is_chief``; True when there is no model or strategy (one process)."""
    strategy: Optional[ChiefRole] = model_strategy(model)
    return True if strategy is None else bool(strategy.is_chief)


def model_strategy(model: Any) -> Any:
    """``model.distribute_strategy`` (every `distrib.Model` has one), or None before a model is set."""
    return None if model is None else model.distribute_strategy
