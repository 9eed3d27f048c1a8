"""The native-kernel build cache and loader (the kernels themselves are tested through their ops)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mrconvnext.ops import availability, native_build
from mrconvnext.ops.native_build import cxx_compiler
from tests.limits import HANG_LIMIT_S


def _copy_sources(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns('__pycache__'))
    return dst


def test_cache_key_covers_content_not_location(tmp_path):
    """Two copies of the sources key alike wherever they lie (and whatever else lies beside them); a changed header
    or another extension name keys differently."""
    talk = availability.native_sources_dir() / 'talk'
    a = _copy_sources(talk, tmp_path / 'a' / 'talk')
    b = _copy_sources(talk, tmp_path / 'elsewhere' / 'b')
    (b / 'notes.txt').write_text('not a source')
    key = native_build.cache_key(availability.TALK_EXT, a)
    assert native_build.cache_key(availability.TALK_EXT, b) == key
    assert native_build.cache_key('other_ext', a) != key
    header = b / 'talk_math.h'
    header.write_text(header.read_text() + '\n// changed\n')
    assert native_build.cache_key(availability.TALK_EXT, b) != key


# A stand-in extension with the layout of the real ones (a source and a header beside it), which compiles in about a
# second: the machinery under test is the cache, the lock and the loader (the real kernels build once per test run,
# for the ops' tests, and are tested there).
STUB_EXT = 'mrconvnext_stub_cpu'
STUB_SOURCE = """#include "stub_value.h"
extern "C" int mrconvnext_stub_value() { return STUB_VALUE; }
"""


def _stub_value(library: native_build.NativeLibrary) -> int:
    import ctypes

    return ctypes.CDLL(library.__file__).mrconvnext_stub_value()


BUILD = (
    'import sys\n'
    'from pathlib import Path\n'
    'import ctypes\n'
    'from mrconvnext.ops import native_build\n'
    f'm = native_build.build_extension({STUB_EXT!r}, Path(sys.argv[1]), "stub.cpp", Path(sys.argv[2]))\n'
    'assert ctypes.CDLL(m.__file__).mrconvnext_stub_value() == 7\n'
    'print(m.__file__)\n'
)


@pytest.mark.skipif(cxx_compiler() is None, reason='no C++ compiler')
def test_two_source_locations_and_concurrent_processes_build_once(tmp_path):
    """Two processes start at once on an empty cache, with the same kernel sources at two locations (a checkout and
    an installed wheel, two environments): one builds, saying so on stderr, the other waits for it and loads its
    library. A third process later loads it silently, without a compiler run."""
    dirs = [_stub_sources(tmp_path / name / 'stub') for name in ('checkout', 'site-packages')]
    cache = tmp_path / 'cache'

    def start(kernel_dir: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, '-c', BUILD, str(kernel_dir), str(cache)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    procs = [start(d) for d in dirs]
    results = [p.communicate(timeout=HANG_LIMIT_S) for p in procs]
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
    errs = [err for _, err in results]
    announced = [err.count(f'mrconvnext: building the native CPU kernels {STUB_EXT}') for err in errs]
    assert sorted(announced) == [0, 1], errs
    # the other one waited on the lock (or, started late on a loaded machine, found the build done)
    other = errs[announced.index(0)].strip()
    assert other == '' or other.startswith('mrconvnext: waiting for another process building the native CPU kernels')
    libraries = {out.strip() for out, _ in results}
    assert len(libraries) == 1 and len(list(cache.iterdir())) == 1, (libraries, list(cache.iterdir()))
    (library,) = libraries
    assert Path(library).parent.parent == cache
    compiles = (Path(library).parent / '.ninja_log').read_text().count('stub.o')
    assert compiles == 1

    later = start(dirs[0])
    out, err = later.communicate(timeout=HANG_LIMIT_S)
    assert later.returncode == 0 and out.strip() == library
    assert 'building' not in err and 'waiting' not in err, err
    assert (Path(library).parent / '.ninja_log').read_text().count('stub.o') == 1


def test_no_stray_cuda_notice_on_import():
    """torch.utils.cpp_extension logs "No CUDA runtime is found" when imported without a GPU; the loader imports it
    without that notice (checked in a fresh process, where the module is not imported yet)."""
    code = (
        'import sys, torch, mrconvnext\n'
        'assert "torch.utils.cpp_extension" not in sys.modules, "imported too early to check"\n'
        'from mrconvnext.ops import native_build\n'
        'native_build.import_cpp_extension()\n'
        'assert "torch.utils.cpp_extension" in sys.modules\n'
    )
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=HANG_LIMIT_S)
    assert out.returncode == 0, out.stderr
    assert 'No CUDA runtime' not in out.stderr + out.stdout


def _stub_sources(d: Path) -> Path:
    d.mkdir(parents=True)
    (d / 'stub.cpp').write_text(STUB_SOURCE)
    (d / 'stub_value.h').write_text('#define STUB_VALUE 7\n')
    return d


@pytest.mark.skipif(cxx_compiler() is None, reason='no C++ compiler')
def test_build_then_load_from_the_cache_in_this_process(tmp_path, capfd):
    """The build itself, in this process: compiled once into the cache (saying so), then loaded from it silently."""
    src, cache = _stub_sources(tmp_path / 'stub'), tmp_path / 'cache'
    assert not native_build.is_built(STUB_EXT, src, cache)
    module = native_build.build_extension(STUB_EXT, src, 'stub.cpp', cache)
    assert _stub_value(module) == 7 and native_build.is_built(STUB_EXT, src, cache)
    assert f'building the native CPU kernels {STUB_EXT}' in capfd.readouterr().err
    again = native_build.build_extension(STUB_EXT, src, 'stub.cpp', cache)
    assert again.__file__ == module.__file__ and _stub_value(again) == 7 and 'building' not in capfd.readouterr().err


def test_environment_names_the_sources_and_the_cache(tmp_path, monkeypatch):
    """MRCONVNEXT_KERNEL_DIR and MRCONVNEXT_EXT_DIR (a checkout's sources, a shared cache) are where the build of
    the real extensions reads and writes."""
    monkeypatch.setenv('MRCONVNEXT_KERNEL_DIR', str(tmp_path / 'kernels'))
    monkeypatch.setenv('MRCONVNEXT_EXT_DIR', str(tmp_path / 'cache'))
    assert availability.native_sources_dir() == tmp_path / 'kernels'
    assert availability.build_root() == tmp_path / 'cache'
    monkeypatch.delenv('MRCONVNEXT_KERNEL_DIR')
    assert (availability.native_sources_dir() / 'talk' / 'talk_cpu.cpp').is_file()
