"""The native-kernel loader's first-use behaviour (the kernels themselves are tested through their ops)."""

import subprocess
import sys
import types

from mrconvnext.ops import engines, native_build
from tests.limits import HANG_LIMIT_S


def test_first_build_says_what_it_does_and_a_cached_one_is_quiet(tmp_path, monkeypatch, capsys):
    """A build whose library is not in the cache announces itself on stderr; one found there does not. The
    compiler is replaced by a stub that writes the library, so nothing is compiled here."""
    monkeypatch.setenv('MRCONVNEXT_EXT_DIR', str(tmp_path))
    calls = []

    def fake_load(name, build_directory, **kwargs):
        calls.append(name)
        (tmp_path / build_directory / f'{name}.so').touch()
        return types.ModuleType(name)

    monkeypatch.setattr(native_build.import_cpp_extension(), 'load', fake_load)
    sources = [engines.native_sources_dir() / 'talk' / 'talk_cpu.cpp']
    build_dir = engines.build_root() / 'probe_ext'
    native_build.build_extension('probe_ext', sources, build_dir)
    err = capsys.readouterr().err
    assert 'building the native CPU kernels probe_ext (first use' in err and str(tmp_path) in err
    native_build.build_extension('probe_ext', sources, build_dir)
    assert capsys.readouterr().err == '' and calls == ['probe_ext', 'probe_ext']


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
