"""Global-batch dropout: each mask element is a function of the example's global row, not of its replica."""
import gc
import os

import pytest
import torch
import torch.utils.checkpoint

from distrib.data.distribution import batch_position
from distrib.data.distribution.batch_position import RowPosition
from distrib.data.batch_split import split_bounds
from distrib.strategies.layer_patches import global_dropout
from distrib.strategies.layer_patches.global_dropout import keyed_keep_mask, use_global_batch_dropout, uses_global_batch_dropout


class _FakeStrategy:
    def __init__(self, replicas=3, replica_id=0):
        self.num_replicas_in_sync, self.replica_id = replicas, replica_id

    @property
    def multi_replica(self):
        return self.num_replicas_in_sync > 1


def _patched(module, strategy):
    assert use_global_batch_dropout(module, lambda: strategy)
    return module


def _as_replicas(rows, parts, seed):
    """``(replica, lo, hi)`` for each of ``parts`` replicas of a ``rows``-row batch, in that replica's state.

    Each replica is its own process: its generator seeded as the others', no
    remembered places, its rows noted as the distributed dataset notes them.
    """
    for r in range(parts):
        lo, hi = split_bounds(rows, parts, r)
        torch.manual_seed(seed)
        global_dropout._placed.clear()
        batch_position.set_current(RowPosition(lo, hi - lo))
        yield r, lo, hi
    batch_position.set_current(None)


@pytest.mark.parametrize("parts", [1, 2, 3, 5])
def test_a_global_batch_split_any_way_gets_the_mask_of_the_whole_batch(parts):
    whole = keyed_keep_mask((11, 7), 0, 0.4, (123, 456))
    pieces = []
    for r in range(parts):
        lo, hi = split_bounds(11, parts, r)
        pieces.append(keyed_keep_mask((hi - lo, 7), lo, 0.4, (123, 456)))
    assert torch.equal(torch.cat(pieces), whole)


