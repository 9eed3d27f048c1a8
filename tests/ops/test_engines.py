"""The resolver (mrconvnext.ops.engines): what 'auto' picks for each operator, device, dtype and size, the errors for
bad or unavailable choices, the deprecated ``backend`` spelling, and the ``python -m mrconvnext.engines`` report."""

import warnings

import pytest
import torch

from mrconvnext.engines import report as cli_report  # the CLI module prints it
from mrconvnext.ops import availability, engines
from mrconvnext.ops.light_conv import dispatch as light_conv_dispatch
from mrconvnext.ops.long_conv import dispatch as long_conv_dispatch
from mrconvnext.ops.native_build import cxx_compiler
from mrconvnext.ops.talk import dispatch as talk_dispatch


def _choice(*args) -> tuple[str, str]:
    """The plan's ``(method, engine)``."""
    return tuple(long_conv_dispatch.long_conv_plan(*args)[:2])


NATIVE = torch.backends.mkl.is_available() and cxx_compiler() is not None


@pytest.fixture
def fresh():
    """Availability forgotten before and after the test."""
    engines.reset(native=True)
    yield
    engines.reset(native=True)


def test_long_convolutions_choose_by_taps_device_and_dtype():
    auto = long_conv_dispatch.DIRECT_MAX_TAPS
    assert engines.resolve('long_conv1d', 'cpu', taps=auto) == ('direct', 'torch')
    assert engines.resolve('long_conv1d', 'cpu', taps=auto + 1) == ('fft', 'native' if NATIVE else 'torch')
    assert engines.resolve('long_conv1d', 'cuda', taps=3136) == ('fft', 'torch')  # cuFFT through torch.fft
    # half precision on CUDA without flashfftconv: torch.fft but short maps in large batches
    # (tests/ops/long_conv/test_matmul_methods.py)
    assert engines.resolve('long_conv1d', 'cuda', torch.bfloat16, taps=3136, batch=128) == ('fft', 'torch')
    # a small forward on CUDA (ConvNeXt-T's deployed third stage at batch 1): the direct convolution, not with a
    # backward to come (tests/ops/long_conv/test_dispatch.py)
    small = dict(length=196, taps=391, batch=1, channels=384)
    assert engines.resolve('long_conv1d', 'cuda', torch.bfloat16, **small) == ('direct', 'torch')
    assert engines.resolve('long_conv1d', 'cuda', torch.bfloat16, grad=True, **small) == ('fft', 'torch')
    assert engines.resolve('long_conv1d', 'cuda', torch.bfloat16, method='fft', taps=3136) == ('fft', 'torch')
    assert engines.resolve('long_conv1d', 'cpu', method='fft', engine='torch', taps=7) == ('fft', 'torch')
    assert engines.resolve('long_conv1d', 'cpu', engine='torch', taps=7) == ('direct', 'torch')
    if NATIVE:
        assert engines.resolve('long_conv1d', 'cpu', engine='native', taps=7) == ('fft', 'native')  # no direct form
    with pytest.raises(RuntimeError, match='native FFT kernels run CPU tensors only'):
        engines.resolve('long_conv1d', 'cuda', engine='native')


def test_talk_and_dynamic_conv():
    expected_cpu = 'native' if cxx_compiler() is not None else 'torch'
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)  # the fallback note where nothing builds
        assert engines.resolve('talk1d', 'cpu') == ('-', expected_cpu)
        assert engines.resolve('talk2d', 'cpu', engine='reference') == ('-', 'reference')
    assert engines.resolve('talk1d', 'meta') == ('-', 'torch')
    cuda_triton = 'triton' if availability.triton_unavailable('cuda') is None else 'torch'
    assert engines.resolve('dynamic_conv1d', 'cuda') == ('-', cuda_triton)
    assert engines.resolve('dynamic_conv1d', 'cpu') == ('-', 'torch')
    with pytest.raises(RuntimeError, match='native TaLK kernels unavailable for cuda'):
        engines.resolve('talk1d', 'cuda', engine='native')


@pytest.mark.parametrize(
    'call, match',
    [
        (lambda: engines.resolve('talk3d', 'cpu'), r"resolve: op must be one of \('long_conv1d'"),
        (lambda: engines.resolve('talk1d', 'cpu', engine='cuda'), r"talk: engine must be one of \('auto', 'native'"),
        (lambda: engines.resolve('long_conv1d', 'cpu', method='wavelet'), r"method must be one of \('auto', 'fft'"),
        (
            lambda: engines.resolve('dynamic_conv1d', 'cpu', engine='cuda'),
            r"engine must be one of \('auto', 'torch', 'tr",
        ),
        (lambda: availability.build_native('mrconvnext_nope'), r"unknown native extension 'mrconvnext_nope'"),
    ],
)
def test_bad_choices_are_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_disabled_native_kernels_fall_back_with_one_warning(monkeypatch, fresh):
    monkeypatch.setenv('MRCONVNEXT_DISABLE_NATIVE', '1')
    assert availability.load_native(availability.TALK_EXT) is None and not availability.native_available(
        availability.FFTCONV_EXT
    )
    assert engines.resolve('long_conv1d', 'cpu', taps=3136) == ('fft', 'torch')
    assert engines.resolve('branch_conv_bn_sum', 'cpu')[1].startswith('none')
    with pytest.warns(RuntimeWarning, match=r'no native TaLK kernel for cpu tensors \(disabled by MRCONVNEXT_DISABLE'):
        assert talk_dispatch.talk_engine('cpu') == 'torch'
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert talk_dispatch.talk_engine('cpu') == 'torch'  # warned once only
    with pytest.raises(RuntimeError, match='disabled by MRCONVNEXT_DISABLE_NATIVE'):
        talk_dispatch.talk_engine('cpu', 'native')


