"""distrib.optimizers: Keras defaults reach torch, learning-rate changes reach torch, Keras updates."""
import json

import pytest
import torch

from distrib import optimizers


def linear():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2)


@pytest.mark.parametrize("name, torch_cls, expected", [
    ("sgd", optimizers.KerasSGD, {"lr": 0.01, "momentum": 0.0, "nesterov": False, "weight_decay": None}),
    ("adam", optimizers.KerasAdam, {"lr": 0.001, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7,
                                    "amsgrad": False, "weight_decay": None}),
    ("adamw", optimizers.KerasAdam, {"lr": 0.001, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7,
                                     "weight_decay": 0.004}),
    ("rmsprop", optimizers.KerasRMSprop, {"lr": 0.001, "rho": 0.9, "epsilon": 1e-7, "momentum": 0.0,
                                          "centered": False}),
    ("adagrad", optimizers.KerasAdagrad, {"lr": 0.001, "initial_accumulator_value": 0.1, "epsilon": 1e-7}),
    ("nadam", optimizers.KerasNadam, {"lr": 0.001, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}),
    ("adamax", optimizers.KerasAdamax, {"lr": 0.001, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}),
    ("lion", optimizers.KerasLion, {"lr": 0.001, "beta_1": 0.9, "beta_2": 0.99}),
    ("adadelta", optimizers.KerasAdadelta, {"lr": 0.001, "rho": 0.95, "epsilon": 1e-7}),
    ("ftrl", optimizers.KerasFtrl, {"lr": 0.001, "learning_rate_power": -0.5, "initial_accumulator_value": 0.1}),
])
def test_keras_defaults_land_in_torch_param_groups(name, torch_cls, expected):
    opt = optimizers.get(name)
    torch_opt = opt.build(linear().parameters())
    assert type(torch_opt) is torch_cls and opt.torch_optimizer is torch_opt
    assert isinstance(torch_opt, torch.optim.Optimizer)
    group = torch_opt.param_groups[0]
    for key, value in expected.items():
        assert group[key] == pytest.approx(value), key


def test_torch_optimizer_rebuilds_from_its_class_and_defaults_like_a_ps_task():
    """A ps task rebuilds an optimizer as ``cls(groups, **defaults)``: the Keras rule must survive that."""
    torch_opt = optimizers.RMSprop(learning_rate=0.01, rho=0.8, momentum=0.5, epsilon=1e-6,
                                   centered=True, clipnorm=1.0).build(linear().parameters())
    defaults = {k: v for k, v in torch_opt.defaults.items() if k != "params"}
    twin_param = torch.nn.Parameter(linear().weight.detach().clone())
    twin = type(torch_opt)([twin_param], **defaults)
    assert twin.param_groups[0]["centered"] is True and twin.param_groups[0]["clipnorm"] == 1.0
    first = torch_opt.param_groups[0]["params"][0]
    for g in (torch.full((2, 3), 0.5), torch.full((2, 3), -2.0)):
        first.grad, twin_param.grad = g.clone(), g.clone()
        torch_opt.step()
        twin.step()
    assert torch.equal(first.detach(), twin_param.detach())
    assert sorted(torch_opt.state[first]) == ["average_gradient", "momentum", "step", "velocity"]


def test_state_dict_round_trip_resumes_the_same_trajectory():
    def run(steps, state=None):
        p = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
        opt = optimizers.Nadam(learning_rate=0.1).build([p])
        if state is not None:
            p.data.copy_(state[0])
            opt.load_state_dict(state[1])
        for g in steps:
            p.grad = torch.tensor(g)
            opt.step()
        return p, opt
    grads = [[0.3, -0.1], [0.2, 0.4], [-1.0, 0.01], [0.5, 0.5]]
    straight, _ = run(grads)
    half, opt = run(grads[:2])
    resumed, _ = run(grads[2:], (half.detach().clone(), opt.state_dict()))
    assert torch.equal(straight.detach(), resumed.detach())


