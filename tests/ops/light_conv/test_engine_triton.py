"""The Triton DynamicConv and LightConv kernels (:mod:`mrconvnext.ops.light_conv.engine_triton`) under Triton's
interpreter, against float64 naive loops (values and gradients through autograd), and compiled for sm_90 without a
GPU."""

import json
import textwrap

import pytest
import torch

from mrconvnext.layers import DynamicConv1d, DynamicConv2d, LightConv2d
from mrconvnext.ops import availability, dynamic_conv1d, dynamic_softmax_conv1d, engines, light_conv1d
from mrconvnext.ops.light_conv import dispatch as light_conv_dispatch
from tests.hopper import assert_fits_hopper, compile_for_hopper
from tests.limits import run_compiled_triton
from tests.reference import lags

triton_cpu = pytest.mark.skipif(
    availability.triton_unavailable('cpu') is not None, reason=str(availability.triton_unavailable('cpu'))
)


def naive_softmax_conv(x, logits, drop, causal, softmax=True):
    """float64, differentiable: ``y[b, c, t] = sum_k w[b, t, h(c), k] x[b, c, t - lag_k]``, a loop over positions and
    taps, ``w = softmax(logits) * drop``; x ``(B, C, L)``, logits ``(B, L, H, K)``."""
    w = torch.softmax(logits.double(), dim=-1) if softmax else logits.double()
    if drop is not None:
        w = w * drop.double()
    B, C, L = x.shape
    H, K = logits.shape[2:]
    w = w.repeat_interleave(C // H, dim=2)  # (B, L, C, K)
    rows = []
    for t in range(L):
        acc = torch.zeros(B, C, dtype=torch.float64)
        for k, lag in enumerate(lags(K, causal)):
            if 0 <= t - lag < L:
                acc = acc + w[:, t, :, k] * x[:, :, t - lag].double()
        rows.append(acc)
    return torch.stack(rows, dim=-1)


# (B, L, C, H, K, causal): odd L, K = 1, even K, K longer than L, one head, many heads of one channel
CASES = [
    (2, 13, 8, 2, 5, False),
    (1, 9, 6, 3, 4, False),
    (2, 7, 4, 1, 1, False),
    (1, 5, 12, 3, 9, True),
    (2, 4, 6, 2, 11, False),
    (1, 17, 48, 3, 15, False),
    (1, 6, 5, 5, 3, True),
]


def _inputs(case, dtype, channels_last, drop):
    B, L, C, H, K, causal = case
    x = torch.randn(B, L, C, dtype=dtype).transpose(1, 2) if channels_last else torch.randn(B, C, L, dtype=dtype)
    logits = (torch.randn(B, L, H, K) * 2).to(dtype)
    mult = (torch.rand(B, L, H, K) > 0.3).to(torch.float32) / 0.7 if drop else None
    return x, logits, mult, causal


@triton_cpu
@pytest.mark.parametrize('case', CASES)
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16])
@pytest.mark.parametrize('channels_last', [True, False])
@pytest.mark.parametrize('drop', [False, True])
def test_softmax_conv_against_float64_loops(case, dtype, channels_last, drop):
    """Values, dx and dlogits. Tolerances: float32 1e-5; fp16 operands (rounded once at the output, accumulation in
    float32) 2e-3 relative to the largest magnitude."""
    x, logits, mult, causal = _inputs(case, dtype, channels_last, drop)
    x.requires_grad_()
    logits.requires_grad_()
    y = dynamic_softmax_conv1d(x, logits, causal=causal, dropconnect=mult, engine='triton')
    assert y.dtype == dtype and y.shape == x.shape and y.transpose(1, 2).is_contiguous()
    g = torch.randn_like(y)
    dx, dlogits = torch.autograd.grad(y, (x, logits), g)
    assert dx.dtype == dtype and dlogits.dtype == dtype
    xr, lr = x.detach().double().requires_grad_(), logits.detach().double().requires_grad_()
    yr = naive_softmax_conv(xr, lr, mult, causal)
    rdx, rdl = torch.autograd.grad(yr, (xr, lr), g.double())
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    for got, ref in ((y, yr), (dx, rdx), (dlogits, rdl)):
        scale = ref.abs().max().item() + 1e-3
        torch.testing.assert_close(got.double(), ref, rtol=0, atol=tol * scale)


