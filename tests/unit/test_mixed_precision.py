"""Mixed precision in one process: policies, autocast inside fit/evaluate/predict, loss scaling."""
import numpy as np
import pytest
import torch

import distrib
from distrib.mixed_precision import LossScaleOptimizer, Policy, PolicyError, global_policy, set_global_policy

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(autouse=True)
def _reset_policy():
    yield
    set_global_policy("float32")


def test_policies_name_their_dtypes():
    assert global_policy() == Policy("float32")
    for name, compute in (("float32", "float32"), ("mixed_bfloat16", "bfloat16"), ("mixed_float16", "float16")):
        set_global_policy(name)
        p = global_policy()
        assert (p.name, p.compute_dtype, p.variable_dtype) == (name, compute, "float32")
    set_global_policy(None)
    assert global_policy().name == "float32"


def test_unknown_policy_names_the_valid_ones():
    with pytest.raises(PolicyError, match="unknown policy 'mixed_half'.*'mixed_bfloat16'"):
        Policy("mixed_half")


def _cpu_autocast():
    """Whether autocast is on for the CPU, and its dtype (torch 2.4 took a device; torch 2.3 has per-device names)."""
    if torch.__version__ >= "2.4":
        return torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
    return torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()


class Recorder(torch.nn.Module):
    """A small MLP that records, on every forward, autocast's state and the dtypes it sees."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        self.seen = []

    def forward(self, x):
        out = self.net(x)
        self.seen.append((*_cpu_autocast(), out.dtype))
        return out


def _data(n=64):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0).astype(np.int64)
    return x, y


def _compiled(loss_dtypes):
    xent = distrib.losses.SparseCategoricalCrossentropy(from_logits=True)

    def loss(y_true, y_pred):
        value = xent(y_true, y_pred)
        loss_dtypes.append((y_pred.dtype, value.dtype))
        return value

    model = distrib.Model(Recorder())
    model.compile(optimizer=distrib.optimizers.SGD(learning_rate=0.2), loss=loss, metrics=["sparse_categorical_accuracy"])
    return model


def test_fit_under_mixed_bfloat16_autocasts_the_forward_and_keeps_float32_weights_and_loss():
    set_global_policy("mixed_bfloat16")
    loss_dtypes = []
    model = _compiled(loss_dtypes)
    x, y = _data()
    history = model.fit(x, y, batch_size=16, epochs=4, verbose=0)
    assert model.module.seen and all(s == (True, torch.bfloat16, torch.bfloat16) for s in model.module.seen)
    assert all(p.dtype == torch.float32 for p in model.module.parameters())
    assert loss_dtypes and all(d == (torch.float32, torch.float32) for d in loss_dtypes)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert model.loss_scale_optimizer is None  # bfloat16 needs no loss scaling
    assert model.predict(x[:5], verbose=0).dtype == np.float32


def test_float32_policy_runs_without_autocast():
    model = _compiled([])
    x, y = _data(16)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert model.module.seen == [(False, _cpu_autocast()[1], torch.float32)]


def _one_param_optimizer(scale, growth):
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    return w, LossScaleOptimizer(torch.optim.SGD([w], lr=0.5), initial_scale=scale, dynamic_growth_steps=growth)


def _step(w, opt, factor=1.0):
    loss = (w * torch.tensor([3.0, 4.0])).sum() * factor
    opt.scale(loss).backward()
    stepped = opt.step()
    opt.zero_grad()
    return stepped


def test_overflow_skips_the_step_and_halves_the_scale():
    w, opt = _one_param_optimizer(scale=64.0, growth=100)
    before = w.detach().clone()
    assert _step(w, opt, factor=float("inf")) is False
    assert torch.equal(w.detach(), before) and opt.loss_scale == 32.0 and opt.skipped_steps == 1
    assert _step(w, opt) is True
    # the gradient was unscaled: one plain SGD step with grad (3, 4)
    assert torch.allclose(w.detach(), before - 0.5 * torch.tensor([3.0, 4.0]))


def test_scale_doubles_after_dynamic_growth_steps_good_steps():
    w, opt = _one_param_optimizer(scale=8.0, growth=3)
    scales = []
    for _ in range(7):
        _step(w, opt)
        scales.append(opt.loss_scale)
    assert scales == [8.0, 8.0, 16.0, 16.0, 16.0, 32.0, 32.0]


def test_fixed_scale_never_changes_and_tf_style_methods_unscale():
    w = torch.nn.Parameter(torch.ones(2))
    opt = LossScaleOptimizer(torch.optim.SGD([w], lr=1.0), dynamic=False, initial_scale=4.0)
    scaled = opt.get_scaled_loss(w.sum())
    grads = torch.autograd.grad(scaled, [w])
    assert torch.equal(opt.get_unscaled_gradients(grads)[0], torch.ones(2))
    assert opt.apply_gradients([(grads[0], w)]) is True and torch.equal(w.detach(), torch.zeros(2))
    assert opt.loss_scale == 4.0


def test_state_dict_round_trip_keeps_the_schedule():
    w, opt = _one_param_optimizer(scale=64.0, growth=5)
    _step(w, opt, factor=float("nan"))
    _step(w, opt)
    w2, opt2 = _one_param_optimizer(scale=1.0, growth=5)
    opt2.load_state_dict(opt.state_dict())
    assert (opt2.loss_scale, opt2.dynamic_counter, opt2.skipped_steps) == (32.0, 1, 1)
    with pytest.raises(ValueError, match="not a LossScaleOptimizer state"):
        opt2.load_state_dict({"state": {}})


def test_bad_arguments_are_named():
    w = torch.nn.Parameter(torch.ones(1))
    with pytest.raises(ValueError, match="initial_scale"):
        LossScaleOptimizer(torch.optim.SGD([w], lr=1.0), initial_scale=0)
    with pytest.raises(ValueError, match="dynamic_growth_steps"):
        LossScaleOptimizer(torch.optim.SGD([w], lr=1.0), dynamic_growth_steps=0)
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        LossScaleOptimizer("sgd")


def test_fit_under_mixed_float16_uses_dynamic_loss_scaling():
    set_global_policy("mixed_float16")
    model = _compiled([])
    x, y = _data()
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0)
    scaler = model.loss_scale_optimizer
    assert isinstance(scaler, LossScaleOptimizer) and scaler.torch_optimizer is model.torch_optimizer
    assert model.optimizer is scaler and isinstance(scaler.inner_optimizer, distrib.optimizers.SGD)  # as Keras
    assert all(s[:2] == (True, torch.float16) for s in model.module.seen)
    assert all(p.dtype == torch.float32 for p in model.module.parameters())
    assert np.isfinite(history.history["loss"]).all()


@pytest.mark.cuda
@needs_cuda
def test_fit_under_mixed_float16_on_cuda_runs_the_forward_in_float16():
    set_global_policy("mixed_float16")
    seen = []

    class Probe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 3)

        def forward(self, x):
            out = self.lin(x)
            seen.append(out.dtype)
            return out

    strategy = distrib.OneDeviceStrategy("cuda:0")
    with strategy.scope():
        model = distrib.Model(Probe())
        model.compile(optimizer="sgd", loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = _data()
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    assert seen and all(d == torch.float16 for d in seen)
    assert next(model.module.parameters()).dtype == torch.float32
    assert np.isfinite(history.history["loss"]).all()
    assert model.loss_scale_optimizer.loss_scale > 0
