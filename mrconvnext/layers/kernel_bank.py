"""All branch kernels of one MRConv layer in one batched synthesis.

:func:`stack_branch_kernels` returns ``(N, C, P)``: branch ``i``'s kernel (:mod:`.kernel_params`) placed in the
layer's common layout, its lag 0 at the common zero lag and zeros elsewhere. The work of all branches is done
together, whatever ``N``: one batched matmul for the Fourier parts and one indexed accumulation for the taps (sparse,
dilated or dense). Eagerly that is a handful of launches instead of several per branch; under ``torch.compile``
inductor fuses them.

Fourier parts: the modes of all branches, zero-padded to the largest count ``M``, times a cached ``(N, 2M, P)``
basis (branch ``i``'s :func:`~.kernel_params.fourier_basis`, of its own period, in the columns of its lags and rows
``:2 m_i``; zero elsewhere). Taps: the weights of all branches accumulated (``index_put``; the indices are unique)
at the flat indices ``i * C * P + c * P + shift_i + tap index``, with each module's tap index read at every call, so
a loaded or edited ``positions`` buffer is never served stale. Only tensors that follow from the layer's geometry
are cached.
"""

import functools
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .kernel_params import BranchKernel, FourierKernel, FourierSparseKernel, cache_or_body, fourier_basis

__all__ = ['stack_branch_kernels']


def _split(branch: BranchKernel) -> tuple[FourierKernel | None, BranchKernel | None]:
    """The Fourier part and the tap part (a module with ``weight`` and ``tap_index()``) of a branch."""
    if isinstance(branch, FourierSparseKernel):
        return branch.fourier, branch.sparse
    if isinstance(branch, FourierKernel):
        return branch, None
    return None, branch


