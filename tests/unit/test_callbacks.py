"""distrib.callbacks driven by a stub model the way fit drives them."""
import csv
import math
import re
import sys

import pytest
import torch

from distrib import callbacks, optimizers
from distrib.callbacks.progress_format import format_count, format_eta, format_logs, format_step_time


class StubStrategy:
    def __init__(self, chief):
        self.is_chief = chief


class StubModel:
    """What callbacks use of distrib.Model: stop_training, optimizer, weights, strategy, metrics."""

    def __init__(self, chief=True, optimizer=None, lr=0.1):
        self.module = torch.nn.Linear(2, 1)
        self.stop_training = False
        self.distribute_strategy = StubStrategy(chief)
        self.metrics = []
        if optimizer is None:
            optimizer = optimizers.SGD(learning_rate=lr)
            optimizer.build(self.module.parameters())
        self.optimizer = optimizer

    def get_weights(self):
        return [t.detach().clone().numpy() for t in self.module.state_dict().values()]

    def set_weights(self, weights):
        self.module.load_state_dict({k: torch.as_tensor(w) for k, w in zip(self.module.state_dict(), weights)})

    def mark(self, value):
        with torch.no_grad():
            self.module.weight.fill_(value)


def fit(model, cbs, epoch_logs, steps=3, verbose=0, batch_logs=None):
    """Drive callbacks like Model.fit; epoch e's weights are all ``e``. Returns epochs run."""
    cb_list = callbacks.CallbackList(cbs)
    cb_list.set_model(model)
    cb_list.set_params({"epochs": len(epoch_logs), "steps": steps, "verbose": verbose})
    cb_list.on_train_begin()
    ran = 0
    for epoch, logs in enumerate(epoch_logs):
        cb_list.on_epoch_begin(epoch)
        for step in range(steps):
            cb_list.on_train_batch_begin(step)
            model.mark(float(epoch))
            cb_list.on_train_batch_end(step, batch_logs(epoch, step) if batch_logs else None)
            if model.stop_training:
                break
        cb_list.on_epoch_end(epoch, dict(logs))
        ran += 1
        if model.stop_training:
            break
    cb_list.on_train_end()
    return ran


def losses(*values):
    return [{"loss": v, "val_loss": v} for v in values]


# ---------------------------------------------------------------- History
def test_history_records_every_epoch():
    model, history = StubModel(), callbacks.History()
    fit(model, [history], [{"loss": 1.0, "accuracy": 0.5}, {"loss": 0.5, "accuracy": 0.75}])
    assert history.history == {"loss": [1.0, 0.5], "accuracy": [0.5, 0.75]}
    assert history.epoch == [0, 1] and model.history is history


# ----------------------------------------------------------- EarlyStopping
def test_early_stopping_patience():
    model = StubModel()
    stopper = callbacks.EarlyStopping(monitor="loss", patience=2)
    ran = fit(model, [stopper], losses(1.0, 0.8, 0.85, 0.9, 0.1, 0.1))
    assert ran == 4 and stopper.stopped_epoch == 3 and model.stop_training
    assert stopper.best == 0.8


def test_early_stopping_patience_zero_stops_at_first_non_improvement():
    stopper = callbacks.EarlyStopping()
    assert fit(StubModel(), [stopper], losses(1.0, 0.9, 0.95, 0.5)) == 3


def test_early_stopping_restores_best_weights_at_the_end():
    model = StubModel()
    stopper = callbacks.EarlyStopping(monitor="val_loss", patience=1, restore_best_weights=True)
    fit(model, [stopper], losses(1.0, 0.5, 0.7, 0.8))
    assert stopper.best_epoch == 1
    assert float(model.module.weight.detach()[0, 0]) == 1.0    # epoch 1's weights, not epoch 2's


def test_early_stopping_min_delta_mode_and_baseline():
    stopper = callbacks.EarlyStopping(monitor="val_accuracy", min_delta=0.05, patience=1)
    logs = [{"val_accuracy": a} for a in (0.5, 0.52, 0.54, 0.9)]
    assert fit(StubModel(), [stopper], logs) == 2            # 0.52 is not > 0.5 + 0.05; accuracy goes up
    # an improvement that misses the baseline does not reset the wait (Keras)
    baseline = callbacks.EarlyStopping(monitor="loss", patience=2, baseline=0.5)
    assert fit(StubModel(), [baseline], losses(0.9, 0.95, 0.97, 0.99)) == 2
    assert fit(StubModel(), [callbacks.EarlyStopping(monitor="loss", patience=2)], losses(0.9, 0.95, 0.97, 0.99)) == 3
    warm = callbacks.EarlyStopping(monitor="loss", start_from_epoch=3)
    assert fit(StubModel(), [warm], losses(1.0, 2.0, 3.0, 4.0, 5.0)) == 5


