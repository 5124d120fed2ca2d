"""`SidecarEvaluator` in one process over checkpoints written by `CheckpointManager`."""
import json
import os

import pytest
import torch

import distrib
from distrib.checkpoint.files.storage import MARKER_NAME, CheckpointWarning
from distrib.train import Checkpoint, CheckpointManager
from distrib.training.sidecar.evaluator import SidecarEvaluatorError
from distrib.training.sidecar.state import SidecarStateError

X = torch.randn(32, 3, generator=torch.Generator().manual_seed(0))
Y = (X.sum(dim=1) > 0).long()


def _module():
    torch.manual_seed(3)
    return torch.nn.Linear(3, 2)


def _model():
    model = distrib.Model(_module())
    model.compile(loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def _data():
    return distrib.data.Dataset.from_tensor_slices((X, Y)).batch(8)


class Trainer:
    """Stands in for the chief: changes the weights and saves ckpt-N through a CheckpointManager."""

    def __init__(self, directory):
        self.module = _module()
        self.manager = CheckpointManager(Checkpoint(model=self.module), str(directory), max_to_keep=None)
        self.saved = {}

    def save(self):
        with torch.no_grad():
            for p in self.module.parameters():
                p.add_(0.25)
        path = self.manager.save()
        self.saved[os.path.basename(path)] = {k: v.clone() for k, v in self.module.state_dict().items()}
        return path


def _evaluator(ckpt_dir, log_dir, **kwargs):
    kwargs.setdefault("timeout", 0)
    return distrib.SidecarEvaluator(_model(), _data(), checkpoint_dir=str(ckpt_dir), log_dir=str(log_dir),
                                    poll_interval=0.01, **kwargs)


def _names(entries):
    return [e["checkpoint"] for e in entries]


def test_each_checkpoint_once_with_its_own_weights_and_a_restart_skips_what_was_done(tmp_path):
    trainer = Trainer(tmp_path / "ckpt")
    trainer.save(), trainer.save()
    first = _evaluator(tmp_path / "ckpt", tmp_path / "logs").start()
    assert _names(first) == ["ckpt-1", "ckpt-2"]
    for entry in first:
        reference = _model()
        reference.module.load_state_dict(trainer.saved[entry["checkpoint"]])
        expected = reference.evaluate(_data(), verbose=0, return_dict=True)
        assert entry["metrics"] == pytest.approx({k: float(v) for k, v in expected.items()})
    trainer.save()
    again = _evaluator(tmp_path / "ckpt", tmp_path / "logs")
    assert _names(again.start()) == ["ckpt-3"]
    assert _names(again.evaluated) == ["ckpt-1", "ckpt-2", "ckpt-3"]
    assert _evaluator(tmp_path / "ckpt", tmp_path / "logs").start() == []


def test_stops_after_the_checkpoint_numbered_max_evaluations(tmp_path):
    trainer = Trainer(tmp_path / "ckpt")
    for _ in range(3):
        trainer.save()
    done = _evaluator(tmp_path / "ckpt", tmp_path / "logs", max_evaluations=2, timeout=None).start()
    assert _names(done) == ["ckpt-1", "ckpt-2"]
    assert _evaluator(tmp_path / "ckpt", tmp_path / "logs", max_evaluations=2, timeout=None).start() == []


def test_damaged_checkpoint_is_skipped_once_a_newer_one_exists(tmp_path):
    trainer = Trainer(tmp_path / "ckpt")
    paths = [trainer.save() for _ in range(3)]
    target = os.path.join(paths[1], "state.safetensors")
    data = bytearray(open(target, "rb").read())
    data[len(data) // 2] ^= 0x10
    open(target, "wb").write(bytes(data))
    with pytest.warns(CheckpointWarning, match="ckpt-2"):
        done = _evaluator(tmp_path / "ckpt", tmp_path / "logs").start()
    assert _names(done) == ["ckpt-1", "ckpt-3"]


def test_incomplete_newest_checkpoint_waits_until_it_is_complete(tmp_path):
    trainer = Trainer(tmp_path / "ckpt")
    trainer.save()
    newest = trainer.save()
    marker = os.path.join(newest, MARKER_NAME)
    kept = open(marker, "rb").read()
    os.remove(marker)
    assert _names(_evaluator(tmp_path / "ckpt", tmp_path / "logs").start()) == ["ckpt-1"]
    open(marker, "wb").write(kept)
    assert _names(_evaluator(tmp_path / "ckpt", tmp_path / "logs").start()) == ["ckpt-2"]


@pytest.mark.parametrize("text, expected", [
    ("{not json", "is not valid JSON"),
    ('{"format": "other", "version": 1, "evaluated": []}', "not a distrib side-car evaluator state file"),
    ('{"format": "distrib-sidecar-state", "version": 1, "evaluated": {}}', "field 'evaluated' must be a list"),
    ('{"format": "distrib-sidecar-state", "version": 1, "evaluated": [{"checkpoint": "../x-1", '
     '"number": 1, "metrics": {}}]}', "evaluated[0].checkpoint must be a checkpoint name"),
    ('{"format": "distrib-sidecar-state", "version": 1, "evaluated": ['
     '{"checkpoint": "ckpt-1", "number": 1, "metrics": {}},'
     '{"checkpoint": "ckpt-1", "number": 1, "metrics": {}}]}', "ckpt-1 is listed twice"),
    ('{"format": "distrib-sidecar-state", "version": 1, "evaluated": ['
     '{"checkpoint": "ckpt-1", "number": 1, "metrics": {"loss": "low"}}]}', "metrics must map names to numbers"),
])
def test_a_bad_state_file_is_refused_naming_the_file_and_the_fix(tmp_path, text, expected):
    state = tmp_path / "logs" / "eval" / "sidecar_state.json"
    state.parent.mkdir(parents=True)
    state.write_text(text)
    with pytest.raises(SidecarStateError) as info:
        _evaluator(tmp_path / "ckpt", tmp_path / "logs")
    message = str(info.value)
    assert str(state) in message and expected in message and "delete it" in message
    assert "\n" not in message


def test_checkpoint_without_the_model_names_what_it_has(tmp_path):
    manager = CheckpointManager(Checkpoint(net=_module()), str(tmp_path / "ckpt"), max_to_keep=None)
    path = manager.save()
    with pytest.raises(SidecarEvaluatorError, match=f"{path}: checkpoint tracks no 'model'.*'net'.*model_key"):
        _evaluator(tmp_path / "ckpt", tmp_path / "logs").start()


def test_model_must_be_a_distrib_model(tmp_path):
    with pytest.raises(TypeError, match="distrib.Model"):
        distrib.SidecarEvaluator(_module(), _data(), checkpoint_dir=str(tmp_path))


def test_state_file_lives_in_the_eval_dir_and_is_plain_json(tmp_path):
    Trainer(tmp_path / "ckpt").save()
    _evaluator(tmp_path / "ckpt", tmp_path / "logs").start()
    doc = json.loads((tmp_path / "logs" / "eval" / "sidecar_state.json").read_text())
    assert doc["format"] == "distrib-sidecar-state" and _names(doc["evaluated"]) == ["ckpt-1"]
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path / "logs" / "eval"))


