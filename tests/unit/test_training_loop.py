"""The one step loop behind fit / evaluate / predict (`Trainer`, `run_steps`) in one process."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import distrib
from distrib.training import Trainer
from distrib.training.execution.step_loop import TRAIN, Execution, run_steps


class Recorder(distrib.callbacks.Callback):
    """Records every hook call as ``(hook, index or None, whether logs were given)``."""

    def __init__(self, stop_at_train_batch=None):
        super().__init__()
        self.calls = []
        self.stop_at_train_batch = stop_at_train_batch

    def _rec(self, hook, index=None, logs=None):
        self.calls.append((hook, index, logs is not None))

    def on_train_begin(self, logs=None): self._rec("train_begin")
    def on_train_end(self, logs=None): self._rec("train_end")
    def on_epoch_begin(self, epoch, logs=None): self._rec("epoch_begin", epoch)
    def on_epoch_end(self, epoch, logs=None): self._rec("epoch_end", epoch, logs)
    def on_train_batch_begin(self, batch, logs=None): self._rec("train_batch_begin", batch)
    def on_test_begin(self, logs=None): self._rec("test_begin")
    def on_test_end(self, logs=None): self._rec("test_end", None, logs)
    def on_test_batch_begin(self, batch, logs=None): self._rec("test_batch_begin", batch)
    def on_test_batch_end(self, batch, logs=None): self._rec("test_batch_end", batch, logs)
    def on_predict_begin(self, logs=None): self._rec("predict_begin")
    def on_predict_end(self, logs=None): self._rec("predict_end")
    def on_predict_batch_begin(self, batch, logs=None): self._rec("predict_batch_begin", batch)

    def on_train_batch_end(self, batch, logs=None):
        self._rec("train_batch_end", batch, logs)
        if batch == self.stop_at_train_batch:
            self.model.stop_training = True

    def on_predict_batch_end(self, batch, logs=None):
        self.calls.append(("predict_batch_end", batch, None if logs is None else int(logs["outputs"].shape[0])))


def _data(n=6, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)).astype(np.float32)
    return x, (x @ np.array([[1.5], [-2.0]], np.float32)).astype(np.float32)


def _model(steps_per_execution=1, seed=0):
    torch.manual_seed(seed)
    model = distrib.Model(torch.nn.Linear(2, 1))
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=steps_per_execution)
    return model


def test_fit_evaluate_predict_call_hooks_once_per_execution():
    x, y = _data(6)
    model = _model(steps_per_execution=2)
    model.log_every = 4  # logs only where an execution reaches step 4, or at the last step
    rec = Recorder()
    model.fit(x, y, batch_size=2, epochs=2, shuffle=False, verbose=0, callbacks=[rec])
    epoch = [("train_batch_begin", 0, False), ("train_batch_end", 1, False),
             ("train_batch_begin", 2, False), ("train_batch_end", 2, True)]
    assert rec.calls == ([("train_begin", None, False), ("epoch_begin", 0, False)] + epoch
                         + [("epoch_end", 0, True), ("epoch_begin", 1, False)] + epoch
                         + [("epoch_end", 1, True), ("train_end", None, False)])
    assert model.train_loop_state.global_step == 6  # every step ran

    rec.calls.clear()
    model.evaluate(x, y, batch_size=2, verbose=0, callbacks=[rec])
    # without steps=... the steps are the input's (3 here), so the last batch is known and gets logs, as in fit
    assert rec.calls == [("test_begin", None, False), ("test_batch_begin", 0, False), ("test_batch_end", 1, False),
                         ("test_batch_begin", 2, False), ("test_batch_end", 2, True), ("test_end", None, True)]

    rec.calls.clear()
    model.evaluate(x, y, batch_size=2, verbose=0, callbacks=[rec], steps=3)
    assert [c[2] for c in rec.calls if c[0] == "test_batch_end"] == [False, True]

    rec.calls.clear()
    model.log_every = 1
    model.predict(x, batch_size=2, verbose=0, callbacks=[rec])
    # the outputs of each execution: 2 batches of 2 rows, then 1 batch
    assert rec.calls == [("predict_begin", None, False), ("predict_batch_begin", 0, False),
                         ("predict_batch_end", 1, 4), ("predict_batch_begin", 2, False),
                         ("predict_batch_end", 2, 2), ("predict_end", None, False)]


def test_validation_runs_the_test_hooks_inside_the_epoch():
    x, y = _data(6)
    model = _model(steps_per_execution=2)
    rec = Recorder()
    history = model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0, callbacks=[rec],
                        validation_data=(x[:4], y[:4]))
    hooks = [c[:2] for c in rec.calls]
    assert hooks[hooks.index(("train_batch_end", 2)) + 1:] == [
        ("test_begin", None), ("test_batch_begin", 0), ("test_batch_end", 1), ("test_end", None),
        ("epoch_end", 0), ("train_end", None)]
    assert sorted(history.history) == ["loss", "val_loss"]


def test_steps_per_execution_does_not_change_the_training():
    x, y = _data(10)
    results = []
    for spe in (1, 3):
        model = _model(steps_per_execution=spe)
        history = model.fit(x, y, batch_size=2, epochs=2, verbose=0)
        results.append((model.get_weights(), history.history["loss"], model.predict(x, batch_size=4, verbose=0)))
    (w1, l1, p1), (w3, l3, p3) = results
    assert all(np.array_equal(a, b) for a, b in zip(w1, w3))
    assert l1 == l3 and np.array_equal(p1, p3)


@pytest.mark.parametrize("spe", [1, 2])
def test_stop_training_mid_epoch_ends_fit_after_that_execution(spe):
    x, y = _data(6)
    model = _model(steps_per_execution=spe)
    rec = Recorder(stop_at_train_batch=1)
    history = model.fit(x, y, batch_size=2, epochs=2, shuffle=False, verbose=0, callbacks=[rec])
    hooks = [c[:2] for c in rec.calls]
    assert hooks[-3:] == [("train_batch_end", 1), ("epoch_end", 0), ("train_end", None)]
    assert ("epoch_begin", 1) not in hooks
    assert model.stop_training and model.train_loop_state.global_step == 2
    assert len(history.history["loss"]) == 1


def test_the_model_is_its_own_trainer_and_a_subclass_step_runs_in_fit_and_evaluate():
    class Counting(distrib.Model):
        def train_step(self, data, global_batch_size):
            self.trained = getattr(self, "trained", 0) + 1
            return super().train_step(data, global_batch_size)

        def test_step(self, data, global_batch_size):
            self.tested = getattr(self, "tested", 0) + 1
            return super().test_step(data, global_batch_size)

    x, y = _data(6)
    model = Counting(torch.nn.Linear(2, 1))
    model.compile(optimizer="sgd", loss="mse")
    rec = Recorder()
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, callbacks=[rec])
    model.evaluate(x, y, batch_size=3, verbose=0)
    assert isinstance(model, Trainer) and model.loop is model and rec.model is model
    assert (model.trained, model.tested) == (6, 2)
    assert "_loop" not in vars(model) and "owner" not in vars(model)


def test_the_trainer_runs_without_a_model():
    x, y = _data(6)
    torch.manual_seed(0)
    loop = Trainer(torch.nn.Linear(2, 1), distrib.get_strategy(), name="linear")
    loop.compile(optimizer="sgd", loss="mse")
    rec = Recorder(stop_at_train_batch=0)
    history = loop.fit(x, y, batch_size=2, epochs=3, verbose=0, callbacks=[rec])
    assert rec.model is loop and loop.stop_training and loop.history is history
    assert loop.train_loop_state.global_step == 1
    assert isinstance(loop.evaluate(x, y, batch_size=3, verbose=0), float)


def test_run_steps_without_a_step_count_stops_when_the_data_runs_out():
    class Hooks:
        def __init__(self):
            self.calls = []

        def on_train_batch_begin(self, i):
            self.calls.append(("begin", i))

        def on_train_batch_end(self, i, logs):
            self.calls.append(("end", i, logs))

    batches = iter(range(5))

    def execute(n, on_begin):   # what LocalExecutor does: the steps of one execution, here and now
        results = []
        for b in itertools.islice(batches, n):
            if not results:
                on_begin()
            results.append(b * 10)
        return Execution(steps=len(results), results=results)

    hooks, done = Hooks(), []
    result = run_steps(phase=TRAIN, callbacks=hooks, execute=execute, steps=None, log_every=4,
                       steps_per_execution=2, batch_logs=lambda results: {"sum": sum(results)},
                       after_execution=done.append)
    assert hooks.calls == [("begin", 0), ("end", 1, None), ("begin", 2), ("end", 3, {"sum": 50}),
                           ("begin", 4), ("end", 4, None)]
    assert done == [2, 4, 5] and result.step == 5 and result.exhausted and result.logs is None


def test_validation_split_holds_out_the_last_rows():
    x, y = _data(8)
    model = _model()
    history = model.fit(x, y, batch_size=2, epochs=1, verbose=0, validation_split=0.25)
    assert model.train_loop_state.global_step == 3  # 6 training rows in batches of 2
    expected = model.evaluate(x[6:], y[6:], batch_size=2, verbose=0)
    assert history.history["val_loss"] == [pytest.approx(expected)]


def test_bad_validation_split_and_steps_per_execution_are_named():
    x, y = _data(8)
    model = _model()
    with pytest.raises(ValueError, match=r"validation_split=\.\.\.\) must be a float in \[0, 1\)"):
        model.fit(x, y, validation_split=1.5, verbose=0)
    with pytest.raises(ValueError, match="validation_split=.*needs x as arrays.*validation_data"):
        model.fit(distrib.data.Dataset.from_tensor_slices((x, y)).batch(2), validation_split=0.5, verbose=0)
    with pytest.raises(ValueError, match="steps_per_execution=...\\) must be a positive int, got 0"):
        model.compile(loss="mse", steps_per_execution=0)