def test_learning_rate_changes_reach_every_param_group():
    model = linear()
    opt = optimizers.SGD(learning_rate=0.1)
    assert opt.learning_rate == 0.1
    opt.learning_rate = 0.2          # before build: used by build
    torch_opt = opt.build([{"params": [model.weight]}, {"params": [model.bias]}])
    assert [g["lr"] for g in torch_opt.param_groups] == [0.2, 0.2]
    opt.learning_rate = 0.05
    assert [g["lr"] for g in torch_opt.param_groups] == [0.05, 0.05]
    torch_opt.param_groups[0]["lr"] = 0.01   # torch is the source of truth once built
    assert opt.learning_rate == 0.01 and opt.lr == 0.01


def test_learning_rate_helpers_work_on_raw_torch_optimizers():
    model = linear()
    raw = torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias], "lr": 0.3}], lr=0.1)
    assert optimizers.get_learning_rate(raw) == 0.1
    optimizers.set_learning_rate(raw, 0.02)
    assert [g["lr"] for g in raw.param_groups] == [0.02, 0.02]
    wrapped = optimizers.Adam()
    wrapped.build(model.parameters())
    optimizers.set_learning_rate(wrapped, 0.5)
    assert wrapped.torch_optimizer.param_groups[0]["lr"] == 0.5 == optimizers.get_learning_rate(wrapped)
    with pytest.raises(ValueError, match="no optimizer"):
        optimizers.get_learning_rate(None)


def keras_sgd_momentum(w, grads, lr, momentum, nesterov=False, wd=None):
    """Keras 3's SGD update, written out."""
    m = torch.zeros_like(w)
    for g in grads:
        if wd:
            w = w - w * wd * lr
        m = momentum * m - lr * g
        w = w + (momentum * m - lr * g if nesterov else m)
    return w


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("wd", [None, 0.1])
def test_sgd_momentum_and_decoupled_decay_match_keras(nesterov, wd):
    w0 = torch.tensor([1.0, -2.0, 3.0])
    grads = [torch.tensor([0.5, 0.1, -0.3]), torch.tensor([0.2, -0.4, 0.1]), torch.tensor([-0.1, 0.3, 0.2])]
    param = torch.nn.Parameter(w0.clone())
    opt = optimizers.SGD(learning_rate=0.1, momentum=0.9, nesterov=nesterov, weight_decay=wd)
    opt.build([param])
    for g in grads:
        param.grad = g.clone()
        opt.step()
    assert torch.allclose(param.detach(), keras_sgd_momentum(w0, grads, 0.1, 0.9, nesterov, wd), atol=1e-6)


@pytest.mark.parametrize("kwargs, expected", [
    ({"clipvalue": 0.5}, [1.0 - 0.5, 1.0 + 0.2]),
    ({"clipnorm": 1.0}, [1.0 - 0.6, 1.0 + 0.8]),           # grad [3, -4] has norm 5
    ({"global_clipnorm": 1.0}, [1.0 - 0.6, 1.0 + 0.8]),
])
def test_gradient_clipping(kwargs, expected):
    param = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
    opt = optimizers.SGD(learning_rate=1.0, **kwargs)
    opt.build([param])
    param.grad = torch.tensor([3.0, -4.0]) if "clipvalue" not in kwargs else torch.tensor([3.0, -0.2])
    opt.step()
    assert torch.allclose(param.detach(), torch.tensor(expected), atol=1e-6)


def test_global_clipnorm_spans_all_tensors():
    a, b = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    opt = optimizers.SGD(learning_rate=1.0, global_clipnorm=1.0)
    opt.build([a, b])
    a.grad, b.grad = torch.tensor([3.0]), torch.tensor([4.0])
    opt.step()
    assert float(a.detach()) == pytest.approx(-0.6) and float(b.detach()) == pytest.approx(-0.8)


