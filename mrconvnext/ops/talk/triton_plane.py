"""The plane kernels of the Triton TaLK operators: short rows and small maps (float32 accumulation) in one launch, a
whole (image, head) plane per program and no table. The windows of a block of positions are a ``(BLOCK_T, N)`` weight
matrix (1-D: ``[j < k_end] + f_end [j = k_end] - [j < k_start] - f_start [j = k_start]``; 2-D: the product of the
row and the column windows, the bilinear integral image being separable) applied to the plane by float32 products
(``input_precision='ieee'``). The backward is the transposed products (no atomics, deterministic), and the offsets'
slopes are x at the edges (1-D) or the other axis's window applied to the edge's row or column (2-D). The 2-D
forward's second output is x in float32, which its backward reads in place of the table."""

import torch
import triton
import triton.language as tl
from torch.library import wrap_triton

from .checks import talk1d_out
from .triton_common import box_edges, end_edge, norm_parts, start_edge

__all__ = [
    'plane_blocks',
    'talk1d_plane_fwd_jit',
    'talk1d_plane_bwd_jit',
    'talk2d_plane_fwd_jit',
    'talk2d_plane_bwd_jit',
    'talk1d_plane',
    'talk1d_plane_backward',
    'talk2d_plane',
    'talk2d_plane_backward',
]

_PLANE_BLOCK_T = 16  # outputs per step


@triton.jit
def _window_weights(j, ks, fs, ke, fe):
    """``(BLOCK_T, BLOCK_N)``: the weight of input ``j`` in the windows with edges ``(ks, fs)``, ``(ke, fe)``
    (``(BLOCK_T,)`` each): ``[j < ke] + fe [j = ke] - [j < ks] - fs [j = ks]``, what ``P[ke] + fe x[ke] - P[ks] -
    fs x[ks]`` adds up. A NaN fraction stays in its own column."""
    jj = j[None, :]
    end = (jj < ke[:, None]).to(fe.dtype) + tl.where(jj == ke[:, None], fe[:, None], 0.0)
    start = (jj < ks[:, None]).to(fs.dtype) + tl.where(jj == ks[:, None], fs[:, None], 0.0)
    return end - start


@triton.jit
def _plane_edges(off, b, h, t, tmask, L, sob, soh, sol, sos, ml, mr):
    ob = off + b * sob + h * soh + t * sol
    ks, fs, live_s = start_edge(t, tl.load(ob, mask=tmask, other=0.0) * ml, L)
    ke, fe, live_e = end_edge(t, tl.load(ob + sos, mask=tmask, other=0.0) * mr, L)
    return ks, fs, live_s, ke, fe, live_e


@triton.jit
def _plane_program(heads, R, norm_hi, norm_lo, BLOCK_R: tl.constexpr):
    """A plane kernel's (image, head), its head's channels ``c``, their mask and the window normalizer."""
    pid = tl.program_id(0).to(tl.int64)
    r = tl.arange(0, BLOCK_R).to(tl.int64)
    norm = tl.cast(norm_hi, tl.float32) + tl.cast(norm_lo, tl.float32)  # see norm_parts
    return pid // heads, pid % heads, (pid % heads) * R + r, r < R, norm


