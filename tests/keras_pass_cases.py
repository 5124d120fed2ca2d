"""distrib's side of the array-pass scenarios (issue 49): TF's stored results, the model and inputs of a case,
and a callback that records the hooks, shared by the one-process and the two-worker tests.

The scenarios themselves (`round_four_scenarios`) are shared with the TensorFlow script that stored the
results, so they cannot import distrib; what builds distrib objects lives here.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch

import distrib

sys.path.insert(0, str(Path(__file__).resolve().parent / "tf_reference"))
import round_four_scenarios as sc  # noqa: E402

#: TF 2.21's stored results per case of ``sc.PASS_CASES``: hook events, history, weights, warnings.
PASSES = json.loads((Path(__file__).resolve().parent / "data" / "tf_reference"
                     / "round_four.json").read_text())["array_passes"]


class EventRecorder(distrib.callbacks.Callback):
    """The epoch, train-batch and test-batch hooks, in call order: ``E0``, ``b0``, ``t0``..."""

    def __init__(self) -> None:
        super().__init__()
        self.events = []

    def on_epoch_begin(self, epoch, logs=None):
        self.events.append(f"E{epoch}")

    def on_train_batch_begin(self, batch, logs=None):
        self.events.append(f"b{batch}")

    def on_test_batch_begin(self, batch, logs=None):
        self.events.append(f"t{batch}")


def linear_model(steps_per_execution: Optional[int] = None) -> distrib.Model:
    """The scenarios' linear model (TF's initial weights), compiled with plain SGD and MSE."""
    kernel, bias = sc.initial_weights()
    net = torch.nn.Linear(4, 1)
    with torch.no_grad():
        net.weight.copy_(torch.from_numpy(kernel.T.copy()))
        net.bias.copy_(torch.from_numpy(bias))
    model = distrib.Model(net)
    extra = {} if steps_per_execution is None else {"steps_per_execution": steps_per_execution}
    model.compile(optimizer=distrib.optimizers.SGD(sc.LR), loss="mse", **extra)
    return model


def pass_case_inputs(name: str) -> Tuple[Tuple[Any, Any], Dict[str, Any]]:
    """``(fit's positional data, its keyword arguments)`` for case ``name``."""
    case = sc.PASS_CASES[name]
    x, y, vx, vy = sc.data()
    kwargs = dict(case["fit"])
    if "val" in case:
        kwargs["validation_data"] = (vx[:case["val"]], vy[:case["val"]])
    data = (x[:case["rows"]], y[:case["rows"]])
    if "dataset_batch" in case:
        data = (distrib.data.Dataset.from_tensor_slices(data).batch(case["dataset_batch"]), None)
    return data, kwargs
