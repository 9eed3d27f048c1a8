import functools
import warnings

import pytest
import torch
import torch.nn.functional as F

from mrconvnext.ops import availability, circular_kernel, engines, fft_size, long_conv1d
from mrconvnext.ops.long_conv import engine_torch, fft_length, kernel_spectrum, long_conv1d_vjp
from mrconvnext.ops.long_conv import operators as lc_ops
from mrconvnext.ops.native_build import cxx_compiler
from tests.reference import shifted_sum_conv


def _full_conv1d_reference(x, kernel, zero_lag):
    """The full linear convolution by F.conv1d (float64), cropped to the outputs 0..L-1."""
    B, C, L = x.shape
    K = kernel.shape[-1]
    full = F.conv1d(F.pad(x, (K - 1, K - 1)), kernel.flip(-1).unsqueeze(1), groups=C)  # length L + K - 1
    return full[..., zero_lag : zero_lag + L]


@pytest.fixture(params=['native', 'torch'])
def engine(request):
    """Which FFT engine runs on the CPU: the fused native kernels (where they build) or torch.fft chunks."""
    if request.param == 'native' and _fused_available() is not None:
        pytest.skip(f'fused kernels unavailable: {_fused_available()}')
    return request.param


@pytest.mark.parametrize('method', ['fft', 'direct', 'auto'])
@pytest.mark.parametrize('L', [1, 16, 17])
@pytest.mark.parametrize('K_rel', ['shorter', 'equal', 'longer'])
@pytest.mark.parametrize('mode', ['causal', 'bidirectional'])
def test_matches_conv1d_reference(method, L, K_rel, mode, engine):
    reach = {'shorter': max(1, L // 3), 'equal': L, 'longer': 2 * L + 3}[K_rel]
    K, zero_lag = (reach, 0) if mode == 'causal' else (2 * reach - 1, reach - 1)
    x = torch.randn(2, 3, L, dtype=torch.float64)
    k = torch.randn(3, K, dtype=torch.float64)
    bias = torch.randn(3, dtype=torch.float64)
    y = long_conv1d(x, k, bias, zero_lag=zero_lag, method=method, engine='auto' if method == 'direct' else engine)
    ref = _full_conv1d_reference(x, k, zero_lag) + bias[:, None]
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(y, shifted_sum_conv(x, k, zero_lag) + bias[:, None], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('method', ['fft', 'direct'])
def test_asymmetric_and_stacked_kernels(method):
    x = torch.randn(2, 4, 23, dtype=torch.float64)
    k = torch.randn(3, 4, 11, dtype=torch.float64)
    for zero_lag in (0, 2, 10):
        y = long_conv1d(x, k, zero_lag=zero_lag, method=method)
        assert y.shape == (2, 3, 4, 23)
        for i in range(3):
            torch.testing.assert_close(y[:, i], shifted_sum_conv(x, k[i], zero_lag), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('stacked', [False, True])
def test_inference_path_in_small_chunks(monkeypatch, stacked):
    """The torch.fft engine works in chunks of channels; force chunks of one or two rows."""
    x = torch.randn(3, 5, 21, dtype=torch.float64)
    k = torch.randn(*((2,) if stacked else ()), 5, 41, dtype=torch.float64)
    bias = torch.randn(5, dtype=torch.float64)
    for elems in (1, 90):  # n = 42 here: one row, then two rows per chunk
        monkeypatch.setattr(engine_torch, 'CHUNK_ELEMS', elems)
        y = long_conv1d(x, k, bias, zero_lag=20, method='fft', engine='torch')
        kernels = k.unbind(0) if stacked else [k]
        for i, ki in enumerate(kernels):
            yi = y[:, i] if stacked else y
            torch.testing.assert_close(yi, shifted_sum_conv(x, ki, 20) + bias[:, None], rtol=1e-10, atol=1e-10)


def test_spectrum_cache_argument_is_deprecated_and_ignored():
    x = torch.randn(2, 3, 30, dtype=torch.float64)
    k = torch.randn(3, 59, dtype=torch.float64)
    cache = {}
    with pytest.warns(DeprecationWarning, match='spectrum_cache'):
        y = long_conv1d(x, k, zero_lag=29, method='fft', spectrum_cache=cache)
    torch.testing.assert_close(y, shifted_sum_conv(x, k, 29), rtol=1e-10, atol=1e-10)
    assert cache == {}


def test_float32_accuracy_long_sequence():
    L = 3136
    x = torch.randn(2, 3, L)
    k = torch.randn(3, 2 * L - 1) / L**0.5
    y = long_conv1d(x, k, zero_lag=L - 1, method='fft')
    ref = _full_conv1d_reference(x.double(), k.double(), L - 1)
    assert (y.double() - ref).abs().max() <= 1e-4 * ref.abs().max()


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_half_inputs_compute_in_float32(dtype):
    x = torch.randn(2, 3, 40).to(dtype)
    k = torch.randn(3, 79)
    y = long_conv1d(x, k, zero_lag=39, method='fft')
    assert y.dtype == dtype
    ref = shifted_sum_conv(x.double(), k.double(), 39)
    # only the final rounding to the half dtype remains
    torch.testing.assert_close(y.double(), ref, rtol=2 * torch.finfo(dtype).eps, atol=1e-2 * ref.abs().max().item())
    with torch.autocast('cpu', dtype=torch.bfloat16):
        y2 = long_conv1d(x.float(), k, zero_lag=39, method='fft')
    assert y2.dtype == torch.float32
    torch.testing.assert_close(y2.double(), shifted_sum_conv(x.double(), k.double(), 39), rtol=1e-5, atol=1e-5)


def _saved_and_grads(x, k, zero_lag, g, dtype, engine='auto'):
    """``long_conv1d(method='fft')`` of float32 ``x`` under CPU autocast to ``dtype``: the tensors autograd saves
    and the gradients of ``x`` and ``k`` for the output gradient ``g``."""
    x, k = x.clone().requires_grad_(), k.clone().requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        with torch.autocast('cpu', dtype=dtype):
            y = long_conv1d(x, k, zero_lag=zero_lag, method='fft', engine=engine)
    assert y.dtype == torch.float32
    return saved, torch.autograd.grad(y, (x, k), g)


def test_under_bf16_autocast_the_fft_backward_keeps_x_in_bf16(engine):
    """Training under bf16 autocast keeps a bf16 copy of a float32 input for the backward (half the bytes, as an
    autocast convolution saves its input), while the forward reads it in float32. ``grad_x`` does not read it: it
    matches float64 autograd through the tap loop to float32 rounding (1e-5 of its largest). ``grad_k`` is that of
    the input rounded to bf16: it matches float64 autograd at ``x.bfloat16()`` to 1e-5, and misses the exact one by
    about bf16's rounding."""
    x = torch.randn(3, 4, 50).transpose(1, 2).contiguous().transpose(1, 2)  # channels-last, as a map's
    k = torch.randn(4, 99) / 10
    g = torch.randn(3, 4, 50)
    saved, (gx, gk) = _saved_and_grads(x, k, 49, g, torch.bfloat16, engine)
    assert [t.dtype for t in saved if t.shape == x.shape] == [torch.bfloat16]
    assert sum(t.untyped_storage().nbytes() for t in saved) == 2 * x.numel() + 4 * k.numel()
    assert gx.dtype == torch.float32 and gx.stride() == x.stride()
    # frozen kernels: the backward reads no value of x, so no copy is made
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        with torch.autocast('cpu', dtype=torch.bfloat16):
            long_conv1d(x.clone().requires_grad_(), k, zero_lag=49, method='fft', engine=engine)
    assert [t.dtype for t in kept if t.shape == x.shape] == [torch.float32]

    def grads(xd):
        xd, kd = xd.double().requires_grad_(), k.double().requires_grad_()
        return torch.autograd.grad(shifted_sum_conv(xd, kd, 49), (xd, kd), g.double())

    exact_x, exact_k = grads(x)
    _, rounded_k = grads(x.bfloat16())
    assert (gx.double() - exact_x).abs().max() <= 1e-5 * exact_x.abs().max()
    assert (gk.double() - rounded_k).abs().max() <= 1e-5 * rounded_k.abs().max()
    assert (gk.double() - exact_k).abs().max() <= 1e-2 * exact_k.abs().max()


def test_under_fp16_autocast_the_fft_backward_keeps_x_in_float32():
    """float16 would overflow on an input the float32 forward takes (here 1e5): under fp16 autocast the backward
    keeps ``x`` as it is, and both gradients match float64 autograd to float32 rounding."""
    x = torch.randn(2, 3, 40) * 1e5
    k = torch.randn(3, 79) / 10
    g = torch.randn(2, 3, 40)
    saved, (gx, gk) = _saved_and_grads(x, k, 39, g, torch.float16)
    assert [t.dtype for t in saved if t.shape == x.shape] == [torch.float32]
    xd, kd = x.double().requires_grad_(), k.double().requires_grad_()
    want = torch.autograd.grad(shifted_sum_conv(xd, kd, 39), (xd, kd), g.double())
    for got, ref in zip((gx, gk), want, strict=True):
        assert torch.isfinite(got).all()
        assert (got.double() - ref).abs().max() <= 1e-5 * ref.abs().max()


@pytest.mark.parametrize('op', ['fft_conv', 'fft_conv_torch'])
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
@pytest.mark.parametrize('N, with_bias', [(1, True), (3, False)])
def test_a_half_input_is_cast_as_it_is_padded(op, dtype, N, with_bias):
    """The FFT operators take a half-precision ``x`` with float32 kernels and compute in float32: bit for bit what
    casting ``x`` (and the output gradient) to float32 first and the results back gives, forward and backward; the
    torch.fft engine casts while it pads (``padded_rfft``), the native kernels after a cast."""
    fwd, bwd = getattr(lc_ops, op), getattr(lc_ops, f'{op}_backward')
    x = torch.randn(2, 5, 37).to(dtype).transpose(1, 2).contiguous().transpose(1, 2)  # channels-last
    k = torch.randn(N, 5, 51)
    b = torch.randn(5, requires_grad=True) if with_bias else None
    y = fwd(x, k, 20, b)
    assert y.dtype == dtype
    y_cast = fwd(x.float(), k, 20, b)
    assert torch.equal(y, y_cast.to(dtype))
    # and against the float64 tap loop: the float32 result rounded once to the half dtype
    ref = torch.stack([shifted_sum_conv(x.double(), k[i].double(), 20) for i in range(N)], 1)
    ref = ref if b is None else ref + b.detach().double()[:, None]
    tol = torch.finfo(dtype).eps * ref.abs() + 1e-5 * ref.abs().max()
    assert ((y.double() - ref).abs() <= tol).all()
    if with_bias:  # through autograd: the bias's gradient, summed in float32 from the half-precision gradient
        g_y = torch.randn_like(y)
        (gb,) = torch.autograd.grad(y, b, g_y)
        (ref_b,) = torch.autograd.grad(y_cast, b, g_y.float())
        assert gb.dtype == torch.float32 and torch.equal(gb, ref_b)
    g = torch.randn(2, N, 5, 37).to(dtype)
    gx, gk = bwd(g, x, k, 20, True, True)
    ref_x, ref_k = bwd(g.float(), x.float(), k, 20, True, True)
    assert gx.dtype == dtype and gk.dtype == torch.float32
    assert torch.equal(gx, ref_x.to(dtype)) and torch.equal(gk, ref_k)


@pytest.mark.parametrize('n', [37, 80])
def test_padded_rfft_equals_the_transform_of_the_cast_input(n):
    """``padded_rfft`` of a bfloat16 ``x`` (a strided view) equals ``rfft`` of ``x`` cast to float32 and padded to
    ``n`` by torch (``n`` = L too: nothing to pad), bit for bit."""
    x = torch.randn(3, 37, 4).to(torch.bfloat16).transpose(1, 2)
    out = engine_torch.padded_rfft(x, n, torch.float32)
    assert out.dtype == torch.complex64
    assert torch.equal(out, torch.fft.rfft(x.float(), n=n))


def _innermost(t: torch.Tensor) -> tuple[int, int]:
    """``(dimension counted from the last, stride)`` of ``t``'s innermost dimension of more than one element."""
    d = min((d for d in range(t.dim()) if t.shape[d] > 1), key=t.stride)
    return d - t.dim(), t.stride(d)


@pytest.mark.parametrize('channels_last', [False, True])
def test_the_cuda_fft_path_casts_a_half_input_while_it_pads_it(channels_last):
    """On fake CUDA tensors, the FFT convolution of a bfloat16 map copies ``x`` and the output gradient once each
    into their padded float32 buffers (``copy_``) and writes zeros to the padding alone, with no padding copy
    (``constant_pad_nd``, which fills the whole tensor first), forward or backward (its vjp: autograd's engine needs a
    real GPU), with no separate cast to float32 (``_to_copy``). A channels-last map's buffer holds the positions
    outermost: each copy into it keeps the channels innermost on both sides (no transpose). The output and ``x``'s
    gradient come back in bfloat16. The inverse transforms of maps (the output, ``x``'s gradient) are unnormalized:
    ATen's CUDA transform applies a norm in a pass of its own over its output; the ``1 / n`` is on the kernels'
    spectra, which are normalized instead."""
    from torch._library.custom_ops import OPDEFS
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Names(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen, self.copies, self.norms = [], [], []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._schema.name.startswith('mrconvnext::'):  # what the operator runs (the fake mode would not)
                with self:
                    return OPDEFS[func._schema.name]._init_fn(*args, **(kwargs or {}))
            name = func._schema.name
            if name.startswith('aten::') and func.has_kernel_for_dispatch_key(
                torch._C.DispatchKey.CompositeImplicitAutograd
            ):
                with self:  # what it is made of (torch.fft.rfft pads with constant_pad_nd)
                    out = func.decompose(*args, **(kwargs or {}))
                if out is not NotImplemented:
                    return out
            out = func(*args, **(kwargs or {}))
            self.seen.append((func._schema.name, tuple(t.shape for t in args if isinstance(t, torch.Tensor))))
            if func._schema.name == 'aten::copy_':
                self.copies.append(((args[0].dtype, args[1].dtype), *(_innermost(t) for t in args[:2])))
            if func._schema.name.startswith('aten::_fft_'):  # (name, normalization (0: none), output shape)
                self.norms.append((func._schema.name, args[2], tuple(out.shape)))
            return out

    with FakeTensorMode():
        x = torch.randn(4, 56, 8, device='cuda', dtype=torch.bfloat16).mT if channels_last else None
        x = torch.randn(4, 8, 56, device='cuda', dtype=torch.bfloat16) if x is None else x
        k = torch.randn(8, 111, device='cuda')
        names = Names()
        with names:
            y = long_conv1d(x, k, zero_lag=55, method='fft', engine='torch')
            gx, gk = long_conv1d_vjp(torch.ones_like(x), x, k, 55, method='fft', engine='torch')
    assert y.dtype == gx.dtype == torch.bfloat16 and gk.dtype == torch.float32
    # the kernels' spectrum (forward and backward), x's (forward and backward), the output gradient's
    assert sum(name == 'aten::_fft_r2c' for name, _ in names.seen) == 5
    ops = [name for name, _ in names.seen]
    assert 'aten::constant_pad_nd' not in ops, ops
    casts = [s for name, s in names.seen if name == 'aten::_to_copy' and s[0].numel() == 4 * 8 * 56]
    assert not casts, names.seen
    # x forward and backward, the output gradient: each copied into its buffer with the same innermost dimension
    # (the channels of a channels-last map, else the positions)
    inner = -2 if channels_last else -1
    pads = [c[1:] for c in names.copies if c[0] == (torch.float32, torch.bfloat16)]  # into the float32 buffers
    assert pads == [((inner, 1), (inner, 1))] * 3, names.copies
    zeros = [s[0] for name, s in names.seen if name == 'aten::zero_']
    assert [(z.numel(), z[-1]) for z in zeros] == [(4 * 8 * 56, 56)] * 3, zeros  # the padding alone (n = 112)
    maps = [(name, norm) for name, norm, shape in names.norms if shape[0] == 4]  # the batch of 4: maps, not kernels
    assert sorted(maps) == [('aten::_fft_c2r', 0)] * 2 + [('aten::_fft_r2c', 0)] * 3, names.norms
    kernels = [norm for name, norm, shape in names.norms if name == 'aten::_fft_r2c' and shape[0] != 4]
    assert kernels == [2, 2], names.norms  # by n


def test_chunks_cover_the_tensor_once(monkeypatch):
    for shape, n in (((3, 5, 7), 1 << 17), ((4, 7, 9), 1 << 20), ((16, 96, 10), 6272), ((2, 3, 4), 1 << 30)):
        for branches in (1, 5):
            seen = torch.zeros(shape[:2], dtype=torch.int64)
            for bs, cs in engine_torch.chunks(torch.empty(shape), n, branches):
                seen[bs, cs] += 1
                rows = (bs.stop - bs.start) * (cs.stop - cs.start)
                assert rows == 1 or rows * n * branches <= engine_torch.CHUNK_ELEMS
            assert (seen == 1).all()
    # off the CPU: whole batch items, one block up to GPU_CHUNK_ELEMS (branches x channels x FFT size per item)
    assert list(engine_torch.chunks(torch.empty(4, 6, 10, device='meta'), 16)) == [(slice(0, 4), slice(0, 6))]
    monkeypatch.setattr(engine_torch, 'GPU_CHUNK_ELEMS', 3 * 6 * 16 * 5)
    got = list(engine_torch.chunks(torch.empty(7, 6, 10, device='meta'), 16, 5))
    assert got == [(slice(0, 3), slice(0, 6)), (slice(3, 6), slice(0, 6)), (slice(6, 7), slice(0, 6))]


def test_gradcheck_both_methods():
    x = torch.randn(2, 2, 9, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 7, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, dtype=torch.float64, requires_grad=True)
    for method in ('fft', 'direct'):
        f = functools.partial(long_conv1d, zero_lag=3, method=method)
        assert torch.autograd.gradcheck(f, (x, k, b))


@pytest.mark.parametrize('stacked', [False, True])
@pytest.mark.parametrize('zero_lag', [0, 4, 10])
def test_fft_backward_matches_direct_and_gradcheck(stacked, zero_lag, engine):
    """The FFT path's hand-written backward vs gradcheck and vs autograd through F.conv1d (float64);
    with L = 9 and 11 taps, zero_lag = 10 also crops lags the sequence cannot reach."""
    x = torch.randn(3, 2, 9, dtype=torch.float64, requires_grad=True)
    k = torch.randn(*((3,) if stacked else ()), 2, 11, dtype=torch.float64, requires_grad=True)
    f = functools.partial(long_conv1d, zero_lag=zero_lag, method='fft')
    assert torch.autograd.gradcheck(f, (x, k))
    y = f(x, k)
    w = torch.randn_like(y)
    grads = torch.autograd.grad((y * w).sum(), (x, k))
    ref = torch.autograd.grad((long_conv1d(x, k, zero_lag=zero_lag, method='direct') * w).sum(), (x, k))
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


def _smooth(q):
    for p in (2, 3, 5, 7):
        while q % p == 0:
            q //= p
    return q == 1


def test_fft_size_policy():
    for n in (1, 97, 391, 1567, 6271, 6272, 10007):
        m = fft_size(n)
        assert m >= n and _smooth(m)
        assert not any(_smooth(q) for q in range(n, m)), 'not the smallest 7-smooth size'


def test_circular_kernel_layout():
    k = torch.arange(1.0, 6.0).view(1, 5)  # lags -2..2 with zero_lag 2
    c = circular_kernel(k, 2, 8)
    assert c.tolist() == [[3.0, 4.0, 5.0, 0.0, 0.0, 0.0, 1.0, 2.0]]


@pytest.mark.parametrize(
    'args, err',
    [
        ((torch.randn(2, 3), torch.randn(3, 5)), ValueError),  # wrong rank
        ((torch.randn(2, 3, 8), torch.randn(4, 5)), ValueError),  # channel mismatch
        ((torch.ones(2, 3, 8, dtype=torch.int64), torch.randn(3, 5)), TypeError),  # integer input
        ((torch.randn(2, 3, 0), torch.randn(3, 5)), ValueError),  # empty sequence
        ((torch.randn(2, 3, 8), torch.randn(3, 0)), ValueError),  # empty kernel
    ],
)
def test_bad_inputs(args, err):
    with pytest.raises(err):
        long_conv1d(*args, zero_lag=0)


def test_bad_zero_lag_method_and_engine():
    x, k = torch.randn(1, 2, 8), torch.randn(2, 3)
    with pytest.raises(ValueError, match='zero_lag'):
        long_conv1d(x, k, zero_lag=3)
    with pytest.raises(
        ValueError, match=r"method must be one of \('auto', 'fft', 'direct', 'toeplitz', 'rowdft'\), got 'cufft'"
    ):
        long_conv1d(x, k, method='cufft')
    with pytest.raises(ValueError, match=r"engine must be one of \('auto', 'native', 'torch', 'flashfft', 'onnx'\)"):
        long_conv1d(x, k, engine='cuda')
    with pytest.raises(ValueError, match="method='direct' runs on the 'torch' engine only"):
        long_conv1d(x, k, method='direct', engine='native')
    with pytest.raises(ValueError, match='backend must be one of'):
        long_conv1d(x, k, backend='cufft')
    with pytest.raises(ValueError, match='give one or the other'):
        long_conv1d(x, k, backend='fft', method='direct')
    if x.device.type == 'cpu':
        with pytest.raises(RuntimeError, match='native FFT kernels run CPU tensors only'):
            long_conv1d(x.to('meta'), k.to('meta'), method='fft', engine='native')


@pytest.mark.parametrize(
    ('backend', 'method', 'engine'),
    [('fft', 'fft', 'auto'), ('direct', 'direct', 'auto'), ('auto', 'auto', 'auto'), ('flashfft', 'fft', 'flashfft')],
)
def test_backend_keyword_is_deprecated_and_means_the_same(backend, method, engine):
    """The old ``backend=`` spelling warns and computes exactly what its ``method`` / ``engine`` computes."""
    x, k = torch.randn(2, 3, 40), torch.randn(3, 79)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)  # flashfftconv is not installed: its one-time fallback note
        with pytest.warns(DeprecationWarning, match=f'backend={backend!r} is deprecated'):
            old = long_conv1d(x, k, zero_lag=39, backend=backend)
        new = long_conv1d(x, k, zero_lag=39, method=method, engine=engine)
    assert torch.equal(old, new)


# ------------------------------------------------------------------------- fused CPU kernel (kernels/fftconv)


def _fused_available() -> str | None:
    """Why the fused kernel cannot exist here (None: it must build)."""
    if not torch.backends.mkl.is_available():
        return 'torch without MKL'
    if cxx_compiler() is None:
        return 'no C++ compiler'
    return None


needs_fused = pytest.mark.skipif(_fused_available() is not None, reason=str(_fused_available()))


@needs_fused
def test_fused_kernel_builds():
    """Where torch has MKL and a compiler exists, the extension must build (no silent fallback)."""
    module = availability.build_native(availability.FFTCONV_EXT)
    assert hasattr(module, 'fft_conv_forward')


@needs_fused
@pytest.mark.parametrize('layout', ['contiguous', 'channels_last'])
@pytest.mark.parametrize('N', [1, 3])
@pytest.mark.parametrize('block', [1, 3, 1000])
@pytest.mark.parametrize('with_bias', [False, True])
@pytest.mark.parametrize('L', [20, 23])  # channels-last copies go in 4 x 4 tiles: 23 leaves ragged positions
def test_fused_kernel_matches_float64_reference(layout, N, block, with_bias, L):
    module = availability.build_native(availability.FFTCONV_EXT)
    B, C, K, zero_lag = 3, 7, 31, 12  # asymmetric kernel reaching past both ends
    x64 = torch.randn(B, C, L, dtype=torch.float64)
    k64 = torch.randn(N, C, K, dtype=torch.float64)
    b64 = torch.randn(C, dtype=torch.float64) if with_bias else None
    n = fft_length(L, K, zero_lag)
    x = x64.float() if layout == 'contiguous' else x64.float().mT.contiguous().mT
    out = torch.full((B, N, C, L), float('nan'))
    if layout == 'channels_last':  # strided output too: each (b, i) plane laid out (L, C)
        out = torch.full((B, N, L, C), float('nan')).transpose(2, 3)
    bias = None if b64 is None else b64.float()
    module.fft_conv_forward(x, kernel_spectrum(k64.float(), zero_lag, L)[0].contiguous(), n, bias, out, block)
    for i in range(N):
        ref = shifted_sum_conv(x64, k64[i], zero_lag) + (0 if b64 is None else b64[:, None])
        # float32 FFTs of size n: error ~ eps * log2(n) * (|x| |k| summed over taps)
        torch.testing.assert_close(out[:, i].double(), ref, rtol=0, atol=1e-5 * ref.abs().max().item())


@needs_fused
@pytest.mark.parametrize('layout', ['contiguous', 'channels_last'])
@pytest.mark.parametrize('N', [1, 3])
@pytest.mark.parametrize('block', [1, 3, 1000])
@pytest.mark.parametrize('needs', [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize('L', [20, 23])
def test_fused_backward_matches_float64_autograd(layout, N, block, needs, L):
    """The native backward against float64 autograd through the direct (F.conv1d) path."""
    module = availability.build_native(availability.FFTCONV_EXT)
    B, C, K, zero_lag = 3, 7, 31, 12
    n = fft_length(L, K, zero_lag)
    x64 = torch.randn(B, C, L, dtype=torch.float64, requires_grad=True)
    k64 = torch.randn(N, C, K, dtype=torch.float64, requires_grad=True)
    g64 = torch.randn(B, N, C, L, dtype=torch.float64)
    ref_x, ref_k = torch.autograd.grad(long_conv1d(x64, k64, zero_lag=zero_lag, method='direct'), (x64, k64), g64)
    x, g = x64.detach().float(), g64.float()
    if layout == 'channels_last':
        x, g = x.mT.contiguous().mT, g.transpose(2, 3).contiguous().transpose(2, 3)
    k_f = kernel_spectrum(k64.detach().float(), zero_lag, L)[0].contiguous()
    grad_x, grad_k_f = module.fft_conv_backward(x, k_f, n, g, *needs, block)
    if needs[0]:
        assert grad_x.stride() == x.stride()  # laid out like x
        torch.testing.assert_close(grad_x.double(), ref_x, rtol=0, atol=1e-5 * ref_x.abs().max().item())
    else:
        assert grad_x is None
    if needs[1]:
        # the spectrum of the circular kernel's gradient; the taps sit at lag mod n (see circular_kernel)
        grad_circ = torch.fft.irfft(grad_k_f, n=n).double()
        grad_k = torch.cat([grad_circ[..., n - zero_lag :], grad_circ[..., : K - zero_lag]], dim=-1)
        torch.testing.assert_close(grad_k, ref_k, rtol=0, atol=1e-5 * ref_k.abs().max().item())
    else:
        assert grad_k_f is None


@needs_fused
def test_long_conv1d_float32_runs_the_fused_kernel(monkeypatch):
    """float32 CPU inputs go through the fused kernel (inference, training forward and backward); values and
    gradients match the float64 direct convolution."""
    module = availability.build_native(availability.FFTCONV_EXT)
    calls = []

    class Spy:
        def __getattr__(self, name):
            calls.append(name)
            return getattr(module, name)

    load = availability.load_native
    monkeypatch.setattr(
        availability, 'load_native', lambda ext: Spy() if ext == availability.FFTCONV_EXT else load(ext)
    )
    x64 = torch.randn(2, 4, 50, dtype=torch.float64)
    k64 = torch.randn(2, 4, 99, dtype=torch.float64)
    with torch.no_grad():
        y = long_conv1d(x64.float(), k64[0].float(), zero_lag=49, method='fft')
    assert calls == ['fft_conv_forward']
    torch.testing.assert_close(y.double(), shifted_sum_conv(x64, k64[0], 49), rtol=0, atol=1e-4)
    x = x64.float().requires_grad_()
    k = k64.float().requires_grad_()
    y = long_conv1d(x, k, zero_lag=49, method='fft')
    w = torch.randn_like(y)
    gx, gk = torch.autograd.grad((y * w).sum(), (x, k))
    assert calls == ['fft_conv_forward', 'fft_conv_forward', 'fft_conv_backward']
    x64.requires_grad_()
    k64.requires_grad_()
    ref = long_conv1d(x64, k64, zero_lag=49, method='direct')
    rgx, rgk = torch.autograd.grad((ref * w.double()).sum(), (x64, k64))
    torch.testing.assert_close(y.double(), ref, rtol=0, atol=1e-4)
    torch.testing.assert_close(gx.double(), rgx, rtol=0, atol=1e-4)
    torch.testing.assert_close(gk.double(), rgk, rtol=0, atol=1e-3)


@pytest.fixture
def fresh_engines():
    """Availability forgotten before and after the test, so a simulated failure stays inside it."""
    engines.reset(native=True)
    yield engines
    engines.reset(native=True)


def test_fused_kernel_build_failure_falls_back_once(monkeypatch, fresh_engines):
    def broken(ext, verbose=False):
        raise RuntimeError('simulated build failure')

    monkeypatch.setattr(availability, 'build_native', broken)
    x = torch.randn(2, 3, 30)
    k = torch.randn(3, 59)
    with pytest.warns(RuntimeWarning, match='mrconvnext_fftconv_cpu failed'):
        y = long_conv1d(x, k, zero_lag=29, method='fft')
    torch.testing.assert_close(y.double(), shifted_sum_conv(x.double(), k.double(), 29), rtol=0, atol=1e-4)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        long_conv1d(x, k, zero_lag=29, method='fft')  # warned once only


@needs_fused
def test_fused_kernel_rejects_bad_arguments():
    module = availability.build_native(availability.FFTCONV_EXT)
    x = torch.randn(2, 3, 10)
    k_f = torch.randn(1, 3, 11, dtype=torch.complex64)
    out = torch.empty(2, 1, 3, 10)
    with pytest.raises(RuntimeError, match='float32 or float64'):
        module.fft_conv_forward(x.half(), k_f, 20, None, out.half(), 4)
    with pytest.raises(RuntimeError, match='ComplexDouble'):  # k_f's precision must match x's
        module.fft_conv_forward(x.double(), k_f, 20, None, out.double(), 4)
    with pytest.raises(RuntimeError, match='k_f must be'):
        module.fft_conv_forward(x, k_f[..., :5], 20, None, out, 4)
    with pytest.raises(RuntimeError, match='out must be'):
        module.fft_conv_forward(x, k_f, 20, None, out[:, :, :2], 4)
    with pytest.raises(RuntimeError, match='need L <= n'):
        module.fft_conv_forward(x, torch.randn(1, 3, 3, dtype=torch.complex64), 4, None, out, 4)
    with pytest.raises(RuntimeError, match='grad_y must be'):
        module.fft_conv_backward(x, k_f, 20, out[:, :, :2], True, True, 4)


def test_dfti_plan_cache_is_bounded_and_frees_its_descriptors():
    """The fused kernels' per-thread DFTI plan cache (kernels/fftconv/dfti_plans.h) holds at most 32 (n, rows) plans
    per thread and precision: convolving at many more transform sizes than that frees the oldest descriptors, so
    the live count stays bounded, and the results stay right (float64 against the tap loop)."""
    if _fused_available() is not None:
        pytest.skip(f'fused kernels unavailable: {_fused_available()}')
    mod = availability.load_native(availability.FFTCONV_EXT)
    created0, freed0 = mod.plan_counts()
    k = torch.randn(3, 9, dtype=torch.float64)
    sizes = set()
    for L in range(20, 400, 4):
        x = torch.randn(1, 3, L, dtype=torch.float64)
        y = long_conv1d(x, k, zero_lag=4, method='fft')
        sizes.add(fft_length(L, 9, 4))
        if L % 100 == 0:
            torch.testing.assert_close(y, shifted_sum_conv(x, k, 4), rtol=1e-10, atol=1e-10)
    created, freed = mod.plan_counts()
    assert len(sizes) > 40
    assert created - created0 >= 2 * (len(sizes) - 32)  # at most 32 of them were cached before (fwd + bwd each)
    assert freed - freed0 > 0
    assert created - freed <= 2 * 32 * 2 * max(torch.get_num_threads(), 1) + 2 * 32  # both precisions, every thread


def _per_channel_reference(x: torch.Tensor, filters: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """Shared filters by one depthwise F.conv1d per channel: ``x (B, C, L)``, ``filters (N, M, K)``, channel ``c``
    convolved with filter ``c % M`` -> ``(B, N, C, L)``."""
    C, L = x.shape[1], x.shape[-1]
    N, M, K = filters.shape
    xp = F.pad(x, (K - 1 - zero_lag, zero_lag))
    return torch.stack(
        [
            torch.cat([F.conv1d(xp[:, c : c + 1], filters[n, c % M].flip(-1).view(1, 1, K)) for c in range(C)], 1)
            for n in range(N)
        ],
        1,
    )[..., :L]


SHARED_METHODS = [('fft', 'native'), ('fft', 'torch'), ('direct', 'auto'), ('toeplitz', 'auto'), ('rowdft', 'auto')]


@pytest.mark.parametrize(('method', 'engine'), SHARED_METHODS)
@pytest.mark.parametrize('stacked', [False, True])
@pytest.mark.parametrize(('G', 'M', 'K', 'zero_lag'), [(3, 2, 9, 4), (2, 3, 5, 0), (4, 1, 41, 20)])
def test_shared_filters_equal_a_loop_of_depthwise_convs(method, engine, stacked, G, M, K, zero_lag):
    """M filters for C = G M channels (channel g M + m takes filter m), every method: values and the gradients of x,
    the filters and the bias against autograd through one F.conv1d per channel, in float64; long_conv1d_vjp gives
    the same gradients. K = 41 on L = 13: taps longer than the sequence."""
    B, L = 2, 13
    x = torch.randn(B, G * M, L, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2 if stacked else 1, M, K, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(G * M, dtype=torch.float64, requires_grad=True)
    y = long_conv1d(x, k if stacked else k[0], bias, zero_lag=zero_lag, method=method, engine=engine)
    ref = _per_channel_reference(x, k, zero_lag) + bias.view(-1, 1)
    ref = ref if stacked else ref[:, 0]
    assert y.shape == ref.shape
    torch.testing.assert_close(y, ref, rtol=1e-11, atol=1e-11)
    g = torch.randn_like(ref)
    got, want = torch.autograd.grad(y, (x, k, bias), g), torch.autograd.grad(ref, (x, k, bias), g)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    gx, gk = long_conv1d_vjp(g, x.detach(), k.detach() if stacked else k.detach()[0], zero_lag, method=method,
                             engine=engine)  # fmt: skip
    torch.testing.assert_close(gx, want[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(gk, want[1] if stacked else want[1][0], rtol=1e-10, atol=1e-10)
    none, gk = long_conv1d_vjp(g, x.detach(), k.detach() if stacked else k.detach()[0], zero_lag, method=method,
                               engine=engine, need_x=False)  # fmt: skip
    assert none is None
    torch.testing.assert_close(gk, want[1] if stacked else want[1][0], rtol=1e-10, atol=1e-10)


def test_shared_filters_make_the_channels_a_gemm_dimension():
    """The Toeplitz method with M filters for G M channels builds M matrices, not G M, and multiplies each with the
    B G columns of its channels: one batched product of M filters' N matrices stacked, (N L) x L, with L x (B G)
    operands (each read once for the N kernels, not copied per kernel)."""
    from tests.dispatch import RecordOps

    B, G, M, N, L = 4, 3, 2, 2, 16
    x, k = torch.randn(B, G * M, L), torch.randn(N, M, 2 * L - 1)
    with RecordOps() as rec:
        long_conv1d(x, k, zero_lag=L - 1, method='toeplitz')
    products = [shapes for name, shapes in rec.calls if name.startswith(('aten.bmm', 'aten.mm', 'aten.matmul'))]
    assert products == [[(M, N * L, L), (M, L, B * G)]], products


def test_shared_filters_bad_count():
    with pytest.raises(ValueError, match=r'M = 6 or a divisor of it'):
        long_conv1d(torch.randn(2, 6, 8), torch.randn(4, 3), zero_lag=0)
