"""Record what TensorFlow 2.21's ``tf.image`` ops give on `image_ops_scenarios.py`'s inputs, as JSON.

Run with a TensorFlow virtual environment (never distrib's):

    /work/tfvenv/bin/python tests/tf_reference/generate_image_ops.py

It writes ``tests/data/tf_reference/image_ops.json``: per scenario the
result's shape, dtype and values, or the name of the error TensorFlow raised.
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "tf_reference" / "image_ops.json"
sys.path.insert(0, str(HERE))

from generate import _tf  # noqa: E402
from image_ops_scenarios import describe, scenarios  # noqa: E402


class TFOps:
    def __init__(self, tf):
        self.tf = tf

    def tensor(self, array):
        return self.tf.constant(array)

    def dtype(self, name):
        return getattr(self.tf, name)


def main():
    tf = _tf()
    result = {name: describe(make) for name, make in scenarios(tf.image, TFOps(tf)).items()}
    OUT.write_text(json.dumps({"tensorflow": tf.__version__, "scenarios": result}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