def test_early_stopping_auto_mode_reads_metric_direction_and_refuses_unknown():
    from distrib.strategies import context

    class S:
        num_replicas_in_sync, device, collective = 1, torch.device("cpu"), None

    strategy = S()
    context.push(strategy)
    try:
        from distrib import metrics
        model = StubModel()
        model.metrics = [metrics.MeanSquaredError(name="score")]
    finally:
        context.pop(strategy)
    stopper = callbacks.EarlyStopping(monitor="score", patience=1)
    assert fit(model, [stopper], [{"score": s} for s in (3.0, 2.0, 1.0, 0.5)]) == 4   # "down" metric improving
    unknown = callbacks.EarlyStopping(monitor="zebra")
    with pytest.raises(ValueError, match="cannot tell whether 'zebra'.*mode='max'"):
        fit(StubModel(), [unknown], [{"zebra": 1.0}])


def test_early_stopping_warns_when_monitor_missing():
    with pytest.warns(UserWarning, match="'val_loss'.*not in the logs"):
        fit(StubModel(), [callbacks.EarlyStopping()], [{"loss": 1.0}])


# ------------------------------------------------------- ReduceLROnPlateau
def test_reduce_lr_on_plateau_reduces_and_logs_rate():
    model, history = StubModel(lr=0.1), callbacks.History()
    reducer = callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1, min_delta=0.0)
    fit(model, [reducer, history], losses(1.0, 1.0, 1.0, 0.5, 0.5))
    assert history.history["learning_rate"] == pytest.approx([0.1, 0.1, 0.05, 0.025, 0.025])
    assert model.optimizer.torch_optimizer.param_groups[0]["lr"] == pytest.approx(0.0125)


def test_reduce_lr_cooldown_and_min_lr_on_a_raw_torch_optimizer():
    module = torch.nn.Linear(2, 1)
    raw = torch.optim.SGD(module.parameters(), lr=1.0)
    model = StubModel(optimizer=raw)
    reducer = callbacks.ReduceLROnPlateau(monitor="loss", factor=0.1, patience=1, cooldown=2, min_lr=0.005)
    rates = []

    class Spy(callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            rates.append(raw.param_groups[0]["lr"])

    fit(model, [reducer, Spy()], losses(*[1.0] * 6))
    # epoch 0 sets the best; each reduction is followed by one idle epoch of cooldown; never below min_lr
    assert rates == pytest.approx([1.0, 0.1, 0.1, 0.01, 0.01, 0.005])
    with pytest.raises(ValueError, match="factor must be < 1.0"):
        callbacks.ReduceLROnPlateau(factor=1.5)


# --------------------------------------------------- LearningRateScheduler
def test_lr_scheduler_with_one_and_two_argument_schedules():
    model, history = StubModel(lr=0.1), callbacks.History()
    fit(model, [callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.5), history], losses(1, 1, 1))
    assert history.history["learning_rate"] == pytest.approx([0.05, 0.025, 0.0125])
    model = StubModel(lr=0.1)
    fit(model, [callbacks.LearningRateScheduler(lambda epoch: 0.01 * (epoch + 1))], losses(1, 1))
    assert model.optimizer.learning_rate == pytest.approx(0.02)
    assert model.optimizer.torch_optimizer.param_groups[0]["lr"] == pytest.approx(0.02)


def test_lr_scheduler_rejects_non_float_and_prints_on_chief_only(capsys):
    with pytest.raises(ValueError, match="must return a float.*str"):
        fit(StubModel(), [callbacks.LearningRateScheduler(lambda e, lr: "fast")], losses(1))
    fit(StubModel(chief=False), [callbacks.LearningRateScheduler(lambda e, lr: 0.3, verbose=1)], losses(1))
    assert capsys.readouterr().out == ""
    fit(StubModel(), [callbacks.LearningRateScheduler(lambda e, lr: 0.3, verbose=1)], losses(1))
    assert "Epoch 1: LearningRateScheduler setting learning rate to 0.3." in capsys.readouterr().out


