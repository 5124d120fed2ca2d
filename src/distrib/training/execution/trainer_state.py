"""`TrainerState`: a trainer's state, declared once; `Trainer` (so every `distrib.Model`) is one.

The modules that run a trainer's epochs (`fit_loop`, `eval_loop`), execute
its steps (`local_executor`, `scheduled_executor`), the step functions
(`steps`, `step_plan`) and `distrib.training.saving.model_state` take a
`TrainerState`: the attributes ``compile`` and each call set, and the few
methods `distrib.training.trainer.Trainer` implements for them. Being below
the trainer, they need not import the trainer that imports them.

Example:
    >>> import dataclasses
    >>> [f.name for f in dataclasses.fields(TrainerState)][:3]
    ['module', 'strategy', 'name']
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

import torch

from distrib.training.execution.loop_state import TrainLoopState
from distrib.training.execution.loss_tracker import LossTracker
from distrib.utils.pending_restore import PendingRestore

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy
    from distrib.training.compile_config import CompiledLoss, CompiledMetrics
    from distrib.training.execution.step_loop import Phase

__all__ = ["TrainerState"]


@dataclasses.dataclass(eq=False, repr=False)
class TrainerState:
    """The compiled state and per-call state of a trainer (see `distrib.training.trainer.Trainer`).

    Args:
        module: the network.
        strategy: the strategy every call runs under.
        name: used in error messages.
    """

    module: torch.nn.Module
    strategy: "Strategy"
    name: str
    #: Where fit is (epoch, step), for `BackupAndRestore`.
    train_loop_state: TrainLoopState = dataclasses.field(default_factory=TrainLoopState)
    #: Steps between log/progress updates; None: about 16 per epoch.
    log_every: Optional[int] = None
    stop_training: bool = False
    history: Any = None
    #: The `CallbackList` of the fit/evaluate/predict call in progress (or the last one).
    callbacks: Any = None
    compile_args: Optional[Dict[str, Any]] = None
    optimizer: Any = None
    torch_optimizer: Optional[torch.optim.Optimizer] = None
    #: fit's loss scaling under the mixed_float16 policy (made on first use).
    loss_scale_optimizer: Any = None
    compiled_loss: Optional["CompiledLoss"] = None
    compiled_metrics: Optional["CompiledMetrics"] = None
    loss_tracker: LossTracker = dataclasses.field(init=False)
    #: Metric state restored before the metrics were built (applied on the first batch).
    metric_restore: PendingRestore[Dict[str, Any]] = dataclasses.field(default_factory=PendingRestore)
    #: What this call's steps look up once (a `distrib.training.execution.step_plan.StepPlan`); None: at the next step.
    step_plan: Any = None
    #: The compiled forward pass and loss (a `distrib.training.execution.jit.JitForward`), or None: eager.
    jit: Any = None
    _steps_per_execution: int = dataclasses.field(default=1, init=False)

    def __post_init__(self) -> None:
        self.loss_tracker = LossTracker(self.strategy)
        self._steps_per_execution = 1

    # ------------------------------------------- what `Trainer` implements for the wing
    @property
    def steps_per_execution(self) -> int:
        """Steps between batch-level callback calls (``compile(steps_per_execution=...)``)."""
        return self._steps_per_execution

    @property
    def loss(self) -> Any:
        """The ``loss`` given to ``compile`` (named in error messages)."""
        raise NotImplementedError

    def step_function(self, phase: "Phase") -> Callable[[Any, int], Any]:
        """``step(replica_batch, global_batch_size)`` of ``phase``, run by this process's replica(s)."""
        raise NotImplementedError

    def apply_metric_state(self, pending: Dict[str, Any]) -> None:
        """Restore metric states now, or on the first batch if the metrics are not built yet."""
        raise NotImplementedError

    def reset_metrics(self) -> None:
        """Reset the loss tracker and every compiled metric."""
        raise NotImplementedError

    def compute_logs(self) -> Dict[str, Any]:
        """Global loss and metrics (a collective)."""
        raise NotImplementedError

    def make_callbacks(self, callbacks: Any, verbose: Any, *, fit: bool, epochs: int, steps: Optional[int],
                       log_every: int) -> Any:
        """The `CallbackList` of one fit/evaluate/predict call."""
        raise NotImplementedError

    def local_stop(self) -> bool:
        """``stop_training`` as this worker sees it."""
        raise NotImplementedError

    def agreed_stop(self) -> bool:
        """``stop_training`` agreed by every worker."""
        raise NotImplementedError
