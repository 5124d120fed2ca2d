"""torchmetrics metrics in ``compile(metrics=[...])``: (preds, target) order, epoch accumulation, reset."""
from __future__ import annotations

import pytest
import torch

import distrib

torchmetrics = pytest.importorskip("torchmetrics")

N, BATCH, CLASSES = 24, 6, 3


def _data():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(N, 4, generator=g)
    y = torch.randint(0, CLASSES, (N,), generator=g)
    return x, y


def _model():
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Linear(4, CLASSES))
    model.compile(optimizer=distrib.optimizers.SGD(learning_rate=0.0), loss="sparse_categorical_crossentropy",
                  metrics=[torchmetrics.classification.MulticlassAccuracy(num_classes=CLASSES, average="macro"),
                           torchmetrics.classification.MulticlassF1Score(num_classes=CLASSES, average="macro")])
    return model


def test_epoch_value_is_torchmetrics_on_all_the_epochs_predictions():
    x, y = _data()
    model = _model()
    history = model.fit(x.numpy(), y.numpy(), batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    with torch.no_grad():
        logits = model.module(x)
    for name, cls in (("multiclass_accuracy", torchmetrics.classification.MulticlassAccuracy),
                      ("multiclass_f1_score", torchmetrics.classification.MulticlassF1Score)):
        expected = float(cls(num_classes=CLASSES, average="macro")(logits, y))
        per_batch = [float(cls(num_classes=CLASSES, average="macro")(logits[i:i + BATCH], y[i:i + BATCH]))
                     for i in range(0, N, BATCH)]
        assert abs(sum(per_batch) / len(per_batch) - expected) > 1e-3  # the data tells the two apart
        # accumulated over the epoch and reset between epochs: both epochs log the full-epoch value
        assert history.history[name] == pytest.approx([expected, expected], abs=1e-6)


def test_evaluate_uses_the_same_order_and_accumulation():
    x, y = _data()
    model = _model()
    logs = model.evaluate(x.numpy(), y.numpy(), batch_size=BATCH, verbose=0, return_dict=True)
    with torch.no_grad():
        logits = model.module(x)
    acc = torchmetrics.classification.MulticlassAccuracy(num_classes=CLASSES, average="macro")(logits, y)
    assert logs["multiclass_accuracy"] == pytest.approx(float(acc), abs=1e-6)


def test_list_state_metrics_and_sample_weights_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"BinaryAUROC keeps state 'preds' as a list .*thresholds="):
        distrib.metrics.get(torchmetrics.classification.BinaryAUROC())
    metric = distrib.metrics.get(torchmetrics.classification.BinaryAccuracy())
    assert isinstance(metric, distrib.metrics.TorchMetric) and metric.direction == "up"
    with pytest.raises(ValueError, match="takes no sample_weight"):
        metric.update_state(torch.tensor([1, 0]), torch.tensor([0.9, 0.1]), sample_weight=torch.ones(2))
