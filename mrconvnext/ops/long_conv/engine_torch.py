"""The ``'torch'`` engine of the long convolutions: torch.fft in cache-sized chunks (``method='fft'``, every device),
grouped ``F.conv1d`` (``method='direct'``), and matrix products (``method='toeplitz'`` / ``'rowdft'``, identities 3
and 2 of :mod:`.grid`: cuBLAS GEMMs on tensor cores under autocast, no torch.fft)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from ..checks import autocast_dtype, autocast_off
from ..symbolic import static_size
from .grid import (
    row_dft,
    row_grid,
    row_idft,
    toeplitz_blocks,
    toeplitz_blocks_vjp,
    toeplitz_matrix,
    toeplitz_matrix_vjp,
)

__all__ = [
    'CHUNK_ELEMS',
    'GPU_CHUNK_ELEMS',
    'chunks',
    'padded_rfft',
    'padded_buffer',
    'fft_forward',
    'fft_backward',
    'direct_conv1d',
    'direct_conv1d_vjp',
    'toeplitz_conv',
    'toeplitz_conv_vjp',
    'rowdft_conv',
    'rowdft_conv_vjp',
    'matmul_dtypes',
]

# On the CPU (oneDNN 3.x) a depthwise conv1d with large built-in zero padding takes a path whose time grows with K,
# slower than F.pad + an unpadded conv beyond about 15 taps; for short kernels the two tie or the built-in padding
# wins (it skips the padded copy). The largest padding left to conv1d: `python scripts/bench_mrconv.py --pad
# --threads 1 --doc` (docs/benchmarks.md).
CPU_NATIVE_PAD_MAX = 6


# Elements (sequences x FFT size) per chunk, so that a chunk's padded input, spectra and output stay in cache;
# whole-tensor transforms and products are memory-bound, small chunks pay per-call overhead. Chosen on the ConvNeXt-T
# stages, inference and training: `python scripts/bench_mrconv.py --chunks --doc` (docs/benchmarks.md).
CHUNK_ELEMS = 1 << 20
# Off the CPU: the most elements (batch items x branches x channels x FFT size) a chunk's spectra hold at once. A
# bound on memory (about 0.5 GB per complex64 tensor of this many real values), far above the fold's chunks (the
# fold_bn module's CHUNK_ELEMS), so the model's convolutions run as one chunk.
GPU_CHUNK_ELEMS = 1 << 27

# The kernel spectra this engine takes are divided by the FFT size n (layout.kernel_spectrum's norm='forward') and
# its inverse transforms of products with them leave the 1 / n out (irfft's norm='forward'): ATen's CUDA inverse
# transform applies a norm as a pass of its own over the output (an in-place multiply after cuFFT; the CPU's
# pocketfft scales as it writes), so the scale goes on the N C (n / 2 + 1) values of the kernels' spectra instead.
SPECTRUM_NORM = 'forward'


def chunks(x: torch.Tensor, n: int, branches: int = 1) -> Iterator[tuple[slice, slice]]:
    """``(batch, channel)`` blocks of ``x (B, C, L)`` of about ``CHUNK_ELEMS / (branches n)`` sequences (each block's
    spectra of all ``branches`` at once): whole channel ranges of several batch items for short sequences, balanced
    channel ranges of one item for long ones. Off the CPU, blocks of whole batch items of at most
    ``GPU_CHUNK_ELEMS`` (a bound on memory, not a cache size: GPU transforms want large batches)."""
    B, C = x.shape[:2]
    if x.device.type != 'cpu':
        nb = max(1, GPU_CHUNK_ELEMS // (branches * C * n))
        for b0 in range(0, B, nb):
            yield slice(b0, min(B, b0 + nb)), slice(0, C)
        return
    rows = max(1, CHUNK_ELEMS // (branches * n))
    if rows >= C:
        nb = rows // C
        for b0 in range(0, B, nb):
            yield slice(b0, min(B, b0 + nb)), slice(0, C)
        return
    step = -(-C // -(-C // rows))
    for b in range(B):
        for c0 in range(0, C, step):
            yield slice(b, b + 1), slice(c0, min(C, c0 + step))


def padded_rfft(x: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """``rfft(x, n)`` of ``x (..., L)`` taken in ``dtype``, zero-padded to ``n`` by writing the zeros of the tail alone
    (torch's padding fills the whole padded tensor first) into :func:`padded_buffer`. An ``x`` of another dtype (a
    half-precision map under autocast) is cast as it is copied in, one pass where a cast and a padding copy would be
    two."""
    L = x.shape[-1]
    if n == L:
        return torch.fft.rfft(x.to(dtype))
    padded = padded_buffer(x, n, dtype)
    padded[..., L:].zero_()
    padded[..., :L].copy_(x)
    return torch.fft.rfft(padded)


def padded_buffer(x: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """An empty ``(..., n)`` tensor of ``dtype`` to hold ``x (..., L)`` padded to ``n``: positions innermost where they
    are in ``x``; else outermost, the other dimensions after them in their order (a channels-last map's lie in
    memory in that order). Then the copy into it keeps ``x``'s innermost dimension (runs of channels, where a
    positions-innermost buffer makes it a transpose, which GPUs run at a fraction of a copy's speed:
    docs/gpu/cost-model-calibration.md), and the transform reads its sequences at one stride with the other
    dimensions collapsed into one of stride 1 (torch plans that as cuFFT's advanced layout, no copy; its output has
    the frequencies innermost)."""
    if x.stride(-1) == 1 or x.shape[-1] == 1:
        return x.new_empty((*x.shape[:-1], n), dtype=dtype)
    order = (x.dim() - 1, *range(x.dim() - 1))  # positions outermost: one call, where new_empty + movedim are two
    return torch.empty_permuted((*x.shape[:-1], n), order, dtype=dtype, device=x.device)


def fft_forward(x: torch.Tensor, k_f: torch.Tensor, n: int, out: torch.Tensor, bias: torch.Tensor | None) -> None:
    """``out (B, N, C, L) = crop_L(irfft(rfft(x, n) * k_f))`` (+ ``bias``) chunk by chunk, for ``k_f (N, C, F)`` the
    kernels' spectra divided by ``n`` (:data:`SPECTRUM_NORM`), the ``N`` kernels of a chunk in one product and one
    unnormalized inverse transform (a launch each, not ``N``). Computed in the spectra's real dtype; ``x`` and
    ``out`` may be of another (half precision): cast as they are padded and scattered (:func:`padded_rfft`).

    ``out`` may be strided (e.g. a channels-last view): inputs are gathered and outputs scattered per chunk,
    never copied whole."""
    L = x.shape[-1]
    N = k_f.shape[0]
    dtype = k_f.real.dtype
    for bs, cs in chunks(x, n, N):
        x_f = padded_rfft(x[bs, cs], n, dtype)
        if N == 1:  # one kernel: the product in place, without a kernel axis
            y_f, ks = x_f.mul_(k_f[0, cs]), 0
        else:
            y_f, ks = x_f.unsqueeze(1) * k_f[:, cs], slice(None)
        y = torch.fft.irfft(y_f, n=n, norm=SPECTRUM_NORM)[..., :L]
        if bias is None:
            out[bs, ks, cs] = y
        else:
            torch.add(y, bias[cs, None], out=out[bs, ks, cs])


def fft_backward(
    grad_y: torch.Tensor, x: torch.Tensor, k_f: torch.Tensor, n: int, need_x: bool, need_k: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(grad_x, grad of the circular kernels (N, C, n))`` of :func:`fft_forward` (None for one not needed), chunk by
    chunk, the ``N`` branches of a chunk at once (the identities are in :mod:`.operators`). ``k_f``, ``grad_y`` and
    ``x`` as :func:`fft_forward` takes ``k_f`` and ``x``; ``grad_x`` laid out like ``x`` in ``grad_y``'s dtype (the
    forward input's: ``x`` may be the backward's bfloat16 copy of it, :mod:`.operators`), the kernels' gradient in
    the spectra's."""
    L = x.shape[-1]
    N = k_f.shape[0]
    dtype = k_f.real.dtype
    grad_x = torch.empty_like(x, dtype=grad_y.dtype) if need_x else None
    grad_k_f = torch.zeros_like(k_f) if need_k else None
    k_conj = k_f.conj().resolve_conj()
    for bs, cs in chunks(x, n, N):
        g_f = padded_rfft(grad_y[bs, :, cs], n, dtype)  # (nb, N, cc, F)
        if need_k:
            x_conj = padded_rfft(x[bs, cs], n, dtype).conj_physical_()
            if N == 1:  # one kernel: the product in place
                grad_k_f[0, cs] += x_conj.mul_(g_f[:, 0]).sum(0)
            else:
                grad_k_f[:, cs] += (g_f * x_conj.unsqueeze(1)).sum(0)
            del x_conj
        if need_x:
            g_f.mul_(k_conj[:, cs])  # in place: the kernel gradient has read it
            grad_x[bs, cs] = torch.fft.irfft(g_f[:, 0] if N == 1 else g_f.sum(1), n=n, norm=SPECTRUM_NORM)[..., :L]
    return grad_x, torch.fft.irfft(grad_k_f, n=n) if need_k else None


