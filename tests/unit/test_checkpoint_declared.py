"""A checkpoint's declared dtypes and shapes are checked before a byte of a tensor is read (issue 52, items 1-2).

Each case saves a good ``ckpt-1`` and a newer ``ckpt-2``, then forges
``ckpt-2`` with its checksums recomputed (only the header can tell): a weight
whose header claims 6 GiB (a real sparse file of that size, its true sha256),
a weight relabelled ``I32``, a step counter relabelled ``F64``. Restoring must
skip ``ckpt-2`` with a `CheckpointWarning` naming the tensor, restore
``ckpt-1`` exactly, and -- for the 6 GiB claim -- allocate nothing: under an
address-space cap of 4 GiB the restore still falls back.
"""
import hashlib
import json
import os
import textwrap
import warnings

import pytest
import torch

import distrib
from distrib.checkpoint import CheckpointWarning
from distrib.checkpoint.files import safetensors_io
from distrib.testing.harness import run_python

pytestmark = pytest.mark.timeout(300)

STATE = "state.safetensors"
WEIGHT = "state/model/weight"
HUGE = 6 << 30  # bytes the forged weight claims (slow: forging and `latest_checkpoint` hash 6 GiB of zeros)
LARGE = 64 << 20  # the same forgery at a size the default run can hash in a second


def _objects(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(4, 3)).pow(2).sum().backward()
    opt.step()
    return model, opt


def _checkpoint(model, opt, step):
    return distrib.train.Checkpoint(model=model, optimizer=opt, step=distrib.train.Variable(step, dtype=torch.int64))


def _write_two(directory):
    model, opt = _objects(1)
    _checkpoint(model, opt, 10).save(str(directory / "ckpt"))
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    model2, opt2 = _objects(2)
    ckpt2 = _checkpoint(model2, opt2, 20)
    ckpt2.save_counter.assign(1)
    ckpt2.save(str(directory / "ckpt"))
    return expected


def _header(data):
    n = int.from_bytes(data[:8], "little")
    return n, json.loads(data[8:8 + n])


def _reseal(ckpt, sha, size):
    manifest = json.loads((ckpt / "MANIFEST.json").read_bytes())
    manifest["files"][STATE] = {"sha256": sha, "size": size}
    raw = json.dumps(manifest).encode()
    (ckpt / "MANIFEST.json").write_bytes(raw)
    (ckpt / "COMPLETE").write_bytes(hashlib.sha256(raw).hexdigest().encode())


def _relabel(ckpt, name, dtype):
    """Give tensor ``name`` another dtype of the same item size in the header (its bytes unchanged)."""
    data = (ckpt / STATE).read_bytes()
    n, header = _header(data)
    header[name]["dtype"] = dtype
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (n - len(raw))
    assert len(raw) == n
    data = data[:8] + raw + data[8 + n:]
    (ckpt / STATE).write_bytes(data)
    _reseal(ckpt, hashlib.sha256(data).hexdigest(), len(data))


