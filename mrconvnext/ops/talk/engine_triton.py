"""Triton kernels of the TaLK operators, 1-D and 2-D, forward and backward, registered as ``triton_op``s.

The conventions and per-element math are those of :mod:`mrconvnext.ops.talk` (the specification) and
``kernels/talk/talk_math.h`` (the CPU kernel): window edges ``(k, f, live)`` from ``start``/``end`` edge rules,
prefix tables with a zero first entry, the one-sided derivative of a growing window at integer boundaries, NaN
offsets propagating through the fractions. Positions, fractions and prefix tables are float32 (float64 for float64
inputs); indices are int64.

Triton functions (``@triton.jit``)
    ``scan_jit``: inclusive (or, reversed, suffix) sums along the last axis of a 4-D strided view, in blocks of
    ``BLOCK_L`` with a running carry per row; it builds the 1-D prefix table, both passes of the 2-D integral image
    and the suffix sums that turn ``dP`` into ``dx``.
    ``talk{1,2}d_fwd_jit``: one program per (batch, head, block of positions) computes the window edges once
    and loops over the head's channels, gathering the prefix table at the edges.
    ``talk{1,2}d_bwd_jit``: the same loop; ``dP`` (the gradient w.r.t. the prefix table) by atomic adds, then
    ``dx`` is its suffix sum; the offset gradients are reduced over the head's channels in registers. Float atomic
    adds make ``dx``'s rounding order vary from run to run (not bitwise deterministic, like ``index_add_`` on CUDA).
    These are the kernels of channels-first (contiguous) maps.

Channels-last maps (a flattened channels-last ``(B, C, H*W)`` view, or a channels-last ``(B, C, H, W)``), as
ConvNeXt blocks hand them over, take kernels that keep a head's channels together: ``scan_jit`` with blocks of 32
adjacent channels (1-D), ``scan2d_cl_jit`` (the 2-D integral image ``(B, H + 1, W + 1, C)`` in one pass, walking
rows with the column sums in registers; rows over 256 positions take two ``scan_jit`` passes), and
``talk{1,2}d_{fwd,bwd}_cl_jit``: one program per (image, block of positions, block of heads) finds each window's
edges once per (position, head) and gathers (or, backward, atomically adds) the head's channels as one vector.
Outputs and ``dx`` keep the input's layout.

Short rows and small maps (at most ``PLANE_MAX_LENGTH`` positions, float32 accumulation):
``talk{1,2}d_plane_{fwd,bwd}_jit`` run in one launch with a whole (image, head) plane per program and no table: the
windows of a block of positions are a ``(BLOCK_T, N)`` weight matrix (1-D: ``[j < k_end] + f_end [j = k_end] -
[j < k_start] - f_start [j = k_start]``; 2-D: the product of the row and the column windows, the bilinear integral
image being separable) applied to the plane by float32 products (``input_precision='ieee'``); the backward is the
transposed products (no atomics, deterministic), and the offsets' slopes are x at the edges (1-D) or the other axis's
window applied to the edge's row or column (2-D). The 2-D forward's second output is then x in float32, which its
backward reads in place of the table.

Devices
    CUDA tensors; CPU tensors when ``TRITON_INTERPRET=1`` was set before this module was first imported (Triton's
    interpreter runs the same kernels with NumPy; used by the tests on machines without a GPU). Under the
    interpreter the operators run eagerly only: ``torch.compile`` and fake tensors need compiled kernels.
"""

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

from .autograd import register_talk1d_autograd, register_talk2d_autograd
from .checks import acc_dtype, is_channels_last_1d, talk1d_out
from .flops import register_talk_flops

__all__ = [
    'PLANE_MAX_LENGTH',
    'interpreted',
    'talk1d_triton',
    'talk1d_triton_backward',
    'talk2d_triton',
    'talk2d_triton_backward',
    'talk2d_tables',
    'talk2d_plane_fwd_jit',
    'talk2d_plane_bwd_jit',
    'scan_jit',
    'talk1d_fwd_jit',
    'talk1d_bwd_jit',
    'talk1d_fwd_cl_jit',
    'talk1d_bwd_cl_jit',
    'talk1d_plane_fwd_jit',
    'talk1d_plane_bwd_jit',
    'scan2d_cl_jit',
    'talk2d_fwd_cl_jit',
    'talk2d_bwd_cl_jit',
    'talk2d_fwd_jit',
    'talk2d_bwd_jit',
]

_BLOCK_M, _BLOCK_SCAN = 8, 128  # scan: rows per program, positions per step
_CL_BLOCK_M, _CL_BLOCK_SCAN = 32, 32  # the same on channels-last maps: rows are channels, 32 of them one vector
_CL_BLOCK_L, _CL_CHANNELS = 32, 64  # channels-last gathers: positions per program, channels per program
# The 1-D channels-last backward's positions per program: at 32, ptxas of Triton 3.8 parks a value in local memory
# (128 registers, 8 B of stack); at 16 it keeps everything in registers on Triton 3.6 and 3.8 (the Hopper test).
_CL_BWD_BLOCK_L = 16
_PLANE_BLOCK_T = 16  # plane kernels: outputs per step

