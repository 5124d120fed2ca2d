"""Checkpoints at the size of real models (issue 41, item 1): streamed, and bounded in memory.

A state file is written a tensor at a time from the tensors' own memory and
read back straight into the tensors it restores, so saving and restoring a
model costs about one tensor of extra memory, not two or three copies of the
file. The files stay plain safetensors, readable both ways with the
``safetensors`` package and with earlier distrib versions' reader.
"""
import json
import os
import textwrap
import warnings

import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import load_file as st_load_file

import distrib
from distrib.checkpoint import Checkpoint, CheckpointWarning, CorruptCheckpointError
from distrib.checkpoint.files import storage
from distrib.checkpoint.files import state_file as state_file_module
from distrib.checkpoint.files.format import dumps_state, load_state, loads_state, save_state
from distrib.checkpoint.files.safetensors_io import DTYPES
from distrib.testing.harness import run_python

STATE = "state.safetensors"


def _trained(seed, width=6):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, width), torch.nn.BatchNorm1d(width), torch.nn.Linear(width, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(2):
        model(torch.randn(8, 3)).pow(2).sum().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.values(), b.values())) and list(a) == list(b)


def test_a_checkpoint_file_is_plain_safetensors_both_ways(tmp_path):
    model, opt = _trained(0)
    path = Checkpoint(model=model, optimizer=opt).write(str(tmp_path / "ckpt-1"))
    data = (tmp_path / "ckpt-1" / STATE).read_bytes()
    # the safetensors package and the whole-bytes reader of earlier versions read the new file
    assert torch.equal(st_load_file(str(tmp_path / "ckpt-1" / STATE))["state/model/0.weight"], model[0].weight)
    assert _same(loads_state(data)["model"], model.state_dict())
    # and a checkpoint written the old way (safetensors' own writer) restores with the new reader
    old = tmp_path / "old-1"
    with storage.AtomicDirectory(str(old), {"save_counter": 1}) as d:
        d.write_bytes(STATE, dumps_state(Checkpoint(model=model, optimizer=opt).state_dict()))
    fresh, fresh_opt = _trained(5)
    Checkpoint(model=fresh, optimizer=fresh_opt).restore(str(old)).assert_consumed()
    assert _same(fresh.state_dict(), model.state_dict())
    assert storage.is_complete(path)


@pytest.mark.parametrize("dtype", sorted(DTYPES, key=str))
def test_every_safetensors_dtype_round_trips(tmp_path, dtype):
    torch_dtype = DTYPES[dtype]
    values = torch.arange(12).reshape(3, 4) % 2 if torch_dtype == torch.bool else torch.arange(12).reshape(3, 4)
    tensor = values.to(torch_dtype) if torch_dtype.is_floating_point or torch_dtype == torch.bool \
        else values.to(torch.int64).to(torch_dtype)
    state = {"t": tensor, "strided": tensor.t(), "scalar": tensor[1, 1].clone()}
    save_state(state, str(tmp_path / "s.safetensors"))
    back = load_state(str(tmp_path / "s.safetensors"))
    def raw(t):  # compare bits: NaN-free, but float8 and bool compare best as bytes
        return t.contiguous().reshape(-1).view(torch.uint8)

    for key in state:
        assert back[key].dtype == torch_dtype and back[key].shape == state[key].shape
        assert torch.equal(raw(back[key]), raw(state[key]))
    by_package = st_load((tmp_path / "s.safetensors").read_bytes())
    assert torch.equal(raw(by_package["state/strided"]), raw(tensor.t()))


def test_a_restore_reads_straight_into_the_objects_tensors(tmp_path, monkeypatch):
    model, opt = _trained(0)
    path = Checkpoint(model=model, optimizer=opt).write(str(tmp_path / "ckpt-1"))
    live, live_opt = _trained(7)
    params = [p.data_ptr() for p in live.state_dict().values()]
    moments = [s["exp_avg"].data_ptr() for s in live_opt.state.values()]
    streamed = []
    real = state_file_module.StateFile.stream_into
    monkeypatch.setattr(state_file_module.StateFile, "stream_into",
                        lambda self, targets: streamed.append(sorted(targets)) or real(self, targets))
    Checkpoint(model=live, optimizer=live_opt).restore(path).assert_consumed()
    assert _same(live.state_dict(), model.state_dict())
    assert [p.data_ptr() for p in live.state_dict().values()] == params  # filled in place
    assert moments == [s["exp_avg"].data_ptr() for s in live_opt.state.values()]
    assert all(torch.equal(a["exp_avg"], b["exp_avg"]) for a, b in zip(live_opt.state.values(), opt.state.values()))
    # every module tensor and every optimizer tensor (step, exp_avg, exp_avg_sq) went into place
    assert len(streamed[0]) == len(model.state_dict()) + 3 * len(list(model.parameters()))


