"""Keras 3's BatchNormalization and seeded dropout: a global batch split over replicas gives one process's result.

Batch norm replicas run on threads with a real all-reduce
(`distrib.testing.simulated`), each with its own copy of the layer, as each
process holds its own; dropout replicas run one after the other, each with
its generators and seed state as a fresh process would have them.
"""
import os

import pytest
import torch

os.environ.setdefault("KERAS_BACKEND", "torch")  # before the first import of keras
keras = pytest.importorskip("keras")

from distrib import hooks  # noqa: E402
from distrib.comm.options import CommunicationOptions  # noqa: E402
from distrib.data.distribution import batch_position  # noqa: E402
from distrib.data.distribution.batch_position import RowPosition  # noqa: E402
from distrib.data.batch_split import split_bounds  # noqa: E402
from distrib.strategies import context  # noqa: E402
from distrib.strategies.layer_patches import global_dropout, keras_random  # noqa: E402
from distrib.strategies.layer_patches.keras_global_layers import (  # noqa: E402
    install_keras_dropout, use_global_batch_statistics, uses_global_batch_statistics)
from distrib.testing.simulated import run_workers  # noqa: E402

from test_global_dropout import _TwoReplicaCollective  # noqa: E402  (tests/unit is on sys.path)

pytestmark = pytest.mark.skipif(keras.backend.backend() != "torch",
                                reason="Keras runs on another backend (KERAS_BACKEND must be torch)")


@pytest.fixture(autouse=True)
def _keras_state():
    try:
        yield
    finally:
        batch_position.set_current(None)
        keras.backend.clear_session(free_memory=False)  # Keras names variables by process-wide counters: reset them


# ------------------------------------------------------------------ batch norm
def _batch_norm(shape, **kwargs):
    """A built BatchNormalization with distinct gamma, beta and moving statistics (the same at every call)."""
    layer = keras.layers.BatchNormalization(momentum=0.8, **kwargs)
    layer.build(shape)
    channels = shape[layer.axis]
    ramp = torch.linspace(0.5, 1.5, channels)
    layer.gamma.assign(ramp)
    layer.beta.assign(ramp - 1.0)
    layer.moving_mean.assign(0.1 * ramp)
    layer.moving_variance.assign(ramp * ramp)
    return layer


def _train_step(layer, x, upstream, mask):
    """One training forward and backward of ``layer`` on ``x`` (loss ``Σ y·upstream``); what it changed."""
    x = x.clone().requires_grad_(True)
    y = layer(x, training=True, mask=mask)
    (y * upstream).sum().backward()
    return {"y": y.detach(), "dx": x.grad, "dgamma": layer.gamma.value.grad.clone(),
            "dbeta": layer.beta.value.grad.clone(), "moving_mean": layer.moving_mean.value.detach().clone(),
            "moving_variance": layer.moving_variance.value.detach().clone()}


def _split_steps(parts, shape, x, upstream, mask=None, switch=True, **kwargs):
    """Each of ``parts`` replicas (threads, real all-reduce) steps its own copy of the layer on its rows."""
    layers = [_batch_norm(shape, **kwargs) for _ in range(parts)]

    def replica(strategy):
        strategy.comm_device = torch.device("cpu")
        r = strategy.replica_id
        lo, hi = split_bounds(x.shape[0], parts, r)
        if switch:
            assert use_global_batch_statistics(layers[r], lambda: strategy)
        return _train_step(layers[r], x[lo:hi], upstream[lo:hi], None if mask is None else mask[lo:hi])

    return run_workers(replica, parts, timeout=30)


