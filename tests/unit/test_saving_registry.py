"""load_model rebuilds registered, importable, ``__main__`` and custom_objects module classes, refuses
anything else in one line, and accepts SaveOptions / LoadOptions."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch import nn

import distrib
from distrib.checkpoint.files import storage
from distrib.saved_model import LoadOptions, SaveOptions
from distrib.training.saving.serialization import SerializationError

X = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))


@distrib.saving.register_serializable(package="tests")
class Scaled(nn.Module):
    """A registered block with constructor arguments, described by get_config()."""

    def __init__(self, width, factor=2.0):
        super().__init__()
        self.fc, self.factor = nn.Linear(width, width), factor

    def forward(self, x):
        return self.fc(x) * self.factor

    def get_config(self):
        return {"width": self.fc.in_features, "factor": self.factor}


class Importable(nn.Module):
    """Not registered, but importable from this (already imported) test module."""

    def __init__(self, hidden=3):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 2))

    def forward(self, x):
        return self.body(x)

    def get_config(self):
        return {"hidden": self.body[0].out_features}


def _same_outputs(a, b):
    with torch.no_grad():
        return torch.equal(a.module(X), b.module(X))


def test_registered_and_importable_classes_load_without_builder(tmp_path):
    model = distrib.Model(nn.Sequential(Scaled(4, factor=0.5), nn.ReLU(), Importable(hidden=5)))
    model.compile(optimizer="adam", loss="mse")
    model.save(str(tmp_path / "m"))
    arch = json.loads((tmp_path / "m" / "model.json").read_text())["architecture"]
    assert arch["children"][0][1] == {"custom": "tests>Scaled", "config": {"width": 4, "factor": 0.5}}
    assert arch["children"][2][1]["custom"] == f"{__name__}:Importable"
    loaded = distrib.models.load_model(str(tmp_path / "m"))
    assert type(loaded.module[0]) is Scaled and loaded.module[0].factor == 0.5
    assert _same_outputs(model, loaded)


def test_custom_objects_supply_an_unregistered_local_class(tmp_path):
    class Local(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x)

    model = distrib.Model(Local())
    with pytest.warns(UserWarning, match="custom_objects"):
        model.save(str(tmp_path / "m"))
    loaded = distrib.models.load_model(str(tmp_path / "m"), custom_objects={"Local": Local})
    assert _same_outputs(model, loaded)


def _forge(tmp_path, name, **changes):
    """A complete, checksummed save whose model.json was rewritten by an attacker."""
    model = distrib.Model(nn.Sequential(nn.Linear(4, 2)))
    model.save(str(tmp_path / "good"))
    config = json.loads((tmp_path / "good" / "model.json").read_text())
    config.update(changes)
    with storage.AtomicDirectory(str(tmp_path / name)) as d:
        d.write_bytes("model.json", json.dumps(config).encode())
        d.write_bytes("state.safetensors", (tmp_path / "good" / "state.safetensors").read_bytes())
    return str(tmp_path / name)


@pytest.mark.parametrize("changes, message", [
    ({"architecture": {"custom": "os:system", "config": {"command": "touch {marker}"}}},
     r"'os:system' is a builtin_function_or_method, not a torch.nn.Module subclass; refusing to call it"),
    ({"architecture": None, "builder": "subprocess:run", "builder_kwargs": {"args": "touch {marker}", "shell": True}},
     r"builder 'subprocess:run', which is neither a torch.nn.Module subclass nor a registered function"),
    ({"architecture": {"class": "Sequential", "children": [["0", {"custom": "torch.nn:Module.__init__"}]]}},
     r"not a torch.nn.Module subclass"),
    ({"architecture": {"custom": "antigravity:Fly", "config": None}},
     r"package 'antigravity', which this program has not imported"),
    ({"architecture": {"custom": "someone>Unknown", "config": None}},
     r"module class 'someone>Unknown' is not registered in this program"),
    ({"architecture": {"custom": "os;rm:x", "config": None}}, r"is not a name like 'package.module:Class'"),
])
def test_hostile_or_unknown_names_are_refused_in_one_line(tmp_path, changes, message):
    marker = tmp_path / "pwned"
    text = json.dumps(changes).replace("{marker}", str(marker))
    path = _forge(tmp_path, "evil", **json.loads(text))
    with pytest.raises(SerializationError, match=message) as info:
        distrib.models.load_model(path)
    assert "\n" not in str(info.value)
    assert not marker.exists() and "antigravity" not in sys.modules


SCRIPT = textwrap.dedent("""
    import sys, torch, distrib
    from torch import nn

    class Head(nn.Module):                      # defined in the script (__main__)
        def __init__(self, k=3):
            super().__init__()
            self.fc = nn.Linear(4, k)
        def forward(self, x):
            return self.fc(x)
        def get_config(self):
            return {"k": self.fc.out_features}

    x = torch.ones(2, 4)
    if sys.argv[1] == "save":
        m = distrib.Model(Head(5)); m.save(sys.argv[2])
        print(m.module(x).sum().item())
    else:
        m = distrib.models.load_model(sys.argv[2]); print(m.module(x).sum().item())
