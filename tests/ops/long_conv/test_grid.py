"""The identities behind the matmul methods (mrconvnext.ops.long_conv.grid), in float64 against the direct
convolution: random shapes, odd and non-square maps, causal kernels, kernels shorter and longer than the map."""

import pytest
import torch
import torch.nn.functional as F

from mrconvnext.ops.long_conv.grid import (
    kernel_2d,
    kernel_spectrum_2d,
    row_cdft,
    row_cidft,
    row_dft,
    row_grid,
    row_idft,
    toeplitz_blocks,
    toeplitz_blocks_vjp,
    toeplitz_matrix,
    toeplitz_matrix_vjp,
)
from tests.reference import shifted_sum_conv

DT = torch.float64
# (H, W, K, zero_lag): bidirectional full reach, causal, shorter than the map, longer than the map, a row, a column
CASES = [(5, 7, 69, 34), (6, 4, 24, 0), (4, 9, 11, 5), (7, 7, 160, 100), (1, 13, 9, 4), (9, 1, 9, 8), (3, 8, 1, 0)]


@pytest.mark.parametrize('H, W, K, zero_lag', CASES)
def test_identity_1_the_flattened_convolution_is_a_2d_convolution(H, W, K, zero_lag):
    x = torch.randn(2, 3, H, W, dtype=DT)
    k = torch.randn(3, K, dtype=DT)
    ref = shifted_sum_conv(x.flatten(2), k, zero_lag).view(2, 3, H, W)  # tap loop
    k2 = kernel_2d(k, zero_lag, H, W)  # (C, 2H - 1, 2W - 1), offsets from -(H - 1), -(W - 1)
    y = F.conv2d(x, k2.flip(-1, -2).unsqueeze(1), padding=(H - 1, W - 1), groups=3)  # a correlation: flip
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('H, W, K, zero_lag', CASES)
def test_identity_2_row_dft_then_toeplitz_per_frequency(H, W, K, zero_lag):
    """The three steps as written in grid.py's matrices, on the map's own rows (P = H, Q = W)."""
    x = torch.randn(2, 3, H, W, dtype=DT)
    k = torch.randn(3, K, dtype=DT)
    ref = shifted_sum_conv(x.flatten(2), k, zero_lag).view(2, 3, H, W)
    spec = torch.einsum('fw,bchw->bchf', row_dft(W, DT, 'cpu'), x)  # (B, C, H, 2 nf): [Re | Im]
    spec = spec.unflatten(-1, (2, W)).permute(1, 4, 2, 3, 0).reshape(3 * W, 2 * H, 2)  # ((c, f), (g, r), b)
    blocks = toeplitz_blocks(k.unsqueeze(0), zero_lag, H, W, DT)[0]  # ((f, c), (h, s), (g, r))
    blocks = blocks.view(W, 3, 2 * H, 2 * H).transpose(0, 1).reshape(3 * W, 2 * H, 2 * H)
    out = (blocks @ spec).view(3, W, H, 2, 2).permute(4, 0, 2, 3, 1).reshape(2, 3, H, 2 * W)  # (b, c, h, (s, f))
    y = torch.einsum('wf,bchf->bchw', row_idft(W, DT, 'cpu'), out)
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('H, W, K, zero_lag', CASES)
def test_identity_4_the_row_products_by_a_complex_dft(H, W, K, zero_lag):
    """The 2-D spectrum against torch.fft.fft2 of the 2-D kernel laid out circularly (offset a at a mod (2H - 1)), and
    the four steps (real DFT along the columns, complex DFT along the rows, the spectrum, both inverses) against the
    tap loop, on the map's own rows (P = H, Q = W)."""
    x = torch.randn(2, 3, H, W, dtype=DT)
    k = torch.randn(1, 3, K, dtype=DT)
    ref = shifted_sum_conv(x.flatten(2), k[0], zero_lag).view(2, 3, H, W)
    re, im = kernel_spectrum_2d(k, zero_lag, H, W, DT)  # (1, C, H, 2W - 1)
    k2 = kernel_2d(k, zero_lag, H, W)  # offsets from -(H - 1), -(W - 1)
    circular = k2.roll((-(H - 1), -(W - 1)), dims=(-2, -1))  # offset 0 first, negative offsets wrapped to the end
    spectrum = torch.fft.fft2(circular)[..., :H, :]
    torch.testing.assert_close(torch.complex(re, im), spectrum, rtol=1e-10, atol=1e-10)
    spec = (row_dft(H, DT, 'cpu') @ x).unflatten(2, (2, H)).transpose(2, 3)  # (B, C, f1, part, W)
    z = spec.flatten(-2) @ row_cdft(W, DT, 'cpu')  # (B, C, f1, [Re | Im] of 2W - 1)
    zc = torch.complex(*z.unflatten(-1, (2, 2 * W - 1)).unbind(-2)) * torch.complex(re, im)[0]
    y = torch.cat([zc.real, zc.imag], -1) @ row_cidft(W, DT, 'cpu')  # (B, C, f1, [re | im] of W)
    y = y.unflatten(-1, (2, W)).transpose(2, 3).flatten(2, 3)  # (B, C, [Re | Im] of f1, W)
    torch.testing.assert_close(row_idft(H, DT, 'cpu') @ y, ref, rtol=1e-10, atol=1e-10)


