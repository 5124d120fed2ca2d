"""`GradientSynchronizer` on 2 real workers: buckets, unused and frozen parameters, no_sync, unfreezing."""
from __future__ import annotations

import pytest
import torch

from distrib.testing import run_cluster

pytestmark = pytest.mark.timeout(180)


def _params(rank):
    """Three parameters; gradients of ``(rank + 1) * sum(p * k)`` are ``(rank + 1) * k``."""
    return [torch.nn.Parameter(torch.zeros(n)) for n in (3, 5, 2)]


def _backward(params, rank, use=(0, 1, 2)):
    loss = sum((params[i] * (i + 1)).sum() for i in use if params[i].requires_grad) * (rank + 1)
    loss.backward()


def scenarios():
    import distrib
    from distrib.comm.grad_sync import GradientSynchronizer

    strategy = distrib.MultiWorkerMirroredStrategy()
    rank = strategy.replica_id
    out = {}

    # several buckets (a tiny cap puts every parameter in its own), one parameter unused
    params = _params(rank)
    sync = GradientSynchronizer(strategy.collective, bucket_cap_mb=1e-6)
    sync.add_parameters(params)
    out["buckets"] = len(sync._buckets)
    _backward(params, rank, use=(0, 2))
    sync.finish()
    out["multi_bucket"] = [None if p.grad is None else p.grad.tolist() for p in params]

    # no_sync accumulates locally; the next synced backward sums the accumulated gradients
    params = _params(rank)
    sync = GradientSynchronizer(strategy.collective)
    sync.add_parameters(params)
    sync.enabled = False
    _backward(params, rank)
    sync.finish()  # nothing was synced: the gradients stay local
    out["no_sync_local"] = params[0].grad.tolist()
    sync.enabled = True
    _backward(params, rank)
    sync.finish()
    out["no_sync_then_sync"] = params[0].grad.tolist()

    # frozen at registration (no hook possible), unfrozen between steps
    params = _params(rank)
    params[1].requires_grad_(False)
    sync = GradientSynchronizer(strategy.collective)
    sync.add_parameters(params)
    _backward(params, rank)
    sync.finish()
    out["frozen_grad"] = params[1].grad
    for p in params:
        p.grad = None
    params[1].requires_grad_(True)
    _backward(params, rank)
    sync.finish()
    out["unfrozen"] = [p.grad.tolist() for p in params]

    # unfrozen in the middle of a step (after the layout was fixed by the first gradient)
    params = _params(rank)
    params[2].requires_grad_(False)
    sync = GradientSynchronizer(strategy.collective)
    sync.add_parameters(params)
    _backward(params, rank, use=(0,))
    params[2].requires_grad_(True)
    _backward(params, rank, use=(2,))
    sync.finish()
    out["unfrozen_mid_step"] = [params[0].grad.tolist(), params[2].grad.tolist()]

    # every parameter frozen at registration: no hook anywhere, finish still sums
    params = _params(rank)
    for p in params:
        p.requires_grad_(False)
    sync = GradientSynchronizer(strategy.collective)
    sync.add_parameters(params)
    params[0].requires_grad_(True)
    _backward(params, rank)
    sync.finish()
    out["all_frozen_then_one"] = params[0].grad.tolist()

    # refrozen: leaves the buckets; its stale gradient is not sent
    params = _params(rank)
    sync = GradientSynchronizer(strategy.collective)
    sync.add_parameters(params)
    _backward(params, rank)
    sync.finish()
    params[0].requires_grad_(False)
    params[0].grad = torch.full((3,), float(rank))  # differs per replica, must stay local
    params[1].grad = None
    _backward(params, rank, use=(1,))
    sync.finish()
    out["refrozen"] = [params[0].grad.tolist(), params[1].grad.tolist()]

    # uneven: only replica 0 has a gradient for the middle parameter (one bucket holds all three);
    # replica 0 had every gradient and reads no flag, replica 1 reads them: both step it
    from distrib.testing.host_reads import HostReads

    params = _params(rank)
    sync = GradientSynchronizer(strategy.collective)
    sync.add_parameters(params)
    _backward(params, rank, use=(0, 1, 2) if rank == 0 else (0, 2))
    with HostReads() as reads:
        sync.finish()
    out["uneven"] = [None if p.grad is None else p.grad.tolist() for p in params]
    out["uneven_reads"] = reads.count
    return out


@pytest.fixture(scope="module")
def results():
    return run_cluster(scenarios, num_workers=2, timeout=150)


def _summed(k, n):  # (1 + 2) * k from the two replicas
    return [3.0 * k] * n


def test_several_buckets_sum_and_an_unused_parameter_keeps_no_gradient(results):
    for res in results:
        assert res["buckets"] == 3
        assert res["multi_bucket"] == [_summed(1, 3), None, _summed(3, 2)]


def test_no_sync_keeps_gradients_local_then_sums_the_accumulation(results):
    assert [r["no_sync_local"] for r in results] == [[1.0] * 3, [2.0] * 3]
    for res in results:
        assert res["no_sync_then_sync"] == [6.0] * 3  # (1 + 1) + (2 + 2)


def test_a_parameter_frozen_at_registration_is_summed_once_unfrozen(results):
    for res in results:
        assert res["frozen_grad"] is None
        assert res["unfrozen"] == [_summed(1, 3), _summed(2, 5), _summed(3, 2)]


def test_a_parameter_unfrozen_mid_step_is_summed_by_finish(results):
    for res in results:
        assert res["unfrozen_mid_step"] == [_summed(1, 3), _summed(3, 2)]


def test_a_model_with_no_hook_at_all_still_syncs(results):
    for res in results:
        assert res["all_frozen_then_one"] == _summed(1, 3)


def test_a_refrozen_parameter_keeps_its_local_gradient(results):
    assert [r["refrozen"][0] for r in results] == [[0.0] * 3, [1.0] * 3]
    for res in results:
        assert res["refrozen"][1] == _summed(2, 5)


def test_a_gradient_only_one_replica_has_is_summed_on_both_and_complete_replicas_read_nothing(results):
    """The "had a gradient" flags are read on the host only by a replica that lacked one."""
    for res in results:
        assert res["uneven"] == [_summed(1, 3), [2.0] * 5, _summed(3, 2)]  # only replica 0's (1 * 2)
    assert results[0]["uneven_reads"] == 0
    assert results[1]["uneven_reads"] > 0
