"""The tf.data surface scenarios, written once for TensorFlow and for distrib.

Each scenario builds a pipeline from ``D`` (``tf.data.Dataset`` or
``distrib.data.Dataset``) and a few backend helpers in ``ops`` (what cannot be
written the same way in both), so `generate_surface.py` (TF) and
`replay_surface.py` (distrib) run the same program. `plain` turns elements of
either backend into JSON (bytes and str both become str).
"""
from pathlib import Path
from typing import Any, Dict, List

__all__ = ["pipelines", "plain", "METRIC_CASES", "METRIC_INPUTS", "LOOKUP_CASES", "LOOKUP_INPUTS",
           "write_text_files", "TEXT_FILES", "TEXT_PIPELINES", "SHARD_POLICIES", "GLOBAL_BATCH",
           "UNORDERED"]


def plain(value: Any) -> Any:
    """An element of either backend as JSON: lists of numbers and str, dicts, nested lists."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in sorted(value.items())}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if hasattr(value, "numpy"):
        value = value.numpy()
    if isinstance(value, (bytes, np.bytes_)):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "SO":
            return plain(value.tolist())
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item() if not isinstance(value, np.str_) else str(value)
    return value


def _gen_rows():
    for i in range(5):
        yield ("w" * (i + 1), list(range(i % 3)))


def _gen_dict(n):
    for i in range(int(n)):
        yield {"id": i, "x": [float(i)] * 2}


def pipelines(D, ops) -> Dict[str, Any]:
    """name -> dataset; the same program on both backends."""
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog"]
    return {
        "strings_slices": D.from_tensor_slices(words),
        "strings_batch": D.from_tensor_slices((words, list(range(9)))).batch(4),
        "strings_unbatch_shard": D.from_tensor_slices(words).batch(2).unbatch().shard(2, 1),
        "strings_map": D.from_tensor_slices(words).map(ops.upper),
        "strings_shuffle": D.from_tensor_slices(words).shuffle(9, seed=3).batch(3),
        "enumerate": D.range(10, 15).enumerate(),
        "enumerate_start": D.from_tensor_slices(words[:4]).enumerate(start=7),
        "zip_tuple": D.zip((D.range(5), D.range(100, 103))),
        "zip_args": D.zip(D.range(3), D.from_tensor_slices(words)),
        "zip_dict": D.zip({"a": D.range(4), "b": (D.range(10, 20), D.range(3))}),
        "concatenate": D.range(3).concatenate(D.range(10, 13)).batch(4),
        "interleave_c2_b1": D.range(1, 5).interleave(
            lambda x: D.from_tensors(x).repeat(x), cycle_length=2, block_length=1),
        "interleave_c3_b2": D.range(4).interleave(
            lambda x: D.range(5).map(lambda y: x * 10 + y), cycle_length=3, block_length=2),
        "interleave_parallel": D.range(4).interleave(
            lambda x: D.range(3).map(lambda y: x * 10 + y), cycle_length=2, block_length=2,
            num_parallel_calls=2, deterministic=True),
        "flat_map": D.range(4).flat_map(lambda x: D.range(3).map(lambda y: x * 10 + y).take(x)),
        "padded_batch": D.range(1, 8).map(ops.fill_n).padded_batch(3),
        "padded_batch_shapes": D.range(1, 6).map(ops.fill_n).padded_batch(
            2, padded_shapes=[6], padding_values=ops.int64(-1), drop_remainder=True),
        "padded_batch_tuple": D.range(1, 5).map(lambda n: (ops.fill_n(n), ops.fill_n(n) * 2)).padded_batch(
            3, padded_shapes=([None], [5]), padding_values=(ops.int64(7), ops.int64(0))),
        "padded_batch_2d": D.range(1, 5).map(ops.square_n).padded_batch(2),
        "from_generator_signature": D.from_generator(
            _gen_rows, output_signature=(ops.spec([], "string"), ops.spec([None], "int64"))).padded_batch(2),
        "from_generator_types": D.from_generator(
            _gen_dict, output_types={"id": ops.dtype("int64"), "x": ops.dtype("float32")},
            output_shapes={"id": [], "x": [2]}, args=(4,)).batch(3),
    }


#: Scenarios compared as multisets (the shuffle order is each library's own).
UNORDERED = {"strings_shuffle"}

METRIC_INPUTS = {
    "binary": {"y_true": [0, 1, 1, 1, 0, 1, 0, 0], "y_pred": [0.9, 0.2, 0.6, 0.8, 0.4, 0.5, 0.51, 0.1],
               "sample_weight": [1.0, 2.0, 0.5, 1.0, 1.0, 3.0, 1.0, 0.0]},
    "multiclass": {"y_true": [[0, 0, 1], [0, 1, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]],
                   "y_pred": [[0.1, 0.3, 0.6], [0.5, 0.3, 0.2], [0.4, 0.4, 0.2], [0.2, 0.7, 0.1],
                              [0.3, 0.3, 0.4]],
                   "sample_weight": [1.0, 2.0, 1.0, 0.5, 1.0]},
}

#: name -> (class, kwargs, inputs, use sample_weight)
METRIC_CASES = {
    "precision_default": ("Precision", {}, "binary", False),
    "precision_weighted": ("Precision", {}, "binary", True),
    "precision_thresholds": ("Precision", {"thresholds": [0.0, 0.3, 0.5, 0.55, 1.0]}, "binary", False),
    "precision_top_k": ("Precision", {"top_k": 2}, "multiclass", False),
    "precision_class_id": ("Precision", {"class_id": 1}, "multiclass", True),
    "precision_top_k_class_id": ("Precision", {"top_k": 1, "class_id": 2}, "multiclass", False),
    "recall_default": ("Recall", {}, "binary", False),
    "recall_weighted": ("Recall", {}, "binary", True),
    "recall_thresholds": ("Recall", {"thresholds": [0.0, 0.3, 0.5, 0.55, 1.0]}, "binary", False),
    "recall_top_k": ("Recall", {"top_k": 2}, "multiclass", True),
    "recall_class_id": ("Recall", {"class_id": 0}, "multiclass", False),
    "recall_top_k_class_id": ("Recall", {"top_k": 2, "class_id": 0}, "multiclass", False),
    "top_k_1": ("TopKCategoricalAccuracy", {"k": 1}, "multiclass", False),
    "top_k_2": ("TopKCategoricalAccuracy", {"k": 2}, "multiclass", True),
    "top_k_3": ("TopKCategoricalAccuracy", {"k": 3}, "multiclass", False),
}

LOOKUP_INPUTS = ["fox", "cat", "", "the", "dog", "fox"]
LOOKUP_IDS = [3, 1, 0, 2, 1]
#: name -> (constructor kwargs, inputs)
LOOKUP_CASES = {
    "default": ({"vocabulary": ["the", "fox", "dog"]}, LOOKUP_INPUTS),
    "mask_token": ({"vocabulary": ["the", "fox", "dog"], "mask_token": ""}, LOOKUP_INPUTS),
    "no_oov": ({"vocabulary": ["the", "fox", "dog", "cat", ""], "num_oov_indices": 0}, LOOKUP_INPUTS),
    "batched_2d": ({"vocabulary": ["the", "fox", "dog"]}, [["fox", "cat"], ["dog", "the"]]),
    "invert": ({"vocabulary": ["the", "fox", "dog"], "invert": True}, LOOKUP_IDS),
    "invert_mask": ({"vocabulary": ["the", "fox", "dog"], "mask_token": "[MASK]", "invert": True},
                    LOOKUP_IDS + [4]),
}

TEXT_FILES, LINES_PER_FILE = 4, 3
GLOBAL_BATCH = 4
SHARD_POLICIES = ("AUTO", "FILE", "DATA")


def write_text_files(directory: Path) -> List[str]:
    """``part-k.txt`` holding lines ``k-0``, ``k-1``, ... (one file per shard-able unit)."""
    paths = []
    for k in range(TEXT_FILES):
        path = Path(directory) / f"part-{k}.txt"
        path.write_text("".join(f"{k}-{i}\n" for i in range(LINES_PER_FILE)))
        paths.append(str(path))
    return paths


def TEXT_PIPELINES(D, text_line_dataset, pattern: str, paths: List[str]) -> Dict[str, Any]:  # noqa: N802
    """name -> pipeline of strings, most reading the text files (global batch `GLOBAL_BATCH`)."""
    return {
        "list_files_interleave": D.list_files(pattern, shuffle=False).interleave(
            text_line_dataset, cycle_length=2, block_length=1).batch(GLOBAL_BATCH),
        "text_line_paths": text_line_dataset(paths).batch(GLOBAL_BATCH),
        "slices_interleave": D.from_tensor_slices(paths).interleave(
            text_line_dataset, cycle_length=1).batch(GLOBAL_BATCH),
        "text_line_of_list_files": text_line_dataset(D.list_files(pattern, shuffle=False)).batch(GLOBAL_BATCH),
        # strings in memory; the last global batch holds one string, so a replica gets an empty one
        "strings_partial_batch": D.from_tensor_slices(["s%d" % i for i in range(9)]).batch(GLOBAL_BATCH),
    }
