"""Kernel parameterizations of one MRConv branch (paper Eq. 14-16).

Every parameterization is a module whose ``forward()`` returns the branch kernel ``(C, P)`` in
the lag convention of :mod:`mrconvnext.ops.long_conv`: a branch of *reach* ``l`` covers lags
``0 .. l-1`` (causal, ``P = l``, ``zero_lag = 0``) or ``-(l-1) .. l-1`` (bidirectional,
``P = 2l - 1``, ``zero_lag = l - 1``, centre tap counted once).

The trainable tensors are named ``weight`` (time-domain taps) and ``modes`` (Fourier
coefficients); :data:`KERNEL_PARAM_NAMES` lists them so training can give them their own learning
rate and no weight decay (paper App. D.1.1).
"""

import functools
import math

import torch
import torch.nn as nn

__all__ = [
    'BranchKernel',
    'DenseKernel',
    'DilatedKernel',
    'FourierKernel',
    'SparseKernel',
    'FourierSparseKernel',
    'KERNEL_PARAM_NAMES',
    'cache_or_body',
    'fourier_basis',
]

KERNEL_PARAM_NAMES = ('weight', 'modes')


class BranchKernel(nn.Module):
    """Base class: a ``(C, P)`` kernel of a given reach, causal or bidirectional.

    Only the (Python) forward of :class:`~mrconvnext.layers.MRConv1d` calls these modules; TorchScript leaves them
    uncompiled (forwards ignored, properties unused).
    """

    __jit_unused_properties__ = ['size', 'zero_lag']

    def __init__(self, dim: int, reach: int, causal: bool) -> None:
        super().__init__()
        if reach < 1:
            raise ValueError(f'kernel reach must be >= 1, got {reach}')
        self.dim = dim
        self.reach = reach
        self.causal = causal

    @property
    def size(self) -> int:
        """Number of lags ``P`` covered by the kernel."""
        return self.reach if self.causal else 2 * self.reach - 1

    @property
    def zero_lag(self) -> int:
        return 0 if self.causal else self.reach - 1

    def extra_repr(self) -> str:
        return f'dim={self.dim}, reach={self.reach}, causal={self.causal}'


