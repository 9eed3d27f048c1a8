"""The table kernels of the Triton TaLK operators, for channels-first (contiguous) maps: one program per (batch, head,
block of positions) finds the window edges once and loops over the head's channels, gathering the prefix table (1-D)
or the integral image (2-D, bilinear corners) at the edges. The backward is the same loop: ``dP`` (the gradient of the
table) by atomic adds, then ``dx`` its suffix sum; the offsets' gradients are reduced over the head's channels in
registers. Float atomic adds make ``dx``'s rounding order vary from run to run (not bitwise deterministic, like
``index_add_`` on CUDA)."""

import torch
import triton
import triton.language as tl
from torch.library import wrap_triton

from .checks import acc_dtype
from .triton_common import end_edge, norm_parts, start_edge
from .triton_scan import scan

__all__ = [
    'integral_image',
    'TABLE_BLOCK_R',
    'TABLE_BLOCK_L',
    'block_2d',
    'talk1d_fwd_jit',
    'talk1d_bwd_jit',
    'talk2d_fwd_jit',
    'talk2d_bwd_jit',
    'talk1d_table',
    'talk1d_table_backward',
    'talk2d_table',
    'talk2d_table_backward',
]

TABLE_BLOCK_R, TABLE_BLOCK_L = 8, 128  # channels per step, positions per program (1-D; 2-D: block_2d)


@triton.jit
def _program_block(n, heads, BLOCK: tl.constexpr):
    """This program's (batch * heads + head, batch, head, BLOCK positions, their mask) on an axis of ``n`` positions:
    programs run over batch * heads * ceil(n / BLOCK) (one grid axis, so no 65535 limit on the others)."""
    pid = tl.program_id(0).to(tl.int64)
    blocks = tl.cdiv(n, BLOCK)
    bh, blk = pid // blocks, pid % blocks
    pos = blk * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    return bh, bh // heads, bh % heads, pos, pos < n


@triton.jit
def _corner(Pp, w1, kv, fv, ku, fu, mask):
    """Bilinear value and its slopes d/du, d/dv of the integral images ``Pp`` (BLOCK_R, 1) at (kv + fv, ku + fu)."""
    p00 = Pp + (kv * w1 + ku)[None, :]
    a = tl.load(p00, mask=mask, other=0.0)
    b = tl.load(p00 + 1, mask=mask, other=0.0)
    c = tl.load(p00 + w1, mask=mask, other=0.0)
    d = tl.load(p00 + w1 + 1, mask=mask, other=0.0)
    fv, fu = fv[None, :], fu[None, :]
    val = (1.0 - fv) * ((1.0 - fu) * a + fu * b) + fv * ((1.0 - fu) * c + fu * d)
    du = (1.0 - fv) * (b - a) + fv * (d - c)
    dv = (1.0 - fu) * (c - a) + fu * (d - b)
    return val, du, dv


@triton.jit
def _corner_value(Pp, w1, kv, fv, ku, fu, mask):
    val, du, dv = _corner(Pp, w1, kv, fv, ku, fu, mask)
    return val


@triton.jit
def _scatter_corner(dPp, w1, kv, fv, ku, fu, g, mask):
    """Adjoint of one bilinear lookup: add ``g`` (BLOCK_R, BLOCK_N) times its 4 weights into ``dPp``."""
    p00 = dPp + (kv * w1 + ku)[None, :]
    fv, fu = fv[None, :], fu[None, :]
    gv, gf = (1.0 - fv) * g, fv * g
    tl.atomic_add(p00, gv * (1.0 - fu), mask=mask, sem='relaxed')
    tl.atomic_add(p00 + 1, gv * fu, mask=mask, sem='relaxed')
    tl.atomic_add(p00 + w1, gf * (1.0 - fu), mask=mask, sem='relaxed')
    tl.atomic_add(p00 + w1 + 1, gf * fu, mask=mask, sem='relaxed')


