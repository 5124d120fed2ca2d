"""Every damaged or forged checkpoint falls back to the newest good one (issue 22, item 4).

Each case writes a valid ``ckpt-1`` and a valid ``ckpt-2``, then forges
``ckpt-2`` -- many with their checksums recomputed, so only parsing and
checking the payload can tell. Restoring the seeds' way
(``latest_checkpoint`` + ``Checkpoint.restore``) and through
``CheckpointManager.restore_or_initialize`` must both restore ``ckpt-1``
exactly, raise a `CheckpointWarning` naming ``ckpt-2`` and the reason, never
raise, and never open anything outside the checkpoint directory.
"""
import hashlib
import json
import os
import sys
import warnings

import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

import distrib
from distrib.checkpoint import CheckpointWarning
from distrib.checkpoint.files.format import dumps_state, loads_state

STATE = "state.safetensors"


# ------------------------------------------------------------ the objects
def _objects(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(4, 3)).pow(2).sum().backward()
    opt.step()
    opt.zero_grad()
    return model, opt


def _checkpoint(model, opt, epoch):
    return distrib.train.Checkpoint(model=model, optimizer=opt, epoch=distrib.train.Variable(epoch))


# ---------------------------------------------------------- forging tools
def _sha(data):
    return hashlib.sha256(data).hexdigest()


def _reseal_manifest(ckpt, manifest):
    mbytes = json.dumps(manifest).encode() if not isinstance(manifest, bytes) else manifest
    (ckpt / "MANIFEST.json").write_bytes(mbytes)
    (ckpt / "COMPLETE").write_bytes(_sha(mbytes).encode())


def _reseal_state(ckpt, data):
    """Replace the state file and recompute its size and checksum, the manifest's and the marker's."""
    (ckpt / STATE).write_bytes(data)
    manifest = json.loads((ckpt / "MANIFEST.json").read_bytes())
    manifest["files"][STATE] = {"sha256": _sha(data), "size": len(data)}
    _reseal_manifest(ckpt, manifest)


def _manifest(ckpt):
    return json.loads((ckpt / "MANIFEST.json").read_bytes())


def _with_manifest(change):
    def forge(ckpt, outside):
        manifest = _manifest(ckpt)
        change(manifest, outside)
        _reseal_manifest(ckpt, manifest)
    return forge


def _with_skeleton(change):
    """Rewrite the state's JSON skeleton (tensors kept), then reseal."""
    def forge(ckpt, outside):
        data = (ckpt / STATE).read_bytes()
        n = int.from_bytes(data[:8], "little")
        meta = json.loads(data[8:8 + n])["__metadata__"]
        skeleton = change(json.loads(meta["distrib.skeleton"]))
        meta["distrib.skeleton"] = skeleton if isinstance(skeleton, str) else json.dumps(skeleton)
        _reseal_state(ckpt, st_save(st_load(data), metadata=meta))
    return forge


def _with_state(change):
    """Rewrite the decoded state (a well-formed file whose values do not fit), then reseal."""
    def forge(ckpt, outside):
        state = loads_state((ckpt / STATE).read_bytes())
        change(state)
        _reseal_state(ckpt, dumps_state(state))
    return forge


def _raw_state(data):
    return lambda ckpt, outside: _reseal_state(ckpt, data)


def _nested_list(depth):
    return "[" * depth + "]" * depth


def _symlink_state(ckpt, outside):
    (ckpt / STATE).unlink()
    os.symlink(outside / "secret.safetensors", ckpt / STATE)


def _symlink_dir(ckpt, outside):
    target = outside / "elsewhere"
    os.rename(ckpt, target)
    os.symlink(target, ckpt)


def _flip_bit(ckpt, outside):
    data = bytearray((ckpt / STATE).read_bytes())
    data[-1] ^= 1
    (ckpt / STATE).write_bytes(bytes(data))


def _huge_tensor_header():
    header = {"t": {"dtype": "F32", "shape": [1 << 20, 1 << 20], "data_offsets": [0, 1 << 42]},
              "__metadata__": {"distrib.format": "1", "distrib.skeleton": json.dumps({"dict": []})}}
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + b"\0" * 16