def _assert_split_equals_whole(results, whole):
    torch.testing.assert_close(torch.cat([r["y"] for r in results]), whole["y"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.cat([r["dx"] for r in results]), whole["dx"], rtol=1e-4, atol=1e-5)
    for name in ("dgamma", "dbeta"):  # gradient sync sums the replicas' parameter gradients
        torch.testing.assert_close(sum(r[name] for r in results), whole[name], rtol=1e-4, atol=1e-5)
    for r in results:
        for name in ("moving_mean", "moving_variance"):
            torch.testing.assert_close(r[name], whole[name], rtol=1e-5, atol=1e-6)


_CASES = {
    "dense": ((12, 5), {}),
    "channels-last": ((12, 3, 2, 4), {}),
    "channels-first": ((12, 4, 3, 2), {"axis": 1}),
}


@pytest.mark.parametrize("parts", [2, 3])
@pytest.mark.parametrize("case", sorted(_CASES))
def test_batch_normalization_split_over_replicas_equals_one_process_on_the_global_batch(case, parts):
    shape, kwargs = _CASES[case]
    torch.manual_seed(0)
    x = torch.randn(shape) * 3 + 1
    upstream = torch.randn(shape)
    whole = _train_step(_batch_norm(shape, **kwargs), x, upstream, None)
    _assert_split_equals_whole(_split_steps(parts, shape, x, upstream, **kwargs), whole)
    local = _split_steps(parts, shape, x, upstream, switch=False, **kwargs)
    assert not torch.allclose(torch.cat([r["y"] for r in local]), whole["y"], atol=1e-3)  # the test can fail


def test_a_replica_with_no_rows_adds_nothing_to_the_global_statistics():
    shape = (2, 3)
    x, upstream = torch.tensor([[0.0, 1.0, -2.0], [4.0, 3.0, 2.0]]), torch.tensor([[1.0, -1.0, 2.0], [0.5, 1.0, 0.0]])
    whole = _train_step(_batch_norm(shape), x, upstream, None)
    results = _split_steps(3, shape, x, upstream)
    assert [r["y"].shape[0] for r in results] == [1, 1, 0]
    _assert_split_equals_whole(results, whole)


@pytest.mark.parametrize("parts", [2, 3])
def test_masked_batch_normalization_weighs_the_global_batch_as_keras_does(parts):
    shape = (6, 5, 3)
    torch.manual_seed(1)
    x, upstream = torch.randn(shape) * 2, torch.randn(shape)
    mask = torch.rand(shape[:2]) > 0.4
    mask[0] = False  # a replica's share may hold no unmasked position at all
    whole = _train_step(_batch_norm(shape), x, upstream, mask)
    _assert_split_equals_whole(_split_steps(parts, shape, x, upstream, mask=mask), whole)


def test_renormalisation_statistics_follow_the_global_batch_too():
    shape = (9, 4)
    torch.manual_seed(2)
    x, upstream = torch.randn(shape), torch.randn(shape)
    kwargs = {"renorm": True, "renorm_clipping": {"rmax": 2.0, "rmin": 0.5, "dmax": 1.0}}
    reference = _batch_norm(shape, **kwargs)
    whole = _train_step(reference, x, upstream, None)
    layers = [_batch_norm(shape, **kwargs) for _ in range(3)]

    def replica(strategy):
        strategy.comm_device = torch.device("cpu")
        lo, hi = split_bounds(9, 3, strategy.replica_id)
        layer = layers[strategy.replica_id]
        assert use_global_batch_statistics(layer, lambda: strategy)
        _train_step(layer, x[lo:hi], upstream[lo:hi], None)
        return [v.value.detach().clone() for v in (layer.renorm_mean, layer.renorm_stddev, layer.moving_stddev)]

    del whole
    want = [v.value.detach() for v in (reference.renorm_mean, reference.renorm_stddev, reference.moving_stddev)]
    for got in run_workers(replica, 3, timeout=30):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


class _NoCollective:
    def all_reduce(self, tensor, op=None):
        raise AssertionError("communicated outside a multi-replica training call")


class _Strategy:
    def __init__(self, replicas):
        self.num_replicas_in_sync, self.collective, self.comm_device = replicas, _NoCollective(), torch.device("cpu")

    @property
    def multi_replica(self):
        return self.num_replicas_in_sync > 1


def test_evaluation_and_a_single_replica_use_keras_own_batch_normalization():
    shape = (8, 3)
    torch.manual_seed(3)
    x, upstream = torch.randn(shape), torch.randn(shape)
    plain = _batch_norm(shape)
    switched = _batch_norm(shape)
    assert use_global_batch_statistics(switched, lambda: _Strategy(2))
    assert uses_global_batch_statistics(switched) and not use_global_batch_statistics(switched, lambda: None)
    torch.testing.assert_close(switched(x, training=False), plain(x, training=False), rtol=0, atol=0)
    one = _batch_norm(shape)
    assert use_global_batch_statistics(one, lambda: _Strategy(1))
    got, want = _train_step(one, x, upstream, None), _train_step(plain, x, upstream, None)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=0)


