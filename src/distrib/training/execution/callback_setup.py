"""Assemble the callbacks of one fit/evaluate/predict call (Keras's ``CallbackList`` set-up).

Order: the progress bar (chief only, when ``verbose`` asks for it), then the
user's callbacks, then `History` (fit only). Every worker gets the same list
apart from the progress bar, so callbacks that take part in collectives
(`BackupAndRestore`) run on every worker.

``verbose``: ``"auto"`` and 1 show a bar, 2 one line per epoch, 0 nothing;
only the chief ever prints.

The callbacks' ``params`` are Keras's (``verbose``, ``epochs``, ``steps``)
plus ``log_every``: logs are computed every ``log_every`` steps and at the
last step of an epoch; ``on_*_batch_end`` receives them on those steps and
``None`` on the others, so no collective or host sync happens per step.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Optional, Tuple, Union

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["resolve_verbose", "make_callback_list"]


def resolve_verbose(verbose: Union[str, int], strategy: "Strategy") -> int:
    """The verbosity this worker uses: 0 on every worker but the chief."""
    if verbose == "auto":
        level = 1
    elif isinstance(verbose, bool) or verbose in (0, 1, 2):
        level = int(verbose)
    else:
        raise ValueError(f"verbose must be 'auto', 0, 1 or 2, got {verbose!r}")
    return level if strategy.is_chief else 0


def make_callback_list(model: Any, callbacks: Optional[Iterable[Any]], *, verbose: int,
                       add_history: bool, epochs: int, steps: Optional[int],
                       log_every: int) -> Tuple[Any, Optional[Any]]:
    """``(CallbackList with the model and params set, its History or None)``.

    ``model`` is what the callbacks see as ``self.model`` (the `distrib.Model`).
    """
    from distrib import callbacks as cb

    if isinstance(callbacks, cb.CallbackList):
        user = list(callbacks.callbacks)
    else:
        user = list(callbacks or [])
    for c in user:
        if not isinstance(c, cb.Callback):
            raise TypeError(f"callbacks must be distrib.callbacks.Callback instances, got {type(c).__name__}")
    items = list(user)
    if verbose and not any(isinstance(c, cb.ProgbarLogger) for c in items):
        items.insert(0, cb.ProgbarLogger())
    history = None
    if add_history:
        history = next((c for c in items if isinstance(c, cb.History)), None)
        if history is None:
            history = cb.History()
            items.append(history)
    callback_list = cb.CallbackList(items)
    callback_list.set_model(model)
    callback_list.set_params({"verbose": verbose, "epochs": epochs, "steps": steps, "log_every": log_every})
    return callback_list, history