def _odd_opt_state(index):
    def change(state):
        state["optimizer"]["state"][index]["exp_avg"] = torch.zeros(7)
    return change


def _model_weight_shape(state):
    state["model"]["weight"] = torch.zeros(5, 5)


def _two_groups(state):
    group = dict(state["optimizer"]["param_groups"][0])
    state["optimizer"]["param_groups"] = [dict(group, params=[0]), dict(group, params=[1])]


def _epoch_text(state):
    state["epoch"] = {"value": "one"}


def _model_text(state):
    state["model"] = "weights"


def _opt_not_a_state(state):
    state["optimizer"] = {"state": [], "param_groups": 3}


FORGED = {
    # the manifest and the marker
    "no COMPLETE marker": (lambda c, o: (c / "COMPLETE").unlink(), "COMPLETE"),
    "marker does not match": (lambda c, o: (c / "COMPLETE").write_text("0" * 64), "checksum"),
    "manifest missing": (lambda c, o: (c / "MANIFEST.json").unlink(), "MANIFEST.json"),
    "manifest not JSON": (lambda c, o: _reseal_manifest(c, b"{not json"), "not valid JSON"),
    "manifest nested 100000 deep": (lambda c, o: _reseal_manifest(c, _nested_list(100_000).encode()),
                                    "not valid JSON"),
    "manifest larger than 16 MiB": (lambda c, o: _reseal_manifest(c, b" " * (17 << 20) + b"{}"), "larger than"),
    "manifest is a list": (lambda c, o: _reseal_manifest(c, b"[]"), "not an object"),
    "manifest of another format": (_with_manifest(lambda m, o: m.update(format="pickle")), "not a distrib checkpoint"),
    "manifest files not an object": (_with_manifest(lambda m, o: m.update(files=[STATE])), "'files'"),
    "manifest declares 1 TiB": (_with_manifest(lambda m, o: m["files"][STATE].update(size=1 << 40)), "truncated"),
    "manifest declares 2 TiB": (_with_manifest(lambda m, o: m["files"][STATE].update(size=1 << 41)),
                                "invalid size"),
    "manifest size is text": (_with_manifest(lambda m, o: m["files"][STATE].update(size="12")), "invalid size"),
    "manifest sha256 malformed": (_with_manifest(lambda m, o: m["files"][STATE].update(sha256="x")),
                                  "invalid sha256"),
    "manifest names a parent path": (_with_manifest(lambda m, o: m["files"].update(
        {"../outside/secret.safetensors": m["files"][STATE]})), "not a plain file name"),
    "manifest names an absolute path": (_with_manifest(lambda m, o: m["files"].update(
        {str(o / "secret.safetensors"): m["files"][STATE]})), "not a plain file name"),
    "manifest created is text": (_with_manifest(lambda m, o: m.update(created="now")), "'created'"),
    "manifest info is a list": (_with_manifest(lambda m, o: m.update(info=[1])), "'info'"),
    "state is a link out of the checkpoint": (_symlink_state, "leaves the checkpoint"),
    "checkpoint is a link out of the directory": (_symlink_dir, "leaves its directory"),
    "state has a flipped bit": (_flip_bit, "do not match"),
    "state truncated": (lambda c, o: (c / STATE).write_bytes((c / STATE).read_bytes()[:-9]), "truncated"),
    # forged payloads with recomputed checksums
    "state is a pickle": (_raw_state(b"\x80\x04\x95" + b"\0" * 64), "pickle"),
    "state is a torch.save zip": (_raw_state(b"PK\x03\x04" + b"\0" * 64), "pickle"),
    "state is empty": (_raw_state(b""), "not a safetensors"),
    "safetensors header claims 1 TiB": (_raw_state((1 << 40).to_bytes(8, "little") + b"{}"), "header"),
    "safetensors tensor claims 4 TiB": (_raw_state(_huge_tensor_header()), "not a valid safetensors"),
    "safetensors header not JSON": (_raw_state((5).to_bytes(8, "little") + b"{abcd"), "not a valid safetensors"),
    "state format version 9": (_raw_state(st_save({}, metadata={"distrib.format": "9", "distrib.skeleton": "{}"})),
                               "format version"),
    "skeleton not JSON": (_with_skeleton(lambda s: "{oops"), "damaged state skeleton"),
    "skeleton nested 100000 deep": (_with_skeleton(lambda s: _nested_list(100_000)), "state skeleton"),
    "skeleton nested 500 deep": (_with_skeleton(lambda s: json.loads(_nested_list(500))), "deeper than"),
    "skeleton unknown node": (_with_skeleton(lambda s: {"evil": "os.system"}), "unknown state skeleton node"),
    "skeleton empty node": (_with_skeleton(lambda s: {"dict": [["model", {}]]}), "malformed"),
    "skeleton object numpy scalar": (_with_skeleton(lambda s: {"npscalar": "O", "value": 1}), "malformed"),
    "skeleton unknown numpy dtype": (_with_skeleton(lambda s: {"npscalar": "garbage", "value": 1}), "malformed"),
    "skeleton float tag not a float": (_with_skeleton(lambda s: {"float": "1e999x"}), "malformed"),
    "skeleton dict items not pairs": (_with_skeleton(lambda s: {"dict": [[1, 2, 3]]}), "malformed"),
    "skeleton dict key is a list": (_with_skeleton(lambda s: {"dict": [[[1], 2]]}), "malformed"),
    "skeleton tuple not a list": (_with_skeleton(lambda s: {"tuple": 3}), "malformed"),
    "skeleton names a missing tensor": (_with_skeleton(lambda s: {"dict": [["x", {"tensor": "nope"}]]}),
                                        "does not hold"),
    "skeleton tensor name not text": (_with_skeleton(lambda s: {"dict": [["x", {"tensor": [1]}]]}),
                                      "does not hold"),
    "state is a list, not a Checkpoint": (_with_skeleton(lambda s: [1, 2]), "not a Checkpoint"),
    # well-formed files whose values do not fit the tracked objects
    "model weight of the wrong shape": (_with_state(_model_weight_shape),
                                        "'state/model/weight' is declared (5, 5)"),
    "model state is text": (_with_state(_model_text), "cannot restore 'model'"),
    "optimizer exp_avg of the wrong shape": (_with_state(_odd_opt_state(0)), "exp_avg"),
    "optimizer exp_avg of the wrong shape (bias)": (_with_state(_odd_opt_state(1)), "exp_avg"),
    "optimizer with two groups": (_with_state(_two_groups), "groups"),
    "optimizer state malformed": (_with_state(_opt_not_a_state), "not an optimizer state"),
    "epoch is text": (_with_state(_epoch_text), "cannot restore 'epoch'"),
}


