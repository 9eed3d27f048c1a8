"""FlopCounterMode counts the long-convolution operators: hand counts of one small layer (forward and backward),
alike for every engine, with taps that reach no output not counted."""

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mrconvnext.ops import long_conv1d
from mrconvnext.ops.long_conv import branch_conv_bn_sum, branch_conv_bn_sum_supported
from mrconvnext.ops.long_conv import dispatch as long_conv_dispatch


def rfft(n: int) -> float:
    return 2.5 * n * math.log2(n)  # one real FFT or inverse (the convention of ops/long_conv/flops.py)


def counted(fn) -> dict[str, int]:
    with FlopCounterMode(display=False) as counter:
        fn()
    return {str(op): v for op, v in counter.get_flop_counts()['Global'].items()}


@pytest.mark.parametrize('engine', ['auto', 'torch'])
def test_fft_conv_counts_its_transforms_and_products(engine):
    # x (B=2, C=3, L=10), one 7-tap kernel centred at lag 3: every tap reaches an output; no wrap-around needs
    # n >= 10 + 3 = 13, the next 7-smooth size is 14 (8 bins). Forward: 6 input + 3 kernel + 6 inverse transforms,
    # 6 products of 8 bins at 6 flops.
    x = torch.randn(2, 3, 10, requires_grad=True)
    k = torch.randn(3, 7, requires_grad=True)
    op = 'mrconvnext.fft_conv' if engine == 'auto' else 'mrconvnext.fft_conv_torch'
    fwd = counted(lambda: long_conv1d(x, k, zero_lag=3, method='fft', engine=engine))
    assert fwd == {op: round(15 * rfft(14) + 6 * 6 * 8)}
    # backward: 6 gradient + 3 kernel spectra; grad_x: 6 products accumulated (8 flops a bin) + 6 inverses;
    # grad_k: 6 input spectra, 6 accumulated products, 3 inverses.
    y = long_conv1d(x, k, zero_lag=3, method='fft', engine=engine)
    bwd = counted(lambda: y.backward(torch.ones_like(y)))
    assert bwd[f'{op}_backward'] == round((6 + 3 + 6 + 6 + 3) * rfft(14) + 2 * 8 * 6 * 8)


def test_taps_that_reach_no_output_are_not_counted():
    # 41 taps centred at lag 20 over L = 10: lags -9..9 reach an output (19 taps, centre 9), n >= 10 + 9 -> 20
    x = torch.randn(1, 2, 10)
    k = torch.randn(2, 41)
    fwd = counted(lambda: long_conv1d(x, k, zero_lag=20, method='fft', engine='torch'))
    assert fwd == {'mrconvnext.fft_conv_torch': round((2 + 2 + 2) * rfft(20) + 6 * 11 * 2)}


@pytest.mark.skipif(
    not long_conv_dispatch.conv_bn_sum_available(torch.zeros(1)), reason='the fused native kernels do not build'
)
def test_branch_conv_bn_sum_counts_fft_work_norms_and_sum():
    # x (2, 3, 10), two 5-tap branches centred at lag 2: n >= 12, 12 is 7-smooth (7 bins). Forward: 6 input, 6 kernel,
    # 12 inverse transforms, 12 products; BatchNorm moments (4) and scale-shift-sum (3) per branch output.
    x = torch.randn(2, 3, 10, requires_grad=True)
    kernels = torch.randn(2, 3, 5, requires_grad=True)
    w, b, a = (torch.randn(2, 3, requires_grad=True) for _ in range(3))
    assert branch_conv_bn_sum_supported(x)
    fwd = counted(lambda: branch_conv_bn_sum(x, kernels, 2, w, b, a))
    assert fwd['mrconvnext.branch_conv_bn_sum'] == round(24 * rfft(12) + 6 * 7 * 12 + 7 * 120)
    y = branch_conv_bn_sum(x, kernels, 2, w, b, a)[0]
    bwd = counted(lambda: y.backward(torch.ones_like(y)))
    # 12 gradient + 6 kernel spectra, grad_x: 12 products + 6 inverses, grad_k: 6 input spectra, 12 products, 6
    # inverses; gradient sums 60 + 2 * 120 and the folded BatchNorm gradient 5 * 120
    expected = (12 + 6 + 6 + 6 + 6) * rfft(12) + 2 * 8 * 7 * 12 + 60 + 7 * 120
    assert bwd['mrconvnext.branch_conv_bn_sum_backward'] == round(expected)


