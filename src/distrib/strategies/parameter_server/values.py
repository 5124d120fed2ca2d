"""`RemoteValue` and `PerWorkerValues`: results of scheduled functions, and values held per worker.

Example:
    >>> loss = coordinator.schedule(step_fn, args=(per_worker_iterator,))   # returns at once
    >>> loss.fetch()                  # waits; numpy, like TensorFlow's fetch()
    array(0.4132, dtype=float32)
    >>> loss.get()                    # waits; the value as the function returned it (a tensor)
    tensor(0.4132)
"""
from __future__ import annotations

import threading
from typing import Any, Optional, Sequence, Tuple

import torch

from distrib.utils.nest import map_structure

__all__ = ["RemoteValue", "PerWorkerValues", "PerWorkerDataset", "PerWorkerIterator"]


def _to_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return value


def _identity(value: Any) -> Any:
    return value


class RemoteValue:
    """The future result of a function given to ``ClusterCoordinator.schedule``.

    It is filled asynchronously when a worker finishes the function; if the
    function failed (or was cancelled because an earlier one failed, or a
    ps task was lost), `fetch` and `get` raise that error. Passing a
    RemoteValue to ``schedule`` passes its value (waiting for it).
    """

    def __init__(self) -> None:
        self._done = threading.Event()
        self._value: Any = None
        self._error: Optional[BaseException] = None

    def set_result(self, value: Any) -> None:
        """The coordinator's side: the function returned ``value``."""
        self._value = value
        self._done.set()

    def set_exception(self, error: BaseException) -> None:
        """The coordinator's side: the function failed (or was cancelled) with ``error``."""
        self._error = error
        self._done.set()

    def _wait(self) -> Any:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def fetch(self) -> Any:
        """Wait for the result and return it with tensors converted to numpy arrays."""
        return map_structure(_to_numpy, self._wait())

    def get(self) -> Any:
        """Wait for the result and return it as the function returned it."""
        return self._wait()

    def done(self) -> bool:
        """Whether the result (or error) is there."""
        return self._done.is_set()

    def __reduce__(self) -> Tuple[Any, Tuple[Any]]:
        return _identity, (self.get(),)

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self._error is not None else "done")
        return f"<RemoteValue {state}>"


class PerWorkerValues:
    """One value per worker; a scheduled function receives the value of the worker it runs on.

    `ClusterCoordinator.create_per_worker_dataset` and ``iter()`` of its
    result make these; you can also give one value per worker yourself
    (``PerWorkerValues([v0, v1])`` -> worker ``i`` gets ``values[i]``).
    Values are built on a worker the first time a function there needs them,
    and kept (an iterator keeps its position across functions).
    """

    def __init__(self, values: Sequence[Any]) -> None:
        self.recipe: Tuple[Any, ...] = ("values", tuple(values))

    @classmethod
    def from_recipe(cls, recipe: Tuple[Any, ...]) -> "PerWorkerValues":
        """Values each worker makes from ``recipe``: ``("call", fn)`` calls ``fn()`` there, ``("iter",
        values)`` iterates that worker's value of ``values``, ``("value", v)`` copies ``v``."""
        obj = cls.__new__(cls)
        obj.recipe = recipe
        return obj

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.recipe[0]}>"


class PerWorkerDataset(PerWorkerValues):
    """What ``create_per_worker_dataset`` returns: a dataset on every worker; ``iter()`` it."""

    def __iter__(self) -> "PerWorkerIterator":
        """Per-worker iterators over the per-worker datasets (TensorFlow's ``per_worker_iterator``)."""
        return PerWorkerIterator.from_recipe(("iter", self))


class PerWorkerIterator(PerWorkerValues):
    """An iterator on every worker; pass it to scheduled functions, which call ``next`` on it."""

    def __iter__(self) -> "PerWorkerIterator":
        return self

    def __next__(self) -> Any:
        raise TypeError("a per-worker iterator lives on the workers: pass it to coordinator.schedule(fn, "
                        "args=(iterator,)) and call next(iterator) inside fn")
