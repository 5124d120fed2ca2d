"""Alpha dropout (``nn.AlphaDropout``, ``nn.FeatureAlphaDropout`` and their functions) keyed by the global row."""
import pytest
import torch

from distrib.strategies import context
from distrib.strategies.layer_patches import global_dropout
from distrib.strategies.layer_patches.global_dropout import alpha_dropout_with

from test_global_dropout import _as_replicas, _Owner  # noqa: E402  (tests/unit is on sys.path)


def _torch_mask(y, p, channels):
    """The keep-mask torch's alpha dropout used for ``y``: a dropped unit holds one known value."""
    dropped = alpha_dropout_with(torch.zeros(1), torch.tensor([False]), p)[0]
    if channels:
        return (~(y == dropped).flatten(2).all(-1)).reshape(y.shape[:2] + (1,) * (y.dim() - 2))
    return y != dropped


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
@pytest.mark.parametrize("channels", [False, True])
def test_the_same_mask_gives_torchs_alpha_dropout_bit_for_bit(p, channels):
    x = torch.randn(8, 6, 5, 4)
    torch.manual_seed(3)
    f = torch.nn.functional.feature_alpha_dropout if channels else torch.nn.functional.alpha_dropout
    y = f(x, p, True)
    keep = _torch_mask(y, p, channels)
    assert 0 < keep.float().mean() < 1
    assert torch.equal(alpha_dropout_with(x, keep, p), y)
    assert torch.equal(alpha_dropout_with(x.clone(), keep, p, inplace=True), y)


def _replica_outputs(parts, layer, x_global, options=None):
    global_dropout.install_functional_dropout()
    outs = []
    for r, lo, hi in _as_replicas(x_global.shape[0], parts, seed=11):
        strategy = _Owner(**(options or {}))
        strategy.num_replicas_in_sync, strategy.replica_id = max(parts, 2), r
        with context.replica_context(strategy):
            outs.append(layer(x_global[lo:hi]))
    return torch.cat(outs)


@pytest.mark.parametrize("parts", [2, 3])
@pytest.mark.parametrize("layer", [torch.nn.AlphaDropout(0.3), torch.nn.FeatureAlphaDropout(0.3),
                                   lambda x: torch.nn.functional.alpha_dropout(x, 0.3, True)],
                         ids=["AlphaDropout", "FeatureAlphaDropout", "alpha_dropout"])
def test_a_global_batch_split_any_way_is_dropped_as_the_whole_batch(parts, layer):
    x = torch.randn(7, 4, 3)
    whole = _replica_outputs(1, layer, x)
    assert torch.equal(_replica_outputs(parts, layer, x), whole)
    channels = isinstance(layer, torch.nn.FeatureAlphaDropout)
    keep = _torch_mask(whole, 0.3, channels)
    assert 0 < keep.float().mean() < 1 and torch.equal(alpha_dropout_with(x, keep, 0.3), whole)
    own = _replica_outputs(parts, layer, x, {"global_batch_dropout": False})
    assert not torch.equal(own, whole)  # torch's own masks depend on the split


def test_units_are_kept_with_probability_one_minus_p():
    x = torch.randn(400, 250)
    kept = _torch_mask(_replica_outputs(2, torch.nn.AlphaDropout(0.2), x), 0.2, False).double().mean().item()
    assert abs(kept - 0.8) < 0.01


def test_evaluation_and_outside_steps_keep_torchs_own_function():
    global_dropout.install_functional_dropout()
    x = torch.randn(6, 5)
    torch.manual_seed(4)
    plain = torch.ops.aten.alpha_dropout(x, 0.5, True)
    torch.manual_seed(4)
    assert torch.equal(torch.nn.functional.alpha_dropout(x, 0.5, True), plain)  # outside a step
    with context.replica_context(_Owner()):
        assert torch.equal(torch.nn.AlphaDropout(0.5).eval()(x), x)
        assert torch.equal(torch.nn.functional.alpha_dropout(x, 0.5), x)  # training=False by default, as torch's
