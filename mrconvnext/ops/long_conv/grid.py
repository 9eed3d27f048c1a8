"""Building blocks of the matmul methods of the long convolution (``'toeplitz'``, ``'rowdft'``): Toeplitz matrices,
the row grid a sequence is folded into, the real DFT matrices along a row and the 2-D kernel of the flattened
convolution. A leaf module (torch only); every function depends on sizes and the kernel alone, never on the input.

Identities (lag convention of :mod:`mrconvnext.ops.long_conv`, ``y[t] = sum_j k[j] x[t - (j - zero_lag)]``):

1. A sequence of ``L <= P * Q`` positions folded row-major into ``P`` rows of ``Q`` (zero-padded at the end) is
   convolved exactly by the zero-padded 2-D convolution with ``K2[a, d] = k[zero_lag + a * Q + d]``,
   ``|a| <= P - 1``, ``|d| <= Q - 1``: every (output, source) pair has one offset ``(a, d)``.
2. With a real DFT of size ``N = 2Q - 1`` along the rows (column offsets do not wrap), that 2-D convolution is, per
   channel and frequency, a ``P x P`` complex Toeplitz product over the rows, then an inverse DFT that produces only
   the ``Q`` real columns.
3. Per channel, ``y = T x`` with the ``L x L`` Toeplitz matrix ``T[t, s] = k[zero_lag + t - s]``.
4. The Toeplitz product of identity 2 along the rows is itself a convolution of ``Q`` complex points with
   ``2Q - 1`` taps: a complex DFT of size ``N2 = 2Q - 1`` along the rows, a product with the 2-D spectrum
   ``Khat[f1, f2]`` of ``K2`` (sizes ``2P - 1`` along the columns, ``N2`` along the rows) and the inverse DFT at the
   ``Q`` columns compute it without a matrix per channel and frequency.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = [
    'row_grid',
    'toeplitz_matrix',
    'toeplitz_matrix_vjp',
    'kernel_2d',
    'row_dft',
    'row_idft',
    'toeplitz_blocks',
    'toeplitz_blocks_vjp',
    'row_cdft',
    'row_cidft',
    'kernel_spectrum_2d',
]


def row_grid(length: int) -> tuple[int, int]:
    """``(P, Q)``: ``P`` rows of ``Q`` positions holding ``length``, with ``P`` and ``Q`` near ``sqrt(length)`` (the
    row-DFT method's work per element is about ``4 (P + Q)`` multiply-adds). ``Q`` is a divisor of ``length`` when
    one lies within a factor 2 of the square root (a flattened ``H x W`` map with ``H ~ W`` folds back into its own
    rows, no padding), else ``ceil(sqrt(length))`` with the last row zero-padded. Plain integers: the matmul methods
    specialize on the length (a graph compiled with dynamic shapes breaks here and runs them with the concrete one).
    """
    root = math.isqrt(length)
    q = root + (root * root < length)
    for d in range(q, 0, -1):
        if length % d == 0 and 2 * d >= q:
            return length // d, d
    return -(-length // q), q


def toeplitz_matrix(kernel: torch.Tensor, zero_lag: int, length: int) -> torch.Tensor:
    """``(..., K)`` kernels -> ``(..., L, L)`` matrices ``T[t, s] = k[zero_lag + t - s]`` (0 outside the kernel), one
    copy in the kernel's dtype."""
    # the taps of lags 1 - L .. L - 1 zero-padded by one slice and pad; the overlapping windows of that row (a view,
    # H[t, j] = window[t + j]) are T with its columns reversed, so one flip writes T. On a GPU that is a copy with
    # cached reads, where a gather by an (L, L) index (built per call: four more launches) moved 2-byte elements one
    # at a time (docs/gpu/cost-model-calibration.md's gather16)
    window = _window(kernel, zero_lag + 1 - length, 2 * length - 1)  # entry L - 1 + lag
    if torch.jit.is_tracing():  # the TorchScript ONNX exporter has no Unfold of traced sizes: the same entries gathered
        t = torch.arange(length, device=kernel.device)
        return window[..., (t + (length - 1)).view(-1, 1) - t.view(1, -1)]
    return window.unfold(-1, length, 1).flip(-1)


def kernel_2d(kernel: torch.Tensor, zero_lag: int, rows: int, cols: int) -> torch.Tensor:
    """``(..., K)`` -> ``(..., 2 rows - 1, 2 cols - 1)``: ``K2[a, d] = k[zero_lag + a cols + d]`` with ``a`` from
    ``-(rows - 1)`` and ``d`` from ``-(cols - 1)`` (0 outside the kernel)."""
    reach = rows * cols - 1  # the largest |a cols + d|
    a = torch.arange(0, (2 * rows - 1) * cols, cols, device=kernel.device).view(-1, 1)
    d = torch.arange(2 * cols - 1, device=kernel.device).view(1, -1)
    # entry a cols + d + reach of the lags -reach .. reach, a and d counted from their first values
    return _window(kernel, zero_lag - reach, 2 * reach + 1)[..., a + d]


def _angles(n: int, cols: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    # 2 pi (c f mod N) / N: the product reduced exactly in integers first, so float64 angles stay small
    return (cols.view(-1, 1) * freqs.view(1, -1)).remainder(n).double() * (2 * math.pi / n)


def row_dft(cols: int, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """``(2 nf, cols)`` real matrix of the row DFT of size ``N = 2 cols - 1`` (``nf = cols`` frequencies): rows
    ``f`` give ``Re X[f] = sum_w x[w] cos(2 pi f w / N)``, rows ``nf + f`` give ``Im X[f] = -sum_w x[w] sin(...)``."""
    n = 2 * cols - 1
    w = torch.arange(cols, device=device)
    theta = _angles(n, w, torch.arange(cols, device=device)).T  # (nf, cols)
    return torch.cat([theta.cos(), -theta.sin()]).to(dtype)


def row_idft(cols: int, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """``(cols, 2 nf)`` real matrix of the inverse: ``y[w] = sum_f c_f (Re Y[f] cos(2 pi f w / N) - Im Y[f] sin(...))
    / N`` with ``c_0 = 1`` and ``c_f = 2`` otherwise (``N`` odd: no Nyquist bin), evaluated at the ``cols`` columns
    only."""
    n = 2 * cols - 1
    theta = _angles(n, torch.arange(cols, device=device), torch.arange(cols, device=device))  # (cols, nf)
    coef = torch.full((cols,), 2.0 / n, dtype=torch.float64, device=device)
    coef[0] = 1.0 / n
    return torch.cat([theta.cos() * coef, -theta.sin() * coef], dim=1).to(dtype)


def row_cdft(cols: int, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """``(2 cols, 2 N)`` real matrix of the complex DFT of size ``N = 2 cols - 1`` along a row of ``cols`` complex
    points (identity 4), right-multiplied: a row ``[re | im]`` of the points becomes ``[Re | Im]`` of the ``N``
    frequencies, ``X[f] = sum_w x[w] e^{-2 pi i f w / N}``."""
    n = 2 * cols - 1
    theta = _angles(n, torch.arange(cols, device=device), torch.arange(n, device=device))  # (cols, N)
    cos, sin = theta.cos(), theta.sin()
    return torch.cat([torch.cat([cos, -sin], 1), torch.cat([sin, cos], 1)]).to(dtype)


def row_cidft(cols: int, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """``(2 N, 2 cols)`` real matrix of the inverse of :func:`row_cdft` at the ``cols`` points only, right-multiplied:
    ``[Re | Im]`` of ``N = 2 cols - 1`` frequencies -> ``[re | im]``, ``y[w] = sum_f Y[f] e^{2 pi i f w / N} / N``."""
    n = 2 * cols - 1
    theta = _angles(n, torch.arange(n, device=device), torch.arange(cols, device=device))  # (N, cols)
    cos, sin = theta.cos() / n, theta.sin() / n
    return torch.cat([torch.cat([cos, sin], 1), torch.cat([-sin, cos], 1)]).to(dtype)


def kernel_spectrum_2d(
    kernel: torch.Tensor, zero_lag: int, rows: int, cols: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Identity 4's spectrum of the kernel of a sequence folded into ``rows`` rows of ``cols``: ``(N, C, K)`` kernels
    -> ``(re, im)``, each ``(N, C, rows, 2 cols - 1)`` in ``dtype``: ``Khat[f1, f2] = sum_{a, d} K2[a, d]
    e^{-2 pi i (f1 a / (2 rows - 1) + f2 d / (2 cols - 1))}`` for the ``rows`` frequencies ``f1`` of the real DFT
    along the columns (:func:`row_dft`) and every ``f2``. Computed in float64 from the kernel's values (real
    matrices only: ONNX has no complex type)."""
    k2 = kernel_2d(kernel.double(), zero_lag, rows, cols)  # (N, C, 2 rows - 1, 2 cols - 1), offsets from -(n - 1)
    cos2, msin2 = _offset_dft(cols, 2 * cols - 1, kernel.device)  # (2 cols - 1, N2): offsets d against f2
    cos1, msin1 = _offset_dft(rows, rows, kernel.device)  # (2 rows - 1, rows): offsets a against f1
    a, b = k2 @ cos2, k2 @ msin2  # the row spectra: Re, Im of sum_d K2[a, d] e^{-i theta}
    cos1, msin1 = cos1.T, msin1.T
    re = cos1 @ a - msin1 @ b
    im = cos1 @ b + msin1 @ a
    return re.to(dtype), im.to(dtype)


def _block_index(rows: int, device: torch.device | str) -> torch.Tensor:
    """``(2 rows, 2 rows)``: for row ``2 h + s`` and column ``2 g + r`` the position ``(s, r, a = h - g + rows - 1)``
    in the flattened ``(2, 2, 2 rows - 1)`` parts of a block."""
    h = torch.arange(rows, device=device)
    s = torch.arange(2, device=device)
    row = (s.view(1, 2) * 2 * (2 * rows - 1) + (h.view(-1, 1) + rows - 1)).reshape(-1)
    col = (s.view(1, 2) * (2 * rows - 1) - h.view(-1, 1)).reshape(-1)
    return row.view(-1, 1) + col.view(1, -1)


def _column_dft(cols: int, device: torch.device | str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, -sin)`` of the column offsets ``d = -(cols - 1) .. cols - 1`` against the ``nf = cols`` frequencies:
    ``(2 cols - 1, nf)`` each."""
    cos, msin = _offset_dft(cols, cols, device)
    return cos.to(dtype), msin.to(dtype)


def _offset_dft(cols: int, freqs: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 ``(cos, -sin)`` of the offsets ``-(cols - 1) .. cols - 1`` against the first ``freqs`` frequencies of
    the DFT of size ``2 cols - 1``: ``(2 cols - 1, freqs)`` each."""
    d = torch.arange(-(cols - 1), cols, device=device)
    theta = _angles(2 * cols - 1, d, torch.arange(freqs, device=device))
    return theta.cos(), -theta.sin()


def toeplitz_blocks(
    kernel: torch.Tensor, zero_lag: int, rows: int, cols: int, dtype: torch.dtype, transposed: bool = False
) -> torch.Tensor:
    """The middle step of identity 2 as real matrices: ``(N, C, K)`` kernels -> ``(N, nf * C, 2 rows, 2 rows)`` in
    ``dtype``, batch index ``f * C + c`` (``nf = cols``), row ``2 h + s`` and column ``2 g + r`` (``s``, ``r``: real
    0 / imaginary 1), the block ``[[Re, -Im], [Im, Re]]`` of ``T_f[h, g] = Khat[h - g, f]`` with
    ``Khat[a, f] = sum_d K2[a, d] e^{-2 pi i f d / N}``. Spectra in the kernel's dtype, the matrices written once by
    one gather in ``dtype``: row spectra ``(2, 2 rows - 1)`` per ``(n, f, c)`` are all it reads.

    ``transposed``: the same for the transposed grid of ``rows`` columns by ``cols`` rows (the kernel ``K2[d, a]`` of
    a sequence folded into ``cols`` rows of ``rows``): the DFT runs along the grid's columns, the blocks along its
    rows."""
    N, C, _ = kernel.shape
    if transposed:
        k2 = kernel_2d(kernel, zero_lag, cols, rows).transpose(-1, -2)  # (N, C, 2 rows - 1, 2 cols - 1)
    else:
        k2 = kernel_2d(kernel, zero_lag, rows, cols)  # (N, C, 2 rows - 1, 2 cols - 1)
    cos, msin = _column_dft(cols, kernel.device, kernel.dtype)
    re, im = k2 @ cos, k2 @ msin  # (N, C, 2 rows - 1, nf)
    # parts[..., s, r, a]: the (s, r) entry of the 2 x 2 block at row offset a: [[Re, -Im], [Im, Re]]
    parts = torch.stack([re, -im, im, re], dim=-1).to(dtype)  # (N, C, 2 rows - 1, nf, 4)
    parts = parts.permute(0, 3, 1, 4, 2).reshape(N, cols * C, 4 * (2 * rows - 1))  # (N, nf * C, (s, r, a))
    return parts[..., _block_index(rows, kernel.device)]


def toeplitz_blocks_vjp(
    grad: torch.Tensor, kernel_shape: tuple[int, int, int], zero_lag: int, rows: int, cols: int
) -> torch.Tensor:
    """The gradient of the kernels ``(N, C, K)`` from that of :func:`toeplitz_blocks`' output, in ``grad``'s dtype:
    the gather, the stacking and the column DFT taken back in turn. The gather's adjoint sums each of the four
    ``rows x rows`` parts of a block along its diagonals and the 2-D kernel's overlapping rows are added back into
    the taps (:func:`_diagonal_sums`, :func:`_overlap_add`): copies and sums, no scatter (a GPU's ``index_add_``
    serializes on atomics)."""
    N, C, K = kernel_shape
    A = 2 * rows - 1
    g = grad.unflatten(-1, (rows, 2)).unflatten(-3, (rows, 2))  # (N, nf * C, h, s, g, r)
    parts = _diagonal_sums(g.permute(0, 1, 3, 5, 2, 4))  # (N, nf * C, s, r, a)
    parts = parts.reshape(N, cols, C, 4, A).permute(0, 2, 4, 1, 3)  # (N, C, A, nf, 4)
    d_re = parts[..., 0] + parts[..., 3]
    d_im = parts[..., 2] - parts[..., 1]
    cos, msin = _column_dft(cols, grad.device, grad.dtype)
    d_k2 = d_re @ cos.T + d_im @ msin.T  # (N, C, A, 2 cols - 1): offset (a, d) at tap zero_lag + a cols + d
    return _window(_overlap_add(d_k2, cols), rows * cols - 1 - zero_lag, K)


def toeplitz_matrix_vjp(grad: torch.Tensor, taps: int, zero_lag: int) -> torch.Tensor:
    """The gradient of the kernels ``(..., K)`` from that of :func:`toeplitz_matrix`' ``(..., L, L)`` output: each
    tap's diagonal summed (:func:`_diagonal_sums`)."""
    L = grad.shape[-1]
    return _window(_diagonal_sums(grad), L - 1 - zero_lag, taps)


def _diagonal_sums(m: torch.Tensor) -> torch.Tensor:
    """``(..., n, n) -> (..., 2n - 1)``: entry ``n - 1 + t - s`` is the sum of ``m[..., t, s]`` over its diagonal.
    The columns reversed and padded to ``2n``, the rows read back ``2n - 1`` apart skew the anti-diagonals into
    columns (row ``i`` of the view is the reversed row shifted right by ``i``, zeros elsewhere)."""
    n = m.shape[-1]
    skew = F.pad(m.flip(-1), (0, n)).flatten(-2)[..., : n * (2 * n - 1)]
    return skew.unflatten(-1, (n, 2 * n - 1)).sum(-2)


def _overlap_add(frames: torch.Tensor, hop: int) -> torch.Tensor:
    """``(..., A, 2 hop - 1)`` frames ``hop`` apart -> ``(..., (A + 1) hop)``: frame ``a``'s entry ``d`` added at
    ``a hop + d``."""
    halves = F.pad(frames, (0, 1)).unflatten(-1, (2, hop))  # (..., A, 2, hop)
    rows = F.pad(halves[..., 0, :], (0, 0, 0, 1)) + F.pad(halves[..., 1, :], (0, 0, 1, 0))  # (..., A + 1, hop)
    return rows.flatten(-2)


def _window(seq: torch.Tensor, start: int, length: int) -> torch.Tensor:
    """``seq[..., start : start + length]``, zero where that leaves ``seq`` (``start`` may be negative)."""
    n = seq.shape[-1]
    lo, hi = max(0, -start), max(0, start + length - n)
    return F.pad(seq, (lo, hi))[..., start + lo : start + lo + length]