@triton_cpu
@pytest.mark.parametrize('case', CASES[:5])
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16, torch.float64])
def test_normalized_weights_engine_triton(case, dtype):
    """``dynamic_conv1d(engine='triton')`` (weights given, no softmax): values and gradients against float64 loops."""
    x, logits, _, causal = _inputs(case, dtype, True, False)
    w = torch.softmax(logits.float(), -1).to(dtype).transpose(1, 2).requires_grad_()  # (B, H, L, K)
    x.requires_grad_()
    y = dynamic_conv1d(x, w, causal=causal, engine='triton')
    g = torch.randn_like(y)
    dx, dw = torch.autograd.grad(y, (x, w), g)
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    yr = naive_softmax_conv(xr, wr.transpose(1, 2), None, causal, softmax=False)
    rdx, rdw = torch.autograd.grad(yr, (xr, wr), g.double())
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3}[dtype]
    for got, ref in ((y, yr), (dx, rdx), (dw, rdw)):
        torch.testing.assert_close(got.double(), ref, rtol=0, atol=tol * (ref.abs().max().item() + 1e-3))


@triton_cpu
def test_gradcheck_float64():
    x = torch.randn(2, 6, 7, dtype=torch.float64, requires_grad=True)
    logits = torch.randn(2, 7, 2, 4, dtype=torch.float64, requires_grad=True)
    mult = (torch.rand(2, 7, 2, 4) > 0.25).double() / 0.75
    for causal in (False, True):

        def fn(a, b, causal=causal):
            return dynamic_softmax_conv1d(a, b, causal=causal, dropconnect=mult, engine='triton')

        # fast mode (a random projection of both Jacobians, finite differences against the registered backward):
        # under the interpreter the per-element mode took 90 s for the same check
        assert torch.autograd.gradcheck(fn, (x, logits), fast_mode=True)


@triton_cpu
def test_nan_logits_poison_exactly_what_they_weigh():
    """A NaN logit makes its (position, head) weights NaN, as torch.softmax does: NaN outputs, input gradients and
    logit gradients where the float64 reference has them, equal values elsewhere. -inf logits are weights of 0."""
    B, L, C, H, K = 1, 9, 6, 2, 3
    x = torch.randn(B, C, L, requires_grad=True)
    logits = torch.randn(B, L, H, K)
    logits[0, 4, 1, 2] = float('nan')
    logits[0, 2, 0, 0] = float('-inf')
    logits.requires_grad_()
    y = dynamic_softmax_conv1d(x, logits, engine='triton')
    g = torch.randn_like(y)
    got = (y, *torch.autograd.grad(y, (x, logits), g))
    xr, lr = x.detach().double().requires_grad_(), logits.detach().double().requires_grad_()
    yr = naive_softmax_conv(xr, lr, None, False)
    ref = (yr, *torch.autograd.grad(yr, (xr, lr), g.double()))
    for a, b in zip(got, ref):
        assert torch.equal(a.isnan(), b.isnan())
        torch.testing.assert_close(a.double(), b, rtol=0, atol=1e-5, equal_nan=True)
    assert y[0, 3:6, 4].isnan().all() and not y[0, :3].isnan().any()


