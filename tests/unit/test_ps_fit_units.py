"""One-process checks of the parameter-server input helpers and the in-process cluster's arguments.

How fit/evaluate treat their input when steps are scheduled (required step
counts, refused array options, dataset functions) is checked through
`Model.fit` in tests/distributed/test_one_loop_callbacks.py.
"""
from __future__ import annotations

import pytest
import torch

import distrib
from distrib.data.experimental import DatasetCreator
from distrib.training.execution.scheduled_executor import batch_rows


def test_dataset_creator_wraps_a_function_and_refuses_anything_else():
    dc = DatasetCreator(lambda ctx: ctx.input_pipeline_id)
    assert dc(distrib.data.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=1)) == 1
    with pytest.raises(TypeError, match="DatasetCreator\\(dataset_fn\\) needs a function"):
        DatasetCreator([1, 2, 3])


def test_batch_size_is_read_from_the_inputs():
    assert batch_rows((torch.ones(7, 2), torch.ones(7, 1))) == 7
    assert batch_rows(({"features": torch.ones(5, 3)}, torch.ones(5, 1))) == 5
    with pytest.raises(ValueError, match="a batch has no tensor with a batch dimension"):
        batch_rows((torch.tensor(1.0), torch.ones(1)))


@pytest.mark.parametrize("kwargs, field", [({"num_workers": 0}, "num_workers"), ({"num_ps": -1}, "num_ps"),
                                           ({"num_workers": True}, "num_workers")])
def test_in_process_cluster_refuses_bad_counts(kwargs, field):
    with pytest.raises(ValueError, match=f"create_in_process_cluster: {field} must be an integer >= 1"):
        distrib.testing.create_in_process_cluster(**kwargs)
