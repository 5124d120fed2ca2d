"""A trainer's state is one type, declared once: `TrainerState`, which `Trainer` (so `Model`) is.

The execution wing and `saving.model_state` take a `TrainerState`; no
protocol elsewhere copies the trainer's attributes by hand (the former
``LoopHost`` and ``PlannedLoop``).
"""
from __future__ import annotations

import dataclasses
import pathlib

import torch

import distrib
from distrib.training.execution.trainer_state import TrainerState
from distrib.training.trainer import Trainer

SRC = pathlib.Path(distrib.__file__).resolve().parent


def test_a_model_is_a_trainer_state_and_holds_exactly_its_declared_attributes():
    model = distrib.Model(torch.nn.Linear(2, 1))
    assert isinstance(model, Trainer) and isinstance(model, TrainerState)
    declared = {f.name for f in dataclasses.fields(TrainerState)}
    assert set(vars(model)) - {"builder", "builder_kwargs"} == declared  # Model's own two, and the state's
    model.compile(optimizer="sgd", loss="mse")
    assert set(vars(model)) - {"builder", "builder_kwargs"} == declared  # compile sets no attribute of its own


def test_a_model_compares_and_hashes_by_identity_as_before():
    a, b = distrib.Model(torch.nn.Linear(2, 1)), distrib.Model(torch.nn.Linear(2, 1))
    assert a != b and a == a and len({a, b}) == 2


def test_no_protocol_in_training_copies_the_trainer_s_attributes():
    offenders = []
    for path in (SRC / "training").rglob("*.py"):
        text = path.read_text()
        if "(Protocol)" in text and ("optimizer:" in text or "strategy:" in text):
            offenders.append(str(path.relative_to(SRC)))
    assert not offenders, offenders
    assert not (SRC / "training" / "execution" / "loop_host.py").exists()
