"""MRConv's per-branch BatchNorm and weighted sum (paper Eq. 10-12), with ``nn.BatchNorm1d``'s bookkeeping.

The branches' BatchNorms are one ``BatchNorm1d(N * C)`` (channel ``i * C + c`` is branch ``i``'s channel ``c``) and
``alpha (N, C)`` weighs them. Three training forms compute the same statistics, running-statistics updates and
gradients: the fused CPU operator :func:`~mrconvnext.ops.branch_conv_bn_sum` (convolution, BatchNorms and sum in one,
where it runs), the folded operator :func:`~mrconvnext.ops.long_conv.folded_bn_conv` (one merged convolution, off
the CPU) and ``F.batch_norm`` with alpha folded into its affine transform (after a convolution per branch: the CPU's
torch engine, statistics over part of the map). Any other norm module (e.g. a
synchronized BatchNorm after conversion) is called as it is, then weighted by alpha.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ..ops.long_conv import branch_conv_bn_sum, folded_bn_conv
from ..ops.long_conv import dispatch as long_conv_dispatch

__all__ = [
    'fused_conv_norm_sum',
    'synchronized',
    'training_form',
    'folded_conv_norm_sum',
    'norm_sum',
    'momentum_step',
]


def synchronized(bn: nn.Module) -> bool:
    """Whether ``bn`` is a BatchNorm synchronized over the default process group: torch's ``SyncBatchNorm``, or a
    module whose class sets ``synchronized_statistics = True`` (:class:`~mrconvnext.layers.sync_bn.DistBatchNorm`)."""
    sync = isinstance(bn, nn.SyncBatchNorm) or getattr(type(bn), 'synchronized_statistics', False)
    return bool(sync) and getattr(bn, 'process_group', None) is None


def training_form(bn: nn.Module, x: torch.Tensor, method: str, engine: str, whole_map: bool = True) -> str:
    """The form of this forward (:func:`~mrconvnext.ops.long_conv.dispatch.branch_sum_form`, which decides), from the
    norm module's state: ``'fused'`` (:func:`fused_conv_norm_sum`), ``'fold'`` (:func:`folded_conv_norm_sum`) or
    ``'branches'`` (a convolution per branch, then :func:`norm_sum`)."""
    return long_conv_dispatch.branch_sum_form(
        x.device.type,
        x.dtype,
        method,
        engine,
        batch_stats=bn.training and bool(getattr(bn, 'affine', False)),
        plain=type(bn) is nn.BatchNorm1d,
        synchronized=synchronized(bn),
        whole_map=whole_map,
    )


def momentum_step(bn: nn.BatchNorm1d) -> float:
    """Counts a training batch and returns the running-statistics momentum, as nn.BatchNorm1d does
    (``momentum=None``: cumulative moving average)."""
    bn.num_batches_tracked.add_(1)
    return 1.0 / float(bn.num_batches_tracked) if bn.momentum is None else bn.momentum


def fused_conv_norm_sum(
    bn: nn.BatchNorm1d, alpha: torch.Tensor, x: torch.Tensor, kernels: torch.Tensor, zero_lag: int
) -> torch.Tensor:
    """``sum_i alpha_i * bn_i(conv(x, kernel_i))`` for ``x (B, C, L)`` and ``kernels (N, C, K)`` through the fused
    CPU operator, with nn.BatchNorm1d's running-statistics updates."""
    N, C = alpha.shape
    dt = x.dtype
    y, mean, var = branch_conv_bn_sum(
        x, kernels, zero_lag, bn.weight.view(N, C).to(dt), bn.bias.view(N, C).to(dt), alpha.to(dt), bn.eps
    )
    _update_running(bn, mean, var, x.shape[0] * x.shape[2])
    return y


def folded_conv_norm_sum(
    bn: nn.BatchNorm1d,
    alpha: torch.Tensor,
    x: torch.Tensor,
    kernels: torch.Tensor,
    zero_lag: int,
    method: str = 'auto',
    engine: str = 'auto',
) -> torch.Tensor:
    """The same as :func:`fused_conv_norm_sum` through :func:`~mrconvnext.ops.long_conv.folded_bn_conv`: one
    convolution with the merged kernel (``kernels`` may be shared filters, ``(N, M, K)``), statistics without a
    stored ``(B, N, C, L)`` tensor; a :func:`synchronized` norm takes them over every process (whose batches are
    taken to be equal, as a distributed training loader that drops the last partial batch gives, for the running
    variance's ``M / (M - 1)``)."""
    N, C = alpha.shape
    sync = synchronized(bn)
    y, mean, var = folded_bn_conv(
        x, kernels, zero_lag, bn.weight.view(N, C), bn.bias.view(N, C), alpha, bn.eps, method=method, engine=engine,
        sync=sync,
    )  # fmt: skip
    world = dist.get_world_size() if sync and dist.is_available() and dist.is_initialized() else 1
    _update_running(bn, mean, var, x.shape[0] * x.shape[2] * world)
    return y


def _update_running(bn: nn.BatchNorm1d, mean: torch.Tensor, var: torch.Tensor, M: int) -> None:
    """nn.BatchNorm1d's running-statistics update from the batch ``mean`` and biased ``var`` of ``M`` values per
    channel (the running variance is the unbiased one, as F.batch_norm keeps it)."""
    if not bn.track_running_stats:
        return
    momentum = momentum_step(bn)
    with torch.no_grad():
        bn.running_mean.lerp_(mean.reshape(-1).to(bn.running_mean.dtype), momentum)
        bn.running_var.lerp_((var * (M / (M - 1))).reshape(-1).to(bn.running_var.dtype), momentum)


def _batch_norm_alpha(bn: nn.BatchNorm1d, alpha: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``alpha * bn(y)`` with alpha folded into the BatchNorm's affine transform: one fused op instead of a
    normalization and a weighted sum (same statistics, running-stat updates and gradients)."""
    momentum = 0.0 if bn.momentum is None else bn.momentum
    if bn.training and bn.track_running_stats:
        momentum = momentum_step(bn)
    batch_stats = bn.training or bn.running_mean is None
    a = alpha.reshape(-1).to(y.dtype)
    return F.batch_norm(
        y,
        bn.running_mean if not bn.training or bn.track_running_stats else None,
        bn.running_var if not bn.training or bn.track_running_stats else None,
        a * bn.weight,
        a * bn.bias,
        batch_stats,
        momentum,
        bn.eps,
    )


def norm_sum(bn: nn.Module, alpha: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``sum_i alpha_i * bn_i(y_i)`` for the branch outputs ``y (B, N, C, L)`` -> ``(B, C, L)``."""
    B, N, C = y.shape[:3]
    flat = y.reshape(B, N * C, -1)
    if type(bn) is nn.BatchNorm1d and bn.affine:
        return _batch_norm_alpha(bn, alpha, flat).view(B, N, C, -1).sum(1)
    return (bn(flat).view(B, N, C, -1) * alpha.to(y.dtype).unsqueeze(-1)).sum(1)
