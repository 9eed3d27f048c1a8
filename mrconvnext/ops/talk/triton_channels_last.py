"""The channels-last kernels of the Triton TaLK operators: maps as ConvNeXt blocks hand them over (a flattened
channels-last ``(B, C, H*W)`` view, or a channels-last ``(B, C, H, W)``), kept with a head's channels together. The
tables come from the scans of :mod:`.triton_scan` (blocks of 32 adjacent channels in 1-D, the one-pass 2-D scan);
one program per (image, block of positions, block of heads) finds each window's edges once per (position, head) and
gathers (or, backward, atomically adds) the head's channels as one vector. Outputs and ``dx`` keep the input's
layout."""

import torch
import triton
import triton.language as tl
from torch.library import wrap_triton

from .checks import acc_dtype
from .triton_common import box_edges, end_edge, norm_parts, start_edge
from .triton_scan import scan, scan2d_cl

__all__ = [
    'integral_image_cl',
    'CL_BLOCK_L',
    'CL_BWD_BLOCK_L',
    'cl_blocks',
    'block_2d_cl',
    'talk1d_fwd_cl_jit',
    'talk1d_bwd_cl_jit',
    'talk2d_fwd_cl_jit',
    'talk2d_bwd_cl_jit',
    'talk1d_cl',
    'talk1d_cl_backward',
    'talk2d_cl',
    'talk2d_cl_backward',
]

CL_BLOCK_L, _CL_CHANNELS = 32, 64  # 1-D gathers: positions per program; channels per program
# The 1-D backward's positions per program: at 32, ptxas of Triton 3.8 parks a value in local memory (128 registers,
# 8 B of stack); at 16 it keeps everything in registers on Triton 3.6 and 3.8 (the Hopper test).
CL_BWD_BLOCK_L = 16


@triton.jit
def _cl_tile(L, heads, R, BLOCK_L: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr):
    """Channels-last tiles: this program's image, positions ``t (BLOCK_L, BLOCK_H)`` (repeated per head), heads
    ``h (BLOCK_H,)``, channels ``c (BLOCK_H, BLOCK_R)``, and the masks of ``(t, h)`` and of ``(t, h, r)``; the grid is
    (position blocks, head blocks, images)."""
    b = tl.program_id(2).to(tl.int64)
    t = tl.program_id(0).to(tl.int64) * BLOCK_L + tl.arange(0, BLOCK_L).to(tl.int64)
    h = tl.program_id(1).to(tl.int64) * BLOCK_H + tl.arange(0, BLOCK_H).to(tl.int64)
    r = tl.arange(0, BLOCK_R).to(tl.int64)
    c = h[:, None] * R + r[None, :]
    om = (t < L)[:, None] & (h < heads)[None, :]
    full = om[:, :, None] & (r < R)[None, None, :]
    return b, t[:, None] + tl.zeros([BLOCK_L, BLOCK_H], dtype=tl.int64), h, c, om, full


