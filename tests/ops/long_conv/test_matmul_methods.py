"""The matmul methods of the long convolution ('toeplitz', 'rowdft' on the 'torch' engine): float64 exactness
against the direct convolution, the precision contract in float32 / fp16 / bf16 autocast against float64, layouts,
autograd, what 'auto' picks on CUDA, and a deployed MRConvNeXt-T on fake CUDA tensors that runs no FFT."""

import pytest
import timm
import torch
import torch.nn.functional as F
from timm.utils import reparameterize_model
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from mrconvnext.layers import MRConv1d, MRConv2d
from mrconvnext.ops import engines, long_conv1d
from mrconvnext.ops.long_conv import dispatch as long_conv_dispatch
from mrconvnext.ops.long_conv import engine_torch
from mrconvnext.ops.long_conv.engine_onnx import (
    ONNX_DFT_MAX_BATCH,
    ONNX_ROW_WIDTH,
    folded_conv2d,
    onnx_grid,
    rowdft_conv,
)
from mrconvnext.ops.long_conv.grid import row_grid
from tests.reference import shifted_sum_conv

DT = torch.float64
METHODS = ['toeplitz', 'rowdft']


def reference(x, k, zero_lag):
    """Grouped F.conv1d over the zero-padded input, float64."""
    K = k.shape[-1]
    return F.conv1d(F.pad(x, (K - 1, K - 1)), k.flip(-1).unsqueeze(1), groups=x.shape[1])[..., zero_lag:][
        ..., : x.shape[-1]
    ]


@pytest.mark.parametrize('method', METHODS)
@pytest.mark.parametrize(
    'L, K, zero_lag',
    [
        (35, 69, 34),
        (49, 97, 48),
        (24, 24, 0),
        (17, 100, 60),
        (13, 5, 4),
        (1, 1, 0),
        (2, 3, 1),
        (97, 3, 1),
        (200, 41, 0),
    ],
)
@pytest.mark.parametrize('engine', ['torch', 'onnx'])
def test_float64_matches_the_direct_convolution(method, L, K, zero_lag, engine):
    """Bidirectional and causal, shorter and longer than the sequence, prime lengths (folded with padding); the
    ONNX export's engine (the row DFT in a channels-first layout) as well."""
    x = torch.randn(2, 3, L, dtype=DT)
    k = torch.randn(3, K, dtype=DT)
    b = torch.randn(3, dtype=DT)
    y = long_conv1d(x, k, b, zero_lag=zero_lag, method=method, engine=engine)
    torch.testing.assert_close(y, reference(x, k, zero_lag) + b[:, None], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(y, shifted_sum_conv(x, k, zero_lag) + b[:, None], rtol=1e-10, atol=1e-10)
    y32 = long_conv1d(x.float(), k.float(), b.float(), zero_lag=zero_lag, method=method, engine=engine)
    torch.testing.assert_close(y32.double(), y, rtol=0, atol=5e-6 * y.abs().max().item())


@pytest.mark.parametrize('L, K, zero_lag', [(300, 599, 299), (1031, 1500, 700), (784, 40, 7), (257, 9, 8)])
def test_onnx_engine_on_long_sequences_matches_the_direct_convolution(L, K, zero_lag):
    """Past ONNX_ROW_WIDTH ** 2 positions the 'onnx' engine folds into short rows: a divisor of the length (300:
    20 x 15, 784: 49 x 16) or rows of 16 with the last one zero-padded (1031 and 257, primes); float64 against the
    grouped conv, and float32 within 5e-6 of the largest output."""
    P, Q = onnx_grid(L)
    assert P * Q >= L and Q <= ONNX_ROW_WIDTH and (P - 1) * Q < L
    x = torch.randn(2, 3, L, dtype=DT)
    k = torch.randn(3, K, dtype=DT)
    y = long_conv1d(x, k, zero_lag=zero_lag, method='rowdft', engine='onnx')
    ref = reference(x, k, zero_lag)
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)
    y32 = long_conv1d(x.float(), k.float(), zero_lag=zero_lag, method='rowdft', engine='onnx')
    torch.testing.assert_close(y32.double(), ref, rtol=0, atol=5e-6 * ref.abs().max().item())
    y = rowdft_conv(x, k.unsqueeze(0), zero_lag, grid=row_grid(L))[:, 0]  # the benchmark's square grid
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('L, K, zero_lag', [(784, 1567, 783), (1031, 1500, 700), (197, 40, 3), (300, 599, 299)])
def test_onnx_engine_row_products_by_blocks_and_by_dft_agree(L, K, zero_lag):
    """The 'onnx' engine's two forms of the Toeplitz products along the rows (a block per channel and frequency, or
    identity 4's complex DFT and the kernel's spectrum), with two kernels, in float64 against the grouped conv;
    'auto' takes the DFT at batches up to ONNX_DFT_MAX_BATCH and the blocks beyond (the same values either way)."""
    k = torch.randn(2, 3, K, dtype=DT)
    for B in (1, ONNX_DFT_MAX_BATCH + 1):
        x = torch.randn(B, 3, L, dtype=DT)
        ref = torch.stack([reference(x, k[i], zero_lag) for i in range(2)], 1)
        for rows in ('blocks', 'dft', 'auto'):
            torch.testing.assert_close(rowdft_conv(x, k, zero_lag, rows=rows), ref, rtol=1e-10, atol=1e-10)
        y32 = rowdft_conv(x.float(), k.float(), zero_lag, rows='dft')
        torch.testing.assert_close(y32.double(), ref, rtol=0, atol=5e-6 * ref.abs().max().item())
    with pytest.raises(ValueError, match="rows must be 'auto', 'blocks' or 'dft', got 'fft'"):
        rowdft_conv(x, k, zero_lag, rows='fft')