def test_the_complex_row_dft_is_torch_fft_and_inverts_on_the_points():
    for cols in (1, 2, 7, 16):
        z = torch.randn(4, cols, dtype=torch.complex128)
        Z = torch.cat([z.real, z.imag], -1) @ row_cdft(cols, DT, 'cpu')
        torch.testing.assert_close(torch.complex(*Z.unflatten(-1, (2, -1)).unbind(-2)), torch.fft.fft(z, 2 * cols - 1))
        torch.testing.assert_close(Z @ row_cidft(cols, DT, 'cpu'), torch.cat([z.real, z.imag], -1))


def test_the_row_dft_inverts_on_the_columns():
    for cols in (1, 2, 7, 56):
        x = torch.randn(4, cols, dtype=DT)
        torch.testing.assert_close(x @ row_dft(cols, DT, 'cpu').T @ row_idft(cols, DT, 'cpu').T, x)


@pytest.mark.parametrize('L, K, zero_lag', [(49, 97, 48), (30, 7, 3), (17, 100, 60), (13, 13, 0)])
def test_identity_3_a_toeplitz_product_per_channel(L, K, zero_lag):
    x = torch.randn(3, 2, L, dtype=DT)
    k = torch.randn(2, K, dtype=DT)
    y = torch.einsum('cts,bcs->bct', toeplitz_matrix(k, zero_lag, L), x)
    ref = F.conv1d(F.pad(x, (K - 1, K - 1)), k.flip(-1).unsqueeze(1), groups=2)[..., zero_lag : zero_lag + L]
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('L', [1, 2, 3, 13, 17, 49, 64, 196, 200, 784, 3136, 4099])
def test_row_grid_holds_the_sequence_near_its_square_root(L):
    P, Q = row_grid(L)
    assert P * Q >= L and P * Q - L < Q  # at most one partial row
    assert Q * Q >= L // 2 and P <= 2 * Q + 1  # near sqrt(L)
    if L in (49, 196, 784, 3136):  # ConvNeXt's square maps fold back into their own rows
        assert P == Q and P * Q == L


@pytest.mark.parametrize('L, K, zero_lag', [(7, 13, 6), (5, 3, 0), (9, 30, 20), (1, 1, 0), (6, 2, 1), (4, 40, 35)])
def test_the_toeplitz_matrix_vjp_equals_autograd_through_its_gather(L, K, zero_lag):
    """The diagonal sums (no scatter) against autograd through toeplitz_matrix's gather, float64: kernels longer and
    shorter than the matrix, causal, taps that reach no entry (their gradient is 0)."""
    k = torch.randn(2, 3, K, dtype=DT, requires_grad=True)
    T = toeplitz_matrix(k, zero_lag, L)
    g = torch.randn_like(T)
    (want,) = torch.autograd.grad(T, k, g)
    torch.testing.assert_close(toeplitz_matrix_vjp(g, K, zero_lag), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    'P, Q, K, zero_lag',
    [(3, 4, 23, 11), (2, 5, 7, 0), (4, 3, 40, 30), (1, 1, 1, 0), (3, 3, 5, 4), (1, 2, 3, 1), (3, 1, 5, 2)],
)
def test_the_toeplitz_blocks_vjp_equals_autograd_through_its_gather(P, Q, K, zero_lag):
    """The blocks' diagonal sums and the 2-D kernel's overlap-add against autograd through toeplitz_blocks, float64."""
    k = torch.randn(2, 3, K, dtype=DT, requires_grad=True)
    blocks = toeplitz_blocks(k, zero_lag, P, Q, DT)
    g = torch.randn_like(blocks)
    (want,) = torch.autograd.grad(blocks, k, g)
    torch.testing.assert_close(toeplitz_blocks_vjp(g, (2, 3, K), zero_lag, P, Q), want, rtol=1e-12, atol=1e-12)
