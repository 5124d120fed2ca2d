"""`SGD`: Keras's stochastic gradient descent (`KerasSGD` is its torch optimizer).

Keras keeps a velocity ``v = momentum * v - lr * g`` and adds it to the
weights (Nesterov: adds ``momentum * v - lr * g``). torch's ``torch.optim.SGD``
keeps ``b = momentum * b + g`` and subtracts ``lr * b``: the same weights while
the learning rate is constant, but after a change (a schedule,
`ReduceLROnPlateau`) torch applies the new rate to the whole accumulated
buffer and Keras only to new gradients. distrib computes Keras's rule.

Example:
    >>> opt = SGD(learning_rate=0.1, momentum=0.9)
    >>> torch_opt = opt.build(model.parameters())     # a KerasSGD
    >>> loss.backward(); torch_opt.step()              # v = 0.9 v - 0.1 g; w += v
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List

import torch

from distrib.optimizers.base import Optimizer
from distrib.optimizers.keras_torch import KerasTorchOptimizer, check_unit_interval

__all__ = ["SGD", "KerasSGD"]


class KerasSGD(KerasTorchOptimizer):
    """torch optimizer computing Keras's SGD; slot ``"momentum"`` (the velocity) when momentum > 0."""

    def __init__(self, params: Iterable[Any], lr: float = 0.01, momentum: float = 0.0, nesterov: bool = False,
                 **base: Any) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum, "nesterov": nesterov, **base})

    def init_state(self, p: torch.Tensor, group: Dict[str, Any]) -> Dict[str, Any]:
        return {"momentum": torch.zeros_like(p)} if group["momentum"] else {}

    def update(self, p: torch.Tensor, g: torch.Tensor, state: Dict[str, Any], group: Dict[str, Any],
               step: int, lr: float) -> None:
        momentum = float(group["momentum"])
        if not momentum:
            p.sub_(g * lr)
            return
        m = state["momentum"]
        scaled = g * lr
        m.mul_(momentum).sub_(scaled)  # the same float32 roundings as m * momentum - g * lr
        p.add_(m * momentum - scaled if group["nesterov"] else m)

    def update_foreach(self, params: List[torch.Tensor], grads: List[torch.Tensor], states: List[Dict[str, Any]],
                       group: Dict[str, Any], step: int, lr: float) -> None:
        momentum = float(group["momentum"])
        scaled = torch._foreach_mul(grads, lr)
        if not momentum:
            torch._foreach_sub_(params, scaled)
            return
        ms = [s["momentum"] for s in states]
        torch._foreach_mul_(ms, momentum)
        torch._foreach_sub_(ms, scaled)
        if group["nesterov"]:
            ahead = torch._foreach_mul(ms, momentum)
            torch._foreach_sub_(ahead, scaled)
            torch._foreach_add_(params, ahead)
        else:
            torch._foreach_add_(params, ms)


class SGD(Optimizer):
    """Gradient descent with optional (Nesterov) momentum; Keras defaults and Keras's velocity rule.

    Args:
        learning_rate: defaults to 0.01.
        momentum: defaults to 0.0.
        nesterov: use Nesterov momentum; defaults to False.
        **kwargs: Keras's common options (``weight_decay``, ``clipnorm``, ``clipvalue``,
            ``global_clipnorm``, ``use_ema``, ``ema_momentum``, ``ema_overwrite_frequency``,
            ``loss_scale_factor``, ``name``); see `Optimizer`.
    """

    torch_class = KerasSGD
    default_name = "SGD"

    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.0, nesterov: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate, **kwargs)
        self.momentum = check_unit_interval("SGD", "momentum", momentum, closed=True)
        self.nesterov = bool(nesterov)

    def _torch_kwargs(self) -> Dict[str, Any]:
        return {"momentum": self.momentum, "nesterov": self.nesterov}

    def get_config(self) -> Dict[str, Any]:
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov}
