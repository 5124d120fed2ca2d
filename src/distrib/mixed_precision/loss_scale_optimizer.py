"""`LossScaleOptimizer`: dynamic loss scaling for float16 training (TF's, on a torch optimizer).

float16 gradients of small losses underflow to zero. The loss is multiplied
by a scale ``S`` before ``backward()``, the gradients divided by ``S`` before
the optimizer uses them. Dynamically: a step whose gradients hold an inf or
NaN is **skipped** (parameters and optimizer state untouched) and ``S`` is
halved; after ``dynamic_growth_steps`` finite steps in a row ``S`` doubles.

Across replicas the decision is the same everywhere: `step` first completes
the strategy's gradient sum (`distrib.comm.optimizer_hook.synchronize_gradients`),
so every replica checks the same summed gradients — an inf on one replica is
an inf in the sum on all of them.

Example (a custom loop; TF's names and torch's both work):
    >>> opt = LossScaleOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    >>> with torch.autocast("cuda", dtype=torch.float16):
    ...     loss = compute_loss()
    >>> opt.get_scaled_loss(loss).backward()      # or opt.scale(loss).backward()
    >>> opt.step()                                 # unscales, skips on inf/NaN, adjusts the scale
    True
    >>> opt.zero_grad()
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import torch

from distrib.comm.optimizer_hook import synchronize_gradients

__all__ = ["LossScaleOptimizer"]


class LossScaleOptimizer:
    """Wraps a torch optimizer with (dynamic) loss scaling.

    Args:
        optimizer: the inner ``torch.optim.Optimizer``.
        dynamic: adjust the scale (skip + halve on overflow, double after
            ``dynamic_growth_steps`` good steps); False keeps ``initial_scale``.
        initial_scale: the starting scale.
        dynamic_growth_steps: finite steps in a row before the scale doubles.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, dynamic: bool = True,
                 initial_scale: float = 2.0 ** 15, dynamic_growth_steps: int = 2000) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"LossScaleOptimizer wraps a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if not (isinstance(initial_scale, (int, float)) and math.isfinite(initial_scale) and initial_scale > 0):
            raise ValueError(f"LossScaleOptimizer: initial_scale must be a finite number > 0, got {initial_scale!r}")
        if isinstance(dynamic_growth_steps, bool) or not isinstance(dynamic_growth_steps, int) \
                or dynamic_growth_steps < 1:
            raise ValueError(f"LossScaleOptimizer: dynamic_growth_steps must be an int >= 1, "
                             f"got {dynamic_growth_steps!r}")
        self.inner_optimizer = optimizer
        self.dynamic = bool(dynamic)
        self.dynamic_growth_steps = dynamic_growth_steps
        self._scale = float(initial_scale)
        self._good_steps = 0
        self._skipped = 0

    # -- the scale ---------------------------------------------------------
    @property
    def loss_scale(self) -> float:
        """The current scale."""
        return self._scale

    @property
    def dynamic_counter(self) -> int:
        """Finite steps in a row since the scale last changed."""
        return self._good_steps

    @property
    def skipped_steps(self) -> int:
        """How many steps were skipped for inf/NaN gradients."""
        return self._skipped

    def get_scaled_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss * loss_scale`` (computed in float32)."""
        return loss.float() * self._scale

    scale = get_scaled_loss

    def get_unscaled_gradients(self, grads: Sequence[Optional[torch.Tensor]]) -> List[Optional[torch.Tensor]]:
        """``grads / loss_scale`` (None stays None), as new float32 tensors."""
        return [None if g is None else g.float() / self._scale for g in grads]

    # -- stepping ----------------------------------------------------------
    def step(self, closure: Any = None) -> bool:
        """Unscale the (summed) gradients; step unless one is inf/NaN; adjust the scale.

        Returns:
            True if the inner optimizer stepped, False if the step was skipped.
        """
        if closure is not None:
            raise ValueError("LossScaleOptimizer.step does not take a closure")
        synchronize_gradients(self.inner_optimizer)
        grads = [p.grad for group in self.inner_optimizer.param_groups for p in group["params"]
                 if p.grad is not None]
        finite = True
        with torch.no_grad():
            for g in grads:
                g.div_(self._scale)
            if grads:
                flags = torch.stack([torch.isfinite(g).all() for g in grads])
                finite = bool(flags.all())
        if finite or not self.dynamic:
            self.inner_optimizer.step()
        self._update(finite)
        return finite or not self.dynamic

    def _update(self, finite: bool) -> None:
        if not self.dynamic:
            return
        if not finite:
            self._skipped += 1
            self._scale = max(self._scale / 2.0, 1.0)
            self._good_steps = 0
            return
        self._good_steps += 1
        if self._good_steps >= self.dynamic_growth_steps:
            self._scale *= 2.0
            self._good_steps = 0

    def apply_gradients(self, grads_and_vars: Sequence[Any]) -> bool:
        """TF's form: set each variable's ``.grad`` from unscaled ``(grad, var)`` pairs, then `step`.

        The grads are taken as *scaled* (what ``backward`` of the scaled loss gave).
        """
        for grad, var in grads_and_vars:
            var.grad = None if grad is None else grad.detach().clone()
        return self.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner_optimizer.zero_grad(set_to_none=set_to_none)

    # -- torch optimizer surface ----------------------------------------------
    @property
    def param_groups(self) -> List[Dict[str, Any]]:
        return self.inner_optimizer.param_groups

    @property
    def state(self) -> Any:
        return self.inner_optimizer.state

    def state_dict(self) -> Dict[str, Any]:
        """The inner optimizer's state plus the scale, so a checkpoint resumes the same schedule."""
        return {"optimizer": self.inner_optimizer.state_dict(),
                "loss_scale": {"scale": self._scale, "good_steps": self._good_steps, "skipped": self._skipped}}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        scale = state.get("loss_scale") if isinstance(state, dict) else None
        if not isinstance(scale, dict) or "optimizer" not in state:
            raise ValueError("LossScaleOptimizer.load_state_dict: not a LossScaleOptimizer state "
                             "(expected keys 'optimizer' and 'loss_scale')")
        value = float(scale["scale"])
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"LossScaleOptimizer.load_state_dict: loss_scale.scale must be finite > 0, got {value}")
        self.inner_optimizer.load_state_dict(state["optimizer"])
        self._scale = value
        self._good_steps = int(scale["good_steps"])
        self._skipped = int(scale["skipped"])

    def __repr__(self) -> str:
        return (f"LossScaleOptimizer({type(self.inner_optimizer).__name__}, dynamic={self.dynamic}, "
                f"loss_scale={self._scale:g})")
