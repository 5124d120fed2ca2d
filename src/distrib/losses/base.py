"""`Loss`: the Keras loss-object protocol, plus wrappers for plain callables and torch losses.

A loss object is called Keras-style, ``loss(y_true, y_pred, sample_weight=None)``,
and computes what Keras 3 computes, reduction included (Keras's losses on
rank-1 ``[B]`` inputs return one scalar for every reduction).
`Loss.per_example` always returns one value per example (shape ``[batch]``),
weighted and averaged over any non-batch axes, so that
``per_example(...).mean()`` equals the ``SUM_OVER_BATCH_SIZE`` value.
`Loss.replica_share` is what `distrib.Model` minimises on each replica: the
replicas' shares add up to the Keras loss of the whole global batch.

Example:
    >>> mse = MeanSquaredError()
    >>> y_true, y_pred = torch.zeros(2, 2), torch.tensor([[1.0, 1.0], [1.0, 3.0]])
    >>> mse.per_example(y_true, y_pred)
    tensor([1., 5.])
    >>> mse(y_true, y_pred)                       # SUM_OVER_BATCH_SIZE
    tensor(3.)
    >>> mse(y_true, y_pred, sample_weight=torch.tensor([1.0, 0.0]))
    tensor(0.5000)
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from distrib.losses.reduction import (Reduction, apply_sample_weight, check_distributed_reduction, match_ranks,
                                      reduce_weighted, standardize_reduction)

__all__ = ["Loss", "LossFunctionWrapper", "TorchLossWrapper", "FunctionLoss", "as_tensor_pair"]


def as_tensor_pair(y_true: Any, y_pred: Any) -> tuple:
    """Both arguments as tensors on ``y_pred``'s device (numpy arrays and lists accepted)."""
    pred = y_pred if isinstance(y_pred, torch.Tensor) else torch.as_tensor(y_pred)
    if not pred.is_floating_point():
        pred = pred.to(torch.get_default_dtype())
    true = y_true if isinstance(y_true, torch.Tensor) else torch.as_tensor(y_true)
    if true.device != pred.device:
        true = true.to(pred.device, non_blocking=True)
    return true, pred


class Loss:
    """Base of every distrib loss object (Keras's ``tf.keras.losses.Loss``).

    Subclasses implement `call`, returning unreduced losses shaped like Keras's
    (the predictions' shape without the last axis; a scalar for rank-1
    predictions), or `call_with_mask` when some elements do not count.

    Args:
        reduction: a `Reduction` or Keras's string (default ``AUTO``, i.e. sum
            over batch size); None means ``"none"``.
        name: the loss's name.
    """

    default_name = "loss"

    def __init__(self, reduction: Any = Reduction.AUTO, name: Optional[str] = None) -> None:
        self.reduction = standardize_reduction(reduction)
        self.name = name or self.default_name

    def call(self, y_true: Any, y_pred: Any) -> torch.Tensor:
        """Unreduced, unweighted losses; implemented by subclasses."""
        raise NotImplementedError(f"{type(self).__name__} must implement call(y_true, y_pred)")

    def call_with_mask(self, y_true: Any, y_pred: Any) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Unreduced losses and a bool mask of the elements that count (None: all do)."""
        return self.call(y_true, y_pred), None

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Optional[Any] = None) -> torch.Tensor:
        check_distributed_reduction(self.name, self.reduction)
        values, mask = self.call_with_mask(y_true, y_pred)
        return reduce_weighted(values, sample_weight, self.reduction, mask)

    def per_example(self, y_true: Any, y_pred: Any, sample_weight: Optional[Any] = None) -> torch.Tensor:
        """One weighted loss per example, shape ``[batch]`` (mean over any further axes).

        For rank-1 inputs, where Keras's loss is one scalar for the batch, the
        loss is computed on ``[B, 1]`` inputs instead: one value per example.
        """
        values, mask = self.call_with_mask(y_true, y_pred)
        if values.dim() == 0:
            true, pred = torch.as_tensor(y_true), torch.as_tensor(y_pred)
            if true.dim() == 1 and pred.dim() == 1:
                values, mask = self.call_with_mask(true.unsqueeze(-1), pred.unsqueeze(-1))
            if values.dim() == 0:
                values = values.expand(pred.shape[0] if pred.dim() else 1)
        if mask is not None:
            values = values * mask.to(values.dtype)
        losses = apply_sample_weight(values, sample_weight)
        if losses.dim() > 1:
            losses = losses.flatten(1).mean(1)
        return losses

    def replica_share(self, y_true: Any, y_pred: Any, sample_weight: Optional[Any],
                      global_batch_size: int) -> torch.Tensor:
        """This replica's share of the loss of the global batch (what `distrib.Model` minimises).

        The Keras loss of the local batch, scaled by ``local batch / global
        batch`` for the reductions that average (a ``"sum"`` of per-example
        losses is added up as it is). Summed over replicas it is Keras's loss
        of one process on the whole global batch whenever that loss's
        divisor grows with the batch: every reduction but
        ``"mean_with_sample_weight"``, and without an ``ignore_class`` mask or
        rank-1 sample-weighted inputs (there each replica divides by its own
        weights or valid elements). Losses of the whole batch at once
        (``Dice``/``Tversky`` with ``axis=None``, ``CosineSimilarity`` of
        rank-1 inputs) are each replica's own value, weighted by its share of
        the batch.

        Example (2 replicas of 2 examples, ``"mse"``): each returns its
        local mean / 2, and the summed gradient is the one-process gradient.

        A replica whose share of the batch is empty (a last partial batch with
        fewer rows than replicas) contributes exactly 0, still connected to
        the predictions so its backward pass runs: the mean of no losses
        would be NaN.
        """
        pred = y_pred if isinstance(y_pred, torch.Tensor) else torch.as_tensor(y_pred)
        if pred.dim() and pred.shape[0] == 0:
            return _empty_share(pred)
        values, mask = self.call_with_mask(y_true, y_pred)
        loss = reduce_weighted(values, sample_weight, self.reduction, mask)
        if loss.dim():
            loss = loss.mean()  # Keras's compiled loss averages unreduced losses
        if self.reduction is Reduction.SUM and values.dim():
            return loss
        local = pred.shape[0] if pred.dim() else 1
        return loss if local == global_batch_size else loss * (local / global_batch_size)

    def get_config(self) -> Dict[str, Any]:
        """JSON-serialisable constructor arguments."""
        return {"reduction": self.reduction.value, "name": self.name}

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "Loss":
        return cls(**config)

    def __repr__(self) -> str:
        try:
            config = self.get_config()
        except ValueError:  # wrappers of functions and modules have no config
            config = {"name": self.name}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in config.items())})"


def _empty_share(pred: torch.Tensor) -> torch.Tensor:
    """A zero loss of ``pred``'s floating dtype, with a gradient path to ``pred`` when it has one."""
    zero = pred.sum() if pred.is_floating_point() else torch.zeros((), device=pred.device)
    return zero * 0.0


