"""Which of the user's code runs during an epoch: when `fit` agrees ``stop_training``, and who reads batch logs.

`fit` agrees ``stop_training`` across workers after every step, or only at epoch ends.

Every worker must stop at the same step, and a flag set on one worker alone
must stop them all. distrib's own callbacks decide from global logs, so they
set ``stop_training`` identically on every worker; only the user's code can
set it on some workers and not others *between* epoch ends: a callback hook
of the user's that runs during the epoch (a subclass's method, or a function
given to `LambdaCallback`), or a ``train_step`` of the user's. `fit` asks
once, at its start, whether any worker runs such code (one tiny collective);
only then does it agree ``stop_training`` after every execution. At every
epoch end it always agrees.

Example (2 workers):
    fit(callbacks=[ModelCheckpoint(...), EarlyStopping()])   # no per-step agreement
    fit(callbacks=[MyStopper()])  # MyStopper.on_train_batch_end: agreed after each execution
"""
from __future__ import annotations

from typing import Any, Iterable

__all__ = ["may_stop_during_epoch", "reads_batch_logs"]

_BATCH_ENDS = ("on_batch_end", "on_train_batch_end", "on_test_batch_end")
_DURING_EPOCH = ("on_train_begin", "on_epoch_begin", "on_batch_begin", "on_batch_end",
                 "on_train_batch_begin", "on_train_batch_end")


def _users(obj: Any, name: str) -> bool:
    """Whether ``obj.<name>`` is the user's code (set on the instance, or defined outside distrib)."""
    if name in vars(obj):
        return True
    for klass in type(obj).__mro__:
        if name in vars(klass):
            return not klass.__module__.startswith("distrib.")
    return False


def may_stop_during_epoch(callbacks: Iterable[Any], model: Any) -> bool:
    """True if user code that runs during an epoch may set ``stop_training`` on this worker."""
    if _users(model, "train_step"):
        return True
    return any(_users(c, hook) for c in callbacks for hook in _DURING_EPOCH)


def reads_batch_logs(callbacks: Iterable[Any]) -> bool:
    """True if a callback of the user's has a batch-end hook (it may read the batch logs).

    Where steps run elsewhere (the parameter server) batch logs are computed
    only then, since computing them waits for the steps scheduled so far.
    """
    return any(_users(c, hook) for c in callbacks for hook in _BATCH_ENDS)
