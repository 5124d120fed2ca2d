"""distrib's optimizers, schedules and loss scaling against TensorFlow 2.21 / Keras 3.15's stored outputs.

The reference is ``tests/data/tf_reference/keras_training.json``, written by
``tests/tf_reference/generate_keras_training.py`` from the inputs of
``tests/tf_reference/keras_training_scenarios.py`` (regenerate it with the
TensorFlow virtual environment after changing the scenarios).
"""
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from distrib import optimizers
from distrib.mixed_precision import LossScaleOptimizer
from distrib.optimizers import schedules

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tf_reference"))
import keras_training_scenarios as sc  # noqa: E402

REFERENCE = json.loads((Path(__file__).resolve().parents[1] / "data" / "tf_reference"
                        / "keras_training.json").read_text())
RTOL, ATOL = 1e-5, 1e-7


def _run(opt, change_lr):
    params = [torch.nn.Parameter(torch.from_numpy(w.copy())) for w in sc.initial_weights()]
    torch_opt = opt.build(params)
    steps = []
    for index, grads in enumerate(sc.gradients()):
        for p, g in zip(params, grads):
            p.grad = torch.from_numpy(g.copy())
        torch_opt.step()
        steps.append([p.detach().clone() for p in params])
        if change_lr and index + 1 == sc.LR_CHANGE_AT:
            opt.learning_rate = float(np.float32(opt.learning_rate)) * sc.LR_CHANGE_FACTOR
    return params, steps


def _assert_steps(got, expected, label):
    for step, (mine, theirs) in enumerate(zip(got, expected)):
        for index, (p, ref) in enumerate(zip(mine, theirs)):
            np.testing.assert_allclose(p.numpy(), np.array(ref, dtype=np.float32), rtol=RTOL, atol=ATOL,
                                       err_msg=f"{label}: step {step + 1}, variable {index}")


@pytest.mark.parametrize("case_id, name, kwargs", sc.OPTIMIZER_CASES, ids=[c[0] for c in sc.OPTIMIZER_CASES])
def test_optimizer_trajectory_matches_keras(case_id, name, kwargs):
    expected = REFERENCE["optimizers"][case_id]
    opt = getattr(optimizers, name)(**kwargs)
    params, steps = _run(opt, change_lr=True)
    _assert_steps(steps, expected["steps"], case_id)
    assert opt.iterations == expected["iterations"]
    if "finalized" in expected:
        opt.finalize_variable_values()
        _assert_steps([[p.detach() for p in params]], [expected["finalized"]], f"{case_id} finalized")


def test_scheduled_optimizer_matches_keras():
    name, kwargs, schedule, schedule_kwargs = sc.SCHEDULED_OPTIMIZER
    opt = getattr(optimizers, name)(learning_rate=getattr(schedules, schedule)(**schedule_kwargs), **kwargs)
    _, steps = _run(opt, change_lr=False)
    _assert_steps(steps, REFERENCE["scheduled_optimizer"]["steps"], "scheduled")
    assert opt.iterations == REFERENCE["scheduled_optimizer"]["iterations"]


@pytest.mark.parametrize("case_id, name, kwargs", sc.SCHEDULE_CASES, ids=[c[0] for c in sc.SCHEDULE_CASES])
def test_schedule_values_match_keras(case_id, name, kwargs):
    schedule = getattr(schedules, name)(**kwargs)
    got = [schedule(step) for step in sc.SCHEDULE_STEPS]
    np.testing.assert_allclose(got, REFERENCE["schedules"][case_id], rtol=RTOL, atol=1e-9, err_msg=case_id)
    again = schedules.deserialize(schedules.serialize(schedule))
    assert [again(s) for s in sc.SCHEDULE_STEPS] == got


def test_keras_rules_differ_from_torch_where_the_issue_says():
    """The cases the issue names: RMSprop's epsilon and SGD's velocity after a rate change."""
    def final(make):
        p = torch.nn.Parameter(torch.zeros(1))
        opt = make([p])
        for step in range(4):
            p.grad = torch.full((1,), 1e-5)
            opt.step()
            if step == 1:
                for group in opt.param_groups:
                    group["lr"] *= 0.1
        return float(p.detach())
    keras_rms = final(lambda ps: optimizers.RMSprop().build(ps))
    torch_rms = final(lambda ps: torch.optim.RMSprop(ps, lr=0.001, alpha=0.9, eps=1e-7))
    assert abs(torch_rms) > 50 * abs(keras_rms)          # torch's sqrt(v) + eps steps ~100x further
    keras_sgd = final(lambda ps: optimizers.SGD(learning_rate=0.1, momentum=0.9).build(ps))
    torch_sgd = final(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9))
    assert keras_sgd < 1.5 * torch_sgd < 0                # torch rescales the whole velocity by the new rate


