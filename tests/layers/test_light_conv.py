"""Tests for the LightConv / DynamicConv modules against independent loop references."""

from __future__ import annotations

import math

import pytest
import torch

from mrconvnext.layers.light_conv import DynamicConv1d, DynamicConv2d, LightConv1d, LightConv2d
from mrconvnext.ops.light_conv import dynamic_conv1d, light_conv1d

KERNEL_SIZES = [1, 2, 4, 7, 9, 15, 49]  # odd and even; 9, 49 rejected by fairseq CUDA; 15, 49 > L
L = 10


def lags(K: int, causal: bool) -> list[int]:
    zero_lag = 0 if causal else (K - 1) // 2
    return [k - zero_lag for k in range(K)]


def loop_conv(x: torch.Tensor, kernel_at, bias: torch.Tensor | None, num_heads: int, causal: bool) -> torch.Tensor:
    """y[b, c, t] = bias[c] + sum_k kernel_at(b, h, t)[k] * x[b, c, t - lag_k] (plain loops)."""
    B, C, n = x.shape
    R = C // num_heads
    y = torch.zeros_like(x)
    biases = None if bias is None else bias.tolist()
    for b in range(B):
        for c in range(C):
            for t in range(n):
                kern = kernel_at(b, c // R, t)
                acc = 0.0 if biases is None else biases[c]
                for k, lag in enumerate(lags(len(kern), causal)):
                    if 0 <= t - lag < n:
                        acc += float(kern[k]) * float(x[b, c, t - lag])
                y[b, c, t] = acc
    return y


def softmax_list(v: list[float]) -> list[float]:
    m = max(v)
    e = [math.exp(a - m) for a in v]
    return [a / sum(e) for a in e]


def randomize(module: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.normal_()
    return module


@pytest.mark.parametrize('causal', [False, True])
@pytest.mark.parametrize('K', KERNEL_SIZES)
def test_lightconv_module_matches_loop(K: int, causal: bool) -> None:
    m = randomize(LightConv1d(6, K, 3, causal=causal, bias=True)).double().eval()
    x = torch.randn(2, 6, L, dtype=torch.float64)
    kernels = [softmax_list(row) for row in m.weight.tolist()]
    ref = loop_conv(x, lambda b, h, t: kernels[h], m.bias, 3, causal)
    torch.testing.assert_close(m(x), ref)


@pytest.mark.parametrize('predictor_bias', [False, True])
@pytest.mark.parametrize('causal', [False, True])
@pytest.mark.parametrize('K', KERNEL_SIZES)
def test_dynamicconv_module_matches_loop(K: int, causal: bool, predictor_bias: bool) -> None:
    m = randomize(DynamicConv1d(6, K, 3, causal=causal, bias=True, predictor_bias=predictor_bias)).double().eval()
    x = torch.randn(2, 6, L, dtype=torch.float64)
    W = m.weight_linear.weight.tolist()
    c0 = m.weight_linear.bias.tolist() if predictor_bias else [0.0] * (3 * K)
    xs = x.tolist()

    def kernel_at(b: int, h: int, t: int) -> list[float]:
        # f(x_t) = W x_t + c, rows h*K .. h*K + K - 1 belong to head h; softmax over the taps.
        logits = [c0[h * K + k] + sum(W[h * K + k][c] * xs[b][c][t] for c in range(6)) for k in range(K)]
        return softmax_list(logits)

    torch.testing.assert_close(m(x), loop_conv(x, kernel_at, m.bias, 3, causal))


@pytest.mark.parametrize('cls', [LightConv1d, DynamicConv1d])
def test_dropconnect_eval_is_identity_and_train_changes(cls: type) -> None:
    torch.manual_seed(0)
    m = randomize(cls(8, 7, 4, weight_dropout=0.3))
    plain = cls(8, 7, 4, weight_dropout=0.0)
    plain.load_state_dict(m.state_dict())
    x = torch.randn(2, 8, 20)
    m.eval()
    plain.eval()
    y0 = m(x)
    torch.testing.assert_close(m(x), y0, rtol=0, atol=0)  # deterministic
    torch.testing.assert_close(y0, plain(x), rtol=0, atol=0)
    plain.train()  # p = 0 in training is also a no-op
    torch.testing.assert_close(plain(x), y0, rtol=0, atol=0)
    m.train()
    y1, y2 = m(x), m(x)
    assert not torch.allclose(y1, y0)
    assert not torch.allclose(y1, y2)


def test_lightconv_dropconnect_zeroes_and_rescales() -> None:
    """An impulse reveals the kernel: each entry is 0 or softmax(W) / (1 - p)."""
    p, K = 0.5, 9
    m = randomize(LightConv1d(4, K, 4, weight_dropout=p)).double().train()
    ref = torch.softmax(m.weight.detach(), -1)
    x = torch.zeros(1, 4, 2 * K + 1, dtype=torch.float64)
    x[..., K] = 1.0
    zeros = kept = 0
    for _ in range(20):
        y = m(x)[0, :, K - 4 : K + 5]  # outputs at lags -4..4 relative to the impulse = taps 0..8
        dropped = y == 0
        zeros += int(dropped.sum())
        kept += int((~dropped).sum())
        torch.testing.assert_close(y[~dropped], (ref / (1 - p))[~dropped])
    assert zeros > 0 and kept > 0


def test_dynamicconv_dropconnect_zeroes_and_rescales() -> None:
    p = 0.25
    m = DynamicConv1d(8, 5, 2, weight_dropout=p).double()
    x = torch.randn(2, 8, 30, dtype=torch.float64)
    ref = m.eval().kernel(x)
    torch.testing.assert_close(ref.sum(-1), torch.ones(2, 2, 30, dtype=torch.float64))
    got = m.train().kernel(x)
    dropped = got == 0
    assert 0.1 < dropped.double().mean().item() < 0.4
    torch.testing.assert_close(got[~dropped], ref[~dropped] / (1 - p))


@pytest.mark.parametrize('cls', [LightConv1d, DynamicConv1d, LightConv2d, DynamicConv2d])
@pytest.mark.parametrize('causal', [False, True])
def test_forward_backward(cls: type, causal: bool) -> None:
    opts = dict(kernel_size=6, num_heads=4, causal=causal, weight_dropout=0.1, bias=True)
    if cls in (LightConv2d, DynamicConv2d):
        m, x = cls(8, (5, 7), **opts), torch.randn(2, 8, 5, 7, requires_grad=True)
    else:
        m, x = cls(8, **opts), torch.randn(2, 8, 35, requires_grad=True)
    m.train()
    y = m(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    (y * torch.randn_like(y)).sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, prm in m.named_parameters():
        assert prm.grad is not None and torch.isfinite(prm.grad).all(), name
        assert prm.grad.abs().sum() > 0, name


def test_parameter_names_and_shapes() -> None:
    light = LightConv1d(96, 31, 8, bias=True)
    assert {n: tuple(p.shape) for n, p in light.named_parameters()} == {'weight': (8, 31), 'bias': (96,)}
    dyn = DynamicConv1d(96, 31, 8)  # no predictor bias, as in the paper
    assert {n: tuple(p.shape) for n, p in dyn.named_parameters()} == {'weight_linear.weight': (8 * 31, 96)}
    dyn = DynamicConv1d(96, 31, 8, predictor_bias=True)
    assert {n: tuple(p.shape) for n, p in dyn.named_parameters()} == {
        'weight_linear.weight': (8 * 31, 96),
        'weight_linear.bias': (8 * 31,),
    }
    assert set(LightConv2d(96, (56, 56)).state_dict()) == {'weight'}


@pytest.mark.parametrize(('cls2d', 'cls1d'), [(LightConv2d, LightConv1d), (DynamicConv2d, DynamicConv1d)])
@pytest.mark.parametrize('causal', [False, True])
def test_2d_equals_1d_on_flattened_map(cls2d: type, cls1d: type, causal: bool) -> None:
    m2 = randomize(cls2d(8, (6, 5), kernel_size=8, num_heads=2, causal=causal, bias=True)).double().eval()
    m1 = cls1d(8, 8, 2, causal=causal, bias=True).double().eval()
    m1.load_state_dict(m2.state_dict())
    for hw in ((6, 5), (3, 9)):  # nominal and another size: the mixer is length-agnostic
        x = torch.randn(2, 8, *hw, dtype=torch.float64)
        y = m2(x)
        flat = x.flatten(2)  # row-major: index i * W + j
        if cls2d is LightConv2d:
            ref = light_conv1d(flat, torch.softmax(m2.weight, -1), m2.bias, num_heads=2, causal=causal)
        else:
            ref = dynamic_conv1d(flat, m2.kernel(flat), m2.bias, causal=causal)
        torch.testing.assert_close(y, ref.view_as(x))
        torch.testing.assert_close(y, m1(flat).view_as(x))


def test_2d_constructor_contract() -> None:
    """Plug-in contract: cls(dim, input_size, **options), (B, C, H, W) -> (B, C, H, W)."""
    for cls in (LightConv2d, DynamicConv2d):
        m = cls(16, (7, 7))
        assert m.input_size == (7, 7) and m.kernel_size == 31 and m.num_heads == 8
        assert m(torch.randn(1, 16, 7, 7)).shape == (1, 16, 7, 7)
        m = cls(16, input_size=[4, 4], **dict(kernel_size=3, num_heads=2, weight_dropout=0.1))
        assert m.input_size == (4, 4)


# ----------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize('cls', [LightConv1d, DynamicConv1d])
def test_bad_constructor_args(cls: type) -> None:
    with pytest.raises(ValueError, match=r'dim \(10\) must be divisible by num_heads \(4\)'):
        cls(10, 3, 4)
    with pytest.raises(ValueError, match='kernel_size must be an int >= 1, got 0'):
        cls(8, 0, 4)
    with pytest.raises(ValueError, match='num_heads must be an int >= 1, got 0'):
        cls(8, 3, 0)
    with pytest.raises(TypeError, match='kernel_size must be an int >= 1, got float'):
        cls(8, 3.0, 4)
    with pytest.raises(ValueError, match='0 <= weight_dropout < 1, got 1.0'):
        cls(8, 3, 4, weight_dropout=1.0)


@pytest.mark.parametrize('cls', [LightConv2d, DynamicConv2d])
def test_bad_input_size(cls: type) -> None:
    for bad, error, match in (
        ((7,), ValueError, r'two positive ints \(H, W\), got \(7,\)'),
        (7, ValueError, r'two positive ints \(H, W\), got 7'),
        ((7, 0), ValueError, r'input_size\[1\] must be an int >= 1, got 0'),
        ((7.0, 7), TypeError, r'input_size\[0\] must be an int >= 1, got float'),
    ):
        with pytest.raises(error, match=match):
            cls(8, bad)


@pytest.mark.parametrize('cls', [LightConv1d, DynamicConv1d])
def test_bad_forward_input_1d(cls: type) -> None:
    m = cls(8, 3, 4)
    with pytest.raises(TypeError, match='floating-point input, got dtype torch.int64'):
        m(torch.ones(2, 8, 10, dtype=torch.long))
    with pytest.raises(ValueError, match=r'shape \(B, C, L\), got shape \(2, 8, 4, 4\)'):
        m(torch.randn(2, 8, 4, 4))
    with pytest.raises(ValueError, match=r'expects 8 channels, got 6'):
        m(torch.randn(2, 6, 10))


@pytest.mark.parametrize('cls', [LightConv2d, DynamicConv2d])
def test_bad_forward_input_2d(cls: type) -> None:
    m = cls(8, (4, 4), kernel_size=3, num_heads=4)
    with pytest.raises(ValueError, match=r'shape \(B, C, H, W\), got shape \(2, 8, 16\)'):
        m(torch.randn(2, 8, 16))
    with pytest.raises(ValueError, match=r'expects 8 channels, got 6'):
        m(torch.randn(2, 6, 4, 4))


def test_dynamic_conv_layers_take_an_engine():
    """The layers validate ``engine`` at construction; 'auto' on the CPU is the PyTorch tap loop."""
    from mrconvnext.layers.light_conv import DynamicConv1d, DynamicConv2d

    x = torch.randn(2, 8, 5, 6)
    a, b = DynamicConv2d(8, (5, 6), kernel_size=3, num_heads=2), DynamicConv2d(8, (5, 6), 3, 2, engine='torch')
    b.load_state_dict(a.state_dict())
    assert torch.equal(a(x), b(x))
    c = DynamicConv2d(8, (5, 6), 3, 2, engine='onnx')  # the ONNX export's form, usable (and equal) in eager too
    c.load_state_dict(a.state_dict())
    torch.testing.assert_close(c(x), a(x), rtol=1e-5, atol=1e-6)
    with pytest.raises(
        ValueError, match=r"DynamicConv1d: engine must be one of \('auto', 'torch', 'triton', 'onnx'\), got 'cuda'"
    ):
        DynamicConv1d(8, 3, 2, engine='cuda')


@pytest.mark.parametrize(('K', 'size', 'causal'), [(7, (9, 11), True), (31, (5, 7), False)])
def test_dynamic_conv2d_in_onnxruntime_with_biases(tmp_path, K: int, size: tuple[int, int], causal: bool) -> None:
    """The layer exported alone (``torch.onnx.export(dynamo=True)``, dynamic batch) with both biases, in ONNX Runtime
    against PyTorch at batches 1 and 3: 99 positions in chunks (the last one partial), causal; 35 in one band."""
    ort = pytest.importorskip('onnxruntime')
    import warnings

    torch.manual_seed(0)
    m = DynamicConv2d(32, size, kernel_size=K, num_heads=4, causal=causal, bias=True, predictor_bias=True).eval()
    with torch.no_grad():
        m.bias.normal_()
        m.weight_linear.bias.normal_()
    path = str(tmp_path / 'layer.onnx')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        program = torch.onnx.export(m, (torch.randn(2, 32, *size),), dynamo=True, dynamic_shapes=({0: 'batch'},))
    program.save(path)
    session = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
    for batch in (1, 3):
        x = torch.randn(batch, 32, *size)
        y = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
        with torch.no_grad():
            torch.testing.assert_close(y, m(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('saved_bias', [False, True])
@pytest.mark.parametrize('layer_bias', [False, True])
def test_the_checkpoint_decides_the_predictor_bias(saved_bias: bool, layer_bias: bool) -> None:
    """A state dict with ``weight_linear.bias`` (every checkpoint written before the default changed) loads into a
    bias-less layer and computes what it computed; one without it removes a layer's bias; strict loading passes."""
    saved = randomize(DynamicConv1d(8, 5, 2, predictor_bias=saved_bias)).eval()
    layer = DynamicConv1d(8, 5, 2, predictor_bias=layer_bias)
    layer.load_state_dict(saved.state_dict())
    assert layer.predictor_bias == saved_bias and set(layer.state_dict()) == set(saved.state_dict())
    x = torch.randn(2, 8, 11)
    torch.testing.assert_close(layer.eval()(x), saved(x), rtol=0, atol=0)
    assert all(p.requires_grad for p in layer.parameters())