def test_element_indices_beyond_32_bits_still_split_alike():
    first = 2 ** 29 - 3  # rows of 8 elements: the indices cross 2**32 between the two halves
    whole = keyed_keep_mask((6, 8), first, 0.5, (5, 6))
    assert torch.equal(torch.cat([keyed_keep_mask((3, 8), first, 0.5, (5, 6)),
                                  keyed_keep_mask((3, 8), first + 3, 0.5, (5, 6))]), whole)
    assert 0.3 < whole.double().mean().item() < 0.7


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_elements_are_kept_with_probability_one_minus_p(p):
    n = 400_000
    kept = keyed_keep_mask((n // 100, 100), 0, p, (99, 7)).double().mean().item()
    sigma = ((1 - p) * p / n) ** 0.5
    assert abs(kept - (1 - p)) < 5 * sigma


def test_rows_keys_and_replicas_get_independent_masks():
    m = keyed_keep_mask((64, 256), 0, 0.5, (1, 2))
    same_rows = (m[:-1] == m[1:]).double().mean().item()
    assert 0.45 < same_rows < 0.55, "neighbouring rows share their masks"
    other_key = keyed_keep_mask((64, 256), 0, 0.5, (1, 3))
    assert 0.45 < (m == other_key).double().mean().item() < 0.55
    salted = [keyed_keep_mask((64, 256), 0, 0.5, (1, 2), salt=r + 1) for r in range(2)]
    assert 0.45 < (salted[0] == salted[1]).double().mean().item() < 0.55


def test_a_replica_drops_its_rows_as_the_whole_batch_would_and_the_gradient_follows_the_mask():
    x_global = torch.randn(9, 5)
    outs = {}
    for parts in (1, 3):
        pieces = []
        for r, lo, hi in _as_replicas(9, parts, seed=3):
            layer = _patched(torch.nn.Dropout(0.5), _FakeStrategy(max(parts, 2), r))
            x = x_global[lo:hi].clone().requires_grad_(True)
            y = layer(x)
            y.sum().backward()
            kept = y.detach() != 0
            assert torch.allclose(y.detach()[kept], 2 * x.detach()[kept])
            assert torch.equal(x.grad, kept.float() * 2)
            pieces.append(y.detach())
        outs[parts] = torch.cat(pieces)
    assert torch.equal(outs[1], outs[3])


def test_channel_dropout_drops_whole_channels_of_the_global_rows():
    layer = _patched(torch.nn.Dropout2d(0.5), _FakeStrategy())
    x = torch.ones(4, 6, 3, 3)
    batch_position.set_current(RowPosition(2, 4))
    y = layer(x)
    per_channel = y.reshape(4, 6, 9)
    assert torch.equal(per_channel.min(-1).values, per_channel.max(-1).values)
    expected = keyed_keep_mask((6, 6, 1, 1), 0, 0.5, (0, 0))  # shape check only: keys differ
    assert expected.shape[:2] == (6, 6)


def test_an_unknown_position_gives_each_replica_its_own_masks():
    batch_position.set_current(None)
    x = torch.ones(8, 64)
    ys = []
    for r in range(2):
        torch.manual_seed(0)
        global_dropout._placed.clear()
        ys.append(_patched(torch.nn.Dropout(0.5), _FakeStrategy(2, r))(x))
    assert 0.4 < (ys[0] == ys[1]).double().mean().item() < 0.6


def test_evaluation_a_zero_rate_and_one_replica_use_torchs_own_path():
    x = torch.randn(4, 3)
    layer = _patched(torch.nn.Dropout(0.5), _FakeStrategy())
    assert torch.equal(layer.eval()(x), x)
    assert torch.equal(_patched(torch.nn.Dropout(0.0), _FakeStrategy())(x), x)
    one = _patched(torch.nn.Dropout(0.5), _FakeStrategy(replicas=1))
    torch.manual_seed(4)
    expected = torch.nn.functional.dropout(x, 0.5)
    torch.manual_seed(4)
    assert torch.equal(one(x), expected)


def test_only_torchs_plain_and_channel_dropout_layers_are_switched():
    assert not use_global_batch_dropout(torch.nn.AlphaDropout(0.5), lambda: _FakeStrategy())
    assert not use_global_batch_dropout(torch.nn.Linear(2, 2), lambda: _FakeStrategy())
    layer = torch.nn.Dropout1d(0.2)
    assert use_global_batch_dropout(layer, lambda: _FakeStrategy())
    assert uses_global_batch_dropout(layer) and not use_global_batch_dropout(layer, lambda: _FakeStrategy())


def test_recomputation_under_activation_checkpointing_draws_the_same_mask():
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 6)
    drop = _patched(torch.nn.Dropout(0.5), _FakeStrategy())
    x = torch.randn(5, 6)

    def block(t):
        return drop(lin(t)).relu()

    grads = []
    for checkpointed in (False, True):
        lin.zero_grad()
        torch.manual_seed(11)
        batch_position.set_current(RowPosition(0, 5))
        out = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if checkpointed else block(x)
        batch_position.set_current(RowPosition(0, 1))  # another step's position, when the backward recomputes
        out.sum().backward()
        grads.append(lin.weight.grad.clone())
    assert torch.equal(grads[0], grads[1])


def test_a_noted_batch_is_found_while_it_lives_and_forgotten_after():
    batch = (torch.zeros(3, 2), torch.zeros(3))
    batch_position.note(batch, 6)
    assert batch_position.find(((batch,), {})) == RowPosition(6, 3)
    assert batch_position.find((torch.zeros(3, 2),)) is None
    strings = (["a", "b"],)
    batch_position.note(strings, 0)  # no tensor: nothing to key on, nothing noted
    assert batch_position.find((strings,)) is None
    key = id(batch[0])
    del batch
    gc.collect()
    assert key not in batch_position._positions


class _Sync:
    state = None

    def add_parameters(self, params):
        pass


class _TwoReplicaCollective:
    world_size = 2
    distributed = True
    elastic = False

    def broadcast(self, tensor, src=0):
        return tensor


class _Owner:
    """Just enough of a 2-replica strategy for a `ScopeTracker`."""

    def __init__(self, **options):
        from distrib.comm.options import CommunicationOptions

        self.device = torch.device("cpu")
        self.collective = _TwoReplicaCollective()
        self.communication_options = CommunicationOptions(**options)
        self.num_replicas_in_sync, self.replica_id = 2, 0

    @property
    def multi_replica(self):
        return self.num_replicas_in_sync > 1

    def _gradient_synchronizer(self):
        return _Sync()


@pytest.mark.parametrize("on", [True, False])
def test_a_multi_replica_scope_switches_dropout_layers_unless_told_not_to(on):
    from distrib.strategies.replication import ScopeTracker

    tracker = ScopeTracker(_Owner(global_batch_dropout=on))
    with tracker.scope():
        inside = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5), torch.nn.Dropout2d(0.5))
    outside = torch.nn.Sequential(torch.nn.Dropout(0.5))
    tracker.track_module(outside)
    assert [uses_global_batch_dropout(m) for m in (inside[1], inside[2], outside[0])] == [on] * 3


