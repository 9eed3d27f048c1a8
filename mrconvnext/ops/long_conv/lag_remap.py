"""Move a flattened-image kernel to another image width: two rules, ``split`` and ``conv2d``.

A kernel over a row-major flattened ``H x W`` map (lag convention of :mod:`.long_conv`: output ``t`` reads input
``t - tau``) gives each 1-D lag ``tau`` a 2-D meaning that depends on ``W``. With ``tau = q * W + r``,
``0 <= r < W`` (floor division, also for negative lags), output pixel ``(y, x)`` reads

- ``(y - q, x - r)`` when ``x >= r``: the *row reading* ``(dy, dx) = (q, r)``, for ``W - r`` of the ``W`` columns;
- ``(y - q - 1, x - r + W)`` when ``x < r``: the *wrapped reading* ``(q + 1, r - W)``, for the other ``r`` columns.

**Rule** (:func:`remap_lags`). At width ``W'`` each reading ``(dy, dx)`` is written back at lag ``dy * W' + dx``,
carrying the lag's weight times the fraction of columns it applies to: ``(W - r) / W`` for the row reading,
``r / W`` for the wrapped one; weights landing on the same new lag add up. Readings whose column offset does
not fit the new width (``|dx| >= W'``) reach no pixel of a ``W'``-wide image in 2-D and are dropped, and new lags
``|tau'| >= new_length`` (when given) reach no output and are cropped. Consequences:

- at ``W' = W`` the two readings of a lag land on the lag itself with fractions summing to 1: the rule is the
  identity, and :func:`remap_lags` then returns the kernel unchanged (not a rounded sum of the two parts);
- a whole number of rows (``r = 0``) has only the row reading: ``q * W`` goes to ``q * W'``, weight unchanged;
- causal kernels stay causal, bidirectional (symmetric) ones stay symmetric in layout.

The map is linear in the kernel (two ``index_add``), so it is differentiable, works on stacked ``(N, C, P)``
kernels and traces under ``torch.compile``; its index tables are cached per size in eager mode.

**The exact rule** (:func:`conv2d_lags`). At the nominal width the flattened convolution *is* a zero-padded 2-D
convolution: each lag's two readings are two taps ``K2[dy, dx] = k[zero_lag + dy * W + dx]``, ``|dx| < W``, of a
``(2H - 1) x (2W - 1)`` kernel, and for every output pixel exactly one of them lands inside the image. At another
size that same 2-D convolution is the fully convolutional generalisation, with no fractions: append
``pad = min(W, W') - 1`` zero columns to every row (:func:`conv2d_padding`), flatten at ``W' + pad``, convolve with
the kernel whose taps sit at ``dy * (W' + pad) + dx`` (readings with ``|dx| > pad`` reach no pixel and are left
out), and drop the padding columns of the output. A reading that leaves its row then lands in a padding column,
which is zero, exactly as the 2-D convolution's zero padding. :func:`conv2d_lags` gives that kernel; it is built from
tensor arithmetic on the sizes, so a compiled graph serves every width.
"""

from __future__ import annotations

import functools

import torch

from ..checks import check_int
from ..symbolic import known_true, static_size, sym_max, sym_min

__all__ = ['remap_lags', 'remapped_layout', 'conv2d_lags', 'conv2d_padding']


def _largest_new_lag(hi: int, width: int, new_width: int) -> int:
    """The largest new lag of any reading of lags ``0 .. hi`` (see the module docstring for the readings).

    Row ``q = hi // width`` gives it: its row readings reach ``q * W' + min(r, W' - 1)`` and its wrapped readings
    ``(q + 1) * W' + r - W`` when one fits (``r > 0`` and ``W' > W - r``; for ``r > 0`` and ``W' <= W - r`` that
    value is at most ``q * W'``, so the larger of the two is right either way); every reading of lower rows stays
    below ``q * W'``. Written with ``torch.sym_max`` / ``sym_min`` (``r`` is static), so a width traced by
    ``torch.compile`` adds no guard."""
    q, r = divmod(hi, width)
    if r == 0:
        return q * new_width
    return sym_max(q * new_width + sym_min(r, new_width - 1), (q + 1) * new_width + r - width)


