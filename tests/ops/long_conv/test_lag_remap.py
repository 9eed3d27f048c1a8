import pytest
import torch

from mrconvnext.ops.long_conv import remap_lags, remapped_layout
from tests.reference import remap_lags_loop


def _as_dict(kernel: torch.Tensor, zero_lag: int) -> dict[int, torch.Tensor]:
    return {j - zero_lag: kernel[..., j] for j in range(kernel.shape[-1])}


@pytest.mark.parametrize('causal', [True, False])
@pytest.mark.parametrize(
    'reach, width, new_width, new_length',
    [
        (20, 5, 7, None),  # wider
        (20, 5, 3, None),  # narrower: readings with |dx| >= 3 are dropped
        (64, 8, 10, 60),  # cropped to the new sequence length
        (9, 4, 1, None),  # down to one column: only whole rows survive
        (3, 1, 4, None),  # from one column: every lag is whole rows
        (50, 7, 6, 30),
        (1, 3, 5, None),  # lag 0 only
        (13, 13, 2, None),  # one row of the old width
    ],
)
def test_matches_the_loop_of_the_rule(causal, reach, width, new_width, new_length):
    """Fresh random float64 kernels, (C, P) and stacked (N, C, P): every new lag equals the tap-by-tap rule, no
    other lag is set, and the layout is the tightest one holding the rule's lags."""
    size, zero_lag = (reach, 0) if causal else (2 * reach - 1, reach - 1)
    for shape in ((3, size), (2, 3, size)):
        k = torch.randn(*shape, dtype=torch.float64)
        out, zl = remap_lags(k, zero_lag, width, new_width, new_length)
        assert (out.shape[-1], zl) == remapped_layout(size, zero_lag, width, new_width, new_length)
        ref = remap_lags_loop(k, zero_lag, width, new_width, new_length)
        got = _as_dict(out, zl)
        for lag, value in got.items():
            expected = ref.get(lag, torch.zeros_like(value))
            torch.testing.assert_close(value, expected, rtol=1e-12, atol=1e-12, msg=f'lag {lag}')
        assert set(ref) <= set(got), f'lags of the rule missing from the layout: {sorted(set(ref) - set(got))}'
        reach_ref = max(abs(lag) for lag in ref) + 1
        expected_layout = (reach_ref, 0) if causal else (2 * reach_ref - 1, reach_ref - 1)
        assert (out.shape[-1], zl) == expected_layout
        if causal:
            assert min(ref) >= 0


@pytest.mark.parametrize('causal', [True, False])
def test_identity_at_the_nominal_width(causal):
    k = torch.randn(4, 11 if not causal else 6, dtype=torch.float32)
    zero_lag = 0 if causal else 5
    out, zl = remap_lags(k, zero_lag, 7, 7, 49)
    assert out is k and zl == zero_lag
    # the rule itself is the identity there (up to the rounding of the two fractions)
    ref = remap_lags_loop(k.double(), zero_lag, 7, 7)
    for lag, value in _as_dict(k.double(), zero_lag).items():
        torch.testing.assert_close(ref[lag], value, rtol=1e-15, atol=0)


@pytest.mark.parametrize('new_width', [3, 5, 9, 20])
def test_whole_rows_stay_whole_rows(new_width):
    """Taps only at multiples of the width land, with their weights unchanged, on multiples of the new width."""
    W, rows = 6, 4
    size, zero_lag = 2 * rows * W + 1, rows * W
    k = torch.zeros(3, size, dtype=torch.float64)
    whole = torch.arange(-rows, rows + 1) * W + zero_lag
    k[:, whole] = torch.randn(3, whole.numel(), dtype=torch.float64)
    out, zl = remap_lags(k, zero_lag, W, new_width)
    nonzero = (out != 0).any(0).nonzero().flatten() - zl
    assert torch.equal(nonzero, torch.arange(-rows, rows + 1) * new_width)
    torch.testing.assert_close(out[:, nonzero + zl], k[:, whole], rtol=0, atol=0)


def test_gradcheck_and_dtypes():
    k = torch.randn(2, 2, 15, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: remap_lags(t, 7, 4, 6, 30)[0], (k,))
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        out, _ = remap_lags(k.detach().to(dtype), 7, 4, 6, 30)
        assert out.dtype == dtype


def test_tables_made_in_inference_mode_serve_a_later_backward():
    with torch.inference_mode():
        remap_lags(torch.randn(2, 9), 4, 3, 5)
    k = torch.randn(2, 9, requires_grad=True)
    remap_lags(k, 4, 3, 5)[0].sum().backward()
    assert k.grad is not None and torch.isfinite(k.grad).all()


def test_compiles():
    k = torch.randn(3, 2, 21)
    fn = torch.compile(lambda t: remap_lags(t, 10, 5, 8, 40)[0], fullgraph=True, backend='aot_eager')
    torch.testing.assert_close(fn(k), remap_lags(k, 10, 5, 8, 40)[0], rtol=0, atol=0)


@pytest.mark.parametrize(
    'args, error, match',
    [
        ((torch.randn(2, 5), 1, 3, 4), ValueError, 'causal .* or symmetric'),
        ((torch.randn(2, 5), 2, 0, 4), ValueError, 'width must be an int >= 1, got 0'),
        ((torch.randn(2, 5), 2, 3, True), TypeError, 'new_width must be an int >= 1, got bool'),
        ((torch.randn(2, 5), 2, 3.0, 4), TypeError, 'width must be an int >= 1, got float'),
        ((torch.ones(2, 5, dtype=torch.int64), 2, 3, 4), TypeError, 'floating-point'),
        (([1.0, 2.0], 0, 3, 4), TypeError, 'torch.Tensor'),
    ],
)
def test_bad_arguments(args, error, match):
    with pytest.raises(error, match=match):
        remap_lags(*args)
