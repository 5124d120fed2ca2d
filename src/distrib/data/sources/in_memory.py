"""Source datasets: tensor slices, single tensors, ranges, generators, iterables and files.

In-memory sources (`TableDataset` and its subclasses) hand out index blocks,
so nothing is copied until a batch is gathered. Generators and iterables hand
out values; restoring their position re-reads them and skips what was
consumed.

Example:
    >>> ds = Dataset.from_tensor_slices({"x": np.ones((3, 2)), "y": [0, 1, 2]})
    >>> next(iter(ds))["y"]
    tensor(0)
"""
from __future__ import annotations

import glob
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from distrib.data.blocks import IndexBlock, ListBlock, RangeTable, Table, TensorTable
from distrib.data.dataset import Dataset
from distrib.data.options import UNKNOWN
from distrib.data.stream import BlockIterator, IterContext
from distrib.data.strings import STRING
from distrib.data.structure import (TensorSpec, _short, leaves, map_leaves, to_structure,
                                    to_tensor)

__all__ = ["TableDataset", "TensorSlicesDataset", "TensorsDataset", "RangeDataset",
           "GeneratorDataset", "IterableDataset", "FilesDataset", "TableIterator",
           "ElementsIterator", "block_iterator_over"]

_CHUNK = 256  # values read from a Python iterator per block


class TableIterator(BlockIterator):
    """Walks the rows of a table in order, as index blocks."""

    def __init__(self, table: Table, state: Optional[dict] = None) -> None:
        self._table = table
        self._n = len(table)
        self._pos = int(state["pos"]) if state else 0

    def next_block(self, limit: int) -> Optional[IndexBlock]:
        pos = self._pos
        if pos >= self._n:
            return None
        hi = min(self._n, pos + limit)
        self._pos = hi
        return IndexBlock(self._table, np.arange(pos, hi, dtype=np.int64))

    def state(self) -> dict:
        return {"pos": self._pos}


class ElementsIterator(BlockIterator):
    """Reads values from ``open_fn()`` (an iterator); rebuilt by re-opening and skipping."""

    def __init__(self, open_fn: Callable[[], Iterator[Any]], convert: Callable[[Any], Any],
                 state: Optional[dict] = None) -> None:
        self._open, self._convert = open_fn, convert
        self._it: Optional[Iterator[Any]] = None
        self._pos = 0
        self._done = False
        skip = int(state["pos"]) if state else 0
        if skip:
            it = self._iterator()
            for _ in range(skip):
                if next(it, _END) is _END:
                    self._done = True
                    break
                self._pos += 1

    def _iterator(self) -> Iterator[Any]:
        if self._it is None:
            self._it = iter(self._open())
        return self._it

    def next_block(self, limit: int) -> Optional[ListBlock]:
        if self._done:
            return None
        it = self._iterator()
        items: List[Any] = []
        for _ in range(min(limit, _CHUNK)):
            value = next(it, _END)
            if value is _END:
                self._done = True
                break
            items.append(self._convert(value))
        self._pos += len(items)
        return ListBlock(items) if items else None

    def state(self) -> dict:
        return {"pos": self._pos}


_END = object()


class TableDataset(Dataset):
    """The rows of a `Table`, in order."""

    def __init__(self, table: Table) -> None:
        self._table = table

    def _iterator(self, ctx: IterContext, lineage: Tuple[int, ...], state: Optional[dict]) -> BlockIterator:
        return TableIterator(self._table, state)

    def _cardinality(self) -> int:
        return len(self._table)

    def _static_spec(self) -> Any:
        return self._table.row_spec()


class TensorSlicesDataset(TableDataset):
    """`Dataset.from_tensor_slices`: one element per row."""

    def __init__(self, tensors: Any) -> None:
        structure = _to_tf_structure(tensors, "from_tensor_slices")
        if any(t.ndim == 0 for t in leaves(structure)):
            raise ValueError("from_tensor_slices needs tensors with at least one dimension to slice; "
                             "use from_tensors for a single element")
        super().__init__(TensorTable(structure))


