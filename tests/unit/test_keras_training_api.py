"""LambdaCallback, EMA at the end of fit, plain dtype policies and LossScaleOptimizer's Keras surface."""
import numpy as np
import pytest
import torch

import distrib
from distrib.mixed_precision import LossScaleOptimizer, set_global_policy


@pytest.fixture(autouse=True)
def _float32_policy():
    yield
    set_global_policy(None)


def _data(n=32):
    rng = np.random.RandomState(0)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    return x, (x @ np.array([1.0, -2.0, 0.5], dtype=np.float32))[:, None]


def _model(optimizer):
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Linear(3, 1))
    model.compile(optimizer=optimizer, loss="mse")
    return model


def test_lambda_callback_hooks_run_with_keras_arguments():
    seen = []
    cb = distrib.callbacks.LambdaCallback(
        on_train_begin=lambda logs: seen.append("begin"),
        on_epoch_end=lambda epoch, logs: seen.append((epoch, round(logs["loss"], 6) >= 0)),
        on_train_batch_end=lambda batch, logs: seen.append("batch"),
        on_train_end=lambda logs: seen.append("end"))
    x, y = _data()
    _model("sgd").fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb])
    assert seen == ["begin", "batch", "batch", (0, True), "batch", "batch", (1, True), "end"]
    with pytest.raises(TypeError, match="'on_epoch_finish' is not a callback hook"):
        distrib.callbacks.LambdaCallback(on_epoch_finish=print)
    with pytest.raises(TypeError, match="on_epoch_end must be a function"):
        distrib.callbacks.LambdaCallback(on_epoch_end=3)


def test_fit_with_use_ema_ends_on_the_moving_average():
    x, y = _data()
    model = _model(distrib.optimizers.SGD(learning_rate=0.05, use_ema=True, ema_momentum=0.5))
    averages = []
    cb = distrib.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: averages.append(
        [model.torch_optimizer.state[p]["average"].clone() for p in model.module.parameters()]))
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb])
    for p, average in zip(model.module.parameters(), averages[-1]):
        assert torch.equal(p.detach(), average)
    assert not torch.equal(averages[-1][0], averages[-2][0])


def test_float64_policy_makes_float64_variables_at_compile():
    set_global_policy("float64")
    x, y = _data()
    model = _model("adam")
    assert all(p.dtype == torch.float64 for p in model.module.parameters())
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert model.loss_scale_optimizer is None and not isinstance(model.optimizer, LossScaleOptimizer)


def test_mixed_float16_compile_makes_model_optimizer_a_loss_scale_optimizer_with_keras_names():
    set_global_policy("mixed_float16")
    inner = distrib.optimizers.Adam(learning_rate=0.01)
    model = _model(inner)
    opt = model.optimizer
    assert isinstance(opt, LossScaleOptimizer) and opt.inner_optimizer is inner
    assert (opt.initial_scale, opt.dynamic_growth_steps, float(opt.dynamic_scale)) == (2.0 ** 15, 2000, 2.0 ** 15)
    x, y = _data()
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert opt.iterations == inner.iterations == 2 - opt.skipped_steps  # skipped steps do not count
    opt.learning_rate = 0.001
    assert inner.learning_rate == pytest.approx(0.001) and opt.learning_rate == pytest.approx(0.001)
    assert float(opt.scale_loss(torch.tensor(2.0))) == 2.0 * float(opt.dynamic_scale)


def test_a_user_loss_scale_optimizer_is_compiled_as_given_and_round_trips_its_config():
    lso = LossScaleOptimizer(distrib.optimizers.SGD(learning_rate=0.1, momentum=0.9), initial_scale=8.0,
                             dynamic_growth_steps=3)
    model = _model(lso)
    assert model.optimizer is lso and lso.built and model.torch_optimizer is lso.torch_optimizer
    again = LossScaleOptimizer(**{k: v for k, v in lso.get_config().items()})
    assert type(again.inner_optimizer) is distrib.optimizers.SGD and again.inner_optimizer.momentum == 0.9
    assert again.initial_scale == 8.0 and again.dynamic_growth_steps == 3
    with pytest.raises(ValueError, match="does not support clipnorm"):
        LossScaleOptimizer(distrib.optimizers.SGD(), clipnorm=1.0)
