"""RNG state trackable, the SIGTERM watcher and PreemptionCheckpointHandler in one process."""
import os
import random
import signal

import numpy as np
import pytest
import torch

from distrib.checkpoint.preemption import RESTART_EXIT_CODE, PreemptionWatcher
from distrib.checkpoint.rng import RNGState, capture_rng_state
from distrib.checkpoint.files.storage import CheckpointWarning
from distrib.train import Checkpoint, PreemptionCheckpointHandler, Variable, latest_checkpoint


def _draws():
    return torch.rand(3).tolist(), np.random.rand(2).tolist(), [random.random() for _ in range(2)]


def test_rng_state_restores_every_generator(tmp_path):
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    ckpt = Checkpoint(rng=RNGState())
    path = ckpt.write(str(tmp_path / "rng"))
    expected = _draws()
    _draws()
    ckpt.restore(path).assert_consumed()
    assert _draws() == expected


def test_rng_state_with_a_different_world_size_takes_the_chiefs_and_warns_once():
    torch.manual_seed(5)
    chief = capture_rng_state()
    expected = torch.rand(2)
    torch.manual_seed(6)
    other = capture_rng_state()
    rng = RNGState()
    state = {"world_size": 2, "replicas": [chief, other]}
    with pytest.warns(CheckpointWarning, match="saved by 2 replicas and are restored on 1"):
        rng.load_state_dict(state)
    assert torch.equal(torch.rand(2), expected)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rng.load_state_dict(state)  # the second time is silent


def test_rng_states_saved_alike_by_every_replica_restore_on_another_count_without_a_warning():
    torch.manual_seed(5)
    state = {"world_size": 3, "replicas": [capture_rng_state() for _ in range(3)]}
    expected = torch.rand(2)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RNGState().load_state_dict(state)  # each replica's state was the chief's: nothing differs
    assert torch.equal(torch.rand(2), expected)


@pytest.fixture
def restore_sigterm():
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_watcher_only_sets_a_flag_and_restores_the_previous_handler(restore_sigterm):
    seen = []
    signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
    watcher = PreemptionWatcher().install()
    assert not watcher.received and not watcher.agreed()
    os.kill(os.getpid(), signal.SIGTERM)
    assert watcher.received and watcher.agreed() and seen == []
    watcher.uninstall()
    os.kill(os.getpid(), signal.SIGTERM)
    assert seen == [signal.SIGTERM]


def test_repeated_sigterm_does_not_kill_a_saving_worker(restore_sigterm):
    watcher = PreemptionWatcher().install()
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)
    assert watcher.received and watcher.installed
    watcher.uninstall()


def test_preemption_handler_saves_exits_and_resumes(tmp_path, restore_sigterm):
    torch.manual_seed(0)
    weights = torch.zeros(2)
    ckpt = Checkpoint(w=weights)
    handler = PreemptionCheckpointHandler(None, ckpt, checkpoint_dir=str(tmp_path))
    assert handler.total_run_calls == 0

    def step(x):
        weights.add_(x)
        return float(weights.sum())

    with handler.watch_preemption_scope():
        for _ in range(3):
            handler.run(step, 1.0)
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(SystemExit) as exit_info:
            handler.run(step, 1.0)
    assert exit_info.value.code == RESTART_EXIT_CODE
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-4")

    restarted = torch.zeros(2)
    again = PreemptionCheckpointHandler(None, Checkpoint(w=restarted), checkpoint_dir=str(tmp_path))
    assert again.total_run_calls == 4 and torch.equal(restarted, torch.full((2,), 4.0))
    again.watcher.uninstall()


def test_preemption_handler_with_a_manager_and_custom_exit(tmp_path, restore_sigterm):
    from distrib.train import CheckpointManager, TerminationConfig

    exits = []
    manager = CheckpointManager(Checkpoint(v=Variable(0)), str(tmp_path), max_to_keep=2)
    config = TerminationConfig(exit_fn=lambda: exits.append(1))
    handler = PreemptionCheckpointHandler(None, manager, termination_config=config)
    handler.watcher.trigger()
    handler.run(lambda: None)
    assert exits == [1] and manager.latest_checkpoint == str(tmp_path / "ckpt-1")
    with pytest.raises(ValueError, match="checkpoint_dir is required"):
        PreemptionCheckpointHandler(None, Checkpoint(v=Variable(0)))
