"""Scans of the Triton TaLK kernels: the prefix tables (1-D), the integral images (2-D) and the suffix sums that turn a
table's gradient into ``dx``. :func:`scan_jit` runs along the last axis of any 4-D strided view; :func:`scan2d_cl_jit`
is the 2-D scan of a channels-last map in one pass."""

import torch
import triton
import triton.language as tl
from torch.library import wrap_triton

__all__ = ['SCAN_BLOCKS', 'CL_SCAN_BLOCKS', 'scan2d_cl_blocks', 'scan_jit', 'scan2d_cl_jit', 'scan', 'scan2d_cl']

SCAN_BLOCKS = dict(BLOCK_M=8, BLOCK_L=128)  # scan_jit: rows per program, positions per step
CL_SCAN_BLOCKS = dict(
    BLOCK_M=32, BLOCK_L=32
)  # the same on channels-last maps: rows are channels, 32 of them one vector


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


def scan(src: torch.Tensor, dst: torch.Tensor, reverse: bool, channels_last: bool = False) -> None:
    """Launch :func:`scan_jit` on 4-D views ``src`` and ``dst`` (same shape, any strides); ``channels_last``: the
    rows ``M`` are channels adjacent in memory (a block of them is loaded as one vector per position)."""
    A1, A2, M, L = src.shape
    if src.numel() == 0:
        return
    blocks = CL_SCAN_BLOCKS if channels_last else SCAN_BLOCKS
    grid = (A1 * A2 * triton.cdiv(M, blocks['BLOCK_M']),)
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
        **blocks,
    )


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


def scan2d_cl_blocks(W: int) -> dict[str, int]:
    """:func:`scan2d_cl_jit`'s blocks for rows of ``W`` positions (at most 256): the whole row, and as many channels as
    keep a block at 4096 values (at most 32)."""
    block_w = triton.next_power_of_2(W)
    return dict(BLOCK_W=block_w, BLOCK_C=max(1, min(32, 4096 // block_w)))


def scan2d_cl(src: torch.Tensor, dst: torch.Tensor, reverse: bool) -> None:
    """The 2-D inclusive (``reverse``: suffix) scan of ``(B, H, W, C)`` views with channel stride 1: one pass of
    :func:`scan2d_cl_jit` for rows of up to 256 positions, else rows then columns by :func:`scan_jit`."""
    B, H, W, C = src.shape
    if W <= 256:
        blocks = scan2d_cl_blocks(W)
        wrap_triton(scan2d_cl_jit)[(triton.cdiv(C, blocks['BLOCK_C']), B)](
            src, dst, H, W, C, src.stride(0), src.stride(1), src.stride(2), dst.stride(0), dst.stride(1),
            dst.stride(2), REVERSE=reverse, ACC_F64=torch.float64 in (src.dtype, dst.dtype), **blocks,
        )  # fmt: skip
        return
    scan(src.permute(0, 1, 3, 2), dst.permute(0, 1, 3, 2), reverse, channels_last=True)  # rows
    scan(dst.permute(0, 2, 3, 1), dst.permute(0, 2, 3, 1), reverse, channels_last=True)  # then columns, in place
