"""Compiling the native CPU extensions (``kernels/``) with ``torch.utils.cpp_extension.load``, once per machine.

A build is cached under a key of what the binary depends on: the content of every file in its source directory,
the torch version, git revision and C++ ABI, the Python ABI, the platform, the compiler named by ``$CXX`` and the
flags. Not where the sources lie: a checkout, an installed wheel and a second virtual environment with the same
torch share one build. The sources are copied into the cache directory and compiled from there, so the build
files name no path outside it. A build announces itself on stderr every time one starts; processes that need the
same build at once (DDP ranks, pytest-xdist workers) take a file lock, one builds and the others wait for it and
load its result. Old builds are never deleted (a few MB each; remove the cache directory to reclaim them).

The machinery only: which extensions exist, where their sources and the cache live and when to build them is
:mod:`.engines`' business. GPU kernels are Triton (no compiler toolchain needed there).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import torch

__all__ = [
    'CFLAGS',
    'LDFLAGS',
    'build_extension',
    'cache_key',
    'cxx_compiler',
    'ensure_ninja',
    'import_cpp_extension',
    'is_built',
    'NativeLibrary',
]

# at::parallel_for is inlined: without -fopenmp it would run single-threaded. The OpenMP runtime resolves to the
# libgomp torch already loaded (same soname).
CFLAGS = ('-O3', '-fopenmp')
LDFLAGS = ('-fopenmp',)
_DONE = 'built'  # written into the cache directory after a successful build; holds the library's file name
_SOURCE_SUFFIXES = ('.cpp', '.cc', '.h', '.hpp')  # what a build reads from its source directory


def _sources(source_dir: Path) -> list[Path]:
    return sorted(p for p in source_dir.iterdir() if p.is_file() and p.suffix in _SOURCE_SUFFIXES)


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


def cache_key(name: str, source_dir: Path) -> str:
    """Hex digest of what the extension ``name`` built from ``source_dir`` depends on (see the module docstring)."""
    h = hashlib.sha256()
    abi = [
        name,
        torch.__version__,
        str(torch.version.git_version),
        str(torch._C._GLIBCXX_USE_CXX11_ABI),
        sys.implementation.cache_tag,
        platform.system(),
        platform.machine(),
        os.environ.get('CXX', 'c++'),
        ' '.join(CFLAGS),
        ' '.join(LDFLAGS),
    ]
    h.update('\0'.join(abi).encode())
    for path in _sources(source_dir):
        h.update(b'\0' + path.name.encode() + b'\0' + path.read_bytes())
    return h.hexdigest()


@contextlib.contextmanager
def _exclusive(lock_path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` across processes, saying on stderr when another holds it. The kernel
    drops the lock of a process that dies, so a killed build never blocks the next one."""
    try:
        import fcntl
    except ImportError:  # Windows: no cross-process lock; concurrent processes may build twice, each into place
        yield
        return
    with open(lock_path, 'a') as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f'mrconvnext: waiting for another process building {what}...', file=sys.stderr, flush=True)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class NativeLibrary(ModuleType):
    """A built library: its operators, registered in the namespace ``torch.ops.<library name>``, as attributes
    (``lib.talk1d_forward(...)`` is ``torch.ops.<name>.talk1d_forward(...)``); ``__file__`` is the library's path."""

    def __init__(self, path: Path) -> None:
        super().__init__(path.stem)
        self.__file__ = str(path)

    def __getattr__(self, op: str):
        if op.startswith('__'):
            raise AttributeError(op)
        return getattr(getattr(torch.ops, self.__name__), op)


_loaded: dict[str, NativeLibrary] = {}  # library name -> the library this process loaded under it


def _import_library(path: Path) -> NativeLibrary:
    """Load the library in ``path`` (its operators register themselves under the file's stem, which names the
    content it was built from: the same name from another cache directory is the same code, loaded once)."""
    if path.stem not in _loaded:
        torch.ops.load_library(str(path))
        _loaded[path.stem] = NativeLibrary(path)
    return _loaded[path.stem]


def _build_dir(name: str, source_dir: Path, cache_root: Path) -> Path:
    return cache_root / f'{name}-{cache_key(name, source_dir)[:20]}'


def is_built(name: str, source_dir: Path, cache_root: Path) -> bool:
    """Whether :func:`build_extension` would load ``name`` from ``cache_root`` without compiling."""
    return (_build_dir(name, source_dir, cache_root) / _DONE).is_file()


def build_extension(
    name: str, source_dir: Path, source: str, cache_root: Path, *, verbose: bool = False
) -> NativeLibrary:
    """The CPU extension ``name`` compiled from ``source_dir / source`` (headers beside it), loaded from
    ``cache_root`` if this content was built there for this torch and compiler, else built first (once across
    processes). Raises on failure."""
    if not (source_dir / source).is_file():
        raise FileNotFoundError(
            f'native kernel source not found: {source_dir / source} (set MRCONVNEXT_KERNEL_DIR to the kernels/ folder)'
        )
    build_dir = _build_dir(name, source_dir, cache_root)
    done = build_dir / _DONE
    if done.is_file():
        return _import_library(build_dir / done.read_text().strip())
    build_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive(build_dir / 'build.lock', f'the native CPU kernels {name} in {build_dir}'):
        if done.is_file():  # built by the process we waited for
            return _import_library(build_dir / done.read_text().strip())
        print(
            f'mrconvnext: building the native CPU kernels {name} (10-30 s, once per torch version and source '
            f'content; cached in {build_dir}; `python -m mrconvnext.engines --build` builds ahead of time)...',
            file=sys.stderr,
            flush=True,
        )
        start = time.perf_counter()
        src = build_dir / 'src'
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir()
        for path in _sources(source_dir):
            shutil.copyfile(path, src / path.name)
        ensure_ninja()
        library = import_cpp_extension().load(
            name=build_dir.name.replace('-', '_'),  # the operators' namespace: unique per content
            is_python_module=False,
            sources=[str(src / source)],
            extra_cflags=list(CFLAGS),
            extra_ldflags=list(LDFLAGS),
            extra_include_paths=[str(src)],
            build_directory=str(build_dir),
            with_cuda=False,
            verbose=verbose,
        )
        tmp = build_dir / f'{_DONE}.tmp'
        tmp.write_text(Path(library).name)
        os.replace(tmp, done)
        print(f'mrconvnext: built {name} in {time.perf_counter() - start:.0f} s', file=sys.stderr, flush=True)
        return _import_library(Path(library))