@triton_cpu
def test_operators_registered_with_autograd():
    """Schema and autograd registration (fake tensors and AOT dispatch need compiled kernels: tests/cuda runs the
    full opcheck)."""
    from mrconvnext.ops.light_conv import engine_triton as dt

    utils = ('test_schema', 'test_autograd_registration')
    x = torch.randn(2, 11, 8, requires_grad=True)
    logits = torch.randn(2, 11, 2, 5, requires_grad=True)
    mult = torch.rand(2, 11, 2, 5)
    for drop in (None, mult):
        for softmax in (True, False):
            torch.library.opcheck(dt.dynamic_conv_triton, (x, logits, drop, 2, softmax), test_utils=utils)
    y, lse = dt.dynamic_conv_triton(x.detach(), logits.detach(), mult, 2, True)
    args = (torch.randn_like(y), x.detach(), logits.detach(), mult, lse, 2, True, True, True)
    torch.library.opcheck(dt.dynamic_conv_triton_backward, args, test_utils=utils)


def test_engine_resolution():
    assert light_conv_dispatch.dynamic_conv_engine('cpu', 'auto') == 'torch'  # 'auto' never interprets
    assert light_conv_dispatch.dynamic_conv_engine('cpu', 'torch') == 'torch'
    with pytest.raises(RuntimeError, match='Triton DynamicConv kernels unavailable for meta'):
        light_conv_dispatch.dynamic_conv_engine('meta', 'triton')
    with pytest.raises(ValueError, match="engine must be one of \\('auto', 'torch', 'triton', 'onnx'\\)"):
        light_conv_dispatch.dynamic_conv_engine('cpu', 'cuda')
    if availability.triton_unavailable('cuda') is None:
        assert light_conv_dispatch.dynamic_conv_engine('cuda', 'auto') == 'triton'


def _layer_engines_agree(cls, causal: bool) -> None:
    """``cls`` (a 2-D mixer with ``engine``): 'triton' equals 'torch' (with a bias, DropConnect off), forward and
    backward, and keeps a channels-last input's layout."""
    torch.manual_seed(0)
    a = cls(16, (5, 7), kernel_size=7, num_heads=4, causal=causal, engine='torch', bias=True)
    b = cls(16, (5, 7), kernel_size=7, num_heads=4, causal=causal, engine='triton', bias=True)
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        a.bias.normal_()
        b.bias.copy_(a.bias)
    x = torch.randn(2, 16, 5, 7).contiguous(memory_format=torch.channels_last).requires_grad_()
    ya, yb = a(x), b(x)
    assert yb.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(yb, ya, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(ya)
    ga = torch.autograd.grad(ya, [x, *a.parameters()], g)
    gb = torch.autograd.grad(yb, [x, *b.parameters()], g)
    for u, v in zip(ga, gb, strict=True):
        torch.testing.assert_close(v, u, rtol=1e-5, atol=1e-5)


@triton_cpu
@pytest.mark.parametrize('causal', [False, True])
def test_layer_engines_agree_and_dropconnect_uses_the_drawn_multipliers(causal):
    """DynamicConv2d: engine='triton' equals engine='torch' (no DropConnect), forward and backward, and keeps a
    channels-last input's layout; with DropConnect its output is the functional op with the same multipliers."""
    _layer_engines_agree(DynamicConv2d, causal)

    layer = DynamicConv1d(8, 5, 2, engine='triton', weight_dropout=0.4, causal=causal).train()
    x1 = torch.randn(2, 8, 13)
    torch.manual_seed(7)
    y = layer(x1)
    torch.manual_seed(7)
    logits = layer.logits(x1)
    mult = torch.empty(logits.shape).bernoulli_(0.6).div_(0.6)
    assert (mult == 0).any()
    ref = naive_softmax_conv(x1.double(), logits.double(), mult, causal)
    torch.testing.assert_close(y.double(), ref, rtol=0, atol=1e-5)
    with torch.no_grad():
        layer.eval()
        assert torch.equal(layer(x1), layer(x1))  # no DropConnect in eval


@triton_cpu
@pytest.mark.parametrize('case', [*CASES, (2, 70, 8, 2, 5, False)])  # 70 positions: three blocks of partials
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize('channels_last', [True, False])
def test_light_conv_against_float64_loops(case, dtype, channels_last):
    """``light_conv1d(engine='triton')``: weights (H, K) shared by every position (the DynamicConv kernels with
    SHARED). Values, dx and dweight against the float64 loop with the weights repeated at every position; the output
    is channels-last. Tolerances: float64 1e-12, float32 1e-5, fp16 operands 2e-3 relative to the largest magnitude
    (the weight gradient sums over B L positions: its float32 partials per block of positions are summed in float32).
    """
    x, logits, _, causal = _inputs(case, dtype, channels_last, False)
    B, L, _, H, K, _ = case
    w = torch.softmax(torch.randn(H, K, dtype=torch.float64) * 2, -1).to(dtype).requires_grad_()
    x.requires_grad_()
    y = light_conv1d(x, w, num_heads=H, causal=causal, engine='triton')
    assert y.dtype == dtype and y.shape == x.shape and y.transpose(1, 2).is_contiguous()
    g = torch.randn_like(y)
    dx, dw = torch.autograd.grad(y, (x, w), g)
    assert dx.dtype == dtype and dw.dtype == dtype and dw.shape == (H, K)
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    yr = naive_softmax_conv(xr, wr.expand(B, L, H, K), None, causal, softmax=False)
    rdx, rdw = torch.autograd.grad(yr, (xr, wr), g.double())
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3}[dtype]
    for got, ref in ((y, yr), (dx, rdx), (dw, rdw)):
        torch.testing.assert_close(got.double(), ref, rtol=0, atol=tol * (ref.abs().max().item() + 1e-3))


