"""Two parts of an optimizer that ``fit`` and the learning-rate helpers read, whatever its kind.

``compile`` takes a distrib optimizer (or a `LossScaleOptimizer`) or a
``torch.optim.Optimizer``. Rates live in ``param_groups`` (torch's, and any
optimizer written like one: the one place that asks for them);
``finalize_variable_values`` (EMA weights at the end of ``fit``) is a method
of every distrib optimizer, and a torch optimizer has none.

Example:
    >>> sgd = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    >>> param_groups_of(sgd)[0]["lr"], finalizer_of(sgd)
    (0.1, None)
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional

from distrib.optimizers.torch_surface import TorchOptimizerSurface

__all__ = ["param_groups_of", "finalizer_of"]


def param_groups_of(optimizer: Any) -> Optional[List[dict]]:
    """``optimizer.param_groups`` where it is a list (a torch optimizer's), else None."""
    groups = getattr(optimizer, "param_groups", None)  # duck-typed user optimizer: torch's have param_groups, Keras's not
    return groups if isinstance(groups, list) else None


def finalizer_of(optimizer: Any) -> Optional[Callable[..., Any]]:
    """``optimizer.finalize_variable_values`` of a distrib optimizer (or `LossScaleOptimizer`); None for a
    torch optimizer, which ``compile`` uses as it is."""
    return optimizer.finalize_variable_values if isinstance(optimizer, TorchOptimizerSurface) else None
