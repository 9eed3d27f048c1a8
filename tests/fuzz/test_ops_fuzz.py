"""Property-based fuzzing of the ops and mixers against the float64 references (hypothesis, bounded examples).

Each property draws shapes, lags, layouts, methods, engines and values (special values included) and checks the package
against an independent computation: a loop over taps (tests/reference.py), float64 BatchNorm, TaLK's reference.
Example counts are set per test (``FUZZ``) so the suite stays within CI's budget.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mrconvnext.layers import MRConv1d
from mrconvnext.ops import availability, long_conv1d, talk1d, talk2d
from mrconvnext.ops.long_conv import branch_conv_bn_sum, branch_conv_bn_sum_supported
from tests.reference import shifted_sum_conv

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
FUZZ_SLOW = settings(FUZZ, max_examples=25)
HAVE_FUSED = branch_conv_bn_sum_supported(torch.zeros(1, 1, 1))
HAVE_NATIVE_TALK = availability.load_native(availability.TALK_EXT) is not None
FFT_ENGINES = ['native', 'torch'] if availability.load_native(availability.FFTCONV_EXT) is not None else ['torch']


def _layout(x, layout):
    if layout == 'channels_last':
        return x.transpose(1, 2).contiguous().transpose(1, 2)
    if layout == 'strided':  # every other position of a longer sequence
        wide = torch.zeros(*x.shape[:2], 2 * x.shape[2], dtype=x.dtype)
        wide[..., ::2] = x
        return wide[..., ::2]
    return x


@FUZZ
@given(
    B=st.integers(1, 3),
    C=st.integers(1, 4),
    L=st.integers(1, 40),
    K_extra=st.integers(0, 90),
    lag_frac=st.floats(0, 1),
    N=st.sampled_from([None, 1, 3]),
    method=st.sampled_from(['fft', 'direct', 'auto']),
    engine=st.sampled_from(FFT_ENGINES),
    layout=st.sampled_from(['contiguous', 'channels_last', 'strided']),
    with_bias=st.booleans(),
    grad=st.booleans(),
)
def test_long_conv1d(B, C, L, K_extra, lag_frac, N, method, engine, layout, with_bias, grad):
    K = 1 + K_extra  # up to K > 2L
    zero_lag = min(K - 1, int(lag_frac * K))
    x = _layout(torch.randn(B, C, L, dtype=torch.float64), layout).requires_grad_(grad)
    k = torch.randn(*((N,) if N else ()), C, K, dtype=torch.float64).requires_grad_(grad)
    bias = torch.randn(C, dtype=torch.float64) if with_bias else None
    with torch.set_grad_enabled(grad):
        y = long_conv1d(x, k, bias, zero_lag=zero_lag, method=method, engine='auto' if method == 'direct' else engine)
    kk = k if N else k.unsqueeze(0)
    ref = torch.stack([shifted_sum_conv(x, kk[i], zero_lag) for i in range(kk.shape[0])], 1)
    if bias is not None:
        ref = ref + bias[:, None]
    ref = ref if N else ref.squeeze(1)
    torch.testing.assert_close(y, ref, rtol=1e-9, atol=1e-9)
    if grad:
        g = torch.randn_like(ref)
        got = torch.autograd.grad(y, (x, k), g)
        want = torch.autograd.grad(ref, (x, k), g)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.skipif(not HAVE_FUSED, reason='fused CPU extension unavailable (no MKL/compiler)')
@FUZZ
@given(
    B=st.integers(1, 3),
    C=st.integers(1, 4),
    L=st.integers(2, 48),
    N=st.integers(1, 3),
    K=st.integers(1, 8),
    mean=st.sampled_from([0.0, 100.0, -1000.0, 1000.0]),
    spread=st.sampled_from([1e-2, 1.0, 10.0]),
    layout=st.sampled_from(['contiguous', 'channels_last']),
    seed=st.integers(0, 2**32 - 1),
)
@example(B=2, C=2, L=2, N=2, K=2, mean=-1000.0, spread=0.01, layout='channels_last', seed=1)  # once too strict
@example(B=1, C=1, L=2, N=1, K=1, mean=-1000.0, spread=1.0, layout='contiguous', seed=1_747_820_724)  # likewise
@example(B=1, C=1, L=2, N=1, K=1, mean=100.0, spread=0.01, layout='contiguous', seed=29)  # the gradient's bound
@example(B=1, C=1, L=2, N=2, K=2, mean=100.0, spread=1.0, layout='contiguous', seed=167)  # its centred rounding
def test_branch_conv_bn_sum_large_means_short_kernels(B, C, L, N, K, mean, spread, layout, seed):
    torch.manual_seed(seed)  # drawn by hypothesis, so a failing example replays with the same tensors
    x = _layout((torch.randn(B, C, L, dtype=torch.float64) * spread + mean).float(), layout).requires_grad_()
    k = torch.randn(N, C, K, dtype=torch.float64) / K**0.5
    w, b, a = 1 + 0.3 * torch.randn(N, C, dtype=torch.float64), torch.randn(N, C, dtype=torch.float64), torch.rand(N, C)
    zero_lag = K // 2
    y, m, v = branch_conv_bn_sum(x, k.float(), zero_lag, w.float(), b.float(), a.float())
    xr = x.detach().double().requires_grad_()
    z = torch.stack([shifted_sum_conv(xr, k[i], zero_lag) for i in range(N)], 1)  # (B, N, C, L)
    zn = F.batch_norm(z.reshape(B, N * C, L), None, None, w.reshape(-1), b.reshape(-1), True, 0.0, 1e-5)
    ry = (zn.view(B, N, C, L) * a.double().unsqueeze(-1)).sum(1)
    # |y| is O(1) per branch; the bound is absolute, scaled by the branches' weights. At a tiny spread the
    # input's own float32 rounding (ulp(1000) = 6e-5 against a spread of 1e-2) is amplified by 1/spread and
    # no float32 computation can do better: the bound follows it.
    rounding = 6.2e-8 * abs(mean) / spread
    tol = (1e-4 + 20 * rounding) * float(a.abs().sum(0).max()) * max(1.0, float(w.abs().max()))
    torch.testing.assert_close(y.double(), ry, rtol=0, atol=tol)
    zd = z.detach()
    # The statistics are those of the float32 outputs: each output carries up to about one ulp of its magnitude
    # (the centring mean times the ones response, then the sum), 1.2e-7 |z| relative, which no average removes
    # when B * L is small (the fuzzer found B = L = 2, mean -1000, spread 1e-2: 1.9e-5 off, within 1.2e-7 * |z|).
    z_ulp = 1.2e-7 * float(zd.abs().max())
    torch.testing.assert_close(m.double(), zd.mean((0, 3)), rtol=1e-5, atol=1e-5 * spread + z_ulp)
    # and the variance moves by up to 2 sqrt(v) z_ulp + z_ulp^2 with them: when the few outputs happen to lie close
    # together (the fuzzer found B = 1, L = 2, mean -1000, spread 1, v = 2e-7) that is far above rtol * v
    v_ref = zd.var((0, 3), unbiased=False)
    v_atol = 1e-9 + 2 * float(v_ref.max()) ** 0.5 * z_ulp + z_ulp**2
    torch.testing.assert_close(v.double(), v_ref, rtol=1e-3 + 40 * rounding, atol=v_atol)
    g = torch.randn_like(ry)
    (gx,) = torch.autograd.grad(y, x, g.float())
    (rgx,) = torch.autograd.grad(ry, xr, g)
    # The gradient goes through 1 / sigma (about 1 / spread) and carries the centred values' relative rounding: its
    # bound is also relative to its own size, not only the output's scaled by the branch weights (the fuzzer found
    # B = 1, L = 2, mean 100, spread 1e-2, branch weight 0.02: 8.8e-4 of |grad| off, within 20 * rounding = 1.2e-2
    # of it, where the output's bound allowed 3.8e-4 of it)
    g_max = float(rgx.abs().max())
    # and the float32 outputs' own rounding (z_ulp) relative to their spread, through BatchNorm's 1 / sqrt(v + eps):
    # when a branch's few outputs lie close together (the fuzzer found B = 1, L = 2, mean 100, spread 1, outputs
    # 156.445 and 156.465, v = 9.6e-5) that is 2e-3 of the gradient, and the float64 reference evaluated at the
    # float32-rounded outputs moves by as much (to 2e-6 of the kernel's gradient)
    centred = z_ulp / (float(v_ref.min()) + 1e-5) ** 0.5
    grad_tol = max(tol * max(1.0, g_max), (1e-4 + 20 * rounding + 4 * centred) * g_max)
    torch.testing.assert_close(gx.double(), rgx, rtol=0, atol=grad_tol)


@FUZZ_SLOW
@given(
    C=st.integers(1, 3),
    seq_len=st.integers(2, 40),
    causal=st.booleans(),
    lengths=st.lists(st.integers(1, 90), min_size=2, max_size=6),
    method=st.sampled_from(['fft', 'auto']),
)
def test_deployed_layer_on_a_sequence_of_lengths(C, seq_len, causal, lengths, method):
    m = MRConv1d(C, seq_len, causal=causal, max_branches=2, kernel_type='dense', method=method).double().eval()
    m.reparameterize()
    with torch.no_grad():
        m.kernel.normal_()
        m.bias.normal_()
        for L in lengths:
            x = torch.randn(2, C, L, dtype=torch.float64)
            ref = shifted_sum_conv(x, m.kernel, m.zero_lag) + m.bias[:, None]
            torch.testing.assert_close(m(x), ref, rtol=1e-9, atol=1e-9)


_SPECIAL = st.sampled_from([0.0, 1.0, 0.5, float('nan'), None, None, None])  # None: a uniform draw


def _offsets(shape, specials):
    off = torch.rand(shape, dtype=torch.float64)
    flat = off.view(-1)
    for i, v in enumerate(specials[: flat.numel()]):
        if v is not None:
            flat[(i * 7919) % flat.numel()] = v
    return off


@FUZZ
@given(
    B=st.integers(1, 2),
    heads=st.integers(1, 3),
    per_head=st.integers(1, 3),
    L=st.integers(1, 30),
    max_left=st.integers(0, 40),
    max_right=st.integers(0, 40),
    specials=st.lists(_SPECIAL, max_size=8),
    engine=st.sampled_from(['torch', 'native'] if HAVE_NATIVE_TALK else ['torch']),
    dtype=st.sampled_from([torch.float64, torch.float32]),
)
def test_talk1d_engines(B, heads, per_head, L, max_left, max_right, specials, engine, dtype):
    x = torch.randn(B, heads * per_head, L, dtype=dtype)
    off = _offsets((B, heads, L, 2), specials)
    y = talk1d(x, off.to(dtype), max_left, max_right, engine=engine)
    ref = talk1d(x.double(), off, max_left, max_right, engine='reference')
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    ok = ~torch.isnan(ref)
    torch.testing.assert_close(y.double()[ok], ref[ok], rtol=tol, atol=tol)


@FUZZ_SLOW
@given(
    heads=st.integers(1, 2),
    per_head=st.integers(1, 2),
    H=st.integers(1, 9),
    W=st.integers(1, 9),
    maxes=st.tuples(*[st.integers(0, 10)] * 4),
    specials=st.lists(_SPECIAL, max_size=8),
    engine=st.sampled_from(['torch', 'native'] if HAVE_NATIVE_TALK else ['torch']),
)
def test_talk2d_engines(heads, per_head, H, W, maxes, specials, engine):
    x = torch.randn(2, heads * per_head, H, W, dtype=torch.float64)
    off = _offsets((2, heads, H, W, 4), specials)
    y = talk2d(x, off, *maxes, engine=engine)
    ref = talk2d(x, off, *maxes, engine='reference')
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    ok = ~torch.isnan(ref)
    torch.testing.assert_close(y[ok], ref[ok], rtol=1e-10, atol=1e-10)
