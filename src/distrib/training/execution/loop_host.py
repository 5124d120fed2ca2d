"""`LoopHost`: what the execution wing (and `saving.model_state`) uses of a trainer.

`distrib.training.trainer.Trainer` (and so every `distrib.Model`) is the one
implementation; the modules that run its epochs (`fit_loop`, `eval_loop`),
execute its steps (`local_executor`, `scheduled_executor`), and the step and
state helpers (`steps`, `distrib.training.saving.model_state`) see it through
this protocol, so they need not import the trainer that imports them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Protocol

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from distrib.strategies.interface import Strategy
    from distrib.training.compile_config import CompiledLoss, CompiledMetrics
    from distrib.training.execution.loop_state import TrainLoopState
    from distrib.training.execution.loss_tracker import LossTracker
    from distrib.training.execution.step_loop import Phase
    from distrib.training.execution.jit import JitForward
    from distrib.training.execution.step_plan import StepPlan
    from distrib.utils.pending_restore import PendingRestore

__all__ = ["LoopHost"]


class LoopHost(Protocol):
    """The compiled state and per-call state of a training loop (see `distrib.training.trainer.Trainer`)."""

    module: "torch.nn.Module"
    strategy: "Strategy"
    name: str
    optimizer: Any
    torch_optimizer: Optional["torch.optim.Optimizer"]
    loss_scale_optimizer: Any
    compiled_loss: Optional["CompiledLoss"]
    loss_tracker: "LossTracker"
    compiled_metrics: Optional["CompiledMetrics"]
    metric_restore: "PendingRestore[Dict[str, Any]]"
    train_loop_state: "TrainLoopState"
    steps_per_execution: int
    step_plan: Optional["StepPlan"]
    jit: Optional["JitForward"]
    log_every: Optional[int]
    stop_training: bool
    history: Any

    @property
    def loss(self) -> Any:
        """The ``loss`` given to ``compile`` (named in error messages)."""

    def step_function(self, phase: "Phase") -> Callable[[Any, int], Any]:
        """``step(replica_batch, global_batch_size)`` of ``phase``, run by this process's replica(s)."""

    def apply_metric_state(self, pending: Dict[str, Any]) -> None:
        """Restore metric states now, or on the first batch if the metrics are not built yet."""

    def reset_metrics(self) -> None:
        """Reset the loss tracker and every compiled metric."""

    def compute_logs(self) -> Dict[str, Any]:
        """Global loss and metrics (a collective)."""

    def make_callbacks(self, callbacks: Any, verbose: Any, *, fit: bool, epochs: int, steps: Optional[int],
                       log_every: int) -> Any:
        """The `CallbackList` of one fit/evaluate/predict call."""

    def local_stop(self) -> bool:
        """``stop_training`` as this worker sees it."""

    def agreed_stop(self) -> bool:
        """``stop_training`` agreed by every worker."""
