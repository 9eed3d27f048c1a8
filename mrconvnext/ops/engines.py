"""What runs where: the one place that knows which implementations exist, which of them can run here, and which
one ``'auto'`` picks.

Vocabulary (the same in every family)
    ``method``: the algorithm; methods differ only in cost. Long convolutions: ``'fft'`` or ``'direct'``.
    ``engine``: the implementation that runs it: ``'native'`` (the C++ CPU kernels of ``kernels/``), ``'triton'``
    (CUDA, or CPU tensors under ``TRITON_INTERPRET=1``), ``'torch'`` (PyTorch ops, every device),
    ``'reference'`` (the specification: autograd through the naive form), ``'flashfft'`` (the optional CUDA package
    ``flashfftconv``), ``'onnx'`` (standard ATen ops chosen for what ONNX runtimes run fast). ``'auto'`` resolves
    both, here.

ONNX export
    While ``torch.onnx.export`` traces a model (:func:`onnx_exporting`), ``'auto'`` resolves to forms in standard
    ATen ops, so the exported graph holds standard ONNX operators only and needs no registration: the long
    convolution's matrix-product methods (ONNX has no fast FFT; the row DFT on its ``'onnx'`` engine) or ``'direct'``
    for short kernels, TaLK's and DynamicConv's ``'onnx'`` engines. ``torch.export`` alone keeps the
    package's operators (the program then runs on the CPU and CUDA kernels).

Operators dispatch per device as ATen's do: ``mrconvnext::talk1d`` runs the native kernel on the CPU and the
Triton kernel on CUDA; ``mrconvnext::fft_conv`` the native kernel on the CPU and torch.fft elsewhere. Engines that
are not a device's own are operators of their own (``mrconvnext::talk1d_torch``, ``mrconvnext::fft_conv_torch``,
the ``triton_op`` ``mrconvnext::talk1d_triton``), reached with an explicit ``engine=``. An exported graph of
``engine='auto'`` calls therefore holds the per-device operators and runs on either device.

Availability and switches (read nowhere else)
    ``MRCONVNEXT_DISABLE_NATIVE=1``: no native kernels. ``MRCONVNEXT_EXT_DIR``: the build cache (default
    ``~/.cache/mrconvnext``, one directory per build, keyed by source content, torch and compiler flags). ``MRCONVNEXT_KERNEL_DIR``: the native
    sources (default: those shipped in the wheel, else a checkout's ``kernels/``). A native extension is built on
    first use, or ahead of time by ``python -m mrconvnext.engines --build``; one that fails warns once and its operators run the ``'torch'`` engine (never zeros). An explicit
    engine that cannot run raises ``RuntimeError`` saying why.

``python -m mrconvnext.engines`` prints, for each operator and device, what ``'auto'`` picks, and the build status.
"""

from __future__ import annotations

import importlib
import os
import threading
import warnings
from pathlib import Path
from types import ModuleType

import torch

from .checks import check_choice
from .native_build import build_extension
from .symbolic import known_true

__all__ = [
    'MATMUL_METHODS',
    'TOEPLITZ_MAX_LENGTH',
    'TOEPLITZ_MIN_BATCH',
    'ONNX_TOEPLITZ_MAX_LENGTH',
    'LONG_CONV_METHODS',
    'LONG_CONV_ENGINES',
    'TALK_ENGINES',
    'DYNAMIC_CONV_ENGINES',
    'LIGHT_CONV_ENGINES',
    'DIRECT_MAX_TAPS',
    'FLASHFFT_DEVICES',
    'TALK_EXT',
    'FFTCONV_EXT',
    'build_native',
    'load_native',
    'native_available',
    'native_error',
    'native_disabled',
    'build_root',
    'native_sources_dir',
    'triton_unavailable',
    'flashfft_module',
    'flashfft_fits',
    'flashfft_fft_size',
    'from_backend',
    'onnx_exporting',
    'talk_engine',
    'talk_engine_constant',
    'dynamic_conv_engine',
    'dynamic_conv_engine_constant',
    'light_conv_engine',
    'light_conv_engine_constant',
    'long_conv_choice',
    'matmul_method',
    'fft_engine',
    'conv_bn_sum_available',
    'resolve',
    'report',
    'reset',
]

