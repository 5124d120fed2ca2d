"""Training curves as a PNG: from a `History`, a CSVLogger file, a saved History or TensorBoard logs.

One panel per metric (``loss``, ``accuracy``, ``learning_rate``, ...), x = epoch,
the training series and, where there is one, the validation series
(``val_<name>``) overlaid::

    history = model.fit(x, y, epochs=10, validation_data=(xv, yv))
    distrib.plot.plot_history(history, "curves.png")

    $ distrib plot logs/run1 -o curves.png      # what the TensorBoard callback wrote
    $ distrib plot training.csv                 # what CSVLogger wrote
    $ distrib plot history.json                 # json.dump(history.history, f)

`read_curves` tells the three apart: a directory is TensorBoard's, a file
whose first character is ``{`` is a saved History (JSON, either
``history.history`` itself or ``{"history": ..., "epoch": [...]}``), any
other file is a CSVLogger file (header ``epoch,<name>,...``; ``NA`` cells are
skipped). Files are untrusted input: their size is bounded and a malformed
one is one `PlotError` line naming the file and what is wrong.

Both functions return the matplotlib ``Figure`` (one ``Axes`` per panel, one
line per series), so a notebook can show or restyle it. Drawing uses
matplotlib's object API with the Agg canvas (no pyplot, no display needed,
nothing global changed). matplotlib is optional (``pip install
matplotlib``, distrib's ``plot`` extra); reading event files needs ``tensorboard`` too.

Example:
    >>> fig = plot_history({"loss": [0.9, 0.5], "val_loss": [1.0, 0.7], "accuracy": [0.6, 0.8]})
    >>> [[line.get_label() for line in ax.get_lines()] for ax in fig.axes]
    [['train', 'validation'], ['train']]
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from distrib.errors import DistribError, first_line
from distrib.utils.optional import require
from distrib.utils.public_names import public_dir

__all__ = ["PlotError", "plot_history", "plot_logdir", "plot_path", "read_curves", "read_csv_log",
           "read_history_file", "read_tensorboard_scalars", "series_from_history"]


def __dir__() -> "list[str]":
    return public_dir(globals(), __all__)


#: name -> (training points, validation points); a point is (epoch, value).
Series = Dict[str, Tuple[List[Tuple[float, float]], List[Tuple[float, float]]]]

_MAX_FILE_BYTES = 64 << 20


class PlotError(DistribError, ValueError):
    """Nothing to plot (no epochs logged, no event files), or bad input."""


def _number(value: Any) -> Optional[float]:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class _Saved:
    def __init__(self, history: Mapping[str, Any], epoch: Sequence[Any]) -> None:
        self.history, self.epoch = history, list(epoch)


def series_from_history(history: Any) -> Series:
    """The curves of a `History` (or of its ``history`` dict): ``{name: (train, val)}``."""
    if isinstance(history, Mapping) and isinstance(history.get("history"), Mapping):
        history = _Saved(history["history"], history.get("epoch") or [])
    logs = getattr(history, "history", history)
    if not isinstance(logs, Mapping):
        raise PlotError(f"plot_history: expected a History (what fit returns) or a dict of "
                        f"name -> per-epoch values, got {type(history).__name__}")
    epochs = list(getattr(history, "epoch", []) or [])
    series: Series = {}
    for name, values in logs.items():
        base, validation = (name[4:], True) if name.startswith("val_") else (name, False)
        xs = epochs if len(epochs) == len(values) else list(range(len(values)))
        if not all(_number(x) is not None for x in xs):
            xs = list(range(len(values)))
        points = [(float(x), v) for x, v in ((x, _number(v)) for x, v in zip(xs, values))
                  if v is not None]
        if points:
            series.setdefault(base, ([], []))[1 if validation else 0].extend(points)
    return series


def read_tensorboard_scalars(logdir: Union[str, "os.PathLike[str]"]) -> Series:
    """The ``epoch_*`` scalars under ``logdir/train`` and ``logdir/validation`` (or ``logdir`` itself)."""
    EventAccumulator = require("tensorboard.backend.event_processing.event_accumulator",
                               extra="tensorboard", purpose="reading TensorBoard logs").EventAccumulator
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


def _read_text(path: str) -> str:
    try:
        size = os.path.getsize(path)
        if size > _MAX_FILE_BYTES:
            raise PlotError(f"{path}: {size} bytes is too large for a training log "
                            f"(limit {_MAX_FILE_BYTES >> 20} MiB)")
        with open(path, encoding="utf-8") as handle:
            return handle.read(_MAX_FILE_BYTES + 1)
    except UnicodeDecodeError:
        raise PlotError(f"{path}: not a text file (expected a CSVLogger file or a History "
                        "saved as JSON)") from None


def read_csv_log(path: Union[str, "os.PathLike[str]"]) -> Series:
    """The curves in a `distrib.callbacks.CSVLogger` file (``epoch`` column, one row per epoch).

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        ...     _ = f.write("epoch,loss,val_loss\\n0,0.9,NA\\n1,0.5,0.7\\n")
        >>> read_csv_log(f.name)
        {'loss': ([(0.0, 0.9), (1.0, 0.5)], [(1.0, 0.7)])}
    """
    target = os.fspath(path)
    rows = list(csv.reader(io.StringIO(_read_text(target))))
    if not rows or not rows[0]:
        raise PlotError(f"{target}: empty; expected a CSVLogger file with a header row")
    header = [name.strip() for name in rows[0]]
    if "epoch" not in header:
        raise PlotError(f"{target}: the header {','.join(header)[:200]!r} has no 'epoch' column; "
                        "is it a CSVLogger file?")
    at = header.index("epoch")
    history: Dict[str, List[Any]] = {name: [] for i, name in enumerate(header) if i != at}
    epochs: List[Any] = []
    for number, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise PlotError(f"{target}: line {number} has {len(row)} cells, the header {len(header)}")
        epoch = _number(row[at])
        if epoch is None:
            raise PlotError(f"{target}: line {number}: epoch {row[at][:40]!r} is not a number")
        epochs.append(epoch)
        for i, name in enumerate(header):
            if i != at:
                history[name].append(row[i])
    return series_from_history({"history": history, "epoch": epochs})


def read_history_file(path: Union[str, "os.PathLike[str]"]) -> Series:
    """The curves in a History saved as JSON (``history.history``, or ``{"history", "epoch"}``)."""
    target = os.fspath(path)
    try:
        data = json.loads(_read_text(target))
    except (ValueError, RecursionError) as exc:
        raise PlotError(f"{target}: not valid JSON ({first_line(exc, limit=200)})") from None
    if isinstance(data, Mapping) and isinstance(data.get("history"), Mapping):
        logs, epochs = data["history"], data.get("epoch", [])
    else:
        logs, epochs = data, []
    if not isinstance(logs, Mapping) or not isinstance(epochs, list):
        raise PlotError(f"{target}: expected a saved History: a JSON object of name -> "
                        "per-epoch values (json.dump(history.history, f))")
    for name, values in logs.items():
        if not isinstance(values, list):
            raise PlotError(f"{target}: {str(name)[:80]!r} is {type(values).__name__}, expected a "
                            "list of per-epoch values")
    return series_from_history({"history": dict(logs), "epoch": epochs})


def read_curves(path: Union[str, "os.PathLike[str]"]) -> Series:
    """TensorBoard directory, CSVLogger file or saved History: the curves in ``path``."""
    target = os.fspath(path)
    if os.path.isdir(target):
        return read_tensorboard_scalars(target)
    if not os.path.exists(target):
        raise PlotError(f"{target}: not found (give a TensorBoard log_dir, a CSVLogger file or a "
                        "History saved as JSON)")
    if _read_text(target).lstrip()[:1] in ("{", "["):
        return read_history_file(target)
    return read_csv_log(target)


def _figure(series: Series, title: Optional[str]) -> Any:
    FigureCanvasAgg = require("matplotlib.backends.backend_agg", extra="plot",
                              purpose="plotting").FigureCanvasAgg
    Figure = require("matplotlib.figure", extra="plot", purpose="plotting").Figure
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
    return _draw_from(read_tensorboard_scalars, logdir, path, title)


def plot_path(source: Union[str, "os.PathLike[str]"],
              path: Optional[Union[str, "os.PathLike[str]"]] = None,
              title: Optional[str] = None) -> Any:
    """Draw the curves in ``source`` (see `read_curves`); returns the Figure."""
    return _draw_from(read_curves, source, path, title)


def _draw_from(reader: Any, source: Union[str, "os.PathLike[str]"],
               path: Optional[Union[str, "os.PathLike[str]"]], title: Optional[str]) -> Any:
    figure = _figure(reader(source), title or os.fspath(source))
    _save(figure, path)
    return figure
