"""Record what TensorFlow 2.21 does with the tf.data operators of `data_ops_scenarios.py`, as JSON.

Run with the TensorFlow virtual environment (never distrib's):

    bench/.tf-venv/bin/python tests/tf_reference/generate_data_ops.py

It writes ``tests/data/tf_reference/data_ops.json``: per scenario the
elements (nested datasets as lists, ragged batches as nested lists), the
``element_spec`` (shape with None for unknown dimensions, dtype name) and the
cardinality, or the value (``reduce``, ``get_single_element``), or the name
of the error TensorFlow raised.
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "tf_reference" / "data_ops.json"
sys.path.insert(0, str(HERE))

from data_ops_scenarios import describe, scenarios  # noqa: E402
from generate import _tf  # noqa: E402


class TFOps:
    def __init__(self, tf):
        self.tf = tf

    def fill_n(self, n):
        return self.tf.fill([n], n)

    def int64(self, v):
        return self.tf.constant(v, self.tf.int64)

    def np_int64(self, values):
        import numpy as np

        return np.asarray(values, dtype=np.int64)

    def spec(self, shape, dtype):
        return self.tf.TensorSpec(shape, getattr(self.tf, dtype))

    def dtype(self, name):
        return getattr(self.tf, name)

    def length(self, x):
        return self.tf.shape(x)[0]


def main():
    tf = _tf()

    def is_dataset(v):
        return isinstance(v, tf.data.Dataset)

    def ragged_list(v):
        return v.to_list() if isinstance(v, tf.RaggedTensor) else None

    def leaf_spec(s):
        if isinstance(s, tf.data.DatasetSpec):
            from data_ops_scenarios import spec_json

            return {"dataset": spec_json(s.element_spec, leaf_spec)}
        out = {"shape": list(s.shape.as_list()) if s.shape.rank is not None else None, "dtype": s.dtype.name}
        if isinstance(s, tf.RaggedTensorSpec):
            out["ragged"] = True
        return out

    result = {name: describe(make, is_dataset, ragged_list, leaf_spec)
              for name, make in scenarios(tf.data.Dataset, TFOps(tf)).items()}
    OUT.write_text(json.dumps({"tensorflow": tf.__version__, "scenarios": result}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