class TensorsDataset(TableDataset):
    """`Dataset.from_tensors`: a single element."""

    def __init__(self, tensors: Any) -> None:
        structure = _to_tf_structure(tensors, "from_tensors")
        super().__init__(TensorTable(map_leaves(lambda t: t.unsqueeze(0), structure)))


class RangeDataset(TableDataset):
    """`Dataset.range`: int64 scalars ``start, start + step, ...`` below ``stop``."""

    def __init__(self, *args: int, dtype: Any = None) -> None:
        if not 1 <= len(args) <= 3:
            raise TypeError(f"range takes 1 to 3 integers (stop | start, stop | start, stop, step), "
                            f"got {len(args)}")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (args + (1,))[:3]
        if step == 0:
            raise ValueError("range step must not be 0")
        n = max(0, -(-(stop - start) // step)) if step > 0 else max(0, -(-(start - stop) // -step))
        super().__init__(RangeTable(int(start), int(step), int(n), dtype or torch.int64))


class GeneratorDataset(Dataset):
    """`Dataset.from_generator`: the values of ``generator(*args)``."""

    def __init__(self, generator: Callable[..., Any], output_signature: Any, args: Tuple[Any, ...]) -> None:
        if not callable(generator):
            raise TypeError(f"from_generator needs a callable that returns an iterator (a generator "
                            f"function), got a {type(generator).__name__}: pass the function, not its call")
        self._generator, self._signature, self._args = generator, output_signature, args

    def _convert(self, value: Any) -> Any:
        if self._signature is None:
            return to_structure(value)
        return _conform(value, self._signature)

    def _iterator(self, ctx: IterContext, lineage: Tuple[int, ...], state: Optional[dict]) -> BlockIterator:
        return ElementsIterator(lambda: self._generator(*self._args), self._convert, state)

    def _static_spec(self) -> Any:
        if self._signature is not None and any(s.shape is None for s in leaves(self._signature)):
            return None  # output_types without output_shapes: read the spec from an element
        return self._signature


class IterableDataset(Dataset):
    """The items of a re-iterable Python object (a list, a DataLoader, ...), converted to tensors."""

    def __init__(self, iterable: Any, cardinality: int = UNKNOWN) -> None:
        self._iterable, self._card = iterable, cardinality

    def _iterator(self, ctx: IterContext, lineage: Tuple[int, ...], state: Optional[dict]) -> BlockIterator:
        return ElementsIterator(lambda: iter(self._iterable), to_structure, state)

    def _cardinality(self) -> int:
        return self._card


class FilesDataset(Dataset):
    """`Dataset.from_files`: the elements of each file in turn."""

    def __init__(self, paths: Union[str, Sequence[str]], reader: Callable[[str], Any]) -> None:
        if isinstance(paths, str):
            found = sorted(glob.glob(paths))
            if not found:
                raise FileNotFoundError(f"from_files: no file matches {paths!r}")
            paths = found
        self.paths: List[str] = [str(p) for p in paths]
        if not self.paths:
            raise ValueError("from_files needs at least one path")
        self._reader = reader

    def with_paths(self, paths: Sequence[str]) -> "FilesDataset":
        """The same reader over other files (what FILE sharding builds for each worker)."""
        clone = self._with_inputs(())
        clone.paths = list(paths)
        return clone

    def _iterator(self, ctx: IterContext, lineage: Tuple[int, ...], state: Optional[dict]) -> BlockIterator:
        return _FilesIterator(self.paths, self._reader, state)


class _FilesIterator(BlockIterator):
    def __init__(self, paths: List[str], reader: Callable[[str], Any], state: Optional[dict]) -> None:
        self._paths, self._reader = paths, reader
        self._file = int(state["file"]) if state else 0
        self._inner: Optional[BlockIterator] = None
        self._inner_pos = 0
        if state and state.get("inner") is not None and self._file < len(paths):
            self._inner = block_iterator_over(reader(paths[self._file]), state["inner"])

    def next_block(self, limit: int) -> Optional[Any]:
        while self._file < len(self._paths):
            if self._inner is None:
                self._inner = block_iterator_over(self._reader(self._paths[self._file]), None)
            block = self._inner.next_block(limit)
            if block is not None:
                return block
            self._inner = None
            self._file += 1
        return None

    def state(self) -> dict:
        return {"file": self._file, "inner": None if self._inner is None else self._inner.state()}


def block_iterator_over(content: Any, state: Optional[dict]) -> BlockIterator:
    """A block iterator over what a file reader returned: a Dataset, tensors, or an iterable."""
    if isinstance(content, Dataset):
        ctx = IterContext(content)
        return content._iterator(ctx, (0,), state)
    if isinstance(content, (torch.Tensor, np.ndarray)) or (
            isinstance(content, (tuple, dict)) and all(
                isinstance(x, (torch.Tensor, np.ndarray)) for x in leaves(content))):
        return TableIterator(TensorTable(to_structure(content)), state)
    if hasattr(content, "__iter__"):
        return ElementsIterator(lambda: iter(content), to_structure, state)
    raise TypeError(f"a from_files reader must return tensors, arrays, a Dataset or an iterable of "
                    f"elements, got a {type(content).__name__}")


def _to_tf_structure(value: Any, where: str) -> Any:
    """tf.data's conversion: tuples and dicts are structures, lists become (stacked) tensors."""
    def leaf(x: Any) -> torch.Tensor:
        if isinstance(x, _Leaf):
            x = x.value
        if isinstance(x, list) and any(isinstance(v, (torch.Tensor, np.ndarray)) for v in x):
            return torch.stack([to_tensor(v) for v in x])
        try:
            return to_tensor(x)
        except TypeError as exc:
            raise TypeError(f"{where}: {exc}") from None

    if isinstance(value, (tuple, dict)):
        return map_leaves(leaf, _lists_as_leaves(value))
    return leaf(value)


def _lists_as_leaves(value: Any) -> Any:
    if isinstance(value, dict):
        return type(value)((k, _lists_as_leaves(v)) for k, v in value.items())
    if isinstance(value, tuple):
        parts = [_lists_as_leaves(v) for v in value]
        return type(value)(*parts) if hasattr(value, "_fields") else tuple(parts)
    if isinstance(value, list):
        return _Leaf(value)
    return value


class _Leaf:
    """Marks a list as one tensor-to-be for `map_leaves`."""

    def __init__(self, value: list) -> None:
        self.value = value


def _conform(value: Any, signature: Any) -> Any:
    """Convert a generator's value to the dtypes of ``signature`` and check its shapes."""
    if isinstance(signature, TensorSpec):
        t = to_tensor(value)
        if signature.dtype == STRING or not isinstance(t, torch.Tensor):
            if not signature.is_compatible_with(t):
                raise ValueError(f"from_generator yielded {_short(value)} where output_signature says "
                                 f"{signature.dtype} of shape {signature.shape}")
            return t
        if t.dtype != signature.dtype:
            t = t.to(signature.dtype)
        if not signature.is_compatible_with(t):
            raise ValueError(f"from_generator yielded shape {tuple(t.shape)}, which does not match "
                             f"output_signature shape {signature.shape}")
        return t
    if isinstance(signature, dict):
        return {k: _conform(value[k], s) for k, s in signature.items()}
    if isinstance(signature, (tuple, list)):
        if not isinstance(value, (tuple, list)) or len(value) != len(signature):
            raise ValueError(f"from_generator yielded {type(value).__name__} that does not match "
                             f"output_signature with {len(signature)} components")
        return tuple(_conform(v, s) for v, s in zip(value, signature))
    raise TypeError(f"output_signature must be TensorSpecs nested in tuples/dicts, got {signature!r}")
