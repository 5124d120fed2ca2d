"""``compile(jit_compile=True)``: the forward pass and loss run as one torch.compile graph, with eager's result.

Most tests trace with the ``aot_eager`` backend (``DISTRIB_JIT_BACKEND``: the
same graph, no code generation, compiled in about a second); one compiles
with inductor, as users get it (``-m slow``: its C++ compilation takes minutes).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import distrib


def _data():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(96, 8, generator=gen)
    return x, x[:, :3].argmax(1)


def _fit(jit_compile, module=None, epochs=2, **compile_kwargs):
    x, y = _data()
    with distrib.get_strategy().scope():
        torch.manual_seed(0)
        model = distrib.Model(module() if module else torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)))
        model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], jit_compile=jit_compile, **compile_kwargs)
    history = model.fit(x, y, batch_size=32, epochs=epochs, verbose=0)
    return model, history


def _close(a, b):
    for p, q in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)


@pytest.fixture
def aot_eager(monkeypatch):
    monkeypatch.setenv("DISTRIB_JIT_BACKEND", "aot_eager")


def test_a_compiled_fit_trains_as_the_eager_one_and_runs_every_step_compiled(aot_eager):
    eager, h_eager = _fit(False)
    compiled, h_compiled = _fit(True)
    assert eager.loop.jit is None
    assert compiled.loop.jit.compiled_steps == 6 and compiled.loop.jit.disabled is None
    _close(eager, compiled)
    assert h_compiled.history["loss"] == pytest.approx(h_eager.history["loss"], rel=1e-5)
    assert h_compiled.history["accuracy"] == h_eager.history["accuracy"]
    assert compiled.evaluate(*_data(), verbose=0) == pytest.approx(eager.evaluate(*_data(), verbose=0), rel=1e-5)
    assert compiled.get_compile_config()["jit_compile"] is True


def test_a_saved_compiled_model_loads_compiled(aot_eager, tmp_path):
    compiled, _ = _fit(True, epochs=1)
    compiled.save(str(tmp_path / "model"))
    loaded = distrib.models.load_model(str(tmp_path / "model"))
    assert loaded.loop.jit is not None


def test_auto_false_and_run_eagerly_stay_eager():
    for kwargs in ({"jit_compile": "auto"}, {"jit_compile": False}, {"jit_compile": True, "run_eagerly": True}):
        model, _ = _fit(epochs=1, **kwargs)
        assert model.loop.jit is None
    with pytest.raises(ValueError, match="jit_compile"):
        _fit("yes")


class _Branchy(torch.nn.Module):
    """A data-dependent branch: not one graph."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.linear(x) if x.sum() > 0 else self.linear(-x)


def test_a_model_that_is_not_one_graph_says_so_in_one_line_and_trains_eagerly(aot_eager):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled, _ = _fit(True, _Branchy)
    lines = [str(w.message) for w in caught if "jit_compile" in str(w.message)]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert lines[0].startswith("compile(jit_compile=True): _Branchy runs eagerly")
    assert compiled.loop.jit.compiled_steps == 0
    eager, _ = _fit(False, _Branchy)
    for p, q in zip(eager.get_weights(), compiled.get_weights()):
        assert np.array_equal(p, q)


def test_a_bad_input_still_gets_the_eager_error_line(aot_eager):
    with distrib.get_strategy().scope():
        model = distrib.Model(torch.nn.Linear(5, 3))
        model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(ValueError, match="cannot be called on x"):
        warnings.simplefilter("always")
        model.fit(torch.randn(8, 8), torch.randn(8, 3), batch_size=4, verbose=0)
    assert not [w for w in caught if "jit_compile" in str(w.message)]


@pytest.mark.slow  # about 4 minutes of C++ compilation; the aot_eager tests above check the same graph
def test_inductor_compiles_it_too():
    eager, _ = _fit(False, epochs=1)
    compiled, _ = _fit(True, epochs=1)
    assert compiled.loop.jit.compiled_steps == 3 and compiled.loop.jit.disabled is None
    _close(eager, compiled)
