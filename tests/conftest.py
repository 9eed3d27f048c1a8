import contextlib
import io
import os
import shutil
import tempfile

import pytest

# Inductor's C++ for the CPU as scalar loops (what it generates where the CPU has no vector ISA it supports): it
# compiles in about 60 % of the time of the vectorized code, and the compile tests are mostly that compile. The
# deployed model's compile test (tests/compile/test_compile.py) switches this machine's vector ISA back on. Set before
# torch._inductor reads it; the tests' subprocesses inherit it.
os.environ.setdefault('TORCHINDUCTOR_VEC_ISA_OK', '0')

import torch  # noqa: E402

# Triton's interpreter runs the Triton kernels on CPU tensors; it is chosen when the kernels are defined (the first
# import of a Triton kernel module of mrconvnext.ops), so it is set here, before any test imports them. With a GPU the kernels are
# compiled and the CUDA suite (pytest -m cuda) runs them.
if not torch.cuda.is_available():
    os.environ.setdefault('TRITON_INTERPRET', '1')


def _interpreter_patches_once_per_launch() -> None:
    """Triton's interpreter (3.6 to 3.8) swaps ``triton.language``'s builtins for its NumPy ones when a launch starts
    and swaps them back when it ends; it also redoes the swap at every call of a ``@triton.jit`` helper inside the
    launch (``inspect.getmembers`` over the language modules each time: a fifth of the interpreted TaLK tests'
    time). Inside a launch the modules are already swapped, so the helper's swap changes nothing: it is skipped
    there. The launch's own swap and its undoing are untouched; a Triton without these internals runs as shipped."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return
    patch_lang, scope = getattr(interpreter, '_patch_lang', None), getattr(interpreter, '_LangPatchScope', None)
    if patch_lang is None or scope is None or not hasattr(tl.core, 'is_builtin'):
        return

    def once_per_launch(fn):
        if not tl.core.is_builtin(tl.load) and not tl.core.is_builtin(tl.core.load):  # inside a launch
            return scope()
        return patch_lang(fn)

    interpreter._patch_lang = once_per_launch


# Inductor's and Triton's caches of this run go to a folder of its own, removed when the session ends: a run neither
# reads another run's compiled code nor leaves hundreds of MB behind. xdist's workers inherit the folder from the
# controller and share it (inductor's caches take concurrent processes, as torchrun's ranks do): a kernel or
# precompiled header that one worker built is not built again by the other. Set before torch._inductor or triton read
# them; the tests' subprocesses inherit them.
_OWN_CACHE = 'MRCONVNEXT_TEST_CACHE' not in os.environ or 'PYTEST_XDIST_WORKER' not in os.environ
if _OWN_CACHE:
    os.environ['MRCONVNEXT_TEST_CACHE'] = tempfile.mkdtemp(prefix='mrconvnext-tests-')
_CACHE = os.environ['MRCONVNEXT_TEST_CACHE']
os.environ['TORCHINDUCTOR_CACHE_DIR'] = os.path.join(_CACHE, 'inductor')
os.environ['TRITON_CACHE_DIR'] = os.path.join(_CACHE, 'triton')
# Inductor compiles each CPU kernel in this process rather than in a pool of compile workers: the pool's workers each
# import torch (seconds of CPU per test process), and with both cores already busy running xdist's workers the pool
# runs nothing in parallel.
os.environ.setdefault('TORCHINDUCTOR_COMPILE_THREADS', '1')

# xdist workers share the cores: each takes its share of torch's threads instead of all of them (oversubscribed
# threads made a two-worker run slower than one worker).
_WORKERS = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
if _WORKERS > 1:
    torch.set_num_threads(max(1, torch.get_num_threads() // _WORKERS))


def _precompiled_headers_in_own_cache() -> None:
    """Inductor writes its precompiled C++ headers (130-160 MB each, one per set of compile flags) under
    ``/tmp/torchinductor_<user>`` whatever ``TORCHINDUCTOR_CACHE_DIR`` says (torch 2.14's codecache reads the default
    folder for them): a fresh test run left two there, about 290 MB. They go to this run's cache folder instead, removed with it.
    The folder is read when a header is built, so setting it before any compile is enough; a torch without these
    names keeps its own folder."""
    try:
        from torch._inductor import codecache
    except ImportError:
        return
    if hasattr(codecache, '_HEADER_DIR') and hasattr(codecache, '_HEADER_LOCK_DIR'):
        codecache._HEADER_DIR = os.path.join(_CACHE, 'inductor', 'precompiled_headers')
        codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, 'locks')


_precompiled_headers_in_own_cache()

# after the cache folders above: it imports triton
if os.environ.get('TRITON_INTERPRET') == '1':
    _interpreter_patches_once_per_launch()


def pytest_configure(config):
    """Under xdist, the controller builds the native CPU kernels (both at once, where they are not in the cache yet)
    before the workers start: otherwise the first worker to collect compiles them one after the other while the other
    waits on the build lock. A failed build is left to the tests that need it to report."""
    if 'PYTEST_XDIST_WORKER' in os.environ or not getattr(config.option, 'numprocesses', None):
        return
    from mrconvnext import engines
    from mrconvnext.ops import availability
    from mrconvnext.ops.native_build import cxx_compiler

    if not availability.native_disabled() and cxx_compiler() is not None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            engines.build_all()


def pytest_sessionfinish(session, exitstatus):
    if _OWN_CACHE:  # the controller, after its workers have finished
        shutil.rmtree(_CACHE, ignore_errors=True)


@pytest.fixture(autouse=True)
def _fresh_seed(request):
    """A different seed per test (derived from its name), so inputs are random but reproducible."""
    import zlib

    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    yield


_GROUP_LOST = (
    "--dist loadgroup ignored this test's xdist_group mark: with this pytest, pytest-xdist spreads a group over the "
    "workers (pytest-xdist issue 1386), and each worker would rebuild the group's session fixtures; install pytest<9.2 "
    'as the [test] extra says'
)
_LOST = pytest.StashKey[bool]()


# The files whose tests take the longest (pytest --durations), run first: xdist hands work out in
# collection order, and a long test taken up last leaves the other worker idle at the end of the run.
_LONG_FIRST = [
    'compile/test_compile.py',
    'tools/test_gpu_check.py',
    'tools/test_export.py',
    'compile/test_families.py',
    'ops/talk/test_engine_triton.py',
    'ops/light_conv/test_engine_triton.py',
    'tools/test_timm_scripts.py',
    'tools/test_bench_speed.py',
    'ops/test_native_build.py',
    'tools/test_gpu_profile.py',
]


@pytest.hookimpl(trylast=True)  # after xdist's hook, which writes the group into the node id
def pytest_collection_modifyitems(config, items):
    """``-m triton`` selects the Triton kernels' tests: the engine_triton test files and every test parametrized
    with the 'triton' engine (the interpreter without a GPU). Under ``--dist loadgroup``, a grouped test whose node
    id did not take its group fails at setup with the reason instead of running ungrouped."""
    for item in items:
        params = getattr(getattr(item, 'callspec', None), 'params', {})
        if item.path.name == 'test_engine_triton.py' or any(
            isinstance(v, str) and v == 'triton' for v in params.values()
        ):
            item.add_marker(pytest.mark.triton)
        if config.getoption('loadgroup', False) and item.get_closest_marker('xdist_group') and '@' not in item.nodeid:
            item.stash[_LOST] = True
    tests = os.path.join(os.path.dirname(__file__), '')
    rank = {os.path.join(tests, name): i for i, name in enumerate(_LONG_FIRST)}
    items.sort(key=lambda item: rank.get(str(item.path), len(rank)))  # stable: the rest keep their order


def pytest_runtest_setup(item):
    if item.stash.get(_LOST, False):
        pytest.fail(_GROUP_LOST, pytrace=False)