# 1-D rows and 2-D maps of at most this many positions (ConvNeXt-T's stages 3 and 4 at 224 px: 196, 49) run in one
# launch, an (image, head) plane per program, with no table and no atomics (talk{1,2}d_plane_*_jit); larger ones take
# the scans and the gathers. Provisional: from the launch count and the plane's N multiply-adds per element, not timed.
PLANE_MAX_LENGTH = 256
_BLOCK_R, _BLOCK_L = 8, 128  # gather kernels: channels per step, positions per program


def interpreted() -> bool:
    """Whether the kernels were defined under Triton's interpreter (``TRITON_INTERPRET=1`` at import)."""
    return not isinstance(scan_jit, triton.runtime.JITFunction)


# --------------------------------------------------------------------------------------------------- edges


@triton.jit
def _start_edge(i, d, n):
    """Start edge of windows at int64 positions ``i`` with real boundary ``i - d`` on an axis of length ``n``."""
    fi = i.to(d.dtype)
    lo = (d < fi) == 0  # a <= 0, or a NaN offset (propagated through f)
    hi = (fi - d) > (n - 1)
    fl = tl.floor(tl.where(lo | hi, 0.0, d))
    k = tl.where(lo, 0, tl.where(hi, tl.maximum(n - 2, 0), i - fl.to(tl.int64) - 1))
    f = tl.where(lo, tl.where(d >= fi, 0.0, d), tl.where(hi, tl.where(n >= 2, 1.0, 0.0), 1.0 - (d - fl)))
    return k.to(tl.int64), f.to(d.dtype), (lo | hi) == 0


@triton.jit
def _end_edge(i, d, n):
    """End edge (prefix position ``i + d + 1``) of windows at positions ``i``; see :func:`_start_edge`."""
    fi = i.to(d.dtype)
    b = fi + d
    hi = (b < n - 1) == 0  # b >= n - 1, or NaN
    lo = b < 0
    fl = tl.floor(tl.where(lo | hi, 0.0, d))
    k = tl.where(hi, n - 1, tl.where(lo, tl.where(n >= 2, 1, 0), i + 1 + fl.to(tl.int64)))
    f = tl.where(hi, tl.where(b >= n - 1, 1.0, d), tl.where(lo, tl.where(n >= 2, 0.0, 1.0), d - fl))
    return k.to(tl.int64), f.to(d.dtype), (lo | hi) == 0


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


# ---------------------------------------------------------------------------------------------------- scan


