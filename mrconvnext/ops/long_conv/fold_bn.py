"""MRConv's training form with the per-branch BatchNorms folded into one convolution (identity 4 of the GPU notes):
any device, any engine of :func:`~mrconvnext.ops.long_conv1d`, nothing of size ``(B, N, C, L)`` kept.

For ``x (B, C, L)``, kernels ``(N, C, K)`` (lag convention of :mod:`mrconvnext.ops.long_conv`), per-branch batch
statistics over the ``M = B L`` values of a channel (``mean_i``, biased ``var_i``, ``s_i = (var_i + eps)^-1/2``)::

    y = sum_i alpha_i (weight_i (z_i - mean_i) s_i + bias_i),   z_i = conv(x, k_i)
      = conv(x, sum_i a_i k_i) + c,   a_i = alpha_i weight_i s_i,   c = sum_i alpha_i (bias_i - weight_i mean_i s_i)

* ``mean_i`` is exact without any ``z_i``: ``mean_i = sum_s S[s] r_i[s] / M`` with ``S = sum_b x[b]`` and the
  ones-response ``r_i[s] = sum_{0 <= t < L} k_i[zero_lag + t - s]`` (a window sum of the taps).
* ``var_i`` is the centred sum ``sum (z_i - mean_i)^2 / M`` over batch chunks of the branch outputs (bounded
  memory, the mean known first: no ``E[z^2] - E[z]^2`` cancellation): squares and sums of each sequence in float32
  (float64 for float64 inputs), those sums accumulated in float64 (:func:`_square_sums`).
* The output is one convolution with the merged kernel of the centred input, plus ``center * T_merged 1 + c`` (the
  constant and the centre's response, in float64).
* Backward (``g = dL/dy``, ``G0 = sum g``, ``P_i = sum g (z_i - mean_i) s_i``):
  ``dbias_i = alpha_i G0``, ``dweight_i = alpha_i P_i``, ``dalpha_i = weight_i P_i + bias_i G0``, and
  ``dz_i = a_i (g - G0 / M) - (a_i P_i s_i / M)(z_i - mean_i)`` pushed through each branch's convolution for ``dx``
  and ``dk_i`` by :func:`~mrconvnext.ops.long_conv.long_conv1d_vjp`, batch chunk by batch chunk with the ``z_i``
  recomputed. ``P_i`` comes first, without any ``z_i``: ``sum g (z_i - mean_i) = <k_i, Q> + <sum_b g, offset_i>``
  with ``Q`` the kernel gradient of one convolution of the centred input for the output gradient ``g``
  (:func:`_gradient_products`).

Saved for the backward: ``x``, the kernels, the affine parameters and the statistics.

Shared filters (kernels ``(N, M, K)``, ``M`` dividing ``C``: channel ``g M + m`` takes filter ``m``, as in
:func:`~mrconvnext.ops.long_conv1d`): the branch passes convolve with the ``M`` filters, the groups as a batch
dimension; only the merged kernel, which differs per channel, is ``(C, K)``; the kernels' gradient is summed over
the channels that share them.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..checks import autocast_dtype, autocast_off
from .api import long_conv1d, long_conv1d_vjp
from .checks import check_branch_norm
from .conv_bn_sum import clamped_window, ones_response

__all__ = [
    'CHUNK_ELEMS',
    'folded_bn_conv',
    'folded_bn_conv_forward',
    'folded_bn_conv_backward',
    'folded_bn_conv_op',
    'folded_bn_conv_backward_op',
]

# Branch-output elements (batch chunk x N x C x L) formed at once by the statistics and backward passes. Chosen by
# counting mrconvnext_t's training step at batch 128 on fake CUDA with the chunks of _chunks (`python
# scripts/gpu_cost.py --model mrconvnext_t --train --gpu h100`, 2026-11-28): 2^25 elements 285.1 ms, peak 8923 MiB
# (1.05x convnext_tiny's); 5 * 2^23 259.9 ms, 9054 MiB (1.07x); 3 * 2^24 254.2 ms, 9251 MiB (1.09x); 2^26 251.1 ms,
# 9611 MiB (1.13x). Fewer chunks launch less and build each chunk's Toeplitz matrices fewer times (stage 3 runs as
# one chunk); 5 * 2^23 takes most of that within a 1.10x memory target with room for the real allocator.
CHUNK_ELEMS = 5 << 23


def _chunks(B: int, per_item: int):
    """Batch slices of at most ``CHUNK_ELEMS // per_item`` items (at least one), as few as that allows. Where the batch
    needs several, all but the last are of one size: the balanced size, rounded up to a multiple of 8 where the bound
    allows. The matmul methods take a chunk's batch as the innermost dimension of an operand
    (:func:`.engine_torch.toeplitz_conv`), and cuBLAS runs half-precision rows of a multiple of 8 values on faster
    kernels than rows of, say, 111 (the cost model's ``bmm_unaligned``): a batch of 128 at up to 111 items per chunk
    runs as 64 + 64, not 111 + 17."""
    most = max(1, CHUNK_ELEMS // max(1, per_item))
    step = -(-B // -(-B // most)) if B > most else B  # as few chunks as fit, balanced
    up = -(-step // 8) * 8
    if B > most and up <= most:
        step = up  # as many chunks, aligned
    for b0 in range(0, B, step):
        yield slice(b0, min(B, b0 + step))


def _summed(t: torch.Tensor, sync: bool) -> torch.Tensor:
    """``t``, or with ``sync`` its sum over the processes of the default group (synchronized BatchNorm)."""
    if sync and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        t = t.clone()
        dist.all_reduce(t)
    return t


def _per_channel(t: torch.Tensor, C: int) -> torch.Tensor:
    """``t (N, M, ...)`` of shared filters expanded to ``(N, C, ...)`` (channel ``g M + m``: filter ``m``)."""
    G = C // t.shape[1]
    return t if G == 1 else t.repeat(1, G, *([1] * (t.dim() - 2)))


def _centering(x: torch.Tensor, kernels: torch.Tensor, zero_lag: int, sync: bool):
    """``(M, center, mean, u, offset)`` in float64: the values per channel ``M`` (over all processes with ``sync``),
    the per-channel input mean ``center (C,)``, the branch means ``mean (N, C)`` (exact, from the ones-responses),
    ``u = T 1 (N, C, L)`` and ``offset (N, C, L)`` with ``z_i - mean_i = conv(x - center, k_i) + offset_i``: the
    branch outputs are formed from a centred input, so a large input mean cancels in float64, not in the
    convolution's dtype."""
    B, C, L = x.shape
    S = torch.cat([x.sum(0, dtype=torch.float64), x.new_full((C, 1), B, dtype=torch.float64)], dim=-1)
    S = _summed(S, sync)  # (C, L + 1): the batch sums and the batch size
    M = S[0, L] * L
    S = S[:, :L]
    center = S.sum(-1) / M
    K = kernels.shape[-1]
    u = _per_channel(ones_response(kernels, zero_lag, L), C)  # T 1 (N, C, L), float64
    r = _per_channel(ones_response(kernels.flip(-1), K - 1 - zero_lag, L), C)  # T^T 1: the taps reversed
    mean = (S.unsqueeze(0) * r).sum(-1) / M
    offset = center.view(1, C, 1) * u - mean.unsqueeze(-1)
    return M, center, mean, u, offset


def _acc(t: torch.Tensor) -> torch.dtype:
    """The dtype ``t``'s squares, products and sums are taken in: float64 for float64, else float32 (in fp16 they
    overflow, in bf16 they round to 8 bits)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _sums(t: torch.Tensor) -> torch.Tensor:
    """``t (b, N, C, L)`` summed over its batch and positions into ``(N, C)`` float64: each sequence summed in float32
    (float64 for float64 ``t``; L values, as precise as a float32 BatchNorm's own sums), those sums over the batch in
    float64. Nothing of ``t``'s size is made in float64 (on a GPU that pass would cost more than the convolutions)."""
    return t.sum(-1, dtype=_acc(t)).sum(0, dtype=torch.float64)


def _square_sums(t: torch.Tensor) -> torch.Tensor:
    """:func:`_sums` of ``t``'s squares, in one pass over ``t``: each sequence's squares summed in float32 (float64
    for float64 ``t``) as its norm, whose square rounds once more."""
    return torch.linalg.vector_norm(t, dim=-1, dtype=_acc(t)).square().sum(0, dtype=torch.float64)


def _in_dtype(x: torch.Tensor, center: torch.Tensor, offset: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``center (1, C, 1)`` and ``offset (N, C, L)`` in ``x``'s dtype, made once per call for every batch chunk."""
    return center.to(x.dtype).view(1, -1, 1), offset.to(x.dtype)


def _centred_branches(x, kernels, zero_lag, center_x, offset_x, method, engine):
    """``(x - center, z - mean)`` for a batch chunk ``x``: the centred input and ``conv(x - center, k_i) + offset_i =
    z_i - mean_i`` ``(b, N, C, L)`` (``center_x``, ``offset_x`` from :func:`_in_dtype`)."""
    xc = x - center_x
    return xc, long_conv1d(xc, kernels, zero_lag=zero_lag, method=method, engine=engine) + offset_x


def _gradient_products(g, x, kernels, zero_lag, center, offset, method, engine) -> torch.Tensor:
    """``sum g (z_i - mean_i)`` over this process's batch and positions, ``(N, C)`` float64, without forming a
    branch output: with ``z_i - mean_i = conv(x - center, k_i) + offset_i``, the sum is ``<k_i, Q> + <sum_b g,
    offset_i>`` where ``Q (C, K)``, the correlation of ``g`` with ``x - center`` at every lag summed over the batch,
    is the kernel gradient of one convolution (:func:`~mrconvnext.ops.long_conv.long_conv1d_vjp`, on the method of
    the branch convolutions, as precise as their kernel gradients). One such gradient costs less than the ``N``
    branch outputs it replaces."""
    B, C, L = x.shape
    per_channel = _per_channel(kernels, C)
    dummy = per_channel[0].to(_acc(x))  # (C, K): its values go unused; its dtype keeps Q in float32
    center_x = center.to(x.dtype).view(1, -1, 1)
    Q = torch.zeros(dummy.shape, dtype=torch.float64, device=x.device)
    for bs in _chunks(B, kernels.shape[0] * C * L):  # memory bounded as in the branch passes
        xc = x[bs] - center_x
        Q += long_conv1d_vjp(g[bs], xc, dummy, zero_lag, method=method, engine=engine, need_x=False)[1]
    g_sum = g.sum(0, dtype=_acc(g))  # (C, L)
    return (per_channel * Q).sum(-1) + (offset * g_sum).sum(-1)  # float64: Q and offset promote the products


def _reached_sums(D: torch.Tensor, zero_lag: int, taps: int) -> torch.Tensor:
    """``(..., K)``: for each tap ``j`` (lag ``tau = j - zero_lag``) the sum of ``D[..., t]`` over the outputs
    ``0 <= t < L`` whose input ``t - tau`` lies in the sequence."""
    L = D.shape[-1]
    prefix = F.pad(D.cumsum(-1), (1, 0))  # (..., L + 1): entry j, the sum of the first j
    return clamped_window(prefix, L - zero_lag, taps) - clamped_window(prefix, -zero_lag, taps)


def folded_bn_conv_forward(
    x: torch.Tensor,
    kernels: torch.Tensor,
    zero_lag: int,
    weight: torch.Tensor,
    bias: torch.Tensor,
    alpha: torch.Tensor,
    eps: float,
    method: str,
    engine: str,
    sync: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``mrconvnext::folded_bn_conv``: ``(y, mean, var)``, ``y (B, C, L)`` in ``x``'s dtype, the branch batch means
    and biased variances ``(N, C)`` in float64 (module docstring). ``x`` and the kernels in the dtype the
    convolutions run in (the caller casts; autocast is off inside); the BatchNorm parameters are folded in float64."""
    B, C, L = x.shape
    N = kernels.shape[0]
    with autocast_off(x.device.type), torch.no_grad():
        M, center, mean, u, offset = _centering(x, kernels, zero_lag, sync)
        sq = torch.zeros(N, C, dtype=torch.float64, device=x.device)
        center_x, offset_x = _in_dtype(x, center, offset)
        for bs in _chunks(B, N * C * L):
            _, d = _centred_branches(x[bs], kernels, zero_lag, center_x, offset_x, method, engine)
            sq += _square_sums(d)
        var = _summed(sq, sync) / M
        a, c = _fold(weight, bias, alpha, mean, var, eps)
        merged = (a.to(kernels.dtype).unsqueeze(-1) * _per_channel(kernels, C)).sum(0)
        # y = conv(x - center, merged) + center T_merged 1 + c, the large terms combined in float64
        shift = center.view(-1, 1) * (a.unsqueeze(-1) * u).sum(0) + c.unsqueeze(-1)  # (C, L)
        xc = x - center_x
        y = long_conv1d(xc, merged, zero_lag=zero_lag, method=method, engine=engine) + shift.to(x.dtype)
        if y.stride() != x.stride():  # laid out like x, whatever the method's product left (a channels-last map stays)
            y = torch.empty_like(x).copy_(y)
    return y, mean, var


def _fold(weight, bias, alpha, mean, var, eps):
    """``(a, c)`` in float64: ``a_i = alpha_i weight_i s_i`` (N, C) and ``c = sum_i alpha_i (bias_i - weight_i
    mean_i s_i)`` (C,)."""
    s = (var + eps).rsqrt()
    w, b, al = weight.double(), bias.double(), alpha.double()
    return al * w * s, (al * (b - w * mean * s)).sum(0)


folded_bn_conv_op = torch.library.custom_op('mrconvnext::folded_bn_conv', folded_bn_conv_forward, mutates_args=())


@folded_bn_conv_op.register_fake
def _(x, kernels, zero_lag, weight, bias, alpha, eps, method, engine, sync):
    N, C = kernels.shape[0], x.shape[1]
    stats = x.new_empty((N, C), dtype=torch.float64)
    return torch.empty_like(x), stats, stats.clone()


def folded_bn_conv_backward(
    g: torch.Tensor,
    x: torch.Tensor,
    kernels: torch.Tensor,
    zero_lag: int,
    weight: torch.Tensor,
    bias: torch.Tensor,
    alpha: torch.Tensor,
    mean: torch.Tensor,
    var: torch.Tensor,
    eps: float,
    method: str,
    engine: str,
    sync: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(grad_x, grad_kernels, grad_weight, grad_bias, grad_alpha)`` of :func:`folded_bn_conv_forward` for the output
    gradient ``g`` (module docstring); the branch outputs are recomputed chunk by chunk, once."""
    B, C, L = x.shape
    N = kernels.shape[0]
    with autocast_off(x.device.type):
        with torch.no_grad():
            M, center, _, _, offset = _centering(x, kernels, zero_lag, sync)
            s = (var + eps).rsqrt()
            a, _ = _fold(weight, bias, alpha, mean, var, eps)
            G0_local = _sums(g.unsqueeze(1))[0]  # (C,)
            gz_local = _gradient_products(g, x, kernels, zero_lag, center, offset, method, engine)
            G0 = _summed(G0_local, sync)
            P = s * _summed(gz_local, sync)  # sum g * zhat_i (over all processes: the statistics' gradient)
            coef = (-a * P * s / M).to(x.dtype).unsqueeze(-1)  # (N, C, 1): the z_i coefficient of dz_i
            gbar = (G0 / M).to(x.dtype).view(1, C, 1)
            a_x = a.to(x.dtype).unsqueeze(-1)
        grad_x = torch.empty_like(x)
        grad_k = torch.zeros_like(kernels)
        dz_sum = torch.zeros(N, C, L, dtype=torch.float64, device=x.device)
        center_x, offset_x = _in_dtype(x, center, offset)
        for bs in _chunks(B, N * C * L):
            xs, d = _centred_branches(x[bs], kernels, zero_lag, center_x, offset_x, method, engine)
            # in place of d, so laid out like it: the matmul methods leave the batch innermost, which their backward
            # reads; built in g's channels-last layout (a_x * (g - gbar) first), dz took a transposing copy of all N
            # maps there
            dz = d.mul_(coef).addcmul_(a_x, (g[bs] - gbar).unsqueeze(1))
            gx, gk = long_conv1d_vjp(dz, xs, kernels, zero_lag, method=method, engine=engine)
            grad_x[bs] = gx
            grad_k += gk
            dz_sum += dz.sum(0, dtype=_acc(dz))
        # the kernels also multiply the centre taken out of x: dk_i[j] += center * sum of dz_i over the outputs
        # that lag j reaches from inside the sequence
        reached = center.view(1, C, 1) * _reached_sums(dz_sum, zero_lag, kernels.shape[-1])  # (N, C, K)
        grad_k += reached.unflatten(1, (-1, kernels.shape[1])).sum(1).to(grad_k.dtype)
        w, b, al = weight.double(), bias.double(), alpha.double()
        return (
            grad_x,
            grad_k,
            # the parameters' gradients of this process's samples (DDP sums or averages them, as for nn.SyncBatchNorm)
            (al * s * gz_local).to(weight.dtype),
            (al * G0_local).to(bias.dtype),
            (w * s * gz_local + b * G0_local).to(alpha.dtype),
        )


folded_bn_conv_backward_op = torch.library.custom_op(
    'mrconvnext::folded_bn_conv_backward', folded_bn_conv_backward, mutates_args=()
)


@folded_bn_conv_backward_op.register_fake
def _(g, x, kernels, zero_lag, weight, bias, alpha, mean, var, eps, method, engine, sync):
    return (
        torch.empty_like(x),
        torch.empty_like(kernels),
        torch.empty_like(weight),
        torch.empty_like(bias),
        torch.empty_like(alpha),
    )


def _setup(ctx, inputs, output):
    x, kernels, zero_lag, weight, bias, alpha, eps, method, engine, sync = inputs
    _, mean, var = output
    ctx.save_for_backward(x, kernels, weight, bias, alpha, mean, var)
    ctx.args = (zero_lag, eps, method, engine, sync)


def _backward(ctx, g, grad_mean, grad_var):
    x, kernels, weight, bias, alpha, mean, var = ctx.saved_tensors
    zero_lag, eps, method, engine, sync = ctx.args
    gx, gk, gw, gb, ga = folded_bn_conv_backward_op(
        g, x, kernels, zero_lag, weight, bias, alpha, mean, var, eps, method, engine, sync
    )
    return gx, gk, None, gw, gb, ga, None, None, None, None


folded_bn_conv_op.register_autograd(_backward, setup_context=_setup)


def folded_bn_conv(
    x: torch.Tensor,
    kernels: torch.Tensor,
    zero_lag: int,
    weight: torch.Tensor,
    bias: torch.Tensor,
    alpha: torch.Tensor,
    eps: float = 1e-5,
    *,
    method: str = 'auto',
    engine: str = 'auto',
    sync: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``sum_i alpha_i BN_i(conv(x, k_i))`` with batch statistics (see the module docstring): ``x (B, C, L)``,
    ``kernels (N, C, K)`` or shared filters ``(N, M, K)``, ``weight`` / ``bias`` / ``alpha (N, C)``. Returns ``y`` (B, C, L) and the batch ``mean``
    and biased ``var`` (N, C) in float64 (no gradient) for the caller's running statistics. Under autocast the
    convolutions run in its dtype: ``x`` and the kernels are cast to it first (the BatchNorm parameters stay as they
    are, folded in float64), so the operator computes the same eager and compiled. ``sync``: the statistics are those
    of every process of the default group (synchronized BatchNorm): the sums of the statistics pass and of the
    backward are all-reduced; the parameters' gradients stay this process's (for DDP to reduce)."""
    check_branch_norm('folded_bn_conv', x, kernels, zero_lag, weight, bias, alpha, shared=True)
    amp = autocast_dtype(x.device.type)
    dtype = amp or x.dtype
    return folded_bn_conv_op(x.to(dtype), kernels.to(dtype), zero_lag, weight, bias, alpha, eps, method, engine, sync)