def test_loss_scale_trajectory_matches_keras():
    expected = REFERENCE["loss_scale"]
    param = torch.nn.Parameter(torch.from_numpy(sc.initial_weights()[0].copy()))
    opt = LossScaleOptimizer(optimizers.SGD(learning_rate=0.1), initial_scale=sc.LOSS_SCALE_INITIAL,
                             dynamic_growth_steps=sc.LOSS_SCALE_GROWTH_STEPS)
    opt.build([param])
    for step, g in enumerate(sc.loss_scale_grads()):
        param.grad = torch.from_numpy(g.copy())
        opt.step()
        assert float(opt.dynamic_scale) == expected["scale"][step], f"scale after step {step + 1}"
        assert opt.iterations == expected["iterations"][step], f"iterations after step {step + 1}"
        np.testing.assert_allclose(param.detach().numpy(), np.array(expected["weights"][step], dtype=np.float32),
                                   rtol=RTOL, atol=ATOL, err_msg=f"weights after step {step + 1}")
        assert float(opt.scale_loss(torch.tensor(1.5))) == expected["scaled_loss"][step]
    assert min(expected["scale"]) < 1.0                   # the scale keeps halving below 1, as in Keras


class _Dense(torch.nn.Module):
    """Keras's Dense(3) on 2 inputs: a (2, 3) kernel and a (3,) bias, in Keras's weight order."""

    def __init__(self):
        super().__init__()
        self.kernel = torch.nn.Parameter(torch.zeros(2, 3))
        self.bias = torch.nn.Parameter(torch.zeros(3))

    def forward(self, x):
        return x @ self.kernel + self.bias


@pytest.mark.parametrize("case_id, name, kwargs, logged", sc.CALLBACK_CASES, ids=[c[0] for c in sc.CALLBACK_CASES])
def test_callback_decisions_match_keras(case_id, name, kwargs, logged, tmp_path):
    import warnings

    import distrib

    expected = REFERENCE["callbacks"][case_id]
    model = distrib.Model(_Dense())
    model.compile(optimizer=optimizers.SGD(learning_rate=sc.CALLBACK_LR), loss="mse")
    kw = dict(kwargs)
    if name == "ModelCheckpoint":
        kw.update(filepath=str(tmp_path / "ckpt_{epoch}"), save_weights_only=True)
    cb = getattr(distrib.callbacks, name)(**kw)
    cb.set_model(model)
    model.stop_training = False
    cb.on_train_begin()
    got = []
    for epoch in range(len(next(iter(logged.values())))):
        model.set_weights(sc.epoch_weights(epoch))
        logs = {k: float(v[epoch]) for k, v in logged.items()}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cb.on_epoch_end(epoch, logs)
        got.append({"stop": bool(model.stop_training), "warned": any("available" in str(w.message) for w in caught),
                    "saved": name == "ModelCheckpoint" and (tmp_path / f"ckpt_{epoch + 1}").exists(),
                    "learning_rate": float(np.float32(model.optimizer.learning_rate))})
        if model.stop_training:
            break
    cb.on_train_end()
    assert [(e["stop"], e["saved"], e["warned"]) for e in got] == \
        [(e["stop"], e["saved"], e["warned"]) for e in expected["epochs"]]
    np.testing.assert_allclose([e["learning_rate"] for e in got], [e["learning_rate"] for e in expected["epochs"]],
                               rtol=RTOL)
    assert float(model.get_weights()[0][0, 0]) == expected["final_weight"]


def test_policies_have_keras_dtypes():
    from distrib.mixed_precision import Policy

    for name, dtypes in REFERENCE["policies"].items():
        policy = Policy(name)
        assert (policy.compute_dtype, policy.variable_dtype) == (dtypes["compute_dtype"], dtypes["variable_dtype"])


def test_tiny_fit_with_momentum_reduce_lr_and_early_stopping_matches_keras():
    """A real fit: the velocity rule, ReduceLROnPlateau's rate changes and EarlyStopping's restore, end to end."""
    import distrib

    expected = REFERENCE["tiny_fit"]
    x, y, kernel, bias = sc.fit_data()
    model = distrib.Model(_Dense())
    model.set_weights([kernel, bias])
    model.compile(optimizer=optimizers.SGD(**sc.FIT_OPTIMIZER), loss="mse")
    history = model.fit(x, y, batch_size=sc.FIT_BATCH, epochs=sc.FIT_EPOCHS, shuffle=False, verbose=0,
                        callbacks=[distrib.callbacks.ReduceLROnPlateau(**sc.FIT_REDUCE_LR),
                                   distrib.callbacks.EarlyStopping(**sc.FIT_EARLY_STOP)])
    np.testing.assert_allclose(history.history["loss"], expected["loss"], rtol=RTOL)
    np.testing.assert_allclose(history.history["learning_rate"], expected["learning_rate"], rtol=RTOL)
    for mine, theirs in zip(model.get_weights(), expected["weights"]):
        np.testing.assert_allclose(mine, np.array(theirs, dtype=np.float32), rtol=RTOL, atol=1e-6)
