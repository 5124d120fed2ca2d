"""Record what TF's distribute tutorials print under TensorFlow 2.21, as JSON.

Run with the TensorFlow virtual environment (never distrib's):

    bench/.tf-venv/bin/python tests/tf_reference/generate_tutorials.py

It runs `tutorial_input_tf.py` three ways and writes
``tests/data/tf_reference/tutorial_distributed_input.json``: ``alone``
(MirroredStrategy on one CPU), ``mirrored_2_devices`` (2 virtual CPUs) and
``multi_worker_2_workers`` (a list: each worker's lines, worker 0 first).
With ``keras`` as argument it only runs `tutorial_keras_tf.py` (the Keras
tutorial's learning rates) and writes ``tutorial_keras_distributed.json``.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "tf_reference" / "tutorial_distributed_input.json"
SCRIPT = str(HERE / "tutorial_input_tf.py")
sys.path.insert(0, str(HERE))

from generate import _free_ports  # noqa: E402


def _result(stdout):
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if len(lines) != 1:
        raise RuntimeError(f"no result:\n{stdout[-3000:]}")
    return json.loads(lines[0][len("RESULT "):])


def _run(mode, env=None, script=SCRIPT):
    proc = subprocess.run([sys.executable, script, mode], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, **(env or {})))
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return _result(proc.stdout)


def _workers():
    ports = _free_ports(2)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    procs = [subprocess.Popen([sys.executable, SCRIPT, "workers"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=dict(os.environ, TF_CONFIG=json.dumps(
                                  {"cluster": cluster, "task": {"type": "worker", "index": i}})))
             for i in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (_, err) in zip(procs, outs):
        if p.returncode:
            raise RuntimeError(err[-3000:])
    return [_result(out) for out, _ in outs]


def main():
    import tensorflow as tf

    if sys.argv[1:] == ["keras"]:
        record = {"tensorflow": tf.__version__, **_run("alone", script=str(HERE / "tutorial_keras_tf.py"))}
        keras_out = OUT.with_name("tutorial_keras_distributed.json")
        keras_out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"wrote {keras_out}")
        return

    record = {"tensorflow": tf.__version__, "alone": _run("1"), "mirrored_2_devices": _run("2"),
              "multi_worker_2_workers": _workers()}
    OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
