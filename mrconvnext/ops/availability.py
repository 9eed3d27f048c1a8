"""What can run here: the native CPU extensions (built on first use), Triton and its interpreter, the optional
flashfftconv package, and whether ``torch.onnx.export`` is tracing. Every family's dispatch asks this module; it
imports no family's kernels (Triton is probed with a kernel of its own, :mod:`.triton_probe`).

Switches (read nowhere else)
    ``MRCONVNEXT_DISABLE_NATIVE=1``: no native kernels. ``MRCONVNEXT_EXT_DIR``: the build cache (default
    ``~/.cache/mrconvnext``, one directory per build, keyed by source content, torch and compiler flags).
    ``MRCONVNEXT_KERNEL_DIR``: the native sources (default: those shipped in the wheel, else a checkout's
    ``kernels/``). A native extension is built on first use, or ahead of time by ``python -m mrconvnext.engines
    --build``; one that fails warns once and its operators run the ``'torch'`` engine (never zeros).
"""

from __future__ import annotations

import importlib
import os
import threading
import warnings
from pathlib import Path
from types import ModuleType

import torch

from .native_build import build_extension, is_built

__all__ = [
    'TALK_EXT',
    'FFTCONV_EXT',
    'warn_once',
    'build_native',
    'load_native',
    'native_available',
    'native_built',
    'native_error',
    'native_reason',
    'native_disabled',
    'build_root',
    'native_sources_dir',
    'native_state',
    'triton_unavailable',
    'flashfft_module',
    'flashfft_available',
    'onnx_exporting',
    'reset',
]

_warned: set[str] = set()


def warn_once(key: str, message: str, category: type[Warning] = RuntimeWarning) -> None:
    """``warnings.warn(message)`` the first time ``key`` is seen in this process (fallbacks are reported once,
    never silently)."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, category, stacklevel=3)


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
    if ext == FFTCONV_EXT and not torch.backends.mkl.is_available():
        raise RuntimeError('this torch build has no MKL, whose FFT functions the fused kernel calls')
    family, source = _SOURCES[ext]
    # no lock held while compiling: the build's file lock keeps builds of one extension apart (threads included),
    # and two extensions build at once (mrconvnext.engines.build_all)
    module = build_extension(ext, native_sources_dir() / family, source, build_root(), verbose=verbose)
    with _lock:
        _modules[ext] = module
    return module


def native_built(ext: str) -> bool:
    """Whether ``ext`` lies built in the cache for these sources and this torch (loading it compiles nothing)."""
    family, _ = _SOURCES[ext]
    return is_built(ext, native_sources_dir() / family, build_root())


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
            warn_once(
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


def native_reason(ext: str) -> str:
    if native_disabled():
        return 'disabled by MRCONVNEXT_DISABLE_NATIVE'
    return native_error(ext) or 'not built'


def native_state(ext: str) -> str:
    """``ext``'s state in words: disabled, built (its build directory), failed (why) or not built."""
    if native_disabled():
        return 'disabled (MRCONVNEXT_DISABLE_NATIVE)'
    mod = _modules.get(ext)
    if mod is not None:
        return f'built ({Path(mod.__file__).parent.name})'
    return f'failed: {native_error(ext)}' if native_error(ext) else 'not built'


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
            from . import triton_probe
        except Exception as exc:  # noqa: BLE001 - no Triton (e.g. CPU-only or macOS wheels): say why
            reason = f'Triton is not importable ({type(exc).__name__}: {exc})'
        else:
            if device_type == 'cuda':
                reason = None
            elif device_type == 'cpu':
                reason = None if triton_probe.interpreted() else 'CPU tensors need TRITON_INTERPRET=1 before first use'
                if reason is None and not _wraps_interpreted_kernels(triton_probe.probe_jit):
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
def flashfft_available() -> bool:
    return flashfft_module() is not None


def onnx_exporting() -> bool:
    """Whether ``torch.onnx.export`` is tracing the model: the dynamo exporter's ``torch.export`` capture, or the
    TorchScript exporter's trace. ``'auto'`` then resolves to the forms of the module docstring's ONNX section.
    Under ``torch.compile`` it is the constant False (dynamo folds ``is_in_onnx_export`` to False). The exporter's
    default non-strict capture runs this in Python; its strict fallback (dynamo) would see False and keep operators."""
    if not (torch.compiler.is_exporting() or torch.jit.is_tracing()):
        return False
    return torch.onnx.is_in_onnx_export()


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