def test_adam_with_weight_decay_equals_torch_adamw():
    p1, p2 = torch.nn.Parameter(torch.tensor([1.0, -1.0])), torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    ours = optimizers.Adam(learning_rate=0.1, weight_decay=0.2)
    ours.build([p1])
    ref = torch.optim.AdamW([p2], lr=0.1, weight_decay=0.2, eps=1e-7)
    for g in ([0.3, -0.1], [0.2, 0.4]):
        p1.grad, p2.grad = torch.tensor(g), torch.tensor(g)
        ours.step()
        ref.step()
    assert torch.allclose(p1.detach(), p2.detach(), atol=1e-6)


def test_bad_arguments_are_one_clear_line():
    with pytest.raises(ValueError, match="only one of clipnorm, clipvalue and global_clipnorm"):
        optimizers.SGD(clipnorm=1.0, clipvalue=1.0)
    with pytest.raises(ValueError, match="learning_rate must be a number >= 0"):
        optimizers.Adam(learning_rate=-1)
    with pytest.raises(ValueError, match="gradient_accumulation_steps is not supported"):
        optimizers.SGD(gradient_accumulation_steps=4)
    with pytest.raises(ValueError, match="Lion: beta_1 must be in"):
        optimizers.Lion(beta_1=0.0)
    with pytest.raises(TypeError, match="LearningRateScheduler"):
        optimizers.SGD(learning_rate=lambda step: 0.1)
    with pytest.raises(ValueError, match="unknown optimizer 'lamb'"):
        optimizers.get("lamb")


def test_build_rules():
    model, other = linear(), torch.nn.Linear(2, 2)
    opt = optimizers.SGD()
    with pytest.raises(RuntimeError, match="not built yet"):
        opt.step()
    with pytest.raises(ValueError, match="got no parameters"):
        opt.build([])
    first = opt.build(model.parameters())
    assert opt.build(model.parameters()) is first
    with pytest.raises(ValueError, match="already built for other parameters"):
        opt.build(other.parameters())


def test_wrapper_behaves_like_the_torch_optimizer():
    model = linear()
    opt = optimizers.SGD(learning_rate=0.5)
    opt.build(model.parameters())
    before = model.weight.detach().clone()
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    assert torch.allclose(model.weight.detach(), before - 0.5 * torch.ones(2, 3))
    opt.zero_grad()
    assert model.weight.grad is None
    assert opt.param_groups is opt.torch_optimizer.param_groups
    assert opt.state_dict()["param_groups"][0]["lr"] == 0.5


def test_apply_gradients_builds_lazily_like_keras_custom_loops():
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    opt = optimizers.SGD(learning_rate=0.1)
    opt.apply_gradients(zip([torch.tensor([1.0, -1.0])], [w]))
    assert opt.built and torch.allclose(w.detach(), torch.tensor([0.9, 2.1]))


def test_get_passes_torch_optimizers_through_and_serialises_built_ins():
    raw = torch.optim.SGD(linear().parameters(), lr=0.1)
    assert optimizers.get(raw) is raw
    opt = optimizers.RMSprop(learning_rate=0.01, momentum=0.5, clipnorm=2.0)
    opt.build(linear().parameters())
    opt.learning_rate = 0.003
    config = json.loads(json.dumps(optimizers.serialize(opt)))
    restored = optimizers.deserialize(config)
    assert type(restored) is optimizers.RMSprop and not restored.built
    assert restored.get_config() == opt.get_config() and restored.learning_rate == 0.003
    with pytest.raises(ValueError, match="cannot deserialise optimizer class"):
        optimizers.deserialize({"class_name": "builtins.eval", "config": {}})


def test_state_of_another_optimizer_class_is_one_clear_error():
    p = torch.nn.Parameter(torch.ones(2))
    torch_sgd = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = torch.ones(2)
    torch_sgd.step()
    opt = optimizers.SGD(learning_rate=0.1, momentum=0.9).build([p])
    opt.load_state_dict(torch_sgd.state_dict())
    with pytest.raises(ValueError, match=r"KerasSGD: the loaded optimizer state has slots \['momentum_buffer'\]"):
        opt.step()
