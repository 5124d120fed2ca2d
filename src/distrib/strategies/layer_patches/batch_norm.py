"""Global-batch BatchNorm: torch BatchNorm layers in a multi-replica scope normalise like one process.

A ``torch.nn.BatchNorm1d/2d/3d`` created in (or adopted by) the scope of a
strategy with more than one replica computes, in training mode, the mean and
variance of the *global* batch: each replica sums its examples, one
all-reduce of ``2·C + 1`` numbers per layer combines them, and the backward
pass sums the statistics' gradients the same way. Every replica therefore
normalises with the statistics one process would compute on the whole global
batch, takes the same gradient, and updates identical running statistics —
equal to one process's. Evaluation mode uses the running statistics and
communicates nothing. ``CommunicationOptions(sync_batch_norm=False)`` keeps
the local statistics instead (tf.distribute's default: each replica
normalises with its own batch; distrib then averages the running statistics
after each step).

Example (2 replicas, per-replica batch [0, 2] and [4, 6] for one channel):
    training mean = 3.0 and biased variance = 5.0 on both replicas, the
    values one process gets for [0, 2, 4, 6].
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from distrib.comm.collective import ReduceOp

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["synchronize_batch_norm", "is_synchronized", "all_reduce_sum"]

_MARK = "_distrib_global_batch_norm"


class _AllReduceSum(torch.autograd.Function):
    """Sum across replicas; the gradient of a sum of every replica's loss is summed back."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, collective: Any) -> torch.Tensor:  # type: ignore[override]
        ctx.collective = collective
        return collective.all_reduce(tensor.detach().clone(), ReduceOp.SUM)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):  # type: ignore[override]
        return ctx.collective.all_reduce(grad.detach().clone().contiguous(), ReduceOp.SUM), None


def all_reduce_sum(tensor: torch.Tensor, collective: Any, comm_device: torch.device) -> torch.Tensor:
    """The sum of ``tensor`` over every replica, sent via ``comm_device``; its gradient is summed back alike."""
    return _AllReduceSum.apply(tensor.to(comm_device), collective).to(tensor.device)


def is_synchronized(module: torch.nn.Module) -> bool:
    """True if `synchronize_batch_norm` switched ``module`` to global-batch statistics."""
    return bool(module.__dict__.get(_MARK, False))


def synchronize_batch_norm(module: torch.nn.Module, strategy_of: Callable[[], Optional["Strategy"]]) -> bool:
    """Make a torch BatchNorm layer use global-batch statistics in training; False if not one.

    Args:
        module: any module; only ``_BatchNorm`` subclasses other than torch's
            own ``SyncBatchNorm`` are changed (idempotent).
        strategy_of: returns the strategy whose replicas share the batch, or
            None (a weak reference, so the layer keeps no strategy alive).
    """
    if not isinstance(module, _BatchNorm) or isinstance(module, torch.nn.SyncBatchNorm) or is_synchronized(module):
        return False
    module.__dict__[_MARK] = True
    module.forward = types.MethodType(_make_forward(strategy_of), module)  # type: ignore[method-assign]
    return True


def _make_forward(strategy_of: Callable[[], Optional["Strategy"]]) -> Callable[..., torch.Tensor]:
    def forward(self: _BatchNorm, x: torch.Tensor) -> torch.Tensor:
        strategy = strategy_of()
        uses_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        if strategy is None or not strategy.multi_replica or not uses_batch_stats:
            return type(self).forward(self, x)
        self._check_input_dim(x)
        return _global_batch_norm(self, x, strategy.collective, strategy.comm_device)
    return forward


def _global_batch_norm(bn: _BatchNorm, x: torch.Tensor, collective: Any, comm_device: torch.device) -> torch.Tensor:
    channels = x.shape[1]
    dims = [0] + list(range(2, x.dim()))
    xd = x.to(torch.float64)
    local = torch.cat([xd.sum(dims), (xd * xd).sum(dims),
                       torch.tensor([x.numel() // max(channels, 1)], dtype=torch.float64, device=x.device)])
    total = all_reduce_sum(local, collective, comm_device)
    count = total[-1]
    mean = total[:channels] / count
    var = (total[channels:2 * channels] / count - mean * mean).clamp_min(0.0)
    if bn.training and bn.track_running_stats and bn.num_batches_tracked is not None:
        bn.num_batches_tracked.add_(1)
        factor = 1.0 / float(bn.num_batches_tracked) if bn.momentum is None else bn.momentum
        with torch.no_grad():
            unbiased = var * (count / (count - 1)) if float(count) > 1 else var
            bn.running_mean.mul_(1 - factor).add_(mean.to(bn.running_mean.dtype), alpha=factor)
            bn.running_var.mul_(1 - factor).add_(unbiased.to(bn.running_var.dtype), alpha=factor)
    shape = [1, channels] + [1] * (x.dim() - 2)
    mean_x = mean.to(x.dtype).reshape(shape)
    invstd = torch.rsqrt(var + bn.eps).to(x.dtype).reshape(shape)
    y = (x - mean_x) * invstd
    if bn.affine:
        y = y * bn.weight.reshape(shape) + bn.bias.reshape(shape)
    return y