def test_only_keras_own_batch_normalization_is_switched():
    class OwnMoments(keras.layers.BatchNormalization):
        def _moments(self, inputs, mask):
            return super()._moments(inputs, mask)

    for layer in (keras.layers.Dense(2), keras.layers.LayerNormalization(), OwnMoments()):
        assert not use_global_batch_statistics(layer, lambda: _Strategy(2))


# ------------------------------------------------------------------ scope adoption
class _State:
    def __init__(self):
        self.added, self.excluded = [], []

    def add(self, tensors):
        self.added += tensors

    def exclude(self, tensors):
        self.excluded += tensors


class _Sync:
    def __init__(self):
        self.state = _State()

    def add_parameters(self, params):
        pass


class _Owner:
    """Just enough of a 2-replica strategy for a `ScopeTracker` and a replica context."""

    def __init__(self, replicas=2, replica_id=0, **options):
        self.device = self.comm_device = torch.device("cpu")
        self.collective = _TwoReplicaCollective()
        self.communication_options = CommunicationOptions(**options)
        self.num_replicas_in_sync, self.replica_id = replicas, replica_id
        self.sync = _Sync()

    @property
    def multi_replica(self):
        return self.num_replicas_in_sync > 1

    def _gradient_synchronizer(self):
        return self.sync


def _model():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.BatchNormalization(),
                             keras.layers.Dropout(0.5, seed=1), keras.layers.Dense(1)])


@pytest.mark.parametrize("sync_batch_norm", [True, False])
def test_a_multi_replica_scope_adopts_keras_batch_normalization_built_in_it_or_tracked(sync_batch_norm):
    from distrib.strategies.replication import ScopeTracker

    owner = _Owner(sync_batch_norm=sync_batch_norm)
    tracker = ScopeTracker(owner)
    with tracker.scope():
        inside = _model()
    outside = _model()
    tracker.track_module(outside)
    tracker.synchronize()
    for model in (inside, outside):
        assert uses_global_batch_statistics(model.layers[1]) is sync_batch_norm
    statistics = {id(v.value) for m in (inside, outside)
                  for v in (m.layers[1].moving_mean, m.layers[1].moving_variance)}
    assert {id(t) for t in owner.sync.state.excluded} == (statistics if sync_batch_norm else set())
    assert statistics <= {id(t) for t in owner.sync.state.added}  # other Keras state is still averaged


# ------------------------------------------------------------------ dropout
def _as_replicas(rows, parts, seed=0):
    """``(replica, lo, hi)`` for each of ``parts`` replicas, in a fresh process's generator state."""
    for r in range(parts):
        lo, hi = split_bounds(rows, parts, r)
        torch.manual_seed(seed)
        batch_position.set_current(RowPosition(lo, hi - lo))
        yield r, lo, hi
    batch_position.set_current(None)


def _split_dropout(make_call, x, parts, **options):
    """``make_call()`` (a fresh layer or seed per replica) applied to each replica's rows in its step."""
    global_dropout.install_functional_dropout()
    install_keras_dropout()
    pieces = []
    for r, lo, hi in _as_replicas(x.shape[0], parts):
        global_dropout._placed.clear()  # a fresh process remembers no places
        call = make_call()
        with context.replica_context(_Owner(max(parts, 2), r, **options)):
            pieces.append(torch.as_tensor(call(x[lo:hi])).detach())
    return torch.cat(pieces)


def _layer(cls, *args, **kwargs):
    """A fresh layer per replica, called in training; an unseeded one's state as the chief broadcast it."""
    def make():
        layer = cls(*args, **kwargs)
        if kwargs.get("seed") is None:
            layer.seed_generator.state.assign(torch.tensor([1234, 0], dtype=torch.int32))
        return lambda t: layer(t, training=True)
    return make


def _random_dropout(rate, seed):
    """``keras.random.dropout`` with a fresh ``SeedGenerator(seed)`` per replica, or an int seed."""
    def make():
        generator = keras.random.SeedGenerator(seed) if seed is not None else 12
        return lambda t: keras.random.dropout(t, rate, seed=generator)
    return make


