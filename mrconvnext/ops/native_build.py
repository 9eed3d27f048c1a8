"""Compiling the native CPU extensions (``kernels/``) with ``torch.utils.cpp_extension.load``.

The machinery only: which extensions exist, where their sources and builds live and when to build them is
:mod:`.engines`' business. GPU kernels are Triton (no compiler toolchain needed there).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

__all__ = ['build_extension', 'cxx_compiler', 'ensure_ninja', 'import_cpp_extension']


def cxx_compiler() -> str | None:
    """Path of the host C++ compiler torch would use, or None."""
    return shutil.which(os.environ.get('CXX', 'c++'))


def ensure_ninja() -> None:
    """Put ``ninja`` on PATH: ``cpp_extension.load`` runs it from there, and a venv used without activation has it
    only in its bin directory (or in the ``ninja`` package's)."""
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


def import_cpp_extension():
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


def build_extension(name: str, sources: list[Path], build_dir: Path, *, verbose: bool = False) -> ModuleType:
    """Compile (or load from ``build_dir``) the CPU extension ``name`` from ``sources``; raises on failure."""
    ensure_ninja()
    load = import_cpp_extension().load
    missing = [str(s) for s in sources if not s.exists()]
    if missing:
        raise FileNotFoundError(f'native kernel sources not found: {missing} (set MRCONVNEXT_KERNEL_DIR)')
    build_dir.mkdir(parents=True, exist_ok=True)
    # at::parallel_for is inlined: without -fopenmp it would run single-threaded. The OpenMP runtime resolves to the
    # libgomp torch already loaded (same soname).
    if not (build_dir / f'{name}.so').exists():  # a first build takes a while: say so rather than look hung
        print(
            f'mrconvnext: building the native CPU kernels {name} (first use, 30-60 s; cached in {build_dir})...',
            file=sys.stderr,
            flush=True,
        )
    return load(
        name=name,
        sources=[str(s) for s in sources],
        extra_cflags=['-O3', '-fopenmp'],
        extra_ldflags=['-fopenmp'],
        extra_include_paths=[str(sources[0].parent)],
        build_directory=str(build_dir),
        with_cuda=False,
        verbose=verbose,
    )