@triton.jit
def scan_jit(
    src,
    dst,
    A2,
    M,
    L,
    ss0,
    ss1,
    ss2,
    ss3,
    sd0,
    sd1,
    sd2,
    sd3,
    REVERSE: tl.constexpr,
    ACC_F64: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    """``dst[a1, a2, m, l] = sum_{l' <= l} src[a1, a2, m, l']`` (``l' >= l`` when REVERSE), both (A1, A2, M, L)."""
    acc_ty = tl.float64 if ACC_F64 else tl.float32
    pid = tl.program_id(0).to(tl.int64)
    m_blocks = tl.cdiv(M, BLOCK_M)
    a, mb = pid // m_blocks, pid % m_blocks
    a1, a2 = a // A2, a % A2
    m = mb * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    src_rows = src + a1 * ss0 + a2 * ss1 + m[:, None] * ss2
    dst_rows = dst + a1 * sd0 + a2 * sd1 + m[:, None] * sd2
    carry = tl.zeros([BLOCK_M], dtype=acc_ty)
    last = tl.arange(0, BLOCK_L) == BLOCK_L - 1
    for start in range(0, L, BLOCK_L):
        j = start + tl.arange(0, BLOCK_L).to(tl.int64)
        pos = L - 1 - j if REVERSE else j
        mask = (m < M)[:, None] & (j < L)[None, :]
        v = tl.load(src_rows + pos[None, :] * ss3, mask=mask, other=0.0).to(acc_ty)
        c = tl.cumsum(v, axis=1) + carry[:, None]
        tl.store(dst_rows + pos[None, :] * sd3, c.to(dst.dtype.element_ty), mask=mask)
        # the carry is the scan's last column (masked tail entries are 0), not carry + sum(v): Triton 3.6's
        # OptimizeThreadLocality pass crashes on a loop-carried sum that is also used inside the loop
        carry = tl.sum(tl.where(last[None, :], c, 0.0), axis=1)


def _scan(src: torch.Tensor, dst: torch.Tensor, reverse: bool, channels_last: bool = False) -> None:
    """Launch :func:`scan_jit` on 4-D views ``src`` and ``dst`` (same shape, any strides); ``channels_last``: the
    rows ``M`` are channels adjacent in memory (a block of them is loaded as one vector per position)."""
    A1, A2, M, L = src.shape
    if src.numel() == 0:
        return
    block_m, block_l = (_CL_BLOCK_M, _CL_BLOCK_SCAN) if channels_last else (_BLOCK_M, _BLOCK_SCAN)
    grid = (A1 * A2 * triton.cdiv(M, block_m),)
    wrap_triton(scan_jit)[grid](
        src,
        dst,
        A2,
        M,
        L,
        *src.stride(),
        *dst.stride(),
        REVERSE=reverse,
        ACC_F64=dst.dtype == torch.float64 or src.dtype == torch.float64,
        BLOCK_M=block_m,
        BLOCK_L=block_l,
    )


# ----------------------------------------------------------------------------------------------------- 1-D


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
    ks, fs, _ = _start_edge(i, tl.load(ob, mask=lmask, other=0.0) * ml, L)
    ke, fe, _ = _end_edge(i, tl.load(ob + 1, mask=lmask, other=0.0) * mr, L)
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see _norm
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
    ks, fs, live_s = _start_edge(i, ds * ml, L)
    ke, fe, live_e = _end_edge(i, tl.load(ob + 1, mask=lmask, other=0.0) * mr, L)
    acc_s = tl.zeros([BLOCK_L], dtype=ds.dtype)
    acc_e = tl.zeros([BLOCK_L], dtype=ds.dtype)
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see _norm
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
    ks, fs, _ = _start_edge(i, tl.load(ob, mask=om, other=0.0) * ml, L)
    ke, fe, _ = _end_edge(i, tl.load(ob + sos, mask=om, other=0.0) * mr, L)
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see _norm
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
    ks, fs, live_s = _start_edge(i, ds * ml, L)
    ke, fe, live_e = _end_edge(i, tl.load(ob + sos, mask=om, other=0.0) * mr, L)
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see _norm
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
    ks, fs, live_s = _start_edge(t, tl.load(ob, mask=tmask, other=0.0) * ml, L)
    ke, fe, live_e = _end_edge(t, tl.load(ob + sos, mask=tmask, other=0.0) * mr, L)
    return ks, fs, live_s, ke, fe, live_e


@triton.jit
def _plane_program(heads, R, norm_hi, norm_lo, BLOCK_R: tl.constexpr):
    """A plane kernel's (image, head), its head's channels ``c``, their mask and the window normalizer."""
    pid = tl.program_id(0).to(tl.int64)
    r = tl.arange(0, BLOCK_R).to(tl.int64)
    norm = tl.cast(norm_hi, tl.float32) + tl.cast(norm_lo, tl.float32)  # see _norm
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
def _box_edges(off, b, h, t, tmask, H, W, sob, soh, sop, sos, ml, mr, mt, mb):
    """The four edges of the boxes at flattened positions ``t`` of heads ``h`` (any shapes that broadcast: a plane
    kernel's ``(BLOCK_T,)`` and one head, or a channels-last tile's ``(BLOCK_N, BLOCK_H)`` and ``(1, BLOCK_H)``),
    from offsets ``(B, heads, H * W, 4)`` with strides (sob, soh, sop, sos)."""
    ob = off + b * sob + h * soh + t * sop
    row, col = t // W, t % W
    kl, fl, live_l = _start_edge(col, tl.load(ob, mask=tmask, other=0.0) * ml, W)
    kr, fr, live_r = _end_edge(col, tl.load(ob + sos, mask=tmask, other=0.0) * mr, W)
    kt, ft, live_t = _start_edge(row, tl.load(ob + 2 * sos, mask=tmask, other=0.0) * mt, H)
    kb, fb, live_b = _end_edge(row, tl.load(ob + 3 * sos, mask=tmask, other=0.0) * mb, H)
    return kl, fl, live_l, kr, fr, live_r, kt, ft, live_t, kb, fb, live_b


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
        kl, fl, _, kr, fr, _, kt, ft, _, kb, fb, _ = _box_edges(
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
                kl, fl, _, kr, fr, _, kt, ft, _, kb, fb, _ = _box_edges(
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
            kl, fl, live_l, kr, fr, live_r, kt, ft, live_t, kb, fb, live_b = _box_edges(
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


def _plane_blocks(R: int, block_j: int = 64) -> dict:
    """Plane kernels: outputs per step, ``block_j`` inputs per product, channels (a product needs 16 at least), and the
    products' float32 precision ('ieee': exact float32 multiply-adds; the interpreter computes in float32 whatever
    it says)."""
    block_r = max(16, triton.next_power_of_2(R))
    return dict(PRECISION='ieee', BLOCK_T=_PLANE_BLOCK_T, BLOCK_J=block_j, BLOCK_R=block_r)


def _plane_applies(x: torch.Tensor, heads: int) -> bool:
    """The one-launch plane kernels: float32 accumulation (float16 / bfloat16 / float32 maps), rows of at most
    :data:`PLANE_MAX_LENGTH` positions, heads of at most 64 channels."""
    B, C, L = x.shape
    return acc_dtype(x.dtype) == torch.float32 and L <= PLANE_MAX_LENGTH and C // heads <= 64


def _cl_blocks(heads: int, R: int, block_l: int = _CL_BLOCK_L) -> dict[str, int]:
    block_r = triton.next_power_of_2(R)
    block_h = min(triton.next_power_of_2(heads), max(1, _CL_CHANNELS // block_r))
    return dict(BLOCK_L=block_l, BLOCK_H=block_h, BLOCK_R=block_r)


def _block_2d_cl(acc: torch.dtype, backward: bool) -> int:
    """Positions per channels-last 2-D program (16 corner vectors per position and head): 8, and 16 for the float64
    forward; the sizes at which sm_90 keeps everything in registers (tests/ops/talk/test_engine_triton.py)."""
    return 16 if acc == torch.float64 and not backward else 8


def _cl_grid(B: int, heads: int, L: int, blocks: dict[str, int]) -> tuple[int, int, int]:
    return (triton.cdiv(L, blocks['BLOCK_L']), triton.cdiv(heads, blocks['BLOCK_H']), B)


def _norm(*maxima: int) -> tuple[float, float]:
    """The normalizer ``(max_left + max_right + 1) [* (max_top + max_bottom + 1)]``, computed exactly on the host (in
    the kernel, 32-bit integer arithmetic overflowed for maxima near 2**31, or 46341 in 2-D), as two float32 parts
    (Triton passes floats as float32) whose sum in the accumulation dtype is the normalizer to 48 bits: exact
    in float64 up to 2**48, and the nearest float32 in float32."""
    norm = 1
    for a, b in zip(maxima[::2], maxima[1::2]):
        norm *= a + b + 1
    hi = float(torch.tensor(float(norm), dtype=torch.float32))
    return hi, float(norm - int(hi))


def _grid_1d(B: int, heads: int, L: int) -> tuple[int]:
    return (B * heads * triton.cdiv(L, _BLOCK_L),)


@triton_op('mrconvnext::talk1d_triton', mutates_args=())
def talk1d_triton(x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int) -> torch.Tensor:
    """TaLK 1-D forward (see :func:`mrconvnext.ops.talk1d`): x (B, C, L) any strides -> y laid out like x."""
    B, C, L = x.shape
    heads = offsets.shape[1]
    acc = acc_dtype(x.dtype)
    y = talk1d_out(x)
    if x.numel() == 0:
        return y
    if _plane_applies(x, heads):
        return _talk1d_plane(x, offsets.to(acc), max_left, max_right, y)
    if is_channels_last_1d(x):
        return _talk1d_cl(x, offsets.to(acc), max_left, max_right, y)
    off = offsets.to(acc).contiguous()
    P = torch.empty((B, C, L + 1), dtype=acc, device=x.device)
    P[:, :, 0] = 0
    _scan(x.unsqueeze(1), P[:, :, 1:].unsqueeze(1), reverse=False)
    wrap_triton(talk1d_fwd_jit)[_grid_1d(B, heads, L)](
        x, P, off, y, C, L, C // heads, heads, *x.stride(), *y.stride(), max_left, max_right, *_norm(max_left, max_right),
        BLOCK_R=_BLOCK_R, BLOCK_L=_BLOCK_L,
    )  # fmt: skip
    return y


@triton_op('mrconvnext::talk1d_triton_backward', mutates_args=())
def talk1d_triton_backward(
    grad_y: torch.Tensor,
    x: torch.Tensor,
    offsets: torch.Tensor,
    max_left: int,
    max_right: int,
    need_dx: bool,
    need_doff: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dx (B, C, L) laid out like x, doff in offsets' dtype)`` of :func:`talk1d_triton`; empty when not needed."""
    B, C, L = x.shape
    heads = offsets.shape[1]
    acc = acc_dtype(x.dtype)
    if x.numel() > 0 and (need_dx or need_doff) and _plane_applies(x, heads):
        return _talk1d_plane_backward(grad_y, x, offsets, max_left, max_right, need_dx, need_doff)
    if is_channels_last_1d(x) and x.numel() > 0 and (need_dx or need_doff):
        return _talk1d_cl_backward(grad_y, x, offsets, max_left, max_right, need_dx, need_doff)
    off = offsets.to(acc).contiguous()
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device) if need_dx else x.new_empty(0)
    doff = torch.empty(off.shape, dtype=acc, device=x.device) if need_doff else x.new_empty(0, dtype=acc)
    if x.numel() == 0 or not (need_dx or need_doff):
        return dx, doff.to(offsets.dtype)
    dP = torch.zeros((B, C, L + 1), dtype=acc, device=x.device) if need_dx else off
    g = grad_y.to(x.dtype)
    wrap_triton(talk1d_bwd_jit)[_grid_1d(B, heads, L)](
        g, x, off, dP, doff if need_doff else off, C, L, C // heads, heads, *g.stride(), *x.stride(),
        max_left, max_right, *_norm(max_left, max_right), NEED_DX=need_dx, NEED_DOFF=need_doff, BLOCK_R=_BLOCK_R, BLOCK_L=_BLOCK_L,
    )  # fmt: skip
    if need_dx:
        _scan(dP[:, :, 1:].unsqueeze(1), dx.unsqueeze(1), reverse=True)  # dx[j] = sum_{t > j} dP[t]
    return dx, doff.to(offsets.dtype)


def _talk1d_plane(x: torch.Tensor, off: torch.Tensor, max_left: int, max_right: int, y: torch.Tensor) -> torch.Tensor:
    """Forward of short rows: one launch of :func:`talk1d_plane_fwd_jit` (x and y in any layout)."""
    B, C, L = x.shape
    heads = off.shape[1]
    wrap_triton(talk1d_plane_fwd_jit)[(B * heads,)](
        x, off, y, L, C // heads, heads, *x.stride(), *y.stride(), *off.stride(), max_left, max_right,
        *_norm(max_left, max_right), **_plane_blocks(C // heads),
    )  # fmt: skip
    return y


def _talk1d_plane_backward(grad_y, x, offsets, max_left, max_right, need_dx, need_doff):
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
        *dxs, *off.stride(), max_left, max_right, *_norm(max_left, max_right), NEED_DX=need_dx, NEED_DOFF=need_doff,
        **_plane_blocks(C // heads, block_j=32),  # 32 inputs per product: at 64, Triton 3.6's sm_90 build spilled
    )  # fmt: skip
    return dx, doff.to(offsets.dtype)


def _talk1d_cl(x: torch.Tensor, off: torch.Tensor, max_left: int, max_right: int, y: torch.Tensor) -> torch.Tensor:
    """Forward on a channels-last ``x``: the prefix table ``(B, L + 1, C)`` by one coalesced scan, then the gathers."""
    B, C, L = x.shape
    heads = off.shape[1]
    P = torch.empty((B, L + 1, C), dtype=off.dtype, device=x.device)
    P[:, 0] = 0
    _scan(x.unsqueeze(1), P[:, 1:].transpose(1, 2).unsqueeze(1), reverse=False, channels_last=True)
    blocks = _cl_blocks(heads, C // heads)
    xt, yt = x.transpose(1, 2), y.transpose(1, 2)  # (B, L, C), channel stride 1
    wrap_triton(talk1d_fwd_cl_jit)[_cl_grid(B, heads, L, blocks)](
        xt, P, off, yt, C, L, C // heads, heads, xt.stride(0), xt.stride(1), *off.stride()[:3], off.stride(3),
        max_left, max_right, *_norm(max_left, max_right), **blocks,
    )  # fmt: skip
    return y


def _talk1d_cl_backward(grad_y, x, offsets, max_left, max_right, need_dx, need_doff):
    """Backward on a channels-last ``x``: ``dx`` channels-last too (the suffix sum of ``dP`` by one coalesced scan)."""
    B, C, L = x.shape
    heads = offsets.shape[1]
    off = offsets.to(acc_dtype(x.dtype))
    dx = torch.empty_like(x) if need_dx else x.new_empty(0)
    doff = torch.empty((B, heads, L, 2), dtype=off.dtype, device=x.device) if need_doff else off.new_empty(0)
    dP = torch.zeros((B, L + 1, C), dtype=off.dtype, device=x.device) if need_dx else off
    blocks = _cl_blocks(heads, C // heads, _CL_BWD_BLOCK_L)
    xt, gt = x.transpose(1, 2), grad_y.to(x.dtype).transpose(1, 2)
    wrap_triton(talk1d_bwd_cl_jit)[_cl_grid(B, heads, L, blocks)](
        gt, xt, off, dP, doff if need_doff else off, C, L, C // heads, heads, *gt.stride(), xt.stride(0),
        xt.stride(1), *off.stride()[:3], off.stride(3), max_left, max_right, *_norm(max_left, max_right),
        NEED_DX=need_dx, NEED_DOFF=need_doff, **blocks,
    )  # fmt: skip
    if need_dx:  # dx[j] = sum_{t > j} dP[t]
        _scan(dP[:, 1:].transpose(1, 2).unsqueeze(1), dx.unsqueeze(1), reverse=True, channels_last=True)
    return dx, doff.to(offsets.dtype)


# ----------------------------------------------------------------------------------------------------- 2-D


@triton.jit
def _edges_2d(off, bh, p, N, W, H, ml, mr, mt, mb, nmask):
    ob = off + (bh * N + p) * 4
    row, col = p // W, p % W
    dl = tl.load(ob, mask=nmask, other=0.0)
    kl, fl, live_l = _start_edge(col, dl * ml, W)
    kr, fr, live_r = _end_edge(col, tl.load(ob + 1, mask=nmask, other=0.0) * mr, W)
    kt, ft, live_t = _start_edge(row, tl.load(ob + 2, mask=nmask, other=0.0) * mt, H)
    kb, fb, live_b = _end_edge(row, tl.load(ob + 3, mask=nmask, other=0.0) * mb, H)
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
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see _norm
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
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see _norm
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


@triton.jit
def scan2d_cl_jit(
    src, dst, H, W, C, ssb, ssh, ssw, sdb, sdh, sdw,
    REVERSE: tl.constexpr, ACC_F64: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    """One pass of the 2-D inclusive scan on channels-last ``(B, H, W, C)`` views (channel stride 1):
    ``dst[b, i, j, c] = sum_{i' <= i, j' <= j} src[b, i', j', c]`` (``>=`` both ways when REVERSE). A program holds
    a row of ``BLOCK_C`` channels as the running column sums and walks the rows: x read once, the table written once."""
    acc_ty = tl.float64 if ACC_F64 else tl.float32
    b = tl.program_id(1).to(tl.int64)
    c = tl.program_id(0).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C).to(tl.int64)
    j = tl.arange(0, BLOCK_W).to(tl.int64)
    col = W - 1 - j if REVERSE else j  # the suffix sums of a row are the prefix sums of the reversed row
    mask = (j < W)[:, None] & (c < C)[None, :]
    carry = tl.zeros([BLOCK_W, BLOCK_C], dtype=acc_ty)
    for step in range(0, H):
        row = H - 1 - step if REVERSE else step
        v = tl.load(src + b * ssb + row * ssh + col[:, None] * ssw + c[None, :], mask=mask, other=0.0)
        carry += tl.cumsum(v.to(acc_ty), axis=0)
        tl.store(dst + b * sdb + row * sdh + col[:, None] * sdw + c[None, :], carry.to(dst.dtype.element_ty), mask=mask)


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
    kl, fl, live_l, kr, fr, live_r, kt, ft, live_t, kb, fb, live_b = _box_edges(
        off, b, h[None, :], p, om, H, W, sob, soh, sop, sos, ml, mr, mt, mb
    )
    w1 = W + 1
    Pb = P + b * (H + 1) * w1 * C + c[None, :, :]
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see _norm
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
    kl, fl, live_l, kr, fr, live_r, kt, ft, live_t, kb, fb, live_b = _box_edges(
        off, b, h[None, :], p, om, H, W, sob, soh, sop, sos, ml, mr, mt, mb
    )
    w1 = W + 1
    plane = b * (H + 1) * w1 * C + c[None, :, :]
    norm = tl.cast(norm_hi, off.dtype.element_ty) + tl.cast(norm_lo, off.dtype.element_ty)  # see _norm
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


def _block_2d(acc: torch.dtype, backward: bool) -> int:
    """Positions per 2-D program: 128 forward and 64 backward in float32; 64 and 32 in float64. The registers spilled
    on sm_90 at 128 in float64, and in the float32 backward under Triton 3.6 (tests/ops/talk/test_engine_triton.py
    reads the cubins)."""
    if acc != torch.float64:
        return _BLOCK_L // 2 if backward else _BLOCK_L
    return 32 if backward else 64


def _grid_2d(B: int, heads: int, N: int, block: int) -> tuple[int]:
    return (B * heads * triton.cdiv(N, block),)


@triton_op('mrconvnext::talk2d_triton', mutates_args=())
def talk2d_triton(
    x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int, max_top: int, max_bottom: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """TaLK 2-D forward: ``(y (B, C, H, W), P)``, what the backward needs: the integral image ``(B, C, H + 1, W + 1)``
    in the accumulation dtype (channels-last for a channels-last x, then a view of a contiguous ``(B, H + 1, W + 1,
    C)``), or for maps of at most :data:`PLANE_MAX_LENGTH` positions (float32 accumulation), which the one-launch
    plane kernels compute without a table, x itself in float32 ``(B, C, H, W)``. y is laid out like x (channels-last
    or contiguous)."""
    maxes = (max_left, max_right, max_top, max_bottom)
    if x.numel() > 0 and _plane_applies(x.flatten(2), offsets.shape[1]):
        return _talk2d_plane(x, offsets.to(torch.float32), maxes)
    return talk2d_tables(x, offsets, *maxes)


def talk2d_tables(
    x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int, max_top: int, max_bottom: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`talk2d_triton` through the integral image at every size (the per-device operator's CUDA kernel, whose
    second output is always the table)."""
    B, C, H, W = x.shape
    heads = offsets.shape[1]
    acc = acc_dtype(x.dtype)
    if _is_channels_last_2d(x) and x.numel() > 0:
        return _talk2d_cl(x, offsets.to(acc), (max_left, max_right, max_top, max_bottom))
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    P = torch.empty((B, C, H + 1, W + 1), dtype=acc, device=x.device)
    P[:, :, 0, :] = 0
    P[:, :, :, 0] = 0
    if x.numel() == 0:
        return y, P
    inner = P[:, :, 1:, 1:]
    _scan(x, inner, reverse=False)  # rows
    _scan(inner.transpose(2, 3), inner.transpose(2, 3), reverse=False)  # columns, in place
    off = offsets.to(acc).contiguous()
    block = _block_2d(acc, backward=False)
    wrap_triton(talk2d_fwd_jit)[_grid_2d(B, heads, H * W, block)](
        P, off, y, C, H, W, C // heads, heads, max_left, max_right, max_top, max_bottom,
        *_norm(max_left, max_right, max_top, max_bottom),
        BLOCK_R=_BLOCK_R, BLOCK_N=block,
    )  # fmt: skip
    return y, P


@triton_op('mrconvnext::talk2d_triton_backward', mutates_args=())
def talk2d_triton_backward(
    grad_y: torch.Tensor,
    P: torch.Tensor,
    offsets: torch.Tensor,
    max_left: int,
    max_right: int,
    max_top: int,
    max_bottom: int,
    need_dx: bool,
    need_doff: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dx (B, C, H, W), doff in offsets' dtype)`` of :func:`talk2d_triton` from its second output (the integral
    image, or x for the plane kernels); dx is laid out like the forward's x."""
    B, C, H, W = grad_y.shape
    heads = offsets.shape[1]
    maxes = (max_left, max_right, max_top, max_bottom)
    if P.shape[-2:] == grad_y.shape[-2:] and grad_y.numel() > 0 and (need_dx or need_doff):  # the plane kernels' x
        return _talk2d_plane_backward(grad_y, P, offsets, maxes, need_dx, need_doff)
    if _is_channels_last_2d(P) and grad_y.numel() > 0 and (need_dx or need_doff):
        return _talk2d_cl_backward(grad_y, P, offsets, maxes, need_dx, need_doff)
    off = offsets.to(P.dtype).contiguous()
    dx = torch.empty(grad_y.shape, dtype=grad_y.dtype, device=P.device) if need_dx else grad_y.new_empty(0)
    doff = torch.empty(off.shape, dtype=P.dtype, device=P.device) if need_doff else P.new_empty(0)
    if grad_y.numel() == 0 or not (need_dx or need_doff):
        return dx, doff.to(offsets.dtype)
    dP = torch.zeros_like(P) if need_dx else P
    g = grad_y.contiguous()
    block = _block_2d(P.dtype, backward=True)
    wrap_triton(talk2d_bwd_jit)[_grid_2d(B, heads, H * W, block)](
        g, P, off, dP, doff if need_doff else off, C, H, W, C // heads, heads,
        max_left, max_right, max_top, max_bottom, *_norm(max_left, max_right, max_top, max_bottom),
        NEED_DX=need_dx, NEED_DOFF=need_doff, BLOCK_R=_BLOCK_R, BLOCK_N=block,
    )  # fmt: skip
    if need_dx:
        inner = dP[:, :, 1:, 1:]
        _scan(inner, inner, reverse=True)  # sum over u > c, in place
        _scan(inner.transpose(2, 3), dx.transpose(2, 3), reverse=True)  # then over v > r
    return dx, doff.to(offsets.dtype)


def _is_channels_last_2d(t: torch.Tensor) -> bool:
    return t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


def _scan2d_cl(src: torch.Tensor, dst: torch.Tensor, reverse: bool) -> None:
    """The 2-D inclusive (``reverse``: suffix) scan of ``(B, H, W, C)`` views with channel stride 1: one pass of
    :func:`scan2d_cl_jit` for rows of up to 256 positions, else rows then columns by :func:`scan_jit`."""
    B, H, W, C = src.shape
    if W <= 256:
        block_w = triton.next_power_of_2(W)
        block_c = max(1, min(32, 4096 // block_w))
        wrap_triton(scan2d_cl_jit)[(triton.cdiv(C, block_c), B)](
            src, dst, H, W, C, src.stride(0), src.stride(1), src.stride(2), dst.stride(0), dst.stride(1),
            dst.stride(2), REVERSE=reverse, ACC_F64=torch.float64 in (src.dtype, dst.dtype), BLOCK_W=block_w,
            BLOCK_C=block_c,
        )  # fmt: skip
        return
    _scan(src.permute(0, 1, 3, 2), dst.permute(0, 1, 3, 2), reverse, channels_last=True)  # rows
    _scan(dst.permute(0, 2, 3, 1), dst.permute(0, 2, 3, 1), reverse, channels_last=True)  # then columns, in place


def _talk2d_plane(x: torch.Tensor, off: torch.Tensor, maxes: tuple[int, int, int, int]):
    """Forward of small maps: one launch of :func:`talk2d_plane_fwd_jit`; the second output is x in float32, which
    the backward reads (the table's place)."""
    B, C, H, W = x.shape
    heads = off.shape[1]
    y = torch.empty_like(x, memory_format=torch.preserve_format)
    xf, yf, o = x.flatten(2), y.flatten(2), off.flatten(2, 3)
    wrap_triton(talk2d_plane_fwd_jit)[(B * heads,)](
        xf, o, yf, H, W, C // heads, heads, *xf.stride(), *yf.stride(), *o.stride(), *maxes, *_norm(*maxes),
        **_plane_blocks(C // heads),
    )  # fmt: skip
    return y, x.to(torch.float32, copy=True)


def _talk2d_plane_backward(grad_y, x, offsets, maxes, need_dx, need_doff):
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
        *o.stride(), *maxes, *_norm(*maxes), NEED_DX=need_dx, NEED_DOFF=need_doff,
        **_plane_blocks(C // heads, block_j=16),  # 16 inputs per product: at 32, sm_90 spilled registers
    )  # fmt: skip
    doff = doff.view(offsets.shape) if need_doff else doff
    return dx, doff.to(offsets.dtype)


def _talk2d_cl(x: torch.Tensor, off: torch.Tensor, maxes: tuple[int, int, int, int]):
    """Forward on a channels-last ``x``: the integral image ``(B, H + 1, W + 1, C)`` in one pass, then the gathers."""
    B, C, H, W = x.shape
    heads = off.shape[1]
    P = torch.empty((B, H + 1, W + 1, C), dtype=off.dtype, device=x.device)
    P[:, 0] = 0
    P[:, 1:, 0] = 0
    _scan2d_cl(x.permute(0, 2, 3, 1), P[:, 1:, 1:], reverse=False)
    y = torch.empty_like(x)  # channels-last
    o = off.flatten(2, 3)  # (B, heads, H * W, 4)
    blocks = _cl_blocks(heads, C // heads, _block_2d_cl(off.dtype, backward=False))
    wrap_triton(talk2d_fwd_cl_jit)[_cl_grid(B, heads, H * W, blocks)](
        P, o, y, C, H, W, C // heads, heads, *o.stride(), *maxes, *_norm(*maxes), **blocks,
    )  # fmt: skip
    return y, P.permute(0, 3, 1, 2)


def _talk2d_cl_backward(grad_y, P, offsets, maxes, need_dx, need_doff):
    """Backward from a channels-last integral image: ``dx`` channels-last (the suffix sums of ``dP`` in one pass)."""
    B, C, H, W = grad_y.shape
    heads = offsets.shape[1]
    Pc = P.permute(0, 2, 3, 1)  # (B, H + 1, W + 1, C), contiguous
    o = offsets.to(P.dtype).flatten(2, 3)
    dx = torch.empty_like(grad_y, memory_format=torch.channels_last) if need_dx else grad_y.new_empty(0)
    doff = torch.empty((B, heads, H * W, 4), dtype=P.dtype, device=P.device) if need_doff else P.new_empty(0)
    dP = torch.zeros_like(Pc) if need_dx else Pc
    g = grad_y.permute(0, 2, 3, 1).flatten(1, 2)  # (B, H * W, C)
    blocks = _cl_blocks(heads, C // heads, _block_2d_cl(P.dtype, backward=True))
    wrap_triton(talk2d_bwd_cl_jit)[_cl_grid(B, heads, H * W, blocks)](
        g, Pc, o, dP, doff if need_doff else o, C, H, W, C // heads, heads, *g.stride(), *o.stride(), *maxes,
        *_norm(*maxes), NEED_DX=need_dx, NEED_DOFF=need_doff, **blocks,
    )  # fmt: skip
    if need_dx:  # dx[r, c] = sum over v > r, u > c of dP[v, u]
        _scan2d_cl(dP[:, 1:, 1:], dx.permute(0, 2, 3, 1), reverse=True)
    doff = doff.view(offsets.shape) if need_doff else doff
    return dx, doff.to(offsets.dtype)


# the same autograd as the other TaLK operators (autograd.py): saved tensors, backward operator, input gradients
register_talk1d_autograd(talk1d_triton, talk1d_triton_backward)
register_talk2d_autograd(talk2d_triton, talk2d_triton_backward)
register_talk_flops('_triton')