LONG_CONV_METHODS = ('auto', 'fft', 'direct', 'toeplitz', 'rowdft')
MATMUL_METHODS = ('toeplitz', 'rowdft')
LONG_CONV_ENGINES = ('auto', 'native', 'torch', 'flashfft', 'onnx')
TALK_ENGINES = ('auto', 'native', 'triton', 'torch', 'reference', 'onnx')
DYNAMIC_CONV_ENGINES = ('auto', 'torch', 'triton', 'onnx')
LIGHT_CONV_ENGINES = ('auto', 'torch', 'triton')

# The direct convolution's reach: up to here it beat the FFT on the CPU at ConvNeXt-T's stage lengths, beyond it lost
# (`python scripts/bench_mrconv.py --crossover --doc`, docs/benchmarks.md).
DIRECT_MAX_TAPS = 64

# The matmul methods' crossover (the explicit 'matmul' choice of tools.common.set_mixer_method): the Toeplitz
# product (identity 3, L multiply-adds per element, one GEMM) up to this length, the row DFT (identity 2, about
# 4 (P + Q) ~ 8 sqrt(L) per element in three GEMMs and two intermediates) beyond.
TOEPLITZ_MAX_LENGTH = 256
# What 'auto' runs for half-precision CUDA convolutions, chosen on an H200 by `scripts/gpu_profile.py` (bf16
# autocast, channels-last, mrconvnext_t; every choice's step times are in docs/gpu/h200_2026-11-26b/README.md):
# - eager forward without a backward: torch.fft (cuFFT, float32), but the Toeplitz product for sequences up to
#   TOEPLITZ_MAX_LENGTH in batches of at least TOEPLITZ_MIN_BATCH (at small batches the Toeplitz path's host time
#   is not hidden);
# - under torch.compile (same conditions): the matmul methods, whose layout copies inductor fuses;
# - with a backward: torch.fft (the fold's inner convolutions run without autograd and follow the forward rule).
# The batch crossover lies between the batches measured (32: torch.fft faster; 128: Toeplitz; 64 not measured).
# Under torch.compile with a symbolic batch (dynamic shapes) the batch is not known to be large: torch.fft.
TOEPLITZ_MIN_BATCH = 64
# The same crossover in ONNX Runtime (CPU, the ONNX export's forms), from `python scripts/bench_onnx_forms.py --doc`
# (docs/benchmarks.md): at L = 196 the row DFT wins at batch 1 and loses at batch 8 (one graph serves every batch:
# latency decides); at L = 49 Toeplitz wins at both.
ONNX_TOEPLITZ_MAX_LENGTH = 100

# ----------------------------------------------------------------------------------------------- warnings

_warned: set[str] = set()


