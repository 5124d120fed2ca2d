"""`TensorBoard`: write the logged scalars as TensorBoard summaries, from the chief only.

Layout and tags follow Keras: training values go to ``log_dir/train`` and
validation values (``val_*``, prefix dropped) to ``log_dir/validation``,
tagged ``epoch_<name>`` with the epoch as step, so TensorBoard overlays
``loss`` and ``val_loss`` in one chart. With ``update_freq="batch"`` or an
integer N, the batch logs ``fit`` hands over are also written as
``batch_<name>`` every N steps, with the global step count as step (steps
without logs are skipped, so nothing forces a host sync).

As Keras does, the optimizer's learning rate is written every epoch as
``epoch_learning_rate`` (train run), so a schedule or ``ReduceLROnPlateau``
shows as a curve. With ``histogram_freq=N`` the weights of every parameter
are also written as histograms (tag ``<parameter name>/histogram``) every N
epochs. ``distrib plot LOGDIR -o curves.png`` draws these curves as a PNG.

Writing uses ``torch.utils.tensorboard.SummaryWriter``, which needs the
``tensorboard`` package (``pip install tensorboard``, distrib's ``tensorboard`` extra); it is
imported only when the chief starts training, and a missing package is a
one-line error. Other workers write nothing.

Example:
    >>> model.fit(x, y, epochs=3, validation_data=(xv, yv),
    ...           callbacks=[TensorBoard("logs/run1")])
    $ tensorboard --logdir logs
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

import torch

from distrib.callbacks._chief import is_chief
from distrib.callbacks.callback import Callback, Logs
from distrib.optimizers.learning_rate import get_learning_rate
from distrib.utils.optional import require

__all__ = ["TensorBoard"]


def _summary_writer(log_dir: str) -> Any:
    require("tensorboard", extra="tensorboard", purpose="the TensorBoard callback")
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=log_dir)


def _scalar(value: Any) -> Optional[float]:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class TensorBoard(Callback):
    """Scalars for TensorBoard, written by the chief.

    Args:
        log_dir: the directory to write event files under.
        update_freq: ``"epoch"`` (default), ``"batch"`` (every batch that
            has logs) or an integer N (every N steps).
        histogram_freq: write weight histograms every N epochs (0, the
            default: never).
    """

    def __init__(self, log_dir: Union[str, os.PathLike] = "logs", update_freq: Union[str, int] = "epoch",
                 histogram_freq: int = 0) -> None:
        super().__init__()
        if isinstance(histogram_freq, bool) or not isinstance(histogram_freq, int) or histogram_freq < 0:
            raise ValueError(f"TensorBoard: histogram_freq must be an integer >= 0 (0: no histograms), "
                             f"got {histogram_freq!r}")
        self.histogram_freq = histogram_freq
        if update_freq == "batch":
            update_freq = 1
        if update_freq != "epoch" and (isinstance(update_freq, bool) or not isinstance(update_freq, int)
                                       or update_freq < 1):
            raise ValueError(f"TensorBoard: update_freq must be 'epoch', 'batch' or an integer >= 1, "
                             f"got {update_freq!r}")
        self.log_dir = os.fspath(log_dir)
        self.update_freq = update_freq
        self._writers: Dict[str, Any] = {}
        self._train_step = 0

    def _writer(self, kind: str) -> Any:
        if kind not in self._writers:
            self._writers[kind] = _summary_writer(os.path.join(self.log_dir, kind))
        return self._writers[kind]

    def on_train_begin(self, logs: Logs = None) -> None:
        self._train_step = 0
        if is_chief(self.model):
            self._writer("train")

    def on_train_batch_end(self, batch: int, logs: Logs = None) -> None:
        self._train_step += 1
        if self.update_freq == "epoch" or not logs or "train" not in self._writers:
            return
        if self._train_step % self.update_freq:
            return
        writer = self._writers["train"]
        for name, value in logs.items():
            number = _scalar(value)
            if number is not None:
                writer.add_scalar(f"batch_{name}", number, self._train_step)

    def on_epoch_end(self, epoch: int, logs: Logs = None) -> None:
        if "train" not in self._writers:
            return
        for name, value in (logs or {}).items():
            number = _scalar(value)
            if number is None:
                continue
            if name.startswith("val_"):
                self._writer("validation").add_scalar(f"epoch_{name[4:]}", number, epoch)
            else:
                self._writers["train"].add_scalar(f"epoch_{name}", number, epoch)
        if "learning_rate" not in (logs or {}):
            lr = self._learning_rate()
            if lr is not None:
                self._writers["train"].add_scalar("epoch_learning_rate", lr, epoch)
        if self.histogram_freq and (epoch + 1) % self.histogram_freq == 0:
            self._write_histograms(epoch)
        for writer in self._writers.values():
            writer.flush()

    def _learning_rate(self) -> Optional[float]:
        try:
            return get_learning_rate(self.model.optimizer)
        except (TypeError, ValueError):  # no optimizer, or one without a readable rate
            return None

    def _write_histograms(self, epoch: int) -> None:
        module = self.model.module
        if not isinstance(module, torch.nn.Module):
            return
        writer = self._writers["train"]
        for name, param in module.named_parameters():
            values = param.detach()
            if values.numel() and values.is_floating_point():
                writer.add_histogram(f"{name}/histogram", values.float().cpu(), epoch)

    def on_train_end(self, logs: Logs = None) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers = {}
