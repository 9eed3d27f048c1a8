"""The long convolution's ``'onnx'`` engine (standard ATen ops): the row-DFT and direct methods for ONNX runtimes.

What ``engine='auto'`` runs for long maps while ``torch.onnx.export`` traces a model
(:func:`mrconvnext.ops.availability.onnx_exporting`). Identity 2 of :mod:`.grid` on the transposed grid: the sequence
is folded into ``P`` rows of ``Q`` (:func:`onnx_grid`), a real DFT runs along the grid's columns (over the ``P``
rows, one ``(2P, P)`` matrix shared by every channel, left-multiplied onto the ``(P, Q)`` map as it lies), a
Toeplitz product per channel and frequency runs along the rows, and the inverse DFT produces the ``P`` real rows.
The products along the rows take one of two forms, which give the same values:

- ``'blocks'``: a ``2Q x 2Q`` real block per channel and frequency. CPU runtimes run it at memory speed (it reads
  ``16 Q`` bytes of blocks per position once per batch), so short rows (:data:`ONNX_ROW_WIDTH`) keep them small. The
  frequency index stays outside the real / imaginary one in every step, so at batch 1 the two transposes around
  the product move nothing, and at larger batches they move runs of ``2Q`` values.
- ``'dft'``: identity 4, a complex DFT along the rows (one shared matrix), the product with the kernel's 2-D
  spectrum and the inverse: four times the multiply-adds, at GEMM speed, and 16 bytes of spectrum per position.
  Faster up to :data:`ONNX_DFT_MAX_BATCH` images.

An export with a dynamic batch axis holds both, in an ONNX ``If`` on the batch (``torch.cond``), on maps past
``ONNX_ROW_WIDTH ** 2`` positions (the DFT alone on shorter ones). The output comes out in the input's layout.
``python scripts/bench_onnx_forms.py --ops long_conv --doc`` times the forms; :func:`.engine_torch.rowdft_conv` is
the same identity in the CUDA layout.

The direct method on this engine (:func:`folded_conv2d`, what short maps take) is identity 1 itself: the sequence
folded into :func:`.grid.row_grid`'s rows (a flattened map into its own), convolved by one depthwise ``Conv`` with the
``(2P - 1, 2Q - 1)`` kernel, the op ONNX runtimes run in their convolutions' own blocked layouts.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..symbolic import static_size
from .grid import kernel_2d, kernel_spectrum_2d, row_cdft, row_cidft, row_dft, row_grid, row_idft, toeplitz_blocks

__all__ = ['ONNX_DFT_MAX_BATCH', 'ONNX_ROW_WIDTH', 'folded_conv2d', 'onnx_grid', 'rowdft_conv']

# Row length Q of the folded sequence past 256 positions: the blocks take 16 Q^2 bytes per channel and frequency, the
# DFTs 4 P multiply-adds per position. ONNX Runtime 1.32 on 2 threads of a Xeon (the ONNX forms table of commit
# 1fbb1b1, with the blocks alone, 'rowdft/onnx' against 'rowdft/onnx square', batch 1 / 8): ConvNeXt-T's stage 1
# (96 x 3136) 8.3 / 42.6 ms against 16.1 / 37.6 on its own 56 x 56 grid, stage 2 (192 x 784) 4.1 / 11.5 against
# 5.2 / 14.0; atto's stage 1 3.5 / 15.8 against 5.4 / 16.9. Batch 1 reads the blocks once per image, so it gains
# most; rows of 32 fell between. The DFT form (below) measured alike on both grids at batch 1.
ONNX_ROW_WIDTH = 16
# The largest batch whose Toeplitz products along the rows run as identity 4 (a complex DFT along the rows, the
# kernel's spectrum, the inverse: 16 Q multiply-adds per position at GEMM speed, 16 bytes of spectrum per position)
# rather than as blocks (4 Q multiply-adds, but 16 Q bytes of blocks per position, read once per batch). ONNX Runtime
# 1.32, 2 threads (docs/benchmarks.md's long_conv ONNX forms table, 'rowdft/onnx dft' against 'blocks', ms): the
# DFT wins every stage of atto and T at batches 1 and 2 (T's stage 1: 4.3 against 8.1, 7.2 against 11.1; stage 3:
# 0.51 against 1.11, 1.25 against 1.59); at 4 it loses four of the six long-map stages (T's stage 1: 29.0 against
# 17.9) and at 8 all of them. An export with a dynamic batch holds both forms in an If for maps past
# ONNX_ROW_WIDTH ** 2 positions only: each If costs about 2 s of export (dynamo traces torch.cond's branches; 15 of
# them took mrconvnext_t's export from 20 to 51-64 s), and on the shorter maps the DFT form at every batch gains
# more at batch 1 than it loses at 8 (stage 3, 196 positions: T 0.51 against 1.11 ms and 4.95 against 3.47, atto
# 0.33 against 0.48 and 1.91 against 1.56).
ONNX_DFT_MAX_BATCH = 2
# The DFT over the P rows stays one dense (2P, P) matrix although it is most of the arithmetic at batch 8 (4 P
# multiply-adds per position against the blocks' 4 Q). A factored DFT (Cooley-Tukey as a real (2 N1, R1) product and
# N1 batched (2 F2, 2 N2) products with the twiddles folded in: about 5x fewer multiply-adds at ConvNeXt-atto's
# stage 1) ran slower in ONNX Runtime 1.32 on 2 threads (mrconvnext_atto at batch 8: 157 and 200 ms in two runs, the
# dense form 146): its small batched products ran at about 35 GFLOP/s, the dense DFT near 190; at batch 1 the
# blocks' reads dominate either way (2026-11-27).


def onnx_grid(length: int) -> tuple[int, int]:
    """``(P, Q)``: ``P`` rows of ``Q`` positions holding ``length``. Up to ``ONNX_ROW_WIDTH ** 2`` positions
    :func:`.grid.row_grid` (near the square root); beyond, ``Q`` is the largest divisor of ``length`` from
    ``3/4 ONNX_ROW_WIDTH`` to ``ONNX_ROW_WIDTH`` (no padding), else ``ONNX_ROW_WIDTH`` with the last row
    zero-padded."""
    if length <= ONNX_ROW_WIDTH**2:
        return row_grid(length)
    for q in range(ONNX_ROW_WIDTH, (3 * ONNX_ROW_WIDTH) // 4 - 1, -1):
        if length % q == 0:
            return length // q, q
    return math.ceil(length / ONNX_ROW_WIDTH), ONNX_ROW_WIDTH


def folded_conv2d(
    x: torch.Tensor, kernel: torch.Tensor, zero_lag: int, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """Identity 1 as a depthwise 2-D convolution: ``x (B, C, L)``, ``kernel (C, K)`` or ``(N, C, K)``, ``bias (C,)``
    or None (added to every kernel's output, as :func:`.engine_torch.direct_conv1d` does) -> ``(B, C, L)`` or
    ``(B, N, C, L)``, in ``x``'s dtype. The sequence is folded into
    :func:`.grid.row_grid`'s ``P`` rows of ``Q`` (zero-padded at the end) and cross-correlated, zero-padded, with the
    flipped ``(2P - 1, 2Q - 1)`` kernel ``K2[a, d] = k[zero_lag + a Q + d]`` (:func:`.grid.kernel_2d`): output
    channel ``c N + i`` is kernel ``i`` of channel ``c``. About ``4 L`` multiply-adds per element (the Toeplitz
    product's ``L``), in the op every ONNX runtime optimizes."""
    B, C, L = x.shape
    C, L = static_size(C), static_size(L)
    multi = kernel.dim() == 3
    k = kernel if multi else kernel.unsqueeze(0)
    N = k.shape[0]
    P, Q = row_grid(L)
    taps = kernel_2d(k, zero_lag, P, Q).flip(-2, -1)  # (N, C, 2P - 1, 2Q - 1): conv2d is a cross-correlation
    w = taps.transpose(0, 1).reshape(C * N, 1, 2 * P - 1, 2 * Q - 1).to(x.dtype)
    xp = F.pad(x, (0, P * Q - L)) if P * Q > L else x
    y = F.conv2d(xp.reshape(B, C, P, Q), w, None if multi else bias, padding=(P - 1, Q - 1), groups=C)
    y = y.reshape(B, C, N, P * Q)[..., :L]
    if not multi:
        return y.squeeze(2)
    y = y.transpose(1, 2)
    return y if bias is None else y + bias.unsqueeze(-1)


def _frequency_major(m: torch.Tensor, n: int, dim: int) -> torch.Tensor:
    """A DFT matrix's ``2 n`` rows (``dim=0``) or columns (``dim=1``) from the order ``(part, frequency)`` of
    :func:`.grid.row_dft` / :func:`.grid.row_idft` to ``(frequency, part)``."""
    if dim == 0:
        return m.view(2, n, -1).transpose(0, 1).reshape(m.shape)
    return m.view(-1, 2, n).transpose(1, 2).reshape(m.shape)


def rowdft_conv(
    x: torch.Tensor,
    kernel: torch.Tensor,
    zero_lag: int,
    grid: tuple[int, int] | None = None,
    rows: str = 'auto',
) -> torch.Tensor:
    """Identity 2 on the transposed grid: ``x (B, C, L)``, ``kernel (N, C, K)`` -> ``(B, N, C, L)``, in ``x``'s
    dtype; ``grid``: ``(P, Q)`` with ``(P - 1) Q < L <= P Q`` (default :func:`onnx_grid`; the benchmark's others).

    ``rows``: how the Toeplitz products along the rows run, ``'blocks'`` (a ``2Q x 2Q`` matrix per channel and
    frequency), ``'dft'`` (identity 4: a complex DFT along the rows, the kernel's 2-D spectrum, the inverse) or
    ``'auto'``: ``'dft'`` for batches of at most :data:`ONNX_DFT_MAX_BATCH`, else ``'blocks'``; a symbolic batch
    (an export with a dynamic batch axis) gets both, chosen at run time (``torch.cond``: an ONNX ``If``), on maps
    past ``ONNX_ROW_WIDTH ** 2`` positions and ``'dft'`` on shorter ones; the TorchScript exporter's trace, which
    has no conditional, the blocks."""
    if rows not in ('auto', 'blocks', 'dft'):
        raise ValueError(f"rowdft_conv: rows must be 'auto', 'blocks' or 'dft', got {rows!r}")
    B, C, L = x.shape
    C, L = static_size(C), static_size(L)  # TorchScript's trace: sizes as tensors (the batch stays traced)
    N = kernel.shape[0]
    P, Q = onnx_grid(L) if grid is None else grid
    if rows == 'auto':
        if torch.jit.is_tracing():
            rows = 'blocks'
        elif not isinstance(B, torch.SymInt):
            rows = 'dft' if B <= ONNX_DFT_MAX_BATCH else 'blocks'
        elif L <= ONNX_ROW_WIDTH**2:
            rows = 'dft'  # short maps: an If costs more export time than the blocks save (see ONNX_DFT_MAX_BATCH)
    xp = F.pad(x, (0, P * Q - L)) if P * Q > L else x
    dft = _frequency_major(row_dft(P, x.dtype, x.device), P, 0)  # (2P, P): rows (f, r)
    spec = torch.matmul(dft, xp.view(B, C, P, Q))  # (B, C, (f, r), Q): per (c, f) a row [re | im] of Q points
    # the kernel-derived operands depend on the kernel alone (an exported graph folds them)
    blocks = _blocks(kernel, zero_lag, P, Q, x.dtype) if rows in ('auto', 'blocks') else None
    dft_ops = _dft_operands(kernel, zero_lag, P, Q, x.dtype) if rows in ('auto', 'dft') else None
    if rows == 'blocks':
        out = _rows_by_blocks(spec, blocks)
    elif rows == 'dft':
        out = _rows_by_dft(spec, *dft_ops)
    else:
        out = torch.cond(B <= ONNX_DFT_MAX_BATCH, _by_dft, _by_blocks, (spec, blocks, *dft_ops))
    # out: (B, N, C, f, (s, Q)), unfolded here rather than in the If's branches: ONNX Runtime copies a branch's last
    # Reshape into the If's output (a pass over the map), where in the main graph it reshapes in place
    out = out.reshape(B, N, C, 2 * P, Q)  # (B, N, C, (f, s), Q)
    y = torch.matmul(_frequency_major(row_idft(P, x.dtype, x.device), P, 1), out)  # (B, N, C, P, Q)
    return y.reshape(B, N, C, P * Q)[..., :L]


def _blocks(kernel: torch.Tensor, zero_lag: int, P: int, Q: int, dtype: torch.dtype) -> torch.Tensor:
    """``(N, C P, 2Q, 2Q)``: blocks (batch f C + c, row 2 w' + s, column 2 w + r) of the transposed grid, reordered
    to batch c P + f, rows (r, w), columns (s, w'): the right-hand factor of each channel and frequency."""
    N, C = kernel.shape[:2]
    blocks = toeplitz_blocks(kernel, zero_lag, Q, P, dtype, transposed=True).view(N, P, C, Q, 2, Q, 2)
    return blocks.permute(0, 2, 1, 6, 5, 4, 3).reshape(N, C * P, 2 * Q, 2 * Q)


def _dft_operands(kernel: torch.Tensor, zero_lag: int, P: int, Q: int, dtype: torch.dtype) -> tuple:
    """Identity 4's operands: the spectrum ``(re, im)``, each ``(N, C, P, 2Q - 1)``, and the row DFT matrices."""
    re, im = kernel_spectrum_2d(kernel, zero_lag, P, Q, dtype)
    return re, im, row_cdft(Q, dtype, kernel.device), row_cidft(Q, dtype, kernel.device)


def _rows_by_blocks(spec: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """``spec (B, C, (f, r), Q)`` times each channel's and frequency's block -> ``(B, N, C, f, (s, Q))``. The
    frequency index stays outside the real / imaginary one, so at batch 1 the two transposes move nothing, and at
    larger batches runs of ``2Q`` values."""
    B, C, P2, Q = spec.shape
    N = blocks.shape[0]
    spec = spec.reshape(B, C * P2 // 2, 2 * Q).transpose(0, 1)  # (c f, b, (r, w))
    out = torch.matmul(spec, blocks)  # (N, C P, B, (s, w'))
    # contiguous: torch.cond takes branches whose outputs have the same strides; exported, this one ends in its Transpose
    return out.view(N, C, P2 // 2, B, 2 * Q).permute(3, 0, 1, 2, 4).contiguous()


def _rows_by_dft(
    spec: torch.Tensor, re: torch.Tensor, im: torch.Tensor, cdft: torch.Tensor, cidft: torch.Tensor
) -> torch.Tensor:
    """Identity 4 along the rows: ``spec (B, C, (f, r), Q)`` -> ``(B, N, C, f, (s, Q))``, the complex products with the
    spectrum on separate real and imaginary parts (no split or concatenation of the spectra)."""
    B, C, P2, Q = spec.shape
    n = 2 * Q - 1
    rows = spec.reshape(B, 1, C, P2 // 2, 2 * Q)
    zr, zi = torch.matmul(rows, cdft[:, :n]), torch.matmul(rows, cdft[:, n:])  # (B, 1, C, P, N2)
    return torch.matmul(zr * re - zi * im, cidft[:n]) + torch.matmul(zr * im + zi * re, cidft[n:])  # (B, N, C, P, 2Q)


# torch.cond's two branches take the same operands
def _by_dft(spec, blocks, re, im, cdft, cidft):
    return _rows_by_dft(spec, re, im, cdft, cidft)


def _by_blocks(spec, blocks, re, im, cdft, cidft):
    return _rows_by_blocks(spec, blocks)