@triton_cpu
def test_light_conv_gradcheck_and_operators():
    """gradcheck in float64 (bidirectional, causal; 40 positions: two blocks of the weight gradient's partials; fast
    mode, a random projection of the Jacobian: the interpreter takes minutes for the full one), and the schema and
    autograd registration of both operators."""
    from mrconvnext.ops.light_conv import engine_triton as dt

    x = torch.randn(2, 6, 40, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    for causal in (False, True):

        def fn(a, b, causal=causal):
            return light_conv1d(a, b, num_heads=3, causal=causal, engine='triton')

        assert torch.autograd.gradcheck(fn, (x, w), fast_mode=True)
    utils = ('test_schema', 'test_autograd_registration')
    xt = x.detach().float().transpose(1, 2).requires_grad_()
    torch.library.opcheck(dt.light_conv_triton, (xt, w.detach().float().requires_grad_(), 1), test_utils=utils)
    args = (torch.randn(2, 40, 6), xt.detach(), w.detach().float(), 1, True, True)
    torch.library.opcheck(dt.light_conv_triton_backward, args, test_utils=utils)


def test_light_conv_engine_resolution(monkeypatch):
    """'auto': the Triton kernels on CUDA where Triton runs, in batches of at least LIGHT_TRITON_MIN_BATCH (measured
    faster there on an H200; the grouped conv was faster at batch 1 and 8); the grouped conv on the CPU, for smaller
    or unknown batches, under ONNX export, and on CUDA without Triton (with a warning). 'triton' at any batch."""
    big = light_conv_dispatch.LIGHT_TRITON_MIN_BATCH
    for batch in (None, 1, big, 4 * big):
        assert light_conv_dispatch.light_conv_engine('cpu', 'auto', batch) == 'torch'  # 'auto' never interprets
        assert light_conv_dispatch.light_conv_engine('cuda', 'torch', batch) == 'torch'
    for batch in (None, 1, big - 1):
        assert light_conv_dispatch.light_conv_engine('cuda', 'auto', batch) == 'torch'
    assert engines.resolve('light_conv1d', 'cuda', batch=big - 1) == ('-', 'torch')
    if availability.triton_unavailable('cuda') is None:
        for batch in (big, 4 * big):
            assert light_conv_dispatch.light_conv_engine('cuda', 'auto', batch) == 'triton'
        assert light_conv_dispatch.light_conv_engine('cuda', 'triton', 1) == 'triton'
        assert engines.resolve('light_conv1d', 'cuda', batch=big) == ('-', 'triton')
        assert light_conv_dispatch.light_conv_engine_constant('cuda', 'auto', True) == 'triton'
        assert light_conv_dispatch.light_conv_engine_constant('cuda', 'auto', False) == 'torch'
    with monkeypatch.context() as m:
        m.setattr(availability, 'onnx_exporting', lambda: True)
        assert light_conv_dispatch.light_conv_engine('cuda', 'auto', big) == 'torch'
    with monkeypatch.context() as m:
        m.setattr(availability, 'triton_unavailable', lambda device_type: 'no Triton here (test)')
        availability.reset()  # the one-time warning again
        with pytest.warns(RuntimeWarning, match='no Triton here .test.; LightConv uses the grouped conv1d on cuda'):
            assert light_conv_dispatch.light_conv_engine('cuda', 'auto', big) == 'torch'
        with pytest.raises(RuntimeError, match='Triton LightConv kernels unavailable for cuda: no Triton here'):
            light_conv_dispatch.light_conv_engine('cuda', 'triton')
    with pytest.raises(RuntimeError, match='Triton LightConv kernels unavailable for meta'):
        light_conv_dispatch.light_conv_engine('meta', 'triton')
    with pytest.raises(ValueError, match="engine must be one of \\('auto', 'torch', 'triton'\\)"):
        light_conv1d(torch.randn(1, 4, 5), torch.randn(2, 3), num_heads=2, engine='cuda')
    with pytest.raises(ValueError, match="engine must be one of \\('auto', 'torch', 'triton'\\)"):
        light_conv_dispatch.light_conv_engine_constant('cuda', 'fast', True)


@triton_cpu
@pytest.mark.parametrize('causal', [False, True])
def test_light_conv_layer_engines_agree(causal):
    """LightConv2d: engine='triton' equals engine='torch' (bias, DropConnect off), forward and backward, and keeps a
    channels-last input's layout."""
    _layer_engines_agree(LightConv2d, causal)


def test_bad_inputs():
    x = torch.randn(2, 8, 5)
    with pytest.raises(ValueError, match=r'logits of shape \(B=2, L=5, H, K >= 1\)'):
        dynamic_softmax_conv1d(x, torch.randn(2, 2, 5, 3))
    with pytest.raises(ValueError, match=r'channels \(8\) must be divisible by num_heads \(3\)'):
        dynamic_softmax_conv1d(x, torch.randn(2, 5, 3, 3))
    with pytest.raises(ValueError, match="dropconnect multipliers of the logits' shape"):
        dynamic_softmax_conv1d(x, torch.randn(2, 5, 2, 3), dropconnect=torch.ones(2, 5, 2, 4))
    with pytest.raises(TypeError, match='floating-point weight'):
        dynamic_softmax_conv1d(x, torch.ones(2, 5, 2, 3, dtype=torch.int64))


_FAKE_CUDA = textwrap.dedent(
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from mrconvnext.layers import DynamicConv2d, LightConv2d
    from mrconvnext.ops.light_conv.engine_triton import dynamic_conv_triton, dynamic_conv_triton_backward
    from tests.dispatch import RecordOps


    layer = DynamicConv2d(96, (56, 56), kernel_size=7, num_heads=6)
    mode = FakeTensorMode()
    state = {**dict(layer.named_parameters()), **dict(layer.named_buffers())}
    saved = []
    with mode:
        params = {k: mode.from_tensor(v).to('cuda') for k, v in state.items()}
        x = torch.randn(32, 96, 56, 56, device='cuda').to(memory_format=torch.channels_last).requires_grad_()
        torch.set_autocast_enabled('cuda', True)
        torch.set_autocast_dtype('cuda', torch.bfloat16)
        ops = RecordOps()
        try:
            with ops, torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append((tuple(t.shape), t.dtype)) or t,
                                                               lambda t: t):
                y = torch.func.functional_call(layer, params, (x,))
        finally:
            torch.set_autocast_enabled('cuda', False)
        # the backward operator (the autograd engine itself needs a real device): what it returns
        xt = x.detach().flatten(2).transpose(1, 2)
        logits = torch.randn(32, 3136, 6, 7, device='cuda', dtype=torch.bfloat16)
        y1, lse = dynamic_conv_triton(xt, logits, None, 3, True)
        with ops:
            dx, dlogits = dynamic_conv_triton_backward(torch.randn_like(y1), xt, logits, None, lse, 3, True, True, True)
    assert dx.shape == xt.shape and dx.dtype == torch.float32 and dlogits.dtype == torch.bfloat16
    assert lse.shape == (32, 3136, 6) and lse.dtype == torch.float32
    assert y.is_contiguous(memory_format=torch.channels_last) and y.dtype == torch.bfloat16, (y.stride(), y.dtype)
    assert 'mrconvnext.dynamic_conv_triton.default' in ops.names, ops.names
    assert 'mrconvnext.dynamic_conv_triton_backward.default' in ops.names
    copies = ops.copies_of(32 * 96 * 3136)
    # x is read in place (channels-last): only autocast's one cast to bf16, which the GEMM and the kernel share
    assert [name for name, _ in copies] == ['aten._to_copy.default'], copies
    big = [s for s in saved if s[0][0] == 32 and len(s[0]) == 4 and s[0][-1] == 7 and s[1] == torch.float32]
    assert not big, big  # no float32 (B, H, L, K) weights saved: the bf16 logits and the log-sum-exp

    # LightConv with the Triton engine: its operator runs on the channels-last map in place, saves x and the weights
    light = LightConv2d(96, (56, 56), kernel_size=7, num_heads=6, engine='triton')
    saved.clear()
    with mode:
        params = {k: mode.from_tensor(v).to('cuda') for k, v in light.named_parameters()}
        ops = RecordOps()
        with ops, torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append((tuple(t.shape), t.dtype)) or t,
                                                           lambda t: t):
            y = torch.func.functional_call(light, params, (x,))
    assert 'mrconvnext.light_conv_triton.default' in ops.names, ops.names
    assert not ops.copies_of(32 * 96 * 3136), ops.copies_of(32 * 96 * 3136)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert max(torch.Size(s).numel() for s, _ in saved) == 32 * 96 * 3136, saved  # x, nothing larger
    print('saved', saved)

    # LightConv's 'auto': the grouped conv below LIGHT_TRITON_MIN_BATCH (64), at batch 32; the Triton kernels at 64
    auto = LightConv2d(96, (56, 56), kernel_size=7, num_heads=6)
    with mode, torch.no_grad():
        params = {k: mode.from_tensor(v).to('cuda') for k, v in auto.named_parameters()}
        for batch, op in ((32, 'aten.convolution.default'), (64, 'mrconvnext.light_conv_triton.default')):
            xb = torch.randn(batch, 96, 56, 56, device='cuda').to(memory_format=torch.channels_last)
            ops = RecordOps()
            with ops:
                torch.func.functional_call(auto, params, (xb,))
            assert op in ops.names, (batch, ops.names)
    """
)


def test_on_fake_cuda_the_layer_reads_x_in_place_and_saves_logits_and_lse():
    """A stage-1 DynamicConv2d on fake CUDA tensors under bf16 autocast (compiled kernels, fresh process): the Triton
    operators run, x is cast once to bf16 and never copied, the output is channels-last bf16, and autograd keeps the
    logits and the log-sum-exp but no float32 weights of size (B, H, L, K). A LightConv2d on the Triton engine reads
    the float32 map in place (no copy) and saves nothing larger than x. A LightConv2d on 'auto' runs the grouped conv
    at batch 32 and the Triton operator at batch 64."""
    pytest.importorskip('triton')
    proc = run_compiled_triton('-c', _FAKE_CUDA)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _kernels() -> list:
    """The forward and backward kernels at ConvNeXt-T's DynamicConv settings (16 channels per head; K = 7, 15, 31;
    heads 6 to 48), bf16 logits with float32 (autocast) or bf16 x, float32 accumulation, and a float64 build; and
    LightConv's (SHARED: float32 weights with float32 or bf16 x, and float64)."""
    from mrconvnext.ops.light_conv.engine_triton import block_sizes

    mod = 'mrconvnext.ops.light_conv.engine_triton'
    ce = 'constexpr'
    out = []
    variants = [(x_t, lg_t, acc, False) for x_t, lg_t, acc in (('fp32', 'bf16', 'fp32'), ('bf16', 'bf16', 'fp32'))]
    variants += [('fp64', 'fp64', 'fp64', False), ('fp32', 'fp32', 'fp32', True), ('bf16', 'fp32', 'fp32', True)]
    variants += [('fp64', 'fp64', 'fp64', True)]
    for x_t, lg_t, acc, shared in variants:
        y_t = 'fp64' if acc == 'fp64' else ('fp32' if 'fp32' in (x_t, lg_t) else 'bf16')
        for heads, K in ((6, 7), (12, 15), (24, 31), (48, 31)):
            blocks = block_sizes(heads, 16, K)
            ptrs = dict(x=f'*{x_t}', lg=f'*{lg_t}', drop='*fp32')
            scalars = dict(L='i32', C='i32', H='i32', R='i32', K='i32', zero_lag='i32', sxb='i64', sxl='i64', sxc='i64')
            flags = dict(SOFTMAX=not shared, HAS_DROP=not shared, SHARED=shared, ACC_F64=acc == 'fp64')
            fwd = dict(**ptrs, y=f'*{y_t}', lse=f'*{acc}', **scalars, **dict.fromkeys(list(flags) + list(blocks), ce))
            out.append((mod, 'dynamic_conv_fwd_jit', fwd, dict(**flags, **blocks)))
            bblocks = {k: v for k, v in blocks.items() if k != 'BLOCK_K'}
            bflags = dict(**flags, NEED_DX=True, NEED_DW=True)
            dlg_t = acc if shared else lg_t  # LightConv: per-block partials in the accumulation dtype
            bwd = dict(g=f'*{y_t}', **ptrs, lse=f'*{acc}', dx=f'*{x_t}', dlg=f'*{dlg_t}', vbuf=f'*{acc}', **scalars,
                       sgb='i64', sgl='i64', sgc='i64', **dict.fromkeys(list(bflags) + list(bblocks), ce))  # fmt: skip
            out.append((mod, 'dynamic_conv_bwd_jit', bwd, dict(**bflags, **bblocks)))
    return out


def test_kernels_fit_hopper():
    """Every kernel compiles for sm_90 (Triton's pipeline to a cubin, no GPU): no register spills (no stack, no
    local memory, no LDL/STL in the SASS) and shared memory within a block's limit.

    Of the 48 configurations, 18 are the same compile as another one (same signature and constexprs, so the same
    cubin): (24, 31) and (48, 31) take the same blocks (the heads are a runtime argument), and the backward, which
    has no BLOCK_K, builds the same kernel for K = 7 and 15. Each distinct one is compiled and read once; every
    configuration is checked through its compile's report."""
    pytest.importorskip('triton')
    kernels = _kernels()
    assert len(kernels) == 48
    distinct = list({json.dumps(k, sort_keys=True): k for k in kernels}.values())
    report = compile_for_hopper(distinct)
    assert len(report) == len(distinct) == 30
    assert [r['name'] for r in report] == [k[1] for k in distinct]
    by_kernel = {json.dumps(k, sort_keys=True): r for k, r in zip(distinct, report, strict=True)}
    assert_fits_hopper([by_kernel[json.dumps(k, sort_keys=True)] for k in kernels])
