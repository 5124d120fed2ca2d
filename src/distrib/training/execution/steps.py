"""The per-replica steps `Model.fit`, `evaluate` and `predict` run: plain PyTorch.

A training step on one replica's part of a global batch of ``G`` examples::

    y_pred = module(x)
    loss = sum(per_example_loss(y, y_pred) * sample_weight) / G + sum(module.losses) / N
    loss.backward(); optimizer.step(); optimizer.zero_grad()

The strategy sums gradients across the ``N`` replicas before the optimizer
steps, so the update equals one process's step on the whole global batch.
Under a mixed `distrib.mixed_precision` policy the forward pass runs in
``torch.autocast`` (outputs cast back to float32, loss in float32); under
``mixed_float16`` the step goes through a `LossScaleOptimizer`.
Errors raised by the module or the loss are re-raised with the shapes that
caused them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple

import torch

from distrib.comm.elastic_abilities import ElasticAbilities
from distrib.errors import first_line
from distrib.losses.reduction import losses_scaled_by_model
from distrib.training.execution.step_plan import StepPlan, plan_for
from distrib.utils.nest import flatten, is_namedtuple, map_structure

if TYPE_CHECKING:  # pragma: no cover
    from distrib.training.execution.trainer_state import TrainerState

__all__ = ["unpack", "call_module", "forward_and_loss", "train_step", "test_step", "predict_step", "regularization_loss",
           "wrap_for_loss_scaling", "apply_variable_dtype"]


#: A batch of exactly these types is no namedtuple (asked without a call: this runs every step).
_PLAIN_SEQUENCES = (tuple, list)


def unpack(data: Any) -> Tuple[Any, Any, Any]:
    """``(x, y, sample_weight)`` from a batch: ``x``, ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``."""
    if isinstance(data, (list, tuple)) and (type(data) in _PLAIN_SEQUENCES or not is_namedtuple(data)):
        if len(data) == 1:
            return data[0], None, None
        if len(data) == 2:
            return data[0], data[1], None
        if len(data) == 3:
            return data[0], data[1], data[2]
        raise ValueError(f"a batch must be x, (x,), (x, y) or (x, y, sample_weight); got a "
                         f"{type(data).__name__} of {len(data)} elements")
    return data, None, None


#: Exception types (exactly these, not subclasses) that a bad input raises inside torch ops.
_INPUT_ERRORS = (RuntimeError, ValueError, IndexError, TypeError)


def _shapes(value: Any) -> str:
    shapes = [tuple(t.shape) for t in flatten(value) if isinstance(t, torch.Tensor)]
    if not shapes:
        return "None" if value is None else type(value).__name__
    return str(shapes[0]) if len(shapes) == 1 else str(shapes)


def _prepare_x(plan: StepPlan, x: Any) -> Any:
    device, dtype = plan.device, plan.dtype

    def one(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if t.device != device:
            t = t.to(device, non_blocking=True)
        if dtype is not None and t.dtype != dtype and t.is_floating_point():
            t = t.to(dtype)
        return t
    return one(x) if isinstance(x, torch.Tensor) else map_structure(one, x)


def _to_device(plan: StepPlan, value: Any) -> Any:
    device = plan.device
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value if value.device == device else value.to(device, non_blocking=True)
    return map_structure(lambda t: t.to(device, non_blocking=True)
                         if isinstance(t, torch.Tensor) and t.device != device else t, value)


def call_module(loop: "TrainerState", x: Any) -> Any:
    """``module(x)``; a tuple ``x`` is spread as positional arguments, a dict as keywords.

    A Keras 3 model (torch backend) also gets ``training=`` from the module's
    train/eval mode, as Keras's own ``fit`` passes it. Under a mixed global
    policy the call runs in ``torch.autocast`` on the parameters' device type
    and floating outputs come back as float32.
    """
    plan = plan_for(loop)
    return _call_with_policy(loop, plan, _prepare_x(plan, x))


def _call_with_policy(loop: "TrainerState", plan: StepPlan, x: Any) -> Any:
    if plan.autocast is None:
        return _call(loop, plan, x)
    device_type, dtype = plan.autocast
    with torch.autocast(device_type=device_type, dtype=dtype):
        out = _call(loop, plan, x)
    return map_structure(lambda t: t.float() if isinstance(t, torch.Tensor) and t.is_floating_point()
                         and t.dtype != torch.float32 else t, out)


def _call(loop: "TrainerState", plan: StepPlan, x: Any) -> Any:
    module = loop.module
    phase = {"training": bool(module.training)} if plan.takes_training else {}
    try:
        if isinstance(x, torch.Tensor):
            return module(x, **phase)
        if isinstance(x, dict):
            return module(**x, **phase)
        if isinstance(x, (list, tuple)) and not is_namedtuple(x):
            return module(*x, **phase)
        return module(x, **phase)
    except (RuntimeError, ValueError, IndexError, TypeError) as e:
        if type(e) not in _INPUT_ERRORS:  # e.g. out of memory, a peer lost: not about the input
            raise
        raise ValueError(f"{loop.name} cannot be called on x of shape {_shapes(x)}: {first_line(e)} "
                         "(check the input shape the module expects)") from e


def regularization_loss(loop: "TrainerState") -> Optional[torch.Tensor]:
    """The sum of ``module.losses`` (a list of scalars or a method returning one), or None."""
    losses = getattr(loop.module, "losses", None)  # duck-typed user module: Keras layers have losses, torch modules not
    if losses is None:
        return None
    if callable(losses):
        losses = losses()
    terms = [t for t in flatten(list(losses)) if t is not None]
    if not terms:
        return None
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


def _loss(loop: "TrainerState", y: Any, y_pred: Any, sw: Any, global_batch_size: int) -> torch.Tensor:
    if y is None:
        raise ValueError("fit/evaluate got batches without targets: give y (or a dataset of (x, y) pairs)")
    try:
        loss = loop.compiled_loss(y, y_pred, sw, global_batch_size)  # type: ignore[misc]
    except (RuntimeError, IndexError) as e:
        if type(e) not in _INPUT_ERRORS:
            raise
        raise ValueError(f"loss {loop.loss!r} failed on y of shape {_shapes(y)} and predictions of shape "
                         f"{_shapes(y_pred)}: {first_line(e)} (check label shapes, ranges and from_logits)") from e
    reg = regularization_loss(loop)
    if reg is not None:
        loss = loss + reg / loop.strategy.num_replicas_in_sync
    return loss


def train_step(loop: "TrainerState", data: Any, global_batch_size: int) -> torch.Tensor:
    with losses_scaled_by_model():
        return _train_step(loop, data, global_batch_size)


def forward_and_loss(loop: "TrainerState", x: Any, y: Any, sw: Any,
                     global_batch_size: int) -> Tuple[Any, torch.Tensor]:
    """``(module(x), loss)`` of inputs already on the device: what ``jit_compile=True`` compiles."""
    y_pred = _call_with_policy(loop, loop.step_plan or plan_for(loop), x)
    return y_pred, _loss(loop, y, y_pred, sw, global_batch_size)


def _forward_and_loss(loop: "TrainerState", plan: StepPlan, data: Any,
                      global_batch_size: int) -> Tuple[Any, Any, Any, torch.Tensor]:
    """``(y, sample_weight, y_pred, loss)`` of a batch, compiled where the model asked for it."""
    x, y, sw = unpack(data)
    x, y, sw = _prepare_x(plan, x), _to_device(plan, y), _to_device(plan, sw)
    if loop.jit is not None:
        y_pred, loss = loop.jit(x, y, sw, global_batch_size)
    else:
        y_pred, loss = forward_and_loss(loop, x, y, sw, global_batch_size)
    return y, sw, y_pred, loss


def _train_step(loop: "TrainerState", data: Any, global_batch_size: int) -> torch.Tensor:
    plan = plan_for(loop)
    y, sw, y_pred, loss = _forward_and_loss(loop, plan, data, global_batch_size)
    scaler = plan.scaler
    if scaler is None:
        loss.backward()
        opt = loop.torch_optimizer
        opt.step()  # type: ignore[union-attr]
        opt.zero_grad(set_to_none=True)  # type: ignore[union-attr]
    else:
        scaler.get_scaled_loss(loss).backward()
        scaler.step()  # sums, unscales, skips on inf/NaN (the same decision on every replica)
        scaler.zero_grad(set_to_none=True)
    loss = loss.detach()
    collective = loop.strategy.collective
    if not (isinstance(collective, ElasticAbilities) and collective.replaying_before_it_joined()):
        # (an elastic joiner replaying the steps before its admission: the members counted these)
        loop.loss_tracker.update(loss, global_batch_size)
        _update_metrics(loop, y, y_pred, sw)
    return loss


def apply_variable_dtype(module: torch.nn.Module) -> None:
    """At compile: under a plain ``float16``/``bfloat16``/``float64`` policy cast the floating parameters
    and buffers to it (Keras creates the variables in the policy's variable dtype)."""
    from distrib.mixed_precision import global_policy

    policy = global_policy()
    if policy.is_mixed or policy.name == "float32":
        return
    dtype = policy.torch_variable_dtype
    if any(p.is_floating_point() and p.dtype != dtype for p in module.parameters()):
        module.to(dtype)


def wrap_for_loss_scaling(loop: "TrainerState") -> Any:
    """At compile: under ``mixed_float16`` wrap ``loop.optimizer`` in a `LossScaleOptimizer` (Keras does);
    returns the loop's `LossScaleOptimizer` or None."""
    from distrib.mixed_precision import LossScaleOptimizer, global_policy

    if isinstance(loop.optimizer, LossScaleOptimizer):
        return loop.optimizer
    if not global_policy().needs_loss_scaling:
        return None
    loop.optimizer = LossScaleOptimizer(loop.optimizer)
    return loop.optimizer


def test_step(loop: "TrainerState", data: Any, global_batch_size: int) -> torch.Tensor:
    with losses_scaled_by_model():
        return _test_step(loop, data, global_batch_size)


def _test_step(loop: "TrainerState", data: Any, global_batch_size: int) -> torch.Tensor:
    plan = plan_for(loop)
    with torch.no_grad():
        y, sw, y_pred, loss = _forward_and_loss(loop, plan, data, global_batch_size)
    loop.loss_tracker.update(loss, global_batch_size)
    _update_metrics(loop, y, y_pred, sw)
    return loss


def predict_step(loop: "TrainerState", x: Any) -> Any:
    with torch.no_grad():
        return call_module(loop, x)


def _update_metrics(loop: "TrainerState", y: Any, y_pred: Any, sw: Any) -> None:
    metrics = loop.compiled_metrics
    if metrics is None or metrics.empty:
        return
    if not metrics.built:
        metrics.build(y_pred)
        loop.metric_restore.apply(loop.apply_metric_state)
    with torch.no_grad():
        metrics.update_state(y, map_structure(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, y_pred), sw)
