"""The custom operators (torch.library) behind the ops: opcheck (schema, fake tensors, autograd registration, AOT
dispatch) on fresh random float64 inputs, channels-last layouts and optional arguments included, and the meta device.
Their values are tested against the references in long_conv/test_api.py / long_conv/test_conv_bn_sum.py."""

import pytest
import torch

from mrconvnext.ops import availability, long_conv1d
from mrconvnext.ops.long_conv import branch_conv_bn_sum_supported
from mrconvnext.ops.long_conv import operators as lc_ops
from mrconvnext.ops.long_conv.conv_bn_sum import conv_bn_sum_backward_op, conv_bn_sum_op
from mrconvnext.ops.talk import operators as talk_ops
from tests.reference import shifted_sum_conv

HAVE_FUSED = branch_conv_bn_sum_supported(torch.zeros(1, 1, 1))


def _x(layout, B=2, C=3, L=10):
    x = torch.randn(B, C, L, dtype=torch.float64)
    return x.transpose(1, 2).contiguous().transpose(1, 2) if layout == 'channels_last' else x


@pytest.mark.parametrize('op', ['fft_conv', 'fft_conv_torch'])
@pytest.mark.parametrize('layout', ['contiguous', 'channels_last'])
@pytest.mark.parametrize('N', [1, 3])
@pytest.mark.parametrize('with_bias', [False, True])
@pytest.mark.parametrize('K, zero_lag', [(7, 3), (25, 0), (31, 24)])  # within, and reaching past both ends
def test_opcheck_fft_conv(op, layout, N, with_bias, K, zero_lag):
    fft_conv, fft_conv_backward = getattr(lc_ops, op), getattr(lc_ops, f'{op}_backward')
    x = _x(layout).requires_grad_()
    k = torch.randn(N, 3, K, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True) if with_bias else None
    args = (x, k, zero_lag, b) if with_bias else (x, k, zero_lag)  # bias given, or left at its default
    torch.library.opcheck(fft_conv, args)
    g = torch.randn(2, N, 3, 10, dtype=torch.float64)
    for need in [(True, True), (True, False), (False, True)]:
        torch.library.opcheck(fft_conv_backward, (g, x.detach(), k.detach(), zero_lag, *need))


@pytest.mark.parametrize('op', ['fft_conv', 'fft_conv_torch'])
@pytest.mark.parametrize('x_dtype, k_dtype', [(torch.bfloat16, torch.float32), (torch.float32, torch.float64)])
def test_opcheck_fft_conv_with_x_in_another_dtype(op, x_dtype, k_dtype):
    """An ``x`` (and output gradient) in another dtype than the kernels (a half-precision map under autocast): the
    output and ``grad_x`` in ``x``'s dtype, the kernels' gradient in theirs."""
    fft_conv, fft_conv_backward = getattr(lc_ops, op), getattr(lc_ops, f'{op}_backward')
    x = _x('channels_last').to(x_dtype).requires_grad_()
    k = torch.randn(2, 3, 9, dtype=k_dtype, requires_grad=True)
    b = torch.randn(3, dtype=k_dtype)
    torch.library.opcheck(fft_conv, (x, k, 4, b))
    assert fft_conv(x, k, 4, b).dtype == x_dtype
    g = torch.randn(2, 2, 3, 10, dtype=x_dtype)
    for need in [(True, True), (True, False), (False, True)]:
        torch.library.opcheck(fft_conv_backward, (g, x.detach(), k.detach(), 4, *need))


@pytest.mark.parametrize('op', ['fft_conv', 'fft_conv_torch'])
def test_opcheck_fft_conv_backward_with_a_bfloat16_copy_of_x(op):
    """The backward of a float32 input trained under bf16 autocast gets the bf16 copy autograd kept of ``x`` and a
    float32 output gradient: ``grad_x`` in the gradient's float32, laid out like ``x``, and float64 autograd's
    through the tap loop at the float32 ``x`` (it does not read ``x``); the kernels' gradient float64 autograd's at
    ``x`` rounded to bf16 (1e-5 of the largest)."""
    fft_conv_backward = getattr(lc_ops, f'{op}_backward')
    x = _x('channels_last').float()
    k = torch.randn(2, 3, 9)
    g = torch.randn(2, 2, 3, 10)
    for need in [(True, True), (True, False), (False, True)]:
        torch.library.opcheck(fft_conv_backward, (g, x.bfloat16(), k, 4, *need))
    gx, gk = fft_conv_backward(g, x.bfloat16(), k, 4, True, True)
    assert gx.dtype == torch.float32 and gx.stride() == x.stride()

    def grads(xd):
        xd, kd = xd.double().requires_grad_(), k.double().requires_grad_()
        y = torch.stack([shifted_sum_conv(xd, kd[i], 4) for i in range(2)], 1)
        return torch.autograd.grad(y, (xd, kd), g.double())

    for got, want in ((gx, grads(x)[0]), (gk, grads(x.bfloat16())[1])):
        assert (got.double() - want).abs().max() <= 1e-5 * want.abs().max()


