"""The safe state format: exact round trips, and no pickle ever."""
import collections
import json
import math
import random

import numpy as np
import pytest
import torch

from distrib.checkpoint.files.format import UnsafeFileError, dumps_state, load_state, loads_state, save_state


def _trained():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(3):
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def _assert_same(a, b, path="state"):
    assert type(a) is type(b), f"{path}: {type(a)} != {type(b)}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), path
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), path
    elif isinstance(a, dict):
        assert list(a.keys()) == list(b.keys()), path
        for k in a:
            _assert_same(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{path}/{i}")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), path
    else:
        assert a == b, path


def test_module_and_optimizer_state_round_trip_exactly():
    model, opt = _trained()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    back = loads_state(dumps_state(state))
    _assert_same(state, back)
    assert sorted(back["optimizer"]["state"]) == [0, 1, 2, 3, 4, 5]  # int keys stay ints
    assert back["model"]._metadata == state["model"]._metadata  # module versions survive


def test_restored_optimizer_continues_identically():
    model, opt = _trained()
    back = loads_state(dumps_state({"m": model.state_dict(), "o": opt.state_dict()}))
    model2 = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 2))
    opt2 = torch.optim.Adam(model2.parameters(), lr=5.0)
    model2.load_state_dict(back["m"])
    opt2.load_state_dict(back["o"])
    x = torch.randn(8, 4)
    for m, o in ((model, opt), (model2, opt2)):
        m(x).pow(2).mean().backward()
        o.step()
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q)


def test_nested_python_values_round_trip():
    state = {
        "ints": [0, -1, 2**70], "floats": (0.1, float("inf"), float("-inf"), float("nan")),
        "flags": [True, False, None], "text": "ünïcode", "empty": ({}, [], ()),
        "keys": {1: "a", "b": 2, 2.5: 3, None: 4, False: 5},
        "od": collections.OrderedDict([("z", 1), ("a", 2)]),
        "np": [np.float64(1.5), np.int32(-3), np.bool_(True), np.arange(6, dtype=np.uint32).reshape(2, 3)],
        "tensors": [torch.tensor(3), torch.zeros(0, 2), torch.arange(4, dtype=torch.int16), torch.ones(2).bfloat16()],
        "rng": {"numpy": np.random.get_state(), "python": random.getstate(), "torch": torch.get_rng_state()},
    }
    _assert_same(state, loads_state(dumps_state(state)))


def test_views_and_shared_tensors_are_saved_by_value():
    base = torch.arange(10.0)
    state = {"a": base, "b": base[2:5], "c": base.view(2, 5).t(), "same": [base, base]}
    back = loads_state(dumps_state(state))
    assert torch.equal(back["b"], torch.tensor([2.0, 3.0, 4.0]))
    assert torch.equal(back["c"], base.view(2, 5).t())
    assert torch.equal(back["same"][1], base)


@pytest.mark.parametrize("bad", [object(), {1, 2}, {(1, 2): 3}, np.array([object()])])
def test_unsupported_values_are_named(bad):
    with pytest.raises(TypeError, match=r"cannot save state/x"):
        dumps_state({"x": bad})


def test_save_and_load_through_fsspec_urls(tmp_path):
    model, _ = _trained()
    for url in ("memory://fmt/model.safetensors", f"file://{tmp_path}/model.safetensors", str(tmp_path / "m2")):
        save_state(model.state_dict(), url)
        _assert_same(model.state_dict(), load_state(url))


def test_torch_save_pickle_is_refused_with_the_file_named(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(2)}, path)  # a zip holding data.pkl
    with pytest.raises(UnsafeFileError, match=r"evil\.pt: refusing to load a pickle"):
        load_state(str(path))


def test_raw_pickle_is_refused_and_never_executed(tmp_path):
    import pickle

    class Boom:
        def __reduce__(self):
            return (print, ("pickle payload executed",))

    path = tmp_path / "raw.pkl"
    path.write_bytes(pickle.dumps(Boom(), protocol=4))
    with pytest.raises(UnsafeFileError, match=r"raw\.pkl: refusing to load a pickle"):
        load_state(str(path))


def test_truncated_and_garbage_files_are_refused(tmp_path):
    data = dumps_state({"w": torch.randn(100)})
    with pytest.raises(UnsafeFileError, match="half"):
        loads_state(data[: len(data) // 2], name="half")
    with pytest.raises(UnsafeFileError, match="junk: not a safetensors state file"):
        loads_state(b"hello world, not a checkpoint", name="junk")


def test_skeleton_cannot_smuggle_objects():
    data = dumps_state({"w": torch.ones(1)})
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    header["__metadata__"]["distrib.skeleton"] = json.dumps({"dict": [["x", {"py/object": "os.system"}]]})
    raw = json.dumps(header).encode()
    forged = len(raw).to_bytes(8, "little") + raw + data[8 + n:]
    with pytest.raises(UnsafeFileError, match="unknown state skeleton node"):
        loads_state(forged, name="forged")


def test_plain_safetensors_file_loads_as_flat_dict():
    from safetensors.torch import save

    back = loads_state(save({"a": torch.ones(2), "b": torch.zeros(3)}))
    assert set(back) == {"a", "b"} and torch.equal(back["a"], torch.ones(2))


def test_pickle_free_header_check_does_not_reject_valid_0x80_lengths():
    # a header length whose low byte is 0x80 must still load
    for pad in range(0, 300):
        data = dumps_state({"s": "x" * pad})
        if data[0] == 0x80:
            assert loads_state(data) == {"s": "x" * pad}
            return
    pytest.fail("no header length with low byte 0x80 was produced")  # pragma: no cover