def test_folded_bn_conv_counts_its_convolutions_by_method():
    # x (B=2, C=3, L=10), N=2 kernels of 19 taps centred at lag 9, the Toeplitz method: each convolution is a
    # 10 x 10 product per channel and batch item, 2 * N * C * L * L * B flops. Forward: the N branches once for the
    # statistics, the merged kernel once, 4 flops per branch output; backward: the branches once, their two
    # gradient products, the kernel gradient of one (C, K) convolution for the statistics' gradient (one product)
    # and its dot products with the N kernels (2 N C K) and the offsets (2 N C L), 5 per branch output, 2 per
    # input element.
    from mrconvnext.ops.long_conv import folded_bn_conv

    x = torch.randn(2, 3, 10, requires_grad=True)
    k = torch.randn(2, 3, 19, requires_grad=True)
    w, b, a = (torch.randn(2, 3, requires_grad=True) for _ in range(3))
    per_branch = 2 * 3 * 10 * 10 * 2
    y = folded_bn_conv(x, k, 9, w, b, a, method='toeplitz')[0]
    fwd = counted(lambda: folded_bn_conv(x, k, 9, w, b, a, method='toeplitz'))
    assert fwd == {'mrconvnext.folded_bn_conv': 2 * per_branch + per_branch + 4 * 2 * 2 * 3 * 10}
    bwd = counted(lambda: y.backward(torch.ones_like(y)))
    stats = per_branch + 2 * 2 * 3 * 19 + 2 * 2 * 3 * 10
    expected = 2 * per_branch + 2 * 2 * per_branch + stats + 5 * 2 * 2 * 3 * 10 + 2 * 2 * 3 * 10
    assert bwd == {'mrconvnext.folded_bn_conv_backward': expected}


def test_folded_bn_conv_counts_shared_filters_as_they_run():
    # x (B=2, C=4, L=10), N=2 branches of M=2 shared filters (7 taps centred at lag 3, FFT size 14, 8 bins). On the
    # FFT method the filters run expanded to the channels: the branch convolutions transform the 8 input rows, 8
    # kernels and the 16 outputs, with 16 products; the merged (C, K) kernel's convolution 8 + 4 + 8 transforms and 8
    # products; 4 flops per branch output. On the Toeplitz method the groups are batch items: N M = 4 matrices of
    # 10 x 10 times B G = 4 columns, the same multiply-adds as N C matrices times B columns.
    from mrconvnext.ops.long_conv import folded_bn_conv

    x = torch.randn(2, 4, 10)
    k = torch.randn(2, 2, 7)
    w, b, a = (torch.randn(2, 4) for _ in range(3))
    fwd = counted(lambda: folded_bn_conv(x, k, 3, w, b, a, method='fft'))
    expected = (8 + 8 + 16) * rfft(14) + 6 * 8 * 16 + (8 + 4 + 8) * rfft(14) + 6 * 8 * 8 + 4 * 2 * 2 * 4 * 10
    assert fwd == {'mrconvnext.folded_bn_conv': round(expected)}
    fwd = counted(lambda: folded_bn_conv(x, k, 3, w, b, a, method='toeplitz'))
    per_branch = 2 * 2 * 10 * 10 * 4
    assert fwd == {'mrconvnext.folded_bn_conv': 2 * per_branch + per_branch + 4 * 2 * 2 * 4 * 10}
