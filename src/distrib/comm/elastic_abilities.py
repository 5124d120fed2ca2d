"""What an elastic collective can do beyond `Collective`'s operations, as two small interfaces.

`ElasticAbilities` (step marks, resize listeners, snapshots, replay) and
`ReductionLog` (a log that keeps reduced gradient buckets) are checked with
``isinstance``; a plain collective is neither, so callers skip them on it.
`distrib.comm.elastic.collective.ElasticCollective` implements both. They are
plain classes whose abstract methods are declared (`_declare_abstract`), not
``abc.ABC``s: the check runs on every step, and ``isinstance`` against an ABC
runs Python code where against a plain class it does not.

Example:
    >>> from distrib.comm.collective import LocalCollective
    >>> isinstance(LocalCollective(), ElasticAbilities), isinstance(LocalCollective(), ReductionLog)
    (False, False)
"""
from __future__ import annotations

import abc
import inspect
from typing import Any, Callable, List, Optional

import torch

__all__ = ["ElasticAbilities", "ReductionLog", "elastic_abilities"]


class ElasticAbilities:
    """A collective whose membership can change while the job runs (`distrib.comm.elastic`)."""

    elastic = True

    # ------------------------------------------------------------- steps
    @abc.abstractmethod
    def step_boundary(self) -> None:
        """A training step starts (``strategy.run``): the log marks it."""

    @abc.abstractmethod
    def step_end(self) -> None:
        """A step's replica function returned (``strategy.run``): the members agree on a resize."""

    @abc.abstractmethod
    def apply_pending_resize(self) -> None:
        """Before a step's input is read: apply the resize agreed at the last step's end."""

    # ---------------------------------------------------- resize listeners
    @abc.abstractmethod
    def add_resize_listener(self, listener: Callable[[List[bool]], None]) -> None:
        """Call ``listener(leaving)`` (one flag per current rank) before workers leave, over the old membership."""

    @abc.abstractmethod
    def remove_resize_listener(self, listener: Callable[[List[bool]], None]) -> None:
        """Stop calling ``listener`` (see `add_resize_listener`)."""

    # ----------------------------------------------------------- snapshots
    @abc.abstractmethod
    def keep_snapshot(self, state: Callable[[], Any]) -> None:
        """Keep ``state()`` (a checkpoint's bytes, or an object whose ``bytes()`` are those) as the
        newest in-memory snapshot for a replacement or joiner (every task calls it)."""

    @abc.abstractmethod
    def take_snapshot(self) -> Optional[bytes]:
        """In a replacement or joiner, the survivor's snapshot to restore now (once); else None."""

    @abc.abstractmethod
    def snapshot_restored(self) -> None:
        """The program loaded the snapshot `take_snapshot` returned (snapshot listeners learn of it)."""

    @abc.abstractmethod
    def snapshot_wanted(self) -> bool:
        """Whether the last step's vote asks for a snapshot now."""

    @abc.abstractmethod
    def add_snapshot_listener(self, listener: Any) -> None:
        """Call ``listener.before_snapshot()``, ``snapshot_extra()`` and ``restored(extra)`` around snapshots."""

    # -------------------------------------------------------------- replay
    @abc.abstractmethod
    def replaying_before_it_joined(self) -> bool:
        """True while a joiner replays the steps before its admission (its metric updates must not count)."""


class ReductionLog:
    """A collective that logs reduced gradient buckets itself, without a copy (an elastic one).

    The gradient synchroniser hands it each bucket (`all_reduce_logged`) and
    reduces the next one into another buffer while `keeps` says the log still
    holds the last.
    """

    @abc.abstractmethod
    def keeps(self, tensor: torch.Tensor) -> bool:
        """Whether the log still holds ``tensor`` as a logged result (its owner must not write it)."""

    @abc.abstractmethod
    def all_reduce_logged(self, tensor: torch.Tensor, refill: Callable[[], None]) -> Any:
        """Start an in-place SUM of ``tensor`` that the log may keep as its result; `wait` on the handle.

        ``refill`` writes the input into ``tensor`` again, should the reduction run again after a recovery.
        """


def _declare_abstract(interface: type) -> None:
    """Make ``interface`` uninstantiable, and a subclass built by ``abc.ABCMeta`` (every `Collective`)
    uninstantiable until it implements each of its abstract methods."""
    interface.__abstractmethods__ = frozenset(  # type: ignore[attr-defined]
        name for name, value in vars(interface).items()
        if inspect.isfunction(value) and value.__dict__.get("__isabstractmethod__", False))


_declare_abstract(ElasticAbilities)
_declare_abstract(ReductionLog)


def elastic_abilities(collective: Any) -> Optional[ElasticAbilities]:
    """``collective`` where it is elastic, else None (a plain collective, or none)."""
    return collective if isinstance(collective, ElasticAbilities) else None