def test_a_strided_tensor_and_a_module_with_a_load_hook_restore_as_load_state_dict_would(tmp_path):
    base = torch.arange(12.0).reshape(3, 4)
    hooked = torch.nn.Linear(2, 2)
    with torch.no_grad():
        hooked.weight.fill_(1.0)
    path = Checkpoint(w=base.t(), hooked=hooked).write(str(tmp_path / "ckpt-1"))
    target = torch.zeros(3, 4)
    twice = torch.nn.Linear(2, 2)

    def double(state_dict, prefix, *args):  # a pre-hook that changes the saved values on the way in
        state_dict[prefix + "weight"] = state_dict[prefix + "weight"] * 2
    twice._register_load_state_dict_pre_hook(double)
    Checkpoint(w=target.t(), hooked=twice).restore(path).assert_consumed()
    assert torch.equal(target, base)
    assert torch.equal(twice.weight, torch.full((2, 2), 2.0))  # the hook ran on the saved values


def _forge(path, change):
    """Rewrite the state file with ``change(bytes) -> bytes`` and reseal manifest and marker."""
    import hashlib

    state = os.path.join(path, STATE)
    data = change(open(state, "rb").read())
    open(state, "wb").write(data)
    manifest = json.loads(open(os.path.join(path, "MANIFEST.json"), "rb").read())
    manifest["files"][STATE] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    mbytes = json.dumps(manifest).encode()
    open(os.path.join(path, "MANIFEST.json"), "wb").write(mbytes)
    open(os.path.join(path, "COMPLETE"), "wb").write(hashlib.sha256(mbytes).hexdigest().encode())


def _fine_grained_times(directory):
    probe = os.path.join(directory, "probe")
    seen = set()
    for _ in range(3):
        with open(probe, "wb") as f:
            f.write(b"x")
        seen.add(os.stat(probe).st_ctime_ns)
    os.remove(probe)
    return len(seen) == 3


@pytest.mark.parametrize("proof", ["hash", "inode times"])
def test_a_file_changed_while_it_is_restored_is_caught_and_the_older_one_restored(tmp_path, monkeypatch, proof):
    """A file written less than SETTLED_NS ago is hashed again after it is read in; an older local one is
    proven unchanged by its inode's change time."""
    if proof == "inode times":
        if not _fine_grained_times(tmp_path):
            pytest.skip("this filesystem's change times are too coarse to see two writes in one test")
        monkeypatch.setattr(state_file_module, "SETTLED_NS", 0)
    older, older_opt = _trained(1)
    Checkpoint(model=older, optimizer=older_opt).save(str(tmp_path / "ckpt"))
    newer, newer_opt = _trained(2)
    ckpt = Checkpoint(model=newer, optimizer=newer_opt)
    ckpt.save_counter.assign(1)
    newest = ckpt.save(str(tmp_path / "ckpt"))
    real_verify = state_file_module.StateFile.verify

    def verify_then_flip(self):  # the file changes on disk after it was verified, before it is read in
        real_verify(self)
        if self.path == newest:
            with open(os.path.join(newest, STATE), "r+b") as f:
                f.seek(-1, os.SEEK_END)
                last = f.read(1)
                f.seek(-1, os.SEEK_END)
                f.write(bytes([last[0] ^ 1]))
    monkeypatch.setattr(state_file_module.StateFile, "verify", verify_then_flip)
    live, live_opt = _trained(3)
    with pytest.warns(CheckpointWarning, match="ckpt-2.*changed while it was restored"):
        status = Checkpoint(model=live, optimizer=live_opt).restore(newest)
    assert status.path == str(tmp_path / "ckpt-1")
    assert _same(live.state_dict(), older.state_dict())


def test_a_tensor_too_large_to_read_aside_falls_back_by_name(tmp_path, monkeypatch):
    """A forged tensor that fits no tracked object is read into new memory; if that memory is not
    there, the checkpoint is skipped with a named warning, not a bare MemoryError."""
    older, _ = _trained(1)
    Checkpoint(model=older).save(str(tmp_path / "ckpt"))
    ckpt = Checkpoint(model=_trained(2)[0])
    ckpt.save_counter.assign(1)
    newest = ckpt.save(str(tmp_path / "ckpt"))
    real_read = state_file_module.StateFile.read

    def read(self, names):
        if self.path == newest:
            raise MemoryError()  # as allocating a forged 6 GiB tensor would
        return real_read(self, names)
    monkeypatch.setattr(state_file_module.StateFile, "read", read)
    live, _ = _trained(3)
    with pytest.warns(CheckpointWarning, match="ckpt-2: not enough memory to read"):
        status = Checkpoint(model=live).restore(newest)
    assert status.path == str(tmp_path / "ckpt-1") and _same(live.state_dict(), older.state_dict())


