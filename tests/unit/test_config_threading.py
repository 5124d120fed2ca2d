"""``distrib.config.threading``: TF's thread settings on torch, and the busy-machine hint (issue 39, item 4)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import distrib
from distrib.config import threading as config_threading
from distrib.testing import run_python


@pytest.fixture
def fresh(monkeypatch):
    """Module state and torch's thread count restored after each test."""
    before = torch.get_num_threads()
    monkeypatch.setattr(config_threading, "_intra", 0)
    monkeypatch.setattr(config_threading, "_inter", 0)
    monkeypatch.setattr(config_threading, "_warned", False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    yield config_threading
    torch.set_num_threads(before)


def test_intra_op_threads_set_torch_and_zero_restores_the_default(fresh, monkeypatch):
    monkeypatch.setattr(config_threading.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert distrib.config.threading.get_intra_op_parallelism_threads() == 0
    distrib.config.threading.set_intra_op_parallelism_threads(1)
    assert torch.get_num_threads() == 1 and fresh.get_intra_op_parallelism_threads() == 1
    fresh.set_intra_op_parallelism_threads(0)
    assert torch.get_num_threads() == 3 and fresh.get_intra_op_parallelism_threads() == 0
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    fresh.set_intra_op_parallelism_threads(0)
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_a_bad_count_is_one_line_naming_it(fresh, bad):
    with pytest.raises(ValueError, match=r"give a thread count >= 1, or 0 for the default"):
        fresh.set_intra_op_parallelism_threads(bad)
    with pytest.raises(ValueError, match=r"set_inter_op_parallelism_threads"):
        fresh.set_inter_op_parallelism_threads(bad)


INTER = """
import distrib, torch
distrib.config.threading.set_inter_op_parallelism_threads(3)
print(torch.get_num_interop_threads(), distrib.config.threading.get_inter_op_parallelism_threads())
try:
    distrib.config.threading.set_inter_op_parallelism_threads(2)
except RuntimeError as e:
    print(e)
"""


def test_inter_op_threads_before_any_work_then_a_clear_refusal():
    proc = run_python(["-c", INTER], timeout=120)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.strip().splitlines()
    assert first == "3 3"
    assert second.startswith("set_inter_op_parallelism_threads(2): torch already runs 3 inter-op threads")


def test_a_lone_fit_on_a_busy_machine_warns_once_with_the_fix(fresh, monkeypatch):
    torch.set_num_threads(2)
    monkeypatch.setattr(config_threading.os, "getloadavg", lambda: (5.2, 5.0, 4.8))
    monkeypatch.setattr(config_threading.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    model = distrib.Model(torch.nn.Linear(2, 1))
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((4, 2), np.float32)
    with pytest.warns(config_threading.BusyMachineWarning) as record:
        model.fit(x, x[:, :1], verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.fit(x, x[:, :1], verbose=0)                 # once per process
    assert len(record) == 1
    text = str(record[0].message)
    assert "load 5.2 on 2 CPUs" in text and "set_intra_op_parallelism_threads(1)" in text and "\n" not in text


@pytest.mark.parametrize("setup", ["idle", "chosen", "env", "one thread"])
def test_no_hint_where_it_does_not_apply(fresh, monkeypatch, setup):
    torch.set_num_threads(2)
    monkeypatch.setattr(config_threading.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(config_threading.os, "getloadavg", lambda: (0.3 if setup == "idle" else 6.0, 0, 0))
    if setup == "chosen":
        fresh.set_intra_op_parallelism_threads(2)
    elif setup == "env":
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
    elif setup == "one thread":
        torch.set_num_threads(1)
    assert fresh.warn_if_oversubscribed() is False