# ----------------------------------------------------------- TerminateOnNaN
def test_terminate_on_nan_stops_on_invalid_loss_only(capsys):
    model = StubModel()
    ran = fit(model, [callbacks.TerminateOnNaN()], losses(1, 1, 1),
              batch_logs=lambda e, s: {"loss": math.nan} if (e, s) == (1, 1) else None)
    assert ran == 2 and model.stop_training
    assert "Batch 1: Invalid loss, terminating training" in capsys.readouterr().out
    model = StubModel()
    assert fit(model, [callbacks.TerminateOnNaN()], losses(1, 1), batch_logs=lambda e, s: {"loss": 0.3}) == 2
    with pytest.raises(RuntimeError, match="NaN or Inf loss"):
        fit(StubModel(), [callbacks.TerminateOnNaN(raise_error=True)], losses(1),
            batch_logs=lambda e, s: {"loss": math.inf})


# ---------------------------------------------------------------- CSVLogger
def test_csv_logger_writes_rows_and_appends(tmp_path):
    path = tmp_path / "log.csv"
    fit(StubModel(), [callbacks.CSVLogger(str(path))],
        [{"loss": 0.5, "accuracy": 0.75, "val_loss": 0.6, "val_accuracy": 0.7},
         {"loss": 0.25, "accuracy": 0.875, "val_loss": 0.4, "val_accuracy": 0.8}])
    assert path.read_text().splitlines() == [
        "epoch,accuracy,loss,val_accuracy,val_loss", "0,0.75,0.5,0.7,0.6", "1,0.875,0.25,0.8,0.4"]
    fit(StubModel(), [callbacks.CSVLogger(str(path), append=True)],
        [{"loss": 0.1, "accuracy": 0.9, "val_loss": 0.2, "val_accuracy": 0.85}])
    rows = list(csv.DictReader(path.open()))
    assert [r["epoch"] for r in rows] == ["0", "1", "0"] and rows[-1]["loss"] == "0.1"


def test_csv_logger_separator_na_and_non_chief(tmp_path):
    path = tmp_path / "semi.csv"
    fit(StubModel(), [callbacks.CSVLogger(path, separator=";")], [{"loss": 1.0}, {"loss": 0.5}])
    assert path.read_text().splitlines() == ["epoch;loss;val_loss", "0;1.0;NA", "1;0.5;NA"]
    other = tmp_path / "worker.csv"
    fit(StubModel(chief=False), [callbacks.CSVLogger(other)], [{"loss": 1.0}])
    assert not other.exists()