@triton.jit
def talk1d_fwd_jit(
    x,
    P,
    off,
    y,
    C,
    L,
    R,
    heads,
    sxb,
    sxc,
    sxl,
    syb,
    syc,
    syl,
    ml,
    mr,
    norm_hi,
    norm_lo,
    BLOCK_R: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    bh, b, h, i, lmask = _program_block(L, heads, BLOCK_L)
    ob = off + (bh * L + i) * 2
    ks, fs, _ = start_edge(i, tl.load(ob, mask=lmask, other=0.0) * ml, L)
    ke, fe, _ = end_edge(i, tl.load(ob + 1, mask=lmask, other=0.0) * mr, L)
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see norm_parts
    for r0 in range(0, R, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        c = (h * R + r).to(tl.int64)
        mask = (r < R)[:, None] & lmask[None, :]
        prow = P + (b * C + c)[:, None] * (L + 1)
        xrow = x + b * sxb + c[:, None] * sxc
        pe = tl.load(prow + ke[None, :], mask=mask, other=0.0)
        pe += fe[None, :] * tl.load(xrow + ke[None, :] * sxl, mask=mask, other=0.0).to(pe.dtype)
        ps = tl.load(prow + ks[None, :], mask=mask, other=0.0)
        ps += fs[None, :] * tl.load(xrow + ks[None, :] * sxl, mask=mask, other=0.0).to(ps.dtype)
        out = (pe - ps) / norm
        tl.store(y + b * syb + c[:, None] * syc + i[None, :] * syl, out.to(y.dtype.element_ty), mask=mask)


@triton.jit
def talk1d_bwd_jit(
    g,
    x,
    off,
    dP,
    doff,
    C,
    L,
    R,
    heads,
    sgb,
    sgc,
    sgl,
    sxb,
    sxc,
    sxl,
    ml,
    mr,
    norm_hi,
    norm_lo,
    NEED_DX: tl.constexpr,
    NEED_DOFF: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    bh, b, h, i, lmask = _program_block(L, heads, BLOCK_L)
    ob = off + (bh * L + i) * 2
    ds = tl.load(ob, mask=lmask, other=0.0)
    ks, fs, live_s = start_edge(i, ds * ml, L)
    ke, fe, live_e = end_edge(i, tl.load(ob + 1, mask=lmask, other=0.0) * mr, L)
    acc_s = tl.zeros([BLOCK_L], dtype=ds.dtype)
    acc_e = tl.zeros([BLOCK_L], dtype=ds.dtype)
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see norm_parts
    for r0 in range(0, R, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        c = (h * R + r).to(tl.int64)
        mask = (r < R)[:, None] & lmask[None, :]
        gs = tl.load(g + b * sgb + c[:, None] * sgc + i[None, :] * sgl, mask=mask, other=0.0).to(ds.dtype) / norm
        if NEED_DX:
            row = dP + (b * C + c)[:, None] * (L + 1)
            tl.atomic_add(row + ke[None, :], (1.0 - fe[None, :]) * gs, mask=mask, sem='relaxed')
            tl.atomic_add(row + ke[None, :] + 1, fe[None, :] * gs, mask=mask, sem='relaxed')
            tl.atomic_add(row + ks[None, :], -(1.0 - fs[None, :]) * gs, mask=mask, sem='relaxed')
            tl.atomic_add(row + ks[None, :] + 1, -fs[None, :] * gs, mask=mask, sem='relaxed')
        if NEED_DOFF:
            xrow = x + b * sxb + c[:, None] * sxc
            acc_s += tl.sum(gs * tl.load(xrow + ks[None, :] * sxl, mask=mask, other=0.0).to(ds.dtype), axis=0)
            acc_e += tl.sum(gs * tl.load(xrow + ke[None, :] * sxl, mask=mask, other=0.0).to(ds.dtype), axis=0)
    if NEED_DOFF:
        ob = doff + (bh * L + i) * 2
        tl.store(ob, tl.where(live_s, acc_s * ml, 0.0), mask=lmask)
        tl.store(ob + 1, tl.where(live_e, acc_e * mr, 0.0), mask=lmask)


@triton.jit
def _edges_2d(off, bh, p, N, W, H, ml, mr, mt, mb, nmask):
    ob = off + (bh * N + p) * 4
    row, col = p // W, p % W
    dl = tl.load(ob, mask=nmask, other=0.0)
    kl, fl, live_l = start_edge(col, dl * ml, W)
    kr, fr, live_r = end_edge(col, tl.load(ob + 1, mask=nmask, other=0.0) * mr, W)
    kt, ft, live_t = start_edge(row, tl.load(ob + 2, mask=nmask, other=0.0) * mt, H)
    kb, fb, live_b = end_edge(row, tl.load(ob + 3, mask=nmask, other=0.0) * mb, H)
    return kl, fl, live_l, kr, fr, live_r, kt, ft, live_t, kb, fb, live_b


@triton.jit
def talk2d_fwd_jit(
    P, off, y, C, H, W, R, heads, ml, mr, mt, mb, norm_hi, norm_lo, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr
):  # fmt: skip
    N = H * W
    bh, b, h, p, nmask = _program_block(N, heads, BLOCK_N)
    kl, fl, live_l, kr, fr, live_r, kt, ft, live_t, kb, fb, live_b = _edges_2d(
        off, bh, p, N, W, H, ml, mr, mt, mb, nmask
    )
    w1 = W + 1
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see norm_parts
    for r0 in range(0, R, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        c = (h * R + r).to(tl.int64)
        mask = (r < R)[:, None] & nmask[None, :]
        Pp = P + (b * C + c)[:, None] * ((H + 1) * w1)
        box = _corner_value(Pp, w1, kb, fb, kr, fr, mask) - _corner_value(Pp, w1, kb, fb, kl, fl, mask)
        box += _corner_value(Pp, w1, kt, ft, kl, fl, mask) - _corner_value(Pp, w1, kt, ft, kr, fr, mask)
        tl.store(y + (b * C + c)[:, None] * N + p[None, :], (box / norm).to(y.dtype.element_ty), mask=mask)


@triton.jit
def talk2d_bwd_jit(
    g,
    P,
    off,
    dP,
    doff,
    C,
    H,
    W,
    R,
    heads,
    ml,
    mr,
    mt,
    mb,
    norm_hi,
    norm_lo,
    NEED_DX: tl.constexpr,
    NEED_DOFF: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    N = H * W
    bh, b, h, p, nmask = _program_block(N, heads, BLOCK_N)
    kl, fl, live_l, kr, fr, live_r, kt, ft, live_t, kb, fb, live_b = _edges_2d(
        off, bh, p, N, W, H, ml, mr, mt, mb, nmask
    )
    w1 = W + 1
    acc_l = tl.zeros([BLOCK_N], dtype=fl.dtype)
    acc_r = tl.zeros([BLOCK_N], dtype=fl.dtype)
    acc_t = tl.zeros([BLOCK_N], dtype=fl.dtype)
    acc_b = tl.zeros([BLOCK_N], dtype=fl.dtype)
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see norm_parts
    for r0 in range(0, R, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        c = (h * R + r).to(tl.int64)
        mask = (r < R)[:, None] & nmask[None, :]
        plane = (b * C + c)[:, None] * ((H + 1) * w1)
        gs = tl.load(g + (b * C + c)[:, None] * N + p[None, :], mask=mask, other=0.0).to(fl.dtype) / norm
        if NEED_DX:
            _scatter_corner(dP + plane, w1, kb, fb, kr, fr, gs, mask)
            _scatter_corner(dP + plane, w1, kb, fb, kl, fl, -gs, mask)
            _scatter_corner(dP + plane, w1, kt, ft, kr, fr, -gs, mask)
            _scatter_corner(dP + plane, w1, kt, ft, kl, fl, gs, mask)
        if NEED_DOFF:
            v_br, du_br, dv_br = _corner(P + plane, w1, kb, fb, kr, fr, mask)
            v_bl, du_bl, dv_bl = _corner(P + plane, w1, kb, fb, kl, fl, mask)
            v_tr, du_tr, dv_tr = _corner(P + plane, w1, kt, ft, kr, fr, mask)
            v_tl, du_tl, dv_tl = _corner(P + plane, w1, kt, ft, kl, fl, mask)
            acc_l += tl.sum(gs * (du_bl - du_tl), axis=0)
            acc_r += tl.sum(gs * (du_br - du_tr), axis=0)
            acc_t += tl.sum(gs * (dv_tr - dv_tl), axis=0)
            acc_b += tl.sum(gs * (dv_br - dv_bl), axis=0)
    if NEED_DOFF:
        ob = doff + (bh * N + p) * 4
        tl.store(ob, tl.where(live_l, acc_l * ml, 0.0), mask=nmask)
        tl.store(ob + 1, tl.where(live_r, acc_r * mr, 0.0), mask=nmask)
        tl.store(ob + 2, tl.where(live_t, acc_t * mt, 0.0), mask=nmask)
        tl.store(ob + 3, tl.where(live_b, acc_b * mb, 0.0), mask=nmask)


def block_2d(acc: torch.dtype, backward: bool) -> int:
    """Positions per 2-D program: 128 forward and 64 backward in float32; 64 and 32 in float64. The registers spilled
    on sm_90 at 128 in float64, and in the float32 backward under Triton 3.6 (tests/ops/talk/test_engine_triton.py
    reads the cubins)."""
    if acc != torch.float64:
        return TABLE_BLOCK_L // 2 if backward else TABLE_BLOCK_L
    return 32 if backward else 64


def _grid_1d(B: int, heads: int, L: int) -> tuple[int]:
    return (B * heads * triton.cdiv(L, TABLE_BLOCK_L),)


def _grid_2d(B: int, heads: int, N: int, block: int) -> tuple[int]:
    return (B * heads * triton.cdiv(N, block),)


def talk1d_table(x: torch.Tensor, off: torch.Tensor, max_left: int, max_right: int, y: torch.Tensor) -> torch.Tensor:
    """Forward of channels-first rows (``off`` in the accumulation dtype): the prefix table ``(B, C, L + 1)`` by one
    scan, then :func:`talk1d_fwd_jit`'s gathers into ``y``."""
    B, C, L = x.shape
    heads = off.shape[1]
    off = off.contiguous()
    P = torch.empty((B, C, L + 1), dtype=off.dtype, device=x.device)
    P[:, :, 0] = 0
    scan(x.unsqueeze(1), P[:, :, 1:].unsqueeze(1), reverse=False)
    wrap_triton(talk1d_fwd_jit)[_grid_1d(B, heads, L)](
        x, P, off, y, C, L, C // heads, heads, *x.stride(), *y.stride(), max_left, max_right, *norm_parts(max_left, max_right),
        BLOCK_R=TABLE_BLOCK_R, BLOCK_L=TABLE_BLOCK_L,
    )  # fmt: skip
    return y


def talk1d_table_backward(grad_y, x, offsets, max_left, max_right, need_dx, need_doff):
    """Backward of channels-first rows: ``dP`` by atomic adds, then ``dx`` its suffix sum (contiguous)."""
    B, C, L = x.shape
    heads = offsets.shape[1]
    acc = acc_dtype(x.dtype)
    off = offsets.to(acc).contiguous()
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device) if need_dx else x.new_empty(0)
    doff = torch.empty(off.shape, dtype=acc, device=x.device) if need_doff else x.new_empty(0, dtype=acc)
    if x.numel() == 0 or not (need_dx or need_doff):
        return dx, doff.to(offsets.dtype)
    dP = torch.zeros((B, C, L + 1), dtype=acc, device=x.device) if need_dx else off
    g = grad_y.to(x.dtype)
    wrap_triton(talk1d_bwd_jit)[_grid_1d(B, heads, L)](
        g, x, off, dP, doff if need_doff else off, C, L, C // heads, heads, *g.stride(), *x.stride(),
        max_left, max_right, *norm_parts(max_left, max_right), NEED_DX=need_dx, NEED_DOFF=need_doff, BLOCK_R=TABLE_BLOCK_R, BLOCK_L=TABLE_BLOCK_L,
    )  # fmt: skip
    if need_dx:
        scan(dP[:, :, 1:].unsqueeze(1), dx.unsqueeze(1), reverse=True)  # dx[j] = sum_{t > j} dP[t]
    return dx, doff.to(offsets.dtype)


def integral_image(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The exclusive integral image of ``x (B, C, H, W)``, ``(B, C, H + 1, W + 1)`` contiguous in ``dtype``, by two
    scans."""
    B, C, H, W = x.shape
    P = torch.empty((B, C, H + 1, W + 1), dtype=dtype, device=x.device)
    P[:, :, 0, :] = 0
    P[:, :, :, 0] = 0
    if x.numel() == 0:
        return P
    inner = P[:, :, 1:, 1:]
    scan(x, inner, reverse=False)  # rows
    scan(inner.transpose(2, 3), inner.transpose(2, 3), reverse=False)  # columns, in place
    return P


def talk2d_table(
    x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int, max_top: int, max_bottom: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward of channels-first maps: the integral image ``(B, C, H + 1, W + 1)`` by two scans, then
    :func:`talk2d_fwd_jit`'s gathers; returns ``(y, P)``."""
    B, C, H, W = x.shape
    heads = offsets.shape[1]
    acc = acc_dtype(x.dtype)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    P = integral_image(x, acc)
    if x.numel() == 0:
        return y, P
    off = offsets.to(acc).contiguous()
    block = block_2d(acc, backward=False)
    wrap_triton(talk2d_fwd_jit)[_grid_2d(B, heads, H * W, block)](
        P, off, y, C, H, W, C // heads, heads, max_left, max_right, max_top, max_bottom,
        *norm_parts(max_left, max_right, max_top, max_bottom),
        BLOCK_R=TABLE_BLOCK_R, BLOCK_N=block,
    )  # fmt: skip
    return y, P


def talk2d_table_backward(grad_y, P, offsets, max_left, max_right, max_top, max_bottom, need_dx, need_doff):
    """Backward from a channels-first integral image: ``dP`` by atomic adds, then ``dx`` its 2-D suffix sum."""
    B, C, H, W = grad_y.shape
    heads = offsets.shape[1]
    off = offsets.to(P.dtype).contiguous()
    dx = torch.empty(grad_y.shape, dtype=grad_y.dtype, device=P.device) if need_dx else grad_y.new_empty(0)
    doff = torch.empty(off.shape, dtype=P.dtype, device=P.device) if need_doff else P.new_empty(0)
    if grad_y.numel() == 0 or not (need_dx or need_doff):
        return dx, doff.to(offsets.dtype)
    dP = torch.zeros_like(P) if need_dx else P
    g = grad_y.contiguous()
    block = block_2d(P.dtype, backward=True)
    wrap_triton(talk2d_bwd_jit)[_grid_2d(B, heads, H * W, block)](
        g, P, off, dP, doff if need_doff else off, C, H, W, C // heads, heads,
        max_left, max_right, max_top, max_bottom, *norm_parts(max_left, max_right, max_top, max_bottom),
        NEED_DX=need_dx, NEED_DOFF=need_doff, BLOCK_R=TABLE_BLOCK_R, BLOCK_N=block,
    )  # fmt: skip
    if need_dx:
        inner = dP[:, :, 1:, 1:]
        scan(inner, inner, reverse=True)  # sum over u > c, in place
        scan(inner.transpose(2, 3), dx.transpose(2, 3), reverse=True)  # then over v > r
    return dx, doff.to(offsets.dtype)
