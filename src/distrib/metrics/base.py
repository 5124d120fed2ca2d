"""`Metric`: Keras's stateful metric protocol, with state aggregated across all replicas.

A metric keeps its state in tensors (for example ``total`` and ``count``)
that `update_state` changes with tensor operations only: no ``.item()``, no
host synchronisation, no communication, so updating every step is cheap.

**`result()` is a collective under multi-replica strategies.** A metric
captures ``distrib.get_strategy()`` when it is constructed (create it inside
``strategy.scope()``). When that strategy has ``num_replicas_in_sync > 1``,
`result` packs every state tensor into one flat float64 tensor, sums it
across replicas with one ``strategy.reduce(ReduceOp.SUM, ...)`` and computes
the result from the sum, so every worker gets the same *global* value. Every
worker must therefore call `result` the same number of times, in the same
order as its other collectives, or the job hangs until the collective times
out. Use `local_result` for this replica's value without communication, and
`distrib.metrics.global_results` to aggregate many metrics in one collective.

Example:
    >>> with strategy.scope():                       # 2 replicas
    ...     acc = distrib.metrics.SparseCategoricalAccuracy()
    >>> acc.update_state(labels, logits)             # replica 0: 3 of 4 right; replica 1: 1 of 4
    >>> acc.local_result()                           # no communication
    tensor(0.7500)                                   # (0.2500 on replica 1)
    >>> acc.result()                                 # collective: both replicas call it
    tensor(0.5000)

Subclasses register state with `add_state` (or Keras's `add_variable`),
implement `update_state`, and compute their value in `result_from_states`
from a dict of state tensors, so the same code serves local and global
results. States are summed across replicas. In an elastic job, workers that
leave hand their sums to replica 0 first (`distrib.metrics.elastic_fold`),
and a joiner's updates
while it replays the steps before its admission are skipped (the members
counted those examples; `distrib.comm.elastic.replaying_before_joining`).
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

import torch

from distrib.comm.collective import ReduceOp
from distrib.comm.elastic import replaying_before_joining
from distrib.metrics.elastic_fold import register_for_resizes
from distrib.metrics.packing import pack, unpack
from distrib.strategies.default import get_strategy
from distrib.strategies.interface import StrategyBoundState

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["Metric", "snake_case"]


def snake_case(name: str) -> str:
    """``"SparseCategoricalAccuracy"`` -> ``"sparse_categorical_accuracy"`` (``"AUC"`` -> ``"auc"``)."""
    out: List[str] = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and (not name[i - 1].isupper() or (i + 1 < len(name) and name[i + 1].islower())):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


class Metric(StrategyBoundState):
    """Base of every distrib metric (Keras's ``tf.keras.metrics.Metric``).

    Args:
        name: the metric's name, used as its key in ``fit``'s logs.
        dtype: dtype of `result` (default float32); state is kept in float64.

    Attributes:
        direction: ``"up"`` if larger is better, ``"down"`` if smaller is,
            None if unknown; ``mode="auto"`` in callbacks reads it.
    """

    direction: Optional[str] = None
    #: True for metrics that create (some of) their state at the first update, when shapes are known.
    builds_state_on_first_update: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        update = cls.__dict__.get("update_state")
        if update is not None and not getattr(update, "_skips_joiner_replay", False):
            cls.update_state = _skipping_joiner_replay(update)  # type: ignore[method-assign]

    def __init__(self, name: Optional[str] = None, dtype: Optional[torch.dtype] = None) -> None:
        self.name = name or snake_case(type(self).__name__)
        self.dtype = dtype or torch.float32
        self._state_names: List[str] = []
        self._state_init: Dict[str, float] = {}
        self._strategy = get_strategy()
        register_for_resizes(self)

    # ------------------------------------------------------------- state
    @property
    def distribute_strategy(self) -> "Strategy":
        """The strategy whose replicas `result` aggregates over (captured at construction)."""
        return self._strategy

    @distribute_strategy.setter
    def distribute_strategy(self, strategy: "Strategy") -> None:
        self._strategy = strategy

    def add_state(self, name: str, shape: Sequence[int] = (), initial: float = 0.0) -> torch.Tensor:
        """Create a state tensor, set it as attribute ``name`` and register it for aggregation."""
        if name in self._state_names or hasattr(self, name):
            raise ValueError(f"metric {self.name!r} already has an attribute or state named {name!r}")
        device = self._strategy.device
        dtype = torch.float32 if torch.device(device).type == "mps" else torch.float64
        tensor = torch.full(tuple(shape), float(initial), dtype=dtype, device=device)
        setattr(self, name, tensor)
        self._state_names.append(name)
        self._state_init[name] = float(initial)
        return tensor

    def add_variable(self, shape: Sequence[int] = (), initializer: Any = "zeros", dtype: Any = None,
                     aggregation: str = "sum", name: Optional[str] = None) -> torch.Tensor:
        """Keras's spelling of `add_state`; only ``"zeros"``/``"ones"``/numbers and ``aggregation="sum"``."""
        if aggregation != "sum":
            raise ValueError(f"metric {self.name!r}: state aggregation {aggregation!r} is not supported; "
                             "distrib sums metric state across replicas (aggregation='sum')")
        initial = {"zeros": 0.0, "ones": 1.0}.get(initializer) if isinstance(initializer, str) else initializer
        if isinstance(initial, bool) or not isinstance(initial, (int, float)):
            raise ValueError(f"metric {self.name!r}: initializer {initializer!r} is not supported; "
                             "use 'zeros', 'ones' or a number")
        return self.add_state(name or f"state_{len(self._state_names)}", shape, initial)

    add_weight = add_variable

    def state_tensors(self) -> Dict[str, torch.Tensor]:
        """The live state tensors, by name, in registration order."""
        return {n: getattr(self, n) for n in self._state_names}

    @property
    def variables(self) -> List[torch.Tensor]:
        return list(self.state_tensors().values())

    def _constant_on(self, name: str, like: Any) -> torch.Tensor:
        """The constant tensor attribute ``name`` on the device of ``like`` (a tensor; anything else: where
        it is), moved there once rather than copied at every update."""
        constant = getattr(self, name)
        if isinstance(like, torch.Tensor) and constant.device != like.device:
            constant = constant.to(like.device)
            setattr(self, name, constant)
        return constant

    def _align_device(self, like: torch.Tensor) -> None:
        """Move the state to ``like``'s device (once) so updates never cross devices."""
        if self._state_names and getattr(self, self._state_names[0]).device != like.device:
            for n in self._state_names:
                setattr(self, n, getattr(self, n).to(like.device))

    def reset_state(self) -> None:
        """Set every state tensor back to its initial value (no communication)."""
        for n in self._state_names:
            getattr(self, n).fill_(self._state_init[n])

    def reset_states(self) -> None:
        """Alias of `reset_state` (Keras 2 name)."""
        self.reset_state()

    # ------------------------------------------------------------ update
    def update_state(self, y_true: Any, y_pred: Any = None, sample_weight: Optional[Any] = None) -> None:
        """Accumulate a batch into the state with tensor ops only; implemented by subclasses."""
        raise NotImplementedError(f"{type(self).__name__} must implement update_state")

    # ------------------------------------------------------------ result
    def result_from_states(self, states: Dict[str, torch.Tensor]) -> torch.Tensor:
        """The metric's value for the given state tensors; implemented by subclasses."""
        raise NotImplementedError(f"{type(self).__name__} must implement result_from_states(states)")

    def local_result(self) -> torch.Tensor:
        """This replica's value, from its own state only (no communication)."""
        return self.result_from_states(self.state_tensors()).to(self.dtype)

    def result(self) -> torch.Tensor:
        """The global value over all replicas' state; a COLLECTIVE when there are several replicas."""
        strategy = self._strategy
        if not strategy.multi_replica:
            return self.local_result()
        states = self.state_tensors()
        summed = strategy.reduce(ReduceOp.SUM, pack(states), axis=None)
        return self.result_from_states(unpack(summed, states)).to(self.dtype)

    def __call__(self, y_true: Any, y_pred: Any = None, sample_weight: Optional[Any] = None) -> torch.Tensor:
        """`update_state` then `result` (so a collective too, like `result`)."""
        self.update_state(y_true, y_pred, sample_weight=sample_weight)
        return self.result()

    # -------------------------------------------------------- checkpoint
    def state_dict(self) -> Dict[str, torch.Tensor]:
        """Copies of the state tensors on CPU, by name (safetensors-friendly)."""
        return {n: t.detach().to("cpu", copy=True) for n, t in self.state_tensors().items()}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restore state saved by `state_dict`; checks names and shapes before changing anything."""
        expected = self.state_tensors()
        if self.builds_state_on_first_update and set(state_dict) > set(expected):
            for n in state_dict:
                if n not in expected:
                    self.add_state(n, tuple(torch.as_tensor(state_dict[n]).shape))
            expected = self.state_tensors()
        if set(state_dict) != set(expected):
            raise ValueError(f"metric {self.name!r}: state_dict has keys {sorted(state_dict)} "
                             f"but the metric's state is {sorted(expected)}")
        loaded = {}
        for n, t in expected.items():
            value = torch.as_tensor(state_dict[n])
            if tuple(value.shape) != tuple(t.shape):
                raise ValueError(f"metric {self.name!r}: state {n!r} has shape {tuple(value.shape)} "
                                 f"in the state_dict but {tuple(t.shape)} in the metric")
            loaded[n] = value
        for n, value in loaded.items():
            expected[n].copy_(value)

    def get_config(self) -> Dict[str, Any]:
        """JSON-serialisable constructor arguments."""
        return {"name": self.name, "dtype": str(self.dtype).replace("torch.", "")}

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "Metric":
        config = dict(config)
        if isinstance(config.get("dtype"), str):
            config["dtype"] = getattr(torch, config["dtype"])
        return cls(**config)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _skipping_joiner_replay(update: Any) -> Any:
    @functools.wraps(update)
    def update_state(self: Metric, *args: Any, **kwargs: Any) -> Any:
        if replaying_before_joining(self._strategy.collective):
            return None
        return update(self, *args, **kwargs)
    update_state._skips_joiner_replay = True  # type: ignore[attr-defined]
    return update_state