""")


def test_a_class_defined_in_main_is_found_there(tmp_path, monkeypatch):
    main = sys.modules["__main__"]

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x)

        def get_config(self):
            return {}
    Head.__module__, Head.__qualname__ = "__main__", "Head"
    monkeypatch.setattr(main, "Head", Head, raising=False)
    model = distrib.Model(Head())
    model.save(str(tmp_path / "m"))
    assert json.loads((tmp_path / "m" / "model.json").read_text())["architecture"]["custom"] == "__main__:Head"
    assert _same_outputs(model, distrib.models.load_model(str(tmp_path / "m")))
    monkeypatch.delattr(main, "Head")
    with pytest.raises(SerializationError, match=r"'__main__:Head' is not defined in '__main__'"):
        distrib.models.load_model(str(tmp_path / "m"))


@pytest.mark.slow
def test_a_class_of_the_loading_script_is_found_in_main(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)

    def run(*args):
        out = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return float(out.stdout.strip().splitlines()[-1])

    saved = run("save", str(tmp_path / "m"))
    assert json.loads((tmp_path / "m" / "model.json").read_text())["architecture"]["custom"] == "__main__:Head"
    assert run("load", str(tmp_path / "m")) == saved                    # another process, same script
    with pytest.raises(SerializationError, match=r"'__main__:Head' is not defined in '__main__'"):
        distrib.models.load_model(str(tmp_path / "m"))                  # this program has no Head


def test_save_and_load_options_are_accepted_and_skip_checkpoint_takes_effect(tmp_path):
    model = distrib.Model(nn.Sequential(nn.Linear(4, 2)))
    model.compile(optimizer="sgd", loss="mse")
    model.save(str(tmp_path / "m"), options=SaveOptions(experimental_io_device="/job:localhost"))
    model.save_weights(str(tmp_path / "w"), options=SaveOptions())
    device = LoadOptions(experimental_io_device="/job:localhost")
    loaded = distrib.models.load_model(str(tmp_path / "m"), options=device)
    assert _same_outputs(model, loaded)
    loaded.load_weights(str(tmp_path / "w"), options=device)
    fresh = distrib.models.load_model(str(tmp_path / "m"), options=LoadOptions(experimental_skip_checkpoint=True))
    assert not _same_outputs(model, fresh) and fresh.compiled
    with pytest.raises(TypeError, match="options must be a distrib.saved_model.SaveOptions, got dict"):
        model.save(str(tmp_path / "m2"), options={"experimental_io_device": "cpu"})
    with pytest.raises(TypeError, match="experimental_io_device must be a device string"):
        LoadOptions(experimental_io_device=3)
    distrib.saved_model.save(model, str(tmp_path / "export"), options=SaveOptions(),
                             input_signature=[distrib.TensorSpec((None, 4), torch.float32)])
    served = distrib.saved_model.load(str(tmp_path / "export"), options=device)
    np.testing.assert_allclose(served(X).numpy(), model.module(X).detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("compile_spec, message", [
    ({"loss": {"custom_class": "subprocess:Popen", "config": {"args": "touch {marker}", "shell": True}}},
     r"names 'subprocess:Popen', which is not a loss, metric, optimizer, schedule or module class"),
    ({"loss": {"class": "distrib.process.spawn.Nothing", "config": {}}}, r"load_model"),
    ({"loss": {"function": "os:system"}}, r"names function 'os:system', which is neither distrib's nor registered"),
])
def test_hostile_compile_config_is_refused(tmp_path, compile_spec, message):
    marker = tmp_path / "pwned"
    spec = json.loads(json.dumps(compile_spec).replace("{marker}", str(marker)))
    path = _forge(tmp_path, "evil", compile={"optimizer": {"name": "sgd"}, "metrics": None, "loss_weights": None,
                                              **spec})
    with pytest.raises(SerializationError, match=message) as info:
        distrib.models.load_model(path)
    assert "\n" not in str(info.value) and not marker.exists()