@triton.jit
def talk1d_plane_fwd_jit(
    x, off, y, L, R, heads, sxb, sxc, sxl, syb, syc, syl, sob, soh, sol, sos, ml, mr, norm_hi, norm_lo,
    PRECISION: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    """Short rows in one launch, no prefix table: one program per (image, head) walks its plane ``(L, R)``; each
    block of ``BLOCK_T`` outputs is the window matrix times the plane, ``BLOCK_J`` inputs per product."""
    b, h, c, rmask, norm = _plane_program(heads, R, norm_hi, norm_lo, BLOCK_R)
    xb = x + b * sxb + c[None, :] * sxc
    for t0 in range(0, L, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T).to(tl.int64)
        tmask = t < L
        ks, fs, _, ke, fe, _ = _plane_edges(off, b, h, t, tmask, L, sob, soh, sol, sos, ml, mr)
        out = tl.zeros([BLOCK_T, BLOCK_R], dtype=tl.float32)
        for j0 in range(0, L, BLOCK_J):
            j = j0 + tl.arange(0, BLOCK_J).to(tl.int64)
            xs = tl.load(xb + j[:, None] * sxl, mask=(j < L)[:, None] & rmask[None, :], other=0.0).to(tl.float32)
            out += tl.dot(_window_weights(j, ks, fs, ke, fe), xs, input_precision=PRECISION)
        mask = tmask[:, None] & rmask[None, :]
        tl.store(y + b * syb + c[None, :] * syc + t[:, None] * syl, (out / norm).to(y.dtype.element_ty), mask=mask)


@triton.jit
def talk1d_plane_bwd_jit(
    g, x, off, dx, doff, L, R, heads, sgb, sgc, sgl, sxb, sxc, sxl, sdb, sdc, sdl, sob, soh, sol, sos, ml, mr,
    norm_hi, norm_lo, NEED_DX: tl.constexpr, NEED_DOFF: tl.constexpr, PRECISION: tl.constexpr, BLOCK_T: tl.constexpr,
    BLOCK_J: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    """The backward of :func:`talk1d_plane_fwd_jit`, no atomics: each block of ``BLOCK_J`` inputs' ``dx`` is the
    transposed window matrices times the output gradient, summed over the position blocks; the offsets' gradients
    gather x at the edges (``doff (B, heads, L, 2)`` contiguous)."""
    b, h, c, rmask, norm = _plane_program(heads, R, norm_hi, norm_lo, BLOCK_R)
    gb = g + b * sgb + c[None, :] * sgc
    if NEED_DX:
        for j0 in range(0, L, BLOCK_J):
            j = j0 + tl.arange(0, BLOCK_J).to(tl.int64)
            acc = tl.zeros([BLOCK_J, BLOCK_R], dtype=tl.float32)
            for t0 in range(0, L, BLOCK_T):
                t = t0 + tl.arange(0, BLOCK_T).to(tl.int64)
                tmask = t < L
                ks, fs, _, ke, fe, _ = _plane_edges(off, b, h, t, tmask, L, sob, soh, sol, sos, ml, mr)
                gs = tl.load(gb + t[:, None] * sgl, mask=tmask[:, None] & rmask[None, :], other=0.0).to(tl.float32)
                acc += tl.dot(tl.trans(_window_weights(j, ks, fs, ke, fe)), gs, input_precision=PRECISION)
            dmask = (j < L)[:, None] & rmask[None, :]
            tl.store(
                dx + b * sdb + c[None, :] * sdc + j[:, None] * sdl, (acc / norm).to(dx.dtype.element_ty), mask=dmask
            )
    if NEED_DOFF:
        xb = x + b * sxb + c[None, :] * sxc
        for t0 in range(0, L, BLOCK_T):
            t = t0 + tl.arange(0, BLOCK_T).to(tl.int64)
            tmask = t < L
            mask = tmask[:, None] & rmask[None, :]
            ks, fs, live_s, ke, fe, live_e = _plane_edges(off, b, h, t, tmask, L, sob, soh, sol, sos, ml, mr)
            gs = tl.load(gb + t[:, None] * sgl, mask=mask, other=0.0).to(tl.float32) / norm
            acc_s = tl.sum(gs * tl.load(xb + ks[:, None] * sxl, mask=mask, other=0.0).to(tl.float32), axis=1)
            acc_e = tl.sum(gs * tl.load(xb + ke[:, None] * sxl, mask=mask, other=0.0).to(tl.float32), axis=1)
            od = doff + ((b * heads + h) * L + t) * 2
            tl.store(od, tl.where(live_s, acc_s * ml, 0.0), mask=tmask)
            tl.store(od + 1, tl.where(live_e, acc_e * mr, 0.0), mask=tmask)


@triton.jit
def talk2d_plane_fwd_jit(
    x, off, y, H, W, R, heads, sxb, sxc, sxp, syb, syc, syp, sob, soh, sop, sos, ml, mr, mt, mb, norm_hi, norm_lo,
    PRECISION: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    """Small maps in one launch, no integral image: one program per (image, head); a box's weight on input
    ``(i, j)`` is the product of its row and column window weights (the bilinear integral image is separable), so
    each block of ``BLOCK_T`` outputs is a ``(BLOCK_T, H W)`` weight matrix times the flattened plane."""
    N = H * W
    b, h, c, rmask, norm = _plane_program(heads, R, norm_hi, norm_lo, BLOCK_R)
    xb = x + b * sxb + c[None, :] * sxc
    for t0 in range(0, N, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T).to(tl.int64)
        tmask = t < N
        kl, fl, _, kr, fr, _, kt, ft, _, kb, fb, _ = box_edges(
            off, b, h, t, tmask, H, W, sob, soh, sop, sos, ml, mr, mt, mb
        )
        out = tl.zeros([BLOCK_T, BLOCK_R], dtype=tl.float32)
        for j0 in range(0, N, BLOCK_J):
            q = j0 + tl.arange(0, BLOCK_J).to(tl.int64)
            xs = tl.load(xb + q[:, None] * sxp, mask=(q < N)[:, None] & rmask[None, :], other=0.0).to(tl.float32)
            wts = _window_weights(q // W, kt, ft, kb, fb) * _window_weights(q % W, kl, fl, kr, fr)
            out += tl.dot(wts, xs, input_precision=PRECISION)
        mask = tmask[:, None] & rmask[None, :]
        tl.store(y + b * syb + c[None, :] * syc + t[:, None] * syp, (out / norm).to(y.dtype.element_ty), mask=mask)


@triton.jit
def talk2d_plane_bwd_jit(
    g, x, off, dx, doff, H, W, R, heads, sgb, sgc, sgp, sxb, sxc, sxp, sdb, sdc, sdp, sob, soh, sop, sos,
    ml, mr, mt, mb, norm_hi, norm_lo, NEED_DX: tl.constexpr, NEED_DOFF: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    """The backward of :func:`talk2d_plane_fwd_jit`, no atomics: ``dx`` by the transposed products; an edge's slope
    is the other axis's window applied to the row or column at the edge (a product with a one-hot factor), reduced
    with the output gradient over the head's channels (``doff (B, heads, H W, 4)`` contiguous)."""
    N = H * W
    b, h, c, rmask, norm = _plane_program(heads, R, norm_hi, norm_lo, BLOCK_R)
    gb = g + b * sgb + c[None, :] * sgc
    xb = x + b * sxb + c[None, :] * sxc
    if NEED_DX:
        for j0 in range(0, N, BLOCK_J):
            q = j0 + tl.arange(0, BLOCK_J).to(tl.int64)
            acc = tl.zeros([BLOCK_J, BLOCK_R], dtype=tl.float32)
            for t0 in range(0, N, BLOCK_T):
                t = t0 + tl.arange(0, BLOCK_T).to(tl.int64)
                tmask = t < N
                kl, fl, _, kr, fr, _, kt, ft, _, kb, fb, _ = box_edges(
                    off, b, h, t, tmask, H, W, sob, soh, sop, sos, ml, mr, mt, mb
                )
                wts = _window_weights(q // W, kt, ft, kb, fb) * _window_weights(q % W, kl, fl, kr, fr)
                gs = tl.load(gb + t[:, None] * sgp, mask=tmask[:, None] & rmask[None, :], other=0.0).to(tl.float32)
                acc += tl.dot(tl.trans(wts), gs, input_precision=PRECISION)
            dmask = (q < N)[:, None] & rmask[None, :]
            tl.store(
                dx + b * sdb + c[None, :] * sdc + q[:, None] * sdp, (acc / norm).to(dx.dtype.element_ty), mask=dmask
            )
    if NEED_DOFF:
        for t0 in range(0, N, BLOCK_T):
            t = t0 + tl.arange(0, BLOCK_T).to(tl.int64)
            tmask = t < N
            mask = tmask[:, None] & rmask[None, :]
            kl, fl, live_l, kr, fr, live_r, kt, ft, live_t, kb, fb, live_b = box_edges(
                off, b, h, t, tmask, H, W, sob, soh, sop, sos, ml, mr, mt, mb
            )
            gs = tl.load(gb + t[:, None] * sgp, mask=mask, other=0.0).to(tl.float32) / norm
            od = doff + ((b * heads + h) * N + t) * 4
            for side in tl.static_range(2):  # left and right, then top and bottom: two accumulators live at a time
                s_lo = tl.zeros([BLOCK_T, BLOCK_R], dtype=tl.float32)
                s_hi = tl.zeros([BLOCK_T, BLOCK_R], dtype=tl.float32)
                for j0 in range(0, N, BLOCK_J):
                    q = j0 + tl.arange(0, BLOCK_J).to(tl.int64)
                    xs = tl.load(xb + q[:, None] * sxp, mask=(q < N)[:, None] & rmask[None, :], other=0.0)
                    xs = xs.to(tl.float32)
                    if side == 0:  # a column edge's slope: the row window applied to that column
                        other, at, k_lo, k_hi = _window_weights(q // W, kt, ft, kb, fb), (q % W)[None, :], kl, kr
                    else:  # a row edge's slope: the column window applied to that row
                        other, at, k_lo, k_hi = _window_weights(q % W, kl, fl, kr, fr), (q // W)[None, :], kt, kb
                    s_lo += tl.dot(tl.where(at == k_lo[:, None], other, 0.0), xs, input_precision=PRECISION)
                    s_hi += tl.dot(tl.where(at == k_hi[:, None], other, 0.0), xs, input_precision=PRECISION)
                if side == 0:
                    tl.store(od, tl.where(live_l, tl.sum(gs * s_lo, axis=1) * ml, 0.0), mask=tmask)
                    tl.store(od + 1, tl.where(live_r, tl.sum(gs * s_hi, axis=1) * mr, 0.0), mask=tmask)
                else:
                    tl.store(od + 2, tl.where(live_t, tl.sum(gs * s_lo, axis=1) * mt, 0.0), mask=tmask)
                    tl.store(od + 3, tl.where(live_b, tl.sum(gs * s_hi, axis=1) * mb, 0.0), mask=tmask)


def plane_blocks(R: int, dims: int = 1, backward: bool = False) -> dict:
    """Plane kernels' blocks for heads of ``R`` channels: outputs per step, inputs per product, channels (a product
    needs 16 at least), and the products' float32 precision ('ieee': exact float32 multiply-adds; the interpreter
    computes in float32 whatever it says). Inputs per product: 64 forward; backward 32 in 1-D (at 64, Triton 3.6's
    sm_90 build spilled) and 16 in 2-D (at 32, sm_90 spilled registers)."""
    block_j = (32 if dims == 1 else 16) if backward else 64
    block_r = max(16, triton.next_power_of_2(R))
    return dict(PRECISION='ieee', BLOCK_T=_PLANE_BLOCK_T, BLOCK_J=block_j, BLOCK_R=block_r)


def talk1d_plane(x: torch.Tensor, off: torch.Tensor, max_left: int, max_right: int, y: torch.Tensor) -> torch.Tensor:
    """Forward of short rows: one launch of :func:`talk1d_plane_fwd_jit` (x and y in any layout)."""
    B, C, L = x.shape
    heads = off.shape[1]
    wrap_triton(talk1d_plane_fwd_jit)[(B * heads,)](
        x, off, y, L, C // heads, heads, *x.stride(), *y.stride(), *off.stride(), max_left, max_right,
        *norm_parts(max_left, max_right), **plane_blocks(C // heads),
    )  # fmt: skip
    return y


def talk1d_plane_backward(grad_y, x, offsets, max_left, max_right, need_dx, need_doff):
    """Backward of short rows: one launch of :func:`talk1d_plane_bwd_jit`, dx laid out like x."""
    B, C, L = x.shape
    heads = offsets.shape[1]
    off = offsets.to(torch.float32)
    dx = talk1d_out(x) if need_dx else x.new_empty(0)
    doff = torch.empty((B, heads, L, 2), dtype=torch.float32, device=x.device) if need_doff else off.new_empty(0)
    g = grad_y.to(x.dtype)
    dxs = dx.stride() if need_dx else x.stride()
    wrap_triton(talk1d_plane_bwd_jit)[(B * heads,)](
        g, x, off, dx if need_dx else x, doff if need_doff else off, L, C // heads, heads, *g.stride(), *x.stride(),
        *dxs, *off.stride(), max_left, max_right, *norm_parts(max_left, max_right), NEED_DX=need_dx, NEED_DOFF=need_doff,
        **plane_blocks(C // heads, dims=1, backward=True),
    )  # fmt: skip
    return dx, doff.to(offsets.dtype)


def talk2d_plane(x: torch.Tensor, off: torch.Tensor, maxes: tuple[int, int, int, int]):
    """Forward of small maps: one launch of :func:`talk2d_plane_fwd_jit`; the second output is x in float32, which
    the backward reads (the table's place)."""
    B, C, H, W = x.shape
    heads = off.shape[1]
    y = torch.empty_like(x, memory_format=torch.preserve_format)
    xf, yf, o = x.flatten(2), y.flatten(2), off.flatten(2, 3)
    wrap_triton(talk2d_plane_fwd_jit)[(B * heads,)](
        xf, o, yf, H, W, C // heads, heads, *xf.stride(), *yf.stride(), *o.stride(), *maxes, *norm_parts(*maxes),
        **plane_blocks(C // heads),
    )  # fmt: skip
    return y, x.to(torch.float32, copy=True)


def talk2d_plane_backward(grad_y, x, offsets, maxes, need_dx, need_doff):
    """Backward of small maps: one launch of :func:`talk2d_plane_bwd_jit`, dx laid out like x."""
    B, C, H, W = grad_y.shape
    heads = offsets.shape[1]
    o = offsets.to(torch.float32).flatten(2, 3)
    dx = torch.empty_like(x, dtype=grad_y.dtype, memory_format=torch.preserve_format) if need_dx else x.new_empty(0)
    doff = torch.empty((B, heads, H * W, 4), dtype=torch.float32, device=x.device) if need_doff else o.new_empty(0)
    gf, xf = grad_y.flatten(2), x.flatten(2)
    dxf = dx.flatten(2) if need_dx else xf
    wrap_triton(talk2d_plane_bwd_jit)[(B * heads,)](
        gf, xf, o, dxf, doff if need_doff else o, H, W, C // heads, heads, *gf.stride(), *xf.stride(), *dxf.stride(),
        *o.stride(), *maxes, *norm_parts(*maxes), NEED_DX=need_dx, NEED_DOFF=need_doff,
        **plane_blocks(C // heads, dims=2, backward=True),
    )  # fmt: skip
    doff = doff.view(offsets.shape) if need_doff else doff
    return dx, doff.to(offsets.dtype)
