"""`distrib plot` reads a CSVLogger file and a saved History as well as TensorBoard logs (issue 21)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from distrib import callbacks
from distrib.plot import PlotError, plot_history, read_csv_log, read_curves, read_history_file

from test_callbacks import StubModel, fit

pytest.importorskip("matplotlib")

EPOCHS = [{"loss": 0.5, "accuracy": 0.6, "val_loss": 0.7}, {"loss": 0.4, "accuracy": 0.8, "val_loss": 0.6},
          {"loss": 0.3, "accuracy": 0.9, "val_loss": 0.5}]


def _trained(tmp_path):
    """A CSVLogger file and a History, written by the same (stub) fit."""
    csv_path = tmp_path / "log.csv"
    history = callbacks.History()
    fit(StubModel(), [callbacks.CSVLogger(str(csv_path)), history], EPOCHS)
    return csv_path, history


def test_the_three_sources_give_the_curves_plot_history_draws(tmp_path):
    csv_path, history = _trained(tmp_path)
    expected = {"loss": ([(0.0, 0.5), (1.0, 0.4), (2.0, 0.3)], [(0.0, 0.7), (1.0, 0.6), (2.0, 0.5)]),
                "accuracy": ([(0.0, 0.6), (1.0, 0.8), (2.0, 0.9)], [])}
    assert read_csv_log(csv_path) == expected
    plain = tmp_path / "history.json"
    plain.write_text(json.dumps(history.history))
    assert read_history_file(plain) == expected
    full = tmp_path / "full.json"
    full.write_text(json.dumps({"history": history.history, "epoch": history.epoch}))
    assert read_curves(full) == expected and read_curves(csv_path) == expected


@pytest.mark.parametrize("kind", ["csv", "json"])
def test_distrib_plot_command_draws_a_csv_log_and_a_saved_history(tmp_path, kind):
    csv_path, history = _trained(tmp_path)
    source = csv_path
    if kind == "json":
        source = tmp_path / "history.json"
        source.write_text(json.dumps(history.history))
    out = tmp_path / "curves.png"
    proc = subprocess.run([sys.executable, "-m", "distrib", "plot", str(source), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"distrib plot: wrote {out} (2 panels)"
    assert out.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("name, text, message", [
    ("a.csv", "", "empty; expected a CSVLogger file"),
    ("a.csv", "loss,acc\n0.1,0.2\n", "has no 'epoch' column"),
    ("a.csv", "epoch,loss\n0,0.1,9\n", "line 2 has 3 cells, the header 2"),
    ("a.csv", "epoch,loss\nx,0.1\n", "line 2: epoch 'x' is not a number"),
    ("a.json", "{\"loss\": 3}", "'loss' is int, expected a list"),
    ("a.json", "{\"loss\": [1,", "not valid JSON"),
    ("a.json", "[" * 100000, "not valid JSON"),
    ("a.bin", "\udcff", "not a text file"),
])
def test_a_malformed_file_is_one_line_naming_it(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(PlotError) as info:
        read_curves(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)
    assert "\n" not in str(info.value)


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from distrib import plot

    monkeypatch.setattr(plot, "_MAX_FILE_BYTES", 10)
    path = tmp_path / "big.csv"
    path.write_text("epoch,loss\n0,0.1\n")
    with pytest.raises(PlotError, match="too large for a training log"):
        read_curves(path)


def test_plot_history_accepts_the_saved_dict(tmp_path):
    figure = plot_history({"history": {"loss": [0.9, 0.5]}, "epoch": [0, 1]})
    assert [ax.get_title() for ax in figure.axes] == ["loss"]
