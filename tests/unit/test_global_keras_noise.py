"""Keras 3's GaussianNoise, GaussianDropout and AlphaDropout: a global batch split over replicas gets one noise.

Replicas run one after the other, each with a fresh copy of the layer (its
seed generator as the chief broadcast it) and its rows noted as the
distributed dataset notes them; a split into 1 replica is the whole batch.
"""
import logging
import math
import os

import pytest
import torch

os.environ.setdefault("KERAS_BACKEND", "torch")  # before the first import of keras
keras = pytest.importorskip("keras")

from distrib import hooks  # noqa: E402
from distrib.data.distribution import batch_position  # noqa: E402
from distrib.data.distribution.batch_position import RowPosition  # noqa: E402
from distrib.strategies import context  # noqa: E402
from distrib.strategies.layer_patches import keras_random  # noqa: E402
from distrib.strategies.layer_patches.keras_global_layers import (  # noqa: E402
    install_keras_noise, keyed_normal, keyed_uniform, random_preprocessing_layers)

from test_global_keras_layers import _as_replicas, _Owner  # noqa: E402  (tests/unit is on sys.path)

pytestmark = pytest.mark.skipif(keras.backend.backend() != "torch",
                                reason="Keras runs on another backend (KERAS_BACKEND must be torch)")

_SELU_ALPHA_P = -1.6732632423543772848170429916717 * 1.0507009873554804934193349852946


@pytest.fixture(autouse=True)
def _keras_state():
    try:
        yield
    finally:
        batch_position.set_current(None)
        keras.backend.clear_session(free_memory=False)  # no gc.collect: seconds in a full pytest process


def _seeded(layer):
    """A layer without a seed gets the generator state the chief would have broadcast."""
    for generator in layer._seed_generators:
        generator.state.assign(torch.tensor([1234, 0], dtype=torch.int32))
    return layer


_LAYERS = {  # name: a fresh layer
    "GaussianNoise": lambda: keras.layers.GaussianNoise(0.7, seed=3),
    "GaussianDropout": lambda: keras.layers.GaussianDropout(0.4, seed=4),
    "AlphaDropout": lambda: keras.layers.AlphaDropout(0.3, seed=5),
    "AlphaDropout-noise-shape": lambda: keras.layers.AlphaDropout(0.5, noise_shape=(None, 1, 4), seed=6),
    "unseeded-GaussianNoise": lambda: _seeded(keras.layers.GaussianNoise(0.5)),
    "model": lambda: keras.Sequential([keras.Input((3, 4)), keras.layers.GaussianNoise(0.3, seed=1),
                                       keras.layers.GaussianDropout(0.3, seed=2),
                                       keras.layers.AlphaDropout(0.2, seed=3)]),
}


def _split(make_layer, x, upstream, parts, calls=1, **options):
    """Each replica's outputs of ``calls`` training calls of a fresh layer on its rows, and its input gradient."""
    install_keras_noise()
    outputs, grads = [], []
    for r, lo, hi in _as_replicas(x.shape[0], parts):
        layer = make_layer()
        piece = x[lo:hi].clone().requires_grad_(True)
        with context.replica_context(_Owner(max(parts, 2), r, **options)):
            ys = [layer(piece, training=True) for _ in range(calls)]
        sum((y * upstream[lo:hi]).sum() for y in ys).backward()
        outputs.append(torch.stack([y.detach() for y in ys]))
        grads.append(piece.grad)
    return torch.cat(outputs, 1), torch.cat(grads)


@pytest.mark.parametrize("name", sorted(_LAYERS))
def test_a_global_batch_split_over_1_2_or_3_replicas_gets_the_same_noise_and_gradients(name):
    torch.manual_seed(0)
    x, upstream = torch.randn(6, 3, 4) + 3.0, torch.randn(6, 3, 4)
    whole, whole_grad = _split(_LAYERS[name], x, upstream, 1, calls=2)
    assert not torch.equal(whole[0], x) and not torch.equal(whole[0], whole[1])  # noise, a new draw per call
    for parts in (2, 3):
        y, grad = _split(_LAYERS[name], x, upstream, parts, calls=2)
        assert torch.equal(y, whole), f"{parts} replicas"
        assert torch.equal(grad, whole_grad), f"{parts} replicas"
    own, _ = _split(_LAYERS[name], x, upstream, 3, calls=2, global_batch_dropout=False)
    assert not torch.equal(own, whole)  # Keras's own draws depend on the split: the test can fail


def test_alpha_dropout_noise_shape_broadcasts_one_mask_per_row_over_the_none_axis():
    y, _ = _split(_LAYERS["AlphaDropout-noise-shape"], torch.ones(6, 3, 4), torch.ones(6, 3, 4), 3)
    assert torch.equal(y, y[:, :, :1].expand_as(y)) and not torch.equal(y, y[:, :1].expand_as(y))


def _keras_key(seed):
    """The key a fresh layer seeded ``seed`` draws at its first call, as the override derives it."""
    from keras.src.random.seed_generator import draw_seed

    return keras_random._key_of(draw_seed(keras.random.SeedGenerator(seed)).tolist())


