"""`Adadelta` and `Ftrl`: Keras 3's, computed as Keras computes them.

Adadelta (``rms(x) = sqrt(x + epsilon)``)::

    acc_g = rho * acc_g + (1 - rho) * g**2
    delta = -rms(acc_delta) * g / rms(acc_g)
    acc_delta = rho * acc_delta + (1 - rho) * delta**2
    w += lr * delta

Ftrl follows Keras's ``update_step`` (accumulator from
``initial_accumulator_value``, linear term from 0, L1/L2/L2-shrinkage and
``beta``).

Example:
    >>> Adadelta().build(model.parameters()).param_groups[0]["rho"]
    0.95
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List

import torch

from distrib.optimizers.base import Optimizer
from distrib.optimizers.keras_torch import KerasTorchOptimizer, check_unit_interval

__all__ = ["Adadelta", "Ftrl", "KerasAdadelta", "KerasFtrl"]


class KerasAdadelta(KerasTorchOptimizer):
    """torch optimizer computing Keras's Adadelta; slots ``"accumulated_grad"``, ``"accumulated_delta_var"``."""

    def __init__(self, params: Iterable[Any], lr: float = 0.001, rho: float = 0.95, epsilon: float = 1e-7,
                 **base: Any) -> None:
        super().__init__(params, {"lr": lr, "rho": rho, "epsilon": epsilon, **base})

    def init_state(self, p: torch.Tensor, group: Dict[str, Any]) -> Dict[str, Any]:
        return {"accumulated_grad": torch.zeros_like(p), "accumulated_delta_var": torch.zeros_like(p)}

    def update(self, p: torch.Tensor, g: torch.Tensor, state: Dict[str, Any], group: Dict[str, Any],
               step: int, lr: float) -> None:
        rho, eps = float(group["rho"]), float(group["epsilon"])
        acc_g, acc_d = state["accumulated_grad"], state["accumulated_delta_var"]
        acc_g.copy_(rho * acc_g + (1.0 - rho) * torch.square(g))
        delta = -((torch.sqrt(acc_d + eps) * g) / torch.sqrt(acc_g + eps))
        acc_d.copy_(rho * acc_d + (1.0 - rho) * torch.square(delta))
        p.add_(lr * delta)

    def update_foreach(self, params: List[torch.Tensor], grads: List[torch.Tensor], states: List[Dict[str, Any]],
                       group: Dict[str, Any], step: int, lr: float) -> None:
        rho, eps = float(group["rho"]), float(group["epsilon"])
        acc_g = [s["accumulated_grad"] for s in states]
        acc_d = [s["accumulated_delta_var"] for s in states]
        torch._foreach_mul_(acc_g, rho)
        squares = torch._foreach_pow(grads, 2)
        torch._foreach_mul_(squares, 1.0 - rho)
        torch._foreach_add_(acc_g, squares)
        delta = torch._foreach_add(acc_d, eps)
        torch._foreach_sqrt_(delta)
        torch._foreach_mul_(delta, grads)
        denominator = torch._foreach_add(acc_g, eps)
        torch._foreach_sqrt_(denominator)
        torch._foreach_div_(delta, denominator)
        torch._foreach_neg_(delta)
        torch._foreach_mul_(acc_d, rho)
        squares = torch._foreach_pow(delta, 2)
        torch._foreach_mul_(squares, 1.0 - rho)
        torch._foreach_add_(acc_d, squares)
        torch._foreach_mul_(delta, lr)
        torch._foreach_add_(params, delta)


class KerasFtrl(KerasTorchOptimizer):
    """torch optimizer computing Keras's Ftrl; slots ``"accumulator"``, ``"linear"``."""

    def __init__(self, params: Iterable[Any], lr: float = 0.001, learning_rate_power: float = -0.5,
                 initial_accumulator_value: float = 0.1, l1_regularization_strength: float = 0.0,
                 l2_regularization_strength: float = 0.0, l2_shrinkage_regularization_strength: float = 0.0,
                 beta: float = 0.0, **base: Any) -> None:
        super().__init__(params, {"lr": lr, "learning_rate_power": learning_rate_power,
                                  "initial_accumulator_value": initial_accumulator_value,
                                  "l1_regularization_strength": l1_regularization_strength,
                                  "l2_regularization_strength": l2_regularization_strength,
                                  "l2_shrinkage_regularization_strength": l2_shrinkage_regularization_strength,
                                  "beta": beta, **base})

    def init_state(self, p: torch.Tensor, group: Dict[str, Any]) -> Dict[str, Any]:
        return {"accumulator": torch.full_like(p, float(group["initial_accumulator_value"])),
                "linear": torch.zeros_like(p)}

    def update(self, p: torch.Tensor, g: torch.Tensor, state: Dict[str, Any], group: Dict[str, Any],
               step: int, lr: float) -> None:
        power = float(group["learning_rate_power"])
        l1 = float(group["l1_regularization_strength"])
        l2 = float(group["l2_regularization_strength"]) + float(group["beta"]) / (2.0 * lr)
        accum, linear = state["accumulator"], state["linear"]
        grad_to_use = g + 2.0 * float(group["l2_shrinkage_regularization_strength"]) * p
        new_accum = accum + torch.square(g)
        linear.add_(grad_to_use - ((torch.pow(new_accum, -power) - torch.pow(accum, -power)) / lr) * p)
        quadratic = torch.pow(new_accum, -power) / lr + 2.0 * l2
        p.copy_((linear.clamp(-l1, l1) - linear) / quadratic)
        accum.copy_(new_accum)


class Adadelta(Optimizer):
    """Adadelta with Keras defaults (learning_rate 0.001, rho 0.95, epsilon 1e-7)."""

    torch_class = KerasAdadelta
    default_name = "adadelta"

    def __init__(self, learning_rate: float = 0.001, rho: float = 0.95, epsilon: float = 1e-7,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        self.rho = check_unit_interval("Adadelta", "rho", rho)
        self.epsilon = float(epsilon)

    def _torch_kwargs(self) -> Dict[str, Any]:
        return {"rho": self.rho, "epsilon": self.epsilon}

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), **self._torch_kwargs()}


class Ftrl(Optimizer):
    """Ftrl with Keras defaults (see Keras's ``Ftrl`` for the arguments)."""

    torch_class = KerasFtrl
    default_name = "ftrl"

    def __init__(self, learning_rate: float = 0.001, learning_rate_power: float = -0.5,
                 initial_accumulator_value: float = 0.1, l1_regularization_strength: float = 0.0,
                 l2_regularization_strength: float = 0.0, l2_shrinkage_regularization_strength: float = 0.0,
                 beta: float = 0.0, **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        checks = {"initial_accumulator_value": initial_accumulator_value,
                  "l1_regularization_strength": l1_regularization_strength,
                  "l2_regularization_strength": l2_regularization_strength,
                  "l2_shrinkage_regularization_strength": l2_shrinkage_regularization_strength}
        for key, value in checks.items():
            if float(value) < 0:
                raise ValueError(f"Ftrl: {key} must be >= 0, got {value!r}")
        if float(learning_rate_power) > 0:
            raise ValueError(f"Ftrl: learning_rate_power must be <= 0, got {learning_rate_power!r}")
        self._ftrl = {"learning_rate_power": float(learning_rate_power), "beta": float(beta),
                      **{k: float(v) for k, v in checks.items()}}

    def _torch_kwargs(self) -> Dict[str, Any]:
        return dict(self._ftrl)

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), **self._torch_kwargs()}
