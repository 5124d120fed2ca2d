"""Training curves as a PNG: from a `History` or from TensorBoard event files.

One panel per metric (``loss``, ``accuracy``, ``learning_rate``, ...), x = epoch,
the training series and, where there is one, the validation series
(``val_<name>``) overlaid::

    history = model.fit(x, y, epochs=10, validation_data=(xv, yv))
    distrib.plot.plot_history(history, "curves.png")

    $ distrib plot logs/run1 -o curves.png      # what the TensorBoard callback wrote

Both functions return the matplotlib ``Figure`` (one ``Axes`` per panel, one
line per series), so a notebook can show or restyle it. Drawing uses
matplotlib's object API with the Agg canvas (no pyplot, no display needed,
nothing global changed). matplotlib is optional (``pip install
'distrib[plot]'``); reading event files needs ``tensorboard`` too.

Example:
    >>> fig = plot_history({"loss": [0.9, 0.5], "val_loss": [1.0, 0.7], "accuracy": [0.6, 0.8]})
    >>> [[line.get_label() for line in ax.get_lines()] for ax in fig.axes]
    [['train', 'validation'], ['train']]
"""
from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from distrib.errors import DistribError

__all__ = ["PlotError", "plot_history", "plot_logdir", "read_tensorboard_scalars", "series_from_history"]

#: name -> (training points, validation points); a point is (epoch, value).
Series = Dict[str, Tuple[List[Tuple[float, float]], List[Tuple[float, float]]]]

_INSTALL_PLOT = "pip install 'distrib[plot]' (or pip install matplotlib)"


class PlotError(DistribError, ValueError):
    """Nothing to plot (no epochs logged, no event files), or bad input."""


def _number(value: Any) -> Optional[float]:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def series_from_history(history: Any) -> Series:
    """The curves of a `History` (or of its ``history`` dict): ``{name: (train, val)}``."""
    logs = getattr(history, "history", history)
    if not isinstance(logs, Mapping):
        raise PlotError(f"plot_history: expected a History (what fit returns) or a dict of "
                        f"name -> per-epoch values, got {type(history).__name__}")
    epochs = list(getattr(history, "epoch", []) or [])
    series: Series = {}
    for name, values in logs.items():
        base, validation = (name[4:], True) if name.startswith("val_") else (name, False)
        xs = epochs if len(epochs) == len(values) else list(range(len(values)))
        points = [(float(x), v) for x, v in ((x, _number(v)) for x, v in zip(xs, values))
                  if v is not None]
        if points:
            series.setdefault(base, ([], []))[1 if validation else 0].extend(points)
    return series


def read_tensorboard_scalars(logdir: Union[str, "os.PathLike[str]"]) -> Series:
    """The ``epoch_*`` scalars under ``logdir/train`` and ``logdir/validation`` (or ``logdir`` itself)."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise ImportError("reading TensorBoard logs needs the tensorboard package: "
                          "pip install 'distrib[tensorboard]'") from None
    root = os.fspath(logdir)
    if not os.path.isdir(root):
        raise PlotError(f"log directory not found: {root} (give the TensorBoard "
                        f"callback's log_dir)")
    runs = [(os.path.join(root, "train"), 0), (os.path.join(root, "validation"), 1)]
    if not any(os.path.isdir(path) for path, _ in runs):
        runs = [(root, 0)]
    series: Series = {}
    for path, slot in runs:
        if not os.path.isdir(path):
            continue
        events = EventAccumulator(path, size_guidance={"scalars": 0})
        events.Reload()
        for tag in events.Tags().get("scalars", []):
            if tag.startswith("epoch_"):
                points = [(float(e.step), float(e.value)) for e in events.Scalars(tag)]
                series.setdefault(tag[len("epoch_"):], ([], []))[slot].extend(points)
    if not series:
        raise PlotError(f"no epoch_* scalars in the event files under {root} "
                        f"(was it written by distrib.callbacks.TensorBoard?)")
    return series


def _figure(series: Series, title: Optional[str]) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(f"plotting needs matplotlib: {_INSTALL_PLOT}") from None
    if not series:
        raise PlotError("plot_history: nothing to plot (no epoch was logged)")
    names = sorted(series, key=lambda n: (n != "loss", n))
    columns = min(3, len(names))
    rows = math.ceil(len(names) / columns)
    figure = Figure(figsize=(4.5 * columns, 3.2 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    for index, name in enumerate(names):
        ax = figure.add_subplot(rows, columns, index + 1)
        for points, label, style in ((series[name][0], "train", "o-"),
                                     (series[name][1], "validation", "s--")):
            if points:
                points = sorted(points)
                ax.plot([p[0] + 1 for p in points], [p[1] for p in points], style,
                        label=label, markersize=3)
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    if title:
        figure.suptitle(title)
    return figure


def _save(figure: Any, path: Optional[Union[str, "os.PathLike[str]"]]) -> None:
    if path is None:
        return
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise PlotError(f"plot: folder {folder} does not exist; create it or choose another path")
    figure.savefig(target, dpi=100, format="png")


def plot_history(history: Any, path: Optional[Union[str, "os.PathLike[str]"]] = None,
                 title: Optional[str] = None) -> Any:
    """Draw a `History`'s curves (and write them to ``path`` as PNG when given); returns the Figure.

    Epochs are numbered from 1 on the x axis, as the progress bar prints them.
    """
    figure = _figure(series_from_history(history), title)
    _save(figure, path)
    return figure


def plot_logdir(logdir: Union[str, "os.PathLike[str]"],
                path: Optional[Union[str, "os.PathLike[str]"]] = None,
                title: Optional[str] = None) -> Any:
    """Draw the curves the TensorBoard callback wrote under ``logdir``; returns the Figure."""
    figure = _figure(read_tensorboard_scalars(logdir), title or os.fspath(logdir))
    _save(figure, path)
    return figure
