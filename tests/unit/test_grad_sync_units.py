"""`GradientSynchronizer` directly, on thread-simulated replicas (a real thread collective).

Each test builds the same model on every replica, gives each replica its own
data, and compares the synced gradients with the sum of the per-replica
gradients computed here, on one thread, without the synchronizer. Gradients
are summed (the seeds' rule: losses are divided by the global batch size).
"""
from __future__ import annotations

import threading

import pytest
import torch

from distrib.comm.grad_sync import GradientSynchronizer
from distrib.testing.simulated import run_workers

REPLICAS = 2
SMALL_CAP_MB = 300 / 2 ** 20  # 300 bytes: the model below needs three buckets


_init_lock = threading.Lock()  # torch's global generator is shared by the replica threads


def _model() -> torch.nn.Module:
    with _init_lock:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16),
                                   torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _batch(rank: int, micro: int = 0):
    g = torch.Generator().manual_seed(100 * rank + micro)
    return torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)


def _backward(model: torch.nn.Module, rank: int, micro: int = 0) -> None:
    x, y = _batch(rank, micro)
    ((model(x) - y) ** 2).sum().div(6 * REPLICAS).backward()


def _local_grads(rank: int, micros=(0,)):
    model = _model()
    for micro in micros:
        _backward(model, rank, micro)
    return [p.grad.clone() for p in model.parameters()]


def _summed(micros=(0,)):
    per_replica = [_local_grads(r, micros) for r in range(REPLICAS)]
    return [torch.stack(parts).sum(0) for parts in zip(*per_replica)]


def _grads(model):
    return [None if p.grad is None else p.grad.clone() for p in model.parameters()]


def test_a_model_over_three_buckets_gets_exactly_the_summed_gradients():
    def replica(strategy):
        model = _model()
        sync = GradientSynchronizer(strategy.collective, bucket_cap_mb=SMALL_CAP_MB)
        sync.add_parameters(list(model.parameters()))
        _backward(model, strategy.replica_id)
        sync.finish()
        return _grads(model), strategy.collective.calls["all_reduce"]

    expected = _summed()
    for grads, messages in run_workers(replica, REPLICAS):
        assert messages >= 3  # one all-reduce per bucket
        for got, want in zip(grads, expected):
            assert torch.equal(got, want)


@pytest.mark.parametrize("compression,tolerance", [("fp16", 2e-3), ("bf16", 2e-2)])
def test_compressed_buckets_are_close_and_the_gradient_dtype_is_restored(compression, tolerance):
    def replica(strategy):
        model = _model()
        sync = GradientSynchronizer(strategy.collective, bucket_cap_mb=SMALL_CAP_MB,
                                    compression=compression)
        sync.add_parameters(list(model.parameters()))
        _backward(model, strategy.replica_id)
        sync.finish()
        return _grads(model)

    expected = _summed()
    for grads in run_workers(replica, REPLICAS):
        for got, want in zip(grads, expected):
            assert got.dtype == torch.float32
            torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)


def test_disabled_sync_accumulates_locally_and_the_next_step_sums_the_accumulation():
    def replica(strategy):
        model = _model()
        sync = GradientSynchronizer(strategy.collective, bucket_cap_mb=SMALL_CAP_MB)
        sync.add_parameters(list(model.parameters()))
        sync.enabled = False  # what Strategy.no_sync() does
        _backward(model, strategy.replica_id, micro=0)
        _backward(model, strategy.replica_id, micro=1)
        sync.finish()  # nothing was launched: a no-op
        local = _grads(model)
        messages = strategy.collective.calls["all_reduce"]
        sync.enabled = True
        _backward(model, strategy.replica_id, micro=2)
        sync.finish()
        return local, messages, _grads(model)

    expected = _summed(micros=(0, 1, 2))
    for rank, (local, messages, synced) in enumerate(run_workers(replica, REPLICAS)):
        assert messages == 0
        for got, want in zip(local, _local_grads(rank, micros=(0, 1))):
            assert torch.equal(got, want)
        for got, want in zip(synced, expected):
            assert torch.equal(got, want)


def test_a_parameter_used_on_one_replica_only_gets_that_replicas_gradient_everywhere():
    """Documented: a parameter no replica used keeps ``grad is None``; one used anywhere is summed."""
    def replica(strategy):
        rank = strategy.replica_id
        used_by_rank0, never_used = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))
        model = _model()
        params = list(model.parameters()) + [used_by_rank0, never_used]
        sync = GradientSynchronizer(strategy.collective, bucket_cap_mb=SMALL_CAP_MB)
        sync.add_parameters(params)
        x, y = _batch(rank)
        loss = ((model(x) - y) ** 2).sum().div(6 * REPLICAS)
        if rank == 0:
            loss = loss + (used_by_rank0 * torch.tensor([1.0, 2.0, 3.0])).sum()
        loss.backward()
        sync.finish()
        return _grads(model), used_by_rank0.grad, never_used.grad

    expected = _summed()
    for grads, used, unused in run_workers(replica, REPLICAS):
        assert torch.equal(used, torch.tensor([1.0, 2.0, 3.0]))
        assert unused is None
        for got, want in zip(grads, expected):
            assert torch.equal(got, want)


def test_a_frozen_layer_is_not_sent_and_is_summed_once_unfrozen():
    def replica(strategy):
        rank = strategy.replica_id
        model = _model()
        first = model[0]
        first.requires_grad_(False)
        sync = GradientSynchronizer(strategy.collective, bucket_cap_mb=SMALL_CAP_MB)
        sync.add_parameters(list(model.parameters()))
        _backward(model, rank)
        sync.finish()
        frozen = (first.weight.grad, first.bias.grad)
        model.zero_grad(set_to_none=True)
        first.requires_grad_(True)
        _backward(model, rank)
        sync.finish()
        return frozen, _grads(model)

    expected = _summed()
    for frozen, grads in run_workers(replica, REPLICAS):
        assert frozen == (None, None)
        for got, want in zip(grads, expected):
            assert torch.equal(got, want)
