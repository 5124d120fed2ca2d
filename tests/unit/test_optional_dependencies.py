"""A missing optional dependency is one line naming the extra to install (issue 21)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from distrib.errors import DistribError
from distrib.utils.optional import EXTRAS, MissingDependencyError, require


def _block(monkeypatch, *modules):
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)  # import of `name` now raises ModuleNotFoundError


def test_the_offline_mnist_names_the_datasets_extra(monkeypatch):
    from distrib.datasets import mnist

    monkeypatch.delenv("DISTRIB_MNIST", raising=False)
    _block(monkeypatch, "sklearn", "sklearn.datasets")
    with pytest.raises(MissingDependencyError) as info:
        mnist.load_data()
    assert str(info.value) == ('distrib.datasets.mnist (offline digits; or set DISTRIB_MNIST='
                               '/path/to/mnist.npz) needs scikit-learn, which is not installed: '
                               "pip install scikit-learn (distrib's 'datasets' extra)")
    assert isinstance(info.value, DistribError) and isinstance(info.value, ImportError)


def test_plotting_names_the_plot_extra(monkeypatch):
    from distrib.plot import plot_history

    _block(monkeypatch, "matplotlib", "matplotlib.backends.backend_agg", "matplotlib.figure")
    with pytest.raises(MissingDependencyError, match=r'^plotting needs matplotlib, which is not '
                                                    r"installed: pip install matplotlib \(distrib's 'plot' extra\)$"):
        plot_history({"loss": [1.0, 0.5]})


def test_the_tensorboard_callback_names_the_tensorboard_extra(monkeypatch, tmp_path):
    from distrib.callbacks.tensorboard import _summary_writer

    _block(monkeypatch, "tensorboard")
    with pytest.raises(MissingDependencyError, match=r'^the TensorBoard callback needs tensorboard, '
                                                    r"which is not installed: pip install tensorboard "
                                                    r"\(distrib's 'tensorboard' extra\)$"):
        _summary_writer(str(tmp_path))


def test_every_extra_named_exists_in_pyproject():
    import pathlib
    import tomllib

    root = pathlib.Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, package in EXTRAS.items():
        assert any(req.startswith(package) for req in extras[extra]), (extra, extras.get(extra))


def test_an_unknown_extra_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown extra 'nope'"):
        require("json", extra="nope", purpose="x")


SCRIPT = '''
import sys
sys.modules["sklearn"] = None  # as if scikit-learn were not installed
import distrib
strategy = distrib.MultiWorkerMirroredStrategy()
from distrib.datasets import mnist
mnist.load_data()
'''


def test_under_the_launcher_it_is_one_line_per_task_and_the_summary(write_script):
    script = write_script("no_sklearn.py", SCRIPT)
    proc = subprocess.run([sys.executable, "-m", "distrib", "launch", "--workers", "2", str(script)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                          env={**__import__("os").environ, "DISTRIB_MNIST": ""})
    assert proc.returncode == 1, proc.stdout
    task_lines = [l for l in proc.stdout.splitlines()  # a task that starts late is waited for, and told
                  if l.startswith("[worker ") and " to join (timeout " not in l]
    assert 1 <= len(task_lines) <= 2 and "Traceback" not in proc.stdout, proc.stdout
    for line in task_lines:
        assert line.endswith('MissingDependencyError: distrib.datasets.mnist (offline digits; or set '
                             'DISTRIB_MNIST=/path/to/mnist.npz) needs scikit-learn, which is not '
                             "installed: pip install scikit-learn (distrib's 'datasets' extra) (full traceback: "
                             'set DISTRIB_VERBOSE=1 or use distrib launch --verbose)'), line
    assert "pip install scikit-learn (distrib's 'datasets' extra))" in proc.stdout.splitlines()[-1], proc.stdout
