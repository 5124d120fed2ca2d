"""`Nadam`, `Adamax` and `Lion`: Keras 3's Adam relatives, computed as Keras computes them.

Nadam (``u_t = beta_1 * (1 - 0.5 * 0.96**t)``, ``U_t`` their running product)::

    m += (g - m) * (1 - beta_1);  v += (g**2 - v) * (1 - beta_2)
    m_hat = u_{t+1} * m / (1 - U_t * u_{t+1}) + (1 - u_t) * g / (1 - U_t)
    w -= lr * m_hat / (sqrt(v / (1 - beta_2**t)) + epsilon)

Adamax: ``u = max(beta_2 * u, |g|); w -= lr * m / ((1 - beta_1**t) * (u + epsilon))``.
Lion: ``w -= lr * sign(beta_1 * m + (1 - beta_1) * g); m = beta_2 * m + (1 - beta_2) * g``.

Example:
    >>> opt = Lion(learning_rate=1e-4)
    >>> opt.build(model.parameters()).param_groups[0]["beta_2"]
    0.99
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List

import torch

from distrib.optimizers.adam import Adam
from distrib.optimizers.base import Optimizer
from distrib.optimizers.keras_torch import KerasTorchOptimizer

__all__ = ["Nadam", "Adamax", "Lion", "KerasNadam", "KerasAdamax", "KerasLion"]


class KerasNadam(KerasTorchOptimizer):
    """torch optimizer computing Keras's Nadam; slots ``"momentum"``, ``"velocity"``, ``"u_product"``."""

    def __init__(self, params: Iterable[Any], lr: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, **base: Any) -> None:
        super().__init__(params, {"lr": lr, "beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon, **base})

    def init_state(self, p: torch.Tensor, group: Dict[str, Any]) -> Dict[str, Any]:
        return {"momentum": torch.zeros_like(p), "velocity": torch.zeros_like(p),
                "u_product": torch.ones((), dtype=p.dtype, device=p.device)}

    def update(self, p: torch.Tensor, g: torch.Tensor, state: Dict[str, Any], group: Dict[str, Any],
               step: int, lr: float) -> None:
        beta_1, beta_2 = float(group["beta_1"]), float(group["beta_2"])
        u_t = beta_1 * (1.0 - 0.5 * 0.96 ** step)
        u_t_1 = beta_1 * (1.0 - 0.5 * 0.96 ** (step + 1))
        u_product = state["u_product"]
        u_product.mul_(u_t)
        u_product_t = float(u_product)
        u_product_t_1 = u_product_t * u_t_1
        m, v = state["momentum"], state["velocity"]
        m.add_((g - m) * (1.0 - beta_1))
        v.add_((torch.square(g) - v) * (1.0 - beta_2))
        m_hat = (u_t_1 * m) / (1.0 - u_product_t_1) + ((1.0 - u_t) * g) / (1.0 - u_product_t)
        v_hat = v / (1.0 - beta_2 ** step)
        p.sub_((m_hat * lr) / (torch.sqrt(v_hat) + float(group["epsilon"])))


class KerasAdamax(KerasTorchOptimizer):
    """torch optimizer computing Keras's Adamax; slots ``"m"`` and ``"u"``."""

    def __init__(self, params: Iterable[Any], lr: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, **base: Any) -> None:
        super().__init__(params, {"lr": lr, "beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon, **base})

    def init_state(self, p: torch.Tensor, group: Dict[str, Any]) -> Dict[str, Any]:
        return {"m": torch.zeros_like(p), "u": torch.zeros_like(p)}

    def update(self, p: torch.Tensor, g: torch.Tensor, state: Dict[str, Any], group: Dict[str, Any],
               step: int, lr: float) -> None:
        beta_1, beta_2 = float(group["beta_1"]), float(group["beta_2"])
        m, u = state["m"], state["u"]
        m.add_((g - m) * (1.0 - beta_1))
        torch.maximum(beta_2 * u, torch.abs(g), out=u)
        p.sub_((lr * m) / ((1.0 - beta_1 ** step) * (u + float(group["epsilon"]))))

    def update_foreach(self, params: List[torch.Tensor], grads: List[torch.Tensor], states: List[Dict[str, Any]],
                       group: Dict[str, Any], step: int, lr: float) -> None:
        beta_1, beta_2 = float(group["beta_1"]), float(group["beta_2"])
        ms, us = [s["m"] for s in states], [s["u"] for s in states]
        delta = torch._foreach_sub(grads, ms)
        torch._foreach_mul_(delta, 1.0 - beta_1)
        torch._foreach_add_(ms, delta)
        torch._foreach_mul_(us, beta_2)
        torch._foreach_maximum_(us, torch._foreach_abs(grads))
        denominator = torch._foreach_add(us, float(group["epsilon"]))
        torch._foreach_mul_(denominator, 1.0 - beta_1 ** step)
        increment = torch._foreach_mul(ms, lr)
        torch._foreach_div_(increment, denominator)
        torch._foreach_sub_(params, increment)


class KerasLion(KerasTorchOptimizer):
    """torch optimizer computing Keras's Lion; slot ``"momentum"``."""

    def __init__(self, params: Iterable[Any], lr: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.99,
                 **base: Any) -> None:
        super().__init__(params, {"lr": lr, "beta_1": beta_1, "beta_2": beta_2, **base})

    def init_state(self, p: torch.Tensor, group: Dict[str, Any]) -> Dict[str, Any]:
        return {"momentum": torch.zeros_like(p)}

    def update(self, p: torch.Tensor, g: torch.Tensor, state: Dict[str, Any], group: Dict[str, Any],
               step: int, lr: float) -> None:
        beta_1, beta_2 = float(group["beta_1"]), float(group["beta_2"])
        m = state["momentum"]
        p.sub_(lr * torch.sign(m * beta_1 + g * (1.0 - beta_1)))
        m.copy_(m * beta_2 + g * (1.0 - beta_2))

    def update_foreach(self, params: List[torch.Tensor], grads: List[torch.Tensor], states: List[Dict[str, Any]],
                       group: Dict[str, Any], step: int, lr: float) -> None:
        beta_1, beta_2 = float(group["beta_1"]), float(group["beta_2"])
        ms = [s["momentum"] for s in states]
        mixed = torch._foreach_mul(ms, beta_1)
        torch._foreach_add_(mixed, torch._foreach_mul(grads, 1.0 - beta_1))
        torch._foreach_sign_(mixed)
        torch._foreach_mul_(mixed, lr)
        torch._foreach_sub_(params, mixed)
        torch._foreach_mul_(ms, beta_2)
        torch._foreach_add_(ms, torch._foreach_mul(grads, 1.0 - beta_2))


class Nadam(Adam):
    """Nadam with Keras defaults (learning_rate 0.001, beta_1 0.9, beta_2 0.999, epsilon 1e-7).

    Args:
        learning_rate, beta_1, beta_2, epsilon: as Keras's; **kwargs: see `Optimizer`.
    """

    torch_class = KerasNadam
    default_name = "nadam"

    def __init__(self, learning_rate: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, **kwargs: Any) -> None:
        super().__init__(learning_rate, beta_1, beta_2, epsilon, **kwargs)

    def _torch_kwargs(self) -> Dict[str, Any]:
        return {"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon}


class Adamax(Nadam):
    """Adamax with Keras defaults (learning_rate 0.001, beta_1 0.9, beta_2 0.999, epsilon 1e-7)."""

    torch_class = KerasAdamax
    default_name = "adamax"


class Lion(Optimizer):
    """Lion with Keras defaults (learning_rate 0.001, beta_1 0.9, beta_2 0.99).

    Args:
        learning_rate: defaults to 0.001 (Lion wants a rate 3-10x below Adam's).
        beta_1: interpolation for the update's sign; must be in (0, 1].
        beta_2: decay of the momentum; defaults to 0.99.
        **kwargs: Keras's common options; see `Optimizer`.
    """

    torch_class = KerasLion
    default_name = "lion"

    def __init__(self, learning_rate: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.99,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        if not 0.0 < float(beta_1) <= 1.0:
            raise ValueError(f"Lion: beta_1 must be in (0, 1], got {beta_1!r}")
        self.beta_1, self.beta_2 = float(beta_1), float(beta_2)

    def _torch_kwargs(self) -> Dict[str, Any]:
        return {"beta_1": self.beta_1, "beta_2": self.beta_2}

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), **self._torch_kwargs()}
