"""Elastic snapshots are frozen copies serialised only when sent; how often fit takes one."""
import collections

import numpy as np
import pytest
import torch

from distrib.checkpoint.files.format import dumps_state, freeze_state, loads_state
from distrib.comm.elastic import DEFAULT_SNAPSHOT_EVERY, snapshot_every
from distrib.comm.errors import DistribCommError


def _state():
    module = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(module.parameters())
    module(torch.randn(4, 3)).sum().backward()
    opt.step()
    return module, opt, {"module": module.state_dict(), "optimizer": opt.state_dict(),
                         "rng": (np.arange(4, dtype=np.uint32), 7, 0.5), "step": np.int64(3), "name": None}


def test_a_frozen_state_keeps_the_values_it_was_taken_with_and_serialises_them_alike():
    module, opt, state = _state()
    expected = loads_state(dumps_state(state))
    frozen = freeze_state(state)
    with torch.no_grad():
        module.weight.add_(1.0)  # training goes on after the snapshot
    opt.state[module.weight]["exp_avg"].add_(1.0)
    state["rng"][0][0] = 99
    got = loads_state(bytes(frozen))
    assert torch.equal(got["module"]["weight"], expected["module"]["weight"])
    assert torch.equal(got["optimizer"]["state"][0]["exp_avg"], expected["optimizer"]["state"][0]["exp_avg"])
    assert np.array_equal(got["rng"][0], expected["rng"][0]) and got["rng"][1:] == (7, 0.5)
    assert isinstance(got["module"], collections.OrderedDict)
    assert got["module"]._metadata == expected["module"]._metadata
    assert bytes(frozen) is bytes(frozen)  # serialised once


def test_what_cannot_be_saved_is_refused_when_frozen_not_when_sent():
    with pytest.raises(TypeError, match=r"cannot save state/bad: type object is not supported"):
        freeze_state({"bad": object()})
    with pytest.raises(TypeError, match="dict key"):
        freeze_state({(1, 2): 3})


def test_snapshot_every_reads_the_environment_and_names_a_bad_value():
    assert snapshot_every({}) == DEFAULT_SNAPSHOT_EVERY == 100
    assert snapshot_every({"DISTRIB_ELASTIC_SNAPSHOT_EVERY": " 1 "}) == 1
    for bad in ("0", "-2", "ten"):
        with pytest.raises(DistribCommError, match="DISTRIB_ELASTIC_SNAPSHOT_EVERY=.*whole number of at least 1"):
            snapshot_every({"DISTRIB_ELASTIC_SNAPSHOT_EVERY": bad})
