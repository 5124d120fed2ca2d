"""An elastic job whose options tie results to each worker's share says so once, before training."""
import logging
from types import SimpleNamespace

import pytest

from distrib.comm.options import CommunicationOptions
from distrib.strategies.layer_patches.share_warning import say_if_a_resize_changes_the_result


def _strategy(replicas=2, replica_id=0):
    return SimpleNamespace(num_replicas_in_sync=replicas, replica_id=replica_id)


@pytest.mark.parametrize("options, named", [
    (CommunicationOptions(sync_batch_norm=False), "sync_batch_norm=False"),
    (CommunicationOptions(global_batch_dropout=False), "global_batch_dropout=False"),
    (CommunicationOptions(sync_batch_norm=False, global_batch_dropout=False),
     "sync_batch_norm=False, global_batch_dropout=False"),
])
def test_replica_0_of_an_elastic_job_names_the_options(monkeypatch, caplog, options, named):
    monkeypatch.setenv("DISTRIB_ELASTIC", "1")
    with caplog.at_level(logging.WARNING, logger="distrib.strategies"):
        line = say_if_a_resize_changes_the_result(_strategy(), options)
    assert line is not None and f"CommunicationOptions({named})" in line
    assert "if workers join or leave, the result differs from a fixed-size run's" in line
    assert [r.getMessage() for r in caplog.records] == [line]


@pytest.mark.parametrize("elastic, options, strategy", [
    ("1", CommunicationOptions(), _strategy()),                                   # global statistics and masks
    (None, CommunicationOptions(sync_batch_norm=False), _strategy()),              # not elastic
    ("1", CommunicationOptions(sync_batch_norm=False), _strategy(replicas=1)),     # one replica
    ("1", CommunicationOptions(sync_batch_norm=False), _strategy(replica_id=1)),   # said by replica 0 only
])
def test_nothing_is_said_otherwise(monkeypatch, caplog, elastic, options, strategy):
    if elastic is None:
        monkeypatch.delenv("DISTRIB_ELASTIC", raising=False)
    else:
        monkeypatch.setenv("DISTRIB_ELASTIC", elastic)
    with caplog.at_level(logging.WARNING, logger="distrib.strategies"):
        assert say_if_a_resize_changes_the_result(strategy, options) is None
    assert not caplog.records


@pytest.mark.parametrize("options, layers, named", [
    (None, ["RandomFlip"], "the model's Keras random preprocessing layer RandomFlip makes"),
    (None, ["RandomFlip", "RandomZoom"], "the model's Keras random preprocessing layers RandomFlip, RandomZoom make"),
    (CommunicationOptions(global_batch_dropout=False), ["MixUp"],
     "CommunicationOptions(global_batch_dropout=False) and the model's Keras random preprocessing layer MixUp make"),
])
def test_keras_random_layers_are_named_in_the_same_line(monkeypatch, caplog, options, layers, named):
    monkeypatch.setenv("DISTRIB_ELASTIC", "1")
    with caplog.at_level(logging.WARNING, logger="distrib.strategies"):
        line = say_if_a_resize_changes_the_result(_strategy(), options, layers)
    assert line is not None and f"this job is elastic but {named} each replica's result depend" in line
    assert [r.getMessage() for r in caplog.records] == [line]
    assert say_if_a_resize_changes_the_result(_strategy(), None, []) is None  # nothing to name