def remapped_layout(
    size: int, zero_lag: int, width: int, new_width: int, new_length: int | None = None
) -> tuple[int, int]:
    """``(size, zero_lag)`` of the kernel :func:`remap_lags` returns for a ``size``-tap kernel."""
    causal = _layout(size, zero_lag)
    if known_true(new_width == width):
        return size, zero_lag
    reach = _largest_new_lag(size - 1 - zero_lag, width, new_width) + 1
    if new_length is not None:
        reach = sym_min(reach, new_length)
    return (reach, 0) if causal else (2 * reach - 1, reach - 1)


def _layout(size: int, zero_lag: int) -> bool:
    """True for a causal layout; ValueError unless the layout is causal or symmetric."""
    if zero_lag == 0:
        return True
    if 2 * zero_lag + 1 != size:
        raise ValueError(
            'remap_lags: expected a causal (zero_lag=0) or symmetric (size = 2 * zero_lag + 1) kernel, '
            f'got size {size} with zero_lag {zero_lag}'
        )
    return False


def _tables(
    size: int, zero_lag: int, width: int, new_width: int, new_size: int, new_zero_lag: int, device, dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Target indices (``new_size`` for a dropped reading: a slot cut off afterwards) and weights of the row
    and wrapped readings of every tap."""
    tau = torch.arange(size, device=device) - zero_lag
    q = torch.div(tau, width, rounding_mode='floor')
    r = tau - q * width
    hi = new_size - 1 - new_zero_lag
    lag_row = q * new_width + r
    lag_wrap = (q + 1) * new_width + (r - width)
    keep_row = (r < new_width) & (lag_row.abs() <= hi)
    keep_wrap = (r > 0) & (width - r < new_width) & (lag_wrap.abs() <= hi)
    idx_row = torch.where(keep_row, lag_row + new_zero_lag, new_size)
    idx_wrap = torch.where(keep_wrap, lag_wrap + new_zero_lag, new_size)
    frac_wrap = r.to(torch.float64) / width
    w_row = torch.where(keep_row, 1.0 - frac_wrap, 0.0).to(dtype)
    w_wrap = torch.where(keep_wrap, frac_wrap, 0.0).to(dtype)
    return idx_row, w_row, idx_wrap, w_wrap


@functools.lru_cache(maxsize=64)
def _cached_tables(*args) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    with torch.inference_mode(False):  # tables first built in inference mode can still be saved for a backward
        return _tables(*args)


def remap_lags(
    kernel: torch.Tensor, zero_lag: int, width: int, new_width: int, new_length: int | None = None
) -> tuple[torch.Tensor, int]:
    """Rewrite a flattened-image kernel for images ``new_width`` wide (the rule is in the module docstring).

    Args:
        kernel: ``(..., P)`` taps, causal (``zero_lag = 0``) or symmetric (``P = 2 * zero_lag + 1``).
        zero_lag: index of lag 0 in ``kernel``.
        width: the image width ``W`` the kernel was made for.
        new_width: the width ``W'`` to apply it at.
        new_length: optional ``H' * W'``; lags that cannot reach a sequence this long are cropped.

    Returns:
        ``(kernel', zero_lag')`` in the same layout kind, ``kernel'`` of shape ``(..., P')`` in ``kernel.dtype``
        (:func:`remapped_layout` gives ``P'`` and ``zero_lag'``); ``kernel`` itself when ``new_width == width``.
    """
    if not isinstance(kernel, torch.Tensor):
        raise TypeError(f'remap_lags: kernel must be a torch.Tensor, got {type(kernel).__name__}')
    if kernel.dim() < 1 or not kernel.is_floating_point():
        raise TypeError(
            f'remap_lags: kernel must be a floating-point (..., P) tensor, got {kernel.dtype} {tuple(kernel.shape)}'
        )
    zero_lag = check_int('remap_lags', 'zero_lag', zero_lag, minimum=0)
    width = check_int('remap_lags', 'width', width)
    new_width = check_int('remap_lags', 'new_width', new_width)
    if new_length is not None:
        new_length = check_int('remap_lags', 'new_length', new_length)
    size = static_size(kernel.shape[-1])
    new_size, new_zero_lag = remapped_layout(size, zero_lag, width, new_width, new_length)
    if known_true(new_width == width):  # a graph traced for dynamic widths applies the rule (to rounding)
        return kernel, zero_lag
    # traced (and constant-folded) under torch.compile; cached per size in eager mode
    tables = _tables if torch.compiler.is_compiling() else _cached_tables
    idx_row, w_row, idx_wrap, w_wrap = tables(
        size, zero_lag, width, new_width, new_size, new_zero_lag, kernel.device, kernel.dtype
    )
    out = kernel.new_zeros(*kernel.shape[:-1], new_size + 1)
    out = out.index_add(-1, idx_row, kernel * w_row).index_add(-1, idx_wrap, kernel * w_wrap)
    return out[..., :new_size], new_zero_lag


def conv2d_padding(width: int, new_width: int) -> int:
    """Zero columns to append to each row of a ``new_width``-wide map for :func:`conv2d_lags`: ``min(W, W') - 1``
    (a symbolic size under ``torch.compile``, with no guard on which width is larger)."""
    return sym_min(width, new_width) - 1


def conv2d_lags(
    kernel: torch.Tensor, zero_lag: int, size: tuple[int, int], padded_width: int, pad: int
) -> tuple[torch.Tensor, int]:
    """The flattened kernel of the exact 2-D rule (module docstring) for a map flattened at ``padded_width``.

    Args:
        kernel: ``(..., P)`` taps made for ``size = (H, W)`` maps, causal (``zero_lag = 0``) or symmetric.
        zero_lag: index of lag 0 in ``kernel``.
        size: the nominal ``(H, W)``; the 2-D kernel is ``(2H - 1) x (2W - 1)``: readings with ``|dy| >= H`` (which
            reach no pixel of an ``H``-row map) are not part of it.
        padded_width: ``W' + pad``, the row length of the padded map it is applied to.
        pad: the zero columns at the end of each row (:func:`conv2d_padding`); readings with ``|dx| > pad`` are
            left out.

    Returns:
        ``(kernel', zero_lag')`` in the same layout kind, in ``kernel.dtype``: each tap ``k[zero_lag + q * W + r]``
        (``0 <= r < W``) sits at lag ``q * padded_width + r`` (row reading, kept when ``r <= pad`` and ``|q| < H``)
        and at ``(q + 1) * padded_width + r - W`` (wrapped reading, kept when ``0 < W - r <= pad`` and
        ``|q + 1| < H``), unchanged in value. Linear, differentiable.
    """
    if not isinstance(kernel, torch.Tensor) or kernel.dim() < 1 or not kernel.is_floating_point():
        raise TypeError(f'conv2d_lags: kernel must be a floating-point (..., P) tensor, got {kernel!r:.80}')
    H, W = size
    taps = kernel.shape[-1]
    causal = _layout(taps, zero_lag)
    reach = min((taps - 1 - zero_lag) // W + 1, H) * padded_width  # every kept reading has |dy| < this / padded_width
    new_size, new_zero_lag = (reach, 0) if causal else (2 * reach - 1, reach - 1)
    tau = torch.arange(taps, device=kernel.device) - zero_lag
    q = torch.div(tau, W, rounding_mode='floor')
    r = tau - q * W
    keep_row = (r <= pad) & (q.abs() < H)
    keep_wrap = (r > 0) & (W - r <= pad) & ((q + 1).abs() < H)
    idx_row = torch.where(keep_row, q * padded_width + r + new_zero_lag, new_size)
    idx_wrap = torch.where(keep_wrap, (q + 1) * padded_width + r - W + new_zero_lag, new_size)
    out = kernel.new_zeros(*kernel.shape[:-1], new_size + 1)  # the last slot takes the readings left out
    out = out.index_add(-1, idx_row, kernel).index_add(-1, idx_wrap, kernel)
    return out[..., :new_size], new_zero_lag
