"""TF's "TFRecord and tf.train.Example" tutorial, ported (examples/tutorial_tfrecord.py), against TF 2.21's run.

TensorFlow's run of the original (``tests/tf_reference/tutorial_tfrecord_tf.py``: same observations from
the same numpy seed, same synthetic images, the same seeded initial weights, data in file order) is
stored: the files TF wrote, what TF parsed from them, and the loss Keras logged after every batch.
Checked here: distrib parses TF's files to TF's values; the port, run alone and under
``distrib launch --workers 2``, parses its own files to the same values and logs Keras's losses; and
``fit`` reading TFRecords on 2 workers, one SIGKILLed mid-epoch and restarted from its
``BackupAndRestore`` backup, ends with the weights of an uninterrupted run.
"""
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from distrib.checkpoint.files.format import load_state
from distrib.testing import run_python, run_script

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tutorial_tfrecord.py"
DATA = ROOT / "tests" / "data" / "tf_reference"
TF = json.loads((DATA / "tutorial_tfrecord.json").read_text())
SETTINGS = TF["settings"]
ARGS = ["--observations", SETTINGS["observations"], "--seed", SETTINGS["seed"],
        "--image-seed", SETTINGS["image_seed"], "--epochs", SETTINGS["epochs"],
        "--batch-size", SETTINGS["batch_size"], "--learning-rate", SETTINGS["learning_rate"],
        "--initial-weights-seed", SETTINGS["initial_weights_seed"]]
#: TF 2.21 decodes these colour JPEGs (subsampled chroma) with the fast IDCT and fancy upsampling, a pair
#: Pillow does not offer (see distrib.io.decode_jpeg): 1.3 to 1.9 levels apart on average, at most 11.
JPEG_ATOL, JPEG_MEAN = 12, 2.5
LOSS_RTOL = 1e-5

KILL_WRAPPER = '''
import os, runpy, signal, sys

import distrib

example, kill_step = sys.argv[1], int(sys.argv[2])
attempt = int(os.environ.get("DISTRIB_RESTART_COUNT", "0"))


class Kill(distrib.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if (attempt == 0 and self.model.distribute_strategy.replica_id == 1
                and self.model.train_loop_state.global_step == kill_step):
            os.kill(os.getpid(), signal.SIGKILL)


fit = distrib.Model.fit


def fit_with_kill(self, *args, callbacks=None, **kwargs):
    return fit(self, *args, callbacks=list(callbacks or []) + [Kill()], **kwargs)


distrib.Model.fit = fit_with_kill
sys.argv = [example] + sys.argv[3:]
runpy.run_path(example, run_name="__main__")
'''


def _example_module():
    spec = importlib.util.spec_from_file_location("tutorial_tfrecord", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_run(record):
    assert record["parsed"] == TF["parsed"]
    assert record["images"] == [{k: v for k, v in i.items() if k != "pixels"} for i in TF["images"]]
    assert record["batch_losses"] == pytest.approx(TF["batch_losses"], rel=LOSS_RTOL)
    assert record["epoch_losses"] == pytest.approx(TF["epoch_losses"], rel=LOSS_RTOL)


def test_distrib_parses_the_files_tensorflow_wrote_to_its_values():
    import distrib

    tutorial = _example_module()
    parsed = distrib.data.TFRecordDataset([str(DATA / "tutorial_tfrecord" / "test.tfrecord")]).map(
        tutorial._parse_function)
    assert [{k: tutorial.plain(v) for k, v in e.items()} for e in parsed] == TF["parsed"]
    images = distrib.data.TFRecordDataset(str(DATA / "tutorial_tfrecord" / "images.tfrecords")).map(
        tutorial._parse_image_function)
    seen = 0
    for ours, theirs in zip(images, TF["images"]):
        assert [int(ours[k]) for k in ("height", "width", "depth", "label")] == \
            [theirs[k] for k in ("height", "width", "depth", "label")]
        pixels = distrib.io.decode_jpeg(ours["image_raw"])
        expected = torch.tensor(theirs["pixels"], dtype=torch.int32).reshape(pixels.shape)
        difference = (pixels.int() - expected).abs()
        assert difference.max() <= JPEG_ATOL and difference.float().mean() <= JPEG_MEAN
        seen += 1
    assert seen == 2


@pytest.mark.timeout(200)
def test_the_port_alone_parses_and_logs_what_tensorflow_did(tmp_path):
    record = tmp_path / "record.json"
    result = run_python([str(EXAMPLE), *map(str, ARGS), "--out-dir", str(tmp_path / "files"),
                         "--record", str(record)], timeout=180, cwd=str(tmp_path))
    assert result.returncode == 0, result.output[-3000:]
    _check_run(json.loads(record.read_text()))


@pytest.fixture(scope="module")
def wrapper(tmp_path_factory):
    path = tmp_path_factory.mktemp("kill") / "kill_wrapper.py"
    path.write_text(KILL_WRAPPER.lstrip("\n"), encoding="utf-8")
    return str(path)


def _launch(wrapper, tmp_path, name, kill_step):
    out, weights = tmp_path / name, tmp_path / f"{name}-weights"
    out.mkdir()
    result = run_script(wrapper, num_workers=2, max_restarts=1, timeout=280, cwd=str(out),
                        args=[str(EXAMPLE), kill_step, *ARGS, "--epochs", 3, "--out-dir", str(out / "files"),
                              "--backup-dir", str(out / "backup"), "--save-freq", 3,
                              "--final-weights", str(weights), "--record", str(out / "record.json")])
    assert result.returncode == 0, result.output[-4000:]
    finals = [load_state(str(weights / f"final-{r}.safetensors")) for r in (0, 1)]
    assert all(torch.equal(finals[0][k], finals[1][k]) for k in finals[0])
    return result, finals[0]


@pytest.mark.timeout(600)
def test_fit_on_tfrecords_under_launch_resumes_exactly_after_a_sigkill(wrapper, tmp_path):
    plain, expected = _launch(wrapper, tmp_path, "uninterrupted", -1)
    assert plain.restarts == 0
    record = json.loads((tmp_path / "uninterrupted" / "record.json").read_text())
    epochs = SETTINGS["epochs"]   # 2 workers, global batches: Keras's numbers for the epochs TF ran
    steps = len(TF["batch_losses"])
    assert record["parsed"] == TF["parsed"]
    assert record["batch_losses"][:steps] == pytest.approx(TF["batch_losses"], rel=1e-4)
    assert record["epoch_losses"][:epochs] == pytest.approx(TF["epoch_losses"], rel=1e-4)
    killed, weights = _launch(wrapper, tmp_path, "killed", 11)   # step 11 of 24: mid epoch 2, after the backup at 9
    assert killed.restarts == 1
    assert weights.keys() == expected.keys() and all(torch.equal(weights[k], expected[k]) for k in expected)
