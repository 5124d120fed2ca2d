"""`LossScaleOptimizer`: Keras 3's dynamic loss scaling for float16 training, on a torch optimizer.

float16 gradients of small losses underflow to zero. The loss is multiplied
by a scale ``S`` before ``backward()``, the gradients divided by ``S`` before
the optimizer uses them. As in Keras 3: a step whose gradients hold an inf or
NaN is **skipped** (parameters, optimizer state and ``iterations``
untouched) and ``S`` is halved — with no lower bound, so it can go below 1;
after ``dynamic_growth_steps`` finite steps in a row ``S`` doubles.

It wraps a distrib optimizer (``distrib.optimizers.SGD(...)``, built when
the model is compiled or by `build`) or a ``torch.optim`` optimizer, and has
Keras's names (``inner_optimizer``, ``initial_scale``,
``dynamic_growth_steps``, ``dynamic_scale``, ``step_counter``,
``iterations``, ``learning_rate``, ``scale_loss``, ``apply_gradients``) as
well as TF2's (``loss_scale``, ``get_scaled_loss``,
``get_unscaled_gradients``) and torch's (``step``, ``zero_grad``,
``state_dict``). Under the ``mixed_float16`` policy ``compile`` wraps the
model's optimizer in one, so ``model.optimizer`` is a `LossScaleOptimizer`.

Across replicas the decision is the same everywhere: `step` first completes
the strategy's gradient sum (`distrib.comm.optimizer_hook.synchronize_gradients`),
so every replica checks the same summed gradients — an inf on one replica is
an inf in the sum on all of them.

Example (a custom loop):
    >>> opt = LossScaleOptimizer(distrib.optimizers.SGD(learning_rate=0.1))
    >>> opt.build(model.parameters())
    >>> opt.scale_loss(compute_loss()).backward()
    >>> opt.step()                                 # unscales, skips on inf/NaN, adjusts the scale
    True
    >>> opt.zero_grad()
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Sequence

import torch

from distrib.comm.optimizer_hook import synchronize_gradients
from distrib.optimizers.base import Optimizer as KerasNamedOptimizer
from distrib.optimizers.torch_surface import TorchOptimizerSurface
from distrib.optimizers.learning_rate import LearningRateValue, get_learning_rate, set_learning_rate
from distrib.optimizers.optimizer_parts import finalizer_of

__all__ = ["LossScaleOptimizer"]


class LossScaleOptimizer(TorchOptimizerSurface):
    """Wraps an optimizer with (dynamic) loss scaling.

    Args:
        inner_optimizer: a distrib optimizer (``distrib.optimizers.Adam()``, built later) or a
            ``torch.optim.Optimizer``.
        initial_scale: the starting scale; defaults to 2**15.
        dynamic_growth_steps: finite steps in a row before the scale doubles; defaults to 2000.
        name: the optimizer's name.
        dynamic: False keeps ``initial_scale`` fixed (TF2's option; Keras 3 refuses it and
            asks for the inner optimizer's ``loss_scale_factor`` instead).
    """

    def __init__(self, inner_optimizer: Any, initial_scale: float = 2.0 ** 15, dynamic_growth_steps: int = 2000,
                 name: Optional[str] = None, dynamic: bool = True, **kwargs: Any) -> None:
        if "optimizer" in kwargs:
            inner_optimizer = kwargs.pop("optimizer")
        if kwargs:
            raise ValueError(f"LossScaleOptimizer does not support {', '.join(sorted(kwargs))}: set them on the "
                             "inner optimizer")
        if isinstance(inner_optimizer, dict):  # a saved config (get_config's "inner_optimizer")
            from distrib.optimizers.registry import deserialize
            inner_optimizer = deserialize(inner_optimizer)
        if not isinstance(inner_optimizer, (torch.optim.Optimizer, KerasNamedOptimizer)):
            raise TypeError(f"LossScaleOptimizer wraps a distrib.optimizers optimizer or a torch.optim.Optimizer, "
                            f"got {type(inner_optimizer).__name__}")
        if isinstance(initial_scale, bool) or not (isinstance(initial_scale, (int, float))
                                                   and math.isfinite(initial_scale) and initial_scale > 0):
            raise ValueError(f"LossScaleOptimizer: initial_scale must be a finite number > 0, got {initial_scale!r}")
        if isinstance(dynamic_growth_steps, bool) or not isinstance(dynamic_growth_steps, int) \
                or dynamic_growth_steps < 1:
            raise ValueError(f"LossScaleOptimizer: dynamic_growth_steps must be an int >= 1, "
                             f"got {dynamic_growth_steps!r}")
        self.inner_optimizer = inner_optimizer
        self.name = name or "loss_scale_optimizer"
        self.dynamic = bool(dynamic)
        self.initial_scale = float(initial_scale)
        self.dynamic_growth_steps = dynamic_growth_steps
        self._scale = float(initial_scale)
        self._good_steps = 0
        self._skipped = 0
        self._applied = 0

    # -- the inner optimizer ---------------------------------------------------
    def build(self, params: Iterable[Any]) -> torch.optim.Optimizer:
        """Build the inner distrib optimizer over ``params`` (a torch inner optimizer is returned as is)."""
        if isinstance(self.inner_optimizer, KerasNamedOptimizer):
            return self.inner_optimizer.build(params)
        return self.inner_optimizer

    @property
    def built(self) -> bool:
        return not isinstance(self.inner_optimizer, KerasNamedOptimizer) or self.inner_optimizer.built

    @property
    def torch_optimizer(self) -> torch.optim.Optimizer:
        """The torch optimizer that steps the parameters."""
        inner = self.inner_optimizer
        return inner.torch_optimizer if isinstance(inner, KerasNamedOptimizer) else inner

    @property
    def learning_rate(self) -> LearningRateValue:
        """The inner optimizer's learning rate (settable, as in Keras)."""
        return LearningRateValue(get_learning_rate(self.inner_optimizer))

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        set_learning_rate(self.inner_optimizer, value)

    lr = learning_rate

    @property
    def iterations(self) -> int:
        """The inner optimizer's steps (skipped steps do not count)."""
        inner = self.inner_optimizer
        if isinstance(inner, KerasNamedOptimizer):
            return inner.iterations
        return self._applied

    # -- the scale ---------------------------------------------------------
    @property
    def dynamic_scale(self) -> torch.Tensor:
        """The current scale as a float32 scalar tensor (Keras's variable)."""
        return torch.tensor(self._scale, dtype=torch.float32)

    @property
    def loss_scale(self) -> float:
        """The current scale as a float (TF2's name)."""
        return self._scale

    @property
    def step_counter(self) -> int:
        """Finite steps in a row since the scale last changed (Keras's name)."""
        return self._good_steps

    dynamic_counter = step_counter

    @property
    def skipped_steps(self) -> int:
        """How many steps were skipped for inf/NaN gradients."""
        return self._skipped

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss * scale`` (computed in float32)."""
        return loss.float() * self._scale

    get_scaled_loss = scale_loss
    scale = scale_loss

    def get_unscaled_gradients(self, grads: Sequence[Optional[torch.Tensor]]) -> List[Optional[torch.Tensor]]:
        """``grads / scale`` (None stays None), as new float32 tensors."""
        return [None if g is None else g.float() / self._scale for g in grads]

    # -- stepping ----------------------------------------------------------
    def step(self, closure: Any = None) -> bool:
        """Unscale the (summed) gradients; step unless one is inf/NaN; adjust the scale (Keras's rule).

        Returns:
            True if the inner optimizer stepped, False if the step was skipped.
        """
        if closure is not None:
            raise ValueError("LossScaleOptimizer.step does not take a closure")
        opt = self.torch_optimizer
        synchronize_gradients(opt)
        grads = [p.grad for group in opt.param_groups for p in group["params"] if p.grad is not None]
        finite = True
        with torch.no_grad():
            if grads:
                finite = bool(torch.stack([torch.isfinite(g).all() for g in grads]).all())
            for g in grads:
                g.div_(self._scale)
        if finite or not self.dynamic:
            opt.step()
            self._applied += 1
        self._update(finite)
        return finite or not self.dynamic

    def _update(self, finite: bool) -> None:
        if not self.dynamic:
            return
        if not finite:
            self._skipped += 1
            self._scale *= 0.5
            self._good_steps = 0
        elif self._good_steps == self.dynamic_growth_steps - 1:
            self._scale *= 2.0
            self._good_steps = 0
        else:
            self._good_steps += 1

    def apply_gradients(self, grads_and_vars: Sequence[Any]) -> bool:
        """TF's form: set each variable's ``.grad`` from unscaled ``(grad, var)`` pairs, then `step`.

        The grads are taken as *scaled* (what ``backward`` of the scaled loss gave).
        """
        pairs = list(grads_and_vars)
        if not self.built:
            self.build([v for _, v in pairs])
        for grad, var in pairs:
            var.grad = None if grad is None else grad.detach().clone()
        return self.step()

    def finalize_variable_values(self, var_list: Any = None) -> None:
        """The inner optimizer's (EMA weights at the end of ``fit``)."""
        finalize = finalizer_of(self.inner_optimizer)
        if finalize is not None:
            finalize(var_list)

    # -- torch optimizer surface ----------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """The inner optimizer's state plus the scale, so a checkpoint resumes the same schedule."""
        return {"optimizer": self.torch_optimizer.state_dict(),
                "loss_scale": {"scale": self._scale, "good_steps": self._good_steps, "skipped": self._skipped,
                               "applied": self._applied}}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        scale = state.get("loss_scale") if isinstance(state, dict) else None
        if not isinstance(scale, dict) or "optimizer" not in state:
            raise ValueError("LossScaleOptimizer.load_state_dict: not a LossScaleOptimizer state "
                             "(expected keys 'optimizer' and 'loss_scale')")
        value = float(scale["scale"])
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"LossScaleOptimizer.load_state_dict: loss_scale.scale must be finite > 0, got {value}")
        self.torch_optimizer.load_state_dict(state["optimizer"])
        self._scale = value
        self._good_steps = int(scale["good_steps"])
        self._skipped = int(scale["skipped"])
        self._applied = int(scale.get("applied", 0))

    def __repr__(self) -> str:
        return (f"LossScaleOptimizer({type(self.inner_optimizer).__name__}, dynamic={self.dynamic}, "
                f"loss_scale={self._scale:g})")

    def get_config(self) -> Dict[str, Any]:
        """Keras's config: the inner optimizer's class and config, the scale settings."""
        inner = self.inner_optimizer
        config = inner.get_config() if isinstance(inner, KerasNamedOptimizer) else {}
        return {"name": self.name, "inner_optimizer": {"class_name": type(inner).__name__, "config": config},
                "initial_scale": self.initial_scale, "dynamic_growth_steps": self.dynamic_growth_steps}
