"""The long convolution's dispatch: its policy constants, and for each call one plan (method, engine, operator) that
:func:`~mrconvnext.ops.long_conv.api.long_conv1d` runs as it is. Availability (native builds, flashfftconv, ONNX
export) comes from :mod:`mrconvnext.ops.availability`.

ONNX export: while ``torch.onnx.export`` traces, ``'auto'`` resolves to the row DFT on its ``'onnx'`` engine (ONNX has
no fast FFT), the direct method on that engine for short maps (a 2-D convolution of the folded sequence) or
``'direct'`` for short kernels, so the exported graph holds standard ONNX operators only (the TorchScript exporter's
trace: the Toeplitz product for short maps). ``torch.export`` alone keeps the package's per-device operators.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .. import availability
from ..checks import check_choice
from ..symbolic import known_true

__all__ = [
    'LONG_CONV_METHODS',
    'LONG_CONV_ENGINES',
    'MATMUL_METHODS',
    'DIRECT_MAX_TAPS',
    'TOEPLITZ_MAX_LENGTH',
    'TOEPLITZ_MIN_BATCH',
    'DIRECT_CUDA_MAX_MACS',
    'ONNX_DIRECT_MAX_LENGTH',
    'FLASHFFT_DEVICES',
    'LongConvPlan',
    'long_conv_plan',
    'matmul_method',
    'fft_engine',
    'flashfft_fits',
    'flashfft_fft_size',
    'conv_bn_sum_available',
    'NO_FOLD_DEVICES',
    'BRANCH_SUM_FORMS',
    'branch_sum_form',
]

LONG_CONV_METHODS = ('auto', 'fft', 'direct', 'toeplitz', 'rowdft')


MATMUL_METHODS = ('toeplitz', 'rowdft')


LONG_CONV_ENGINES = ('auto', 'native', 'torch', 'flashfft', 'onnx')

# The direct convolution's reach. On the CPU it beats the FFT up to about this many taps at the short stage lengths
# (196, 49), while at 3136 the native FFT kernels win from 7 taps on: a length-aware rule is open
# (`python scripts/bench_mrconv.py --crossover --doc`, docs/benchmarks.md).
DIRECT_MAX_TAPS = 64

# The matmul methods' crossover (the explicit ``set_engine(model, method='matmul')`` of :mod:`mrconvnext.models`): the Toeplitz
# product (identity 3, L multiply-adds per element, one GEMM) up to this length, the row DFT (identity 2, about
# 4 (P + Q) ~ 8 sqrt(L) per element in three GEMMs and two intermediates) beyond.
TOEPLITZ_MAX_LENGTH = 256


# What 'auto' runs for half-precision CUDA convolutions, chosen on an H200 by `scripts/gpu_profile.py` (bf16
# autocast, channels-last, mrconvnext_t; every choice's step times are in docs/gpu/h200_2026-11-26b/README.md), but
# for the backward rule, which the cost model chose:
# - eager forward without a backward: torch.fft (cuFFT, float32), but the Toeplitz product for sequences up to
#   TOEPLITZ_MAX_LENGTH in batches of at least TOEPLITZ_MIN_BATCH (at small batches the Toeplitz path's host time
#   is not hidden);
# - under torch.compile without a backward (same conditions): the matmul methods, whose layout copies inductor fuses;
# - with a backward: the Toeplitz product up to TOEPLITZ_MAX_LENGTH (eager and compiled), torch.fft beyond. Chosen by
#   the cost model (`python scripts/gpu_cost.py --table docs/gpu/cost-model.md --before DIR`), not yet measured on
#   a GPU: once the product's backward became its own vjp (no scatter), the modeled device time of combine='scale''s
#   training step fell from 104.5 ms (torch.fft everywhere) to 91.4 ms on the H100 (convnext_tiny: 58.0), the
#   branched step's stayed (385 ms). The profiled steps of 2026-11-26 that chose torch.fft ran autograd through the
#   Toeplitz gather (an accumulating index_put).
# The batch crossover lies between the batches measured (32: torch.fft faster; 128: Toeplitz; 64 not measured).
# Under torch.compile with a symbolic batch (dynamic shapes) the batch is not known to be large: torch.fft.
TOEPLITZ_MIN_BATCH = 64

# A forward without a backward on CUDA that would run torch.fft runs the direct method (grouped conv1d in the FFT's
# compute dtype, float32 or float64: ATen makes a 1-D conv's input contiguous, and runs torch's own depthwise kernel,
# no tensor cores) where that takes at most this many multiply-adds (batch x channels x kernels x length x taps): the
# deployed model's small batches, whose FFT path is bound by the host (per convolution eleven launches and fourteen
# calls of torch's op bindings from Python; the direct method four and eight). The folded BatchNorm's convolutions in
# training (fold_bn: no backward of their own) take it too. Chosen by the cost model,
# not yet measured on a GPU: `python scripts/gpu_cost.py --model mrconvnext_t:reparam --batch B`, B from 1 to 128,
# with limits from 1e8 to 4e9. 2e9 was the fastest at batches 1 to 16 and 64 to 128 (ConvNeXt-T's first stage,
# 6,271 taps, runs direct at batch 1; its second up to batch 8), and 2 % slower than 6e8 at batch 32; 4e9 lost at
# batches 2 and 16. The kernel's modeled rate at these lengths is an extrapolation from short kernels (LightConv's,
# the one profile that measured it). docs/gpu/cost-model.md has the rows.
DIRECT_CUDA_MAX_MACS = 2_000_000_000


# The longest sequence an ONNX export convolves by the direct method on the 'onnx' engine (engine_onnx.folded_conv2d:
# one depthwise Conv of the folded map), the row DFT beyond; TorchScript's trace, which cannot build the fold's
# kernel, takes the Toeplitz product up to it. From `python scripts/bench_onnx_forms.py --doc`
# (docs/benchmarks.md, ONNX Runtime 1.32, 2 threads, ms at batch 1 / 8): at L = 196 the row DFT of the 'onnx' engine
# (a 14 x 14 grid) wins at both batches (ConvNeXt-atto's stage 3: 0.24 / 1.18 against 0.28 / 2.16; T's: 0.38 / 2.80
# against 0.65 / 5.31); at L = 49 the folded Conv wins at both, and beats the Toeplitz product it replaced (atto's
# stage 4: 0.06 / 0.32 against 0.14 / 0.50; T's: 0.11 / 0.83 against 0.35 / 1.26). One graph serves every batch.
ONNX_DIRECT_MAX_LENGTH = 100


# Device types flashfftconv runs on (a test with a CPU stand-in for the package adds 'cpu').
FLASHFFT_DEVICES = ('cuda',)

_FLASHFFT_MIN_N, _FLASHFFT_MAX_N = 256, 4 * 1024 * 1024


def flashfft_fft_size(length: int, taps: int, zero_lag: int) -> int | None:
    """The power-of-two FFT size flashfftconv uses for a sequence of ``length`` and a kernel of ``taps`` with
    ``zero_lag`` (no wrap-around), or None beyond the largest it accepts (``[256, 4M]``)."""
    required = length + max(taps - 1 - zero_lag, zero_lag)
    n = max(_FLASHFFT_MIN_N, 1 << max(0, required - 1).bit_length())
    return n if n <= _FLASHFFT_MAX_N else None


def flashfft_fits(device_type: str, dtype: torch.dtype, length: int, taps: int, zero_lag: int) -> bool:
    """Whether flashfftconv can compute this convolution: installed, a fp16 / bf16 tensor on a device it runs on, an
    even ``length`` (divisible by 4 for FFT sizes 512 and 2048) and an FFT size it accepts."""
    if (
        device_type not in FLASHFFT_DEVICES
        or dtype not in (torch.float16, torch.bfloat16)
        or not availability.flashfft_available()
    ):
        return False
    n = flashfft_fft_size(length, taps, zero_lag)
    return n is not None and length % 2 == 0 and not (n in (512, 2048) and length % 4)


def fft_engine(device_type: str, dtype: torch.dtype) -> str:
    """The engine the FFT convolution of a ``dtype`` input on ``device_type`` runs: ``'native'`` on the CPU where the
    fused kernels build (they compute in float32 / float64, to which :func:`~mrconvnext.ops.long_conv1d` casts
    every input), else ``'torch'``."""
    if device_type == 'cpu' and dtype.is_floating_point and availability.native_available(availability.FFTCONV_EXT):
        return 'native'
    return 'torch'


def matmul_method(length: int, limit: int = TOEPLITZ_MAX_LENGTH) -> str:
    """The matmul method for a sequence of ``length``: ``'toeplitz'`` up to ``limit`` (:data:`TOEPLITZ_MAX_LENGTH`;
    the TorchScript exporter's trace: :data:`ONNX_DIRECT_MAX_LENGTH`), else ``'rowdft'``."""
    return 'toeplitz' if length <= limit else 'rowdft'


class LongConvPlan(NamedTuple):
    """One call's resolved plan. ``method``: the algorithm; ``engine``: the implementation; ``operator``: what runs
    it, ``'fft_conv'`` (the per-device operator: the native kernels on the CPU, torch.fft elsewhere; what an
    exported ``'auto'`` graph holds), ``'fft_conv_torch'`` (torch.fft on every device), ``'flashfft'``, ``'direct'``
    (grouped ``conv1d``), ``'direct_onnx'`` (a depthwise ``conv2d`` of the folded sequence), ``'toeplitz'``,
    ``'rowdft'`` or ``'rowdft_onnx'`` (the ONNX export's layout)."""

    method: str
    engine: str
    operator: str


def _planned(method: str, resolved: str, asked: str, device_type: str) -> LongConvPlan:
    """The plan of a resolved ``(method, engine)``, ``asked`` being the engine asked for (after any fallback): the
    FFT runs on ``'fft_conv_torch'`` where ``engine='torch'`` was asked for, else on the per-device operator (the
    native kernels on the CPU, torch.fft elsewhere), which is what an exported ``'auto'`` graph holds, so that it
    runs the native kernels wherever they build."""
    if method == 'fft':
        if resolved == 'flashfft':
            operator = 'flashfft'
        else:
            operator = 'fft_conv_torch' if asked == 'torch' else 'fft_conv'
    else:
        operator = f'{method}_onnx' if resolved == 'onnx' else method
    return LongConvPlan(method, resolved, operator)


def long_conv_plan(
    device_type: str,
    dtype: torch.dtype,
    length: int,
    taps: int,
    zero_lag: int,
    method: str,
    engine: str,
    batch: int | None = None,
    grad: bool = False,
    channels: int | None = None,
) -> LongConvPlan:
    """The plan (:class:`LongConvPlan`) that :func:`~mrconvnext.ops.long_conv1d` runs for a convolution computed in ``dtype``
    (the input's, or autocast's where it is on) of ``length`` on ``device_type``, a kernel whose ``taps`` (with
    ``zero_lag``) reach it, ``batch`` sequences (None: not known), and (``grad``) a backward to come.

    ``method='auto'`` with ``engine='auto'`` under :func:`~mrconvnext.ops.availability.onnx_exporting`, or with
    ``engine='onnx'`` (the dynamo exporter; TorchScript's trace takes the Toeplitz product up to
    ``ONNX_DIRECT_MAX_LENGTH`` and the row DFT beyond): ``'direct'`` for at most ``DIRECT_MAX_TAPS`` taps, else on
    the ``'onnx'`` engine (:mod:`.long_conv.engine_onnx`; ONNX runtimes have no fast FFT) the direct method for
    sequences up to ``ONNX_DIRECT_MAX_LENGTH`` (one depthwise 2-D convolution of the folded sequence) and the row DFT
    beyond (a layout CPU runtimes transpose fast); ``method='direct'`` with ``engine='onnx'`` the folded convolution
    for kernels of more than ``DIRECT_MAX_TAPS`` taps, grouped ``conv1d`` for shorter ones.
    Otherwise flashfftconv where it fits (fp16 / bf16 CUDA inputs), else ``'direct'`` for at most
    ``DIRECT_MAX_TAPS`` taps; else for fp16 / bf16 on CUDA in a batch of at least ``TOEPLITZ_MIN_BATCH``, the
    matmul methods (tensor-core GEMMs): under ``torch.compile`` without a backward those of :func:`matmul_method`,
    otherwise the Toeplitz product for a length up to ``TOEPLITZ_MAX_LENGTH``; else on CUDA without a backward
    ``'direct'`` where it takes at most ``DIRECT_CUDA_MAX_MACS`` multiply-adds (``batch`` x ``channels``, the
    convolutions per batch item, x ``length`` x ``taps``; None: not known); else ``'fft'`` (computed in float32).
    The measurements behind it: ``TOEPLITZ_MIN_BATCH``'s and ``DIRECT_CUDA_MAX_MACS``'s comments. With sizes that
    ``torch.compile`` traces symbolically the direct method and the matmul methods are taken only where their
    conditions hold for every size the graph serves (a symbolic batch takes ``'fft'``): the choice adds no
    guard. ``engine='auto'`` for the FFT: :func:`fft_engine`; the matmul
    and direct methods run on the ``'torch'`` engine. ``'flashfft'`` where flashfftconv cannot run falls back to
    ``'auto'`` with a one-time warning (which sizes it takes depends on the input). ``'native'`` where it cannot
    run raises RuntimeError.
    """
    check_choice('long_conv1d', 'method', method, LONG_CONV_METHODS)
    check_choice('long_conv1d', 'engine', engine, LONG_CONV_ENGINES)
    if (engine == 'onnx' or (engine == 'auto' and availability.onnx_exporting())) and method in ('auto', 'rowdft'):
        if method == 'rowdft':
            return _planned('rowdft', 'onnx', engine, device_type)
        # TorchScript's trace loses the shape of a kernel cropped to the map, which its Conv needs: matrix products
        if torch.jit.is_tracing():
            method = matmul_method(length, ONNX_DIRECT_MAX_LENGTH)
            return _planned(method, 'onnx' if method == 'rowdft' else 'torch', engine, device_type)
        if known_true(taps <= DIRECT_MAX_TAPS):
            return _planned('direct', 'torch', engine, device_type)
        return _planned('direct' if known_true(length <= ONNX_DIRECT_MAX_LENGTH) else 'rowdft', 'onnx', engine,
                        device_type)  # fmt: skip
    if method in ('direct', *MATMUL_METHODS):
        if engine == 'onnx' and method == 'direct':  # short kernels: grouped conv1d (the fold's kernel spans the map)
            return _planned('direct', 'torch' if known_true(taps <= DIRECT_MAX_TAPS) else 'onnx', engine, device_type)
        if engine == 'onnx' and method != 'rowdft':
            return _planned(
                method, 'torch', engine, device_type
            )  # the ONNX forms of the other two are the 'torch' engine's
        if engine not in ('auto', 'torch'):
            raise ValueError(f"long_conv1d: method={method!r} runs on the 'torch' engine only, got engine={engine!r}")
        return _planned(method, 'torch', engine, device_type)
    if engine == 'onnx':
        raise ValueError(f"long_conv1d: engine='onnx' runs the matmul and direct methods, got method={method!r}")
    if engine == 'flashfft' or (engine == 'auto' and method == 'auto'):
        if flashfft_fits(device_type, dtype, length, taps, zero_lag):
            return _planned('fft', 'flashfft', engine, device_type)
        if engine == 'flashfft':
            availability.warn_once(
                'flashfft-fallback',
                'flashfftconv cannot run this convolution (package missing, not a fp16/bf16 CUDA input, '
                'or an unsupported size); falling back to engine="auto"',
            )
            engine = 'auto'
    if method == 'auto':
        direct = engine in ('auto', 'torch') and known_true(taps <= DIRECT_MAX_TAPS)
        if direct:
            return _planned('direct', 'torch', engine, device_type)
        half_cuda = device_type == 'cuda' and dtype in (torch.float16, torch.bfloat16)
        large = batch is not None and known_true(batch >= TOEPLITZ_MIN_BATCH)
        if engine in ('auto', 'torch') and half_cuda and large:
            if torch.compiler.is_compiling() and not grad:  # inductor fuses the layout copies around the GEMMs
                if isinstance(length, int):  # the matmul methods specialize on the length: a symbolic one takes fft
                    return _planned(matmul_method(length), 'torch', engine, device_type)
            elif known_true(length <= TOEPLITZ_MAX_LENGTH):
                return _planned('toeplitz', 'torch', engine, device_type)
        small = device_type == 'cuda' and not grad and _small_work(batch, channels, length, taps)
        if engine in ('auto', 'torch') and small:  # in place of torch.fft
            return _planned('direct', 'torch', engine, device_type)
    if engine == 'native':
        if fft_engine(device_type, dtype) != 'native':
            why = (
                availability.native_reason(availability.FFTCONV_EXT)
                if device_type == 'cpu'
                else f'no kernel for {device_type} tensors'
            )
            raise RuntimeError(
                f'long_conv1d: the native FFT kernels run CPU tensors only ({why}); got {dtype} on {device_type}'
            )
        return _planned('fft', 'native', engine, device_type)
    return _planned('fft', engine if engine == 'torch' else fft_engine(device_type, dtype), engine, device_type)


def _small_work(batch: int | None, channels: int | None, length: int, taps: int) -> bool:
    """Whether a direct convolution of ``batch`` x ``channels`` sequences is known to take at most
    :data:`DIRECT_CUDA_MAX_MACS` multiply-adds (False where a size is unknown, or symbolic and not known to fit)."""
    if batch is None or channels is None:
        return False
    return known_true(batch * channels * length * taps <= DIRECT_CUDA_MAX_MACS)


def conv_bn_sum_available(x: torch.Tensor) -> bool:
    """Whether the fused convolution + BatchNorm + sum (``mrconvnext::branch_conv_bn_sum``, native engine only) can
    run on ``x``: float32 / float64 CPU tensors where the fused kernels build."""
    return (
        x.device.type == 'cpu'
        and x.dtype in (torch.float32, torch.float64)
        and availability.native_available(availability.FFTCONV_EXT)
    )


# MRConv's BatchNorm branches in training (the layers' training form, :func:`branch_sum_form`). Device types where
# the fold does not run: the CPU pays the fold's three recomputations of the branch outputs in time and keeps the
# fused operator or a convolution per branch; a GPU saves the memory. Tests take 'cpu' out to check the fold there;
# `scripts/gpu_profile.py` adds 'cuda' for its 'nofold' rows.
NO_FOLD_DEVICES = ('cpu',)
BRANCH_SUM_FORMS = ('fused', 'fold', 'branches')


def branch_sum_form(
    device_type: str,
    dtype: torch.dtype,
    method: str,
    engine: str,
    *,
    batch_stats: bool,
    plain: bool,
    synchronized: bool,
    whole_map: bool = True,
) -> str:
    """How MRConv sums its BatchNorm branches: ``'fused'`` (:func:`~mrconvnext.ops.branch_conv_bn_sum`, convolution,
    BatchNorms and sum in one: a plain ``BatchNorm1d``, the FFT on the native engine or ``'auto'``, a float32 /
    float64 CPU input where the fused kernels build), ``'fold'`` (:func:`~mrconvnext.ops.long_conv.folded_bn_conv`,
    one merged convolution: a plain or synchronized BatchNorm on a device outside :data:`NO_FOLD_DEVICES`), else
    ``'branches'`` (a convolution per branch, then the norm module). The first two need ``batch_stats`` (training
    an affine BatchNorm with batch statistics) and statistics over the ``whole_map`` (not a map with padding
    columns)."""
    if not (batch_stats and whole_map):
        return 'branches'
    if plain and method in ('auto', 'fft') and engine in ('auto', 'native') and device_type == 'cpu':
        if dtype in (torch.float32, torch.float64) and availability.native_available(availability.FFTCONV_EXT):
            return 'fused'
    if (plain or synchronized) and device_type not in NO_FOLD_DEVICES:
        return 'fold'
    return 'branches'
