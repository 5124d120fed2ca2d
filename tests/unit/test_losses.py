"""distrib.losses: Keras semantics checked against hand-computed values."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from distrib import losses
from distrib.losses import Reduction


def close(a, b, tol=1e-5):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64), atol=tol)


# ----------------------------------------------------------- sparse CE
def test_sparse_ce_from_logits_hand_values():
    loss = losses.SparseCategoricalCrossentropy(from_logits=True, reduction=Reduction.NONE)
    out = loss(torch.tensor([0, 1]), torch.tensor([[2.0, 0.0], [0.0, 0.0]]))
    assert close(out, [math.log(1 + math.exp(-2)), math.log(2)])


def test_sparse_ce_logits_matches_torch_cross_entropy():
    torch.manual_seed(0)
    logits, labels = torch.randn(8, 5), torch.randint(0, 5, (8,))
    per_example = losses.SparseCategoricalCrossentropy(from_logits=True).per_example(labels, logits)
    assert close(per_example, F.cross_entropy(logits, labels, reduction="none"))


def test_sparse_ce_probabilities_are_renormalised_and_clipped():
    loss = losses.SparseCategoricalCrossentropy(reduction="none")
    out = loss(torch.tensor([1, 1, 0]), torch.tensor([[0.2, 0.8], [1.0, 3.0], [0.0, 1.0]]))
    assert close(out, [-math.log(0.8), -math.log(0.75), -math.log(1e-7)], tol=1e-4)


def test_sparse_ce_accepts_labels_with_trailing_axis_and_numpy():
    loss = losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    a = loss(np.array([[0], [1]]), torch.tensor([[2.0, 0.0], [0.0, 0.0]]))
    b = loss(torch.tensor([0, 1]), torch.tensor([[2.0, 0.0], [0.0, 0.0]]))
    assert a.shape == (2,) and close(a, b)


@pytest.mark.parametrize("bad", [12, -1])
def test_sparse_ce_label_out_of_range_is_one_clear_line(bad):
    loss = losses.SparseCategoricalCrossentropy(from_logits=True)
    with pytest.raises(ValueError) as err:
        loss(torch.tensor([3, bad]), torch.zeros(2, 10))
    message = str(err.value)
    assert f"labels contain {bad} but the model outputs 10 classes" in message
    assert "\n" not in message


def test_sparse_ce_shape_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"\(3,\).*\(2, 10\)"):
        losses.SparseCategoricalCrossentropy()(torch.tensor([1, 2, 3]), torch.full((2, 10), 0.1))


def test_check_labels_helper_reports_largest_offender():
    from distrib.losses.crossentropy import check_labels

    with pytest.raises(ValueError, match="labels contain 12 but the model outputs 10 classes"):
        check_labels(torch.tensor([0, 12, 11]), 10)
    check_labels(torch.tensor([0, 9]), 10)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_sparse_ce_checks_labels_on_first_accelerator_call():
    loss = losses.SparseCategoricalCrossentropy(from_logits=True)
    with pytest.raises(ValueError, match="labels contain 12 but the model outputs 10 classes"):
        loss(torch.tensor([1, 12], device="cuda"), torch.zeros(2, 10, device="cuda"))
    ok = losses.SparseCategoricalCrossentropy(from_logits=True)
    assert ok(torch.tensor([1], device="cuda"), torch.zeros(1, 10, device="cuda")).device.type == "cuda"


def test_sparse_ce_gradient_flows():
    logits = torch.zeros(2, 3, requires_grad=True)
    losses.SparseCategoricalCrossentropy(from_logits=True)(torch.tensor([0, 2]), logits).backward()
    expected = torch.tensor([[-2 / 3, 1 / 3, 1 / 3], [1 / 3, 1 / 3, -2 / 3]]) / 2
    assert close(logits.grad, expected)


# ----------------------------------------------------------- reductions
def test_reductions_follow_keras():
    y, p = torch.tensor([0, 1, 1, 0]), torch.tensor([[0.5, 0.5], [0.2, 0.8], [0.9, 0.1], [1.0, 0.0]])
    per = losses.SparseCategoricalCrossentropy(reduction="none")(y, p)
    w = torch.tensor([1.0, 2.0, 0.0, 1.0])
    assert close(losses.SparseCategoricalCrossentropy(reduction=Reduction.SUM)(y, p), per.sum())
    for r in (Reduction.SUM_OVER_BATCH_SIZE, Reduction.AUTO, "sum_over_batch_size", "auto"):
        assert close(losses.SparseCategoricalCrossentropy(reduction=r)(y, p), per.mean())
    # weighted: divided by the number of elements, not the sum of weights
    assert close(losses.SparseCategoricalCrossentropy()(y, p, sample_weight=w), (per * w).sum() / 4)
    assert close(losses.SparseCategoricalCrossentropy(reduction="none")(y, p, sample_weight=w), per * w)


def test_unknown_reduction_is_rejected():
    with pytest.raises(ValueError, match="reduction='average'"):
        losses.MeanSquaredError(reduction="average")


def test_per_example_mean_equals_sum_over_batch_size_for_sequences():
    torch.manual_seed(1)
    logits, labels = torch.randn(3, 4, 6), torch.randint(0, 6, (3, 4))
    loss = losses.SparseCategoricalCrossentropy(from_logits=True)
    per = loss.per_example(labels, logits)
    assert per.shape == (3,)
    assert close(per.mean(), loss(labels, logits))
    w = torch.tensor([1.0, 0.0, 2.0])
    assert close(loss.per_example(labels, logits, sample_weight=w).mean(), loss(labels, logits, sample_weight=w))


# ------------------------------------------------------ categorical CE
def test_categorical_ce_equals_sparse_on_one_hot():
    torch.manual_seed(2)
    logits, labels = torch.randn(5, 4), torch.randint(0, 4, (5,))
    for from_logits, pred in ((True, logits), (False, logits.softmax(-1))):
        cat = losses.CategoricalCrossentropy(from_logits=from_logits, reduction="none")(F.one_hot(labels, 4), pred)
        sparse = losses.SparseCategoricalCrossentropy(from_logits=from_logits, reduction="none")(labels, pred)
        assert close(cat, sparse)


def test_categorical_ce_label_smoothing():
    out = losses.CategoricalCrossentropy(label_smoothing=0.2, reduction="none")(
        torch.tensor([[1.0, 0.0]]), torch.tensor([[0.5, 0.5]]))
    # smoothed labels [0.9, 0.1]
    assert close(out, [-(0.9 + 0.1) * math.log(0.5)])


def test_categorical_ce_shape_mismatch_suggests_sparse():
    with pytest.raises(ValueError, match=r"\(4,\).*\(4, 3\).*sparse_categorical_crossentropy"):
        losses.CategoricalCrossentropy()(torch.tensor([0, 1, 2, 1]), torch.full((4, 3), 1 / 3))


# ------------------------------------------------------------ binary CE
def test_binary_ce_probabilities_hand_values():
    out = losses.BinaryCrossentropy(reduction="none")(torch.tensor([[1.0], [0.0]]), torch.tensor([[0.9], [0.2]]))
    assert close(out, [-math.log(0.9), -math.log(0.8)])


def test_binary_ce_averages_last_axis_and_handles_rank_one():
    y, p = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.9, 0.2]])
    assert close(losses.BinaryCrossentropy(reduction="none")(y, p), [(-math.log(0.9) - math.log(0.8)) / 2])
    # Keras averages rank-1 inputs into one value, whatever the reduction; per_example keeps one per example.
    rank1 = losses.BinaryCrossentropy(reduction="none")
    assert close(rank1(torch.tensor([1.0, 0.0]), torch.tensor([0.9, 0.2])), (-math.log(0.9) - math.log(0.8)) / 2)
    assert close(rank1.per_example(torch.tensor([1.0, 0.0]), torch.tensor([0.9, 0.2])),
                 [-math.log(0.9), -math.log(0.8)])


def test_binary_ce_logits_equal_probabilities_of_sigmoid():
    logits = torch.tensor([[2.0], [-1.0], [0.3]])
    y = torch.tensor([1.0, 0.0, 1.0])
    a = losses.BinaryCrossentropy(from_logits=True, reduction="none")(y, logits)
    b = losses.BinaryCrossentropy(reduction="none")(y, torch.sigmoid(logits))
    assert a.shape == (3,) and close(a, b, tol=1e-5)


def test_binary_ce_label_smoothing_and_clipping():
    out = losses.BinaryCrossentropy(label_smoothing=0.5, reduction="none")(torch.tensor([1.0]), torch.tensor([1.0]))
    # label 0.75, prediction clipped to 1 - 1e-7 (as rounded in float32, like Keras)
    clipped = float(torch.tensor(1 - 1e-7, dtype=torch.float32))
    expected = -(0.75 * math.log(clipped) + 0.25 * math.log(1 - clipped))
    assert close(out, [expected], tol=1e-4)


# ----------------------------------------------------------- regression
def test_mse_and_mae_hand_values():
    y, p = torch.zeros(2, 2), torch.tensor([[1.0, 1.0], [1.0, 3.0]])
    assert close(losses.MeanSquaredError().per_example(y, p), [1.0, 5.0])
    assert close(losses.MeanSquaredError()(y, p), 3.0)
    assert close(losses.MeanAbsoluteError(reduction="none")(y, p), [1.0, 2.0])
    assert close(losses.mse(torch.tensor([1.0, 2.0]), torch.tensor([[2.0], [4.0]])), [1.0, 4.0])


def test_mse_refuses_silent_broadcast():
    with pytest.raises(ValueError, match=r"\(4,\).*\(4, 10\)"):
        losses.MeanSquaredError()(torch.zeros(4), torch.zeros(4, 10))


def test_sample_weight_shape_error_names_shapes():
    with pytest.raises(ValueError, match="sample_weight of shape"):
        losses.MeanSquaredError()(torch.zeros(4, 2), torch.ones(4, 2), sample_weight=torch.ones(3))


# -------------------------------------------------------------- registry
@pytest.mark.parametrize("name, cls", [
    ("sparse_categorical_crossentropy", losses.SparseCategoricalCrossentropy),
    ("categorical_crossentropy", losses.CategoricalCrossentropy),
    ("binary_crossentropy", losses.BinaryCrossentropy),
    ("mse", losses.MeanSquaredError), ("mean_squared_error", losses.MeanSquaredError),
    ("mae", losses.MeanAbsoluteError), ("mean_absolute_error", losses.MeanAbsoluteError),
    ("BinaryCrossentropy", losses.BinaryCrossentropy),
])
def test_get_resolves_keras_names(name, cls):
    obj = losses.get(name)
    assert type(obj) is cls and obj.reduction is Reduction.AUTO
    assert obj.from_logits is False if hasattr(obj, "from_logits") else True


def test_get_passes_objects_and_wraps_callables():
    obj = losses.SparseCategoricalCrossentropy(from_logits=True)
    assert losses.get(obj) is obj and losses.get(None) is None

    def squared(y_true, y_pred):
        return (y_true - y_pred) ** 2

    wrapped = losses.get(squared)
    assert wrapped.name == "squared"
    assert close(wrapped.per_example(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.0])), [1.0, 4.0])
    scalar = losses.get(lambda y, p: (y - p).abs().mean())
    assert close(scalar.per_example(torch.zeros(3), torch.ones(3)), [1.0, 1.0, 1.0])


def test_get_wraps_torch_loss_modules_in_keras_argument_order():
    torch.manual_seed(3)
    logits, labels = torch.randn(4, 3), torch.randint(0, 3, (4,))
    wrapped = losses.get(torch.nn.CrossEntropyLoss())
    assert close(wrapped.per_example(labels, logits), F.cross_entropy(logits, labels, reduction="none"))
    assert close(wrapped(labels, logits), F.cross_entropy(logits, labels))


def test_get_unknown_name_lists_known_ones():
    with pytest.raises(ValueError, match="unknown loss 'hingee'.*sparse_categorical_crossentropy"):
        losses.get("hingee")
    with pytest.raises(TypeError):
        losses.get(3)


def test_serialize_round_trip_and_refusal():
    original = losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1, reduction="sum", name="cce")
    config = losses.serialize(original)
    import json

    restored = losses.deserialize(json.loads(json.dumps(config)))
    assert type(restored) is losses.CategoricalCrossentropy
    assert restored.get_config() == original.get_config()
    with pytest.raises(ValueError, match="cannot deserialise loss class 'os.system'"):
        losses.deserialize({"class_name": "os.system", "config": {}})
    with pytest.raises(ValueError, match="cannot be saved"):
        losses.get(lambda y, p: y).get_config()