class LossFunctionWrapper(Loss):
    """A plain function ``fn(y_true, y_pred, **kwargs)`` as a loss object.

    ``fn`` may return per-example (or per-element) losses, or an already
    reduced scalar; a scalar is treated as the same value for every example,
    so the global-batch mean is still right when every replica has the same
    number of examples.
    """

    def __init__(self, fn: Callable, reduction: Any = Reduction.AUTO, name: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(reduction, name or getattr(fn, "__name__", type(fn).__name__))
        self.fn = fn
        self.fn_kwargs = kwargs

    def call(self, y_true: Any, y_pred: Any) -> torch.Tensor:
        return torch.as_tensor(self.fn(y_true, y_pred, **self.fn_kwargs))

    def get_config(self) -> Dict[str, Any]:
        raise ValueError(
            f"loss {self.name!r} wraps the function {self.fn!r}, which cannot be saved; "
            "use a distrib.losses class or a Keras loss name to make the model savable")


class FunctionLoss(Loss):
    """A Keras loss class over a loss function: ``fn(y_true, y_pred, **config)``.

    Like Keras's ``LossFunctionWrapper``, labels and predictions whose ranks
    differ by a trailing axis of size 1 are first brought to the same rank.
    Subclasses set ``fn`` and ``default_name`` and store their constructor
    arguments in ``self.fn_config``.
    """

    fn: Callable[..., torch.Tensor]

    def __init__(self, reduction: Any = Reduction.AUTO, name: Optional[str] = None, **config: Any) -> None:
        super().__init__(reduction, name)
        self.fn_config = config

    def call(self, y_true: Any, y_pred: Any) -> torch.Tensor:
        true, pred = match_ranks(*as_tensor_pair(y_true, y_pred))
        return type(self).fn(true, pred, **self.fn_config)

    def get_config(self) -> Dict[str, Any]:
        return {**self.fn_config, **super().get_config()}


class TorchLossWrapper(Loss):
    """A ``torch.nn`` loss module (``nn.CrossEntropyLoss()`` ...) as a Keras-style loss.

    Arguments are swapped to torch's ``(input, target)`` order and the module
    is copied with ``reduction="none"`` so per-example losses are available.
    """

    def __init__(self, module: torch.nn.Module, name: Optional[str] = None) -> None:
        super().__init__(Reduction.AUTO, name or _snake(type(module).__name__))
        self.module = copy.copy(module)
        if hasattr(self.module, "reduction"):
            self.module.reduction = "none"

    def call(self, y_true: Any, y_pred: Any) -> torch.Tensor:
        return self.module(y_pred, y_true)

    def get_config(self) -> Dict[str, Any]:
        raise ValueError(
            f"loss {self.name!r} wraps the torch module {type(self.module).__name__}, which cannot "
            "be saved; use a distrib.losses class or a Keras loss name to make the model savable")


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and not name[i - 1].isupper():
            out.append("_")
        out.append(ch.lower())
    return "".join(out)
