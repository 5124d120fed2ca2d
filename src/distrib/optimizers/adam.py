"""`Adam` and `AdamW`: Keras's Adam (`KerasAdam` is their torch optimizer).

Keras adds ``epsilon`` to ``sqrt(v)`` with the bias correction folded into
the step size (the "epsilon hat" of Kingma & Ba)::

    alpha = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)
    w -= alpha * m / (sqrt(v) + epsilon)

torch's ``torch.optim.Adam`` adds ``eps`` after correcting ``v``, which is a
smaller epsilon early in training (31.6x smaller at step 1 with
``beta_2=0.999``); for gradients near ``epsilon`` the steps differ.
`AdamW` is Adam with Keras's decoupled ``weight_decay`` (default 0.004)
applied before the update, ``w -= w * weight_decay * lr``.

Example:
    >>> Adam().build(model.parameters()).param_groups[0]["epsilon"]
    1e-07
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List

import torch

from distrib.optimizers.base import Optimizer
from distrib.optimizers.keras_torch import KerasTorchOptimizer, check_unit_interval

__all__ = ["Adam", "AdamW", "KerasAdam"]


class KerasAdam(KerasTorchOptimizer):
    """torch optimizer computing Keras's Adam; slots ``"momentum"``, ``"velocity"`` (+ ``"velocity_hat"``)."""

    def __init__(self, params: Iterable[Any], lr: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, amsgrad: bool = False, **base: Any) -> None:
        super().__init__(params, {"lr": lr, "beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon,
                                  "amsgrad": amsgrad, **base})

    def init_state(self, p: torch.Tensor, group: Dict[str, Any]) -> Dict[str, Any]:
        state = {"momentum": torch.zeros_like(p), "velocity": torch.zeros_like(p)}
        if group["amsgrad"]:
            state["velocity_hat"] = torch.zeros_like(p)
        return state

    def update(self, p: torch.Tensor, g: torch.Tensor, state: Dict[str, Any], group: Dict[str, Any],
               step: int, lr: float) -> None:
        beta_1, beta_2 = float(group["beta_1"]), float(group["beta_2"])
        alpha = lr * math.sqrt(1.0 - beta_2 ** step) / (1.0 - beta_1 ** step)
        m, v = state["momentum"], state["velocity"]
        m.add_((g - m) * (1.0 - beta_1))
        v.add_((torch.square(g) - v) * (1.0 - beta_2))
        if group["amsgrad"]:
            v_hat = state["velocity_hat"]
            torch.maximum(v_hat, v, out=v_hat)
            v = v_hat
        p.sub_((m * alpha) / (torch.sqrt(v) + float(group["epsilon"])))

    def update_foreach(self, params: List[torch.Tensor], grads: List[torch.Tensor], states: List[Dict[str, Any]],
                       group: Dict[str, Any], step: int, lr: float) -> None:
        beta_1, beta_2 = float(group["beta_1"]), float(group["beta_2"])
        alpha = lr * math.sqrt(1.0 - beta_2 ** step) / (1.0 - beta_1 ** step)
        ms, vs = [s["momentum"] for s in states], [s["velocity"] for s in states]
        delta = torch._foreach_sub(grads, ms)
        torch._foreach_mul_(delta, 1.0 - beta_1)
        torch._foreach_add_(ms, delta)
        delta = torch._foreach_pow(grads, 2)
        torch._foreach_sub_(delta, vs)
        torch._foreach_mul_(delta, 1.0 - beta_2)
        torch._foreach_add_(vs, delta)
        if group["amsgrad"]:
            v_hats = [s["velocity_hat"] for s in states]
            torch._foreach_maximum_(v_hats, vs)
            vs = v_hats
        denominator = torch._foreach_sqrt(vs)
        torch._foreach_add_(denominator, float(group["epsilon"]))
        increment = torch._foreach_mul(ms, alpha)
        torch._foreach_div_(increment, denominator)
        torch._foreach_sub_(params, increment)


class Adam(Optimizer):
    """Adam with Keras defaults and Keras's epsilon placement.

    Args:
        learning_rate: defaults to 0.001.
        beta_1: decay of the first-moment estimate; defaults to 0.9.
        beta_2: decay of the second-moment estimate; defaults to 0.999.
        epsilon: defaults to 1e-7 ("epsilon hat", see the module docstring).
        amsgrad: use AMSGrad; defaults to False.
        **kwargs: Keras's common options; see `Optimizer`.
    """

    torch_class = KerasAdam
    default_name = "adam"

    def __init__(self, learning_rate: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, amsgrad: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        who = type(self).__name__
        self.beta_1 = check_unit_interval(who, "beta_1", beta_1)
        self.beta_2 = check_unit_interval(who, "beta_2", beta_2)
        self.epsilon = float(epsilon)
        self.amsgrad = bool(amsgrad)

    def _torch_kwargs(self) -> Dict[str, Any]:
        return {"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon, "amsgrad": self.amsgrad}

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), **self._torch_kwargs()}


class AdamW(Adam):
    """Adam with decoupled weight decay (Keras default ``weight_decay=0.004``; torch's AdamW uses 0.01)."""

    default_name = "adamw"

    def __init__(self, learning_rate: float = 0.001, weight_decay: float = 0.004, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-7, amsgrad: bool = False, **kwargs: Any) -> None:
        if weight_decay is None:
            raise ValueError("AdamW: weight_decay must be a number >= 0, got None")
        super().__init__(learning_rate, beta_1, beta_2, epsilon, amsgrad, weight_decay=weight_decay, **kwargs)