@pytest.mark.parametrize("rate", [0.2, 0.5])
def test_alpha_dropout_computes_keras_formula_on_the_keyed_mask(rate):
    torch.manual_seed(1)
    x = torch.randn(6, 5)
    y, _ = _split(lambda: keras.layers.AlphaDropout(rate, seed=8), x, torch.ones_like(x), 3)
    kept = (keyed_uniform((6, 5), 0, _keras_key(8)) >= rate).to(x.dtype)
    a = ((1 - rate) * (1 + rate * _SELU_ALPHA_P ** 2)) ** -0.5
    b = -a * _SELU_ALPHA_P * rate
    assert 0.1 < kept.mean().item() < 0.9
    assert torch.equal(y[0], a * (x * kept + _SELU_ALPHA_P * (1 - kept)) + b)


def test_gaussian_layers_add_and_multiply_the_keyed_normal_scaled_as_keras_does():
    x = torch.full((6, 50), 2.0)
    noise, _ = _split(lambda: keras.layers.GaussianNoise(0.7, seed=3), x, x, 2)
    torch.testing.assert_close(noise[0], x + 0.7 * keyed_normal((6, 50), 0, _keras_key(3)))
    scaled, _ = _split(lambda: keras.layers.GaussianDropout(0.4, seed=4), x, x, 2)
    torch.testing.assert_close(scaled[0], x * (1.0 + math.sqrt(0.4 / 0.6) * keyed_normal((6, 50), 0, _keras_key(4))))


def test_the_layers_seed_decides_the_noise_and_its_generator_advances_as_keras_does():
    x = torch.zeros(6, 32)
    install_keras_noise()

    def calls(seed, n, step=True):
        layer = keras.layers.GaussianNoise(1.0, seed=seed)
        with context.replica_context(_Owner() if step else _Owner(1)):
            outs = [layer(x, training=True) for _ in range(n)]
        return outs, layer.seed_generator.state.value.clone()

    batch_position.set_current(RowPosition(0, 6))
    (first, second), state = calls(3, 2)
    (again,), _ = calls(3, 1)
    (other,), _ = calls(4, 1)
    _, keras_state = calls(3, 2, step=False)
    assert torch.equal(first, again) and not torch.equal(first, second) and not torch.equal(first, other)
    assert torch.equal(state, keras_state)  # one seed drawn per call, keyed or not
    assert abs(torch.corrcoef(torch.stack([first.flatten(), other.flatten()]))[0, 1].item()) < 0.2


def test_the_keyed_normal_and_uniform_have_their_distributions_moments():
    z = keyed_normal((1000, 100), 0, (2024, 7))
    assert abs(z.mean().item()) < 0.01 and abs(z.std().item() - 1.0) < 0.01
    assert abs((z.abs() < 1).double().mean().item() - 0.6827) < 0.01
    assert torch.isfinite(z).all() and z.abs().max().item() < 6.0
    u = keyed_uniform((1000, 100), 0, (2024, 7))
    assert abs(u.mean().item() - 0.5) < 0.005 and abs(u.var().item() - 1 / 12) < 0.002
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        low = keyed_uniform((1000, 100), 0, (5, 6), dtype=dtype)
        assert low.dtype == dtype and 0.0 <= low.min().item() and low.max().item() < 1.0
    assert keyed_normal((4, 4), 0, (1, 2), dtype=torch.float64).dtype == torch.float64


def test_the_keyed_draws_of_a_row_do_not_depend_on_the_rows_drawn_with_it():
    for draw in (keyed_normal, keyed_uniform):
        whole = draw((6, 5), 0, (3, 4))
        assert torch.equal(torch.cat([draw((2, 5), 0, (3, 4)), draw((4, 5), 2, (3, 4))]), whole)
        assert not torch.equal(draw((6, 5), 0, (3, 4), salt=1), whole)


def _keras_own(fn):
    """``fn()`` with Keras's own backend ``normal`` and ``uniform`` (distrib's overrides taken off meanwhile)."""
    install_keras_noise()
    for name, make in (("normal", keras_random._make_keras_normal),
                       ("uniform", keras_random._make_keras_uniform)):
        hooks.keras_random_override(name, make).remove()
    try:
        return fn()
    finally:
        install_keras_noise()


@pytest.mark.parametrize("where", ["outside-steps", "one-replica", "global_batch_dropout=False", "not-the-batch"])
@pytest.mark.parametrize("name", ["GaussianNoise", "GaussianDropout", "AlphaDropout"])
def test_keras_own_draws_outside_multi_replica_steps_and_where_the_first_dimension_is_not_the_batch(name, where):
    x = torch.randn(6, 8) + 3.0

    def run():
        layer = _LAYERS[name]()
        batch_position.set_current(RowPosition(0, 4 if where == "not-the-batch" else 6))
        if where == "outside-steps":
            return layer(x, training=True)
        on = where != "global_batch_dropout=False"
        owner = _Owner(1) if where == "one-replica" else _Owner(global_batch_dropout=on)
        with context.replica_context(owner):
            return layer(x, training=True)

    install_keras_noise()
    got = run()
    assert torch.equal(got, _keras_own(run)) and not torch.equal(got, x)


