"""Checkpoint, CheckpointManager and latest_checkpoint in one process."""
import errno
import json
import os
import uuid

import pytest
import torch

from distrib.checkpoint.files import storage
from distrib.checkpoint.checkpoint import CheckpointRestoreError, CheckpointSaveError
from distrib.checkpoint.files.storage import CheckpointWarning, CorruptCheckpointError
from distrib.train import Checkpoint, CheckpointManager, Variable, latest_checkpoint


def _objects(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    return model, opt


def _flip_bit(path):
    target = os.path.join(path, "state.safetensors")
    data = bytearray(open(target, "rb").read())
    data[len(data) // 2] ^= 0x10
    open(target, "wb").write(bytes(data))


def test_save_restore_round_trip_in_place(tmp_path):
    model, opt = _objects()
    epoch, scale = Variable(0), torch.zeros(3)
    ckpt = Checkpoint(model=model, optimizer=opt, epoch=epoch, scale=scale)
    epoch.assign(5)
    scale += 2
    path = ckpt.save(str(tmp_path / "ckpt"))
    assert path == str(tmp_path / "ckpt-1") and int(ckpt.save_counter) == 1
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    saved_opt = opt.state_dict()["state"][0]["momentum_buffer"].clone()

    model2, opt2 = _objects(seed=1)
    epoch2, scale2 = Variable(0), torch.zeros(3)
    ckpt2 = Checkpoint(model=model2, optimizer=opt2, epoch=epoch2, scale=scale2)
    ckpt2.restore(path).assert_consumed()
    assert int(epoch2) == 5 and torch.equal(scale2, torch.full((3,), 2.0))
    assert all(torch.equal(saved[k], v) for k, v in model2.state_dict().items())
    assert torch.equal(opt2.state_dict()["state"][0]["momentum_buffer"], saved_opt)
    assert int(ckpt2.save_counter) == 1


def test_restore_status_reports_partial_matches(tmp_path):
    model, _ = _objects()
    path = Checkpoint(model=model, extra=Variable(1)).write(str(tmp_path / "w"))
    other = Checkpoint(model=torch.nn.Linear(3, 2), epoch=Variable(0))
    status = other.restore(path)
    assert status.missing == ["epoch"] and status.unused == ["extra"]
    with pytest.raises(AssertionError, match="not an exact match"):
        status.assert_consumed()
    with pytest.raises(AssertionError, match="epoch"):
        status.assert_existing_objects_matched()
    status.expect_partial().assert_nontrivial_match()
    with pytest.raises(AssertionError, match="nothing was restored"):
        Checkpoint(model=model).restore(None).assert_consumed()


def test_restore_shape_mismatch_names_the_object(tmp_path):
    path = Checkpoint(t=torch.zeros(3)).write(str(tmp_path / "w"))
    with pytest.raises(CheckpointRestoreError, match=r"tensor 'state/t' is declared \(3,\) float32 .*; the tracked "
                                                     r"'t' is \(4,\) float32"):
        Checkpoint(t=torch.zeros(4)).restore(path)


def test_plain_ints_and_untrackables_are_refused():
    with pytest.raises(TypeError, match=r"use distrib\.train\.Variable\(3\)"):
        Checkpoint(epoch=3)
    with pytest.raises(TypeError, match="has no state_dict"):
        Checkpoint(thing=object())


def test_save_interrupted_before_commit_leaves_no_checkpoint(tmp_path, monkeypatch):
    model, _ = _objects()
    ckpt = Checkpoint(model=model)
    manager = CheckpointManager(ckpt, str(tmp_path), max_to_keep=3)
    first = manager.save()

    def crash(self, name, produce):  # every file of a checkpoint is written through write_with
        raise OSError(errno.ENOSPC, "disk full while writing")

    monkeypatch.setattr(storage.AtomicDirectory, "write_with", crash)
    with pytest.raises(CheckpointSaveError, match="disk full while writing"):
        manager.save()
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-1"]
    assert latest_checkpoint(str(tmp_path)) == first
    assert CheckpointManager(Checkpoint(model=model), str(tmp_path), max_to_keep=3).latest_checkpoint == first


def test_max_to_keep_and_numbering(tmp_path):
    ckpt = Checkpoint(v=Variable(0))
    manager = CheckpointManager(ckpt, str(tmp_path), max_to_keep=2)
    paths = [manager.save() for _ in range(4)]
    assert [os.path.basename(p) for p in paths] == ["ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4"]
    assert manager.checkpoints == paths[2:]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-3", "ckpt-4"]
    assert manager.save(checkpoint_number=100) == str(tmp_path / "ckpt-100")
    assert manager.latest_checkpoint == str(tmp_path / "ckpt-100")
    # a new manager over the same directory recovers the kept list from the listing
    again = CheckpointManager(Checkpoint(v=Variable(0)), str(tmp_path), max_to_keep=2)
    assert again.checkpoints == [str(tmp_path / "ckpt-4"), str(tmp_path / "ckpt-100")]
    assert json.loads((tmp_path / "checkpoint").read_text())["latest"] == "ckpt-100"


def test_keep_checkpoint_every_n_hours_preserves(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("distrib.checkpoint.manager.time.time", lambda: clock[0])
    manager = CheckpointManager(Checkpoint(v=Variable(0)), str(tmp_path), max_to_keep=1,
                                keep_checkpoint_every_n_hours=1)
    for _ in range(4):
        clock[0] += 1800.0
        manager.save()
    # saved at 2800, 4600, 6400, 8200: the one at 4600 is the first >= 1h after 1000
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-2", "ckpt-4"]
    assert manager.checkpoints == [str(tmp_path / "ckpt-4")]
    again = CheckpointManager(Checkpoint(v=Variable(0)), str(tmp_path), max_to_keep=1,
                              keep_checkpoint_every_n_hours=1)
    assert again.checkpoints == [str(tmp_path / "ckpt-4")]  # ckpt-2 stays preserved, never swept


def test_checkpoint_interval_with_step_counter(tmp_path):
    step = Variable(0)
    manager = CheckpointManager(Checkpoint(step=step), str(tmp_path), max_to_keep=None,
                                step_counter=step, checkpoint_interval=10)
    saved = []
    for s in range(0, 35, 5):
        step.assign(s)
        saved.append(manager.save(checkpoint_number=s) is not None)
    assert saved == [True, False, True, False, True, False, True]
    step.assign(31)
    assert manager.save(check_interval=False) is not None
    with pytest.raises(ValueError, match="needs a step_counter"):
        CheckpointManager(Checkpoint(step=step), str(tmp_path), 1, checkpoint_interval=5)


@pytest.mark.parametrize("damage", ["flip", "truncate", "marker"])
def test_damaged_newest_is_skipped_with_a_warning(tmp_path, damage):
    model, _ = _objects()
    ckpt = Checkpoint(model=model)
    manager = CheckpointManager(ckpt, str(tmp_path), max_to_keep=3)
    manager.save()
    good = {k: v.clone() for k, v in model.state_dict().items()}
    second = manager.save()
    with torch.no_grad():
        model.weight.add_(1.0)
    newest = manager.save()
    if damage == "flip":
        _flip_bit(newest)
    elif damage == "truncate":
        with open(os.path.join(newest, "state.safetensors"), "r+b") as f:
            f.truncate(40)
    else:
        os.remove(os.path.join(newest, "COMPLETE"))
    with pytest.warns(CheckpointWarning, match=r"skipping damaged checkpoint: .*ckpt-3"):
        assert latest_checkpoint(str(tmp_path)) == second
    restored = Checkpoint(model=torch.nn.Linear(3, 2))
    with pytest.warns(CheckpointWarning, match="ckpt-3"):
        fresh = CheckpointManager(restored, str(tmp_path), max_to_keep=3)
    assert fresh.restore_or_initialize() == second
    assert all(torch.equal(good[k], v) for k, v in restored.model.state_dict().items())
    with pytest.raises(CorruptCheckpointError, match="ckpt-3"):
        Checkpoint(model=torch.nn.Linear(3, 2)).read(newest)  # never loaded, even when asked directly
    direct = Checkpoint(model=torch.nn.Linear(3, 2))
    with pytest.warns(CheckpointWarning, match="skipping checkpoint .*ckpt-3"):
        assert direct.restore(newest).path == second  # restore falls back to the newest good one
    assert all(torch.equal(good[k], v) for k, v in direct.model.state_dict().items())


def test_latest_checkpoint_empty_and_missing_directories(tmp_path):
    assert latest_checkpoint(str(tmp_path)) is None
    assert latest_checkpoint(str(tmp_path / "nope")) is None
    assert CheckpointManager(Checkpoint(v=Variable(0)), str(tmp_path / "nope"), 1).restore_or_initialize() is None


def test_restore_or_initialize_calls_init_fn(tmp_path):
    called = []
    manager = CheckpointManager(Checkpoint(v=Variable(0)), str(tmp_path), 1, init_fn=lambda: called.append(1))
    assert manager.restore_or_initialize() is None and called == [1]


def test_stale_temporaries_are_cleaned_by_the_next_save(tmp_path):
    (tmp_path / ".ckpt-7.tmp-deadbeef").mkdir()
    (tmp_path / ".ckpt-7.tmp-deadbeef" / "state.safetensors").write_bytes(b"partial")
    manager = CheckpointManager(Checkpoint(v=Variable(0)), str(tmp_path), 1)
    assert manager.latest_checkpoint is None
    manager.save()
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-1"]


def test_memory_urls_work_end_to_end():
    root = f"memory://mgr-{uuid.uuid4().hex}"
    v = Variable(0)
    manager = CheckpointManager(Checkpoint(v=v), root, max_to_keep=1)
    for i in range(3):
        v.assign(i)
        manager.save()
    assert manager.checkpoints == [f"{root}/ckpt-3"]
    assert latest_checkpoint(root) == f"{root}/ckpt-3"
    assert storage.list_names(root) == ["checkpoint", "ckpt-3"]
    v.assign(-1)
    CheckpointManager(Checkpoint(v=v), root, max_to_keep=1).restore_or_initialize()
    assert int(v) == 2


def test_pickle_planted_as_checkpoint_is_refused(tmp_path):
    """A torch.save payload with a valid manifest (an attacker who can write files) still never unpickles."""
    model, _ = _objects()
    path = str(tmp_path / "ckpt-1")
    with storage.AtomicDirectory(path) as d:
        import io

        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)
        d.write_bytes("state.safetensors", buf.getvalue())
    from distrib.checkpoint.files.format import UnsafeFileError

    with pytest.warns(CheckpointWarning, match=r"ckpt-1/state\.safetensors: refusing to load a pickle"):
        assert latest_checkpoint(str(tmp_path)) is None  # skipped, nothing older
    with pytest.warns(CheckpointWarning), \
            pytest.raises(UnsafeFileError, match=r"ckpt-1/state\.safetensors: refusing to load a pickle"):
        Checkpoint(model=model).restore(path)  # asked directly, with nothing older to fall back to


def test_variable_behaves_like_a_counter():
    v = Variable(0, name="epoch")
    v.assign_add(2).assign_sub(1)
    assert int(v) == 1 and v.numpy() < 3 and v == 1 and v < 2 and v.dtype == torch.int64
    f = Variable(0.5)
    assert f.dtype == torch.float32 and float(f) == 0.5
    with pytest.raises(ValueError, match="cannot assign shape"):
        v.assign(torch.zeros(2))
