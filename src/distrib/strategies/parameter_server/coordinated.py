"""`Coordinated`: what a `ClusterCoordinator` needs of its strategy (the parameter server's).

A base class of its own, so the coordinator recognises its strategy without
importing the strategy module (which imports the coordinator).

Example:
    >>> isinstance(distrib.experimental.ParameterServerStrategy(), Coordinated)   # on the chief
    True
    >>> isinstance(distrib.MirroredStrategy(), Coordinated)
    False
"""
from __future__ import annotations

import abc
from typing import Any, Callable, Dict, Tuple

__all__ = ["Coordinated"]


class Coordinated(abc.ABC):
    """A strategy a `ClusterCoordinator` schedules on; it keeps its one coordinator."""

    #: The `ClusterCoordinator` made for this strategy (one per strategy), or None.
    _coordinator: Any = None

    @abc.abstractmethod
    def coordinator_parts(self) -> Tuple[Any, Dict[int, Any], Callable[..., None]]:
        """What the coordinator dispatches with: the channel, the exported definitions and the
        function that adds a closure's metric changes to the chief's metrics."""
