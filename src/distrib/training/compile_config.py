"""What `Model.compile` resolves: optimizer, loss and metrics, per model output.

Identifiers are resolved like Keras: names through `distrib.optimizers.get`,
`distrib.losses.get` and `distrib.metrics.get` (``"accuracy"`` becomes the
accuracy that fits the loss), objects pass through, and a torch optimizer is
used as is.

Models with several outputs (a tuple, list or dict of tensors) take one loss
per output — a list/dict matching the outputs, or one loss applied to every
output — weighted by ``loss_weights`` and summed. Metrics for such models are
a dict/list with one entry (a list of metrics) per output, or a flat list of
*names* applied to every output; their log names are prefixed with the
output's name (the dict key, or ``output_1``, ``output_2``, ...).

The loss a replica minimises is, per output, its `Loss.replica_share`: the
Keras loss of its local batch times ``local batch / global batch`` (a
``"sum"`` reduction adds up as it is). Summed across replicas (as gradients
are), it is exactly the loss of one process on the whole global batch.
Rank-1 targets against rank-2 outputs (``(64,)`` against ``(64, 10)``) are
expanded to ``(64, 1)`` first, as tf.keras 2's ``fit`` did (Keras 3 refuses
them), so its tutorials' ``loss="mse"`` programs run.

Example:
    >>> losses = CompiledLoss("mse", None)
    >>> y = torch.tensor([[1.0], [3.0]]); p = torch.zeros(2, 1)
    >>> losses(y, p, None, global_batch_size=4)     # (1 + 9) / 4
    tensor(2.5000)
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch

from distrib.utils.nest import is_namedtuple

__all__ = ["CompiledLoss", "CompiledMetrics", "resolve_optimizer", "output_keys"]


def output_keys(y_pred: Any) -> Optional[List[Any]]:
    """None for a single output; else the keys (list indices or dict keys) of the outputs."""
    if isinstance(y_pred, dict):
        return list(y_pred.keys())
    if isinstance(y_pred, (list, tuple)) and not is_namedtuple(y_pred):
        return list(range(len(y_pred)))
    return None


def output_name(key: Any) -> str:
    return str(key) if isinstance(key, str) else f"output_{int(key) + 1}"


def _per_output(spec: Any, keys: List[Any], what: str) -> List[Any]:
    """One entry of ``spec`` per output key (a single entry is repeated)."""
    if isinstance(spec, dict):
        unknown = set(spec) - set(keys) - {output_name(k) for k in keys}
        if unknown:
            raise ValueError(f"compile({what}=...) names outputs {sorted(map(str, unknown))} the model does not "
                             f"return; its outputs are {[output_name(k) for k in keys]}")
        return [spec.get(k, spec.get(output_name(k))) for k in keys]
    if isinstance(spec, (list, tuple)):
        if len(spec) != len(keys):
            raise ValueError(f"compile({what}=...) has {len(spec)} entries but the model returns "
                             f"{len(keys)} outputs; give one per output")
        return list(spec)
    return [spec] * len(keys)


class CompiledLoss:
    """The compiled loss: one loss object per output, weighted and summed."""

    def __init__(self, loss: Any, loss_weights: Any) -> None:
        from distrib import losses

        self._spec = loss
        self._loss_weights = loss_weights
        self._get = losses.get
        self._single = None if isinstance(loss, (list, tuple, dict)) else self._get(loss)
        self._per_output: Optional[List[Tuple[Any, Any, float]]] = None

    @property
    def primary(self) -> Any:
        """The loss object of a single-output model (what metrics resolve ``"accuracy"`` against)."""
        return self._single

    def _build(self, keys: List[Any]) -> List[Tuple[Any, Any, float]]:
        losses = _per_output(self._spec, keys, "loss")
        weights = [1.0] * len(keys) if self._loss_weights is None else _per_output(self._loss_weights, keys, "loss_weights")
        built = []
        for key, identifier, weight in zip(keys, losses, weights):
            if identifier is None:
                loss = None
            elif identifier is self._spec and self._single is not None:
                loss = self._single  # one loss for every output
            else:
                loss = self._get(identifier)
            built.append((key, loss, float(1.0 if weight is None else weight)))
        return built

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any, global_batch_size: int) -> torch.Tensor:
        keys = output_keys(y_pred)
        if keys is None:
            if self._single is None:
                raise ValueError("compile(loss=...) is a list/dict but the model returns a single tensor; "
                                 "pass one loss")
            loss = _global_mean(self._single, y_true, y_pred, sample_weight, global_batch_size)
            weight = 1.0 if self._loss_weights is None else float(_first(self._loss_weights))
            return loss if weight == 1.0 else loss * weight
        if self._per_output is None:
            self._per_output = self._build(keys)
        if isinstance(y_true, torch.Tensor):
            raise ValueError(f"the model returns {len(keys)} outputs but y is a single tensor; "
                             "give y as a tuple/list/dict with one target per output")
        total: Optional[torch.Tensor] = None
        for key, loss, weight in self._per_output:
            if loss is None:
                continue
            sw = sample_weight[key] if isinstance(sample_weight, (dict, list, tuple)) else sample_weight
            term = _global_mean(loss, y_true[key], y_pred[key], sw, global_batch_size) * weight
            total = term if total is None else total + term
        if total is None:
            raise ValueError("compile(loss=...) gives no loss for any model output")
        return total


def _first(value: Any) -> Any:
    if isinstance(value, dict):
        return next(iter(value.values()))
    if isinstance(value, (list, tuple)):
        return value[0]
    return value


def _global_mean(loss: Any, y_true: Any, y_pred: torch.Tensor, sample_weight: Any,
                 global_batch_size: int) -> torch.Tensor:
    if (isinstance(y_true, torch.Tensor) and isinstance(y_pred, torch.Tensor) and y_true.dim() == 1
            and y_pred.dim() == 2):
        y_true = y_true.unsqueeze(-1)
    return loss.replica_share(y_true, y_pred, sample_weight, global_batch_size)


class CompiledMetrics:
    """Metric objects per output, created on the first batch (when the outputs are known)."""

    def __init__(self, metrics: Any, loss: CompiledLoss) -> None:
        self._spec = metrics
        self._loss = loss
        self._entries: Optional[List[Tuple[Optional[Any], str, Any]]] = None
        if metrics is None or (isinstance(metrics, (list, tuple)) and not metrics):
            self._entries = []
        elif not isinstance(metrics, dict) and self._loss.primary is not None and _flat(metrics):
            self._entries = [(None, m.name, m) for m in self._make(metrics, self._loss.primary)]

    @property
    def built(self) -> bool:
        return self._entries is not None

    @property
    def empty(self) -> bool:
        """True when there are no metrics (compiled without any): nothing to update."""
        return self._entries is not None and not self._entries

    def _make(self, identifiers: Any, loss_obj: Any) -> List[Any]:
        from distrib import metrics

        if not isinstance(identifiers, (list, tuple)):
            identifiers = [identifiers]
        return [metrics.get(i, loss=loss_obj) for i in identifiers]

    def build(self, y_pred: Any) -> None:
        """Create the metrics for the outputs of ``y_pred`` (no-op once built)."""
        if self._entries is not None:
            return
        keys = output_keys(y_pred)
        if keys is None:
            self._entries = [(None, m.name, m) for m in self._make(self._spec, self._loss.primary)]
            return
        if _flat(self._spec) and any(not isinstance(i, str) for i in _as_list(self._spec)):
            raise ValueError("compile(metrics=[...]) holds metric objects but the model has several outputs; "
                             "give metrics as a dict or a list with one list per output")
        per = [_as_list(self._spec)] * len(keys) if _flat(self._spec) else _per_output(self._spec, keys, "metrics")
        losses = self._loss._per_output or self._loss._build(keys)
        entries = []
        for key, ids, (_, loss_obj, _) in zip(keys, per, losses):
            for m in self._make(ids or [], loss_obj):
                entries.append((key, f"{output_name(key)}_{m.name}", m))
        self._entries = entries

    @property
    def entries(self) -> List[Tuple[Optional[Any], str, Any]]:
        """``(output key or None, log name, metric)`` for each metric (empty until built)."""
        return list(self._entries or [])

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any) -> None:
        if self._entries is None:
            self.build(y_pred)
        for key, _, metric in self._entries:  # type: ignore[union-attr]
            if key is None:
                metric.update_state(y_true, y_pred, sample_weight=sample_weight)
            else:
                sw = sample_weight[key] if isinstance(sample_weight, (dict, list, tuple)) else sample_weight
                metric.update_state(y_true[key], y_pred[key], sample_weight=sw)

    def reset_state(self) -> None:
        for _, _, metric in self.entries:
            metric.reset_state()


def _flat(spec: Any) -> bool:
    if isinstance(spec, dict):
        return False
    items = _as_list(spec)
    return not any(isinstance(i, (list, tuple, dict)) for i in items)


def _as_list(spec: Any) -> List[Any]:
    if spec is None:
        return []
    return list(spec) if isinstance(spec, (list, tuple)) else [spec]


def resolve_optimizer(identifier: Any, params: Sequence[torch.nn.Parameter]) -> Tuple[Any, torch.optim.Optimizer]:
    """``(user-facing optimizer, torch optimizer)`` for ``compile(optimizer=identifier)``.

    A torch optimizer is returned as both; a distrib optimizer (or a name) is
    built over ``params``; a factory (from a saved model) is called with them.
    """
    if isinstance(identifier, torch.optim.Optimizer):
        return identifier, identifier
    from distrib import optimizers
    from distrib.mixed_precision import LossScaleOptimizer

    if isinstance(identifier, LossScaleOptimizer):
        return identifier, identifier.build(params)

    if callable(identifier) and not hasattr(identifier, "build") and getattr(identifier, "__name__", "").startswith("torch.optim."):
        opt = identifier(params)
        return opt, opt
    obj = optimizers.get(identifier)
    if isinstance(obj, torch.optim.Optimizer):
        return obj, obj
    torch_opt = obj.build(params)
    return obj, torch_opt