@pytest.mark.parametrize('L, K, zero_lag', [(49, 97, 48), (61, 121, 60), (30, 9, 2), (7, 13, 12), (1, 1, 0)])
def test_onnx_direct_method_is_a_conv2d_of_the_folded_sequence(L, K, zero_lag):
    """The 'onnx' engine's direct method (identity 1: one depthwise conv2d of the sequence folded into rows, zero-padded
    where the rows do not divide it, a one-sided kernel and a single position included) against grouped F.conv1d in
    float64, for stacked kernels and one kernel, each with and without a bias (long_conv1d with kernels of any
    length here: the long ones take the fold); its gradients against autograd through that reference
    (long_conv1d's backward for the direct method)."""
    x = torch.randn(2, 3, L, dtype=DT, requires_grad=True)
    k = torch.randn(2, 3, K, dtype=DT, requires_grad=True)
    b = torch.randn(3, dtype=DT)
    ref = torch.stack([reference(x, k[i], zero_lag) for i in range(2)], 1)
    torch.testing.assert_close(folded_conv2d(x, k, zero_lag), ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(folded_conv2d(x, k[0], zero_lag, b), ref[:, 0] + b.view(3, 1), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(folded_conv2d(x, k, zero_lag, b), ref + b.view(3, 1), rtol=1e-12, atol=1e-12)
    yb = long_conv1d(x, k, b, zero_lag=zero_lag, method='direct', engine='onnx')
    torch.testing.assert_close(yb, ref + b.view(3, 1), rtol=1e-12, atol=1e-12)
    y = long_conv1d(x, k, zero_lag=zero_lag, method='direct', engine='onnx')
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(ref)
    got = torch.autograd.grad(y, (x, k), g)
    want = torch.autograd.grad(ref, (x, k), g)
    for a, w in zip(got, want):
        torch.testing.assert_close(a, w, rtol=1e-12, atol=1e-12)


def test_onnx_grid_folds_into_short_rows():
    """Rows of at most ONNX_ROW_WIDTH past its square, a divisor of the length where one lies within a quarter of
    it; near the square root below (the row-DFT method's own grid)."""
    assert [onnx_grid(L) for L in (3136, 784, 300, 1031)] == [(196, 16), (49, 16), (20, 15), (65, 16)]
    assert all(onnx_grid(L) == row_grid(L) for L in (1, 49, 196, 200, 256))


@pytest.mark.parametrize('method', METHODS)
@pytest.mark.parametrize('H, W', [(7, 7), (5, 9), (12, 3), (1, 16)])
def test_channels_last_maps_and_stacked_kernels(method, H, W):
    """A flattened channels-last map (odd and non-square) with 3 kernels: every output equals its own convolution;
    one kernel's row-DFT output is channels-last like its input."""
    L = H * W
    x = torch.randn(2, 6, H, W, dtype=DT).to(memory_format=torch.channels_last).flatten(2)
    k = torch.randn(3, 6, 2 * L - 1, dtype=DT)
    y = long_conv1d(x, k, zero_lag=L - 1, method=method)
    ref = torch.stack([reference(x, k[i], L - 1) for i in range(3)], 1)
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)
    y = long_conv1d(x, k, zero_lag=L - 1, method=method, engine='onnx')
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)
    if method == 'rowdft':
        assert long_conv1d(x, k[0], zero_lag=L - 1, method=method).stride() == x.stride()