def _warn_once(key: str, message: str, category: type[Warning] = RuntimeWarning) -> None:
    """``warnings.warn(message)`` the first time ``key`` is seen in this process (fallbacks are reported once,
    never silently)."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, category, stacklevel=3)


# ------------------------------------------------------------------------------------------- vocabulary

# The old single ``backend`` keyword: an algorithm for MRConv, an implementation for TaLK.
_LONG_CONV_BACKENDS = {
    'auto': ('auto', 'auto'),
    'fft': ('fft', 'auto'),
    'direct': ('direct', 'auto'),
    'flashfft': ('fft', 'flashfft'),
}


def from_backend(owner: str, family: str, backend: str, method: str, engine: str) -> tuple[str, str]:
    """``(method, engine)`` for the deprecated ``backend=`` keyword of ``family`` (``'long_conv'`` or ``'talk'``),
    with a ``DeprecationWarning``; it may not be combined with a non-default ``method`` / ``engine``."""
    if method != 'auto' or engine != 'auto':
        raise ValueError(f'{owner}: backend= is the old spelling of method= / engine=; give one or the other')
    if family == 'talk':
        new = ('auto', check_choice(owner, 'backend', backend, TALK_ENGINES))
        spelled = f'engine={backend!r}'
    else:
        new = _LONG_CONV_BACKENDS.get(backend) if isinstance(backend, str) else None
        if new is None:
            raise ValueError(f'{owner}: backend must be one of {tuple(_LONG_CONV_BACKENDS)}, got {backend!r}')
        spelled = ', '.join(f'{k}={v!r}' for k, v in zip(('method', 'engine'), new) if v != 'auto') or "method='auto'"
    warnings.warn(
        f'{owner}: backend={backend!r} is deprecated and will be removed in the next release; use {spelled}',
        DeprecationWarning,
        stacklevel=3,
    )
    return new


# ------------------------------------------------------------------------------------ native extensions

TALK_EXT = 'mrconvnext_talk_cpu'
FFTCONV_EXT = 'mrconvnext_fftconv_cpu'
_SOURCES = {TALK_EXT: ('talk', 'talk_cpu.cpp'), FFTCONV_EXT: ('fftconv', 'fftconv_cpu.cpp')}

_lock = threading.RLock()
_modules: dict[str, ModuleType | None] = {}
_errors: dict[str, str] = {}


def native_disabled() -> bool:
    """Whether ``MRCONVNEXT_DISABLE_NATIVE`` turns the native kernels off."""
    return os.environ.get('MRCONVNEXT_DISABLE_NATIVE', '') not in ('', '0')


def native_sources_dir() -> Path:
    """The native sources: ``$MRCONVNEXT_KERNEL_DIR``, else those shipped in the wheel, else a checkout's
    ``kernels/``."""
    if os.environ.get('MRCONVNEXT_KERNEL_DIR'):
        return Path(os.environ['MRCONVNEXT_KERNEL_DIR'])
    installed = Path(__file__).resolve().parents[1] / '_kernels'
    return installed if installed.is_dir() else Path(__file__).resolve().parents[2] / 'kernels'


def build_root() -> Path:
    """The native build cache, shared by every installation on the machine: ``$MRCONVNEXT_EXT_DIR``, else
    ``~/.cache/mrconvnext``. Each build lies in a directory keyed by what it depends on
    (:func:`~mrconvnext.ops.native_build.cache_key`)."""
    return Path(os.environ.get('MRCONVNEXT_EXT_DIR') or Path.home() / '.cache' / 'mrconvnext')


def build_native(ext: str, verbose: bool = False) -> ModuleType:
    """Build (or load from the cache) the native extension ``ext`` (``TALK_EXT`` or ``FFTCONV_EXT``); raises on
    failure."""
    if ext not in _SOURCES:
        raise ValueError(f'unknown native extension {ext!r}; expected one of {tuple(_SOURCES)}')
    with _lock:
        if ext == FFTCONV_EXT and not torch.backends.mkl.is_available():
            raise RuntimeError('this torch build has no MKL, whose FFT functions the fused kernel calls')
        family, source = _SOURCES[ext]
        module = build_extension(ext, native_sources_dir() / family, source, build_root(), verbose=verbose)
        _modules[ext] = module
        return module


def load_native(ext: str) -> ModuleType | None:
    """The native extension ``ext``, built on first call; None if disabled, or (after one warning) if it cannot be
    built."""
    if native_disabled():
        return None
    with _lock:
        if ext in _modules:
            return _modules[ext]
        try:
            return build_native(ext)
        except Exception as exc:  # noqa: BLE001 - any build/import failure means "use the torch engine"
            _errors[ext] = f'{type(exc).__name__}: {exc}'
            _modules[ext] = None
            _warn_once(
                ext,
                f'mrconvnext: building the native extension {ext} failed; using the slower PyTorch '
                f'implementation instead. Error: {_errors[ext][:2000]}',
            )
            return None


def native_error(ext: str) -> str | None:
    """Why the automatic build of ``ext`` failed, if it did."""
    return _errors.get(ext)


# Availability as constants for torch.compile: built (or not) once per process, so the compiler may take the answer
# at trace time instead of tracing the loader (its lock and import machinery cannot be traced).
@torch.compiler.assume_constant_result
def native_available(ext: str) -> bool:
    """Whether the native extension ``ext`` is usable (builds it on first call)."""
    return load_native(ext) is not None


def _native_reason(ext: str) -> str:
    if native_disabled():
        return 'disabled by MRCONVNEXT_DISABLE_NATIVE'
    return native_error(ext) or 'not built'


# ----------------------------------------------------------------------------------------- Triton, flashfft

_triton_reasons: dict[str, str | None] = {}


def _wraps_interpreted_kernels(kernel) -> bool:
    """Whether this torch's ``wrap_triton`` takes a kernel defined under Triton's interpreter (torch 2.11 raises)."""
    from torch.library import wrap_triton

    try:
        wrap_triton(kernel)
    except RuntimeError:
        return False
    return True


def triton_unavailable(device_type: str) -> str | None:
    """Why the Triton kernels cannot run on ``device_type`` tensors, or None when they can."""
    if device_type not in _triton_reasons:
        try:
            from .talk import triton_common
        except Exception as exc:  # noqa: BLE001 - no Triton (e.g. CPU-only or macOS wheels): say why
            reason = f'Triton is not importable ({type(exc).__name__}: {exc})'
        else:
            if device_type == 'cuda':
                reason = None
            elif device_type == 'cpu':
                reason = None if triton_common.interpreted() else 'CPU tensors need TRITON_INTERPRET=1 before first use'
                if reason is None and not _wraps_interpreted_kernels(triton_common.start_edge):
                    reason = (
                        f"torch {torch.__version__}'s wrap_triton refuses Triton's interpreted kernels (torch 2.14 "
                        'takes them): the interpreter needs a newer torch'
                    )
            else:
                reason = f'no Triton kernels for {device_type} tensors'
        _triton_reasons[device_type] = reason
    return _triton_reasons[device_type]


_flashfft: list = []  # [module or None], imported on first use


def flashfft_module():
    """The ``flashfftconv`` module, or None where it is not installed."""
    if not _flashfft:
        try:
            _flashfft.append(importlib.import_module('flashfftconv'))
        except ImportError:
            _flashfft.append(None)
    return _flashfft[0]


@torch.compiler.assume_constant_result  # fixed per process; the compiler takes the answer instead of the import
def _flashfft_available() -> bool:
    return flashfft_module() is not None


def onnx_exporting() -> bool:
    """Whether ``torch.onnx.export`` is tracing the model: the dynamo exporter's ``torch.export`` capture, or the
    TorchScript exporter's trace. ``'auto'`` then resolves to the forms of the module docstring's ONNX section.
    Under ``torch.compile`` it is the constant False (dynamo folds ``is_in_onnx_export`` to False). The exporter's
    default non-strict capture runs this in Python; its strict fallback (dynamo) would see False and keep operators."""
    if not (torch.compiler.is_exporting() or torch.jit.is_tracing()):
        return False
    return torch.onnx.is_in_onnx_export()


# ------------------------------------------------------------------------------------------------ TaLK


def talk_engine(device: torch.device | str, engine: str = 'auto') -> str:
    """The TaLK engine ``engine`` resolves to for tensors on ``device``: 'triton', 'native', 'torch', 'reference' or
    'onnx'.

    ``'auto'``: ``'onnx'`` under :func:`onnx_exporting`, else Triton on CUDA, the native kernel on the CPU where it
    builds, else ``'torch'`` with a one-time warning. ``'triton'`` and ``'native'`` raise RuntimeError, saying why,
    where their kernels cannot run.
    """
    check_choice('talk', 'engine', engine, TALK_ENGINES)
    if engine in ('torch', 'reference', 'onnx'):
        return engine
    if engine == 'auto' and onnx_exporting():
        return 'onnx'
    device = torch.device(device)
    triton_reason = triton_unavailable(device.type) if engine == 'triton' or device.type == 'cuda' else None
    if engine == 'triton':
        if triton_reason is not None:
            raise RuntimeError(f'Triton TaLK kernels unavailable for {device}: {triton_reason}')
        return 'triton'
    if engine == 'auto' and device.type == 'cuda' and triton_reason is None:
        return 'triton'
    if device.type == 'cpu' and load_native(TALK_EXT) is not None:
        return 'native'
    if device.type == 'meta' and engine == 'auto':
        return 'torch'  # shapes only: no kernel runs, nothing to warn about
    reason = _native_reason(TALK_EXT) if device.type == 'cpu' else f'no native kernel for {device.type} tensors'
    if triton_reason is not None:
        reason = f'{reason}; {triton_reason}'
    if engine == 'native':
        raise RuntimeError(f'native TaLK kernels unavailable for {device}: {reason}')
    _warn_once(
        f'talk-fallback-{device.type}',
        f'mrconvnext: no native TaLK kernel for {device.type} tensors ({reason}); using the PyTorch implementation',
    )
    return 'torch'


@torch.compiler.assume_constant_result
def talk_engine_constant(device_type: str, engine: str) -> str:
    """:func:`talk_engine` as a constant for torch.compile: the loaders behind it (locks, imports, builds) cannot
    be traced."""
    return talk_engine(device_type, engine)


# -------------------------------------------------------------------------------------------- DynamicConv


def dynamic_conv_engine(device: torch.device | str, engine: str = 'auto') -> str:
    """The DynamicConv engine ``engine`` resolves to for tensors on ``device``: 'triton', 'torch' or 'onnx'.

    ``'auto'``: ``'onnx'`` under :func:`onnx_exporting`, else the Triton kernels (channels-last, fused softmax) on
    CUDA where Triton runs, else the PyTorch tap loop (on the CPU, and on CUDA without Triton after a one-time
    warning). ``'triton'`` raises RuntimeError, saying why, where its kernels cannot run (CPU tensors need
    ``TRITON_INTERPRET=1``).
    """
    check_choice('dynamic_conv1d', 'engine', engine, DYNAMIC_CONV_ENGINES)
    if engine in ('torch', 'onnx'):
        return engine
    if engine == 'auto' and onnx_exporting():
        return 'onnx'
    device = torch.device(device)
    if engine == 'triton' or device.type == 'cuda':
        reason = triton_unavailable(device.type)
        if engine == 'triton' and reason is not None:
            raise RuntimeError(f'Triton DynamicConv kernels unavailable for {device}: {reason}')
        if reason is None:
            return 'triton'
        _warn_once('dynconv-fallback', f'mrconvnext: {reason}; DynamicConv uses the PyTorch tap loop on {device}')
    return 'torch'


@torch.compiler.assume_constant_result
def dynamic_conv_engine_constant(device_type: str, engine: str) -> str:
    """:func:`dynamic_conv_engine` as a constant for torch.compile."""
    return dynamic_conv_engine(device_type, engine)


def light_conv_engine(device: torch.device | str, engine: str = 'auto') -> str:
    """The LightConv engine ``engine`` resolves to for tensors on ``device``: 'torch' or 'triton'.

    ``'auto'`` is ``'torch'`` on every device: one grouped ``F.conv1d`` (cuDNN's depthwise convolution on CUDA).
    ``'triton'``, DynamicConv's channels-last kernels with the weights shared by every position, is there to be
    measured against it (``scripts/bench_dynconv_gpu.py``): it becomes CUDA's ``'auto'`` only where a GPU measurement
    shows it faster, which none has yet. It raises RuntimeError, saying why, where its kernels cannot run.
    """
    check_choice('light_conv1d', 'engine', engine, LIGHT_CONV_ENGINES)
    if engine != 'triton':
        return 'torch'
    device = torch.device(device)
    reason = triton_unavailable(device.type)
    if reason is not None:
        raise RuntimeError(f'Triton LightConv kernels unavailable for {device}: {reason}')
    return 'triton'


@torch.compiler.assume_constant_result
def light_conv_engine_constant(device_type: str, engine: str) -> str:
    """:func:`light_conv_engine` as a constant for torch.compile."""
    return light_conv_engine(device_type, engine)


# -------------------------------------------------------------------------------------- long convolutions


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
    if device_type not in FLASHFFT_DEVICES or dtype not in (torch.float16, torch.bfloat16) or not _flashfft_available():
        return False
    n = flashfft_fft_size(length, taps, zero_lag)
    return n is not None and length % 2 == 0 and not (n in (512, 2048) and length % 4)


def fft_engine(device_type: str, dtype: torch.dtype) -> str:
    """The engine the FFT convolution of a ``dtype`` input on ``device_type`` runs: ``'native'`` on the CPU where the
    fused kernels build (they compute in float32 / float64, to which :func:`~mrconvnext.ops.long_conv1d` casts
    every input), else ``'torch'``."""
    if device_type == 'cpu' and dtype.is_floating_point and native_available(FFTCONV_EXT):
        return 'native'
    return 'torch'


def matmul_method(length: int, limit: int = TOEPLITZ_MAX_LENGTH) -> str:
    """The matmul method for a sequence of ``length``: ``'toeplitz'`` up to ``limit`` (:data:`TOEPLITZ_MAX_LENGTH`,
    or :data:`ONNX_TOEPLITZ_MAX_LENGTH` for the ONNX forms), else ``'rowdft'`` (the one place the crossover is
    decided)."""
    return 'toeplitz' if length <= limit else 'rowdft'


def long_conv_choice(
    device_type: str,
    dtype: torch.dtype,
    length: int,
    taps: int,
    zero_lag: int,
    method: str,
    engine: str,
    batch: int | None = None,
    grad: bool = False,
) -> tuple[str, str]:
    """``(method, engine)`` that :func:`~mrconvnext.ops.long_conv1d` runs for a convolution computed in ``dtype``
    (the input's, or autocast's where it is on) of ``length`` on ``device_type``, a kernel whose ``taps`` (with
    ``zero_lag``) reach it, ``batch`` sequences (None: not known), and (``grad``) a backward to come.

    ``method='auto'`` with ``engine='auto'`` under :func:`onnx_exporting`, or with ``engine='onnx'``: ``'direct'`` for
    at most ``DIRECT_MAX_TAPS`` taps (the dynamo exporter only), else the matmul methods (ONNX runtimes have no fast
    FFT), the row DFT on the ``'onnx'`` engine (:mod:`.long_conv.engine_onnx`, a layout CPU runtimes transpose fast).
    Otherwise flashfftconv where it fits (fp16 / bf16 CUDA inputs), else ``'direct'`` for at most
    ``DIRECT_MAX_TAPS`` taps; else for fp16 / bf16 on CUDA, without a backward and in a batch of at least
    ``TOEPLITZ_MIN_BATCH``, the matmul methods (tensor-core GEMMs): under ``torch.compile`` those of
    :func:`matmul_method`, in eager the Toeplitz product for a length up to ``TOEPLITZ_MAX_LENGTH``; else
    ``'fft'`` (computed in float32). The measurements behind it: ``TOEPLITZ_MIN_BATCH``'s comment. With sizes that
    ``torch.compile`` traces symbolically the direct method and the matmul methods are taken only where their
    conditions hold for every size the graph serves (a symbolic batch takes ``'fft'``): the choice adds no
    guard. ``engine='auto'`` for the FFT: :func:`fft_engine`; the matmul
    and direct methods run on the ``'torch'`` engine. ``'flashfft'`` where flashfftconv cannot run falls back to
    ``'auto'`` with a one-time warning (which sizes it takes depends on the input). ``'native'`` where it cannot
    run raises RuntimeError.
    """
    check_choice('long_conv1d', 'method', method, LONG_CONV_METHODS)
    check_choice('long_conv1d', 'engine', engine, LONG_CONV_ENGINES)
    if (engine == 'onnx' or (engine == 'auto' and onnx_exporting())) and method in ('auto', 'rowdft'):
        # TorchScript's trace loses the shape of a kernel cropped to the map, which its Conv needs: matrix products
        direct = method == 'auto' and known_true(taps <= DIRECT_MAX_TAPS) and not torch.jit.is_tracing()
        method = 'direct' if direct else matmul_method(length, ONNX_TOEPLITZ_MAX_LENGTH) if method == 'auto' else method
        return method, ('onnx' if method == 'rowdft' else 'torch')
    if method in ('direct', *MATMUL_METHODS):
        if engine == 'onnx' and method != 'rowdft':
            return method, 'torch'  # the ONNX forms of the other two are the 'torch' engine's
        if engine not in ('auto', 'torch'):
            raise ValueError(f"long_conv1d: method={method!r} runs on the 'torch' engine only, got engine={engine!r}")
        return method, 'torch'
    if engine == 'onnx':
        raise ValueError(f"long_conv1d: engine='onnx' runs the matmul and direct methods, got method={method!r}")
    if engine == 'flashfft' or (engine == 'auto' and method == 'auto'):
        if flashfft_fits(device_type, dtype, length, taps, zero_lag):
            return 'fft', 'flashfft'
        if engine == 'flashfft':
            _warn_once(
                'flashfft-fallback',
                'flashfftconv cannot run this convolution (package missing, not a fp16/bf16 CUDA input, '
                'or an unsupported size); falling back to engine="auto"',
            )
            engine = 'auto'
    if method == 'auto':
        direct = engine in ('auto', 'torch') and known_true(taps <= DIRECT_MAX_TAPS)
        if direct:
            return 'direct', 'torch'
        half_cuda = device_type == 'cuda' and dtype in (torch.float16, torch.bfloat16)
        large = batch is not None and known_true(batch >= TOEPLITZ_MIN_BATCH)
        if engine in ('auto', 'torch') and half_cuda and large and not grad:
            if torch.compiler.is_compiling():  # inductor fuses the layout copies around the GEMMs
                if isinstance(length, int):  # the matmul methods specialize on the length: a symbolic one takes fft
                    return matmul_method(length), 'torch'
            elif known_true(length <= TOEPLITZ_MAX_LENGTH):
                return 'toeplitz', 'torch'
    if engine == 'native':
        if fft_engine(device_type, dtype) != 'native':
            why = _native_reason(FFTCONV_EXT) if device_type == 'cpu' else f'no kernel for {device_type} tensors'
            raise RuntimeError(
                f'long_conv1d: the native FFT kernels run CPU tensors only ({why}); got {dtype} on {device_type}'
            )
        return 'fft', 'native'
    return 'fft', engine if engine == 'torch' else fft_engine(device_type, dtype)


def conv_bn_sum_available(x: torch.Tensor) -> bool:
    """Whether the fused convolution + BatchNorm + sum (``mrconvnext::branch_conv_bn_sum``, native engine only) can
    run on ``x``: float32 / float64 CPU tensors where the fused kernels build."""
    return x.device.type == 'cpu' and x.dtype in (torch.float32, torch.float64) and native_available(FFTCONV_EXT)


# ------------------------------------------------------------------------------------------------ report


def resolve(
    op: str,
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
    *,
    method: str = 'auto',
    engine: str = 'auto',
    length: int = 3136,
    taps: int = 3136,
    batch: int | None = None,
    grad: bool = False,
) -> tuple[str, str]:
    """``(method, engine)`` that ``op`` runs on ``device`` for ``dtype`` inputs, a sequence of ``length``, (long
    convolutions) a kernel of ``taps`` centred taps, ``batch`` sequences (None: not known) and ``grad`` (a backward
    to come). ``op``: ``'long_conv1d'``, ``'branch_conv_bn_sum'``,
    ``'talk1d'``, ``'talk2d'``, ``'dynamic_conv1d'``, ``'light_conv1d'`` (one method each but the long convolution's:
    ``'-'``)."""
    device = torch.device(device)
    if op == 'long_conv1d':
        return long_conv_choice(device.type, dtype, length, taps, taps // 2, method, engine, batch, grad)
    if op == 'branch_conv_bn_sum':
        fused = device.type == 'cpu' and dtype in (torch.float32, torch.float64) and native_available(FFTCONV_EXT)
        return '-', ('native' if fused else 'none (the layers use F.batch_norm)')
    if op in ('talk1d', 'talk2d'):
        return '-', talk_engine(device, engine)
    if op == 'dynamic_conv1d':
        return '-', dynamic_conv_engine(device, engine)
    if op == 'light_conv1d':
        return '-', light_conv_engine(device, engine)
    raise ValueError(
        "resolve: op must be one of ('long_conv1d', 'branch_conv_bn_sum', 'talk1d', 'talk2d', 'dynamic_conv1d', "
        f"'light_conv1d'), got {op!r}"
    )


def report() -> str:
    """What ``'auto'`` runs for each operator on the CPU and on CUDA, and the state of each engine."""
    lines = [
        'mrconvnext engines: what engine="auto" runs',
        '',
        f'{"operator (long conv.: batch 128)":<34} {"device":<6} {"dtype":<9} {"method":<8} engine',
    ]
    # (op, sequence length, taps): long convolutions at ConvNeXt-T's stage-1 and stage-3 lengths, and a short kernel
    rows = [('long_conv1d', 3136, 3136), ('long_conv1d', 196, 196), ('long_conv1d', 3136, 7)]
    rows += [('branch_conv_bn_sum', 3136, 3136), ('talk1d', 1, 1), ('talk2d', 1, 1), ('dynamic_conv1d', 1, 1)]
    rows += [('light_conv1d', 1, 1)]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for op, length, taps in rows:
            for device in ('cpu', 'cuda'):
                for dtype in (torch.float32, torch.bfloat16):
                    try:
                        method, engine = resolve(op, device, dtype, length=length, taps=taps, batch=128)
                    except RuntimeError as exc:
                        method, engine = '-', f'unavailable ({exc})'
                    name = f'{op}' + (f' (L={length}, {taps} taps)' if op == 'long_conv1d' else '')
                    lines.append(f'{name:<34} {device:<6} {str(dtype)[6:]:<9} {method:<8} {engine}')
    lines += ['', 'native CPU kernels (built on first use, or by `python -m mrconvnext.engines --build`)']
    for ext in (TALK_EXT, FFTCONV_EXT):
        state = 'disabled (MRCONVNEXT_DISABLE_NATIVE)' if native_disabled() else None
        if state is None:
            mod = _modules.get(ext)
            state = (
                f'built ({Path(mod.__file__).parent.name})'
                if mod is not None
                else (f'failed: {native_error(ext)}' if native_error(ext) else 'not built')
            )
        lines.append(f'  {ext}: {state}')
    lines.append(f'  sources: {native_sources_dir()}')
    lines.append(f'  cache:   {build_root()}')
    triton = triton_unavailable('cuda')
    lines += [
        '',
        f'Triton: {"importable" if triton is None else triton}; CUDA device: {torch.cuda.is_available()}; '
        f'CPU tensors: {triton_unavailable("cpu") or "interpreter on"}',
        f'flashfftconv: {"installed" if flashfft_module() is not None else "not installed"}',
    ]
    return '\n'.join(lines)


def reset(native: bool = False) -> None:
    """Forget what this process learnt about availability: the one-time warnings, Triton and flashfftconv, and with
    ``native=True`` the native extensions (the next use builds or loads them again). For tests that change the
    environment (a stand-in package, a failing build)."""
    _warned.clear()
    _triton_reasons.clear()
    _flashfft.clear()
    if native:
        with _lock:
            _modules.clear()
            _errors.clear()