@functools.lru_cache(maxsize=64)
def _bank_basis(
    parts: tuple[tuple[int, int, int, int], ...], size: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """``(N, 2M, size)`` from ``parts[i] = (period, modes, zero_lag, shift)``: branch ``i``'s Fourier basis in rows
    ``:2 modes`` and columns ``shift : shift + period``, zero elsewhere. Built in float64 on the CPU (on the meta
    device for meta tensors), then moved and cast."""
    host = torch.device('meta') if torch.device(device).type == 'meta' else torch.device('cpu')
    with torch.inference_mode(False):
        M = max(m for _, m, _, _ in parts)
        out = torch.zeros(len(parts), 2 * M, size, dtype=torch.float64, device=host)
        for i, (n, m, zero_lag, shift) in enumerate(parts):
            basis = cache_or_body(fourier_basis)(n, m, zero_lag, torch.float64, out.device)
            out[i, : 2 * m, shift : shift + n] = basis
        return out.to(device=device, dtype=dtype)


@functools.lru_cache(maxsize=64)
def _pad_index(modes: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """``(N * 2M,)`` int64: where ``cat([modes_i.reshape(C, 2 m_i)] + [zero column], 1)`` holds branch ``i``'s
    coefficient ``r`` (``r < 2 m_i``), or the zero column."""
    with torch.inference_mode(False):
        M, start, index = max(modes), 0, []
        for m in modes:
            index += list(range(start, start + 2 * m)) + [sum(modes) * 2] * (2 * (M - m))
            start += 2 * m
        return torch.tensor(index, dtype=torch.int64, device=device)


@functools.lru_cache(maxsize=64)
def _tap_base(taps: tuple[tuple[int, int], ...], dim: int, size: int, device: torch.device) -> torch.Tensor:
    """``(C, sum T_i)`` int64 from ``taps[i] = (T_i, shift_i)``: ``i * C * size + c * size + shift_i``, in the
    column order of ``cat([index_i.expand(C, T_i) for i], dim=1)``."""
    with torch.inference_mode(False):
        rows = torch.arange(dim, dtype=torch.int64, device=device).unsqueeze(1) * size
        cols = [
            torch.full((1, t), i * dim * size + shift, dtype=torch.int64, device=device)
            for i, (t, shift) in enumerate(taps)
        ]
        return rows + torch.cat(cols, dim=1)


def _fourier_bank(parts: list[FourierKernel], shifts: list[int], size: int) -> torch.Tensor:
    """``(N, C, size)`` from the Fourier parts of all branches: one matmul against the cached bank basis."""
    C = parts[0].dim
    counts = tuple(p.num_modes for p in parts)
    if len(set(counts)) == 1:
        modes = torch.stack([p.modes for p in parts]).reshape(len(parts), C, 2 * counts[0])
    else:
        flat = [p.modes.reshape(C, -1) for p in parts]
        flat = torch.cat(flat + [flat[0].new_zeros(C, 1)], dim=1)
        modes = flat.index_select(1, cache_or_body(_pad_index)(counts, flat.device)).unflatten(1, (len(parts), -1))
        modes = modes.transpose(0, 1)
    if modes.dtype != torch.float64:
        modes = modes.float()  # float32 at least, as FourierKernel.forward
    geometry = tuple((p.size, p.num_modes, p.zero_lag, s) for p, s in zip(parts, shifts))
    return modes @ cache_or_body(_bank_basis)(geometry, size, modes.dtype, modes.device)


def _padded(branch: BranchKernel, shift: int, size: int) -> torch.Tensor:
    """``branch()`` zero-padded to ``size`` lags, its lag 0 moved by ``shift``."""
    kernel = branch()
    return F.pad(kernel, (shift, size - shift - kernel.shape[-1]))


def stack_branch_kernels(
    branches: Sequence[BranchKernel], reach: int, causal: bool, batched: bool | None = None
) -> torch.Tensor:
    """``(N, C, P)``: the kernels of ``branches`` (each of reach <= ``reach``, same causality and channels) in the
    common layout of ``reach`` (``P = reach`` causal, else ``2 reach - 1`` with lag 0 at ``reach - 1``).

    ``batched``: synthesize all branches together (the default off the CPU), or run each branch's own forward and
    zero-pad it (the default on the CPU, where a launch costs nothing and the batched matmul's work is ``N P``
    columns against the branches' ``sum P_i``, about 2.6 times more for reaches that double: forward and backward
    1.4-2.3 times slower per ``mrconvnext_t`` stage on 2 CPU threads, ``scripts/bench_mrconv.py --synthesis``). Both
    are equal up to the float rounding of a differently ordered sum. The dtype is the parameters' (Fourier parts at
    least float32, as :class:`FourierKernel`).
    """
    size = reach if causal else 2 * reach - 1
    zero_lag = 0 if causal else reach - 1
    N, C = len(branches), branches[0].dim
    for b in branches:
        if b.causal != causal or b.dim != C or b.reach > reach:
            raise ValueError(
                f'stack_branch_kernels needs branches of {C} channels, causal={causal} and reach <= {reach}; '
                f'got {b.dim} channels, causal={b.causal}, reach={b.reach}'
            )
    shifts = [zero_lag - b.zero_lag for b in branches]
    if batched is None:
        batched = next(branches[0].parameters()).device.type != 'cpu'
    if not batched:
        return torch.stack([_padded(b, s, size) for b, s in zip(branches, shifts)])
    fourier, taps = zip(*(_split(b) for b in branches))
    if len({f is None for f in fourier}) > 1 or len({t is None for t in taps}) > 1:
        kinds = [type(b).__name__ for b in branches]
        raise ValueError(f'stack_branch_kernels needs branches of one kernel type, got {kinds}')
    out = _fourier_bank(list(fourier), shifts, size) if fourier[0] is not None else None
    if taps[0] is not None:
        weight = torch.cat([t.weight for t in taps], dim=1)  # (C, sum T_i)
        geometry = tuple((t.weight.shape[1], s) for t, s in zip(taps, shifts))
        base = cache_or_body(_tap_base)(geometry, C, size, weight.device)
        index = (torch.cat([t.tap_index().expand(C, -1) for t in taps], dim=1) + base).reshape(-1)
        if out is None:  # a fresh tensor, written in place
            out = weight.new_zeros(N * C * size).index_put_((index,), weight.reshape(-1), accumulate=True)
        else:  # out of place: written in place, the matmul's output would be cloned in the backward instead
            out = out.reshape(-1).index_put((index,), weight.reshape(-1).to(out.dtype), accumulate=True)
        out = out.view(N, C, size)
    return out