@pytest.fixture
def forged_dir(tmp_path, request):
    """``(directory, outside, expected, forge)``: ckpt-1 and ckpt-2 written, ckpt-2 not yet forged."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret_model, secret_opt = _objects(99)
    (outside / "secret.safetensors").write_bytes(dumps_state(_checkpoint(secret_model, secret_opt, 7).state_dict()))
    directory = tmp_path / "ckpts"
    model, opt = _objects(1)
    ckpt = _checkpoint(model, opt, 1)
    ckpt.save(str(directory / "ckpt"))
    expected = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in model.state_dict().items()}
    opt_expected = json.dumps(_jsonable(opt.state_dict()))
    model2, opt2 = _objects(2)
    ckpt2 = _checkpoint(model2, opt2, 2)
    ckpt2.save_counter.assign(1)
    ckpt2.save(str(directory / "ckpt"))
    return directory, outside, (expected, opt_expected)


def _jsonable(value):
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


class _Outside:
    """Records every file opened under ``root`` but outside ``inside`` while active."""

    active = None

    def __init__(self, root, inside):
        self.root, self.inside, self.seen = str(root), str(inside), []

    def __enter__(self):
        _Outside.active = self
        return self

    def __exit__(self, *exc):
        _Outside.active = None


def _audit(event, args):
    watcher = _Outside.active
    if watcher is None or event != "open" or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    path = os.path.realpath(os.fsdecode(args[0]))
    if path.startswith(watcher.root) and not path.startswith(watcher.inside):
        watcher.seen.append(path)


sys.addaudithook(_audit)


def _restore(directory, how):
    model, opt = _objects(3)  # different values: a silent no-op restore would show
    ckpt = _checkpoint(model, opt, 0)
    if how == "seed":
        status = ckpt.restore(distrib.train.latest_checkpoint(str(directory)))
        path = status.path
    else:
        manager = distrib.train.CheckpointManager(ckpt, str(directory), max_to_keep=2)
        path = manager.restore_or_initialize()
        assert manager.latest_checkpoint == path  # issue 41: it kept naming the skipped checkpoint
    return ckpt, model, opt, path


#: Through the manager in the default run (one per kind of damage); every case in the slow run.
MANAGER_DEFAULT = {"manifest declares 1 TiB", "safetensors header claims 1 TiB", "state is a pickle",
                   "skeleton nested 100000 deep", "optimizer exp_avg of the wrong shape",
                   "model weight of the wrong shape", "checkpoint is a link out of the directory"}
CASES = ([pytest.param(case, "seed", id=f"{case}-seed") for case in sorted(FORGED)]
         + [pytest.param(case, "manager", id=f"{case}-manager",
                         marks=() if case in MANAGER_DEFAULT else pytest.mark.slow) for case in sorted(FORGED)])


@pytest.mark.parametrize("case, how", CASES)
def test_a_forged_newer_checkpoint_falls_back_to_the_older_one(forged_dir, case, how):
    directory, outside, (expected, opt_expected) = forged_dir
    forge, reason = FORGED[case]
    forge(directory / "ckpt-2", outside)
    with warnings.catch_warnings(record=True) as caught, _Outside(directory.parent, directory) as watcher:
        warnings.simplefilter("always")
        ckpt, model, opt, restored = _restore(directory, how)
    messages = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    assert any("ckpt-2" in m and reason in m for m in messages), (case, messages)
    assert int(ckpt.epoch) == 1
    assert all(torch.equal(expected[k], v) for k, v in model.state_dict().items())
    assert json.dumps(_jsonable(opt.state_dict())) == opt_expected
    assert restored == str(directory / "ckpt-1")  # issue 41: the manager returned the one it skipped
    assert watcher.seen == [], f"opened outside the checkpoint directory: {watcher.seen}"
    model(torch.ones(2, 3)).sum().backward()
    opt.step()  # the restored optimizer state fits its parameters


@pytest.mark.parametrize("index", [
    b"{", b"[" * 100_000 + b"]" * 100_000, b"[]", b'{"preserved": 5}', b'{"preserved": [1]}',
    b'{"last_preserved_time": {"a": 1}}', b'{"last_preserved_time": "x"}', b" " * (2 << 20)])
def test_a_damaged_index_is_named_and_the_listing_decides(forged_dir, index):
    directory, _, _ = forged_dir
    (directory / "checkpoint").write_bytes(index)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ckpt, _, _, restored = _restore(directory, "manager")
    messages = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    assert any(str(directory / "checkpoint") in m and "unreadable checkpoint index" in m for m in messages)
    assert restored == str(directory / "ckpt-2") and int(ckpt.epoch) == 2


def test_a_restore_that_fails_leaves_every_object_as_it_was(tmp_path):
    model, opt = _objects(1)
    path = _checkpoint(model, opt, 1).write(str(tmp_path / "only"))
    _with_state(_odd_opt_state(0))(tmp_path / "only", None)
    fresh, fresh_opt = _objects(3)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    ckpt = _checkpoint(fresh, fresh_opt, 0)
    with pytest.raises(distrib.checkpoint.CheckpointRestoreError, match="exp_avg"):
        ckpt.restore(path)  # nothing older to fall back to
    assert all(torch.equal(before[k], v) for k, v in fresh.state_dict().items())
    assert int(ckpt.epoch) == 0 and int(ckpt.save_counter) == 0
