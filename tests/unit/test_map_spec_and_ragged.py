"""``element_spec`` of a map has None where shapes vary; ``RaggedList.to_tensor`` (issue 39, item 8).

The TensorFlow-recorded scenarios (``batch_then_map``, ``map_variable_length``,
``ragged_batch_to_tensor``...) are in ``test_tf_data_ops.py``; these cover
the edges TF's tracing has no counterpart for.
"""
from __future__ import annotations

import pytest
import torch

from distrib.data import Dataset, TensorSpec
from distrib.data.transforms.windowing import RaggedList


def test_a_function_that_needs_full_batches_keeps_its_fixed_shape():
    def reshape_three(x):
        return x.reshape(3, 1)  # fails on the probe of 2 rows: the traced shape stays fixed
    spec = Dataset.range(9).batch(3).map(reshape_three).element_spec
    assert spec == TensorSpec((3, 1), torch.int64)


def test_dict_elements_get_none_per_component():
    ds = Dataset.from_tensor_slices({"a": torch.arange(7), "b": torch.ones(7, 2)}).batch(3).map(
        lambda d: {"a": d["a"] * 2, "b": d["b"].sum(0)})
    assert ds.element_spec == {"a": TensorSpec((None,), torch.int64), "b": TensorSpec((2,), torch.float32)}


def test_a_one_element_dataset_keeps_its_shape():
    assert Dataset.range(1).map(lambda x: torch.arange(x + 2)).element_spec == TensorSpec((2,), torch.int64)


def test_the_map_is_not_changed_by_reading_its_spec():
    ds = Dataset.range(5).batch(2).map(lambda x: x + 1)
    _ = ds.element_spec
    assert [b.tolist() for b in ds] == [[1, 2], [3, 4], [5]]


def test_to_tensor_pads_rows_of_rank_two():
    ragged = RaggedList([torch.ones(1, 3), torch.full((2, 1), 2.0)])
    dense = ragged.to_tensor(default_value=-1.0)
    assert dense.shape == (2, 2, 3) and dense.dtype == torch.float32
    assert dense[0].tolist() == [[1, 1, 1], [-1, -1, -1]] and dense[1].tolist() == [[2, -1, -1], [2, -1, -1]]


def test_to_tensor_cuts_to_a_given_shape():
    ragged = RaggedList([torch.tensor([1, 2, 3]), torch.tensor([4]), torch.tensor([5, 6])])
    assert ragged.to_tensor(shape=[2, 2]).tolist() == [[1, 2], [4, 0]]


@pytest.mark.parametrize("call, message", [
    (lambda r: r.to_tensor(shape=[None]), r"shape needs 2 entries"),
    (lambda r: r.to_tensor(default_value=torch.zeros(2)), r"takes a scalar"),
    (lambda r: RaggedList([torch.zeros(2), torch.zeros(1, 1)]).to_tensor(), r"different ranks \[1, 2\]"),
])
def test_to_tensor_errors_name_the_culprit(call, message):
    with pytest.raises(ValueError, match=message):
        call(RaggedList([torch.tensor([1, 2]), torch.tensor([3])]))


def test_reading_the_spec_of_a_random_map_leaves_torchs_generator_alone():
    import distrib

    ds = Dataset.from_tensor_slices(torch.zeros(4, 6, 6, 3)).map(lambda x: distrib.image.random_crop(x, [4, 4, 3]))
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    assert ds.element_spec == TensorSpec((4, 4, 3), torch.float32)
    assert torch.equal(torch.random.get_rng_state(), before)
