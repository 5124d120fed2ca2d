"""Calls a ported TensorFlow program makes on distrib's objects (issue 49, item 6)."""
import numpy as np
import pytest
import torch

import distrib


class _Noisy(torch.nn.Module):
    """Reports the mode it ran in: 1 in training mode, 0 in eval mode."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)
        self.frozen = torch.nn.BatchNorm1d(1)

    def forward(self, x):
        return self.linear(x) * 0 + float(self.training)


class _TakesTraining(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 1)

    def forward(self, x, training=False):
        return self.linear(x) * 0 + (2.0 if training else -2.0)


def test_training_argument_runs_the_call_in_that_mode_and_restores_each_submodules_mode():
    model = distrib.Model(_Noisy())
    model.module.train()
    model.module.frozen.eval()  # a program's own mixed modes survive the call
    x = torch.ones(3, 2)
    assert model(x, training=False).flatten().tolist() == [0.0] * 3
    assert model.module.training and not model.module.frozen.training and model.module.linear.training
    model.module.eval()
    assert model(x, training=True).flatten().tolist() == [1.0] * 3
    assert not model.module.training and not model.module.linear.training
    assert model(x).flatten().tolist() == [0.0] * 3  # training=None: the module's own mode


def test_a_module_taking_training_gets_the_argument():
    model = distrib.Model(_TakesTraining())
    assert model(torch.ones(1, 2), training=True).item() == 2.0
    assert model(torch.ones(1, 2)).item() == -2.0


def test_float64_numpy_is_accepted_as_fit_accepts_it():
    net = torch.nn.Linear(3, 1)
    model = distrib.Model(net)
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    out = model(x)
    assert out.dtype == torch.float32
    np.testing.assert_allclose(out.detach().numpy(), net(torch.from_numpy(x).float()).detach().numpy())
    assert model(x, training=True).shape == (2, 1)


def _saved_checkpoint(tmp_path):
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    step = distrib.train.Variable(7, name="step")
    ckpt = distrib.train.Checkpoint(model=net, step=step)
    return net, distrib.train.CheckpointManager(ckpt, str(tmp_path / "ckpts"), max_to_keep=2).save()


def test_load_checkpoint_reads_shapes_dtypes_and_values_by_name(tmp_path):
    net, path = _saved_checkpoint(tmp_path)
    for where in (path, str(tmp_path / "ckpts")):  # a checkpoint, or its directory (the latest in it)
        reader = distrib.train.load_checkpoint(where)
        shapes = reader.get_variable_to_shape_map()
        assert shapes["model/0.weight"] == [3, 4] and shapes["model/2.bias"] == [1]
        assert reader.get_variable_to_dtype_map()["model/0.weight"] == torch.float32
        np.testing.assert_array_equal(reader.get_tensor("model/2.weight"), net[2].weight.detach().numpy())
        assert shapes["save_counter/value"] == [] and reader.get_tensor("step/value") == 7
    with pytest.raises(KeyError, match="no variable 'model/9.weight'"):
        reader.get_tensor("model/9.weight")


def test_load_checkpoint_refuses_a_forged_key_in_one_line(tmp_path):
    from distrib.checkpoint.files import storage
    from distrib.checkpoint.checkpoint import STATE_FILE
    from distrib.checkpoint.errors import CorruptCheckpointError

    bad = str(tmp_path / "ckpt-1")
    with storage.AtomicDirectory(bad, {}) as d:  # well-formed files: only the key is wrong
        d.write_state(STATE_FILE, {"model": {"../../etc/passwd": torch.zeros(2)}})
    with pytest.raises(CorruptCheckpointError, match="is not a plain name"):
        distrib.train.load_checkpoint(bad)
    garbage = tmp_path / "ckpt-2"
    garbage.mkdir()
    (garbage / "COMPLETE").write_bytes(b"\x00\xff" * 40)
    with pytest.raises(CorruptCheckpointError):
        distrib.train.load_checkpoint(str(garbage))


def test_legacy_optimizers_are_refused_in_one_line_naming_the_replacement():
    with pytest.raises(ImportError, match=r"use distrib\.optimizers\.Adam$"):
        distrib.optimizers.legacy.Adam(0.01)
    with pytest.raises(ImportError, match=r"legacy\.SGD: .*use distrib\.optimizers\.SGD"):
        from distrib.optimizers.legacy import SGD  # noqa: F401


def test_apply_gradients_over_trainable_variables_takes_the_keras_step():
    net = torch.nn.Linear(2, 1)
    model = distrib.Model(net)
    before = [p.detach().clone() for p in model.trainable_variables]
    grads = [torch.ones_like(p) for p in model.trainable_variables]
    distrib.optimizers.SGD(0.5).apply_gradients(zip(grads, model.trainable_variables))
    for old, new in zip(before, model.trainable_variables):
        torch.testing.assert_close(new.detach(), old - 0.5)
