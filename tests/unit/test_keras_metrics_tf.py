"""Every Keras-named metric equals Keras 3.15 (TF 2.21) after several weighted updates.

The expected values are TensorFlow's own, stored by
``tests/tf_reference/generate_keras_losses_metrics.py``. Each metric is also
checked to give the same result from two "replicas" whose summed state is
what `Metric.result` all-reduces.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import distrib
from distrib.metrics.packing import pack, unpack

REFERENCE = json.loads((Path(__file__).resolve().parents[1] / "data" / "tf_reference"
                        / "keras_losses_metrics.json").read_text())
INPUTS = REFERENCE["inputs"]


def _batch(name: str, weighted: bool):
    data = INPUTS[name]
    y_true = torch.tensor(data["y_true"], dtype=torch.float32)
    sw = torch.tensor(data["sample_weight"]) if weighted else None
    return y_true, torch.tensor(data["y_pred"], dtype=torch.float32), sw


def _case_id(case: dict) -> str:
    config = ",".join(f"{k}={v}" for k, v in case["config"].items())
    return f"{case['metric']}({config})-{'+'.join(case['updates'])}-{'w' if case['weighted'] else 'nw'}"


def _build(case: dict):
    return getattr(distrib.metrics, case["metric"])(**case["config"])


@pytest.mark.parametrize("case", REFERENCE["metrics"], ids=_case_id)
def test_metric_matches_keras_after_each_weighted_update(case):
    metric = _build(case)
    for name, expected in zip(case["updates"], case["results"]):
        metric.update_state(*_batch(name, case["weighted"]))
        got = metric.result().double()
        want = torch.tensor(expected, dtype=torch.float64)
        assert got.shape == want.shape and torch.allclose(got, want, rtol=1e-5, atol=1e-5), (name, got, want)


@pytest.mark.parametrize("case", [c for c in REFERENCE["metrics"] if len(c["updates"]) > 1], ids=_case_id)
def test_summed_replica_states_give_the_one_process_value(case):
    # Replica 0 sees the first update, replica 1 the others: the all-reduced (summed) state is the global one.
    first, rest = _build(case), _build(case)
    first.update_state(*_batch(case["updates"][0], case["weighted"]))
    for name in case["updates"][1:]:
        rest.update_state(*_batch(name, case["weighted"]))
    states = first.state_tensors()
    summed = pack(states) + pack(rest.state_tensors())
    got = first.result_from_states(unpack(summed, states)).double()
    want = torch.tensor(case["results"][-1], dtype=torch.float64)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (got, want)


def test_new_metric_names_resolve_and_round_trip():
    for name in ("root_mean_squared_error", "sparse_top_k_categorical_accuracy", "binary_crossentropy",
                 "categorical_crossentropy", "sparse_categorical_crossentropy", "kl_divergence", "r2_score",
                 "f1_score", "mape", "msle", "logcosh", "hinge"):
        metric = distrib.metrics.get(name)
        assert metric.name == name
        again = distrib.metrics.deserialize(distrib.metrics.serialize(metric))
        assert type(again) is type(metric)


def test_state_built_on_the_first_update_restores_and_merges():
    x = _batch("bin_r2", True)
    f1 = distrib.metrics.F1Score(average="macro", threshold=0.5)
    f1.update_state(*x)
    fresh = distrib.metrics.F1Score(average="macro", threshold=0.5)
    assert fresh.result().item() == 0.0 and fresh.state_tensors() == {}
    fresh.load_state_dict(f1.state_dict())     # a resumed run restores before its first batch
    fresh.update_state(*x)
    f1.update_state(*x)
    assert fresh.result().item() == pytest.approx(f1.result().item())


@pytest.mark.parametrize("case", REFERENCE["metrics"], ids=_case_id)
def test_every_reference_metric_round_trips_through_its_config(case):
    metric = _build(case)
    again = distrib.metrics.deserialize(distrib.metrics.serialize(metric))
    assert type(again) is type(metric) and again.get_config() == metric.get_config()