def _place(weight: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """Scatter taps ``weight (C, T)`` to the (unique per row) positions ``index`` of a ``(C, size)`` kernel."""
    out = weight.new_zeros(weight.shape[0], size)
    return out.scatter(1, index.expand_as(weight), weight)


class DenseKernel(BranchKernel):
    """An explicit tap at every lag (ablation baseline; its parameter count grows with the reach)."""

    def __init__(self, dim: int, reach: int, causal: bool = False) -> None:
        super().__init__(dim, reach, causal)
        self.weight = nn.Parameter(torch.randn(dim, self.size) / math.sqrt(self.size))
        self.register_buffer('index', torch.arange(self.size).unsqueeze(0), persistent=False)

    @torch.jit.ignore
    def forward(self) -> torch.Tensor:
        return self.weight

    def tap_index(self) -> torch.Tensor:
        """``(1, P)``: the lag index of each column of ``weight``."""
        return self.index


class DilatedKernel(BranchKernel):
    """``num_taps`` taps spaced by ``dilation`` (Eq. 14).

    Causal: lags ``dilation * j`` for ``j = 0 .. num_taps-1``. Bidirectional: ``num_taps`` taps on
    each side sharing the centre, lags ``dilation * j`` for ``|j| < num_taps`` (``2 num_taps - 1``
    weights). The reach is ``(num_taps - 1) * dilation + 1``.
    """

    def __init__(self, dim: int, num_taps: int, dilation: int, causal: bool = False) -> None:
        if num_taps < 1 or dilation < 1:
            raise ValueError(f'dilated kernels need num_taps >= 1 and dilation >= 1, got {num_taps}, {dilation}')
        super().__init__(dim, (num_taps - 1) * dilation + 1, causal)
        self.dilation = dilation
        j = torch.arange(0 if causal else -(num_taps - 1), num_taps)
        self.register_buffer('index', (j * dilation + self.zero_lag).unsqueeze(0), persistent=False)
        self.weight = nn.Parameter(torch.randn(dim, j.numel()) / math.sqrt(j.numel()))

    @torch.jit.ignore
    def forward(self) -> torch.Tensor:
        return _place(self.weight, self.index, self.size)

    def tap_index(self) -> torch.Tensor:
        """``(1, T)``: the lag index (into the ``P`` lags) of each column of ``weight``, shared by all channels."""
        return self.index

    def extra_repr(self) -> str:
        return super().extra_repr() + f', taps={self.weight.shape[1]}, dilation={self.dilation}'


def cache_or_body(fn):
    """``fn`` (a ``functools.lru_cache`` of tensors), or its uncached body where a cached tensor would be wrong:
    under ``torch.compile`` (the body is traced, then constant-folded) and under a fake tensor mode (whose tensors
    must never enter the cache, where a later real call would find them)."""
    if torch.compiler.is_compiling() or torch._guards.detect_fake_mode() is not None:
        return fn.__wrapped__
    return fn


@functools.lru_cache(maxsize=128)
def fourier_basis(size: int, num_modes: int, zero_lag: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``(2 * num_modes, size)`` real matrix ``F`` such that ``modes.reshape(C, -1) @ F`` is the inverse real DFT
    (``norm='ortho'``) of ``modes (C, num_modes, 2)`` zero-padded to ``size``, read at lags ``t - zero_lag``.

    Equal to ``roll(irfft(view_as_complex(modes), n=size, norm='ortho'), zero_lag)``: row ``2j`` is
    ``w_j cos(2 pi j tau / size) / sqrt(size)``, row ``2j + 1`` is ``-w_j sin(...) / sqrt(size)``, ``w_j = 1`` for
    the DC and (even ``size``) Nyquist modes, whose imaginary rows are exactly zero as in ``irfft``, else 2.
    Built in float64 with the phase reduced modulo ``size`` in integers, then cast; cached per arguments, and
    made outside inference mode so a basis first built there can still be saved for a later backward.
    """
    # built on the CPU (float64 everywhere; not the default device's), or on the meta device for meta tensors
    host = torch.device('meta') if torch.device(device).type == 'meta' else torch.device('cpu')
    with torch.inference_mode(False):
        j = torch.arange(num_modes, dtype=torch.int64, device=host).unsqueeze(1)
        tau = torch.arange(size, dtype=torch.int64, device=host) - zero_lag
        phase = 2 * math.pi * torch.remainder(j * tau, size).double() / size
        single = [0] + ([size // 2] if size % 2 == 0 and num_modes > size // 2 else [])  # DC and Nyquist
        w = torch.full((num_modes, 1), 2.0, dtype=torch.float64, device=host)
        w[single] = 1.0
        basis = torch.stack([w * torch.cos(phase), -w * torch.sin(phase)], dim=1)  # (m, 2, size)
        basis[single, 1] = 0.0
        return (basis.reshape(2 * num_modes, size) / math.sqrt(size)).to(device=device, dtype=dtype)


class FourierKernel(BranchKernel):
    """``num_modes`` complex low-frequency modes, zero-padded and inverse-FFT'd to ``P`` lags (Eq. 15).

    ``modes`` is stored as real ``(C, m, 2)`` (real, imaginary) so every optimizer and checkpoint
    format handles it. The inverse transform uses ``norm='ortho'`` so the kernel's energy does not
    depend on its length; the imaginary part of the DC mode (and of the Nyquist mode for even
    ``P``) does not affect the real kernel. The periodic kernel is read circularly, so lag 0 is
    index 0 of the inverse FFT and negative lags wrap to its end: a smooth kernel peaked at lag 0
    is within reach of the low modes for both causal and bidirectional branches. A short branch
    has only ``P // 2 + 1`` distinct modes; ``num_modes`` is capped there.

    The transform is computed as a ``(C, 2m) @ (2m, P)`` matmul with a cached basis
    (:func:`fourier_basis`), the same sum as ``irfft`` restricted to the ``m`` nonzero modes: for the
    few modes and long, often prime, lengths of MRConv it was faster than ``irfft`` plus ``roll``, forward and
    backward (``python scripts/bench_mrconv.py --fourier --doc``, docs/benchmarks.md).
    """

    def __init__(self, dim: int, reach: int, num_modes: int, causal: bool = False) -> None:
        super().__init__(dim, reach, causal)
        if num_modes < 1:
            raise ValueError(f'num_modes must be >= 1, got {num_modes}')
        self.num_modes = min(num_modes, self.size // 2 + 1)
        self.modes = nn.Parameter(torch.randn(dim, self.num_modes, 2) / math.sqrt(2 * self.num_modes))

    @torch.jit.ignore
    def forward(self) -> torch.Tensor:
        modes = self.modes if self.modes.dtype == torch.float64 else self.modes.float()  # float32 at least
        basis = cache_or_body(fourier_basis)(self.size, self.num_modes, self.zero_lag, modes.dtype, modes.device)
        return modes.reshape(self.dim, 2 * self.num_modes) @ basis

    def extra_repr(self) -> str:
        return super().extra_repr() + f', modes={self.num_modes}'


class SparseKernel(BranchKernel):
    """``num_taps`` taps at lags sampled once, per channel, without replacement (Eq. 16).

    Positions are drawn from ``generator`` at construction, uniformly over the branch's lags, and
    kept in the persistent buffer ``positions`` (``(C, T)`` int64 indices into the ``P`` lags), so a
    model loaded from a checkpoint uses the saved positions whatever the RNG state was when it was
    built. ``num_taps`` is capped at ``P``.
    """

    def __init__(
        self, dim: int, reach: int, num_taps: int, causal: bool = False, generator: torch.Generator | None = None
    ) -> None:
        super().__init__(dim, reach, causal)
        if num_taps < 1:
            raise ValueError(f'num_taps must be >= 1, got {num_taps}')
        taps = min(num_taps, self.size)
        if torch.empty(0).device.type == 'meta':  # a shapes-only build (torch.device('meta')): nothing to draw
            positions = torch.empty(dim, taps, dtype=torch.int64)
        else:
            positions = torch.rand(dim, self.size, generator=generator, device='cpu').argsort(dim=1)[:, :taps]
            positions = positions.sort(dim=1).values
        self.register_buffer('positions', positions)
        self.weight = nn.Parameter(torch.randn(dim, taps) / math.sqrt(taps))

    @torch.jit.ignore
    def forward(self) -> torch.Tensor:
        return _place(self.weight, self.positions, self.size)

    def tap_index(self) -> torch.Tensor:
        """``(C, T)``: the lag index (into the ``P`` lags) of each tap of ``weight``."""
        return self.positions

    def extra_repr(self) -> str:
        return super().extra_repr() + f', taps={self.weight.shape[1]}'


class FourierSparseKernel(BranchKernel):
    """Sum of a :class:`FourierKernel` and a :class:`SparseKernel` of the same reach."""

    def __init__(
        self,
        dim: int,
        reach: int,
        num_modes: int,
        num_taps: int,
        causal: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(dim, reach, causal)
        self.fourier = FourierKernel(dim, reach, num_modes, causal)
        self.sparse = SparseKernel(dim, reach, num_taps, causal, generator)

    @torch.jit.ignore
    def forward(self) -> torch.Tensor:
        return self.fourier() + self.sparse()
