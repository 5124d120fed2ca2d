"""Item 17.3: every restart attempt reads and writes its own store namespace."""
import pytest
import torch.distributed as dist

from distrib.comm.attempt import attempt_namespace, attempt_store
from distrib.process.ports import free_port


def test_each_launcher_counter_gives_its_own_namespace():
    names = {attempt_namespace(env) for env in (
        {}, {"TORCHELASTIC_RESTART_COUNT": "0"}, {"TORCHELASTIC_RESTART_COUNT": "1"},
        {"SLURM_RESTART_COUNT": "1"}, {"SLURM_RESTART_COUNT": "1", "TORCHELASTIC_RESTART_COUNT": "1"})}
    assert len(names) == 5


def test_distrib_launch_counter_is_not_part_of_the_namespace():
    """Nodes of a multi-node launch count their restarts apart: the count must not split them."""
    assert attempt_namespace({"DISTRIB_RESTART_COUNT": "3"}) == attempt_namespace({})


def test_malformed_counter_names_the_variable():
    with pytest.raises(ValueError, match="SLURM_RESTART_COUNT='x'"):
        attempt_namespace({"SLURM_RESTART_COUNT": "x"})


def test_slurm_requeue_does_not_see_the_first_attempts_keys():
    """A store that outlives an attempt (torchrun's agent store; a chief that stayed up)."""
    port = free_port()
    master = dist.TCPStore("127.0.0.1", port, 1, is_master=True, wait_for_workers=False)
    first = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "0"}
    requeued = dict(first, SLURM_RESTART_COUNT="1")
    attempt_store(master, first).set("distrib/joined_count", "2")
    again = attempt_store(dist.TCPStore("127.0.0.1", port, 1, is_master=False), requeued)
    assert not again.check(["distrib/joined_count"])
    assert attempt_store(master, first).check(["distrib/joined_count"])