def test_reads_a_checkpoint_of_a_whole_distrib_model(tmp_path):
    trained = _model()
    trained.fit(X, Y, batch_size=8, epochs=1, verbose=0)
    CheckpointManager(Checkpoint(model=trained), str(tmp_path / "ckpt"), max_to_keep=None).save()
    evaluator = _evaluator(tmp_path / "ckpt", tmp_path / "logs")
    (entry,) = evaluator.start()
    expected = trained.evaluate(_data(), verbose=0, return_dict=True)
    assert entry["metrics"] == pytest.approx({k: float(v) for k, v in expected.items()})
    assert all(torch.equal(a, b) for a, b in zip(evaluator.model.module.state_dict().values(),
                                                  trained.module.state_dict().values()))


# ---- what ModelCheckpoint and BackupAndRestore write (issue 49) -------------------------------------
def _fit_with(callbacks, epochs=2):
    trained = _model()
    trained.compile(optimizer=distrib.optimizers.SGD(0.5),
                    loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    trained.fit(X, Y, batch_size=8, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks)
    return trained


@pytest.mark.parametrize("weights_only", [True, False])
def test_evaluates_model_checkpoint_directories_as_tf_pairs_them(tmp_path, weights_only):
    ckpt_dir = tmp_path / "ckpt"
    trained = _fit_with([distrib.callbacks.ModelCheckpoint(str(ckpt_dir) + "/ckpt-{epoch}",
                                                           save_weights_only=weights_only)])
    evaluator = distrib.SidecarEvaluator(_model(), _data(), checkpoint_dir=str(ckpt_dir), max_evaluations=2,
                                         log_dir=str(tmp_path / "logs"), poll_interval=0.01)
    entries = evaluator.start()  # the guide's arguments: ends at ckpt-2, no timeout needed
    assert _names(entries) == ["ckpt-1", "ckpt-2"]
    expected = trained.evaluate(_data(), verbose=0, return_dict=True)
    assert entries[-1]["metrics"] == pytest.approx({k: float(v) for k, v in expected.items()})


def test_evaluates_a_backup_and_restore_directory(tmp_path):
    class Interrupt(distrib.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                raise KeyboardInterrupt  # the job dies after its second backup: the backups stay

    backup_dir = tmp_path / "backup"
    with pytest.raises(KeyboardInterrupt):
        _fit_with([distrib.callbacks.BackupAndRestore(str(backup_dir)), Interrupt()], epochs=3)
    entries = _evaluator(backup_dir, tmp_path / "logs").start()
    assert entries and all(e["checkpoint"].startswith("backup-") for e in entries)


def test_what_it_cannot_use_is_named_in_one_line_once(tmp_path, capsys):
    ckpt_dir = tmp_path / "ckpt"
    Trainer(ckpt_dir).save()
    (ckpt_dir / "ckpt-2.index").write_bytes(b"TF's own format")
    (ckpt_dir / "notes").mkdir()
    evaluator = _evaluator(ckpt_dir, tmp_path / "logs", timeout=0.2)
    assert _names(evaluator.start()) == ["ckpt-1"]
    lines = [line for line in capsys.readouterr().out.splitlines() if "cannot use" in line]
    assert len(lines) == 1, lines
    assert "ckpt-2.index, notes" in lines[0] and str(ckpt_dir) in lines[0]


def test_a_complete_checkpoint_without_weights_is_named_and_skipped(tmp_path, capsys):
    from distrib.checkpoint.files import storage

    ckpt_dir = tmp_path / "ckpt"
    Trainer(ckpt_dir).save()
    with storage.AtomicDirectory(str(ckpt_dir / "ckpt-5"), {}) as d:  # complete, verified, no model in it
        d.write_state("other.safetensors", {"x": torch.zeros(1)})
    entries = _evaluator(ckpt_dir, tmp_path / "logs", timeout=0.2).start()
    out = capsys.readouterr().out
    assert "cannot use ckpt-5: it holds MANIFEST" not in out and "cannot use ckpt-5: it holds" in out
    assert _names(entries) == ["ckpt-1"]
    assert "not a distrib checkpoint named" not in out  # the manager's own files are no unusable entries
