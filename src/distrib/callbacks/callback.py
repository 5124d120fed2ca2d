"""`Callback`: the Keras hook names, called by `Model.fit`, `evaluate` and `predict`.

`fit` calls, in order: ``set_model``, ``set_params``, ``on_train_begin``; per
epoch ``on_epoch_begin``, per step ``on_train_batch_begin``/``on_train_batch_end``
(whose base versions call Keras 2's ``on_batch_begin``/``on_batch_end``, as
Keras 3's do), validation's ``on_test_*`` hooks, then ``on_epoch_end`` with the epoch's logs;
finally ``on_train_end``. Every worker runs every callback (some, like
`BackupAndRestore`, take part in collectives); callbacks that print or write
files check ``self.model.distribute_strategy.is_chief`` themselves.

``self.model`` is the `distrib.Model` (None until ``set_model``); callbacks
read its ``distribute_strategy``, ``optimizer``, ``module``, ``metrics`` and
``stop_training`` plainly, so a stand-in model needs those members.

Example:
    >>> class PrintLoss(Callback):
    ...     def on_epoch_end(self, epoch, logs=None):
    ...         print(epoch, logs["loss"])
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

__all__ = ["Callback", "CallbackList"]

Logs = Optional[Dict[str, Any]]


class Callback:
    """Base class for fit/evaluate/predict callbacks (Keras hook names)."""

    def __init__(self) -> None:
        self.model: Any = None
        self.params: Dict[str, Any] = {}

    def set_model(self, model: Any) -> None:
        self.model = model

    def set_params(self, params: Dict[str, Any]) -> None:
        self.params = params

    def on_train_begin(self, logs: Logs = None) -> None: ...
    def on_train_end(self, logs: Logs = None) -> None: ...
    def on_epoch_begin(self, epoch: int, logs: Logs = None) -> None: ...
    def on_epoch_end(self, epoch: int, logs: Logs = None) -> None: ...
    def on_batch_begin(self, batch: int, logs: Logs = None) -> None:
        """Keras 2's name for `on_train_batch_begin`, which calls it unless overridden (as Keras 3 does)."""

    def on_batch_end(self, batch: int, logs: Logs = None) -> None:
        """Keras 2's name for `on_train_batch_end`, which calls it unless overridden (as Keras 3 does)."""

    def on_train_batch_begin(self, batch: int, logs: Logs = None) -> None:
        self.on_batch_begin(batch, logs=logs)

    def on_train_batch_end(self, batch: int, logs: Logs = None) -> None:
        self.on_batch_end(batch, logs=logs)

    def on_test_begin(self, logs: Logs = None) -> None: ...
    def on_test_end(self, logs: Logs = None) -> None: ...
    def on_test_batch_begin(self, batch: int, logs: Logs = None) -> None: ...
    def on_test_batch_end(self, batch: int, logs: Logs = None) -> None: ...
    def on_predict_begin(self, logs: Logs = None) -> None: ...
    def on_predict_end(self, logs: Logs = None) -> None: ...
    def on_predict_batch_begin(self, batch: int, logs: Logs = None) -> None: ...
    def on_predict_batch_end(self, batch: int, logs: Logs = None) -> None: ...


_HOOKS = [name for name in vars(Callback) if name.startswith("on_")]


class CallbackList(Callback):
    """Forwards every hook to each callback in order."""

    def __init__(self, callbacks: Optional[Iterable[Callback]] = None) -> None:
        super().__init__()
        self.callbacks: List[Callback] = list(callbacks or [])

    def append(self, callback: Callback) -> None:
        self.callbacks.append(callback)

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        for c in self.callbacks:
            c.set_model(model)

    def set_params(self, params: Dict[str, Any]) -> None:
        super().set_params(params)
        for c in self.callbacks:
            c.set_params(params)

    def __getattribute__(self, name: str) -> Any:
        if name in _HOOKS:
            callbacks = object.__getattribute__(self, "callbacks")

            def fan_out(*args: Any, **kwargs: Any) -> None:
                for c in callbacks:
                    getattr(c, name)(*args, **kwargs)
            return fan_out
        return object.__getattribute__(self, name)
