"""`RMSprop` and `Adagrad`: Keras's, epsilon inside the square root.

Keras divides by ``sqrt(v + epsilon)``; torch's ``torch.optim.RMSprop`` and
``Adagrad`` by ``sqrt(v) + eps``. With ``epsilon=1e-7`` the two differ once
``sqrt(v)`` nears ``sqrt(1e-7) ~ 3e-4``: at a gradient of 2.4e-4 torch's
RMSprop step is 4.2x Keras's, at 1e-5 about 100x. distrib computes Keras's.

RMSprop (Keras)::

    v = rho * v + (1 - rho) * g**2
    a = rho * a + (1 - rho) * g                       # centered only
    inc = lr * g / sqrt(v - a**2 + eps)   (centered)  or  lr * g / sqrt(v + eps)
    m = momentum * m + inc; w -= m        (momentum)  or  w -= inc

Adagrad (Keras): ``acc += g**2; w -= lr * g / sqrt(acc + eps)``, ``acc``
starting at ``initial_accumulator_value``.

Example:
    >>> RMSprop(learning_rate=0.001)._torch_kwargs()   # as in TF's multi-worker custom-loop tutorial
    {'rho': 0.9, 'momentum': 0.0, 'epsilon': 1e-07, 'centered': False}
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List

import torch

from distrib.optimizers.base import Optimizer
from distrib.optimizers.keras_torch import KerasTorchOptimizer, check_unit_interval

__all__ = ["RMSprop", "Adagrad", "KerasRMSprop", "KerasAdagrad"]


class KerasRMSprop(KerasTorchOptimizer):
    """torch optimizer computing Keras's RMSprop; slots ``"velocity"`` (+ ``"momentum"``, ``"average_gradient"``)."""

    def __init__(self, params: Iterable[Any], lr: float = 0.001, rho: float = 0.9, momentum: float = 0.0,
                 epsilon: float = 1e-7, centered: bool = False, **base: Any) -> None:
        super().__init__(params, {"lr": lr, "rho": rho, "momentum": momentum, "epsilon": epsilon,
                                  "centered": centered, **base})

    def init_state(self, p: torch.Tensor, group: Dict[str, Any]) -> Dict[str, Any]:
        state = {"velocity": torch.zeros_like(p)}
        if group["momentum"] > 0:
            state["momentum"] = torch.zeros_like(p)
        if group["centered"]:
            state["average_gradient"] = torch.zeros_like(p)
        return state

    def update(self, p: torch.Tensor, g: torch.Tensor, state: Dict[str, Any], group: Dict[str, Any],
               step: int, lr: float) -> None:
        rho, eps = float(group["rho"]), float(group["epsilon"])
        v = state["velocity"]
        v.copy_(rho * v + (1.0 - rho) * torch.square(g))
        if group["centered"]:
            a = state["average_gradient"]
            a.copy_(rho * a + (1.0 - rho) * g)
            denominator = v - torch.square(a) + eps
        else:
            denominator = v + eps
        increment = (lr * g) / torch.sqrt(denominator)
        if group["momentum"] > 0:
            m = state["momentum"]
            m.copy_(float(group["momentum"]) * m + increment)
            p.sub_(m)
        else:
            p.sub_(increment)

    def update_foreach(self, params: List[torch.Tensor], grads: List[torch.Tensor], states: List[Dict[str, Any]],
                       group: Dict[str, Any], step: int, lr: float) -> None:
        rho, eps = float(group["rho"]), float(group["epsilon"])
        vs = [s["velocity"] for s in states]
        torch._foreach_mul_(vs, rho)
        squares = torch._foreach_pow(grads, 2)
        torch._foreach_mul_(squares, 1.0 - rho)
        torch._foreach_add_(vs, squares)
        if group["centered"]:
            averages = [s["average_gradient"] for s in states]
            torch._foreach_mul_(averages, rho)
            torch._foreach_add_(averages, torch._foreach_mul(grads, 1.0 - rho))
            denominator = torch._foreach_sub(vs, torch._foreach_pow(averages, 2))
            torch._foreach_add_(denominator, eps)
        else:
            denominator = torch._foreach_add(vs, eps)
        torch._foreach_sqrt_(denominator)
        increment = torch._foreach_mul(grads, lr)
        torch._foreach_div_(increment, denominator)
        if group["momentum"] > 0:
            ms = [s["momentum"] for s in states]
            torch._foreach_mul_(ms, float(group["momentum"]))
            torch._foreach_add_(ms, increment)
            torch._foreach_sub_(params, ms)
        else:
            torch._foreach_sub_(params, increment)