@triton.jit
def talk1d_fwd_cl_jit(
    x, P, off, y, C, L, R, heads, sxb, sxl, sob, soh, sol, sos, ml, mr, norm_hi, norm_lo,
    BLOCK_L: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    """Channels-last forward: ``x (B, L, C)`` (channel stride 1), ``P (B, L + 1, C)`` contiguous, ``y (B, L, C)``
    contiguous. A window's two edges are found once per (position, head) and read as one vector of the head's R
    adjacent channels."""
    b, i, h, c, om, full = _cl_tile(L, heads, R, BLOCK_L, BLOCK_H, BLOCK_R)
    ob = off + b * sob + h[None, :] * soh + i * sol
    ks, fs, _ = start_edge(i, tl.load(ob, mask=om, other=0.0) * ml, L)
    ke, fe, _ = end_edge(i, tl.load(ob + sos, mask=om, other=0.0) * mr, L)
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see norm_parts
    Pb = P + b * (L + 1) * C + c[None, :, :]
    xb = x + b * sxb + c[None, :, :]
    pe = tl.load(Pb + ke[:, :, None] * C, mask=full, other=0.0)
    pe += fe[:, :, None] * tl.load(xb + ke[:, :, None] * sxl, mask=full, other=0.0).to(pe.dtype)
    ps = tl.load(Pb + ks[:, :, None] * C, mask=full, other=0.0)
    ps += fs[:, :, None] * tl.load(xb + ks[:, :, None] * sxl, mask=full, other=0.0).to(ps.dtype)
    out = (pe - ps) / norm
    tl.store(y + (b * L + i[:, :, None]) * C + c[None, :, :], out.to(y.dtype.element_ty), mask=full)


@triton.jit
def talk1d_bwd_cl_jit(
    g, x, off, dP, doff, C, L, R, heads, sgb, sgl, sgc, sxb, sxl, sob, soh, sol, sos, ml, mr, norm_hi, norm_lo,
    NEED_DX: tl.constexpr, NEED_DOFF: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_R: tl.constexpr,
):  # fmt: skip
    """Channels-last backward: ``dP (B, L + 1, C)`` by atomic adds of whole head vectors at the edges, ``doff
    (B, heads, L, 2)`` contiguous reduced over the head's channels in registers."""
    b, i, h, c, om, full = _cl_tile(L, heads, R, BLOCK_L, BLOCK_H, BLOCK_R)
    ob = off + b * sob + h[None, :] * soh + i * sol
    ds = tl.load(ob, mask=om, other=0.0)
    ks, fs, live_s = start_edge(i, ds * ml, L)
    ke, fe, live_e = end_edge(i, tl.load(ob + sos, mask=om, other=0.0) * mr, L)
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see norm_parts
    gs = tl.load(g + b * sgb + i[:, :, None] * sgl + c[None, :, :] * sgc, mask=full, other=0.0).to(ds.dtype) / norm
    if NEED_DX:
        rows = dP + b * (L + 1) * C + c[None, :, :]
        fe3, fs3 = fe[:, :, None], fs[:, :, None]
        tl.atomic_add(rows + ke[:, :, None] * C, (1.0 - fe3) * gs, mask=full, sem='relaxed')
        tl.atomic_add(rows + (ke[:, :, None] + 1) * C, fe3 * gs, mask=full, sem='relaxed')
        tl.atomic_add(rows + ks[:, :, None] * C, -(1.0 - fs3) * gs, mask=full, sem='relaxed')
        tl.atomic_add(rows + (ks[:, :, None] + 1) * C, -fs3 * gs, mask=full, sem='relaxed')
    if NEED_DOFF:
        xb = x + b * sxb + c[None, :, :]
        acc_s = tl.sum(gs * tl.load(xb + ks[:, :, None] * sxl, mask=full, other=0.0).to(ds.dtype), axis=2)
        acc_e = tl.sum(gs * tl.load(xb + ke[:, :, None] * sxl, mask=full, other=0.0).to(ds.dtype), axis=2)
        od = doff + ((b * heads + h[None, :]) * L + i) * 2
        tl.store(od, tl.where(live_s, acc_s * ml, 0.0), mask=om)
        tl.store(od + 1, tl.where(live_e, acc_e * mr, 0.0), mask=om)


@triton.jit
def _corner_cl(Pb, C, w1, kv, fv, ku, fu, mask):
    """Bilinear value and slopes d/du, d/dv of the channels-last integral images ``Pb`` (the ``(1, BLOCK_H,
    BLOCK_R)`` channel pointers of one image) at ``(kv + fv, ku + fu)``, ``(BLOCK_N, BLOCK_H)`` each."""
    p00 = Pb + ((kv * w1 + ku) * C)[:, :, None]
    a = tl.load(p00, mask=mask, other=0.0)
    b = tl.load(p00 + C, mask=mask, other=0.0)
    c = tl.load(p00 + w1 * C, mask=mask, other=0.0)
    d = tl.load(p00 + (w1 + 1) * C, mask=mask, other=0.0)
    fv, fu = fv[:, :, None], fu[:, :, None]
    val = (1.0 - fv) * ((1.0 - fu) * a + fu * b) + fv * ((1.0 - fu) * c + fu * d)
    du = (1.0 - fv) * (b - a) + fv * (d - c)
    dv = (1.0 - fu) * (c - a) + fu * (d - b)
    return val, du, dv


@triton.jit
def _scatter_corner_cl(dPb, C, w1, kv, fv, ku, fu, g, mask):
    """Adjoint of :func:`_corner_cl`'s value: ``g`` times its 4 weights added into ``dPb``, whole head vectors."""
    p00 = dPb + ((kv * w1 + ku) * C)[:, :, None]
    fv, fu = fv[:, :, None], fu[:, :, None]
    gv, gf = (1.0 - fv) * g, fv * g
    tl.atomic_add(p00, gv * (1.0 - fu), mask=mask, sem='relaxed')
    tl.atomic_add(p00 + C, gv * fu, mask=mask, sem='relaxed')
    tl.atomic_add(p00 + w1 * C, gf * (1.0 - fu), mask=mask, sem='relaxed')
    tl.atomic_add(p00 + (w1 + 1) * C, gf * fu, mask=mask, sem='relaxed')


@triton.jit
def talk2d_fwd_cl_jit(
    P, off, y, C, H, W, R, heads, sob, soh, sop, sos, ml, mr, mt, mb, norm_hi, norm_lo,
    BLOCK_L: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    """Channels-last 2-D forward: ``P (B, H + 1, W + 1, C)`` contiguous, ``y (B, H, W, C)`` contiguous; the edges once
    per (position, head), each corner a vector of the head's channels."""
    N = H * W
    b, p, h, c, om, full = _cl_tile(N, heads, R, BLOCK_L, BLOCK_H, BLOCK_R)
    kl, fl, live_l, kr, fr, live_r, kt, ft, live_t, kb, fb, live_b = box_edges(
        off, b, h[None, :], p, om, H, W, sob, soh, sop, sos, ml, mr, mt, mb
    )
    w1 = W + 1
    Pb = P + b * (H + 1) * w1 * C + c[None, :, :]
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see norm_parts
    box, _, _ = _corner_cl(Pb, C, w1, kb, fb, kr, fr, full)
    v, _, _ = _corner_cl(Pb, C, w1, kb, fb, kl, fl, full)
    box -= v
    v, _, _ = _corner_cl(Pb, C, w1, kt, ft, kr, fr, full)
    box -= v
    v, _, _ = _corner_cl(Pb, C, w1, kt, ft, kl, fl, full)
    box += v
    tl.store(y + (b * N + p[:, :, None]) * C + c[None, :, :], (box / norm).to(y.dtype.element_ty), mask=full)


@triton.jit
def talk2d_bwd_cl_jit(
    g, P, off, dP, doff, C, H, W, R, heads, sgb, sgp, sgc, sob, soh, sop, sos, ml, mr, mt, mb, norm_hi, norm_lo,
    NEED_DX: tl.constexpr, NEED_DOFF: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_R: tl.constexpr,
):  # fmt: skip
    """Channels-last 2-D backward: ``dP (B, H + 1, W + 1, C)`` by atomic adds of head vectors, ``doff (B, heads,
    H * W, 4)`` contiguous reduced over the head's channels in registers."""
    N = H * W
    b, p, h, c, om, full = _cl_tile(N, heads, R, BLOCK_L, BLOCK_H, BLOCK_R)
    kl, fl, live_l, kr, fr, live_r, kt, ft, live_t, kb, fb, live_b = box_edges(
        off, b, h[None, :], p, om, H, W, sob, soh, sop, sos, ml, mr, mt, mb
    )
    w1 = W + 1
    plane = b * (H + 1) * w1 * C + c[None, :, :]
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see norm_parts
    gs = tl.load(g + b * sgb + p[:, :, None] * sgp + c[None, :, :] * sgc, mask=full, other=0.0).to(fl.dtype) / norm
    if NEED_DX:
        _scatter_corner_cl(dP + plane, C, w1, kb, fb, kr, fr, gs, full)
        _scatter_corner_cl(dP + plane, C, w1, kb, fb, kl, fl, -gs, full)
        _scatter_corner_cl(dP + plane, C, w1, kt, ft, kr, fr, -gs, full)
        _scatter_corner_cl(dP + plane, C, w1, kt, ft, kl, fl, gs, full)
    if NEED_DOFF:  # each corner's slopes reduced over the head's channels at once (few live tiles, no spills)
        _, du, dv = _corner_cl(P + plane, C, w1, kb, fb, kr, fr, full)
        acc_r, acc_b = tl.sum(gs * du, axis=2), tl.sum(gs * dv, axis=2)
        _, du, dv = _corner_cl(P + plane, C, w1, kb, fb, kl, fl, full)
        acc_l, acc_b = tl.sum(gs * du, axis=2), acc_b - tl.sum(gs * dv, axis=2)
        _, du, dv = _corner_cl(P + plane, C, w1, kt, ft, kr, fr, full)
        acc_r, acc_t = acc_r - tl.sum(gs * du, axis=2), tl.sum(gs * dv, axis=2)
        _, du, dv = _corner_cl(P + plane, C, w1, kt, ft, kl, fl, full)
        acc_l, acc_t = acc_l - tl.sum(gs * du, axis=2), acc_t - tl.sum(gs * dv, axis=2)
        od = doff + ((b * heads + h[None, :]) * N + p) * 4
        tl.store(od, tl.where(live_l, acc_l * ml, 0.0), mask=om)
        tl.store(od + 1, tl.where(live_r, acc_r * mr, 0.0), mask=om)
        tl.store(od + 2, tl.where(live_t, acc_t * mt, 0.0), mask=om)
        tl.store(od + 3, tl.where(live_b, acc_b * mb, 0.0), mask=om)


def cl_blocks(heads: int, R: int, block_l: int = CL_BLOCK_L) -> dict[str, int]:
    block_r = triton.next_power_of_2(R)
    block_h = min(triton.next_power_of_2(heads), max(1, _CL_CHANNELS // block_r))
    return dict(BLOCK_L=block_l, BLOCK_H=block_h, BLOCK_R=block_r)


def block_2d_cl(acc: torch.dtype, backward: bool) -> int:
    """Positions per channels-last 2-D program (16 corner vectors per position and head): 8, and 16 for the float64
    forward; the sizes at which sm_90 keeps everything in registers (tests/ops/talk/test_engine_triton.py)."""
    return 16 if acc == torch.float64 and not backward else 8


def _cl_grid(B: int, heads: int, L: int, blocks: dict[str, int]) -> tuple[int, int, int]:
    return (triton.cdiv(L, blocks['BLOCK_L']), triton.cdiv(heads, blocks['BLOCK_H']), B)


def talk1d_cl(x: torch.Tensor, off: torch.Tensor, max_left: int, max_right: int, y: torch.Tensor) -> torch.Tensor:
    """Forward on a channels-last ``x``: the prefix table ``(B, L + 1, C)`` by one coalesced scan, then the gathers."""
    B, C, L = x.shape
    heads = off.shape[1]
    P = torch.empty((B, L + 1, C), dtype=off.dtype, device=x.device)
    P[:, 0] = 0
    scan(x.unsqueeze(1), P[:, 1:].transpose(1, 2).unsqueeze(1), reverse=False, channels_last=True)
    blocks = cl_blocks(heads, C // heads)
    xt, yt = x.transpose(1, 2), y.transpose(1, 2)  # (B, L, C), channel stride 1
    wrap_triton(talk1d_fwd_cl_jit)[_cl_grid(B, heads, L, blocks)](
        xt, P, off, yt, C, L, C // heads, heads, xt.stride(0), xt.stride(1), *off.stride()[:3], off.stride(3),
        max_left, max_right, *norm_parts(max_left, max_right), **blocks,
    )  # fmt: skip
    return y


def talk1d_cl_backward(grad_y, x, offsets, max_left, max_right, need_dx, need_doff):
    """Backward on a channels-last ``x``: ``dx`` channels-last too (the suffix sum of ``dP`` by one coalesced scan)."""
    B, C, L = x.shape
    heads = offsets.shape[1]
    off = offsets.to(acc_dtype(x.dtype))
    dx = torch.empty_like(x) if need_dx else x.new_empty(0)
    doff = torch.empty((B, heads, L, 2), dtype=off.dtype, device=x.device) if need_doff else off.new_empty(0)
    dP = torch.zeros((B, L + 1, C), dtype=off.dtype, device=x.device) if need_dx else off
    blocks = cl_blocks(heads, C // heads, CL_BWD_BLOCK_L)
    xt, gt = x.transpose(1, 2), grad_y.to(x.dtype).transpose(1, 2)
    wrap_triton(talk1d_bwd_cl_jit)[_cl_grid(B, heads, L, blocks)](
        gt, xt, off, dP, doff if need_doff else off, C, L, C // heads, heads, *gt.stride(), xt.stride(0),
        xt.stride(1), *off.stride()[:3], off.stride(3), max_left, max_right, *norm_parts(max_left, max_right),
        NEED_DX=need_dx, NEED_DOFF=need_doff, **blocks,
    )  # fmt: skip
    if need_dx:  # dx[j] = sum_{t > j} dP[t]
        scan(dP[:, 1:].transpose(1, 2).unsqueeze(1), dx.unsqueeze(1), reverse=True, channels_last=True)
    return dx, doff.to(offsets.dtype)


def integral_image_cl(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The exclusive integral image of a channels-last ``x (B, C, H, W)``, ``(B, H + 1, W + 1, C)`` contiguous in
    ``dtype``, in one pass."""
    B, C, H, W = x.shape
    P = torch.empty((B, H + 1, W + 1, C), dtype=dtype, device=x.device)
    P[:, 0] = 0
    P[:, 1:, 0] = 0
    scan2d_cl(x.permute(0, 2, 3, 1), P[:, 1:, 1:], reverse=False)
    return P


def talk2d_cl(x: torch.Tensor, off: torch.Tensor, maxes: tuple[int, int, int, int]):
    """Forward on a channels-last ``x``: the integral image ``(B, H + 1, W + 1, C)`` in one pass, then the gathers."""
    B, C, H, W = x.shape
    heads = off.shape[1]
    P = integral_image_cl(x, off.dtype)
    y = torch.empty_like(x)  # channels-last
    o = off.flatten(2, 3)  # (B, heads, H * W, 4)
    blocks = cl_blocks(heads, C // heads, block_2d_cl(off.dtype, backward=False))
    wrap_triton(talk2d_fwd_cl_jit)[_cl_grid(B, heads, H * W, blocks)](
        P, o, y, C, H, W, C // heads, heads, *o.stride(), *maxes, *norm_parts(*maxes), **blocks,
    )  # fmt: skip
    return y, P.permute(0, 3, 1, 2)


def talk2d_cl_backward(grad_y, P, offsets, maxes, need_dx, need_doff):
    """Backward from a channels-last integral image: ``dx`` channels-last (the suffix sums of ``dP`` in one pass)."""
    B, C, H, W = grad_y.shape
    heads = offsets.shape[1]
    Pc = P.permute(0, 2, 3, 1)  # (B, H + 1, W + 1, C), contiguous
    o = offsets.to(P.dtype).flatten(2, 3)
    dx = torch.empty_like(grad_y, memory_format=torch.channels_last) if need_dx else grad_y.new_empty(0)
    doff = torch.empty((B, heads, H * W, 4), dtype=P.dtype, device=P.device) if need_doff else P.new_empty(0)
    dP = torch.zeros_like(Pc) if need_dx else Pc
    g = grad_y.permute(0, 2, 3, 1).flatten(1, 2)  # (B, H * W, C)
    blocks = cl_blocks(heads, C // heads, block_2d_cl(P.dtype, backward=True))
    wrap_triton(talk2d_bwd_cl_jit)[_cl_grid(B, heads, H * W, blocks)](
        g, Pc, o, dP, doff if need_doff else o, C, H, W, C // heads, heads, *g.stride(), *o.stride(), *maxes,
        *norm_parts(*maxes), NEED_DX=need_dx, NEED_DOFF=need_doff, **blocks,
    )  # fmt: skip
    if need_dx:  # dx[r, c] = sum over v > r, u > c of dP[v, u]
        scan2d_cl(dP[:, 1:, 1:], dx.permute(0, 2, 3, 1), reverse=True)
    doff = doff.view(offsets.shape) if need_doff else doff
    return dx, doff.to(offsets.dtype)


# the same autograd as the other TaLK operators (autograd.py): saved tensors, backward operator, input gradients
