"""Item 17.6: what SIGTERM does once the watcher installed for fit is gone."""
import signal

import pytest

from distrib.checkpoint.preemption import PreemptionWatcher, exit_after_training


@pytest.fixture(autouse=True)
def restore_sigterm():
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def test_after_a_finished_fit_sigterm_exits_with_status_0(capsys):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    PreemptionWatcher().install().uninstall(training_finished=True)
    assert signal.getsignal(signal.SIGTERM) is exit_after_training
    with pytest.raises(SystemExit) as exit_:
        exit_after_training(signal.SIGTERM, None)
    assert exit_.value.code == 0
    assert "SIGTERM after training had finished" in capsys.readouterr().err


def test_a_second_fit_leaves_the_same_handler_behind():
    signal.signal(signal.SIGTERM, exit_after_training)
    watcher = PreemptionWatcher().install()
    assert signal.getsignal(signal.SIGTERM) is not exit_after_training
    watcher.uninstall(training_finished=True)
    assert signal.getsignal(signal.SIGTERM) is exit_after_training


def test_a_users_own_handler_and_an_interrupted_fit_get_the_previous_handler_back():
    def mine(signum, frame):
        pass

    signal.signal(signal.SIGTERM, mine)
    PreemptionWatcher().install().uninstall(training_finished=True)
    assert signal.getsignal(signal.SIGTERM) is mine
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    PreemptionWatcher().install().uninstall()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