_DROPOUTS = {  # name: (a replica's call, the global batch's shape, the rate)
    "seeded": (_layer(keras.layers.Dropout, 0.5, seed=3), (12, 8), 0.5),
    "broadcast-noise-shape": (_layer(keras.layers.Dropout, 0.4, noise_shape=(None, 1, 4), seed=5), (12, 3, 4), 0.4),
    "batch-shared-noise-shape": (_layer(keras.layers.Dropout, 0.5, noise_shape=(1, 6), seed=6), (12, 6), 0.5),
    "spatial": (_layer(keras.layers.SpatialDropout1D, 0.5, seed=7), (12, 5, 6), 0.5),
    "unseeded-noise-shape": (_layer(keras.layers.Dropout, 0.5, noise_shape=(None, 6)), (12, 6), 0.5),
    "unseeded": (_layer(keras.layers.Dropout, 0.5), (12, 6), 0.5),  # torch.nn.functional.dropout
    "random-seed-generator": (_random_dropout(0.3, 11), (12, 7), 0.3),
    "random-int-seed": (_random_dropout(0.6, None), (12, 7), 0.6),
}


@pytest.mark.parametrize("name", sorted(_DROPOUTS))
def test_keras_dropout_split_over_replicas_drops_as_the_whole_batch_bit_for_bit(name):
    make_call, shape, rate = _DROPOUTS[name]
    torch.manual_seed(0)
    x = torch.randn(shape) + 5.0  # no zeros: a zero in the output is a dropped element
    whole = _split_dropout(make_call, x, 1)
    for parts in (2, 3):
        assert torch.equal(_split_dropout(make_call, x, parts), whole), f"{parts} replicas"
    kept = whole != 0
    assert 0.15 < kept.double().mean().item() < 0.85
    torch.testing.assert_close(whole[kept], x[kept] / (1 - rate))
    own = torch.cat([torch.as_tensor(make_call()(x[lo:hi])) for _, lo, hi in _as_replicas(shape[0], 3)])
    assert not torch.equal(own, whole)  # outside steps: Keras's masks of the replica's shape differ


def test_noise_shape_broadcasts_the_mask_as_keras_does():
    x = torch.ones(12, 3, 4)
    per_row = _split_dropout(_DROPOUTS["broadcast-noise-shape"][0], x, 3)
    assert torch.equal(per_row, per_row[:, :1].expand_as(per_row))  # one mask over axis 1
    assert not torch.equal(per_row, per_row[:1].expand_as(per_row))
    shared = _split_dropout(_DROPOUTS["batch-shared-noise-shape"][0], torch.ones(12, 6), 3)
    assert torch.equal(shared, shared[:1].expand_as(shared))  # one mask for every row of the global batch


def test_the_layers_seed_decides_the_masks_and_they_repeat_from_the_same_seed():
    x = torch.ones(12, 16)

    def calls(seed, n):
        layer = keras.layers.Dropout(0.5, seed=seed)
        return lambda: [layer(x, training=True) for _ in range(n)]

    install_keras_dropout()
    with context.replica_context(_Owner()):
        batch_position.set_current(RowPosition(0, 12))
        first, second = calls(3, 2)()
        again = calls(3, 1)()[0]
        other = calls(4, 1)()[0]
    assert torch.equal(first, again)
    assert not torch.equal(first, second) and not torch.equal(first, other)
    assert 0.35 < (first == other).double().mean().item() < 0.65  # nearby seeds give unrelated masks


def _plain_keras(fn):
    """``fn()`` with Keras's own backend dropout (distrib's override taken off meanwhile)."""
    install_keras_dropout()
    hooks.keras_random_override("dropout", keras_random._make_keras_dropout).remove()
    try:
        return fn()
    finally:
        install_keras_dropout()


@pytest.mark.parametrize("where", ["outside-steps", "one-replica", "global_batch_dropout=False"])
def test_seeded_keras_dropout_is_keras_own_unless_in_a_multi_replica_step(where):
    x = torch.randn(6, 8) + 5.0

    def run():
        layer = keras.layers.Dropout(0.5, seed=9)
        batch_position.set_current(RowPosition(0, 6))
        if where == "outside-steps":
            return layer(x, training=True)
        owner = _Owner(1) if where == "one-replica" else _Owner(global_batch_dropout=False)
        with context.replica_context(owner):
            return layer(x, training=True)

    install_keras_dropout()
    got = run()
    assert torch.equal(got, _plain_keras(run)) and not torch.equal(got, x)
    with context.replica_context(_Owner()):
        assert torch.equal(keras.layers.Dropout(0.5, seed=9)(x, training=False), x)
