"""Synchronized BatchNorm for any device, so ``--sync-bn`` also works in CPU (gloo) training.

``torch.nn.SyncBatchNorm`` (which timm's ``convert_sync_batchnorm`` also uses) refuses CPU tensors, so this is one of
the few pieces the package keeps for itself. :class:`DistBatchNorm` computes the same thing with
differentiable ``all_reduce``s (a sum whose backward sums the gradients of all processes): the batch mean over every
process's samples, then the biased variance from the summed squared deviations (two passes, no
``E[x^2] - E[x]^2`` cancellation), normalizes with them, and updates the running statistics with
the unbiased variance over the global batch, as ``nn.BatchNorm`` does on one process. Gradients
flow through the reductions, so the backward pass is that of BatchNorm over the global batch.

:func:`convert_sync_batchnorm` swaps every ``BatchNorm1d/2d/3d`` (the MRConv branch BatchNorms are
one ``BatchNorm1d`` per mixer) for ``torch.nn.SyncBatchNorm`` on CUDA and :class:`DistBatchNorm`
elsewhere, keeping weights and running statistics.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = ['DistBatchNorm', 'convert_sync_batchnorm']


class _AllReduceSum(torch.autograd.Function):
    """Sum over the processes of ``group``, differentiable: the gradient of every input is the sum of the output
    gradients of all processes (each process's output feeds its own loss)."""

    @staticmethod
    def forward(ctx, t: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        out = t.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad, None


def _all_reduce_sum(t: torch.Tensor, group) -> torch.Tensor:
    return _AllReduceSum.apply(t, group)


class DistBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics are computed over all processes of ``process_group``."""

    # MRConv's folded training operator computes the same statistics itself where process_group is the default one
    synchronized_statistics = True

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group=None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f'expected at least 2D input (got {input.dim()}D input)')

    def _world_size(self) -> int:
        if not (dist.is_available() and dist.is_initialized()):
            return 1
        return dist.get_world_size(self.process_group)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(x)
        if not self.training or self._world_size() == 1:
            return super().forward(x)
        C = x.shape[1]
        dims = [0, *range(2, x.dim())]
        shape = [1, C] + [1] * (x.dim() - 2)
        xc = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        n_local = torch.tensor([xc.numel() // C], dtype=xc.dtype, device=xc.device)
        # pass 1: global count and mean
        stats = _all_reduce_sum(torch.cat([xc.sum(dims), n_local]), self.process_group)
        n = stats[C]
        mean = stats[:C] / n
        # pass 2: global biased variance from the summed squared deviations
        dev = xc - mean.view(shape)
        var = _all_reduce_sum((dev * dev).sum(dims), self.process_group) / n
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                m = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
                unbiased = var * (n / (n - 1).clamp_min(1))
                self.running_mean.mul_(1 - m).add_(mean.detach().to(self.running_mean.dtype), alpha=m)
                self.running_var.mul_(1 - m).add_(unbiased.detach().to(self.running_var.dtype), alpha=m)
        y = dev * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y.to(x.dtype)


def _copy_bn(src: _BatchNorm, dst: _BatchNorm) -> _BatchNorm:
    if src.affine:
        with torch.no_grad():
            dst.weight = src.weight
            dst.bias = src.bias
    if src.track_running_stats:
        dst.running_mean = src.running_mean
        dst.running_var = src.running_var
        dst.num_batches_tracked = src.num_batches_tracked
    dst.train(src.training)
    return dst


def convert_sync_batchnorm(module: nn.Module, device: torch.device | str = 'cpu', process_group=None) -> nn.Module:
    """Replace every BatchNorm of ``module`` by a synchronized one (in place where possible).

    CUDA: ``torch.nn.SyncBatchNorm.convert_sync_batchnorm``. Other devices: :class:`DistBatchNorm`.
    """
    if torch.device(device).type == 'cuda':
        return nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)
    if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)):
        new = DistBatchNorm(
            module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats, process_group
        )
        return _copy_bn(module, new)
    for name, child in module.named_children():
        new = convert_sync_batchnorm(child, device, process_group)
        if new is not child:
            setattr(module, name, new)
    return module
