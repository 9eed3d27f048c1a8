"""Tests for mrconvnext.ops.light_conv against an independent pure-Python loop reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mrconvnext.ops.light_conv import (
    dynamic_conv1d,
    dynamic_conv1d_unfold,
    light_conv1d,
    light_conv1d_unfold,
)
from mrconvnext.ops.light_conv.api import dynamic_mix
from mrconvnext.ops.light_conv.checks import zero_lag_for
from mrconvnext.ops.light_conv.dispatch import ONNX_BAND_CHUNK, dynamic_conv_onnx_chunk
from mrconvnext.ops.light_conv.engine_onnx import dynamic_conv_band, dynamic_conv_taps
from tests.reference import naive_dynamic, naive_light

# Odd and even K; 9, 49 are sizes fairseq's CUDA kernels reject; 15 and 49 exceed L = 10.
KERNEL_SIZES = [1, 2, 3, 4, 7, 8, 9, 15, 49]
L = 10


def rand(*shape: int, requires_grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, requires_grad=requires_grad)


@pytest.mark.parametrize('causal', [False, True])
@pytest.mark.parametrize('K', KERNEL_SIZES)
def test_light_matches_naive(K: int, causal: bool) -> None:
    x, w, bias = rand(2, 6, L), rand(3, K).softmax(-1), rand(6)
    ref = naive_light(x, w, bias, causal)
    torch.testing.assert_close(light_conv1d(x, w, bias, num_heads=3, causal=causal), ref)
    torch.testing.assert_close(light_conv1d(x, w, num_heads=3, causal=causal), naive_light(x, w, None, causal))
    torch.testing.assert_close(light_conv1d_unfold(x, w, bias, num_heads=3, causal=causal), ref)


@pytest.mark.parametrize('causal', [False, True])
@pytest.mark.parametrize('K', KERNEL_SIZES)
def test_dynamic_matches_naive(K: int, causal: bool) -> None:
    x, w, bias = rand(2, 6, L), rand(2, 3, L, K).softmax(-1), rand(6)
    ref = naive_dynamic(x, w, bias, causal)
    torch.testing.assert_close(dynamic_conv1d(x, w, bias, causal=causal), ref)
    torch.testing.assert_close(dynamic_conv1d(x, w, causal=causal), naive_dynamic(x, w, None, causal))
    torch.testing.assert_close(dynamic_conv1d_unfold(x, w, bias, causal=causal), ref)
    # the ONNX form (what torch.onnx.export traces), in float64 and float32
    torch.testing.assert_close(dynamic_conv1d(x, w, bias, causal=causal, engine='onnx'), ref)
    y32 = dynamic_conv1d(x.float(), w.float(), bias.float(), causal=causal, engine='onnx')
    torch.testing.assert_close(y32, ref.float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('causal', [False, True])
@pytest.mark.parametrize('K', KERNEL_SIZES)
def test_dynamic_onnx_algorithms_match_naive(K: int, causal: bool) -> None:
    """Both algorithms of the ONNX form, the band matrix and the one-hot tap bank, against the loop in float64 (the
    engine picks one by length: the crossover, and a sequence past it, below)."""
    x, w = rand(2, 6, L), rand(2, 3, L, K).softmax(-1)
    ref = naive_dynamic(x, w, None, causal)
    for form in (dynamic_conv_band, dynamic_conv_taps):
        y = form(x, w, zero_lag_for(K, causal))
        torch.testing.assert_close(y, ref, msg=lambda m, f=form: f'{f.__name__}: {m}')


@pytest.mark.parametrize('K, zero_lag', [(5, 0), (5, 1), (5, 3), (4, 1), (7, 6), (1, 0), (12, 11)])
def test_dynamic_band_at_any_zero_lag(K: int, zero_lag: int) -> None:
    """The band at zero lags off the middle tap against a loop over lags in float64, sequences shorter and longer
    than the kernel, as one band and in chunks."""
    for n in (3, 17):
        x, w = rand(2, 4, n), rand(2, 2, n, K)
        ref = torch.zeros_like(x)
        for k in range(K):  # y[t] += w[t, k] x[t - (k - zero_lag)]
            lag = k - zero_lag
            for t in range(n):
                if 0 <= t - lag < n:
                    ref[:, :, t] += w.repeat_interleave(2, 1)[:, :, t, k] * x[:, :, t - lag]
        for chunk in (None, max(K - 1, 1), K + 2):  # one band, chunks (the last one partial)
            y = dynamic_conv_band(x, w, zero_lag, chunk)
            torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)


def test_dynamic_onnx_chunks() -> None:
    """Chunks of ONNX_BAND_CHUNK positions, at least K - 1, the whole sequence where it is at most two chunks long;
    a sequence of several chunks, the last one partial, through the engine against the loop."""
    n = ONNX_BAND_CHUNK
    assert [dynamic_conv_onnx_chunk(L, 7) for L in (1, n, 2 * n, 2 * n + 1, 3136)] == [1, n, 2 * n, n, n]
    assert dynamic_conv_onnx_chunk(3136, n + 9) == n + 8 and dynamic_conv_onnx_chunk(2 * n + 16, n + 9) == 2 * n + 16
    x, w, bias = rand(1, 4, 3 * n + 5), rand(1, 2, 3 * n + 5, 5).softmax(-1), rand(4)
    torch.testing.assert_close(dynamic_conv1d(x, w, bias, engine='onnx'), naive_dynamic(x, w, bias, False))
    with pytest.raises(ValueError, match='chunks of 3 positions cannot hold the 4 next inputs'):
        dynamic_conv_band(x, w, 2, chunk=3)


@pytest.mark.parametrize(
    ('K', 'causal', 'expected_lags'),
    [
        (3, False, [-1, 0, 1]),
        (4, False, [-1, 0, 1, 2]),  # even K: the extra tap is on the past side
        (5, False, [-2, -1, 0, 1, 2]),
        (4, True, [0, 1, 2, 3]),
    ],
)
def test_lag_convention_literal(K: int, causal: bool, expected_lags: list[int]) -> None:
    """A one-hot kernel at tap k shifts the signal by exactly the documented lag."""
    x = rand(1, 2, 12)
    for k, lag in enumerate(expected_lags):
        w = torch.zeros(1, K, dtype=torch.float64)
        w[0, k] = 1.0
        shifted = torch.zeros_like(x)
        if lag >= 0:
            shifted[..., lag:] = x[..., : x.shape[-1] - lag]
        else:
            shifted[..., :lag] = x[..., -lag:]
        torch.testing.assert_close(light_conv1d(x, w, num_heads=1, causal=causal), shifted)
        wd = w.view(1, 1, 1, K).expand(1, 1, 12, K)
        torch.testing.assert_close(dynamic_conv1d(x, wd, causal=causal), shifted)


@pytest.mark.parametrize('K', [4, 9])
def test_causal_ignores_future(K: int) -> None:
    x = rand(1, 4, 12, requires_grad=True)
    t = 5
    for y in (
        light_conv1d(x, rand(2, K).softmax(-1), num_heads=2, causal=True),
        dynamic_conv1d(x, rand(1, 2, 12, K).softmax(-1), causal=True),
    ):
        (g,) = torch.autograd.grad(y[..., t].sum(), x)
        assert torch.all(g[..., t + 1 :] == 0)
        assert torch.any(g[..., : t + 1] != 0)


def test_single_position_and_broadcast_equivalence() -> None:
    """L = 1 works; a position-independent dynamic kernel equals LightConv."""
    x, w = rand(2, 4, 1), rand(2, 5).softmax(-1)
    torch.testing.assert_close(light_conv1d(x, w, num_heads=2), x * w[:, 2].repeat_interleave(2)[:, None])
    x = rand(2, 8, 13)
    wl = rand(4, 6).softmax(-1)
    wd = wl[None, :, None, :].expand(2, 4, 13, 6)
    for causal in (False, True):
        torch.testing.assert_close(
            dynamic_conv1d(x, wd, causal=causal), light_conv1d(x, wl, num_heads=4, causal=causal)
        )


@pytest.mark.parametrize(('K', 'causal'), [(3, False), (4, False), (4, True), (11, False)])
def test_gradcheck_light(K: int, causal: bool) -> None:
    x, w, b = rand(2, 4, 7, requires_grad=True), rand(2, K, requires_grad=True), rand(4, requires_grad=True)
    fn = lambda x, w, b: light_conv1d(x, w, b, num_heads=2, causal=causal)
    assert torch.autograd.gradcheck(fn, (x, w, b))


@pytest.mark.parametrize(('K', 'causal'), [(3, False), (4, False), (4, True), (11, False)])
def test_gradcheck_dynamic(K: int, causal: bool) -> None:
    x, w, b = (
        rand(2, 4, 7, requires_grad=True),
        rand(2, 2, 7, K, requires_grad=True),
        rand(4, requires_grad=True),
    )
    fn = lambda x, w, b: dynamic_conv1d(x, w, b, causal=causal)
    assert torch.autograd.gradcheck(fn, (x, w, b))


def test_dynamic_grads_match_unfold_and_partial_requires_grad() -> None:
    x, w = rand(2, 6, 20, requires_grad=True), rand(2, 3, 20, 7, requires_grad=True)
    g = rand(2, 6, 20)
    ref = torch.autograd.grad(dynamic_conv1d_unfold(x, w), (x, w), g)
    got = torch.autograd.grad(dynamic_conv1d(x, w), (x, w), g)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b)
    # Only one input needing a gradient still works.
    (gx,) = torch.autograd.grad(dynamic_conv1d(x, w.detach()), x, g)
    torch.testing.assert_close(gx, ref[0])
    (gw,) = torch.autograd.grad(dynamic_conv1d(x.detach(), w), w, g)
    torch.testing.assert_close(gw, ref[1])


def test_dynamic_saves_no_k_fold_copies() -> None:
    """Autograd keeps only O(x + weights) elements, never K shifted copies of x."""
    B, C, n, H, K = 2, 8, 64, 2, 31
    x, w = torch.randn(B, C, n, requires_grad=True), torch.randn(B, H, n, K, requires_grad=True)
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = dynamic_conv1d(x, w)
    assert saved, 'saved-tensor hooks saw nothing'
    assert sum(saved) <= x.numel() + w.numel()  # the unfold baseline saves B*C*L*K more
    y.sum().backward()
    assert x.grad is not None and w.grad is not None


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_low_precision_computes_in_float32(dtype: torch.dtype) -> None:
    x, wl, wd = torch.randn(2, 4, 30), torch.randn(2, 5).softmax(-1), torch.randn(2, 2, 30, 5).softmax(-1)
    xl = x.to(dtype)
    y = light_conv1d(xl, wl.to(dtype), num_heads=2)
    assert y.dtype == dtype
    torch.testing.assert_close(y.float(), light_conv1d(xl.float(), wl.to(dtype).float(), num_heads=2), **_tol(dtype))
    y = dynamic_conv1d(xl, wd.to(dtype))
    assert y.dtype == dtype
    torch.testing.assert_close(y.float(), dynamic_conv1d(xl.float(), wd.to(dtype).float()), **_tol(dtype))
    # Mixed dtypes (e.g. autocast weights with a float32 residual stream) promote.
    assert dynamic_conv1d(x, wd.to(dtype)).dtype == torch.float32


def _tol(dtype: torch.dtype) -> dict[str, float]:
    return {'atol': 1e-2, 'rtol': 1e-2} if dtype == torch.bfloat16 else {'atol': 2e-3, 'rtol': 2e-3}


# ----------------------------------------------------------------------------------------------
# bad input


def test_bad_input_light() -> None:
    x, w = torch.randn(2, 4, 9), torch.randn(2, 3)
    with pytest.raises(ValueError, match=r'\(B, C, L\), got shape \(4, 9\)'):
        light_conv1d(x[0], w, num_heads=2)
    with pytest.raises(ValueError, match=r'channels \(4\) must be divisible by num_heads \(3\)'):
        light_conv1d(x, torch.randn(3, 3), num_heads=3)
    with pytest.raises(ValueError, match=r'weight of shape \(num_heads=2, K >= 1\), got \(4, 3\)'):
        light_conv1d(x, torch.randn(4, 3), num_heads=2)
    with pytest.raises(ValueError, match=r'got \(6,\)'):
        light_conv1d(x, torch.randn(6), num_heads=2)
    with pytest.raises(ValueError, match=r'K >= 1\), got \(2, 0\)'):
        light_conv1d(x, torch.randn(2, 0), num_heads=2)
    with pytest.raises(TypeError, match='floating-point x, got dtype torch.int64'):
        light_conv1d(torch.ones(2, 4, 9, dtype=torch.long), w, num_heads=2)
    with pytest.raises(TypeError, match='floating-point weight, got dtype torch.int32'):
        light_conv1d(x, torch.ones(2, 3, dtype=torch.int32), num_heads=2)
    with pytest.raises(ValueError, match=r'bias of shape \(4,\), got \(2,\)'):
        light_conv1d(x, w, torch.randn(2), num_heads=2)
    with pytest.raises(ValueError, match='num_heads must be an int >= 1, got 0'):
        light_conv1d(x, w, num_heads=0)


def test_bad_input_dynamic() -> None:
    x, w = torch.randn(2, 4, 9), torch.randn(2, 2, 9, 3)
    with pytest.raises(ValueError, match=r'\(B, C, L\), got shape \(1, 2, 4, 9\)'):
        dynamic_conv1d(x[None], w)
    with pytest.raises(ValueError, match=r'channels \(4\) must be divisible by num_heads \(3\)'):
        dynamic_conv1d(x, torch.randn(2, 3, 9, 3))
    with pytest.raises(ValueError, match=r'\(B=2, H, L=9, K >= 1\).*got \(2, 2, 8, 3\)'):
        dynamic_conv1d(x, torch.randn(2, 2, 8, 3))
    with pytest.raises(ValueError, match=r'\(B=2, H, L=9, K >= 1\).*got \(1, 2, 9, 3\)'):
        dynamic_conv1d(x, torch.randn(1, 2, 9, 3))
    with pytest.raises(ValueError, match=r'weight of shape \(B, H, L, K\), got shape \(2, 9, 3\)'):
        dynamic_conv1d(x, torch.randn(2, 9, 3))
    with pytest.raises(ValueError, match=r'K >= 1\).*got \(2, 2, 9, 0\)'):
        dynamic_conv1d(x, torch.randn(2, 2, 9, 0))
    with pytest.raises(TypeError, match='floating-point x, got dtype torch.int64'):
        dynamic_conv1d(torch.ones(2, 4, 9, dtype=torch.long), w)
    with pytest.raises(TypeError, match='floating-point weight, got dtype torch.bool'):
        dynamic_conv1d(x, torch.ones(2, 2, 9, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r'bias of shape \(4,\), got \(4, 1\)'):
        dynamic_conv1d(x, w, torch.randn(4, 1))


@pytest.mark.parametrize('training', [False, True])
def test_dynamic_mix_is_the_predictor_then_the_convolution(training: bool) -> None:
    """dynamic_mix (what the DynamicConv layers run): softmax over the taps of ``W @ x`` plus the predictor's bias,
    DropConnect while training, then the per-position convolution; against the naive loop in float64 with the same
    DropConnect mask (the same seed, drawn first in both)."""
    B, C, H, K = 2, 6, 3, 5
    x, W, pb, bias = rand(B, C, L), rand(H * K, C), rand(H * K), rand(C)
    p = 0.3 if training else 0.0
    torch.manual_seed(0)
    y = dynamic_mix(x, W, pb, H, bias, weight_dropout=p, training=training, engine='torch')
    torch.manual_seed(0)
    logits = (torch.einsum('oc,bcl->bol', W, x) + pb[:, None]).view(B, H, K, L)
    w = F.dropout(logits.softmax(2), p, training).transpose(2, 3)
    torch.testing.assert_close(y, naive_dynamic(x, w, bias, False))


@pytest.mark.parametrize('causal', [False, True])
@pytest.mark.parametrize('scale', [1.0, 300.0])
def test_dynamic_mix_onnx_matches_naive(scale: float, causal: bool) -> None:
    """The ONNX form of the whole mixer (tap-major logits of the predictor with its rows reversed per head, the
    softmax written out, bands over chunks) against the predictor and softmax by hand and the loop, in float64: one
    band and several chunks (the last one partial), and logits in the hundreds (exp of the raw logits overflows)."""
    H, K = 3, 5
    for L in (11, 3 * ONNX_BAND_CHUNK + 5):
        x = torch.randn(2, 6, L, dtype=torch.float64) * scale
        weight, pb, bias = (torch.randn(*s, dtype=torch.float64) for s in ((H * K, 6), (H * K,), (6,)))
        logits = (weight @ x + pb[:, None]).view(2, H, K, L)
        ref = (logits - logits.max(2, keepdim=True).values).exp()
        w = (ref / ref.sum(2, keepdim=True)).transpose(2, 3)
        y = dynamic_mix(x, weight, pb, H, bias, causal=causal, engine='onnx')
        assert y.isfinite().all()
        torch.testing.assert_close(y, naive_dynamic(x, w, bias, causal), rtol=1e-12, atol=1e-12)
