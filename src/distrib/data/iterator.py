"""`DatasetIterator` (checkpointable), `Optional` and `OutOfRangeError`.

An iterator's position is a plain JSON-able dict: restoring it into an
iterator of the same pipeline (in this process or another) continues with
exactly the elements that remained, shuffles included.

Example:
    >>> ds = Dataset.range(6).shuffle(6).repeat().batch(4)
    >>> it = iter(ds); _ = next(it); saved = it.state_dict()
    >>> expected = [next(it) for _ in range(3)]
    >>> again = iter(ds); again.load_state_dict(saved)
    >>> all(torch.equal(a, b) for a, b in zip(expected, [next(again) for _ in range(3)]))
    True
"""
from __future__ import annotations

from typing import Any, Dict, List

from distrib.data.blocks import materialize
from distrib.data.stream import IterContext, walk
from distrib.errors import DistribError

__all__ = ["DatasetIterator", "Optional", "OutOfRangeError", "pipeline_signature"]

_STATE_VERSION = 1


class OutOfRangeError(DistribError):
    """Raised by ``get_next()`` at the end of the data (``tf.errors.OutOfRangeError``'s role).

    As in TensorFlow, the two ways of asking for the next element end
    differently: ``next(iterator)`` (and so a ``for`` loop) ends with a plain
    ``StopIteration``, the Python iterator protocol; ``iterator.get_next()``
    raises this error. It is deliberately *not* a ``StopIteration``: a
    ``for`` loop would swallow it silently, and inside a generator Python
    (PEP 479) would turn it into a ``RuntimeError``.

    Example:
        >>> it = iter(Dataset.range(1))
        >>> it.get_next().item()
        0
        >>> def batches():
        ...     yield it.get_next()
        >>> try:
        ...     list(batches())
        ... except OutOfRangeError as error:
        ...     print(type(error).__name__)
        OutOfRangeError
    """


_NOTHING = object()


class Optional:
    """A value that may be absent, returned by ``get_next_as_optional()``.

    Example:
        >>> opt = Optional.from_value(3)
        >>> opt.has_value(), opt.get_value()
        (True, 3)
        >>> Optional.empty().has_value()
        False
    """

    def __init__(self, value: Any = _NOTHING, element_spec: Any = None) -> None:
        self._value = value
        self._spec = element_spec

    @staticmethod
    def from_value(value: Any) -> "Optional":
        return Optional(value)

    @staticmethod
    def empty(element_spec: Any = None) -> "Optional":
        return Optional(_NOTHING, element_spec)

    def has_value(self) -> bool:
        return self._value is not _NOTHING

    def get_value(self) -> Any:
        if self._value is _NOTHING:
            raise ValueError("this Optional has no value (end of data): check has_value() first")
        return self._value

    @property
    def element_spec(self) -> Any:
        return self._spec

    def __repr__(self) -> str:
        return "Optional(<empty>)" if self._value is _NOTHING else f"Optional({self._value!r})"


def pipeline_signature(dataset: Any) -> List[str]:
    """The operator names of a pipeline, root first: a cheap check that a state fits it."""
    return [type(node).__name__ for node in walk(dataset)]


class DatasetIterator:
    """Iterates a `Dataset`; ``state_dict()``/``load_state_dict()`` save and restore its position."""

    def __init__(self, dataset: Any, ctx: IterContext) -> None:
        self._dataset = dataset
        self._ctx = ctx
        self._lineage = ctx.next_iteration()
        self._root = dataset._iterator(ctx, self._lineage, None)
        self._done = False

    def __iter__(self) -> "DatasetIterator":
        return self

    def next_element(self) -> Any:
        """The next element *unmaterialized* (a lazy batch stays lazy); None at the end."""
        if self._done:
            return None
        block = self._root.next_block(1)
        if block is None:
            self._done = True
            return None
        return block.elements()[0]

    def __next__(self) -> Any:
        element = self.next_element()
        if element is None:
            raise StopIteration
        return materialize(element)

    def get_next(self) -> Any:
        """The next element; `OutOfRangeError` at the end."""
        element = self.next_element()
        if element is None:
            raise OutOfRangeError("end of the dataset")
        return materialize(element)

    def get_next_as_optional(self) -> Optional:
        element = self.next_element()
        if element is None:
            return Optional.empty(self.element_spec)
        return Optional.from_value(materialize(element))

    @property
    def element_spec(self) -> Any:
        return self._dataset.element_spec

    # ----------------------------------------------------------- checkpoints
    def state_dict(self) -> Dict[str, Any]:
        """The position as a JSON-able dict (ints, lists and dicts only)."""
        return {"version": _STATE_VERSION, "pipeline": pipeline_signature(self._dataset),
                "lineage": list(self._lineage), "ctx": self._ctx.state(),
                "root": self._root.state(), "done": self._done}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from a position saved by `state_dict` on an iterator of the same pipeline."""
        check_state(state, self._dataset)
        self._ctx.load_state(state["ctx"])
        self._lineage = tuple(state["lineage"])
        self._root = self._dataset._iterator(self._ctx, self._lineage, state["root"])
        self._done = bool(state["done"])


def check_state(state: Dict[str, Any], dataset: Any) -> None:
    """An error naming the mismatch when ``state`` was not saved from this pipeline."""
    if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
        raise ValueError(f"not a distrib.data iterator state (version {_STATE_VERSION} expected): "
                         f"{str(state)[:80]}")
    expected = pipeline_signature(dataset)
    if state.get("pipeline") != expected:
        raise ValueError(f"iterator state was saved from pipeline {state.get('pipeline')} but this "
                         f"pipeline is {expected}: restore it into the same pipeline")
