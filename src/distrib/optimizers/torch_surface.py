"""The part of ``torch.optim.Optimizer``'s surface a distrib optimizer hands straight to its torch optimizer.

`distrib.optimizers.Optimizer` and `distrib.mixed_precision.LossScaleOptimizer`
both wrap a ``torch.optim.Optimizer`` (their ``torch_optimizer``); code written
for torch optimizers (schedulers, ``zero_grad`` in a custom loop) reads these
attributes from the wrapper.

Example:
    >>> opt = distrib.optimizers.SGD(0.1)
    >>> opt.build(torch.nn.Linear(2, 1).parameters())
    >>> opt.param_groups[0]["lr"]
    0.1
"""
from __future__ import annotations

from typing import Any, Dict, List

import torch

__all__ = ["TorchOptimizerSurface"]


class TorchOptimizerSurface:
    """``zero_grad``, ``param_groups`` and ``state``, read from the subclass's ``torch_optimizer``."""

    @property
    def torch_optimizer(self) -> torch.optim.Optimizer:
        raise NotImplementedError

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.torch_optimizer.zero_grad(set_to_none=set_to_none)

    @property
    def param_groups(self) -> List[Dict[str, Any]]:
        return self.torch_optimizer.param_groups

    @property
    def state(self) -> Any:
        return self.torch_optimizer.state

    def finalize_variable_values(self, var_list: Any = None) -> None:
        """At the end of ``fit`` (Keras's hook: ``use_ema`` swaps in the moving averages); nothing by default."""
