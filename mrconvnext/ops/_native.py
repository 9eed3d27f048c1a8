"""Loader for the native kernels (``kernels/``), JIT-compiled with ``torch.utils.cpp_extension.load``.

CPU extensions only (GPU kernels are Triton, in ``ops/*_triton.py``: no compiler toolchain needed there):

* ``mrconvnext_talk_cpu``  (``talk/talk_cpu.cpp``), built on first use;
* ``mrconvnext_fftconv_cpu`` (``fftconv/fftconv_cpu.cpp``), the fused FFT convolution forward, built on first
  use where torch has MKL (it calls the oneMKL DFTI functions that ``libtorch_cpu`` exports).

Builds are cached under ``$MRCONVNEXT_EXT_DIR`` (default ``~/.cache/mrconvnext``), in a subdirectory per
Python/torch version. A failed automatic build warns once and returns ``None``; callers then fall back to
the PyTorch implementation (never to zeros). ``MRCONVNEXT_DISABLE_NATIVE=1`` skips native kernels entirely.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import torch

from ._warnings import warn_once


def _kernel_dir() -> Path:
    # $MRCONVNEXT_KERNEL_DIR, else the sources shipped in the wheel, else a checkout's top-level kernels/
    if os.environ.get('MRCONVNEXT_KERNEL_DIR'):
        return Path(os.environ['MRCONVNEXT_KERNEL_DIR'])
    installed = Path(__file__).resolve().parents[1] / '_kernels'
    return installed if installed.is_dir() else Path(__file__).resolve().parents[2] / 'kernels'


KERNEL_DIR = _kernel_dir()
TALK_DIR = KERNEL_DIR / 'talk'
FFTCONV_DIR = KERNEL_DIR / 'fftconv'

_lock = threading.RLock()
_modules: dict[str, ModuleType | None] = {}
_errors: dict[str, str] = {}
build_seconds: dict[str, float] = {}  # wall time of the builds (or cache loads) done in this process


def native_disabled() -> bool:
    return os.environ.get('MRCONVNEXT_DISABLE_NATIVE', '') not in ('', '0')


def build_root() -> Path:
    """Build cache directory for this Python / torch / CUDA combination."""
    root = Path(os.environ.get('MRCONVNEXT_EXT_DIR') or Path.home() / '.cache' / 'mrconvnext')
    tag = f'py{sys.version_info[0]}{sys.version_info[1]}-torch{torch.__version__}-cu{torch.version.cuda}'
    return root / tag.replace('+', '_')


def cxx_compiler() -> str | None:
    """Path of the host C++ compiler torch would use, or None."""
    return shutil.which(os.environ.get('CXX', 'c++'))


def _ensure_ninja() -> None:
    # cpp_extension.load runs `ninja` from PATH; a venv used without activation has it only in its bin dir.
    if shutil.which('ninja'):
        return
    candidates = [Path(sys.executable).parent]
    try:
        import ninja  # type: ignore[import-not-found]

        candidates.append(Path(ninja.BIN_DIR))
    except Exception:
        pass
    for d in candidates:
        if (d / 'ninja').exists():
            os.environ['PATH'] = f'{d}{os.pathsep}{os.environ.get("PATH", "")}'
            return


def _import_cpp_extension():
    """``torch.utils.cpp_extension`` without its import-time "No CUDA runtime is found" warning: only CPU
    extensions are built here, so where CUDA is found does not matter."""
    logger = logging.getLogger('torch.utils.cpp_extension')

    def no_cuda_notice(record: logging.LogRecord) -> bool:
        return 'No CUDA runtime is found' not in record.getMessage()

    logger.addFilter(no_cuda_notice)
    try:
        from torch.utils import cpp_extension
    finally:
        logger.removeFilter(no_cuda_notice)
    return cpp_extension


def _build(name: str, sources: list[Path], *, verbose: bool) -> ModuleType:
    _ensure_ninja()
    load = _import_cpp_extension().load

    missing = [str(s) for s in sources if not s.exists()]
    if missing:
        raise FileNotFoundError(f'native kernel sources not found: {missing} (set MRCONVNEXT_KERNEL_DIR)')
    build_dir = build_root() / name
    build_dir.mkdir(parents=True, exist_ok=True)
    # at::parallel_for is inlined: without -fopenmp it would run single-threaded. The OpenMP runtime resolves to the
    # libgomp torch already loaded (same soname).
    cflags, ldflags = ['-O3', '-fopenmp'], ['-fopenmp']
    if not (build_dir / f'{name}.so').exists():  # a first build takes a while: say so rather than look hung
        print(
            f'mrconvnext: building the native CPU kernels {name} (first use, 30-60 s; cached in {build_dir})...',
            file=sys.stderr,
            flush=True,
        )
    start = time.perf_counter()
    module = load(
        name=name,
        sources=[str(s) for s in sources],
        extra_cflags=cflags,
        extra_ldflags=ldflags,
        extra_include_paths=[str(sources[0].parent)],
        build_directory=str(build_dir),
        with_cuda=False,
        verbose=verbose,
    )
    build_seconds[name] = time.perf_counter() - start
    return module


CPU_NAME = 'mrconvnext_talk_cpu'
FFTCONV_CPU_NAME = 'mrconvnext_fftconv_cpu'


def build_talk_cpu(verbose: bool = False) -> ModuleType:
    """Build (or load from cache) the CPU extension; raises on failure."""
    with _lock:
        module = _build(CPU_NAME, [TALK_DIR / 'talk_cpu.cpp'], verbose=verbose)
        _modules[CPU_NAME] = module
        return module


def build_fftconv_cpu(verbose: bool = False) -> ModuleType:
    """Build (or load from cache) the fused FFT convolution CPU extension; raises on failure."""
    with _lock:
        if not torch.backends.mkl.is_available():
            raise RuntimeError('this torch build has no MKL, whose FFT functions the fused kernel calls')
        module = _build(FFTCONV_CPU_NAME, [FFTCONV_DIR / 'fftconv_cpu.cpp'], verbose=verbose)
        _modules[FFTCONV_CPU_NAME] = module
        return module


def _load_cached(name: str, builder) -> ModuleType | None:
    with _lock:
        if name in _modules:
            return _modules[name]
        try:
            module = builder()
        except Exception as exc:  # noqa: BLE001 - any build/import failure means "use the fallback"
            _errors[name] = f'{type(exc).__name__}: {exc}'
            _modules[name] = None
            warn_once(
                name,
                f'mrconvnext: building the native extension {name} failed; using the slower PyTorch '
                f'implementation instead. Error: {_errors[name][:2000]}',
            )
            return None
        return module


def load_talk_cpu() -> ModuleType | None:
    """The CPU extension, built on first call; None (after one warning) if it cannot be built."""
    if native_disabled():
        return None
    return _load_cached(CPU_NAME, build_talk_cpu)


def load_fftconv_cpu() -> ModuleType | None:
    """The fused FFT convolution CPU extension, built on first call; None (after one warning) if it cannot be."""
    if native_disabled():
        return None
    return _load_cached(FFTCONV_CPU_NAME, build_fftconv_cpu)


def talk_native(device: torch.device) -> ModuleType | None:
    """Native TaLK kernels for tensors on ``device``, or None."""
    return load_talk_cpu() if device.type == 'cpu' else None


def native_error(name: str) -> str | None:
    """Why the automatic build of extension ``name`` failed, if it did."""
    return _errors.get(name)


# Availability as constants for torch.compile: built (or not) once per process, so the compiler may take the answer
# at trace time instead of tracing the loader (its lock and import machinery cannot be traced).
@torch.compiler.assume_constant_result
def fftconv_cpu_available() -> bool:
    """Whether the fused FFT convolution CPU extension is usable (builds it on first call)."""
    return load_fftconv_cpu() is not None


@torch.compiler.assume_constant_result
def talk_native_available(device_type: str) -> bool:
    """Whether native TaLK kernels are usable for tensors on ``device_type`` (builds them on first call)."""
    return talk_native(torch.device(device_type)) is not None
