"""`ProgbarLogger`: Keras's progress output, printed by the chief only.

``verbose`` (from the callback's params): 0 prints nothing, 1 a live bar per
epoch, 2 one line per epoch::

    Epoch 1/3
    70/70 ━━━━━━━━━━━━━━━━━━━━ 2s 28ms/step - accuracy: 0.8300 - loss: 0.5400
    70/70 - 2s - 28ms/step - accuracy: 0.8300 - loss: 0.5400        (verbose=2)

The bar is drawn by tqdm (rate-limited redraws, ``\\r`` updates) when
standard output is a terminal, or under ``distrib launch`` when the
launcher's output is one (it sets ``DISTRIB_PROGRESS_TTY=1`` and passes the
updates through live); otherwise (a pipe, a file) only each epoch's final
line is printed, as Keras does. While an
epoch runs the time column is the ETA; at the end it is the elapsed time.
Step time ignores the first step (compilation, warm-up), like Keras.

The callback only *displays* the logs it is handed: ``fit`` passes logs to
``on_train_batch_end`` every few steps and ``None`` in between, and the bar
keeps the last values; it never calls ``metric.result()`` or anything else
that would synchronise the host or the replicas. Log values are turned into
text only when tqdm actually redraws.

`evaluate` and `predict` called on their own get a bar too; validation inside
``fit`` does not (its ``val_*`` results appear on the epoch's final line).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any, Dict, Optional

from tqdm import tqdm

from distrib.callbacks._chief import is_chief
from distrib.callbacks.callback import Callback, Logs
from distrib.callbacks.progress_format import (BAR_WIDTH, fit_line, format_bar, format_count, format_eta,
                                                format_logs, format_step_time)

__all__ = ["ProgbarLogger", "BAR_WIDTH"]


def _interactive() -> bool:
    """Whether to draw a live bar: stdout is a terminal, or the launcher's is.

    Under ``distrib launch`` a task's stdout is a pipe; the launcher sets
    ``DISTRIB_PROGRESS_TTY=1`` when its own stdout is a terminal and forwards
    the bar's ``\\r`` updates as they come.
    """
    if os.environ.get("DISTRIB_PROGRESS_TTY") == "1":
        return True
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


class _Timer:
    """Start time and Keras's per-step estimate (the first step excluded once there are more)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.after_first: Optional[float] = None

    def mark(self, current: int) -> None:
        if current >= 1 and self.after_first is None:
            self.after_first = time.monotonic()

    def per_step(self, current: int) -> float:
        now = time.monotonic()
        if current <= 0:
            return 0.0
        if current > 1 and self.after_first is not None:
            return (now - self.after_first) / (current - 1)
        return (now - self.start) / current

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def _line_width() -> int:
    """Characters a live line may take: the terminal's columns less one (the cursor never wraps).

    Under ``distrib launch`` stdout is a pipe; the launcher sets ``COLUMNS`` to
    its terminal's width less the ``[worker 0] `` prefix it adds.
    """
    return max(shutil.get_terminal_size((80, 24)).columns - 1, 1)


class _KerasBar(tqdm):
    """A tqdm bar whose text is Keras's, fitted to the terminal; ``state`` supplies the parts.

    tqdm keeps the redraw rate and the ``\r`` updates; the text is
    `distrib.callbacks.progress_format.fit_line`, which gives up the least
    useful parts (never ``loss``) when the terminal is narrow.
    """

    monitor_interval = 0  # no tqdm monitor thread in training processes

    def __init__(self, state: "ProgbarLogger", target: Optional[int]) -> None:
        self._state = state
        self._width = _line_width()
        super().__init__(total=target, file=sys.stdout, bar_format="{keras_line}", leave=True,
                         mininterval=0.1, miniters=1, dynamic_ncols=False)

    def close(self) -> None:
        """Keep the finished bar's row; a bar fit did not finish (an error, a lost worker) is cleared."""
        if not self._state._final:
            self.leave = False
        super().close()

    @property
    def format_dict(self) -> Dict[str, Any]:
        d = super().format_dict
        d["keras_line"] = self._state._line(int(d["n"]), self._width)
        return d