# (C, H) at ConvNeXt-T's stage sizes (fewer channels: the error does not depend on them), batch 1
STAGES = [(8, 56), (8, 28), (8, 14), (8, 7)]
# measured max |y - y64| / max |y64| at the full stage shapes (scripts/bench_longconv_gpu.py --precision):
# float32 <= 1.4e-6, fp16 <= 8.2e-4, bf16 autocast <= 5.7e-3 (half operands, float32 accumulation, half output)
TOLERANCE = {torch.float32: 5e-6, torch.float16: 2e-3, torch.bfloat16: 1e-2}


@pytest.mark.parametrize(
    'method, C, H', [(m, C, H) for C, H in STAGES for m in METHODS if m == 'rowdft' or H * H <= 1000]
)  # no 3136 x 3136 Toeplitz matrices: 'auto' never builds them
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16, torch.bfloat16])
def test_precision_against_float64(method, C, H, dtype):
    """float32 and fp16 inputs compute in their dtype; bf16 runs under CPU autocast (float32 input, bf16 products,
    the result in the input's float32, as the FFT operators return it), as a CUDA model does under bf16 autocast."""
    L = H * H
    x = torch.randn(1, C, H, H, dtype=DT).to(memory_format=torch.channels_last).flatten(2)
    k = torch.randn(C, 2 * L - 1, dtype=DT) / (2 * L) ** 0.5
    ref = reference(x, k, L - 1)
    if dtype == torch.bfloat16:
        with torch.autocast('cpu', dtype=torch.bfloat16):
            y = long_conv1d(x.float(), k.float(), zero_lag=L - 1, method=method)
    else:
        y = long_conv1d(x.to(dtype), k.to(dtype), zero_lag=L - 1, method=method)
    assert y.dtype == (torch.float32 if dtype == torch.bfloat16 else dtype)
    assert y.stride() == x.stride(), 'a channels-last input gives a channels-last output'
    err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    assert err <= TOLERANCE[dtype], err


