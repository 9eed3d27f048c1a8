"""Triton kernels of DynamicConv and LightConv, channels-last, forward and backward, registered as ``triton_op``s.

Layout: ``x (B, L, C)`` (any strides; the ``(B, C, L)`` channels-last view of a ConvNeXt map is a transpose away, no
copy), ``logits (B, L, H, K)`` contiguous (one GEMM on the ``(B·L, C)`` view gives them), ``drop`` the same shape or
absent (DropConnect multipliers: 0 or ``1 / (1 - p)``). Head ``h`` is channels ``h R .. h R + R - 1``, ``R = C / H``;
tap ``k`` has lag ``k - zero_lag`` (:mod:`mrconvnext.ops.light_conv`)::

    w[b, t, h, k] = softmax_k(logits[b, t, h, :]) * drop[b, t, h, k]      (softmax=True; else logits * drop)
    y[b, t, c]    = sum_k w[b, t, h(c), k] * x[b, t - (k - zero_lag), c]   (zero outside 0 <= t - lag < L)

Forward: one program per (image, block of positions, block of heads) takes the softmax statistics of its ``(t, h)``
in float32 registers (log-sum-exp, saved for the backward: ``(B, L, H)`` float32), then adds the K taps as shifted
loads of the input tile; ``y (B, L, C)`` contiguous, in ``promote_types(x, logits)``.

Backward, one kernel over the same blocks and one loop over the taps: ``dx[s] = sum_k w[s + lag_k, k] g[s + lag_k]``
(the weights recomputed at the shifted positions from the logits and the saved log-sum-exp) and
``v_k = drop_k sum_{c in h} g[t, c] x[t - lag_k, c]`` reduced over a head's channels in registers; a second loop over
the taps makes the softmax's gradient ``dlogits_k = p_k (v_k - sum_j p_j v_j)`` (``v_k`` kept in between in an
accumulation-dtype buffer of its own). Accumulation in float32 (float64 for
float64 operands); no atomics, deterministic.

LightConv (``light_conv_triton``) runs the same kernels with weights ``(H, K)`` shared by every position (``SHARED``:
the weight row of ``(t, h)`` is ``h``; already normalized, no softmax or multipliers in the kernel). Its weight
gradient is reduced over a program's positions in registers and written per (image, block of positions), ``(B,
L / BLOCK_L, H, K)`` in the accumulation dtype, then summed: no atomics there either.

Devices: CUDA tensors; CPU tensors under Triton's interpreter (``TRITON_INTERPRET=1`` before the first import; see
:mod:`mrconvnext.ops.talk.engine_triton`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

from .flops import register_triton_flops
from .operators import register_conv_autograd

__all__ = [
    'dynamic_conv_triton',
    'dynamic_conv_triton_backward',
    'light_conv_triton',
    'light_conv_triton_backward',
    'dynamic_conv_fwd_jit',
    'dynamic_conv_bwd_jit',
    'block_sizes',
]

_BLOCK_L = 32  # positions per program
_CHANNELS = 64  # channels per program (a power of two; heads of R channels, BLOCK_H * BLOCK_R of them)


def block_sizes(heads: int, head_dim: int, taps: int) -> dict[str, int]:
    """Block sizes for ``heads`` heads of ``head_dim`` channels and ``taps`` taps: positions, heads, channels and taps
    per program (powers of two)."""
    block_r = triton.next_power_of_2(head_dim)
    block_h = min(triton.next_power_of_2(heads), max(1, _CHANNELS // block_r))
    block_k = triton.next_power_of_2(taps)
    # The softmax's logit tile is (BLOCK_L, BLOCK_H, BLOCK_K): at 32 x 4 x 32, ptxas of Triton 3.8 parks a value in
    # local memory (96 registers, 8 B of stack); half the positions keep it in registers on Triton 3.6 and 3.8.
    block_l = _BLOCK_L if block_k <= 16 else _BLOCK_L // 2
    return dict(BLOCK_L=block_l, BLOCK_H=block_h, BLOCK_R=block_r, BLOCK_K=block_k)


@triton.jit
def _tile(L, H, R, BLOCK_L: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr):
    """This program's image, positions ``t (BLOCK_L,)``, heads ``h (BLOCK_H,)``, channels ``c (BLOCK_H, BLOCK_R)``,
    the ``(t, h)`` rows ``(b L + t) H + h`` of the logits, and the masks of t, of the rows and of ``(t, h, r)``; the
    grid is (position blocks, head blocks, images)."""
    b = tl.program_id(2).to(tl.int64)
    t = tl.program_id(0).to(tl.int64) * BLOCK_L + tl.arange(0, BLOCK_L).to(tl.int64)
    h = tl.program_id(1).to(tl.int64) * BLOCK_H + tl.arange(0, BLOCK_H).to(tl.int64)
    r = tl.arange(0, BLOCK_R).to(tl.int64)
    c = h[:, None] * R + r[None, :]
    cmask = (h < H)[:, None] & (r < R)[None, :]
    tmask = t < L
    row = (b * L + t)[:, None] * H + h[None, :]
    rmask = tmask[:, None] & (h < H)[None, :]
    return b, t, h, c, row, tmask, rmask, cmask, tmask[:, None, None] & cmask[None, :, :]


@triton.jit
def _rows(b, t, h, L, H, SHARED: tl.constexpr):
    """The weight rows of positions ``t`` and heads ``h``, ``(BLOCK_L, BLOCK_H)``: ``(b L + t) H + h``, or ``h`` for
    weights shared by every position."""
    if SHARED:
        return h[None, :] + tl.zeros_like(t)[:, None]
    return (b * L + t)[:, None] * H + h[None, :]


@triton.jit
def _weight(lg, drop, lse, row, k, mask, K, SOFTMAX: tl.constexpr, HAS_DROP: tl.constexpr, ACC_F64: tl.constexpr):
    """Tap ``k``'s weights at the ``(t, h)`` rows ``row = (b L + t) H + h`` (any shape), zero where not ``mask``."""
    acc_ty = tl.float64 if ACC_F64 else tl.float32
    w = tl.load(lg + row * K + k, mask=mask, other=0.0).to(acc_ty)
    if SOFTMAX:
        w = tl.exp(w - tl.load(lse + row, mask=mask, other=0.0))
    if HAS_DROP:
        w = w * tl.load(drop + row * K + k, mask=mask, other=0.0).to(acc_ty)
    return tl.where(mask, w, 0.0)