def test_latest_checkpoint_skips_a_state_that_is_not_a_dict(tmp_path):
    """Issue 41: latest_checkpoint named such a forgery without a word (only restore noticed)."""
    model, _ = _trained(1)
    Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    second = Checkpoint(model=model)
    second.save_counter.assign(1)
    newest = second.save(str(tmp_path / "ckpt"))
    _forge(newest, lambda data: dumps_state([1, 2, 3]))
    with pytest.warns(CheckpointWarning, match="ckpt-2.*not a Checkpoint or model state"):
        assert distrib.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-1")


_CAPPED = textwrap.dedent("""
    import resource, sys
    import torch
    from distrib.checkpoint import Checkpoint

    def address_space():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    action, path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.manual_seed(seed)
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024, bias=False) for _ in range(40)])  # 160 MiB
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    checkpoint = Checkpoint(model=model)
    allowed = address_space() + size // 2   # the model, plus half of it again: no second copy fits
    resource.setrlimit(resource.RLIMIT_AS, (allowed, allowed))
    if action == "save":
        checkpoint.write(path)
    else:
        checkpoint.restore(path).assert_consumed()
    print("sum", float(sum(p.double().sum() for p in model.parameters())), "size", size)
""")


def test_save_and_restore_fit_in_half_the_state_size_of_extra_memory(tmp_path):
    """The model is in memory once; with address space capped at half its size on top, both the save
    and the restore go through (the whole-bytes writer and reader of earlier versions do not)."""
    script = tmp_path / "capped.py"
    script.write_text(_CAPPED)
    env = {**os.environ, "MALLOC_ARENA_MAX": "1", "OMP_NUM_THREADS": "1"}
    path = str(tmp_path / "ckpt-1")
    saved = run_python([str(script), "save", path, "1"], env=env, timeout=240)
    assert saved.returncode == 0, saved.stderr[-2000:]
    restored = run_python([str(script), "restore", path, "2"], env=env, timeout=240)
    assert restored.returncode == 0, restored.stderr[-2000:]
    assert saved.stdout.split()[1] == restored.stdout.split()[1]  # seed 2's weights became seed 1's
    assert int(saved.stdout.split()[3]) > 100 * 2**20


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_model_and_optimizer_restore_through_one_tensor_buffers(tmp_path):
    def trained(seed):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.Linear(6, 2)).cuda()
        opt = torch.optim.Adam(model.parameters(), lr=0.05)
        model(torch.randn(8, 3, device="cuda")).pow(2).sum().backward()
        opt.step()
        return model, opt

    model, opt = trained(0)
    path = Checkpoint(model=model, optimizer=opt).write(str(tmp_path / "ckpt-1"))
    live, live_opt = trained(1)
    pointers = [p.data_ptr() for p in live.parameters()]
    Checkpoint(model=live, optimizer=live_opt).restore(path).assert_consumed()
    assert _same(live.state_dict(), model.state_dict()) and [p.data_ptr() for p in live.parameters()] == pointers
    assert all(s["exp_avg"].is_cuda for s in live_opt.state.values())
    assert all(torch.equal(a["exp_avg"], b["exp_avg"]) for a, b in zip(live_opt.state.values(), opt.state.values()))


def test_what_no_tracked_object_takes_is_not_read(tmp_path, monkeypatch):
    model, opt = _trained(0)
    path = Checkpoint(model=model, optimizer=opt).write(str(tmp_path / "ckpt-1"))
    read_aside = []
    real = state_file_module.StateFile.read
    monkeypatch.setattr(state_file_module.StateFile, "read",
                        lambda self, names: read_aside.extend(names) or real(self, names))
    live, _ = _trained(4)
    status = Checkpoint(model=live).restore(path)  # the optimizer's state stays in the file
    assert status.unused == ["optimizer"] and _same(live.state_dict(), model.state_dict())
    assert not [n for n in read_aside if "optimizer" in n]


def test_a_settled_local_file_checked_by_latest_checkpoint_is_not_hashed_again(tmp_path, monkeypatch):
    if not _fine_grained_times(tmp_path):
        pytest.skip("this filesystem's change times are too coarse to see two writes in one test")
    model, opt = _trained(0)
    Checkpoint(model=model, optimizer=opt).save(str(tmp_path / "ckpt"))
    monkeypatch.setattr(state_file_module, "SETTLED_NS", 0)  # as if the file were written a while ago
    hashed = []
    real = state_file_module._hash_span
    monkeypatch.setattr(state_file_module, "_hash_span",
                        lambda handle, length, digest: hashed.append(length) or real(handle, length, digest))
    latest = distrib.train.latest_checkpoint(str(tmp_path))
    assert hashed == [None]  # the whole file, once
    live, live_opt = _trained(1)
    Checkpoint(model=live, optimizer=live_opt).restore(latest).assert_consumed()
    assert hashed == [None] and _same(live.state_dict(), model.state_dict())
    with open(os.path.join(latest, STATE), "r+b") as f:  # a write, even of the same byte, moves its times
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(byte)
    Checkpoint(model=live, optimizer=live_opt).restore(latest).assert_consumed()
    assert hashed == [None, None]
