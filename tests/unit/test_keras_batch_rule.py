"""Arrays without ``batch_size``: Keras 3 batches by ``ceil(rows / steps)`` when steps are given.

Compared with TensorFlow 2.21's stored outputs (``round_four.json``,
``batch_rule``; `tests/tf_reference/generate_round_four.py`).
"""
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import distrib

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tf_reference"))
import round_four_scenarios as sc  # noqa: E402

REFERENCE = json.loads((Path(__file__).resolve().parents[1] / "data" / "tf_reference"
                        / "round_four.json").read_text())["batch_rule"]


def _model():
    kernel, bias = sc.initial_weights()
    net = torch.nn.Linear(4, 1)
    with torch.no_grad():
        net.weight.copy_(torch.from_numpy(kernel.T.copy()))
        net.bias.copy_(torch.from_numpy(bias))
    model = distrib.Model(net)
    model.compile(optimizer=distrib.optimizers.SGD(sc.LR), loss="mse")
    return model


def test_fit_with_steps_per_epoch_and_validation_steps_batches_as_keras():
    x, y, vx, vy = sc.data()
    model = _model()
    hist = model.fit(x, y, steps_per_epoch=sc.STEPS, epochs=sc.EPOCHS, shuffle=False, verbose=0,
                     validation_data=(vx, vy), validation_steps=sc.VAL_STEPS)
    expected = REFERENCE["fit_steps"]
    np.testing.assert_allclose(hist.history["loss"], expected["loss"], rtol=1e-5)
    np.testing.assert_allclose(hist.history["val_loss"], expected["val_loss"], rtol=1e-5)
    np.testing.assert_allclose(model.module.weight.detach().numpy().T, expected["weights"][0], rtol=1e-5)
    np.testing.assert_allclose(model.module.bias.detach().numpy(), expected["weights"][1], rtol=1e-5)


def test_fit_with_validation_split_batches_the_training_rows_by_steps():
    x, y, _, _ = sc.data()
    hist = _model().fit(x, y, steps_per_epoch=sc.STEPS, epochs=1, shuffle=False, verbose=0,
                        validation_split=0.2, validation_steps=sc.VAL_STEPS)
    np.testing.assert_allclose(hist.history["loss"], REFERENCE["fit_split"]["loss"], rtol=1e-5)
    np.testing.assert_allclose(hist.history["val_loss"], REFERENCE["fit_split"]["val_loss"], rtol=1e-5)


def test_evaluate_and_predict_with_steps_cover_every_row_as_keras():
    x, y, _, _ = sc.data()
    assert _model().evaluate(x, y, steps=sc.STEPS, verbose=0) == pytest.approx(REFERENCE["evaluate_steps"],
                                                                                 rel=1e-5)
    assert _model().predict(x, steps=sc.STEPS, verbose=0).shape[0] == REFERENCE["predict_rows"]


def test_a_given_batch_size_still_wins_over_steps():
    x, y, _, _ = sc.data()
    assert _model().predict(x, batch_size=10, steps=2, verbose=0).shape[0] == 20