@triton.jit
def dynamic_conv_fwd_jit(
    x,
    lg,
    drop,
    y,
    lse,
    L,
    C,
    H,
    R,
    K,
    zero_lag,
    sxb,
    sxl,
    sxc,
    SOFTMAX: tl.constexpr,
    HAS_DROP: tl.constexpr,
    SHARED: tl.constexpr,
    ACC_F64: tl.constexpr,
    BLOCK_L: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    acc_ty = tl.float64 if ACC_F64 else tl.float32
    b, t, h, c, row, tmask, rmask, cmask, full = _tile(L, H, R, BLOCK_L, BLOCK_H, BLOCK_R)
    if SOFTMAX:
        kk = tl.arange(0, BLOCK_K)
        lmask = rmask[:, :, None] & (kk < K)[None, None, :]
        logit = tl.load(lg + row[:, :, None] * K + kk[None, None, :], mask=lmask, other=float('-inf')).to(acc_ty)
        m = tl.max(logit, axis=2)
        m = tl.where(m == float('-inf'), 0.0, m)  # all -inf (masked rows, or -inf logits): no NaN from the shift
        s = tl.sum(tl.exp(logit - m[:, :, None]), axis=2)
        tl.store(lse + row, m + tl.log(tl.where(rmask, s, 1.0)), mask=rmask)  # (no log(0) on masked rows)
    acc = tl.zeros([BLOCK_L, BLOCK_H, BLOCK_R], dtype=acc_ty)
    xb = x + b * sxb + c[None, :, :] * sxc
    wrow = _rows(b, t, h, L, H, SHARED)
    for k in range(0, K):
        src = t - (k - zero_lag)
        live = tmask & (src >= 0) & (src < L)
        w = _weight(lg, drop, lse, wrow, k, rmask & live[:, None], K, SOFTMAX, HAS_DROP, ACC_F64)
        xv = tl.load(xb + src[:, None, None] * sxl, mask=live[:, None, None] & cmask[None, :, :], other=0.0)
        acc += w[:, :, None] * xv.to(acc_ty)
    tl.store(y + (b * L + t)[:, None, None] * C + c[None, :, :], acc.to(y.dtype.element_ty), mask=full)


@triton.jit
def dynamic_conv_bwd_jit(
    g,
    x,
    lg,
    drop,
    lse,
    dx,
    dlg,
    vbuf,
    L,
    C,
    H,
    R,
    K,
    zero_lag,
    sxb,
    sxl,
    sxc,
    sgb,
    sgl,
    sgc,
    SOFTMAX: tl.constexpr,
    HAS_DROP: tl.constexpr,
    SHARED: tl.constexpr,
    NEED_DX: tl.constexpr,
    NEED_DW: tl.constexpr,
    ACC_F64: tl.constexpr,
    BLOCK_L: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    acc_ty = tl.float64 if ACC_F64 else tl.float32
    b, t, h, c, row, tmask, rmask, cmask, full = _tile(L, H, R, BLOCK_L, BLOCK_H, BLOCK_R)
    gb = g + b * sgb + c[None, :, :] * sgc
    xb = x + b * sxb + c[None, :, :] * sxc
    gt = tl.load(gb + t[:, None, None] * sgl, mask=full, other=0.0).to(acc_ty)  # g at this block's positions
    acc_dx = tl.zeros([BLOCK_L, BLOCK_H, BLOCK_R], dtype=acc_ty)
    total = tl.zeros([BLOCK_L, BLOCK_H], dtype=acc_ty)  # sum_j p_j v_j
    for k in range(0, K):
        lag = k - zero_lag
        if NEED_DW:  # v_k at t: the head's channels of g[t] x[t - lag]
            src = t - lag
            live = tmask & (src >= 0) & (src < L)
            xv = tl.load(xb + src[:, None, None] * sxl, mask=live[:, None, None] & cmask[None, :, :], other=0.0)
            v = tl.sum(gt * xv.to(acc_ty), axis=2)
            if HAS_DROP:
                v = v * tl.load(drop + row * K + k, mask=rmask, other=0.0).to(acc_ty)
            if SOFTMAX:
                p = _weight(lg, drop, lse, row, k, rmask, K, SOFTMAX, False, ACC_F64)
                total += p * v
                tl.store(vbuf + row * K + k, v, mask=rmask)
            elif SHARED:  # this program's share of the shared weights' gradient: v summed over its positions
                part = (b * tl.num_programs(0) + tl.program_id(0)) * H + h
                tl.store(dlg + part * K + k, tl.sum(v, axis=0).to(dlg.dtype.element_ty), mask=h < H)
            else:
                tl.store(dlg + row * K + k, v.to(dlg.dtype.element_ty), mask=rmask)
        if NEED_DX:  # dx at s = t: the weights and g at t + lag
            dst = t + lag
            live = tmask & (dst >= 0) & (dst < L)
            drow = _rows(b, dst, h, L, H, SHARED)
            w = _weight(lg, drop, lse, drow, k, live[:, None] & (h < H)[None, :], K, SOFTMAX, HAS_DROP, ACC_F64)
            gv = tl.load(gb + dst[:, None, None] * sgl, mask=live[:, None, None] & cmask[None, :, :], other=0.0)
            acc_dx += w[:, :, None] * gv.to(acc_ty)
    if NEED_DX:
        tl.store(dx + (b * L + t)[:, None, None] * C + c[None, :, :], acc_dx.to(dx.dtype.element_ty), mask=full)
    if NEED_DW and SOFTMAX:
        tl.debug_barrier()  # the v_k stored above, read back by other threads of the program
        for k in range(0, K):
            p = _weight(lg, drop, lse, row, k, rmask, K, SOFTMAX, False, ACC_F64)
            v = tl.load(vbuf + row * K + k, mask=rmask, other=0.0)
            tl.store(dlg + row * K + k, (p * (v - total)).to(dlg.dtype.element_ty), mask=rmask)


def _acc_f64(*tensors: torch.Tensor) -> bool:
    return any(t.dtype == torch.float64 for t in tensors)


def _grid(B: int, L: int, H: int, blocks: dict[str, int]) -> tuple[int, int, int]:
    return (triton.cdiv(L, blocks['BLOCK_L']), triton.cdiv(H, blocks['BLOCK_H']), B)


@triton_op('mrconvnext::dynamic_conv_triton', mutates_args=())
def dynamic_conv_triton(
    x: torch.Tensor, logits: torch.Tensor, drop: torch.Tensor | None, zero_lag: int, softmax: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y (B, L, C) contiguous, lse (B, L, H) in the accumulation dtype)`` for ``x (B, L, C)`` (any strides),
    ``logits (B, L, H, K)`` and ``drop`` (same shape, or None); see the module docstring. ``lse`` is empty when
    ``softmax`` is False (the logits are then the weights themselves)."""
    B, L, C = x.shape
    H, K = logits.shape[2], logits.shape[3]
    acc = torch.float64 if _acc_f64(x, logits) else torch.float32
    y = torch.empty((B, L, C), dtype=torch.promote_types(x.dtype, logits.dtype), device=x.device)
    lse = torch.empty((B, L, H) if softmax else (0,), dtype=acc, device=x.device)
    if y.numel() == 0:
        return y, lse
    lg = logits.contiguous()
    dr = drop.contiguous() if drop is not None else lg
    blocks = block_sizes(H, C // H, K)
    wrap_triton(dynamic_conv_fwd_jit)[_grid(B, L, H, blocks)](
        x, lg, dr, y, lse if softmax else lg, L, C, H, C // H, K, zero_lag, *x.stride(),
        SOFTMAX=softmax, HAS_DROP=drop is not None, SHARED=False, ACC_F64=acc == torch.float64, **blocks,
    )  # fmt: skip
    return y, lse


@triton_op('mrconvnext::dynamic_conv_triton_backward', mutates_args=())
def dynamic_conv_triton_backward(
    grad_y: torch.Tensor,
    x: torch.Tensor,
    logits: torch.Tensor,
    drop: torch.Tensor | None,
    lse: torch.Tensor,
    zero_lag: int,
    softmax: bool,
    need_dx: bool,
    need_dlogits: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dx (B, L, C) contiguous in x's dtype, dlogits (B, L, H, K) contiguous in the logits' dtype)`` of
    :func:`dynamic_conv_triton`; an empty tensor for one not needed."""
    B, L, C = x.shape
    H, K = logits.shape[2], logits.shape[3]
    acc = torch.float64 if _acc_f64(x, logits) else torch.float32
    dx = torch.empty((B, L, C), dtype=x.dtype, device=x.device) if need_dx else x.new_empty(0)
    dlg = torch.empty((B, L, H, K), dtype=logits.dtype, device=x.device) if need_dlogits else logits.new_empty(0)
    if x.numel() == 0 or not (need_dx or need_dlogits):
        return dx, dlg
    # v_k between the two tap loops, in the accumulation dtype. Never dlogits itself, even where the dtypes agree: a
    # kernel argument written through two aliases is cloned once per alias when torch.compile functionalizes it, and
    # the copies back then leave v_k in dlogits (seen on an H200: opcheck's aot_dispatch gradients).
    lg = logits.contiguous()
    vbuf = torch.empty_like(dlg, dtype=acc) if softmax and need_dlogits else lg
    dr = drop.contiguous() if drop is not None else lg
    blocks = block_sizes(H, C // H, K)
    del blocks['BLOCK_K']
    wrap_triton(dynamic_conv_bwd_jit)[_grid(B, L, H, blocks)](
        grad_y, x, lg, dr, lse if softmax else lg, dx if need_dx else lg, dlg if need_dlogits else lg,
        vbuf, L, C, H, C // H, K, zero_lag, *x.stride(), *grad_y.stride(),
        SOFTMAX=softmax, HAS_DROP=drop is not None, SHARED=False, NEED_DX=need_dx, NEED_DW=need_dlogits,
        ACC_F64=acc == torch.float64, **blocks,
    )  # fmt: skip
    return dx, dlg


def _setup(ctx, inputs, output):
    x, logits, drop, zero_lag, softmax = inputs
    ctx.save_for_backward(x, logits, drop, output[1])  # x, the logits, the multipliers, the log-sum-exp
    ctx.zero_lag, ctx.softmax = zero_lag, softmax


def _grad(ctx, grad_y, _grad_lse):
    x, logits, drop, lse = ctx.saved_tensors
    need_dx, need_dlogits = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    dx, dlogits = dynamic_conv_triton_backward(
        grad_y, x, logits, drop, lse, ctx.zero_lag, ctx.softmax, need_dx, need_dlogits
    )
    return (dx if need_dx else None), (dlogits if need_dlogits else None), None, None, None


dynamic_conv_triton.register_autograd(_grad, setup_context=_setup)


@triton_op('mrconvnext::light_conv_triton', mutates_args=())
def light_conv_triton(x: torch.Tensor, weight: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """``y (B, L, C)`` contiguous, in ``promote_types(x, weight)``, for ``x (B, L, C)`` (any strides) and normalized
    weights ``(H, K)`` shared by every position (LightConv; module docstring)."""
    B, L, C = x.shape
    H, K = weight.shape
    acc = torch.float64 if _acc_f64(x, weight) else torch.float32
    y = torch.empty((B, L, C), dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    if y.numel() == 0:
        return y
    w = weight.contiguous()
    blocks = block_sizes(H, C // H, K)
    wrap_triton(dynamic_conv_fwd_jit)[_grid(B, L, H, blocks)](
        x, w, w, y, w, L, C, H, C // H, K, zero_lag, *x.stride(),
        SOFTMAX=False, HAS_DROP=False, SHARED=True, ACC_F64=acc == torch.float64, **blocks,
    )  # fmt: skip
    return y


@triton_op('mrconvnext::light_conv_triton_backward', mutates_args=())
def light_conv_triton_backward(
    grad_y: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, zero_lag: int, need_dx: bool, need_dweight: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dx (B, L, C) contiguous in x's dtype, dweight (H, K) in the weight's dtype)`` of :func:`light_conv_triton`;
    an empty tensor for one not needed. The weight gradient is summed from per-(image, block of positions) partials."""
    B, L, C = x.shape
    H, K = weight.shape
    acc = torch.float64 if _acc_f64(x, weight) else torch.float32
    blocks = block_sizes(H, C // H, K)
    del blocks['BLOCK_K']
    grid = _grid(B, L, H, blocks)
    dx = torch.empty((B, L, C), dtype=x.dtype, device=x.device) if need_dx else x.new_empty(0)
    part = torch.zeros((B, grid[0], H, K), dtype=acc, device=x.device) if need_dweight else weight.new_empty(0)
    if x.numel() > 0 and (need_dx or need_dweight):
        w = weight.contiguous()
        wrap_triton(dynamic_conv_bwd_jit)[grid](
            grad_y, x, w, w, w, dx if need_dx else w, part if need_dweight else w, w, L, C, H, C // H, K, zero_lag,
            *x.stride(), *grad_y.stride(), SOFTMAX=False, HAS_DROP=False, SHARED=True, NEED_DX=need_dx,
            NEED_DW=need_dweight, ACC_F64=acc == torch.float64, **blocks,
        )  # fmt: skip
    return dx, (part.sum((0, 1)).to(weight.dtype) if need_dweight else part)


register_conv_autograd(light_conv_triton, light_conv_triton_backward)
register_triton_flops()
