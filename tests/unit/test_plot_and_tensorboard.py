"""distrib.plot (PNG curves from a History or TensorBoard logs) and the TensorBoard callback's extras."""
import subprocess
import sys

import pytest

from distrib import callbacks
from distrib.callbacks.history import History
from distrib.plot import PlotError, plot_history, plot_logdir

from test_callbacks import StubModel, fit, read_scalars

pytest.importorskip("matplotlib")
pytest.importorskip("tensorboard")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def labels(figure):
    return {ax.get_title(): [line.get_label() for line in ax.get_lines()] for ax in figure.axes}


def test_plot_history_writes_a_png_with_one_line_per_series(tmp_path):
    history = History()
    for epoch, logs in enumerate([{"loss": 0.9, "accuracy": 0.5, "val_loss": 1.0},
                                  {"loss": 0.5, "accuracy": 0.7, "val_loss": 0.8},
                                  {"loss": 0.3, "accuracy": 0.9, "val_loss": 0.6}]):
        history.on_epoch_end(epoch, logs)
    out = tmp_path / "curves.png"
    figure = plot_history(history, out)
    assert labels(figure) == {"loss": ["train", "validation"], "accuracy": ["train"]}
    loss_train = figure.axes[0].get_lines()[0]
    assert list(loss_train.get_xdata()) == [1, 2, 3]
    assert list(loss_train.get_ydata()) == [0.9, 0.5, 0.3]
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000


def test_plot_errors_are_one_clear_line(tmp_path, monkeypatch):
    with pytest.raises(PlotError, match="nothing to plot"):
        plot_history({})
    with pytest.raises(PlotError, match="expected a History"):
        plot_history([1, 2])
    with pytest.raises(PlotError, match="log directory not found"):
        plot_logdir(tmp_path / "nope")
    for name in ("matplotlib", "matplotlib.backends.backend_agg", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, name, None)  # as if matplotlib were not installed
    with pytest.raises(ImportError, match=r"pip install matplotlib \(distrib's 'plot' extra\)"):
        plot_history({"loss": [1.0]}, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_tensorboard_logs_learning_rate_every_epoch_and_histograms(tmp_path):
    logdir = tmp_path / "logs"
    fit(StubModel(lr=0.25), [callbacks.TensorBoard(logdir, histogram_freq=2),
                             callbacks.LearningRateScheduler(lambda epoch: 0.25 / (epoch + 1))],
        [{"loss": 0.5, "val_loss": 0.7}, {"loss": 0.4, "val_loss": 0.6}, {"loss": 0.3, "val_loss": 0.5}])
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train = read_scalars(logdir / "train")
    assert train["epoch_learning_rate"] == [(0, 0.25), (1, 0.125), (2, round(0.25 / 3, 6))]
    acc = EventAccumulator(str(logdir / "train"), size_guidance={"histograms": 0})
    acc.Reload()
    assert sorted(acc.Tags()["histograms"]) == ["bias/histogram", "weight/histogram"]
    assert [e.step for e in acc.Histograms("weight/histogram")] == [1]  # epoch 2 of 3, freq 2
    with pytest.raises(ValueError, match="histogram_freq"):
        callbacks.TensorBoard(tmp_path, histogram_freq=-1)


def test_distrib_plot_command_draws_tensorboard_logs(tmp_path):
    logdir = tmp_path / "run1"
    fit(StubModel(lr=0.1), [callbacks.TensorBoard(logdir)],
        [{"loss": 0.5, "accuracy": 0.6, "val_loss": 0.7}, {"loss": 0.4, "accuracy": 0.8, "val_loss": 0.6}])
    figure = plot_logdir(logdir)
    assert labels(figure) == {"loss": ["train", "validation"], "accuracy": ["train"],
                              "learning_rate": ["train"]}
    out = tmp_path / "curves.png"
    proc = subprocess.run([sys.executable, "-m", "distrib", "plot", str(logdir), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and "3 panels" in proc.stdout
    assert out.read_bytes().startswith(PNG_MAGIC)
    missing = subprocess.run([sys.executable, "-m", "distrib", "plot", str(tmp_path / "none")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        f"distrib plot: {tmp_path / 'none'}: not found (give a TensorBoard log_dir, a CSVLogger "
        "file or a History saved as JSON)"]
