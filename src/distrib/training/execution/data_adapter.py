"""Turn what `fit`/`evaluate`/`predict` receive into per-replica batches with their global size.

Inputs:

* a `distrib.data.Dataset` already batched with the GLOBAL batch size (as in
  TF's multi-worker Keras tutorial), or a distributed dataset made from one;
* a torch ``DataLoader`` (its batches are global batches) or map-style
  ``Dataset`` (batched by ``batch_size``);
* arrays or tensors ``x`` (and ``y``, ``sample_weight``): like Keras, they
  become ``Dataset.from_tensor_slices((x, y, sample_weight))``, shuffled
  (``shuffle=True``, training only) with a seed shared by all workers and
  reshuffled every pass, then ``batch(batch_size)`` (without ``batch_size``:
  ``ceil(rows / steps)`` when the call gives its steps, else 32, Keras 3's
  array-adapter rule). A pass over data of known size (arrays, a finite
  dataset) ends with its last batch: with ``steps_per_epoch``, an epoch ends
  there too (Keras 3's epoch iterator; `distrib.training.execution.fit_data`).
  Floating arrays are cast once to the module's parameter dtype.

Every global batch is split among the replicas by
``strategy.experimental_distribute_dataset``. A `DataHandler` yields
``(replica_batch, global_batch_size)``; the global size is what the loss is
divided by. ``class_weight`` turns into per-example weights.

Example (2 replicas, 100 examples, batch_size=10):
    >>> handler = make_handler(strategy, module, x, y, sample_weight=None, batch_size=10, shuffle=True,
    ...                        class_weight=None, purpose="fit")
    >>> handler.steps_per_pass
    10
    >>> batch, global_batch_size = next(handler.make_iterator())   # 5 rows here, 10 in all
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

import numpy as np
import torch

from distrib.comm.elastic import elastic_enabled
from distrib.data.batch_split import per_replica_batch_size
from distrib.utils.nest import flatten, is_namedtuple, map_structure

if TYPE_CHECKING:  # pragma: no cover
    from distrib.data.distribution.distributed import DistributedDataset, DistributedIterator
    from distrib.strategies.interface import Strategy

__all__ = ["DataHandler", "make_handler", "DEFAULT_BATCH_SIZE", "array_batch_size", "is_array_structure",
           "count_rows"]

DEFAULT_BATCH_SIZE = 32


def _is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, torch.Tensor))


def is_array_structure(value: Any) -> bool:
    if _is_array(value):
        return True
    if isinstance(value, (list, tuple)) and value and not is_namedtuple(value):
        return all(is_array_structure(v) for v in value)
    if isinstance(value, dict) and value:
        return all(is_array_structure(v) for v in value.values())
    return False


def count_rows(value: Any, what: str) -> int:
    """Examples in the arrays ``value`` a user gave fit/evaluate/predict; every component must agree.

    The rows of a batch are counted in several places, each for a reason:

    * here, the user's arrays before batching: every component must have
      the same first dimension and none may be a scalar (the error names ``what``);
    * `distrib.data.batch_split.leading_rows`, a batch during a step: the
      first tensor with a dimension counts (the cheapest, on every step;
      `distrib.training.execution.scheduled_executor.batch_rows` uses it);
    * `distrib.data.structure.leading_size`, splitting a dataset element:
      every component must agree, as here, but over tensors and arrays;
      `distrib.data.transforms.map_spec` counts a ragged component's rows too;
      `distrib.data.distribution.batch_position` notes the first tensor, as ``leading_rows``;
    * `distrib.training.execution.predict_output.rows_of`, a step's
      predictions: a scalar prediction is one row.

    Example:
        >>> count_rows((np.ones((4, 2)), np.ones(4)), "x")
        4
    """
    sizes = {int(np.shape(v)[0]) if np.ndim(v) else -1 for v in flatten(value)}
    if -1 in sizes:
        raise ValueError(f"{what} has a scalar component; give one row per example")
    if len(sizes) != 1:
        raise ValueError(f"{what} components have different numbers of examples {sorted(sizes)}")
    return sizes.pop()


def array_batch_size(batch_size: Optional[int], rows: int, steps: Optional[int]) -> Optional[int]:
    """The global batch of ``rows`` array rows: Keras 3's rule when ``batch_size`` is not given.

    ``ceil(rows / steps)`` when the call gives its steps (``steps_per_epoch``,
    ``validation_steps``, ``steps``), else `DEFAULT_BATCH_SIZE`.

    Example:
        >>> array_batch_size(None, 100, 3), array_batch_size(None, 100, None), array_batch_size(10, 100, 3)
        (34, 32, 10)
    """
    if batch_size:
        return batch_size
    if steps:
        return -(-rows // steps)
    return DEFAULT_BATCH_SIZE


def _as_tensor(value: Any, float_dtype: Optional[torch.dtype]) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value.detach()
    if float_dtype is not None and t.is_floating_point() and t.dtype != float_dtype:
        t = t.to(float_dtype)
    return t


def _model_float_dtype(module: torch.nn.Module) -> Optional[torch.dtype]:
    for p in module.parameters():
        if p.is_floating_point():
            return p.dtype
    return None


def _class_weight_tensor(class_weight: Dict[Any, float]) -> torch.Tensor:
    keys = list(class_weight)
    if not keys or not all(isinstance(k, (int, np.integer)) and k >= 0 for k in keys):
        raise ValueError(f"class_weight must map class indices (ints >= 0) to weights, got keys {keys[:5]}")
    table = torch.ones(int(max(keys)) + 1, dtype=torch.float32)
    for k, w in class_weight.items():
        table[int(k)] = float(w)
    return table


def _class_indices(y: torch.Tensor) -> torch.Tensor:
    if y.dim() > 1 and y.shape[-1] > 1:
        return y.argmax(dim=-1)
    return y.reshape(y.shape[0]).long()


def _check_indices(idx: torch.Tensor, table: torch.Tensor) -> None:
    if idx.numel() and (int(idx.max()) >= table.numel() or int(idx.min()) < 0):
        raise ValueError(f"class_weight has no weight for class {int(idx.max())}; give a weight for every class")


def check_class_labels(y: torch.Tensor, table: torch.Tensor) -> None:
    """Raise the one-line error if a label of ``y`` has no weight in ``table`` (reads ``y`` on the host)."""
    _check_indices(_class_indices(y), table)


class DataHandler:
    """Per-replica batches of one input for one fit/evaluate/predict call.

    Each `make_iterator` call is a new pass over the data (reshuffled when
    shuffling). `state_dict` holds the pass count and the last iterator's
    position; after `load_state_dict` the next `make_iterator` continues from
    that position (or, with ``position=False``, starts the following pass).
    Where the batches of a pass are known it also holds those that pass has
    yielded (``pass_steps``), which a resumed iterator's
    `StepIterator.steps_taken` starts from.

    Attributes:
        steps_per_pass: global batches in one pass over the data, or None if unknown/infinite.
        batch_size: the global batch size of the user's arrays (None for other inputs).
        needs_seed: True when the handler shuffles and `seed` must be set before iterating.
        seed: shuffle seed (the same on every worker).
    """

    def __init__(self, strategy: "Strategy", dataset: Any, steps_per_pass: Optional[int], *,
                 shuffle_rows: Optional[int] = None, class_weight: Optional[torch.Tensor] = None,
                 labels_checked: bool = False, distributed: Optional["DistributedDataset"] = None,
                 batch_size: Optional[int] = None) -> None:
        self._strategy = strategy
        self._dataset = dataset
        self._distributed = distributed
        self._class_weight = class_weight
        self._labels_checked = labels_checked
        self._last: Optional[StepIterator] = None
        self._resumed_steps = 0
        self.steps_per_pass = steps_per_pass
        self.batch_size = batch_size
        self.needs_seed = shuffle_rows is not None
        self.seed: Optional[int] = None
        if elastic_enabled() and not (callable(dataset) and not hasattr(dataset, "cardinality")):
            self._distributed_dataset()  # now, not at first use: a replacement must agree where its predecessor did

    def _distributed_dataset(self) -> "DistributedDataset":
        if self._distributed is None:
            dataset = self._dataset
            if callable(dataset) and not hasattr(dataset, "cardinality"):
                if self.seed is None:
                    raise RuntimeError("DataHandler: set the shuffle seed before iterating")
                dataset = dataset(self.seed)
            self._distributed = self._strategy.experimental_distribute_dataset(dataset)
        return self._distributed

    def make_iterator(self) -> "StepIterator":
        """An iterator over the next pass (or over the rest of a restored one)."""
        self._last = StepIterator(iter(self._distributed_dataset()), self._class_weight, self._labels_checked)
        self._last.steps_taken, self._resumed_steps = self._resumed_steps, 0
        return self._last

    def state_dict(self) -> Dict[str, Any]:
        state = self._distributed_dataset().state_dict()
        if self.steps_per_pass is not None:
            state["pass_steps"] = 0 if self._last is None or state["iterator"] is None else self._last.steps_taken
        return state

    def load_state_dict(self, state: Dict[str, Any], position: bool = True) -> None:
        """Restore `state_dict`; ``position=False`` starts the next pass."""
        self._resumed_steps = 0
        if not isinstance(state, dict):  # the dataset's own check names what is wrong
            self._distributed_dataset().load_state_dict(state)
            return
        state = dict(state)
        steps = state.pop("pass_steps", 0)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"data position: pass_steps must be an int >= 0, got {steps!r:.80}")
        if not position:
            state["iterator"] = None
        elif state.get("iterator") is not None:
            self._resumed_steps = steps
        self._distributed_dataset().load_state_dict(state)


class StepIterator:
    """Yields ``(replica_batch, global_batch_size)`` from a distributed iterator (class weights applied)."""

    def __init__(self, inner: "DistributedIterator", class_weight: Optional[torch.Tensor],
                 labels_checked: bool = False) -> None:
        self._inner = inner
        self._class_weight = class_weight
        self._labels_checked = labels_checked
        #: Global batches this pass has yielded (a resumed pass counts from its saved position).
        self.steps_taken = 0

    def __iter__(self) -> "StepIterator":
        return self

    def __next__(self) -> Tuple[Any, int]:
        batch, size = self._inner.next_with_global_size()
        self.steps_taken += 1
        if self._class_weight is not None:
            batch = self._with_class_weight(batch)
        return batch, size

    def _with_class_weight(self, batch: Any) -> Any:
        """``(x, y, weights)``: ``table[class]`` per example, times the batch's own sample weights if any.

        ``y`` holds class indices (``[B]``/``[B, 1]``) or one-hot rows. Labels
        checked before training (arrays) are not read on the host here.
        """
        if not isinstance(batch, (list, tuple)) or len(batch) < 2 or not isinstance(batch[1], torch.Tensor):
            raise ValueError("class_weight needs batches (x, y) with a single tensor y")
        table = self._class_weight
        if table.device != batch[1].device:  # once: the table then lives where the labels arrive
            self._class_weight = table = table.to(batch[1].device)
        idx = _class_indices(batch[1])
        if not self._labels_checked:
            _check_indices(idx, table)
        weights = table[idx]
        if len(batch) == 3 and batch[2] is not None:
            weights = weights * torch.as_tensor(batch[2], dtype=weights.dtype, device=weights.device).reshape(-1)
        return (batch[0], batch[1], weights)


def make_handler(strategy: "Strategy", module: torch.nn.Module, x: Any, y: Any, *, sample_weight: Any, batch_size: Optional[int],
                 shuffle: bool, class_weight: Optional[Dict[Any, float]], purpose: str,
                 steps: Optional[int] = None) -> DataHandler:
    """A `DataHandler` for ``x`` (see the module docstring); ``purpose`` is fit, evaluate or predict.

    ``module`` gives the floating dtype arrays are cast to; ``steps`` (the
    call's steps, if given) sizes the batches of arrays without ``batch_size``.
    """
    from distrib.data import Dataset
    from distrib.data.distribution.adapters import as_dataset
    from distrib.data.distribution.distributed import DistributedDataset

    if x is None:
        raise ValueError(f"{purpose}() needs data: pass x (and y), or a dataset")
    table = _class_weight_tensor(class_weight) if class_weight else None
    if is_array_structure(x):
        n = count_rows(x, "x")
        what = f"batch_size={batch_size}"
        if batch_size is None:
            batch_size = array_batch_size(None, n, steps)
            if steps:
                what = f"the batch size ceil({n} rows / {steps} steps) = {batch_size} (pass batch_size=...)"
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"{purpose}(batch_size=...) must be a positive int, got {batch_size!r}")
        per_replica_batch_size(batch_size, strategy.num_replicas_in_sync, what=what)
        if purpose != "predict" and y is None:
            raise ValueError(f"{purpose}() got arrays x without y: pass y (the targets)")
        if n == 0:
            raise ValueError(f"{purpose}(): x has no examples")
        for name, value in (("y", y), ("sample_weight", sample_weight)):
            if value is not None and count_rows(value, name) != n:
                raise ValueError(f"{purpose}(): x has {n} examples but {name} has {count_rows(value, name)}; "
                                 "give one entry per example")
        dtype = _model_float_dtype(module)
        columns = [map_structure(lambda v: _as_tensor(v, dtype), x)]
        if purpose != "predict":
            columns.append(map_structure(lambda v: _as_tensor(v, dtype), y))
            if sample_weight is not None:
                columns.append(_as_tensor(sample_weight, torch.float32))
        checked = table is not None and len(columns) > 1 and isinstance(columns[1], torch.Tensor)
        if checked:  # once, on the host, before training: no step reads the labels then
            check_class_labels(columns[1], table)
        source = Dataset.from_tensor_slices(tuple(columns))
        steps = -(-n // batch_size)
        if shuffle and purpose == "fit":
            return DataHandler(strategy, lambda seed: source.shuffle(n, seed=seed).batch(batch_size),
                               steps, shuffle_rows=n, class_weight=table, labels_checked=checked, batch_size=batch_size)
        return DataHandler(strategy, source.batch(batch_size), steps, class_weight=table, labels_checked=checked,
                           batch_size=batch_size)
    if y is not None:
        raise ValueError(f"{purpose}(): y must not be given when x is a dataset or loader "
                         f"({type(x).__name__}); the dataset yields (x, y) itself")
    if sample_weight is not None:
        raise ValueError(f"{purpose}(): sample_weight must not be given when x is a dataset; "
                         "yield (x, y, sample_weight) from the dataset instead")
    if isinstance(x, DistributedDataset):
        if batch_size is not None:
            raise ValueError(f"{purpose}(batch_size=...) must not be given for a distributed dataset: "
                             "it is already batched")
        return DataHandler(strategy, None, _cardinality(x), class_weight=table, distributed=x)
    if isinstance(x, torch.utils.data.Dataset) and not isinstance(x, torch.utils.data.IterableDataset):
        batch_size = batch_size or DEFAULT_BATCH_SIZE
        dataset = as_dataset(x).batch(batch_size)
        per_replica_batch_size(batch_size, strategy.num_replicas_in_sync, what=f"batch_size={batch_size}")
    else:
        if batch_size is not None:
            raise ValueError(f"{purpose}(batch_size=...) must not be given for a {type(x).__name__}: "
                             "its batches are the global batches; batch it yourself")
        dataset = as_dataset(x)
    return DataHandler(strategy, dataset, _cardinality(dataset), class_weight=table)


def _cardinality(dataset: Any) -> Optional[int]:
    if dataset is None or not hasattr(dataset, "cardinality"):
        return None
    n = dataset.cardinality()
    return int(n) if n is not None and n >= 0 else None
