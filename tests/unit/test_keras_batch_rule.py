"""Arrays without ``batch_size``: Keras 3 batches by ``ceil(rows / steps)`` when steps are given.

Compared with TensorFlow 2.21's stored outputs (``round_four.json``,
``batch_rule``; `tests/tf_reference/generate_round_four.py`).
"""
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tf_reference"))
import round_four_scenarios as sc  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from keras_pass_cases import PASSES, EventRecorder, linear_model, pass_case_inputs  # noqa: E402

REFERENCE = json.loads((Path(__file__).resolve().parents[1] / "data" / "tf_reference"
                        / "round_four.json").read_text())["batch_rule"]


def _model():
    return linear_model()


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


@pytest.mark.parametrize("name", sorted(sc.PASS_CASES))
def test_an_epoch_of_arrays_ends_with_the_pass_as_in_keras_3(name):
    """``steps_per_epoch`` past the end of arrays or a finite dataset: the epoch ends there, the next starts a new
    pass, training goes on."""
    case, expected = sc.PASS_CASES[name], PASSES[name]
    model = linear_model(case.get("steps_per_execution"))
    recorder = EventRecorder()
    data, kwargs = pass_case_inputs(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hist = model.fit(*data, shuffle=False, verbose=0, callbacks=[recorder], **kwargs)
    assert recorder.events == expected["events"]
    assert sorted(hist.history) == sorted(expected["history"])
    for key, values in expected["history"].items():
        np.testing.assert_allclose(hist.history[key], values, rtol=1e-5, err_msg=key)
    np.testing.assert_allclose(model.module.weight.detach().numpy().T, expected["weights"][0], rtol=1e-5)
    np.testing.assert_allclose(model.module.bias.detach().numpy(), expected["weights"][1], rtol=1e-5)
    assert not model.stop_training
    ran_out = [w for w in caught if "ran out of data" in str(w.message)]
    assert len(ran_out) == expected["ran_out_warnings"], [str(w.message) for w in ran_out]
    assert all(w.filename == __file__ for w in ran_out), [w.filename for w in ran_out]


def test_evaluate_and_predict_past_the_end_cover_the_data_and_warn_as_keras():
    x, y, _, _ = sc.data()
    with pytest.warns(UserWarning, match="ran out of data: 3 of the 5 steps") as caught:
        loss = _model().evaluate(x[:10], y[:10], batch_size=4, steps=5, verbose=0)
    assert caught[0].filename == __file__
    assert loss == pytest.approx(_model().evaluate(x[:10], y[:10], batch_size=4, verbose=0), rel=1e-6)
    with pytest.warns(UserWarning, match="ran out of data: 3 of the 5 steps") as caught:
        assert _model().predict(x[:10], batch_size=4, steps=5, verbose=0).shape == (10, 1)
    assert caught[0].filename == __file__