class KerasAdagrad(KerasTorchOptimizer):
    """torch optimizer computing Keras's Adagrad; slot ``"accumulator"``."""

    def __init__(self, params: Iterable[Any], lr: float = 0.001, initial_accumulator_value: float = 0.1,
                 epsilon: float = 1e-7, **base: Any) -> None:
        super().__init__(params, {"lr": lr, "initial_accumulator_value": initial_accumulator_value,
                                  "epsilon": epsilon, **base})

    def init_state(self, p: torch.Tensor, group: Dict[str, Any]) -> Dict[str, Any]:
        return {"accumulator": torch.full_like(p, float(group["initial_accumulator_value"]))}

    def update(self, p: torch.Tensor, g: torch.Tensor, state: Dict[str, Any], group: Dict[str, Any],
               step: int, lr: float) -> None:
        acc = state["accumulator"]
        acc.add_(torch.square(g))
        p.sub_((lr * g) / torch.sqrt(acc + float(group["epsilon"])))

    def update_foreach(self, params: List[torch.Tensor], grads: List[torch.Tensor], states: List[Dict[str, Any]],
                       group: Dict[str, Any], step: int, lr: float) -> None:
        accumulators = [s["accumulator"] for s in states]
        torch._foreach_add_(accumulators, torch._foreach_pow(grads, 2))
        denominator = torch._foreach_add(accumulators, float(group["epsilon"]))
        torch._foreach_sqrt_(denominator)
        increment = torch._foreach_mul(grads, lr)
        torch._foreach_div_(increment, denominator)
        torch._foreach_sub_(params, increment)


class RMSprop(Optimizer):
    """RMSprop with Keras defaults (torch's differ: alpha 0.99, eps 1e-8, lr 0.01) and Keras's epsilon.

    Args:
        learning_rate: defaults to 0.001.
        rho: discount of the squared-gradient average; defaults to 0.9.
        momentum: defaults to 0.0.
        epsilon: defaults to 1e-7 (inside the square root).
        centered: normalise by the estimated variance; defaults to False.
        **kwargs: Keras's common options; see `Optimizer`.
    """

    torch_class = KerasRMSprop
    default_name = "rmsprop"

    def __init__(self, learning_rate: float = 0.001, rho: float = 0.9, momentum: float = 0.0,
                 epsilon: float = 1e-7, centered: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        self.rho = check_unit_interval("RMSprop", "rho", rho)
        self.momentum = check_unit_interval("RMSprop", "momentum", momentum, closed=True)
        self.epsilon = float(epsilon)
        self.centered = bool(centered)

    def _torch_kwargs(self) -> Dict[str, Any]:
        return {"rho": self.rho, "momentum": self.momentum, "epsilon": self.epsilon, "centered": self.centered}

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), **self._torch_kwargs()}


class Adagrad(Optimizer):
    """Adagrad with Keras defaults (torch's: lr 0.01, accumulator 0, eps 1e-10) and Keras's epsilon.

    Args:
        learning_rate: defaults to 0.001.
        initial_accumulator_value: starting value of the squared-gradient sums; defaults to 0.1.
        epsilon: defaults to 1e-7 (inside the square root).
        **kwargs: Keras's common options; see `Optimizer`.
    """

    torch_class = KerasAdagrad
    default_name = "adagrad"

    def __init__(self, learning_rate: float = 0.001, initial_accumulator_value: float = 0.1,
                 epsilon: float = 1e-7, **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        if float(initial_accumulator_value) < 0:
            raise ValueError(f"Adagrad: initial_accumulator_value must be >= 0, got {initial_accumulator_value!r}")
        self.initial_accumulator_value = float(initial_accumulator_value)
        self.epsilon = float(epsilon)

    def _torch_kwargs(self) -> Dict[str, Any]:
        return {"initial_accumulator_value": self.initial_accumulator_value, "epsilon": self.epsilon}

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), **self._torch_kwargs()}