@pytest.mark.parametrize('method', METHODS)
@pytest.mark.parametrize('channels_last', [False, True])
def test_one_kernels_output_is_laid_out_like_x_with_the_bias(method, channels_last):
    """The torch engine's products come back laid out like ``x`` for one kernel (a channels-last map stays
    channels-last, so the next LayerNorm copies nothing), as the products leave them for several (no pass over the
    ``N`` maps), the bias added, the values those of the float64 tap loop; gradients through the layout copy as
    through autograd on the reference."""
    x = torch.randn(3, 12, 5, 6, dtype=DT)
    x = (x.to(memory_format=torch.channels_last) if channels_last else x).flatten(2).requires_grad_()
    k = torch.randn(2, 12, 41, dtype=DT, requires_grad=True)
    b = torch.randn(12, dtype=DT, requires_grad=True)
    y = long_conv1d(x, k[0], b, zero_lag=20, method=method)
    ys = long_conv1d(x, k, b, zero_lag=20, method=method)
    assert y.stride() == x.stride()
    ref = torch.stack([reference(x, ki, 20) for ki in k], 1) + b[:, None]
    torch.testing.assert_close(ys, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(y, ref[:, 0], rtol=1e-12, atol=1e-12)
    g = torch.randn_like(ref)
    got = torch.autograd.grad((y * g[:, 0]).sum() + (ys * g).sum(), (x, k, b))
    want = torch.autograd.grad((ref[:, 0] * g[:, 0]).sum() + (ref * g).sum(), (x, k, b))
    for a, w in zip(got, want, strict=True):
        torch.testing.assert_close(a, w, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('method', METHODS)
def test_gradcheck(method):
    x = torch.randn(2, 2, 10, dtype=DT, requires_grad=True)
    k = torch.randn(2, 2, 13, dtype=DT, requires_grad=True)
    b = torch.randn(2, dtype=DT, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, k, b: long_conv1d(x, k, b, zero_lag=6, method=method), (x, k, b))


def test_auto_takes_the_toeplitz_product_for_short_half_cuda_convolutions_in_large_batches_only():
    big, short = long_conv_dispatch.TOEPLITZ_MIN_BATCH, long_conv_dispatch.TOEPLITZ_MAX_LENGTH
    for dtype in (torch.float16, torch.bfloat16):
        assert engines.resolve('long_conv1d', 'cuda', dtype, length=3136, batch=128) == ('fft', 'torch')
        assert engines.resolve('long_conv1d', 'cuda', dtype, length=short + 1, batch=128) == ('fft', 'torch')
        assert engines.resolve('long_conv1d', 'cuda', dtype, length=short, batch=big) == ('toeplitz', 'torch')
        assert engines.resolve('long_conv1d', 'cuda', dtype, length=49, taps=97, batch=128) == ('toeplitz', 'torch')
        assert engines.resolve('long_conv1d', 'cuda', dtype, length=196, batch=big - 1) == ('fft', 'torch')
        assert engines.resolve('long_conv1d', 'cuda', dtype, length=196) == ('fft', 'torch')  # batch not known
        assert engines.resolve('long_conv1d', 'cuda', dtype, length=196, batch=big, grad=True) == ('toeplitz', 'torch')
        assert engines.resolve('long_conv1d', 'cuda', dtype, length=short + 1, batch=big, grad=True) == ('fft', 'torch')
        assert engines.resolve('long_conv1d', 'cuda', dtype, length=196, batch=big - 1, grad=True) == ('fft', 'torch')
    assert engines.resolve('long_conv1d', 'cuda', torch.float32, length=196, batch=128) == ('fft', 'torch')
    assert engines.resolve('long_conv1d', 'cpu', torch.bfloat16)[0] == 'fft'  # the CPU is unchanged
    assert engines.resolve('long_conv1d', 'cuda', torch.bfloat16, taps=7) == ('direct', 'torch')
    with pytest.raises(ValueError, match="method='rowdft' runs on the 'torch' engine only"):
        engines.resolve('long_conv1d', 'cpu', method='rowdft', engine='native')


def test_under_compile_auto_takes_the_matmul_methods_for_large_inference_batches():
    """Traced by dynamo (``torch.compiler.is_compiling()``), the choice for large batches without a backward is the
    matmul methods' (inductor fuses their layout copies); small batches keep torch.fft, and backwards follow the
    eager rule (Toeplitz for short maps, torch.fft for long ones)."""
    choices = []

    def f(x):
        cases = ((3136, 128, False), (196, 128, False), (3136, 8, False), (3136, 128, True), (196, 128, True))
        for length, batch, grad in cases:
            choices.append(
                engines.resolve('long_conv1d', 'cuda', torch.bfloat16, length=length, batch=batch, grad=grad)
            )
        return x + 1

    torch._dynamo.reset()
    torch.compile(f, backend='eager', fullgraph=True)(torch.zeros(2))
    assert choices == [
        ('rowdft', 'torch'),
        ('toeplitz', 'torch'),
        ('fft', 'torch'),
        ('fft', 'torch'),
        ('toeplitz', 'torch'),
    ]

    def g(x):  # sizes traced symbolically: neither the batch nor the length is known, torch.fft with no guard
        choices.append(engines.resolve('long_conv1d', 'cuda', torch.bfloat16, length=x.shape[1], batch=x.shape[0]))
        return x + 1

    choices.clear()
    torch._dynamo.reset()
    compiled = torch.compile(g, backend='eager', fullgraph=True, dynamic=True)
    compiled(torch.zeros(128, 196))
    assert choices == [('fft', 'torch')]


def test_long_conv1d_tells_the_choice_whether_a_backward_follows(monkeypatch):
    """Fake CUDA tensors, bf16, a stage-3 map in a batch of TOEPLITZ_MIN_BATCH: the Toeplitz product with and without
    autograd in eager; traced by dynamo, a stage-1 map takes the row DFT without autograd and torch.fft (the package's
    FFT operator) when the input requires a gradient."""
    B, C = long_conv_dispatch.TOEPLITZ_MIN_BATCH, 16
    for L, compiling, requires_grad, expected in (
        (196, False, False, 'aten.bmm.default'),
        (196, False, True, 'aten.bmm.default'),
        (3136, True, False, 'aten.bmm.default'),
        (3136, True, True, 'mrconvnext.fft_conv.default'),
        (196, True, True, 'aten.bmm.default'),
    ):
        monkeypatch.setattr(torch.compiler, 'is_compiling', lambda compiling=compiling: compiling)
        rec = _Record()
        with FakeTensorMode():
            x = torch.randn(B, C, L, device='cuda', dtype=torch.bfloat16, requires_grad=requires_grad)
            k = torch.randn(C, 2 * L - 1, device='cuda', dtype=torch.bfloat16)
            with rec:
                long_conv1d(x, k, zero_lag=L - 1)
        assert expected in rec.ops and ('fft' in expected) == any('fft' in op for op in rec.ops), (L, sorted(rec.ops))


@pytest.mark.parametrize('method', METHODS)
def test_layers_take_the_methods(method):
    torch.manual_seed(0)
    layer2d = MRConv2d(8, (6, 5), kernel_type='fourier').double().eval()
    layer1d = MRConv1d(8, 30, kernel_type='fourier').double().eval()
    for layer, x in ((layer2d, torch.randn(2, 8, 6, 5, dtype=DT)), (layer1d, torch.randn(2, 8, 30, dtype=DT))):
        ref = layer(x)
        layer.method = method
        torch.testing.assert_close(layer(x), ref, rtol=1e-10, atol=1e-10)


class _Record(TorchDispatchMode):
    """Every ATen op called, and inside the mixers the largest tensor produced relative to the mixer's input."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()
        self.input_bytes: int | None = None
        self.worst = (0.0, '')

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.add(str(func))
        if self.input_bytes:
            for t in torch.utils._pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes() / self.input_bytes > self.worst[0]:
                    self.worst = (t.untyped_storage().nbytes() / self.input_bytes, f'{func} {tuple(t.shape)}')
        return out


def test_a_deployed_mrconvnext_t_on_cuda_under_bf16_autocast_runs_fft_and_toeplitz_products():
    """Fake CUDA tensors (no GPU needed): batch 128 at 224 px, channels-last, bf16 autocast. Stages 1-2 run
    torch.fft, stages 3-4 the Toeplitz product, and no mixer produces a tensor over 2.5x its float32 input (the
    float32 spectrum of the zero-padded sequence is about 2x)."""
    model = reparameterize_model(timm.create_model('mrconvnext_t').eval())
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    rec = _Record()
    for m in model.modules():
        if isinstance(m, MRConv2d):
            m.register_forward_pre_hook(lambda mod, a: setattr(rec, 'input_bytes', a[0].untyped_storage().nbytes()))
            m.register_forward_hook(lambda mod, a, out: setattr(rec, 'input_bytes', None))
    mode = FakeTensorMode()
    with mode:
        params = {k: mode.from_tensor(v).to('cuda') for k, v in state.items()}
        params = {k: v.to(memory_format=torch.channels_last) if v.dim() == 4 else v for k, v in params.items()}
        x = torch.randn(128, 3, 224, 224, device='cuda').to(memory_format=torch.channels_last)
        # torch.autocast('cuda') turns itself off without a visible GPU; the autocast state is set directly
        torch.set_autocast_enabled('cuda', True)
        torch.set_autocast_dtype('cuda', torch.bfloat16)
        try:
            with torch.no_grad(), rec:
                y = torch.func.functional_call(model, params, (x,))
        finally:
            torch.set_autocast_enabled('cuda', False)
    assert y.shape == (128, 1000) and y.device.type == 'cuda'
    assert 'mrconvnext.fft_conv.default' in rec.ops, sorted(rec.ops)  # its CUDA kernel: torch.fft
    assert {'aten.bmm.default', 'aten.mm.default'} & rec.ops
    assert rec.worst[0] <= 2.5, rec.worst


@pytest.mark.parametrize('method', METHODS)
def test_compile_export_onnx_and_meta(method, tmp_path):
    """A layer on the matmul methods compiles with fullgraph=True and no graph break, exports (torch.export and ONNX
    through the dynamo exporter, checked with onnxruntime) and runs on the meta device."""
    import onnxruntime

    torch.manual_seed(0)
    layer = MRConv2d(8, (6, 5), kernel_type='fourier', method=method).eval()
    x = torch.randn(2, 8, 6, 5)
    with torch.no_grad():
        ref = layer(x)
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(layer, fullgraph=True)(x), ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(torch.export.export(layer, (x,)).module()(x), ref, rtol=1e-6, atol=1e-6)
        path = tmp_path / 'layer.onnx'
        torch.onnx.export(layer, (x,), dynamo=True).save(str(path))
    session = onnxruntime.InferenceSession(str(path))
    out = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(out), ref, rtol=1e-5, atol=1e-5)
    with torch.device('meta'):
        meta = MRConv2d(8, (6, 5), kernel_type='fourier', method=method)
    assert meta(torch.empty(2, 8, 6, 5, device='meta')).shape == (2, 8, 6, 5)


@pytest.mark.parametrize('method', METHODS)
def test_compiled_training_on_the_matmul_methods_gives_eager_s_gradients(method):
    """The matmul methods' own backward (an autograd.Function) traces with fullgraph=True through dynamo and AOT
    autograd (``aot_eager``: the joint graph inductor would compile, without its code generation): a float32 training
    layer's output and the gradients of its input and parameters agree with a float64 copy on the direct method
    (grouped F.conv1d) to float32 rounding (1e-5 of the largest)."""
    import copy

    torch.manual_seed(0)
    layer = MRConv2d(8, (6, 5), kernel_type='fourier', method=method, combine='scale').train()
    ref_layer = copy.deepcopy(layer).double()
    ref_layer.method = 'direct'
    x = torch.randn(2, 8, 6, 5, requires_grad=True)
    xd = x.detach().double().requires_grad_()
    ref = ref_layer(xd)
    g = torch.randn(ref.shape, dtype=DT)
    want = torch.autograd.grad(ref, [xd, *ref_layer.parameters()], g)
    torch._dynamo.reset()
    out = torch.compile(layer, fullgraph=True, backend='aot_eager')(x)
    got = [out, *torch.autograd.grad(out, [x, *layer.parameters()], g.float())]
    for a, b in zip(got, [ref, *want], strict=True):
        assert a.dtype == torch.float32
        assert (a.double() - b).abs().max() <= 1e-5 * b.abs().max(), method


@pytest.mark.parametrize('method', METHODS)
def test_torch_func_grad_through_the_matmul_methods(method):
    """torch.func.grad through the matmul methods' own backward (as through the plain products before it) gives
    autograd's gradients through the grouped F.conv1d reference, float64."""
    x, k = torch.randn(2, 3, 20, dtype=DT), torch.randn(3, 39, dtype=DT)

    def loss(x, k):
        return long_conv1d(x, k, zero_lag=19, method=method).square().sum()

    got = torch.func.grad(loss, argnums=(0, 1))(x, k)
    xr, kr = x.clone().requires_grad_(), k.clone().requires_grad_()
    want = torch.autograd.grad(reference(xr, kr, 19).square().sum(), (xr, kr))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('method', METHODS)
def test_a_features_only_model_at_another_size_agrees_with_the_fft(method):
    """features_only mrconvnext_atto built at 32 px, deployed, run at 40 x 48 (lag remap at another width): the
    matmul methods give the FFT's feature maps in float64."""
    from mrconvnext.models import set_engine

    torch.manual_seed(0)
    model = timm.create_model('mrconvnext_atto', img_size=32, features_only=True).double().eval()
    model = reparameterize_model(model)
    x = torch.randn(2, 3, 40, 48, dtype=DT)
    with torch.no_grad():
        assert set_engine(model, method='fft') > 0
        ref = model(x)
        set_engine(model, method=method)
        out = model(x)
    for a, b in zip(out, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize('method', ['fft', 'direct', *METHODS])
@pytest.mark.parametrize('stacked', [False, True])
@pytest.mark.parametrize('L, K, zero_lag', [(20, 39, 19), (13, 60, 40), (16, 5, 0), (7, 7, 3)])
def test_the_vjp_without_autograd_equals_autograd(method, stacked, L, K, zero_lag):
    """long_conv1d_vjp (each method's own backward, usable inside operators and under dispatch modes) equals autograd
    through the grouped F.conv1d reference, float64, kernels longer than the sequence (cropped) included; autograd
    through long_conv1d (the matmul methods' registered backward) too."""
    from mrconvnext.ops.long_conv import long_conv1d_vjp

    x = torch.randn(3, 4, L, dtype=DT).requires_grad_()
    k = torch.randn(*((2,) if stacked else ()), 4, K, dtype=DT).requires_grad_()
    y = long_conv1d(x, k, zero_lag=zero_lag, method=method)
    g = torch.randn_like(y)
    ref = torch.stack([reference(x, ki, zero_lag) for ki in k], 1) if stacked else reference(x, k, zero_lag)
    want = torch.autograd.grad(ref, (x, k), g)
    for a, b in zip(torch.autograd.grad(y, (x, k), g), want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    with _Record():  # under a dispatch mode, as FlopCounterMode would be
        got = long_conv1d_vjp(g, x.detach(), k.detach(), zero_lag, method=method)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    # one gradient asked for: the other is None, and the one computed is the same
    only_k = long_conv1d_vjp(g, x.detach(), k.detach(), zero_lag, method=method, need_x=False)
    only_x = long_conv1d_vjp(g, x.detach(), k.detach(), zero_lag, method=method, need_kernel=False)
    assert only_k[0] is None and only_x[1] is None
    torch.testing.assert_close(only_k[1], want[1], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(only_x[0], want[0], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('taps', [97, 91, 31])  # 2L - 1 taps, fewer, and few enough to pad
def test_the_toeplitz_product_copies_no_matrix(taps):
    """The Toeplitz product of N kernels builds each channel's N matrices stacked as they lie (a flip of their
    windows) and copies none of them, forward and backward, however the taps are padded: the only copies are of
    the kernels and of single maps, never N C L^2 elements. Its values against the direct convolution (float64,
    1e-10)."""
    from tests.dispatch import RecordOps

    B, C, L, N = 4, 8, 49, 3
    x, k = torch.randn(B, C, L, dtype=torch.float64), torch.randn(N, C, taps, dtype=torch.float64)
    g = torch.randn(B, N, C, L, dtype=torch.float64)
    z = taps // 2
    with RecordOps() as rec:
        y = engine_torch.toeplitz_conv(x, k, z)
        grads = engine_torch.toeplitz_conv_vjp(g, x, k, z)
    assert not rec.copies_of(N * C * L * L // 2), rec.copies_of(N * C * L * L // 2)
    xd, kd = x.clone().requires_grad_(), k.clone().requires_grad_()
    ref = torch.stack([reference(xd, kd[i], z) for i in range(N)], 1)
    torch.testing.assert_close(y, ref.detach(), rtol=1e-10, atol=1e-10)
    for got, want in zip(grads, torch.autograd.grad(ref, (xd, kd), g), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('method', METHODS)
def test_the_matmul_methods_backward_scatters_nothing_and_keeps_autocasts_dtype(method):
    """Training on a matmul method under bf16 autocast (on the CPU, which runs the same code as CUDA): the backward
    is the method's own vjp, so it runs no scatter (autograd through the Toeplitz gather would take it back with an
    accumulating index_put, which serializes on a GPU's atomics), its products are bf16 GEMMs like the forward's
    (the result comes back in x's float32), autograd saves only the kernels and the bf16 copy of x the products
    read (half the bytes of the float32 x), and the gradients agree with float64 autograd through the reference to
    bf16 rounding (1e-2 of the largest)."""
    x = torch.randn(64, 3, 49, requires_grad=True)
    k = torch.randn(2, 3, 97, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        with torch.autocast('cpu', dtype=torch.bfloat16):
            y = long_conv1d(x, k, zero_lag=48, method=method)
    assert y.dtype == torch.float32
    assert [t.dtype for t in saved if t.shape == x.shape] == [torch.bfloat16]
    nbytes = [t.untyped_storage().nbytes() for t in saved]
    assert sum(nbytes) <= 2 * x.numel() + k.untyped_storage().nbytes(), nbytes
    g = torch.randn(y.shape)
    calls = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            calls.append((str(func), {a.dtype for a in tensors}, max((a.numel() for a in tensors), default=0)))
            return func(*args, **(kwargs or {}))

    with Record():
        grads = torch.autograd.grad(y, (x, k), g.to(y.dtype))
    names = [name for name, _, _ in calls]
    assert not [n for n in names if 'index_put' in n or 'index_add' in n or 'scatter' in n], names
    products = [(d, n) for name, d, n in calls if name.split('.')[1] in ('mm', 'bmm', 'matmul') and n >= x.numel()]
    assert products and all(d == {torch.bfloat16} for d, _ in products), products
    xd, kd = x.detach().double().requires_grad_(), k.detach().double().requires_grad_()
    want = torch.autograd.grad(torch.stack([reference(xd, ki, 48) for ki in kd], 1), (xd, kd), g.double())
    for a, b in zip(grads, want, strict=True):
        assert a.dtype == torch.float32
        assert (a.double() - b).abs().max() <= 1e-2 * b.abs().max(), method