class ProgbarLogger(Callback):
    """Prints Keras-style progress on the chief (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.verbose = 1
        self.epochs = 1
        self.target: Optional[int] = None
        self._bar: Optional[_KerasBar] = None
        self._timer = _Timer()
        self._seen = 0
        self._logs: Dict[str, Any] = {}
        self._final = False
        self._in_fit = False

    def set_params(self, params: Dict[str, Any]) -> None:
        super().set_params(params)
        verbose = params.get("verbose", 1)
        self.verbose = 1 if verbose == "auto" else int(verbose)
        self.epochs = int(params.get("epochs") or 1)
        self.target = params.get("steps")

    # --------------------------------------------------------- display
    @property
    def _active(self) -> bool:
        return self.verbose > 0 and is_chief(self.model)

    def _clock(self, current: int) -> str:
        if self._final or not self.target:
            return f" {self._timer.elapsed():.0f}s"
        return format_eta(self._timer.per_step(current) * (self.target - current))

    def _line(self, current: int, width: Optional[int] = None) -> str:
        """The progress line; fitted into ``width`` characters when given (a live terminal)."""
        fraction = current / self.target if self.target else None
        count, clock = format_count(current, self.target), self._clock(current)
        step_time = format_step_time(self._timer.per_step(current))
        if width is None:
            bar = f" {format_bar(fraction)}" if fraction is not None else ""
            return count + bar + clock + step_time + format_logs(self._logs)
        return fit_line(count, fraction, clock, step_time, self._logs, width)

    def _reset(self) -> None:
        self._close()
        self._timer = _Timer()
        self._seen = 0
        self._logs = {}
        self._final = False

    def _update(self, current: int, logs: Logs) -> None:
        if not self._active:
            return
        self._seen = current
        self._timer.mark(current)
        if logs:
            self._logs = dict(logs)
        if self.verbose == 1 and _interactive():
            if self._bar is None:
                self._bar = _KerasBar(self, self.target)
            self._bar.update(current - self._bar.n)

    def _finalize(self, logs: Logs) -> None:
        if not self._active:
            return
        if logs:
            self._logs = dict(logs)
        self._final = True
        current = self._seen
        if self.verbose == 1 and not _interactive():
            print(self._line(current), file=sys.stdout, flush=True)
        elif self.verbose == 1:
            if self._bar is None:
                self._bar = _KerasBar(self, self.target)
            self._bar.n = current
            self._close()
        elif self.verbose == 2:
            line = (f"{format_count(current, self.target)} - {self._timer.elapsed():.0f}s -"
                    f"{format_step_time(self._timer.per_step(current))}{format_logs(self._logs)}")
            print(line, file=sys.stdout, flush=True)

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    # ------------------------------------------------------------ hooks
    def on_train_begin(self, logs: Logs = None) -> None:
        self._in_fit = True

    def on_train_end(self, logs: Logs = None) -> None:
        self._close()
        self._in_fit = False

    def on_epoch_begin(self, epoch: int, logs: Logs = None) -> None:
        self._reset()
        if self._active and self.epochs > 1:
            print(f"Epoch {epoch + 1}/{self.epochs}", file=sys.stdout, flush=True)

    def on_train_batch_end(self, batch: int, logs: Logs = None) -> None:
        self._update(batch + 1, logs)

    def on_epoch_end(self, epoch: int, logs: Logs = None) -> None:
        self._finalize(logs)

    def on_test_begin(self, logs: Logs = None) -> None:
        if not self._in_fit:
            self._reset()

    def on_test_batch_end(self, batch: int, logs: Logs = None) -> None:
        if not self._in_fit:
            self._update(batch + 1, logs)

    def on_test_end(self, logs: Logs = None) -> None:
        if not self._in_fit:
            self._finalize(logs)

    def on_predict_begin(self, logs: Logs = None) -> None:
        self._reset()

    def on_predict_batch_end(self, batch: int, logs: Logs = None) -> None:
        self._update(batch + 1, None)

    def on_predict_end(self, logs: Logs = None) -> None:
        self._finalize(None)