def _claim(ckpt, claim):
    """Make the weight claim ``claim`` bytes: moved to the end of a sparse file of the right size, true sha256."""
    data = (ckpt / STATE).read_bytes()
    n, header = _header(data)
    body = data[8 + n:]
    meta = header.pop("__metadata__")
    pieces, offset = [], 0
    for name, entry in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if name == WEIGHT:
            continue
        begin, end = entry["data_offsets"]
        pieces.append(body[begin:end])
        entry["data_offsets"] = [offset, offset + end - begin]
        offset += end - begin
    header[WEIGHT] = {"dtype": "F32", "shape": [2, claim // 8], "data_offsets": [offset, offset + claim]}
    raw = json.dumps({"__metadata__": meta, **header}, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    head = len(raw).to_bytes(8, "little") + raw + b"".join(pieces)
    size = len(head) + claim
    with open(ckpt / STATE, "wb") as f:
        f.write(head)
        f.truncate(size)  # sparse: no disk blocks, no memory
    digest = hashlib.sha256(head)
    zeros = bytes(min(claim, 64 << 20))
    for _ in range(claim // len(zeros)):
        digest.update(zeros)
    _reseal(ckpt, digest.hexdigest(), size)


def _claiming(tmp_path_factory, claim):
    directory = tmp_path_factory.mktemp("claim") / "ckpts"
    expected = _write_two(directory)
    _claim(directory / "ckpt-2", claim)
    assert os.path.getsize(directory / "ckpt-2" / STATE) > claim
    return directory, expected, claim


@pytest.fixture(scope="module")
def huge_dir(tmp_path_factory):
    return _claiming(tmp_path_factory, HUGE)


@pytest.fixture(scope="module")
def large_dir(tmp_path_factory):
    return _claiming(tmp_path_factory, LARGE)


def _restore(directory, how):
    model, opt = _objects(3)
    ckpt = _checkpoint(model, opt, 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if how == "seed":
            path = ckpt.restore(distrib.train.latest_checkpoint(str(directory))).path
        else:
            path = distrib.train.CheckpointManager(ckpt, str(directory), max_to_keep=3).restore_or_initialize()
    messages = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    return ckpt, model, path, messages


@pytest.mark.parametrize("size, how", [("large", "seed"), ("large", "manager"),
                                       pytest.param("huge", "seed", marks=pytest.mark.slow),
                                       pytest.param("huge", "manager", marks=pytest.mark.slow)])
def test_a_weight_whose_header_claims_too_much_is_skipped_without_reading_or_allocating_it(request, size, how, monkeypatch):
    directory, expected, claim = request.getfixturevalue(f"{size}_dir")
    allocated = []
    empty = safetensors_io.TensorEntry.empty

    def spy(entry):
        allocated.append((entry.name, entry.nbytes))
        return empty(entry)
    monkeypatch.setattr(safetensors_io.TensorEntry, "empty", spy)
    ckpt, model, path, messages = _restore(directory, how)
    assert path == str(directory / "ckpt-1")
    assert all(torch.equal(expected[k], v) for k, v in model.state_dict().items())
    assert int(ckpt.step) == 10
    shown = "6.0 GiB" if claim == HUGE else "64.0 MiB"
    assert any("ckpt-2" in m and f"{WEIGHT!r} is declared (2, {claim // 8}) float32 ({shown})" in m
               and "'model/weight' is (2, 3) float32" in m for m in messages), messages
    assert not [a for a in allocated if a[1] > 1 << 20], allocated


@pytest.mark.slow
def test_a_weight_claiming_6_gib_falls_back_under_a_4_gib_address_space_cap(huge_dir):
    """The issue's run: uncapped the old reader peaked at 6.6 GB; capped it failed with a raw RuntimeError."""
    directory, _, _ = huge_dir
    script = textwrap.dedent(f"""
        import resource, warnings
        import torch
        import distrib
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        torch.manual_seed(3)
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        ckpt = distrib.train.Checkpoint(model=model, optimizer=opt,
                                        step=distrib.train.Variable(0, dtype=torch.int64))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            path = distrib.train.CheckpointManager(ckpt, {str(directory)!r}, max_to_keep=3).restore_or_initialize()
        print("restored", path, int(ckpt.step))
        print("warned", [str(w.message)[:200] for w in caught])
    """)
    proc = run_python(["-c", script], timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"restored {directory / 'ckpt-1'} 10" in proc.stdout, proc.stdout + proc.stderr[-2000:]


@pytest.mark.parametrize("how", ["seed", "manager"])
def test_a_weight_relabelled_int32_is_skipped_not_reinterpreted(tmp_path, how):
    directory = tmp_path / "ckpts"
    expected = _write_two(directory)
    _relabel(directory / "ckpt-2", WEIGHT, "I32")
    ckpt, model, path, messages = _restore(directory, how)
    assert path == str(directory / "ckpt-1")
    assert all(torch.equal(expected[k], v) for k, v in model.state_dict().items())
    assert any("ckpt-2" in m and f"{WEIGHT!r} is declared (2, 3) int32" in m and "is (2, 3) float32" in m
               for m in messages), messages


@pytest.mark.parametrize("how", ["seed", "manager"])
def test_a_step_counter_relabelled_float64_is_skipped_not_restored_as_zero(tmp_path, how):
    directory = tmp_path / "ckpts"
    _write_two(directory)
    _relabel(directory / "ckpt-2", "state/step/value", "F64")
    ckpt, _, path, messages = _restore(directory, how)
    assert path == str(directory / "ckpt-1")
    assert int(ckpt.step) == 10
    assert any("ckpt-2" in m and "'state/step/value' is declared () float64" in m and "is () int64" in m
               for m in messages), messages


def test_an_exact_widening_cast_restores_and_a_narrowing_one_is_refused(tmp_path):
    """float16 -> float32 holds every value exactly (`EXACT_CASTS`); float64 -> float32 would round."""
    from distrib.checkpoint.files.inplace_restore import EXACT_CASTS

    assert torch.float32 in EXACT_CASTS[torch.float16] and torch.float32 not in EXACT_CASTS.get(torch.float64, ())
    half = torch.nn.Linear(3, 2).half()
    path = distrib.train.Checkpoint(model=half).write(str(tmp_path / "half-1"))
    wide = torch.nn.Linear(3, 2)
    distrib.train.Checkpoint(model=wide).read(path).assert_consumed()
    assert torch.equal(wide.weight, half.weight.float())
    double = torch.nn.Linear(3, 2).double()
    path = distrib.train.Checkpoint(model=double).write(str(tmp_path / "double-1"))
    before = wide.weight.clone()
    with pytest.raises(distrib.checkpoint.CheckpointRestoreError, match="declared .* float64.* is .* float32"):
        distrib.train.Checkpoint(model=wide).read(path)
    assert torch.equal(wide.weight, before)


def _saved_weights(tmp_path):
    torch.manual_seed(1)
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(3, 2)))
    path = str(tmp_path / "weights")
    model.save_weights(path)
    return path, {k: v.clone() for k, v in model.module.state_dict().items()}


def _weights_file(path):
    import pathlib

    return pathlib.Path(path) / "weights.safetensors"


def test_load_weights_checks_declared_shapes_before_reading(tmp_path, monkeypatch):
    path, _ = _saved_weights(tmp_path)
    target = _weights_file(path)
    data = target.read_bytes()
    n, header = _header(data)
    name = next(k for k in header if k.endswith("0.weight"))
    body, meta = data[8 + n:], header.pop("__metadata__")
    pieces, offset = [], 0
    for key, entry in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if key != name:
            begin, end = entry["data_offsets"]
            pieces.append(body[begin:end])
            entry["data_offsets"] = [offset, offset + end - begin]
            offset += end - begin
    header[name] = {"dtype": "F32", "shape": [2, LARGE // 8], "data_offsets": [offset, offset + LARGE]}
    raw = json.dumps({"__metadata__": meta, **header}, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    head = len(raw).to_bytes(8, "little") + raw + b"".join(pieces)
    with open(target, "wb") as f:
        f.write(head)
        f.truncate(len(head) + LARGE)
    digest = hashlib.sha256(head)
    digest.update(bytes(LARGE))
    manifest = json.loads((_weights_file(path).parent / "MANIFEST.json").read_bytes())
    manifest["files"]["weights.safetensors"] = {"sha256": digest.hexdigest(), "size": len(head) + LARGE}
    raw_manifest = json.dumps(manifest).encode()
    (target.parent / "MANIFEST.json").write_bytes(raw_manifest)
    (target.parent / "COMPLETE").write_bytes(hashlib.sha256(raw_manifest).hexdigest().encode())
    allocated = []
    empty = safetensors_io.TensorEntry.empty
    monkeypatch.setattr(safetensors_io.TensorEntry, "empty", lambda e: allocated.append(e.nbytes) or empty(e))
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(3, 2)))
    with pytest.raises(distrib.training.errors.WeightsMismatchError, match=rf"shape mismatch 0.weight \(file "
                                                                           rf"\(2, {LARGE // 8}\), model \(2, 3\)\)"):
        model.load_weights(path)
    assert not [a for a in allocated if a > 1 << 20], allocated


def test_load_weights_refuses_a_relabelled_dtype(tmp_path):
    path, expected = _saved_weights(tmp_path)
    target = _weights_file(path)
    data = target.read_bytes()
    n, header = _header(data)
    name = next(k for k in header if k.endswith("0.weight"))
    header[name]["dtype"] = "I32"
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (n - len(raw))
    data = data[:8] + raw + data[8 + n:]
    target.write_bytes(data)
    _reseal_weights(target.parent, data)
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(3, 2)))
    before = {k: v.clone() for k, v in model.module.state_dict().items()}
    with pytest.raises(distrib.training.errors.WeightsMismatchError,
                       match=r"dtype mismatch 0.weight \(file torch.int32, model torch.float32\)"):
        model.load_weights(path)
    assert all(torch.equal(before[k], v) for k, v in model.module.state_dict().items())


def _reseal_weights(directory, data):
    manifest = json.loads((directory / "MANIFEST.json").read_bytes())
    manifest["files"]["weights.safetensors"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    raw = json.dumps(manifest).encode()
    (directory / "MANIFEST.json").write_bytes(raw)
    (directory / "COMPLETE").write_bytes(hashlib.sha256(raw).hexdigest().encode())
