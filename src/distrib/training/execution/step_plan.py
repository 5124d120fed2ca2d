"""`StepPlan`: what every step of one fit/evaluate/predict call would otherwise look up again.

A step needs the device and floating dtype inputs go to (those of the
module's parameters), the mixed-precision autocast of the global policy,
whether the module is a Keras 3 layer that takes ``training=``, and the
`LossScaleOptimizer` under ``mixed_float16``. None of these change while a
call runs, and looking them up costs more than a tiny model's forward pass
(iterating the parameters alone is three generator layers deep), so the
loop resolves them once per call (`plan_for`) and the steps read them.

A plan made before a module has floating parameters (a Keras model not yet
built, a lazy module) is provisional: the next step resolves it again.

Example:
    >>> loop.step_plan = None                  # fit/evaluate/predict start here
    >>> plan = plan_for(loop)
    >>> plan.device, plan.dtype, plan.autocast
    (device(type='cpu'), torch.float32, None)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple

import torch

from distrib.utils.optional import keras_layers_class

if TYPE_CHECKING:  # pragma: no cover
    from distrib.training.execution.trainer_state import TrainerState

__all__ = ["StepPlan", "plan_for", "placement"]


def placement(loop: "TrainerState") -> Tuple[torch.device, Optional[torch.dtype]]:
    """The device of the module's parameters and its floating dtype (inputs are cast to it)."""
    device, dtype = loop.strategy.device, None
    for p in loop.module.parameters():
        device = p.device
        if p.is_floating_point():
            return device, p.dtype
    return device, dtype


def _takes_training(module: Any) -> bool:
    """A Keras 3 layer whose ``call`` takes ``training=`` (its Dropout and BatchNorm ignore ``module.train()``)."""
    layer = keras_layers_class("Layer")
    return layer is not None and isinstance(module, layer) and bool(getattr(module, "_call_has_training_arg", False))


def _loss_scaler(loop: "TrainerState") -> Any:
    """The `LossScaleOptimizer` a train step goes through: ``loop.optimizer`` when it is one (as Keras
    makes it under ``mixed_float16``), else one made on first use under ``mixed_float16``, else None."""
    from distrib.mixed_precision import LossScaleOptimizer, global_policy

    if isinstance(loop.optimizer, LossScaleOptimizer):
        return loop.optimizer
    if not global_policy().needs_loss_scaling or loop.torch_optimizer is None:
        return None
    scaler = loop.loss_scale_optimizer
    if scaler is None or scaler.torch_optimizer is not loop.torch_optimizer:
        scaler = LossScaleOptimizer(loop.torch_optimizer)  # type: ignore[arg-type]
        loop.loss_scale_optimizer = scaler
    return scaler


class StepPlan:
    """The per-call facts of a loop's steps (see the module docstring).

    Attributes:
        device: where inputs go (the parameters' device).
        dtype: the floating dtype floating inputs are cast to, or None.
        autocast: ``(device type, dtype)`` of the mixed policy's autocast, or None.
        takes_training: pass ``training=module.training`` (a Keras 3 layer).
        scaler: the `LossScaleOptimizer` of a train step, or None.
        final: False while the module has no floating parameter yet (resolve again).
    """

    __slots__ = ("device", "dtype", "autocast", "takes_training", "scaler", "final")

    def __init__(self, loop: "TrainerState") -> None:
        from distrib.mixed_precision.policy import global_policy

        self.device, self.dtype = placement(loop)
        policy = global_policy()
        self.autocast = (self.device.type, policy.torch_compute_dtype) if policy.is_mixed else None
        self.takes_training = _takes_training(loop.module)
        self.scaler = _loss_scaler(loop)
        self.final = self.dtype is not None


def plan_for(loop: "TrainerState") -> StepPlan:
    """``loop.step_plan``, resolved now if the call has none yet (or only a provisional one)."""
    plan = loop.step_plan
    if plan is None or not plan.final:
        plan = loop.step_plan = StepPlan(loop)
    return plan
