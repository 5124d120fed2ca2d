"""A torchmetrics metric in ``compile`` reports the global value across two real worker processes."""
from __future__ import annotations

import pytest
import torch

import distrib
from distrib.testing import run_cluster

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

torchmetrics = pytest.importorskip("torchmetrics")

N, GLOBAL_BATCH, CLASSES = 32, 8, 3


def _data():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(N, 4, generator=g)
    y = torch.randint(0, CLASSES, (N,), generator=g)
    return x, y


def fit_with_torchmetrics():
    """Two epochs of fit; logs one macro accuracy / MSE-style metric per epoch."""
    import torchmetrics as tm

    strategy = distrib.MultiWorkerMirroredStrategy() if "TF_CONFIG" in __import__("os").environ \
        else distrib.get_strategy()
    x, y = _data()
    with strategy.scope():
        torch.manual_seed(0)
        model = distrib.Model(torch.nn.Linear(4, CLASSES))
        model.compile(optimizer=distrib.optimizers.SGD(learning_rate=0.5), loss="sparse_categorical_crossentropy",
                      metrics=[tm.classification.MulticlassAccuracy(num_classes=CLASSES, average="macro"),
                               tm.classification.MulticlassConfusionMatrix(num_classes=CLASSES)])
    history = model.fit(x.numpy(), y.numpy(), batch_size=GLOBAL_BATCH, epochs=2, shuffle=False, verbose=0)
    return {"replicas": strategy.num_replicas_in_sync, "history": history.history}


def test_two_workers_log_the_one_process_value():
    workers = run_cluster(fit_with_torchmetrics, num_workers=2, timeout=200)
    reference = fit_with_torchmetrics()
    assert reference["replicas"] == 1 and [w["replicas"] for w in workers] == [2, 2]
    for worker in workers:
        accuracy = worker["history"]["multiclass_accuracy"]
        assert accuracy == pytest.approx(reference["history"]["multiclass_accuracy"], abs=1e-6)
        # the confusion matrix counts every example of the epoch, from both workers' halves
        for epoch_matrix, reference_matrix in zip(worker["history"]["multiclass_confusion_matrix"],
                                                  reference["history"]["multiclass_confusion_matrix"]):
            assert epoch_matrix == reference_matrix
            assert sum(map(sum, epoch_matrix)) == N
