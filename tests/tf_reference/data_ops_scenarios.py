"""tf.data operator scenarios (window, scan, group_by_window, ...) written once for TF and distrib.

``scenarios(D, ops)`` returns name -> a zero-argument function giving either a
dataset (its elements, ``element_spec`` and dtypes are recorded) or a value
(``reduce``, ``get_single_element``). `generate_data_ops.py` runs them on
TensorFlow 2.21 and `tests/unit/test_tf_data_ops.py` replays them on distrib.
`describe` turns either backend's elements and specs into the same JSON.
"""
from typing import Any, Callable, Dict

__all__ = ["scenarios", "describe", "spec_json", "plain_value", "UNORDERED"]


def plain_value(value: Any, is_dataset: Callable[[Any], bool], ragged_list: Callable[[Any], Any]) -> Any:
    """An element as JSON; nested datasets become lists of their elements, ragged batches nested lists."""
    import numpy as np

    if is_dataset(value):
        return {"dataset": [plain_value(e, is_dataset, ragged_list) for e in value]}
    ragged = ragged_list(value)
    if ragged is not None:
        return {"ragged": ragged}
    if isinstance(value, dict):
        return {str(k): plain_value(v, is_dataset, ragged_list) for k, v in sorted(value.items())}
    if isinstance(value, (tuple, list)):
        return [plain_value(v, is_dataset, ragged_list) for v in value]
    if hasattr(value, "numpy"):
        value = value.numpy()
    if isinstance(value, (bytes, np.bytes_)):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return plain_value(value.tolist(), is_dataset, ragged_list) if value.dtype.kind in "SO" else value.tolist()
    if isinstance(value, np.generic):
        return value.item() if not isinstance(value, np.str_) else str(value)
    return value


def spec_json(spec: Any, leaf: Callable[[Any], Any]) -> Any:
    """A spec structure as JSON, ``leaf`` describing one leaf spec."""
    if isinstance(spec, dict):
        return {str(k): spec_json(v, leaf) for k, v in sorted(spec.items())}
    if isinstance(spec, (tuple, list)):
        return [spec_json(v, leaf) for v in spec]
    return leaf(spec)


def describe(make: Callable[[], Any], is_dataset, ragged_list, leaf_spec) -> Dict[str, Any]:
    """Run one scenario: ``{"elements", "spec"}`` for a dataset, ``{"value"}`` otherwise, ``{"error"}``."""
    try:
        out = make()
        if is_dataset(out):
            return {"elements": [plain_value(e, is_dataset, ragged_list) for e in out],
                    "spec": spec_json(out.element_spec, leaf_spec), "cardinality": int(out.cardinality())}
        return {"value": plain_value(out, is_dataset, ragged_list)}
    except Exception as exc:  # the library's own error is recorded as the behaviour to match
        return {"error": type(exc).__name__}


def _gen_lengths():
    for n in [1, 4, 2, 6, 3, 5, 7, 2, 8]:
        yield list(range(1, n + 1))


#: scenarios whose order is each library's own (random); compared as multisets
UNORDERED = {"sample_from_datasets_seeded"}