def direct_conv1d(
    x: torch.Tensor, kernel: torch.Tensor, zero_lag: int, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """The convolution of the module docstring with grouped ``F.conv1d`` (no dtype handling, no crop):
    ``x (B, C, L)``, ``kernel (C, K)`` or ``(N, C, K)``, ``bias (C,)`` or None -> ``(B, C, L)`` or
    ``(B, N, C, L)``. One kernel's bias is the conv's own (no op of its own: the deployed model's small batches on a
    GPU are bound by the host)."""
    B, C, L = x.shape
    K = kernel.shape[-1]
    multi = kernel.dim() == 3
    N = kernel.shape[0] if multi else 1
    # conv1d is a cross-correlation: flip the taps; output channel c*N + i is kernel i of channel c.
    w = kernel.flip(-1)
    # unsqueeze / flatten, not a reshape to sizes: a traced export (TorchScript's ONNX exporter) keeps the weight's
    # static shape, which its Conv needs
    w = (w.transpose(0, 1).flatten(0, 1) if multi else w).unsqueeze(1)
    pad_left, pad_right = K - 1 - zero_lag, zero_lag
    b = None if multi else bias
    if pad_left == pad_right and (x.device.type != 'cpu' or pad_left <= CPU_NATIVE_PAD_MAX):
        y = F.conv1d(x, w, b, padding=pad_left, groups=C)
    else:
        y = F.conv1d(F.pad(x, (pad_left, pad_right)), w, b, groups=C)
    if multi:
        y = y.view(B, C, N, L).transpose(1, 2)
        if bias is not None:
            y = y + bias.unsqueeze(-1)
    return y


def direct_conv1d_vjp(
    grad_y: torch.Tensor,
    x: torch.Tensor,
    kernel: torch.Tensor,
    zero_lag: int,
    need_x: bool = True,
    need_kernel: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(grad_x, grad_kernel)`` of :func:`direct_conv1d` for ``grad_y (B, N, C, L)`` and ``kernel (N, C, K)``,
    by the convolution's own backward (``torch.nn.grad``), no autograd; None for a gradient not needed."""
    B, C, L = x.shape
    N, _, K = kernel.shape
    w = kernel.flip(-1).transpose(0, 1).reshape(C * N, 1, K)  # output channel c * N + i, as in direct_conv1d
    xp = F.pad(x, (K - 1 - zero_lag, zero_lag))
    g = grad_y.transpose(1, 2).reshape(B, C * N, L)
    grad_x = grad_k = None
    if need_kernel:
        grad_w = torch.nn.grad.conv1d_weight(xp, w.shape, g, groups=C)
        grad_k = grad_w.view(C, N, K).transpose(0, 1).flip(-1)
    if need_x:
        grad_x = torch.nn.grad.conv1d_input(xp.shape, w, g, groups=C)[..., K - 1 - zero_lag : K - 1 - zero_lag + L]
    return grad_x, grad_k


def matmul_dtypes(x: torch.Tensor) -> tuple[torch.dtype, torch.dtype]:
    """``(build, product)``: kernel-side matrices are built in ``x``'s dtype, or in float32 under autocast, and
    written in the dtype the products run in (autocast's, else ``x``'s), so autocast casts none of them again."""
    amp = autocast_dtype(x.device.type)
    return (x.dtype, x.dtype) if amp is None else (torch.float32, amp)


def _channel_major(kernel: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``kernel (N, C, K)`` as a contiguous ``(C, N, K)`` in ``dtype``: the Toeplitz matrices built from it are then
    laid out ``(C, N, L, L)`` whether or not the taps are padded (their windows are views of the taps)."""
    return (kernel if kernel.dtype == dtype else kernel.to(dtype)).transpose(0, 1).contiguous()


def toeplitz_conv(x: torch.Tensor, kernel: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """Identity 3: ``x (B, C, L)``, ``kernel (N, C, K)`` -> ``(B, N, C, L)`` as one product per channel of its ``N``
    ``L x L`` Toeplitz matrices stacked (one gather, in the product dtype) with its ``(L, B)`` columns. The output
    lies channel-major, ``(C, N, L, B)`` in memory: a channel's columns are read once for its ``N`` kernels (a
    product per kernel would copy them ``N`` times, a broadcast over the kernels), and :func:`toeplitz_conv_vjp`
    reads an output gradient laid out so as it lies."""
    N, C, L = static_size(kernel.shape[0]), static_size(kernel.shape[1]), static_size(x.shape[-1])
    _, product = matmul_dtypes(x)
    with autocast_off(x.device.type):
        T = toeplitz_matrix(_channel_major(kernel, product), zero_lag, L)  # (C, N, L, L)
    y = torch.matmul(T.reshape(C, N * L, L), x.permute(1, 2, 0))  # (C, N L, B)
    return y.view(C, N, L, -1).permute(3, 1, 0, 2)  # (B, N, C, L)


def toeplitz_conv_vjp(
    grad_y: torch.Tensor,
    x: torch.Tensor,
    kernel: torch.Tensor,
    zero_lag: int,
    dtypes: tuple[torch.dtype, torch.dtype] | None = None,
    need_x: bool = True,
    need_kernel: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(grad_x, grad_kernel)`` of :func:`toeplitz_conv` for ``grad_y (B, N, C, L)``: ``T^T`` times the gradient,
    and the gradient's outer products with ``x`` summed into the taps; None for a gradient not needed. Both are one
    product per channel with its ``N`` kernels stacked along the reduced dimension (the sum over the kernels
    inside the product, ``x`` read once), on ``grad_y`` as :func:`toeplitz_conv` lays its output out (another
    layout is copied into that one first). ``dtypes``: the forward's ``(build, product)`` dtypes (default: as the
    forward would choose them now; a backward runs outside autocast)."""
    build, product = dtypes or matmul_dtypes(x)
    B, N, C, L = grad_y.shape
    rows = grad_y.to(product).permute(2, 1, 3, 0).reshape(C, N * L, B)  # (C, N L, B)
    grad_x = grad_k = None
    if need_x:
        with autocast_off(x.device.type):
            T = toeplitz_matrix(_channel_major(kernel, product), zero_lag, L)  # (C, N, L, L)
        grad_x = torch.matmul(T.reshape(C, N * L, L).transpose(1, 2), rows).permute(2, 0, 1).to(x.dtype)  # (B, C, L)
    if need_kernel:
        grad_T = torch.bmm(rows, x.to(product).transpose(0, 1)).view(C, N, L, L)  # the sum over b of g x^T
        grad_k = toeplitz_matrix_vjp(grad_T.to(build), kernel.shape[-1], zero_lag).transpose(0, 1).to(kernel.dtype)
    return grad_x, grad_k


def rowdft_conv(x: torch.Tensor, kernel: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """Identity 2: ``x (B, C, L)``, ``kernel (N, C, K)`` -> ``(B, N, C, L)``. The sequence is folded into ``P`` rows
    of ``Q`` (:func:`.grid.row_grid`; a flattened map folds back into its own rows, anything else is zero-padded),
    row-transformed by one real ``(2Q, Q)`` matrix shared by every channel, multiplied per channel and frequency by
    a ``2P x 2P`` real Toeplitz block (:func:`.grid.toeplitz_blocks`) with the batch as the long GEMM dimension, and
    transformed back at the ``Q`` real columns only. The row transforms keep the channels innermost, so a
    channels-last input is read where it lies and the output of one kernel is channels-last; the two transposes
    around the block product are copies (a fused kernel would keep them on chip)."""
    B, C, L = x.shape
    C, L = static_size(C), static_size(L)  # TorchScript's trace: sizes as tensors (the batch stays traced)
    N = kernel.shape[0]
    P, Q = row_grid(L)
    build, product = matmul_dtypes(x)
    with autocast_off(x.device.type):
        blocks = toeplitz_blocks(kernel.to(build), zero_lag, P, Q, product)  # (N, Q * C, 2P, 2P)
    xp = F.pad(x, (0, P * Q - L)) if P * Q > L else x
    rows = xp.unflatten(-1, (P, Q)).permute(0, 2, 3, 1).reshape(B * P, Q, C)  # a view for a channels-last map
    # the DFT matrices in the product dtype, broadcast (stride 0) over the batch of rows: never materialized (a
    # matmul, not an expand to B * P: a traced export keeps the batch dynamic)
    spec = torch.matmul(row_dft(Q, product, x.device), rows.to(product))  # (B * P, 2Q, C): [Re | Im] of each row,
    # i.e. (b, g, r, f, c)
    spec = spec.view(B, 2 * P, Q * C).permute(2, 1, 0)  # (Q * C, 2P, B): batch f * C + c, row 2 g + r
    out = torch.matmul(blocks, spec.contiguous())  # (N, Q * C, 2P, B): row 2 h + s
    out = out.view(N, Q, C, P, 2, B).permute(5, 0, 3, 4, 1, 2).reshape(B * N * P, 2 * Q, C)
    y = torch.matmul(row_idft(Q, product, x.device), out)  # (B * N * P, Q, C)
    return y.view(B, N, P, Q, C).permute(0, 1, 4, 2, 3).flatten(3)[..., :L]


def rowdft_conv_vjp(
    grad_y: torch.Tensor,
    x: torch.Tensor,
    kernel: torch.Tensor,
    zero_lag: int,
    dtypes: tuple[torch.dtype, torch.dtype] | None = None,
    need_x: bool = True,
    need_kernel: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(grad_x, grad_kernel)`` of :func:`rowdft_conv` for ``grad_y (B, N, C, L)``: its three products taken back
    in turn (the row spectra of ``x`` recomputed), then the blocks' gradient into the taps
    (:func:`.grid.toeplitz_blocks_vjp`); None for a gradient not needed. ``dtypes`` as
    :func:`toeplitz_conv_vjp`'s."""
    B, C, L = x.shape
    N, _, K = kernel.shape
    P, Q = row_grid(L)
    build, product = dtypes or matmul_dtypes(x)
    dft = row_dft(Q, product, x.device)  # (2Q, Q)
    gp = F.pad(grad_y, (0, P * Q - L)) if P * Q > L else grad_y
    g_rows = gp.to(product).unflatten(-1, (P, Q)).permute(0, 1, 3, 4, 2).reshape(B * N * P, Q, C)
    inv_t = row_idft(Q, product, x.device).T  # (2Q, Q)
    g_out = torch.bmm(inv_t.expand(B * N * P, 2 * Q, Q), g_rows)  # (B * N * P, 2Q, C)
    g_out = g_out.view(B, N, P, 2, Q, C).permute(1, 4, 5, 2, 3, 0).reshape(N, Q * C, 2 * P, B)
    grad_x = grad_k = None
    if need_kernel:
        xp = F.pad(x, (0, P * Q - L)) if P * Q > L else x
        rows = xp.unflatten(-1, (P, Q)).permute(0, 2, 3, 1).reshape(B * P, Q, C)
        spec = torch.bmm(dft.expand(B * P, 2 * Q, Q), rows.to(product))
        spec = spec.view(B, 2 * P, Q * C).permute(2, 1, 0).contiguous()  # (Q * C, 2P, B)
        g_blocks = torch.matmul(g_out, spec.transpose(1, 2))  # (N, Q * C, 2P, 2P), summed over the batch
        with autocast_off(x.device.type):
            grad_k = toeplitz_blocks_vjp(g_blocks.to(build), (N, C, K), zero_lag, P, Q).to(kernel.dtype)
    if need_x:
        with autocast_off(x.device.type):
            blocks = toeplitz_blocks(kernel.to(build), zero_lag, P, Q, product)  # (N, Q * C, 2P, 2P)
        g_spec = torch.matmul(blocks.transpose(-1, -2), g_out).sum(0)  # (Q * C, 2P, B)
        g_spec = g_spec.permute(2, 1, 0).reshape(B * P, 2 * Q, C)
        g_rows_x = torch.bmm(dft.T.expand(B * P, Q, 2 * Q), g_spec)  # (B * P, Q, C)
        grad_x = g_rows_x.view(B, P, Q, C).permute(0, 3, 1, 2).flatten(2)[..., :L].to(x.dtype)
    return grad_x, grad_k