def test_fft_conv_gradcheck_with_cropped_taps():
    """The operator's registered backward against finite differences, taps past both ends included (their gradient
    is 0: they reach no output)."""
    x = torch.randn(2, 3, 9, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 3, 25, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True)
    for fft_conv in (lc_ops.fft_conv, lc_ops.fft_conv_torch):
        torch.autograd.gradcheck(lambda x, k, b, op=fft_conv: op(x, k, 12, b), (x, k, b))
        (g,) = torch.autograd.grad(fft_conv(x, k, 12).sum(), k)
        assert g[..., :4].abs().max() == 0 and g[..., -4:].abs().max() == 0


@pytest.mark.skipif(not HAVE_FUSED, reason='fused CPU extension unavailable (no MKL/compiler)')
@pytest.mark.parametrize('layout', ['contiguous', 'channels_last'])
def test_opcheck_branch_conv_bn_sum(layout):
    N, n = 2, 24
    x = _x(layout).requires_grad_()
    k = torch.randn(N, 3, n, dtype=torch.float64, requires_grad=True)
    ones = torch.rand(N, 3, 10, dtype=torch.float64)
    w, b, a = (torch.randn(N, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    torch.library.opcheck(conv_bn_sum_op, (x, k, ones, w, b, a, n, 1e-5))
    _, stats, z, k_f = conv_bn_sum_op(x.detach(), k.detach(), ones, w.detach(), b.detach(), a.detach(), n, 1e-5)
    g = torch.randn_like(x)
    args = (g, x.detach(), k_f, z, stats, w.detach(), b.detach(), a.detach(), n, 1e-5)
    for need in [(True, True), (False, True), (True, False)]:
        torch.library.opcheck(conv_bn_sum_backward_op, (*args, *need))


@pytest.mark.parametrize('stacked', [False, True])
def test_long_conv1d_on_the_meta_device(stacked):
    x = torch.empty(2, 4, 50, device='meta')
    k = torch.empty(*((3,) if stacked else ()), 4, 99, device='meta')
    y = long_conv1d(x, k, torch.empty(4, device='meta'), zero_lag=49, method='fft')
    assert y.device.type == 'meta' and y.shape == ((2, 3, 4, 50) if stacked else (2, 4, 50))


# ---------------------------------------------------------------------------------------- TaLK and DynamicConv


@pytest.mark.parametrize('op', ['talk1d', 'talk1d_torch'])
@pytest.mark.parametrize('layout', ['contiguous', 'channels_last'])
def test_opcheck_talk1d(op, layout):
    """The per-device operator (the native kernel here, where it builds) and the PyTorch engine's."""
    forward, backward = getattr(talk_ops, op), getattr(talk_ops, f'{op}_backward')
    x = _x(layout, C=4).requires_grad_()
    off = torch.rand(2, 2, 10, 2, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(forward, (x, off, 3, 2))
    g = torch.randn(2, 4, 10, dtype=torch.float64)
    for need in [(True, True), (True, False), (False, True)]:
        torch.library.opcheck(backward, (g, x.detach(), off.detach(), 3, 2, *need))


@pytest.mark.parametrize('op', ['talk2d', 'talk2d_torch'])
def test_opcheck_talk2d(op):
    forward, backward = getattr(talk_ops, op), getattr(talk_ops, f'{op}_backward')
    x = torch.randn(2, 4, 5, 6, dtype=torch.float64, requires_grad=True)
    off = torch.rand(2, 2, 5, 6, 4, dtype=torch.float64, requires_grad=True)
    maxes = (2, 1, 1, 2)
    torch.library.opcheck(forward, (x, off, *maxes))
    _, P = forward(x.detach(), off.detach(), *maxes)
    g = torch.randn(2, 4, 5, 6, dtype=torch.float64)
    for need in [(True, True), (True, False), (False, True)]:
        torch.library.opcheck(backward, (g, P, off.detach(), *maxes, *need))


@pytest.mark.parametrize(
    ('name', 'devices'),
    [
        ('talk1d', ('CPU', 'CUDA')),
        ('talk1d_backward', ('CPU', 'CUDA')),
        ('talk2d', ('CPU', 'CUDA')),
        ('talk2d_backward', ('CPU', 'CUDA')),
        ('fft_conv', ('CPU',)),
        ('fft_conv_backward', ('CPU',)),
        ('branch_conv_bn_sum', ('CPU',)),
    ],
)
def test_operators_have_a_kernel_per_device(name, devices):
    """One schema, a kernel per device as ATen's operators have: no engine string in any schema, and the devices'
    own implementations registered for their dispatch keys (the rest runs the default, PyTorch-op implementation)."""
    schema = str(getattr(torch.ops.mrconvnext, name).default._schema)
    assert 'str ' not in schema and 'backend' not in schema and 'engine' not in schema, schema
    for key in devices:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f'mrconvnext::{name}', key), (name, key)


@pytest.mark.parametrize('zero_lag', [0, 2, 4])
def test_opcheck_dynamic_conv(zero_lag):
    from mrconvnext.ops.light_conv.operators import dynamic_conv_backward_op, dynamic_conv_op

    x4 = torch.randn(2, 2, 3, 9, dtype=torch.float64, requires_grad=True)
    w_t = torch.randn(2, 2, 5, 9, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(dynamic_conv_op, (x4, w_t, zero_lag))
    g = torch.randn(2, 2, 3, 9, dtype=torch.float64)
    for need in [(True, True), (True, False), (False, True)]:
        torch.library.opcheck(dynamic_conv_backward_op, (g, x4.detach(), w_t.detach(), zero_lag, *need))


# ---------------------------------------------------------------------------------------------- decompositions


def test_decompositions_equal_the_operators():
    """Every entry of the export decomposition table computes its operator's outputs (float64, fresh inputs)."""
    from mrconvnext.ops.decompositions import decompositions

    triton = (
        availability.triton_unavailable('cpu') is None
    )  # the interpreter is on (no GPU): the Triton operators run here
    if triton:
        from mrconvnext.ops.talk import engine_triton  # noqa: F401  (registers the operators)
    table = decompositions()
    ops = torch.ops.mrconvnext
    d = dict(dtype=torch.float64)
    x1, off1 = torch.randn(2, 4, 11, **d), torch.rand(2, 2, 11, 2, **d)
    x2, off2 = torch.randn(2, 4, 5, 6, **d), torch.rand(2, 1, 5, 6, 4, **d)
    kernel, bias = torch.randn(3, 4, 27, **d), torch.randn(4, **d)  # lags -13 .. 13 reach past both ends of 11
    cases = [
        (ops.talk1d.default, (x1, off1, 3, 2)),
        (ops.talk1d_torch.default, (x1, off1, 3, 2)),
        (ops.talk2d.default, (x2, off2, 2, 1, 1, 2)),
        (ops.talk2d_torch.default, (x2, off2, 2, 1, 1, 2)),
        (ops.dynamic_conv.default, (torch.randn(2, 2, 3, 9, **d), torch.randn(2, 2, 5, 9, **d), 2)),
        (ops.fft_conv.default, (x1, kernel, 13, bias)),
        (ops.fft_conv_torch.default, (x1, kernel, 13, bias)),
    ]
    if triton:
        cases += [(ops.talk1d_triton.default, (x1, off1, 3, 2)), (ops.talk2d_triton.default, (x2, off2, 2, 1, 1, 2))]
        # a channels-last map: the operator leaves its table out ((0,)), and so does the decomposition
        x2_cl = x2.contiguous(memory_format=torch.channels_last)
        cases += [(ops.talk2d_triton.default, (x2_cl, off2, 2, 1, 1, 2))]
    for op, args in cases:
        want, got = op(*args), table[op](*args)
        want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
        assert len(want) == len(got), op
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=lambda m, o=op: f'{o}: {m}')