# -------------------------------------------------------------- TensorBoard
def read_scalars(directory):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(directory))
    acc.Reload()
    return {tag: [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_writes_train_and_validation_scalars_on_chief(tmp_path):
    pytest.importorskip("tensorboard")
    fit(StubModel(), [callbacks.TensorBoard(tmp_path / "logs", update_freq=2)],
        [{"loss": 0.5, "val_loss": 0.75}, {"loss": 0.25, "val_loss": 0.5}], steps=2,
        batch_logs=lambda e, s: {"loss": 1.0 + e + s / 10})
    train = read_scalars(tmp_path / "logs" / "train")
    assert train["epoch_loss"] == [(0, 0.5), (1, 0.25)]
    assert train["batch_loss"] == [(2, 1.1), (4, 2.1)]
    assert read_scalars(tmp_path / "logs" / "validation") == {"epoch_loss": [(0, 0.75), (1, 0.5)]}


def test_tensorboard_silent_on_non_chief_and_validates_update_freq(tmp_path):
    fit(StubModel(chief=False), [callbacks.TensorBoard(tmp_path / "w1")], [{"loss": 0.5}])
    assert not (tmp_path / "w1").exists()
    with pytest.raises(ValueError, match="update_freq"):
        callbacks.TensorBoard(tmp_path, update_freq="sometimes")


def test_tensorboard_missing_package_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if tensorboard were not installed
    with pytest.raises(ImportError, match=r"pip install tensorboard \(distrib's 'tensorboard' extra\)"):
        fit(StubModel(), [callbacks.TensorBoard(tmp_path / "x")], [{"loss": 0.5}])


# ------------------------------------------------------------ ProgbarLogger
BAR_LINE = re.compile(r"70/70 ━{20} \d+s \d+(us|ms|s)/step - accuracy: 0\.8300 - loss: 0\.5400"
                      r" - val_accuracy: 0\.8000 - val_loss: 0\.6000\n")


def progbar_logs(epochs):
    return [{"loss": 0.54, "accuracy": 0.83, "val_loss": 0.6, "val_accuracy": 0.8}] * epochs


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_progbar_verbose_1_prints_keras_line(capsys, monkeypatch, terminal):
    from distrib.callbacks import progbar

    monkeypatch.setattr(progbar, "_interactive", lambda: terminal)
    monkeypatch.setenv("COLUMNS", "200")  # wide enough for the whole line (narrower: test_progress_fit)
    ran = fit(StubModel(), [callbacks.ProgbarLogger()], progbar_logs(2), steps=70, verbose=1,
              batch_logs=lambda e, s: {"loss": 0.54, "accuracy": 0.83} if s % 10 == 9 else None)
    out = capsys.readouterr().out
    assert ran == 2
    assert out.count("Epoch 1/2\n") == 1 and out.count("Epoch 2/2\n") == 1
    assert len(BAR_LINE.findall(out)) == 2, out[-400:]
    # a pipe gets only the final line of each epoch; a terminal gets live \r redraws
    assert ("\r" in out) == terminal


def test_progbar_verbose_2_prints_one_line_per_epoch(capsys):
    fit(StubModel(), [callbacks.ProgbarLogger()], progbar_logs(1), steps=70, verbose=2)
    out = capsys.readouterr().out
    assert re.fullmatch(r"70/70 - \d+s - \d+(us|ms|s)/step - accuracy: 0\.8300 - loss: 0\.5400"
                        r" - val_accuracy: 0\.8000 - val_loss: 0\.6000\n", out), out


@pytest.mark.parametrize("chief, verbose", [(False, 1), (False, 2), (True, 0)])
def test_progbar_silent_off_chief_or_verbose_0(capsys, chief, verbose):
    fit(StubModel(chief=chief), [callbacks.ProgbarLogger()], progbar_logs(2), steps=5, verbose=verbose,
        batch_logs=lambda e, s: {"loss": 0.5})
    assert capsys.readouterr().out == ""


def test_progbar_only_displays_logs_it_is_handed(capsys):
    class Exploding:
        name = "accuracy"

        def result(self):
            raise AssertionError("the progress bar must not compute metrics")

    model = StubModel()
    model.metrics = [Exploding()]
    fit(model, [callbacks.ProgbarLogger()], [{"loss": 0.54}], steps=3, verbose=1)
    out = capsys.readouterr().out
    assert "3/3" in out and "loss: 0.5400" in out and "accuracy" not in out


def test_progbar_for_standalone_evaluate(capsys):
    bar = callbacks.ProgbarLogger()
    bar.set_model(StubModel())
    bar.set_params({"verbose": 1, "epochs": 1, "steps": 4})
    bar.on_test_begin()
    for step in range(4):
        bar.on_test_batch_end(step, None)
    bar.on_test_end({"loss": 0.25, "accuracy": 0.5})
    assert re.search(r"4/4 ━{20} \d+s \d+(us|ms|s)/step - accuracy: 0\.5000 - loss: 0\.2500\n",
                     capsys.readouterr().out)


def test_progress_format_helpers():
    assert format_count(7, 70) == " 7/70" and format_count(3, None) == "      3/Unknown"
    assert format_step_time(2.4) == " 2s/step" and format_step_time(0.028) == " 28ms/step"
    assert format_step_time(0.00035) == " 350us/step"
    assert format_eta(42.7) == " 42s" and format_eta(75) == " 1:15" and format_eta(3723) == " 1:02:03"
    assert format_logs({"val_loss": 0.6, "loss": 0.5, "accuracy": 0.25}) == \
        " - accuracy: 0.2500 - loss: 0.5000 - val_loss: 0.6000"
    assert format_logs({"lr": 1e-5}) == " - lr: 1.0000e-05"
    assert format_logs({"loss": torch.tensor(0.5)}) == " - loss: 0.5000"


# ------------------------------------------------------------------ package
def test_package_exports_every_callback():
    for name in ("Callback", "CallbackList", "History", "ProgbarLogger", "EarlyStopping", "LearningRateScheduler",
                 "ReduceLROnPlateau", "TerminateOnNaN", "CSVLogger", "TensorBoard"):
        assert name in callbacks.__all__ and hasattr(callbacks, name)
