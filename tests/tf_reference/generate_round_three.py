"""Record what TensorFlow 2.21 prints for the three programs issue 39 ported, as JSON.

Run with a TensorFlow virtual environment (never distrib's); distrib's Python
(``DISTRIB_PYTHON``, as for `generate_tutorials.py`) writes the MNIST subset:

    /work/tfvenv/bin/python tests/tf_reference/generate_round_three.py

Writes ``tests/data/tf_reference/round_three_ports.json``: per program its
settings and, for ``alone`` (MirroredStrategy on one CPU) and
``mirrored_2_devices`` (2 virtual CPUs), the ``RESULT`` the TF script
printed, or ``{"error": ...}``: the last line TensorFlow's run ended with.

* ``migrate_mirrored``: `migrate_mirrored_tf.py` (guide "Migrate
  single-worker multiple-GPU training");
* ``keras_guide_multi_gpu``: `keras_guide_multi_gpu_tf.py` (Keras guide
  "Multi-GPU distributed training with TensorFlow") on the MNIST subset;
* ``cifar_resnet_ctl``: `cifar_resnet_ctl_tf.py` (Model Garden CIFAR input,
  ResNet stem, tutorial custom loop), augmentation off.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "tf_reference" / "round_three_ports.json"
sys.path.insert(0, str(HERE))

from generate_tutorials import _result, mnist_subset  # noqa: E402

# tests/distributed/test_round_three_ports.py gives the ports these (TUTORIAL_* variables)
SETTINGS = {
    "migrate_mirrored": {"weights_seed": 11},
    "keras_guide_multi_gpu": {"examples": 1200, "validation": 200, "weights_seed": 12},
    "cifar_resnet_ctl": {"examples": 256, "epochs": 2, "weights_seed": 13},
}


def _run(script, *args):
    proc = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True, text=True,
                          timeout=900, cwd=str(HERE), env=dict(os.environ))
    if proc.returncode:
        lines = [line for line in proc.stderr.splitlines() if "Error" in line and not line.startswith(" ")]
        cause = [line.strip() for line in proc.stderr.splitlines() if line.strip().startswith("(0) ")]
        return {"error": (lines or proc.stderr.splitlines() or ["?"])[-1][:300], "cause": (cause or [""])[0][:300]}
    return _result(proc.stdout)


def main():
    import tensorflow as tf

    record = {"tensorflow": tf.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        data = mnist_subset(Path(tmp) / "mnist.npz", SETTINGS["keras_guide_multi_gpu"]["examples"],
                            SETTINGS["keras_guide_multi_gpu"]["examples"])
        for name, script, extra in (("migrate_mirrored", "migrate_mirrored_tf.py", ()),
                                    ("keras_guide_multi_gpu", "keras_guide_multi_gpu_tf.py", (data,)),
                                    ("cifar_resnet_ctl", "cifar_resnet_ctl_tf.py", ())):
            settings = json.dumps(SETTINGS[name])
            record[name] = {"settings": SETTINGS[name],
                            "alone": _run(script, "1", *extra, settings),
                            "mirrored_2_devices": _run(script, "2", *extra, settings)}
    OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
