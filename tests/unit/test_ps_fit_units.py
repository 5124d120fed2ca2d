"""One-process checks of PS fit's input rules and the in-process cluster's arguments."""
from __future__ import annotations

import pytest
import torch

import distrib
from distrib.data.experimental import DatasetCreator
from distrib.training import ps_fit


def test_dataset_creator_wraps_a_function_and_refuses_anything_else():
    dc = DatasetCreator(lambda ctx: ctx.input_pipeline_id)
    assert dc(distrib.data.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=1)) == 1
    with pytest.raises(TypeError, match="DatasetCreator\\(dataset_fn\\) needs a function"):
        DatasetCreator([1, 2, 3])


def test_steps_are_required_with_a_one_line_error():
    with pytest.raises(ValueError, match=r"^fit under ParameterServerStrategy needs steps_per_epoch=N") as info:
        ps_fit._check_steps(None, "steps_per_epoch", "fit")
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"evaluate\(steps=...\) must be a positive int, got 0"):
        ps_fit._check_steps(0, "steps", "evaluate")
    assert ps_fit._check_steps(5, "steps", "evaluate") == 5


def test_inputs_fit_accepts_and_refuses():
    fn = lambda ctx: None  # noqa: E731
    assert ps_fit._dataset_fn(DatasetCreator(fn), None, "fit") is fn
    assert ps_fit._dataset_fn(fn, None, "fit") is fn
    ds = distrib.data.Dataset.from_tensor_slices(torch.arange(4)).batch(2)
    assert ps_fit._dataset_fn(ds, None, "fit")(None) is ds          # every worker gets the whole dataset
    with pytest.raises(ValueError, match="not arrays \\(x, y\\): wrap them"):
        ps_fit._dataset_fn(torch.ones(4, 1), torch.ones(4, 1), "fit")
    with pytest.raises(TypeError, match="got int"):
        ps_fit._dataset_fn(3, None, "evaluate")


def test_batch_size_is_read_from_the_inputs():
    assert ps_fit._batch_size((torch.ones(7, 2), torch.ones(7, 1))) == 7
    assert ps_fit._batch_size(({"features": torch.ones(5, 3)}, torch.ones(5, 1))) == 5


def test_models_outside_parameter_server_strategies_keep_the_ordinary_loop():
    model = distrib.Model(torch.nn.Linear(2, 1))
    assert not ps_fit.uses_parameter_servers(model)


@pytest.mark.parametrize("kwargs, field", [({"num_workers": 0}, "num_workers"), ({"num_ps": -1}, "num_ps"),
                                           ({"num_workers": True}, "num_workers")])
def test_in_process_cluster_refuses_bad_counts(kwargs, field):
    with pytest.raises(ValueError, match=f"create_in_process_cluster: {field} must be an integer >= 1"):
        distrib.testing.create_in_process_cluster(**kwargs)


def test_fit_arguments_for_arrays_are_refused_under_parameter_servers():
    with pytest.raises(ValueError, match=r"fit\(class_weight=...\) is not supported under ParameterServerStrategy"):
        ps_fit.run_ps_fit(None, x=None, y=None, epochs=1, verbose=0, callbacks=None, validation_data=None,
                          validation_steps=None, validation_freq=1, initial_epoch=0, steps_per_epoch=1,
                          class_weight={0: 1.0})
