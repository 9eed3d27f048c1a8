"""FlopCounterMode counts DynamicConv: 2 flops per multiply-add of the taps that read inside the sequence, counted
here by a naive loop over outputs and taps."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mrconvnext.ops import availability, dynamic_conv1d, dynamic_softmax_conv1d


def counted(fn) -> dict[str, int]:
    with FlopCounterMode(display=False) as counter:
        fn()
    return {str(op): v for op, v in counter.get_flop_counts()['Global'].items()}


@pytest.mark.parametrize('causal', [False, True])
def test_dynamic_conv_counts_the_taps_inside_the_sequence(causal):
    B, C, H, L, K = 2, 6, 2, 7, 5
    x = torch.randn(B, C, L, requires_grad=True)
    w = torch.randn(B, H, L, K, requires_grad=True)
    zero_lag = K - 1 if causal else K // 2  # output t reads input t - (k - zero_lag)
    inside = sum(0 <= t - (k - zero_lag) < L for t in range(L) for k in range(K))
    fwd = counted(lambda: dynamic_conv1d(x, w, causal=causal))
    assert fwd == {'mrconvnext.dynamic_conv': 2 * B * C * inside}
    y = dynamic_conv1d(x, w, causal=causal)
    bwd = counted(lambda: y.backward(torch.ones_like(y)))
    assert bwd['mrconvnext.dynamic_conv_backward'] == 2 * (2 * B * C * inside)  # grad_x and grad_w


@pytest.mark.skipif(
    availability.triton_unavailable('cpu') is not None, reason=str(availability.triton_unavailable('cpu'))
)
@pytest.mark.parametrize('K', [1, 4, 9])
def test_dynamic_conv_triton_counts_the_same_taps(K):
    B, C, H, L = 2, 6, 3, 7
    x = torch.randn(B, C, L, requires_grad=True)
    logits = torch.randn(B, L, H, K, requires_grad=True)
    zero_lag = (K - 1) // 2
    inside = sum(0 <= t - (k - zero_lag) < L for t in range(L) for k in range(K))
    assert counted(lambda: dynamic_softmax_conv1d(x, logits, engine='triton')) == {
        'mrconvnext.dynamic_conv_triton': 2 * B * C * inside
    }
    y = dynamic_softmax_conv1d(x, logits, engine='triton')
    bwd = counted(lambda: y.backward(torch.ones_like(y)))
    assert bwd['mrconvnext.dynamic_conv_triton_backward'] == 2 * (2 * B * C * inside)


@pytest.mark.skipif(
    availability.triton_unavailable('cpu') is not None, reason=str(availability.triton_unavailable('cpu'))
)
@pytest.mark.parametrize('K', [1, 4, 9])
def test_light_conv_triton_counts_the_same_taps(K):
    from mrconvnext.ops import light_conv1d

    B, C, H, L = 2, 6, 3, 7
    x = torch.randn(B, C, L, requires_grad=True)
    w = torch.randn(H, K, requires_grad=True)
    zero_lag = (K - 1) // 2
    inside = sum(0 <= t - (k - zero_lag) < L for t in range(L) for k in range(K))
    fwd = counted(lambda: light_conv1d(x, w, num_heads=H, engine='triton'))
    assert fwd == {'mrconvnext.light_conv_triton': 2 * B * C * inside}
    y = light_conv1d(x, w, num_heads=H, engine='triton')
    bwd = counted(lambda: y.backward(torch.ones_like(y)))
    assert bwd['mrconvnext.light_conv_triton_backward'] == 2 * (2 * B * C * inside)