def scenarios(D, ops) -> Dict[str, Callable[[], Any]]:
    """name -> zero-argument function building the dataset (or computing the value)."""
    words = ["b", "a", "b", "c", "a", "d"]
    return {
        # dtypes and shapes of sources and batching
        "slices_python_ints": lambda: D.from_tensor_slices([1, 2, 3]),
        "slices_python_floats": lambda: D.from_tensor_slices([1.5, 2.0]),
        "slices_python_bools": lambda: D.from_tensor_slices([True, False]),
        "slices_nested_lists": lambda: D.from_tensor_slices(([1, 2], [[1.0, 2.0], [3.0, 4.0]])),
        "slices_int64_array": lambda: D.from_tensor_slices(ops.np_int64([4, 5])),
        "tensors_python_int": lambda: D.from_tensors(5),
        "tensors_python_list": lambda: D.from_tensors([1, 2, 3]),
        "range_default": lambda: D.range(3),
        "range_int32": lambda: D.range(3, output_type=ops.dtype("int32")),
        "batch_partial": lambda: D.range(5).batch(2),
        "batch_drop": lambda: D.range(5).batch(2, drop_remainder=True),
        "batch_of_batches": lambda: D.from_tensor_slices([[1, 2], [3, 4], [5, 6]]).batch(2).batch(1),
        "padded_batch_spec": lambda: D.range(1, 5).map(ops.fill_n).padded_batch(2, padded_shapes=[None]),
        "padded_batch_fixed": lambda: D.range(1, 5).map(ops.fill_n).padded_batch(
            2, padded_shapes=[5], drop_remainder=True),
        "generator_signature": lambda: D.from_generator(
            _gen_lengths, output_signature=ops.spec([None], "int32")),
        "generator_signature_batched": lambda: D.from_generator(
            _gen_lengths, output_signature=ops.spec([None], "int32")).padded_batch(4),
        # window
        "window_size3_shift2": lambda: D.range(7).window(3, 2),
        "window_drop": lambda: D.range(7).window(3, 2, drop_remainder=True),
        "window_stride": lambda: D.range(10).window(3, shift=1, stride=2),
        "window_shift_past_size": lambda: D.range(10).window(2, shift=4),
        "window_default_shift": lambda: D.range(5).window(2),
        "window_tuple": lambda: D.from_tensor_slices(([1, 2, 3, 4, 5], [10.0, 20.0, 30.0, 40.0, 50.0])).window(2),
        "window_dict": lambda: D.from_tensor_slices({"a": [1, 2, 3], "b": ["x", "y", "z"]}).window(2, 1),
        "window_flat_map_batch": lambda: D.range(6).window(3, 1, drop_remainder=True).flat_map(
            lambda w: w.batch(3)),
        # rebatch
        "rebatch_int": lambda: D.range(10).batch(4).rebatch(3),
        "rebatch_drop": lambda: D.range(10).batch(4).rebatch(3, drop_remainder=True),
        "rebatch_list": lambda: D.range(10).batch(4).rebatch([1, 2]),
        "rebatch_list_drop": lambda: D.range(9).batch(4).rebatch([2, 3], drop_remainder=True),
        # scan / reduce / get_single_element
        "scan_sum": lambda: D.range(6).scan(ops.int64(0), lambda s, x: (s + x, s * 2)),
        "scan_tuple_state": lambda: D.from_tensor_slices([1.0, 2.0, 3.0]).scan(
            (0.0, 1.0), lambda s, x: ((s[0] + x, s[1] * x), s[0] + s[1])),
        "reduce_sum": lambda: D.range(5).reduce(ops.int64(0), lambda s, x: s + x),
        "reduce_python_int_state": lambda: D.from_tensor_slices([1, 2, 3]).reduce(0, lambda s, x: s + x),
        "reduce_tuple": lambda: D.from_tensor_slices([1.0, 2.0, 4.0]).reduce(
            (0.0, 0.0), lambda s, x: (s[0] + x, s[1] + x * x)),
        "reduce_empty": lambda: D.range(0).reduce(ops.int64(7), lambda s, x: s + x),
        "single_element": lambda: D.from_tensors(([1, 2], 3.0)).get_single_element(),
        "single_element_two": lambda: D.range(2).get_single_element(),
        "single_element_none": lambda: D.range(0).get_single_element(),
        # unique / take_while
        "unique_ints": lambda: D.from_tensor_slices([1, 3, 1, 2, 3, 5, 2]).unique(),
        "unique_strings": lambda: D.from_tensor_slices(words).unique(),
        "take_while": lambda: D.range(10).take_while(lambda x: x < 4),
        "take_while_none": lambda: D.range(10).take_while(lambda x: x > 4),
        # group_by_window / bucket_by_sequence_length
        "group_by_window": lambda: D.range(10).group_by_window(
            key_func=lambda x: x % 3, reduce_func=lambda k, w: w.batch(2), window_size=2),
        "group_by_window_size_func": lambda: D.range(12).group_by_window(
            key_func=lambda x: x % 2, reduce_func=lambda k, w: w.batch(5).map(lambda b: (k, b)),
            window_size_func=lambda k: k + 2),
        "bucket_padded": lambda: D.from_generator(
            _gen_lengths, output_signature=ops.spec([None], "int32")).bucket_by_sequence_length(
            ops.length, bucket_boundaries=[3, 5], bucket_batch_sizes=[2, 2, 2]),
        "bucket_to_boundary": lambda: D.from_generator(
            _gen_lengths, output_signature=ops.spec([None], "int32")).take(8).bucket_by_sequence_length(
            ops.length, bucket_boundaries=[3, 5, 9], bucket_batch_sizes=[2, 2, 3, 1],
            pad_to_bucket_boundary=True, padding_values=-1),
        "bucket_drop": lambda: D.from_generator(
            _gen_lengths, output_signature=ops.spec([None], "int32")).bucket_by_sequence_length(
            ops.length, bucket_boundaries=[4], bucket_batch_sizes=[2, 3], drop_remainder=True),
        # choose / sample / counter
        "choose_from_datasets": lambda: D.choose_from_datasets(
            [D.range(3), D.range(10, 15)], D.from_tensor_slices(ops.np_int64([0, 1, 1, 0, 1, 0, 0, 1]))),
        "choose_no_stop": lambda: D.choose_from_datasets(
            [D.range(3), D.range(10, 15)], D.from_tensor_slices(ops.np_int64([0, 1, 1, 0, 1, 0, 0, 1])),
            stop_on_empty_dataset=False),
        "sample_one_weight": lambda: D.sample_from_datasets(
            [D.range(4), D.range(10, 14)], weights=[1.0, 0.0], seed=3),
        "sample_from_datasets_seeded": lambda: D.sample_from_datasets(
            [D.range(4), D.range(10, 14)], seed=3),
        "counter": lambda: D.counter(5, 2).take(4),
        "counter_int32": lambda: D.counter(dtype=ops.dtype("int32")).take(3),
        # ragged_batch
        "ragged_batch": lambda: D.range(1, 6).map(ops.fill_n).ragged_batch(2),
        "ragged_batch_drop_tuple": lambda: D.from_generator(
            _gen_lengths, output_signature=ops.spec([None], "int32")).map(lambda x: (x, 1.0)).ragged_batch(
            2, drop_remainder=True),
        # element_spec of a map: None where the input's batch or the values decide the shape (issue 39)
        "batch_then_map": lambda: D.range(10).batch(3).map(lambda x: x * 2),
        "batch_then_map_tuple": lambda: D.range(7).map(lambda x: (x, x * 2)).batch(3).map(lambda a, b: (a + b, b)),
        "batch_drop_then_map": lambda: D.range(10).batch(3, drop_remainder=True).map(lambda x: x + 1),
        "map_variable_length": lambda: D.range(1, 5).map(ops.fill_n),
        "map_variable_length_then_map": lambda: D.range(1, 5).map(ops.fill_n).map(lambda x: x * 3),
        # RaggedTensor.to_tensor() in a map after ragged_batch
        "ragged_batch_to_tensor": lambda: D.range(1, 6).map(ops.fill_n).ragged_batch(2).map(lambda r: r.to_tensor()),
        "ragged_batch_to_tensor_shape": lambda: D.from_generator(
            _gen_lengths, output_signature=ops.spec([None], "int32")).ragged_batch(3).map(
            lambda r: r.to_tensor(default_value=-1, shape=[None, 4])),
    }