@pytest.mark.parametrize("name", ["GaussianNoise", "GaussianDropout", "AlphaDropout", "model"])
def test_evaluation_in_a_step_is_keras_identity(name):
    install_keras_noise()
    x = torch.randn(6, 3, 4)
    batch_position.set_current(RowPosition(0, 6))
    with context.replica_context(_Owner()):
        assert torch.equal(_LAYERS[name]()(x, training=False), x)


def test_other_draws_of_the_batchs_shape_in_a_step_keep_keras_own():
    x = torch.rand(6, 8, 8, 3)

    def run():
        batch_position.set_current(RowPosition(0, 6))
        with context.replica_context(_Owner()):
            flipped = keras.layers.RandomFlip(seed=2)(x, training=True)
            return flipped, keras.random.normal((6, 4), seed=keras.random.SeedGenerator(5)), \
                keras.random.uniform((6, 4), seed=keras.random.SeedGenerator(6))

    install_keras_noise()
    for got, want in zip(run(), _keras_own(run)):
        assert torch.equal(got, want)


# ------------------------------------------------------------------ the elastic warning
def test_random_preprocessing_layers_are_found_in_a_model_and_the_noise_layers_are_not():
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.RandomFlip(), keras.layers.Rescaling(0.5),
                              keras.Sequential([keras.layers.RandomZoom(0.1), keras.layers.RandomFlip()]),
                              keras.layers.GaussianNoise(0.1), keras.layers.Dropout(0.5, seed=1)])
    assert random_preprocessing_layers(model) == ["RandomFlip", "RandomZoom"]
    assert random_preprocessing_layers(keras.layers.GaussianNoise(0.1)) == []
    assert random_preprocessing_layers(torch.nn.Linear(2, 2)) == []


@pytest.mark.parametrize("how", ["built-in-scope", "tracked"])
def test_an_elastic_job_names_a_tracked_models_random_preprocessing_layers_once(monkeypatch, caplog, how):
    from distrib.strategies.replication import ScopeTracker

    monkeypatch.setenv("DISTRIB_ELASTIC", "1")
    tracker = ScopeTracker(_Owner())

    def model():
        return keras.Sequential([keras.Input((8, 8, 3)), keras.layers.RandomRotation(0.1, seed=1),
                                 keras.layers.Conv2D(2, 3), keras.layers.RandomCrop(4, 4, seed=2),
                                 keras.layers.GaussianNoise(0.1, seed=3)])

    with caplog.at_level(logging.WARNING, logger="distrib.strategies"):
        if how == "built-in-scope":
            with tracker.scope():
                first = model()
        else:
            first = tracker.track_module(model())
            tracker.synchronize()
        tracker.track_module(first)  # found again: not named again
        tracker.synchronize()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert ("this job is elastic but the model's Keras random preprocessing layers RandomRotation, RandomCrop "
            "make each replica's result depend on its share of the global batch") in lines[0]


def test_nothing_is_named_outside_an_elastic_job(monkeypatch, caplog):
    from distrib.strategies.replication import ScopeTracker

    monkeypatch.delenv("DISTRIB_ELASTIC", raising=False)
    tracker = ScopeTracker(_Owner())
    with caplog.at_level(logging.WARNING, logger="distrib.strategies"):
        tracker.track_module(keras.Sequential([keras.Input((4, 4, 1)), keras.layers.RandomFlip(seed=1)]))
        tracker.synchronize()
    assert not caplog.records


def test_a_checkpoint_carries_the_layers_seed_state_to_a_replacement():
    # An elastic replacement restores the survivors' snapshot, a Checkpoint's state: the layers' seed
    # generators must be in it, or the replacement would draw other masks than the worker it replaces.
    from distrib.checkpoint import Checkpoint
    from distrib.checkpoint.files.format import freeze_state, loads_state

    def build():  # as a new process builds it: the same layer names
        keras.backend.clear_session(free_memory=False)
        keras.utils.set_random_seed(0)
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), keras.layers.Dropout(0.5, seed=3),
                                 keras.layers.GaussianNoise(0.5, seed=4)])

    x = torch.ones(6, 4)
    survivor = build()
    for _ in range(3):
        survivor(x, training=True)  # each call advances both seed generators
    sent = bytes(freeze_state(Checkpoint(model=survivor).state_dict()))  # as a survivor keeps and sends it
    expected = survivor(x, training=True).detach().clone()   # the survivor's next step, after the snapshot
    snapshot = loads_state(sent)
    assert any(k.endswith("seed_generator_state") for k in snapshot["model"]), sorted(snapshot["model"])
    replacement = build()
    Checkpoint(model=replacement).load_state_dict(snapshot)
    assert torch.equal(replacement(x, training=True), expected)
    assert not torch.equal(build()(x, training=True), expected)  # control: without the snapshot's seeds, other noise