class _FunctionalModel(torch.nn.Module):
    """Dropout the way many models write it: functional calls in ``forward`` and attention weights."""

    def __init__(self):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(4, 2, dropout=0.5, batch_first=True)

    def forward(self, x):
        h = torch.nn.functional.dropout(x, 0.5, self.training)
        h = torch.nn.functional.dropout1d(h, 0.3, self.training)
        out, weights = self.attention(h, h, h)  # need_weights=True: F.dropout on (batch * heads, L, S)
        return out, weights


def _replica_steps(parts, model, x_global, options):
    """Each replica's forward on its share, as `strategy.run` would call it; the outputs concatenated."""
    from distrib.strategies import context

    global_dropout.install_functional_dropout()
    outs, weights = [], []
    for r, lo, hi in _as_replicas(x_global.shape[0], parts, seed=11):
        strategy = _Owner(**options)
        strategy.num_replicas_in_sync, strategy.replica_id = max(parts, 2), r
        with context.replica_context(strategy):
            out, w = model(x_global[lo:hi])
        outs.append(out.detach())
        weights.append(w.detach())
    return torch.cat(outs), torch.cat(weights)


@pytest.mark.parametrize("parts", [2, 3])
def test_functional_dropout_and_attention_weights_drop_by_the_global_row(parts):
    torch.manual_seed(0)
    model = _FunctionalModel().train()
    x = torch.randn(6, 3, 4)
    whole = _replica_steps(1, model, x, {})
    split = _replica_steps(parts, model, x, {})
    assert torch.allclose(whole[0], split[0], atol=1e-6) and torch.allclose(whole[1], split[1], atol=1e-6)
    undropped = _replica_steps(1, model.eval(), x, {})
    assert not torch.allclose(whole[0], undropped[0], atol=1e-3)  # the masks dropped something
    own = _replica_steps(parts, model.train(), x, {"global_batch_dropout": False})
    assert not torch.allclose(whole[0], own[0], atol=1e-3)  # torch's masks depend on the split


def test_functional_dropout_keeps_torchs_own_path_when_told_outside_steps_and_in_evaluation():
    global_dropout.install_functional_dropout()
    x = torch.randn(8, 5)
    for options, in_step, training in (({"global_batch_dropout": False}, True, True), ({}, False, True),
                                       ({}, True, False)):
        from distrib.strategies import context

        torch.manual_seed(5)
        plain = torch.ops.aten.dropout(x, 0.5, training) if training else x
        torch.manual_seed(5)
        batch_position.set_current(RowPosition(0, 8))
        if in_step:
            with context.replica_context(_Owner(**options)):
                got = torch.nn.functional.dropout(x, 0.5, training)
        else:
            got = torch.nn.functional.dropout(x, 0.5, training)
        batch_position.set_current(None)
        assert torch.equal(got, plain)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit.script is deprecated, not gone
def test_torchscript_still_compiles_dropout_after_the_functions_are_replaced():
    global_dropout.install_functional_dropout()
    for module in (torch.nn.Dropout(0.1), torch.nn.MultiheadAttention(4, 2, dropout=0.1)):
        torch.jit.script(module)


def test_keras_dropout_without_a_seed_drops_by_the_global_row_too():
    os.environ.setdefault("KERAS_BACKEND", "torch")  # before the first import of keras
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("Keras runs on another backend (KERAS_BACKEND must be torch)")
    from distrib.strategies import context

    global_dropout.install_functional_dropout()
    try:
        layer = keras.layers.Dropout(0.5)  # unseeded: Keras calls torch.nn.functional.dropout
        x = torch.randn(6, 8)
        outs = {}
        for parts in (1, 3):
            pieces = []
            for _, lo, hi in _as_replicas(6, parts, seed=7):
                with context.replica_context(_Owner()):
                    pieces.append(torch.as_tensor(layer(x[lo:hi], training=True)).detach().cpu())
            outs[parts] = torch.cat(pieces)
    finally:
        batch_position.set_current(None)
        keras.backend.clear_session(free_memory=False)  # Keras names variables by process-wide counters: reset them
    assert torch.equal(outs[1], outs[3]) and not torch.equal(outs[1], x)
