"""OptimizerStateSync: the chief optimizer's state_dict joins the ps shards' slots; load cuts them again.

One process: the ps handlers run in place of the remote calls (a fake runtime),
on a variable of 5 rows split 3 + 2 over two "ps tasks".
"""
from __future__ import annotations

import pytest
import torch

from distrib.strategies.parameter_server import server as ps_server
from distrib.strategies.parameter_server.optimizer_state import OptimizerStateSync
from distrib.strategies.parameter_server.variables import Shard, VariableInfo

OPT = 90_001        # ids no other test uses (the handlers keep module-level tables)
VAR = 90_001


class _Done:
    def __init__(self, value):
        self.value = value


class _LocalRuntime:
    def call_async(self, task, fn, args=(), timeout=None):
        return _Done(fn(*args))

    def wait(self, task, future):
        return future.value


class _Registry:
    def __init__(self, infos):
        self.infos = infos

    def info(self, p):
        return self.infos.get(id(p))


@pytest.fixture
def setup():
    torch.manual_seed(0)
    chief = torch.nn.Parameter(torch.randn(5, 2))
    info = VariableInfo(VAR, (5, 2), torch.float32, True,
                        (Shard(0, (VAR, 0), 0, 3), Shard(1, (VAR, 1), 3, 5)))
    ps_server.create_variables([(VAR, 0), (VAR, 1)], [chief.detach()[:3], chief.detach()[3:]])
    groups = [{"lr": 0.1, "momentum": 0.9, "keys": [(VAR, 0), (VAR, 1)]}]
    ps_server.create_optimizer(OPT, ps_server.class_name(torch.optim.SGD), {"lr": 0.1, "momentum": 0.9}, groups)
    optimizer = torch.optim.SGD([chief], lr=0.1, momentum=0.9)
    OptimizerStateSync(_LocalRuntime(), _Registry({id(chief): info}), OPT, optimizer)
    yield chief, optimizer
    ps_server._OPTIMIZERS.pop(OPT, None)     # this "ps" forgets them again
    ps_server._VARIABLES.pop((VAR, 0), None)
    ps_server._VARIABLES.pop((VAR, 1), None)


def test_state_dict_joins_the_shards_and_matches_one_optimizer(setup):
    chief, optimizer = setup
    reference = torch.nn.Parameter(chief.detach().clone())
    one = torch.optim.SGD([reference], lr=0.1, momentum=0.9)
    for _ in range(2):
        grad = torch.randn(5, 2)
        ps_server.apply_gradients(OPT, [(VAR, 0), (VAR, 1)], [grad[:3], grad[3:]], {})
        reference.grad = grad
        one.step()
    state = optimizer.state_dict()["state"]
    assert list(state) == [0]
    torch.testing.assert_close(state[0]["momentum_buffer"], one.state[reference]["momentum_buffer"])
    assert len(optimizer.state) == 0                     # the chief keeps no copy


def test_load_state_dict_cuts_the_slots_back_onto_the_shards(setup):
    chief, optimizer = setup
    ps_server.apply_gradients(OPT, [(VAR, 0), (VAR, 1)], [torch.ones(3, 2), torch.ones(2, 2)], {})
    sd = optimizer.state_dict()
    sd["state"][0]["momentum_buffer"] = torch.arange(10.0).reshape(5, 2)
    optimizer.load_state_dict(sd)
    held = ps_server.read_optimizer_state(OPT)
    torch.testing.assert_close(held[(VAR, 0)]["momentum_buffer"], torch.arange(6.0).reshape(3, 2))
    torch.testing.assert_close(held[(VAR, 1)]["momentum_buffer"], torch.arange(6.0, 10.0).reshape(2, 2))
    assert len(optimizer.state) == 0
    torch.testing.assert_close(optimizer.state_dict()["state"][0]["momentum_buffer"], torch.arange(10.0).reshape(5, 2))


def test_writing_state_for_a_shard_the_optimizer_does_not_update_is_refused(setup):
    with pytest.raises(KeyError, match="does not update shard"):
        ps_server.write_optimizer_state(OPT, {(VAR + 1, 0): {"momentum_buffer": torch.zeros(1)}})


def _adam():
    from distrib import optimizers
    return optimizers.Adam(learning_rate=0.1, weight_decay=0.05, amsgrad=True), "velocity_hat"


def _scheduled_sgd():
    from distrib import optimizers
    schedule = optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    return optimizers.SGD(learning_rate=schedule, momentum=0.9), "momentum"


@pytest.mark.parametrize("make", [_adam, _scheduled_sgd])
def test_a_keras_rule_optimizer_on_two_ps_shards_matches_one_optimizer(make):
    """distrib's Keras-named optimizers travel to ps tasks as (class, defaults): the split update is Keras's,
    a learning-rate schedule included (the chief's per-step "lr" does not override it)."""
    opt_id, var = OPT + 1, VAR + 1
    torch.manual_seed(1)
    start = torch.randn(5, 2)
    reference = torch.nn.Parameter(start.clone())
    spec, slot = make()
    one = spec.build([reference])
    defaults = {k: v for k, v in one.defaults.items() if k != "params"}
    ps_server.create_variables([(var, 0), (var, 1)], [start[:3], start[3:]])
    groups = [{**defaults, "keys": [(var, 0), (var, 1)]}]
    ps_server.create_optimizer(opt_id, ps_server.class_name(type(one)), defaults, groups)
    try:
        for _ in range(3):
            grad = torch.randn(5, 2)
            ps_server.apply_gradients(opt_id, [(var, 0), (var, 1)], [grad[:3], grad[3:]], {0: {"lr": 0.1}})
            reference.grad = grad
            one.step()
        held = ps_server.read_variables([(var, 0), (var, 1)])
        torch.testing.assert_close(torch.cat(held), reference.detach(), rtol=0, atol=0)
        state = ps_server.read_optimizer_state(opt_id)
        torch.testing.assert_close(torch.cat([state[(var, 0)][slot], state[(var, 1)][slot]]),
                                   one.state[reference][slot])
    finally:
        ps_server._OPTIMIZERS.pop(opt_id, None)
        ps_server._VARIABLES.pop((var, 0), None)
        ps_server._VARIABLES.pop((var, 1), None)