@pytest.mark.parametrize(
    'family, backend, expected',
    [
        ('long_conv', 'fft', ('fft', 'auto')),
        ('long_conv', 'direct', ('direct', 'auto')),
        ('long_conv', 'auto', ('auto', 'auto')),
        ('long_conv', 'flashfft', ('fft', 'flashfft')),
        ('talk', 'native', ('auto', 'native')),
        ('talk', 'reference', ('auto', 'reference')),
    ],
)
def test_the_old_backend_keyword_maps_to_method_and_engine(family, backend, expected):
    with pytest.warns(DeprecationWarning, match=f'owner: backend={backend!r} is deprecated'):
        assert engines.from_backend('owner', family, backend, 'auto', 'auto') == expected


def test_the_report_names_every_operator_and_the_build_state():
    text = cli_report()
    long = ('long_conv1d (L=3136, 3136 taps)', 'long_conv1d (L=196, 196 taps)', 'long_conv1d (L=3136, 7 taps)')
    for op in (*long, 'branch_conv_bn_sum', 'talk1d', 'talk2d', 'dynamic_conv1d', 'light_conv1d'):
        assert sum(line.startswith(op) for line in text.splitlines()) == 4, op  # cpu / cuda x float32 / bfloat16
    assert f'cache:   {availability.build_root()}' in text and availability.TALK_EXT in text
    lines = text.splitlines()
    line = next(x for x in lines if x.startswith('long_conv1d (L=3136, 7 taps)') and ' cpu ' in x)
    assert line.split()[-2:] == ['direct', 'torch']
    for op, method in ((long[0], 'fft'), (long[1], 'toeplitz')):
        line = next(x for x in lines if x.startswith(op) and ' cuda ' in x and 'bfloat16' in x)
        assert line.split()[-2:] == [method, 'torch']


def test_the_engines_command_prints_the_report(capsys):
    from mrconvnext import engines as engines_cli

    assert engines_cli.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith('mrconvnext engines') and 'talk2d' in out and 'cache:' in out


@pytest.mark.skipif(not NATIVE, reason='needs a C++ compiler and an MKL build of torch')
def test_build_ahead_of_time_names_the_libraries(capsys):
    """``--build`` leaves both extensions in the cache (built there already or now) and says where."""
    from mrconvnext import engines as engines_cli

    status = engines_cli.main(['--build'])
    out = capsys.readouterr()
    assert status == 0, out.err[-3000:]
    for ext in (availability.TALK_EXT, availability.FFTCONV_EXT):
        line = next(x for x in out.out.splitlines() if x.startswith(f'{ext}: '))
        assert line.endswith('.so') and str(availability.build_root()) in line
        assert f'{ext}: built ({ext}-' in out.out


def test_build_fails_loudly_where_native_kernels_are_off(monkeypatch, capsys):
    from mrconvnext import engines as engines_cli

    monkeypatch.setenv('MRCONVNEXT_DISABLE_NATIVE', '1')
    assert engines_cli.build_all() == 1
    assert 'disabled by MRCONVNEXT_DISABLE_NATIVE' in capsys.readouterr().err


def test_auto_resolves_to_onnx_forms_only_under_onnx_export(monkeypatch):
    """While torch.onnx.export traces, 'auto' picks the standard-op forms; torch.export alone, an explicit engine and
    an untraced call keep their operators."""
    from torch.onnx._internal.exporter import _flags

    def during(onnx: bool, exporting: bool):
        monkeypatch.setattr(_flags, '_is_onnx_exporting', onnx)
        monkeypatch.setattr(torch.compiler, '_is_exporting_flag', exporting)
        return (
            _choice('cpu', torch.float32, 3136, 3136, 1567, 'auto', 'auto'),
            _choice('cpu', torch.float32, 196, 196, 97, 'auto', 'auto'),
            _choice('cpu', torch.float32, 3136, 7, 3, 'auto', 'auto'),
            _choice('cpu', torch.float32, 3136, 3136, 1567, 'fft', 'auto')[0],
            talk_dispatch.talk_engine('cpu', 'auto') == 'onnx',
            light_conv_dispatch.dynamic_conv_engine('cpu', 'auto'),
            light_conv_dispatch.dynamic_conv_engine('cpu', 'torch'),
        )

    onnx = during(True, True)
    assert onnx[:3] == (('rowdft', 'onnx'), ('rowdft', 'onnx'), ('direct', 'torch'))
    assert _choice('cpu', torch.float32, 49, 97, 48, 'auto', 'onnx') == ('direct', 'onnx')  # a short map: folded
    assert onnx[3] == 'fft' and onnx[4] and onnx[5:] == ('onnx', 'torch')
    choice = _choice
    assert choice('cpu', torch.float32, 3136, 3136, 1567, 'auto', 'onnx') == ('rowdft', 'onnx')  # asked for
    assert choice('cpu', torch.float32, 3136, 3136, 1567, 'toeplitz', 'onnx') == ('toeplitz', 'torch')
    with pytest.raises(ValueError, match="engine='onnx' runs the matmul and direct methods, got method='fft'"):
        choice('cpu', torch.float32, 3136, 3136, 1567, 'fft', 'onnx')
    for off in (during(False, True), during(True, False), during(False, False)):  # torch.export alone, or not tracing
        assert off[0][0] == 'fft' and off[1][0] == 'fft' and off[5] == 'torch'
        assert not off[4]  # the native kernel, or 'torch' where it does not build
