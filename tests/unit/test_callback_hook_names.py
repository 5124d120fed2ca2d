"""Every hook Keras 3's ``Callback`` defines is distrib's too, called at the moments Keras 3 calls it.

Compared with TensorFlow 2.21's stored record (``round_four.json``,
``callback_hooks``): the hook names of ``keras.callbacks.Callback`` and the
order of the calls of a 2-step `fit` with validation, `evaluate` and
`predict`, each hook also running the base class's (so Keras 2's
``on_batch_begin``/``on_batch_end`` show where Keras 3 calls them).
"""
import json
import sys
from pathlib import Path

import torch

import distrib
from distrib.callbacks import Callback, LambdaCallback

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tf_reference"))
import round_four_scenarios as sc  # noqa: E402

REFERENCE = json.loads((Path(__file__).resolve().parents[1] / "data" / "tf_reference"
                        / "round_four.json").read_text())["callback_hooks"]


def _recorder(calls):
    def recording(name):
        def hook(self, *args, **kwargs):
            calls.append(name)
            return getattr(Callback, name)(self, *args, **kwargs)
        return hook
    return type("Recorder", (Callback,), {name: recording(name) for name in REFERENCE["names"]})()


def _model():
    model = distrib.Model(torch.nn.Linear(4, 1))
    model.compile(optimizer=distrib.optimizers.SGD(sc.LR), loss="mse")
    return model


def test_distrib_callback_defines_every_keras_3_hook():
    ours = sorted(name for name in dir(Callback) if name.startswith("on_"))
    assert ours == REFERENCE["names"]


def test_hooks_are_called_in_keras_3_order_including_keras_2_batch_names():
    x, y, vx, vy = sc.data()
    model = _model()
    calls = []
    model.fit(x[:8], y[:8], batch_size=4, epochs=1, shuffle=False, verbose=0,
              validation_data=(vx[:8], vy[:8]), callbacks=[_recorder(calls)])
    assert calls == REFERENCE["fit"]
    calls.clear()
    model.evaluate(x[:8], y[:8], batch_size=4, verbose=0, callbacks=[_recorder(calls)])
    assert calls == REFERENCE["evaluate"]
    calls.clear()
    model.predict(x[:8], batch_size=4, verbose=0, callbacks=[_recorder(calls)])
    assert calls == REFERENCE["predict"]


def test_a_keras_2_interruption_callback_stops_fit():
    class StopAtBatch(Callback):  # a Keras 2 program's spelling
        def on_batch_end(self, batch, logs=None):
            if batch == 1:
                self.model.stop_training = True

    seen = []
    x, y, _, _ = sc.data()
    _model().fit(x, y, batch_size=10, epochs=3, verbose=0,
                 callbacks=[StopAtBatch(), LambdaCallback(on_batch_begin=lambda b, logs: seen.append(b))])
    assert seen == [0, 1]
