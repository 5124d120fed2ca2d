"""Every Keras-named loss computes what Keras 3.15 (TF 2.21) computes, for every reduction and input rank.

The expected values are TensorFlow's own, stored by
``tests/tf_reference/generate_keras_losses_metrics.py``.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import distrib
from distrib.training.compile_config import CompiledLoss

REFERENCE = json.loads((Path(__file__).resolve().parents[1] / "data" / "tf_reference"
                        / "keras_losses_metrics.json").read_text())
INPUTS = REFERENCE["inputs"]


def _case_id(case: dict) -> str:
    config = ",".join(f"{k}={v}" for k, v in case["config"].items())
    return f"{case['loss']}({config})-{case['input']}-{case['reduction']}-{'w' if case['weighted'] else 'nw'}"


def _tensors(name: str):
    data = INPUTS[name]
    y_true = torch.tensor(data["y_true"], dtype=torch.float32)
    return y_true, torch.tensor(data["y_pred"], dtype=torch.float32), torch.tensor(data["sample_weight"])


def _by_loss():
    cases = {}
    for case in REFERENCE["losses"]:
        cases.setdefault((case["loss"], json.dumps(case["config"])), []).append(case)
    return cases


@pytest.mark.parametrize("key", list(_by_loss()), ids=lambda k: f"{k[0]}{k[1]}")
def test_loss_matches_keras_for_every_reduction_rank_and_weighting(key):
    mismatches = []
    for case in _by_loss()[key]:
        y_true, y_pred, sw = _tensors(case["input"])
        loss = getattr(distrib.losses, case["loss"])(reduction=case["reduction"], **case["config"])
        try:
            got = loss(y_true, y_pred, sample_weight=sw if case["weighted"] else None)
        except ValueError as err:
            if "error" not in case:
                mismatches.append(f"{_case_id(case)}: distrib raised {err}")
            continue
        if "error" in case:
            # Keras fails to broadcast one weight per example against [B, T] losses; distrib weighs the
            # example's elements. Any other Keras error must be an error here too.
            if not (case["weighted"] and "Mul" in case["error"]):
                mismatches.append(f"{_case_id(case)}: Keras raised {case['error']}, distrib returned {got}")
            continue
        expected = torch.tensor(case["result"], dtype=torch.float64)
        if tuple(got.shape) != tuple(expected.shape) or not torch.allclose(got.double(), expected, rtol=2e-5,
                                                                            atol=2e-6):
            mismatches.append(f"{_case_id(case)}: distrib {got.tolist()} != Keras {expected.tolist()}")
    assert not mismatches, "\n".join(mismatches)


def test_every_keras_loss_name_resolves():
    names = ["mse", "MSE", "mae", "mape", "msle", "bce", "kld", "KLD", "huber", "log_cosh", "cosine_similarity",
             "kl_divergence", "poisson", "hinge", "squared_hinge", "categorical_hinge", "dice", "tversky",
             "binary_focal_crossentropy", "categorical_focal_crossentropy", "Huber", "LogCosh", "Tversky"]
    for name in names:
        loss = distrib.losses.get(name)
        assert isinstance(loss, distrib.losses.Loss), name
        again = distrib.losses.deserialize(distrib.losses.serialize(loss))
        assert again.get_config() == loss.get_config()


def test_ps_tutorial_mse_with_rank_one_targets_is_the_expanded_keras_value():
    ref = REFERENCE["ps_tutorial"]
    y, p = torch.tensor(ref["y_true"]), torch.tensor(ref["y_pred"])
    assert ref["keras3_error"]  # Keras 3 refuses (64,) against (64, 10) when called directly ...
    with pytest.raises(ValueError, match=r"y_true of shape \(64,\) does not broadcast against y_pred"):
        distrib.losses.MeanSquaredError()(y, p)
    # ... Model.fit expands the targets to (64, 1) like tf.keras 2's fit, which the tutorial was written for.
    value = CompiledLoss("mse", None)(y, p, None, global_batch_size=64)
    assert value.item() == pytest.approx(ref["expanded_mse"], rel=1e-6)
    halves = [CompiledLoss("mse", None)(y[i:i + 32], p[i:i + 32], None, global_batch_size=64) for i in (0, 32)]
    assert (halves[0] + halves[1]).item() == pytest.approx(ref["expanded_mse"], rel=1e-6)


def _share_cases():
    keep = []
    for case in REFERENCE["losses"]:
        if "error" in case or case["loss"] in ("Dice", "Tversky"):  # batch-wide ratios do not split
            continue
        if case["loss"] == "CosineSimilarity" and case["input"].endswith("_r1"):  # one cosine of the whole batch
            continue
        if case["weighted"] and (case["reduction"] == "mean_with_sample_weight" or case["input"].endswith("_r1")):
            continue  # divisors from the weights: exact per replica only (documented in Loss.replica_share)
        if case["config"].get("ignore_class") is not None or case["config"].get("axis") not in (None, -1):
            continue
        keep.append(case)
    return keep


@pytest.mark.parametrize("key", sorted({(c["loss"], json.dumps(c["config"])) for c in _share_cases()}),
                         ids=lambda k: f"{k[0]}{k[1]}")
def test_replica_shares_add_up_to_the_keras_loss_of_the_global_batch(key):
    # Model.fit minimises Loss.replica_share on each replica; summed over two replicas of 3 examples
    # (as the gradients are) it is Keras's compiled loss of the whole batch of 6.
    for case in [c for c in _share_cases() if (c["loss"], json.dumps(c["config"])) == key]:
        y_true, y_pred, sw = _tensors(case["input"])
        sw = sw if case["weighted"] else None
        loss = getattr(distrib.losses, case["loss"])(reduction=case["reduction"], **case["config"])
        total = sum(loss.replica_share(y_true[i:i + 3], y_pred[i:i + 3], None if sw is None else sw[i:i + 3], 6)
                    for i in (0, 3))
        expected = torch.tensor(case["result"], dtype=torch.float64)
        expected = expected.mean() if expected.dim() else expected  # Keras's compiled loss averages "none"
        assert total.item() == pytest.approx(expected.item(), rel=2e-5, abs=2e-6), _case_id(case)


def test_model_fit_runs_the_ps_tutorial_shapes():
    # targets (64,), outputs (64, 10), loss="mse": each output is compared with its example's target
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(64, 10, generator=g), torch.rand(64, generator=g)
    model = distrib.Model(torch.nn.Linear(10, 10))
    model.compile(distrib.optimizers.SGD(learning_rate=0.0), loss="mse")
    history = model.fit(x.numpy(), y.numpy(), batch_size=64, epochs=1, verbose=0)
    with torch.no_grad():
        expected = ((model.module(x) - y[:, None]) ** 2).mean().item()
    assert history.history["loss"] == pytest.approx([expected], rel=1e-5)
