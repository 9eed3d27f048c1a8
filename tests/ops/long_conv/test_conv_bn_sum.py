"""mrconvnext.ops.branch_conv_bn_sum (fused conv + per-branch BatchNorm + weighted sum) against composites of
independent pieces: F.conv1d-backed long_conv1d(method='direct'), F.batch_norm, an explicit sum."""

import pytest
import torch
import torch.nn.functional as F

from mrconvnext.ops import long_conv1d
from mrconvnext.ops.long_conv import branch_conv_bn_sum, branch_conv_bn_sum_supported

pytestmark = pytest.mark.skipif(
    not branch_conv_bn_sum_supported(torch.zeros(1, 1, 1)), reason='fused CPU extension unavailable (no MKL/compiler)'
)


def reference(x, kernels, zero_lag, weight, bias, alpha, eps):
    B, C, L = x.shape
    N = kernels.shape[0]
    z = long_conv1d(x, kernels, zero_lag=zero_lag, method='direct')  # (B, N, C, L)
    zn = F.batch_norm(z.reshape(B, N * C, L), None, None, weight.reshape(-1), bias.reshape(-1), True, 0.0, eps)
    y = (zn.view(B, N, C, L) * alpha.unsqueeze(-1)).sum(1)
    zd = z.detach()
    return y, zd.mean((0, 3)), zd.var((0, 3), unbiased=False)


def make(dtype, N=3, B=3, C=5, L=17, K=23, layout='contiguous'):
    x = torch.randn(B, C, L, dtype=dtype) if layout == 'contiguous' else torch.randn(B, L, C, dtype=dtype).mT
    k = torch.randn(N, C, K, dtype=dtype) / K**0.5
    w = 1 + 0.3 * torch.randn(N, C, dtype=dtype)
    b = 0.3 * torch.randn(N, C, dtype=dtype)
    a = torch.rand(N, C, dtype=dtype)
    return [t.requires_grad_() for t in (x, k, w, b, a)]


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('layout', ['contiguous', 'channels_last'])
@pytest.mark.parametrize('zero_lag', [0, 11, 22])
def test_matches_composite_reference(dtype, layout, zero_lag):
    args = make(dtype, layout=layout)
    y, mean, var = branch_conv_bn_sum(*args[:2], zero_lag, *args[2:], eps=1e-5)
    ry, rmean, rvar = reference(*args[:2], zero_lag, *args[2:], eps=1e-5)
    assert y.stride() == args[0].stride()  # laid out like x
    tol = dict(rtol=1e-9, atol=1e-9) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(y, ry, **tol)
    torch.testing.assert_close(mean, rmean, **tol)
    torch.testing.assert_close(var, rvar, **tol)
    gy = torch.randn_like(y)
    grads = torch.autograd.grad(y, args, gy)
    ref_grads = torch.autograd.grad(ry, args, gy)
    for name, g, r in zip(('x', 'kernels', 'weight', 'bias', 'alpha'), grads, ref_grads):
        torch.testing.assert_close(g, r, **tol, msg=lambda m, n=name: f'grad {n}: {m}')


def test_gradcheck():
    x, k, w, b, a = make(torch.float64, N=2, B=2, C=3, L=9, K=11)
    assert torch.autograd.gradcheck(lambda *t: branch_conv_bn_sum(t[0], t[1], 5, *t[2:])[0], (x, k, w, b, a))


def test_bad_inputs():
    x, k, w, b, a = (t.detach() for t in make(torch.float32))
    with pytest.raises(ValueError, match='kernel of shape'):
        branch_conv_bn_sum(x, k[:, :2], 3, w, b, a)
    for zero_lag in (-1, k.shape[-1], 100):  # long_conv1d's rule: lag 0 must be a tap of the kernel
        with pytest.raises(ValueError, match='zero_lag must index a tap'):
            branch_conv_bn_sum(x, k, zero_lag, w, b, a)
    with pytest.raises(TypeError, match='floating-point input'):
        branch_conv_bn_sum(x.long(), k, 3, w, b, a)
    with pytest.raises(ValueError, match='alpha of shape'):
        branch_conv_bn_sum(x, k, 3, w, b, a[:1])
    with pytest.raises(ValueError, match='more than 1 value per channel'):
        branch_conv_bn_sum(x[:1, :, :1], k, 3, w, b, a)


@pytest.mark.parametrize(
    ('dtype', 'mean', 'tol'), [(torch.float32, 100.0, 1e-4), (torch.float32, 1000.0, 1e-4), (torch.float64, 1e8, 1e-6)]
)
@pytest.mark.parametrize('K', [1, 3, 31])
def test_statistics_at_large_means(dtype, mean, tol, K):
    # Regression (issue 13): E[z^2] - E[z]^2 in float32 lanes lost 4e-2 of a unit variance at mean 1000, and float64
    # gave garbage at mean 1e8. Short kernels keep the mean in z (long zero-padded ones hid the problem). The reference
    # is float64 BatchNorm of the float64 convolution of the same (rounded) input; the error is absolute on outputs of
    # unit scale. 1e-4 in float32 is about 3 ulps of the input's own rounding at mean 1000 (ulp 6.1e-5).
    N, C = 2, 4
    x = (torch.randn(3, C, 64, dtype=torch.float64) * (1 + torch.rand(C, 1, dtype=torch.float64)) + mean).to(dtype)
    k = torch.randn(N, C, K, dtype=torch.float64) / K**0.5
    w = 1 + 0.3 * torch.randn(N, C, dtype=torch.float64)
    b = 0.3 * torch.randn(N, C, dtype=torch.float64)
    a = torch.rand(N, C, dtype=torch.float64)
    xf = x.clone().requires_grad_()
    y, m, v = branch_conv_bn_sum(xf, k.to(dtype), K // 2, w.to(dtype), b.to(dtype), a.to(dtype))
    xr = x.double().requires_grad_()
    ry, rm, rv = reference(xr, k, K // 2, w, b, a, 1e-5)
    torch.testing.assert_close(y.double(), ry, rtol=0, atol=tol)
    torch.testing.assert_close(v.double(), rv, rtol=tol, atol=0)
    torch.testing.assert_close(m.double(), rm, rtol=tol, atol=0)
    g = torch.randn_like(ry)
    (gx,) = torch.autograd.grad(y, xf, g.to(dtype))
    (rgx,) = torch.autograd.grad(ry, xr, g)
    torch.testing.assert_close(gx.double(), rgx, rtol=0, atol=tol)


def test_issue_reproducer_variance_at_mean_1000():
    x = torch.randn(2, 4, 64) + 1000.0
    one = torch.ones(1, 4)
    y, mean, var = branch_conv_bn_sum(x, torch.ones(1, 4, 1), 0, one, torch.zeros(1, 4), one)
    xd = x.double()
    torch.testing.assert_close(var[0].double(), xd.var((0, 2), unbiased=False), rtol=1e-5, atol=0)
    ref = F.batch_norm(xd, None, None, None, None, True, 0.0, 1e-5)
    torch.testing.assert_close(y.double(), ref, rtol=0, atol=1e-4)
