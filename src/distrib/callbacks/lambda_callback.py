"""`LambdaCallback`: a callback made of plain functions (Keras's ``LambdaCallback``).

Each hook is given as a function with the hook's arguments: ``on_epoch_begin``
and ``on_epoch_end`` take ``(epoch, logs)``, the batch hooks ``(batch, logs)``,
``on_train_begin``/``on_train_end`` ``(logs)``. Any other hook of `Callback`
(``on_test_begin``, ``on_predict_batch_end``, ...) can be passed by name too.

Example:
    >>> losses = []
    >>> cb = LambdaCallback(on_epoch_end=lambda epoch, logs: losses.append(logs["loss"]))
    >>> model.fit(x, y, epochs=3, callbacks=[cb]); len(losses)
    3
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from distrib.callbacks.callback import Callback

__all__ = ["LambdaCallback"]

_HOOKS = tuple(name for name in dir(Callback) if name.startswith("on_"))


class LambdaCallback(Callback):
    """A callback whose hooks are the given functions.

    Args:
        on_epoch_begin, on_epoch_end: ``fn(epoch, logs)``.
        on_train_begin, on_train_end: ``fn(logs)``.
        on_train_batch_begin, on_train_batch_end: ``fn(batch, logs)``.
        **kwargs: other `Callback` hooks by name.

    Raises:
        TypeError: a keyword that is not a callback hook, or a hook that is not callable.
    """

    def __init__(self, on_epoch_begin: Optional[Callable[..., Any]] = None,
                 on_epoch_end: Optional[Callable[..., Any]] = None,
                 on_train_begin: Optional[Callable[..., Any]] = None,
                 on_train_end: Optional[Callable[..., Any]] = None,
                 on_train_batch_begin: Optional[Callable[..., Any]] = None,
                 on_train_batch_end: Optional[Callable[..., Any]] = None, **kwargs: Any) -> None:
        super().__init__()
        hooks = {"on_epoch_begin": on_epoch_begin, "on_epoch_end": on_epoch_end, "on_train_begin": on_train_begin,
                 "on_train_end": on_train_end, "on_train_batch_begin": on_train_batch_begin,
                 "on_train_batch_end": on_train_batch_end, **kwargs}
        for name, fn in hooks.items():
            if name not in _HOOKS:
                raise TypeError(f"LambdaCallback: {name!r} is not a callback hook; use one of {', '.join(_HOOKS)}")
            if fn is None:
                continue
            if not callable(fn):
                raise TypeError(f"LambdaCallback: {name} must be a function, got {type(fn).__name__}")
            setattr(self, name, _with_logs(name, fn))


def _with_logs(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` called as Keras calls it: ``logs`` always passed (None when the caller gave none)."""
    takes_index = "epoch" in name or "batch" in name
    if takes_index:
        return lambda index, logs=None: fn(index, logs)
    return lambda logs=None: fn(logs)
