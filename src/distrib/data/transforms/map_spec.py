"""The ``element_spec`` of a ``map``: read from a few elements, with None where shapes vary.

TensorFlow traces a map function once, symbolically, so a dimension that
depends on an unknown input dimension or on the values is None
(``batch(3).map(f)`` keeps the batch's ``None``; ``map(lambda n: tf.range(n))``
gives ``(None,)``). distrib runs Python functions on real tensors instead, so
it calls the function on the first element and on probes, and marks None
every dimension that differs between the results:

* the second element of the input (a shape that follows the values);
* the first element cut to fewer rows when the input's leading dimension is
  unknown (a partial batch: the shape that follows the batch size).

A dimension that happens to agree on every probe stays fixed, and an unknown
inner dimension (``padded_batch``) is not probed.

Example:
    >>> Dataset.range(10).batch(3).map(lambda x: x * 2).element_spec
    TensorSpec(shape=(None,), dtype=torch.int64)
    >>> Dataset.range(1, 5).map(lambda n: torch.arange(n)).element_spec
    TensorSpec(shape=(None,), dtype=torch.int64)
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional

from distrib.data.ragged import RaggedList
from distrib.data.transforms.random_draws import ElementKey, call_keyed
from distrib.data.stream import IterContext
from distrib.data.structure import TensorSpec, leaves, map_leaves, spec_of, to_structure

__all__ = ["traced_map_spec", "merge_specs"]


def merge_specs(a: Any, b: Any) -> Any:
    """``a`` with None in every dimension where ``b`` differs (``a`` as it is if the structures differ)."""
    a_leaves, b_leaves = leaves(a), leaves(b)
    if len(a_leaves) != len(b_leaves) or any(
            x.dtype != y.dtype or len(x.shape) != len(y.shape) for x, y in zip(a_leaves, b_leaves)):
        return a
    others = iter(b_leaves)

    def one(s: TensorSpec) -> TensorSpec:
        other = next(others)
        return TensorSpec(tuple(d if d == e else None for d, e in zip(s.shape, other.shape)), s.dtype)
    return map_leaves(one, a)


def _unknown_leading(spec: Any) -> bool:
    specs = leaves(spec)
    return bool(specs) and all(len(s.shape) > 0 and s.shape[0] is None for s in specs)


def _is_ragged(value: Any) -> bool:
    return isinstance(value, RaggedList)


def _rows(element: Any) -> Optional[int]:
    """The common leading size of a batch element's components (a ragged one counts its rows), or None."""
    sizes = set()

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            for v in value.values():
                visit(v)
        elif isinstance(value, tuple):
            for v in value:
                visit(v)
        elif _is_ragged(value):
            sizes.add(len(value))
        else:
            shape = getattr(value, "shape", ())
            sizes.add(int(shape[0]) if len(shape) else None)
    visit(element)
    return sizes.pop() if len(sizes) == 1 else None


def _first_rows(element: Any, n: int) -> Any:
    """Rows ``:n`` of every component (a ragged component keeps its first ``n`` rows)."""
    if isinstance(element, dict):
        return type(element)((k, _first_rows(v, n)) for k, v in element.items())
    if isinstance(element, tuple):
        parts = [_first_rows(v, n) for v in element]
        return type(element)(*parts) if hasattr(element, "_fields") else tuple(parts)
    if _is_ragged(element):
        return type(element)(element[:n])
    return element[:n]


def _probe(fn: Callable, element: Any) -> Any:
    """``fn(element)`` with its random ops drawing from a fixed key: reading a spec leaves torch's generator be."""
    return call_keyed(fn, element, ElementKey(lambda: 0, (), 0))


def traced_map_spec(input_dataset: Any, fn: Callable) -> Any:
    """The spec of ``input_dataset.map(fn)``, read as the module docstring says.

    Raises:
        ValueError: the input is empty (nothing to call ``fn`` on).
    """
    from distrib.data.iterator import DatasetIterator

    iterator = DatasetIterator(input_dataset, IterContext(input_dataset))
    first = next(iterator, None)
    if first is None:
        raise ValueError("the dataset is empty, so its element_spec is unknown")
    spec = spec_of(to_structure(_probe(fn, first)))
    probes: List[Any] = []
    second = next(iterator, None)
    if second is not None:
        probes.append(second)
    if _unknown_leading(input_dataset.element_spec):
        rows = _rows(first)
        if rows is not None and rows > 1:
            probes.append(_first_rows(first, rows - 1))
    for probe in probes:
        try:
            other = spec_of(to_structure(_probe(fn, probe)))
        except Exception:  # noqa: BLE001 - a function that only takes full batches: its shape stays fixed
            continue
        spec = merge_specs(spec, other)
    return spec
