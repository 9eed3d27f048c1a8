"""Tests for mrconvnext.ops.talk (TaLK 1-D / 2-D box summation convolutions) and its native kernels.

Independent references (``tests/reference.py``) are plain Python loops in float64 (fractional window overlaps, and the paper's
Eq. 5 literally); the PyTorch reference ``talk*_reference`` is then the specification for the fused op and the
native kernels.
"""

from __future__ import annotations

import shutil
import warnings

import pytest
import torch

from mrconvnext.ops import availability, engines
from mrconvnext.ops.native_build import cxx_compiler, ensure_ninja
from mrconvnext.ops.talk import dispatch as talk_dispatch
from mrconvnext.ops.talk import talk1d, talk1d_reference, talk2d, talk2d_reference, talk_offsets_dropout
from tests.reference import naive_talk1d, naive_talk2d, paper_eq5_talk1d

# --------------------------------------------------------------------------------------------- helpers


def talk_triton_interpreted() -> bool:
    from mrconvnext.ops.talk import engine_triton

    return engine_triton.interpreted()


def offsets_off_grid(shape: tuple[int, ...], maxes: list[int], dtype=torch.float64) -> torch.Tensor:
    """Random relative offsets whose absolute boundaries i -/+ o * m sit >= 0.2 away from integers.

    maxes[s] is the maximum of side s (last dim); sides with max 0 get arbitrary offsets.
    """
    out = torch.empty(shape, dtype=dtype)
    for s, m in enumerate(maxes):
        if m == 0:
            out[..., s] = torch.rand(shape[:-1], dtype=dtype)
        else:
            whole = torch.randint(0, m, shape[:-1]).to(dtype)
            frac = 0.2 + 0.6 * torch.rand(shape[:-1], dtype=dtype)
            out[..., s] = (whole + frac) / m
    return out


def random_offsets(shape: tuple[int, ...], maxes: list[int], dtype: torch.dtype) -> torch.Tensor:
    """Uniform offsets in float64; in float32 kept off the grid, where float32 rounding of the reference's
    positions could pick the other one-sided derivative at a kink."""
    return torch.rand(shape, dtype=dtype) if dtype == torch.float64 else offsets_off_grid(shape, maxes, dtype)


def have_native_cpu() -> bool:
    return cxx_compiler() is not None


IMPLS = [
    'torch',
    'onnx',  # the ONNX export's form (standard ops), run eagerly: its values and autograd against the specification
    pytest.param('native', marks=pytest.mark.skipif(not have_native_cpu(), reason='no C++ compiler')),
    # the Triton kernels on CPU tensors, through Triton's interpreter (tests/conftest.py turns it on without a GPU;
    # with a GPU the kernels are compiled and tests/cuda runs them on CUDA tensors)
    pytest.param(
        'triton',
        marks=pytest.mark.skipif(
            availability.triton_unavailable('cpu') is not None, reason=str(availability.triton_unavailable('cpu'))
        ),
    ),
]


def run_with_grads(fn, x, off, *args, engine):
    x = x.detach().requires_grad_()
    off = off.detach().requires_grad_()
    y = fn(x, off, *args, engine=engine)
    g = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(123))
    dx, doff = torch.autograd.grad(y, (x, off), g)
    return y, dx, doff


# ---------------------------------------------------------------------------------- native builds


def test_cpu_extension_builds():
    """The CPU extension must build wherever a C++ compiler exists (not skipped silently)."""
    if not have_native_cpu():
        pytest.skip('no C++ compiler (c++ / $CXX) on PATH')
    module = availability.build_native(availability.TALK_EXT)
    for fn in ('talk1d_forward', 'talk1d_backward', 'talk2d_forward', 'talk2d_backward'):
        assert hasattr(module, fn)
    assert talk_dispatch.talk_engine('cpu') == 'native'


# ------------------------------------------------------------------- reference vs independent loops


@pytest.mark.parametrize('causal', [False, True])
def test_reference_matches_naive_1d(causal):
    B, C, H, L, ml = 2, 4, 2, 16, 5
    mr = 0 if causal else 4
    x = torch.randn(B, C, L, dtype=torch.float64)
    off = offsets_off_grid((B, H, L, 2), [ml, mr])
    expected = naive_talk1d(x, off, ml, mr)
    torch.testing.assert_close(talk1d_reference(x, off, ml, mr), expected, rtol=1e-12, atol=1e-12)
    if causal:  # nothing to the right of i contributes
        x2 = x.clone()
        x2[..., 9:] = torch.randn_like(x2[..., 9:])
        torch.testing.assert_close(talk1d_reference(x2, off, ml, mr)[..., :9], expected[..., :9])


def test_reference_matches_paper_eq5():
    B, C, H, L, ml, mr = 1, 4, 2, 12, 4, 3
    x = torch.randn(B, C, L, dtype=torch.float64)
    off = offsets_off_grid((B, H, L, 2), [ml, mr])
    expected = paper_eq5_talk1d(x, off, ml, mr)
    torch.testing.assert_close(talk1d_reference(x, off, ml, mr), expected, rtol=1e-12, atol=1e-12)


def test_reference_matches_naive_2d():
    B, C, H, Hh, Ww = 1, 4, 2, 6, 7
    maxes = (3, 2, 2, 3)  # left, right, top, bottom
    x = torch.randn(B, C, Hh, Ww, dtype=torch.float64)
    off = offsets_off_grid((B, H, Hh, Ww, 4), list(maxes))
    expected = naive_talk2d(x, off, *maxes)
    torch.testing.assert_close(talk2d_reference(x, off, *maxes), expected, rtol=1e-12, atol=1e-12)


def test_onnx_2d_algorithms_match_naive():
    """TaLK 2-D's ONNX forms: the dense box matrix, the separable weights and the channels-last tables against the
    loop in float64, at a map with three heads and windows that reach past its edges; the form picks the matrix up to
    ONNX_DENSE_MAX_POSITIONS positions, then the tables (the separable weights are the benchmark's alternative)."""
    from mrconvnext.ops.talk.engine_onnx import talk2d_dense, talk2d_separable, talk2d_table

    B, C, H, Hh, Ww = 2, 6, 3, 7, 9
    maxes = (4, 2, 3, 5)
    x = torch.randn(B, C, Hh, Ww, dtype=torch.float64)
    off = offsets_off_grid((B, H, Hh, Ww, 4), list(maxes))
    expected = naive_talk2d(x, off, *maxes)
    torch.testing.assert_close(talk2d_dense(x, off, *maxes), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(talk2d_separable(x, off, *maxes), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(talk2d_table(x, off, *maxes), expected, rtol=1e-12, atol=1e-12)
    off[1, 2, 3, 4, 0] = float('nan')  # NaN at its own box only (the head's channels), as the specification
    y = talk2d_table(x, off, *maxes)
    assert torch.isnan(y).nonzero().tolist() == [[1, c, 3, 4] for c in (4, 5)]
    torch.testing.assert_close(y.nan_to_num(), talk2d_reference(x, off, *maxes).nan_to_num(), rtol=1e-12, atol=1e-12)
    dense = talk_dispatch.ONNX_DENSE_MAX_POSITIONS
    methods = [talk_dispatch.talk2d_onnx_method(n) for n in (1, dense, dense + 1)]
    assert methods == ['dense', 'dense', 'table']
    x, off = torch.randn(1, 4, 14, 14, dtype=torch.float64), offsets_off_grid((1, 2, 14, 14, 4), list(maxes))
    assert 14 * 14 == dense  # ConvNeXt's third stage: the dense matrix at its largest
    torch.testing.assert_close(talk2d_dense(x, off, *maxes), naive_talk2d(x, off, *maxes), rtol=1e-12, atol=1e-12)
    limit = dense
    x, off = (
        torch.randn(1, 2, 1, limit + 1, dtype=torch.float64),
        torch.rand(1, 1, 1, limit + 1, 4, dtype=torch.float64),
    )
    torch.testing.assert_close(talk2d(x, off, *maxes, engine='onnx'), naive_talk2d(x, off, *maxes))


@pytest.mark.parametrize('size,maxes', [((7, 9), (4, 2, 3, 5)), ((15, 14), (7, 6, 7, 8)), ((5, 6), (20, 1, 9, 30))])
def test_onnx_2d_deform_form_matches_naive(size, maxes):
    """The opt-in DeformConv form (``onnx_deform_conv``): the integral image sampled at the box corners by torchvision's
    ``deform_conv2d`` against the loop in float64 (three heads, windows past the map's edges, a map past
    ONNX_DENSE_MAX_POSITIONS); gradients against the specification's autograd off the grid (on it the start edges'
    one-sided derivatives differ, as its docstring says); a NaN offset gives NaN in its own box only; the form is taken
    inside the context manager only, past the dense form's maps."""
    from mrconvnext.ops.talk.engine_onnx import talk2d_deform

    B, C, H = 2, 6, 3
    x = torch.randn(B, C, *size, dtype=torch.float64, requires_grad=True)
    off = offsets_off_grid((B, H, *size, 4), list(maxes)).requires_grad_()
    y = talk2d_deform(x, off, *maxes)
    torch.testing.assert_close(y, naive_talk2d(x.detach(), off.detach(), *maxes), rtol=1e-12, atol=1e-12)
    g = torch.randn_like(y)
    got = torch.autograd.grad(y, (x, off), g)
    ref = torch.autograd.grad(talk2d_reference(x, off, *maxes), (x, off), g)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    off = off.detach().clone()
    off[1, 2, 3, 4, 0] = float('nan')
    y = talk2d_deform(x.detach(), off, *maxes)
    assert torch.isnan(y).nonzero().tolist() == [[1, c, 3, 4] for c in (4, 5)]
    torch.testing.assert_close(y.nan_to_num(), talk2d_reference(x.detach(), off, *maxes).nan_to_num())
    dense = talk_dispatch.ONNX_DENSE_MAX_POSITIONS
    with talk_dispatch.onnx_deform_conv():
        assert [talk_dispatch.talk2d_onnx_method(n) for n in (dense, dense + 1)] == ['dense', 'deform']
        with talk_dispatch.onnx_deform_conv(False):
            assert talk_dispatch.talk2d_onnx_method(dense + 1) == 'table'
        x32 = torch.randn(1, 4, 15, 14)
        off32 = torch.rand(1, 2, 15, 14, 4)
        torch.testing.assert_close(
            talk2d(x32, off32, *maxes, engine='onnx'), talk2d_reference(x32, off32, *maxes), rtol=1e-5, atol=2e-6
        )
    assert talk_dispatch.talk2d_onnx_method(dense + 1) == 'table'
    with pytest.raises(TypeError, match='enabled must be a bool'):
        with talk_dispatch.onnx_deform_conv('yes'):
            pass


def test_zero_max_offsets_is_identity():
    x = torch.randn(2, 6, 11, dtype=torch.float64)
    off = torch.rand(2, 3, 11, 2, dtype=torch.float64)
    for engine in ('reference', 'torch', 'native' if have_native_cpu() else 'torch'):
        torch.testing.assert_close(talk1d(x, off, 0, 0, engine=engine), x)
    x2 = torch.randn(1, 2, 4, 5, dtype=torch.float64)
    off2 = torch.rand(1, 1, 4, 5, 4, dtype=torch.float64)
    torch.testing.assert_close(talk2d(x2, off2, 0, 0, 0, 0), x2)


# ------------------------------------------------------------------------- fused / native vs reference


@pytest.mark.parametrize('impl', IMPLS)
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('case', ['bidirectional', 'causal', 'heads=channels', 'max>L', 'L>256'])
@pytest.mark.parametrize('layout', ['contiguous', 'channels_last', 'channels_last+strided_offsets'])
def test_1d_matches_reference(impl, dtype, case, layout):
    """Triton: channels-first rows of up to 256 positions run the one-launch plane kernels in float32, longer ones
    (and float64) the scan and gathers; channels-last rows the channels-last scan and gathers at every length."""
    B, C, H, L, ml, mr = 2, 6, 3, 19, 5, 4
    if case == 'L>256':
        L, ml, mr = 300, 40, 70
    elif case == 'causal':
        mr = 0
    elif case == 'heads=channels':
        H = C
    elif case == 'max>L':
        ml, mr = 30, 25
    # channels_last: a (B, C, L) view of a contiguous (B, L, C) tensor, as a flattened channels-last map
    x = torch.randn(B, C, L, dtype=dtype) if layout == 'contiguous' else torch.randn(B, L, C, dtype=dtype).mT
    off = random_offsets((B, H, L, 2), [ml, mr], dtype)
    if layout.endswith('strided_offsets'):  # a (B, H, L, 2) view of a (B, L, H, 2) tensor, as TaLKConv1d makes
        off = off.transpose(1, 2).contiguous().transpose(1, 2)
        assert not off.is_contiguous()
    got = run_with_grads(talk1d, x, off, ml, mr, engine=impl)
    ref = run_with_grads(talk1d, x.contiguous(), off.contiguous(), ml, mr, engine='reference')
    # float32: prefix tables of random rows grow like sqrt(L), and their rounding with them
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-5, atol=2e-6 * max(1.0, L**0.5 / 6))
    for a, b, name in zip(got, ref, ('y', 'dx', 'doffsets')):
        torch.testing.assert_close(a, b, **tol, msg=lambda m, n=name: f'{n}: {m}')
    if impl == 'native' and layout.startswith('channels_last'):  # the channels-last CPU kernel ran: y keeps the layout
        assert got[0].mT.is_contiguous() and not got[0].is_contiguous()


# Triton's variants past the plane kernels' PLANE_MAX_LENGTH = 256 positions (float32): the integral image scanned
# channels-last in one pass for rows of up to 256 positions (16 x 17 = 272 positions), in two beyond (2 x 257, a row
# one past 256). In the interpreter the time grows with the positions, so each is just past its threshold; both still
# cross every block of their kernels: the table gathers' 128 (64 float64) positions forward and 64 (32) backward, the
# channels-last gathers' 8 (16), the scans' 8 rows (16 x 17) and 32 (channels-last) or 128 positions per step (257).
ONE_PASS_2D, TWO_PASS_2D = (16, 17), (2, 257)
LAYOUTS_2D = ['contiguous', 'channels_last', 'channels_last+strided_offsets']
# Every size in every layout but one: the two-pass size channels-last with contiguous offsets. It ran the same
# channels-last gathers as the one-pass size, which runs both offset layouts, and the same two-pass scans (which never
# read the offsets) as the two-pass size with strided offsets (the layout TaLKConv2d gives), which stays.
SIZE_LAYOUTS_2D = [
    (size, layout)
    for size in [(6, 7), (1, 5), (9, 1), ONE_PASS_2D, TWO_PASS_2D]
    for layout in LAYOUTS_2D
    if (size, layout) != (TWO_PASS_2D, 'channels_last')
]


@pytest.mark.parametrize('impl', IMPLS)
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('size,layout', SIZE_LAYOUTS_2D, ids=[f'{h}x{w}-{lay}' for (h, w), lay in SIZE_LAYOUTS_2D])
def test_2d_matches_reference(impl, dtype, size, layout):
    """Triton: channels-first maps of up to 256 positions run the one-launch plane kernels in float32; larger ones
    (and float64) and channels-last maps of every size the integral image, channels-last in one pass for rows of up to
    256 positions (16 x 17), two passes beyond (2 x 257)."""
    B, C, H = 2, 4, 2
    Hh, Ww = size
    if impl == 'triton' and size in (ONE_PASS_2D, TWO_PASS_2D):
        from mrconvnext.ops.talk.engine_triton import PLANE_MAX_LENGTH

        assert Hh * Ww > PLANE_MAX_LENGTH and Hh > 1 and (Ww <= 256) == (size == ONE_PASS_2D)
    maxes = (3, 2, 1, 4)
    x = torch.randn(B, C, Hh, Ww, dtype=dtype)
    if layout != 'contiguous':
        x = x.contiguous(memory_format=torch.channels_last)
    off = random_offsets((B, H, Hh, Ww, 4), list(maxes), dtype)
    if layout.endswith('strided_offsets'):  # a (B, H, Hh, Ww, 4) view of (B, Hh, Ww, H, 4), as TaLKConv2d makes
        off = off.permute(0, 2, 3, 1, 4).contiguous().permute(0, 3, 1, 2, 4)
    got = run_with_grads(talk2d, x, off, *maxes, engine=impl)
    ref = run_with_grads(talk2d, x.contiguous(), off.contiguous(), *maxes, engine='reference')
    # float32: integral images of random maps grow like sqrt(H W), and their rounding with them
    atol = 2e-6 * max(1.0, (Hh * Ww) ** 0.5 / 6)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-5, atol=atol)
    for a, b, name in zip(got, ref, ('y', 'dx', 'doffsets')):
        torch.testing.assert_close(a, b, **tol, msg=lambda m, n=name: f'{n}: {m}')


@pytest.mark.parametrize('impl', IMPLS)
def test_integer_boundaries_follow_reference_convention(impl):
    """Offsets on the grid (incl. exactly 0 and 1): the one-sided derivative conventions agree."""
    B, C, H, L, ml, mr = 1, 4, 2, 13, 4, 3
    x = torch.randn(B, C, L, dtype=torch.float64)
    off = torch.stack([torch.randint(0, ml + 1, (B, H, L)) / ml, torch.randint(0, mr + 1, (B, H, L)) / mr], -1).double()
    ref = run_with_grads(talk1d, x, off, ml, mr, engine='reference')
    for xl in (x, x.mT.contiguous().mT):  # contiguous and channels-last layouts
        got = run_with_grads(talk1d, xl, off, ml, mr, engine=impl)
        for a, b in zip(got, ref):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    # At offset 0 the gradient is that of opening the window: the neighbour's value.
    zero = torch.zeros(1, 1, 5, 2, dtype=torch.float64, requires_grad=True)
    xs = torch.arange(1.0, 6.0, dtype=torch.float64).view(1, 1, 5)
    (doff,) = torch.autograd.grad(talk1d(xs, zero, 1, 1, engine=impl).sum(), zero)
    torch.testing.assert_close(doff[0, 0, :, 0], torch.tensor([0.0, 1, 2, 3, 4], dtype=torch.float64) / 3)
    torch.testing.assert_close(doff[0, 0, :, 1], torch.tensor([2.0, 3, 4, 5, 0], dtype=torch.float64) / 3)

    off2 = torch.stack(
        [torch.randint(0, 3, (1, 1, 4, 5)) / 2 for _ in range(4)], -1
    ).double()  # 2-D, all corners on the grid
    x2 = torch.randn(1, 2, 4, 5, dtype=torch.float64)
    ref = run_with_grads(talk2d, x2, off2, 2, 2, 2, 2, engine='reference')
    for xl in (x2, x2.contiguous(memory_format=torch.channels_last)):
        got = run_with_grads(talk2d, xl, off2, 2, 2, 2, 2, engine=impl)
        for a, b in zip(got, ref):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('impl', [*IMPLS, 'reference'])
@pytest.mark.parametrize('layout', ['contiguous', 'channels_last'])
def test_nan_offsets_propagate(impl, layout):
    # 'reference' is the regression of issue 13: it cast the NaN boundary to an int64 index and crashed.
    x = torch.randn(1, 2, 6)
    if layout == 'channels_last':
        x = x.mT.contiguous().mT
    off = torch.rand(1, 1, 6, 2)
    off[0, 0, 3, 0] = float('nan')
    y = talk1d(x, off, 3, 3, engine=impl)
    assert torch.isnan(y[..., 3]).all() and not torch.isnan(y[..., :3]).any()
    off2 = torch.rand(1, 1, 3, 4, 4)
    off2[0, 0, 1, 2, 1] = float('nan')
    x2 = torch.randn(1, 2, 3, 4)
    if layout == 'channels_last':
        x2 = x2.contiguous(memory_format=torch.channels_last)
    y2 = talk2d(x2, off2, 2, 2, 1, 1, engine=impl)
    assert torch.isnan(y2[..., 1, 2]).all() and torch.isnan(y2).sum() == 2


# ------------------------------------------------------------------------------------------ gradcheck


@pytest.mark.parametrize('impl', IMPLS)
@pytest.mark.parametrize('case', ['1d', '1d-causal', '1d-channels-last', '2d', '2d-channels-last'])
def test_gradcheck(impl, case):
    if case.startswith('1d'):
        B, C, H, L, ml = 2, 4, 2, 9, 4
        mr = 0 if case == '1d-causal' else 3
        x = torch.randn(B, C, L, dtype=torch.float64)
        x = (x.mT.contiguous().mT if case == '1d-channels-last' else x).requires_grad_()
        off = offsets_off_grid((B, H, L, 2), [ml, mr]).requires_grad_()
        fn = lambda a, o: talk1d(a, o, ml, mr, engine=impl)
    else:
        B, C, H, Hh, Ww = 1, 4, 2, 4, 5
        maxes = (2, 3, 2, 1)
        x = torch.randn(B, C, Hh, Ww, dtype=torch.float64)
        if case == '2d-channels-last':
            x = x.contiguous(memory_format=torch.channels_last)
        x.requires_grad_()
        off = offsets_off_grid((B, H, Hh, Ww, 4), list(maxes)).requires_grad_()
        fn = lambda a, o: talk2d(a, o, *maxes, engine=impl)
    # the interpreter runs each Triton launch in ~0.1 s: fast mode (random vector-Jacobian products) keeps it short
    fast = impl == 'triton'
    assert torch.autograd.gradcheck(fn, (x, off), eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=fast)


# ------------------------------------------------------------------------- low precision, long sequence


@pytest.mark.parametrize('impl', IMPLS)
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_half_precision_long_sequence(impl, dtype):
    """L = 10,000 (the issue asks >= 10,000): positions and prefix table in float32, so the output is the float64 result
    rounded once.

    x has a positive mean, so the prefix sum reaches ~10,000 (hopeless in fp16/bf16) and positions beyond 2048
    have no fractional part in fp16 (the prior-art defect). Each layout runs its forward once, with autograd on: its
    output is checked, then differentiated (the interpreter takes seconds per launch at this length).
    """
    B, C, H, L, ml, mr = 1, 4, 2, 10_000, 60, 37
    x = (torch.randn(B, C, L) + 1.0).to(dtype)
    off = offsets_off_grid((B, H, L, 2), [ml, mr], torch.float32)  # float32 positions pick the same cells
    xg, og = x.detach().requires_grad_(), off.detach().requires_grad_()
    y_grad = talk1d(xg, og, ml, mr, engine=impl)
    y = y_grad.detach()
    assert y.dtype == dtype
    xc, oc = x.mT.contiguous().mT.requires_grad_(), off.detach().requires_grad_()
    y_cl_grad = talk1d(xc, oc, ml, mr, engine=impl)  # channels-last layout, same math
    torch.testing.assert_close(y_cl_grad.detach(), y)
    ref = talk1d_reference(x.double(), off.double(), ml, mr)
    unit_roundoff = torch.finfo(dtype).eps / 2
    if impl == 'triton' and dtype == torch.bfloat16 and talk_triton_interpreted():
        # Triton's interpreter casts float32 -> bfloat16 by truncation (error < 1 ulp); compiled kernels round to
        # nearest even, which tests/cuda checks with the half-ulp bound
        unit_roundoff *= 2
    err = (y.double() - ref).abs()
    # one rounding to dtype + float32 error of a prefix table that grows to max|S| (divided by the window norm)
    table_max = x.double().cumsum(-1).abs().max().item()
    bound = unit_roundoff * ref.abs() + 4 * torch.finfo(torch.float32).eps * table_max / (ml + mr + 1)
    assert (err <= bound).all(), f'max excess {(err - bound).max().item():.3g}'
    # Gradients also go through float32: compare with the float64 reference.
    gy = torch.randn(B, C, L).to(dtype)
    dx, doff = torch.autograd.grad(y_grad, (xg, og), gy)
    x64, o64 = x.double().requires_grad_(), off.double().requires_grad_()
    dx_ref, doff_ref = torch.autograd.grad(talk1d_reference(x64, o64, ml, mr), (x64, o64), gy.double())
    assert doff.dtype == torch.float32 and dx.dtype == dtype
    torch.testing.assert_close(dx.double(), dx_ref, rtol=2 * unit_roundoff, atol=1e-4)
    torch.testing.assert_close(doff.double(), doff_ref, rtol=1e-4, atol=1e-4)
    dx_cl, doff_cl = torch.autograd.grad(y_cl_grad, (xc, oc), gy)  # channels-last layout: the same gradients
    torch.testing.assert_close(dx_cl.double(), dx_ref, rtol=2 * unit_roundoff, atol=1e-4)
    torch.testing.assert_close(doff_cl.double(), doff_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('impl', IMPLS)
@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_2d_half_precision_channels_last(impl, dtype):
    """fp16 / bf16 maps (channels-last and contiguous): integral image and positions in float32, so y, dx and doffsets
    are the float64 results rounded once (bf16 under the interpreter: truncation, twice the bound)."""
    # 72 positions: more than one of the plane kernels' blocks (64 inputs per product forward, 16 backward; 16
    # outputs per step), within PLANE_MAX_LENGTH (the plane kernels run the contiguous map in float32 accumulation,
    # the channels-last tables the channels-last one)
    B, C, H, Hh, Ww, maxes = 2, 8, 2, 8, 9, (7, 7, 7, 7)
    if impl == 'triton':
        from mrconvnext.ops.talk.engine_triton import PLANE_MAX_LENGTH
        from mrconvnext.ops.talk.triton_plane import plane_blocks

        assert plane_blocks(C // H)['BLOCK_J'] < Hh * Ww <= PLANE_MAX_LENGTH
    x = (torch.randn(B, C, Hh, Ww) + 1.0).to(dtype)
    off = offsets_off_grid((B, H, Hh, Ww, 4), list(maxes), torch.float32)
    gy = torch.randn(B, C, Hh, Ww).to(dtype)
    x64, o64 = x.double().requires_grad_(), off.double().requires_grad_()
    y_ref = talk2d_reference(x64, o64, *maxes)
    dx_ref, doff_ref = torch.autograd.grad(y_ref, (x64, o64), gy.double())
    unit = torch.finfo(dtype).eps / 2 * (2 if impl == 'triton' and talk_triton_interpreted() else 1)
    for xl in (x, x.contiguous(memory_format=torch.channels_last)):
        xg, og = xl.detach().requires_grad_(), off.detach().requires_grad_()
        y = talk2d(xg, og, *maxes, engine=impl)
        dx, doff = torch.autograd.grad(y, (xg, og), gy)
        assert y.dtype == dx.dtype == dtype and doff.dtype == torch.float32
        torch.testing.assert_close(y.double(), y_ref, rtol=2 * unit, atol=1e-4)
        torch.testing.assert_close(dx.double(), dx_ref, rtol=2 * unit, atol=1e-4)
        torch.testing.assert_close(doff.double(), doff_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('impl', IMPLS)
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16])
@pytest.mark.parametrize('layout', ['contiguous', 'channels_last'])
def test_1d_short_rows_on_the_grid_and_in_half_precision(impl, dtype, layout):
    """Short rows (Triton: the plane kernels contiguous, the channels-last tables channels-last) with every offset on
    the grid (0, 1 and the values between, exact in float32): the same one-sided derivatives as the float64
    reference; and fp16 maps, rounded once."""
    B, C, H, L, ml, mr = 2, 8, 2, 49, 4, 2
    x = torch.randn(B, C, L).to(dtype)
    if layout == 'channels_last':
        x = x.mT.contiguous().mT
    off = torch.stack([torch.randint(0, ml + 1, (B, H, L)) / ml, torch.randint(0, mr + 1, (B, H, L)) / mr], -1)
    assert ((off * torch.tensor([ml, mr])) % 1 == 0).all()
    g = torch.randn(B, C, L).to(dtype)
    xg, og = x.detach().requires_grad_(), off.requires_grad_()
    y = talk1d(xg, og, ml, mr, engine=impl)
    got = (y, *torch.autograd.grad(y, (xg, og), g))
    xr, orf = x.double().contiguous().requires_grad_(), off.detach().double().requires_grad_()
    y_ref = talk1d_reference(xr, orf, ml, mr)
    ref = (y_ref, *torch.autograd.grad(y_ref, (xr, orf), g.double()))
    tol = 1e-5 if dtype == torch.float32 else torch.finfo(dtype).eps
    for a, b, name in zip(got, ref, ('y', 'dx', 'doffsets')):
        torch.testing.assert_close(a.double(), b, rtol=tol, atol=tol, msg=lambda m, n=name: f'{n}: {m}')


@pytest.mark.parametrize('impl', IMPLS)
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16])
@pytest.mark.parametrize('layout', ['contiguous', 'channels_last'])
def test_2d_small_maps_on_the_grid_and_in_half_precision(impl, dtype, layout):
    """Small maps (Triton: the plane kernels contiguous, the channels-last tables channels-last) with every edge on
    the grid (exact in float32): the float64 reference's one-sided derivatives; and fp16 maps, rounded once."""
    B, C, H, Hh, Ww, maxes = 2, 8, 2, 7, 9, (4, 2, 2, 4)
    x = torch.randn(B, C, Hh, Ww).to(dtype)
    if layout == 'channels_last':
        x = x.contiguous(memory_format=torch.channels_last)
    off = torch.stack([torch.randint(0, m + 1, (B, H, Hh, Ww)) / m for m in maxes], -1)
    g = torch.randn(B, C, Hh, Ww).to(dtype)
    xg, og = x.detach().requires_grad_(), off.requires_grad_()
    y = talk2d(xg, og, *maxes, engine=impl)
    got = (y, *torch.autograd.grad(y, (xg, og), g))
    xr, orf = x.double().contiguous().requires_grad_(), off.detach().double().requires_grad_()
    y_ref = talk2d_reference(xr, orf, *maxes)
    ref = (y_ref, *torch.autograd.grad(y_ref, (xr, orf), g.double()))
    tol = 1e-5 if dtype == torch.float32 else torch.finfo(dtype).eps
    for a, b, name in zip(got, ref, ('y', 'dx', 'doffsets')):
        torch.testing.assert_close(a.double(), b, rtol=tol, atol=tol, msg=lambda m, n=name: f'{n}: {m}')


# ------------------------------------------------------------------------------------ offsets dropout


def test_offsets_dropout():
    off = torch.rand(4, 2, 500, 2) * 0.98 + 0.01
    assert talk_offsets_dropout(off, 0.3, training=False) is off
    assert talk_offsets_dropout(off, 0.0, training=True) is off
    dropped = talk_offsets_dropout(off, 0.3, training=True)
    zeroed = dropped == 0
    assert 0.25 < zeroed.float().mean().item() < 0.35
    # No rescaling: kept offsets unchanged and everything stays in [0, 1].
    torch.testing.assert_close(dropped[~zeroed], off[~zeroed], rtol=0, atol=0)
    assert dropped.min() >= 0 and dropped.max() <= 1
    assert (talk_offsets_dropout(off, 1.0) == 0).all()
    with pytest.raises(ValueError, match=r'0 <= p <= 1'):
        talk_offsets_dropout(off, 1.5)


@pytest.mark.parametrize('impl', IMPLS)
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
def test_largest_maxima_normalize_like_the_naive_loops(impl, dtype):
    """Issue 23 item 3: the Triton kernels formed the normalizer in 32-bit integers, so max_left = 2**31 - 1 gave
    -4.66e-10 instead of +4.66e-10, and 2-D maxima of 46341 4.9e-6 instead of 1.16e-10 (forward and backward).
    Against the float64 cell loops; gradients (one float64 upstream gradient for both) against the PyTorch engine's
    float64 autograd. Tolerance relative to each tensor's largest magnitude (window sums cancel): 1e-12 in float64,
    1e-6 in float32."""
    eps = 1e-12 if dtype == torch.float64 else 1e-6

    def run(fn, x, off, maxes, engine, dt):
        x, off = x.to(dt).requires_grad_(), off.to(dt).requires_grad_()
        y = fn(x, off, *maxes, engine=engine)
        g = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
        return (y, *torch.autograd.grad(y, (x, off), g.to(dt)))

    def check(fn, naive, x, off, maxes):
        got = run(fn, x, off, maxes, impl, dtype)
        ref = (naive(x, off, *maxes), *run(fn, x, off, maxes, 'torch', torch.float64)[1:])
        for a, r in zip(got, ref):
            torch.testing.assert_close(a.double(), r, rtol=0, atol=eps * r.abs().max().item())

    top = 2**31 - 1
    x1, off1 = torch.randn(2, 4, 9, dtype=torch.float64), torch.rand(2, 2, 9, 2, dtype=torch.float64)
    for maxes in ((top, 0), (top, top), (7, top)):
        check(talk1d, naive_talk1d, x1, off1, maxes)
    x2, off2 = torch.randn(1, 2, 3, 4, dtype=torch.float64), torch.rand(1, 1, 3, 4, 4, dtype=torch.float64)
    for maxes in ((46341,) * 4, (top,) * 4):
        check(talk2d, naive_talk2d, x2, off2, maxes)


# ------------------------------------------------------------------------------------------ bad inputs

X1, O1 = torch.randn(2, 4, 8), torch.rand(2, 2, 8, 2)
X2, O2 = torch.randn(2, 4, 3, 5), torch.rand(2, 2, 3, 5, 4)

BAD_1D = [
    ((torch.randn(4, 8), O1, 2, 2), ValueError, r'3-D tensor \(B, C, L\), got shape \(4, 8\)'),
    ((X1, torch.rand(2, 2, 8), 2, 2), ValueError, r'expected shape \(B, heads, L, 2\) = \(2, heads, 8, 2\)'),
    ((X1, torch.rand(2, 2, 7, 2), 2, 2), ValueError, r'got \(2, 2, 7, 2\)'),
    ((X1, torch.rand(3, 2, 8, 2), 2, 2), ValueError, r'expected shape'),
    ((X1, torch.rand(2, 3, 8, 2), 2, 2), ValueError, r'heads \(3\) must divide the channels \(4\)'),
    ((X1, O1, -1, 2), ValueError, r'talk: max_left must be an int in \[0, 2147483647\], got -1'),
    ((X1, O1, 2, -3), ValueError, r'talk: max_right must be an int in \[0, 2147483647\], got -3'),
    ((X1, O1, 2.5, 2), TypeError, r'talk: max_left must be an int in \[0, 2147483647\], got float'),
    ((X1, O1, 2**63, 2), ValueError, r'talk: max_left must be an int in \[0, 2147483647\], got 9223372036854775808'),
    ((X1, O1, 2, 2**31), ValueError, r'talk: max_right must be an int in \[0, 2147483647\], got 2147483648'),
    ((X1.long(), O1, 2, 2), TypeError, r'x: expected a floating-point dtype, got torch.int64'),
    ((X1, O1.int(), 2, 2), TypeError, r'offsets: expected a floating-point dtype, got torch.int32'),
    ((X1.tolist(), O1, 2, 2), TypeError, r'x: expected a torch.Tensor, got list'),
]


@pytest.mark.parametrize('engine', ['auto', 'torch', 'reference', 'native', 'triton'])
@pytest.mark.parametrize('args,exc,match', BAD_1D)
def test_bad_inputs_1d(args, exc, match, engine):
    with pytest.raises(exc, match=match):
        talk1d(*args, engine=engine)


BAD_2D = [
    ((X1, O2, 1, 1, 1, 1), ValueError, r'4-D tensor \(B, C, H, W\), got shape \(2, 4, 8\)'),
    ((X2, torch.rand(2, 2, 3, 5, 2), 1, 1, 1, 1), ValueError, r'\(B, heads, H, W, 4\) = \(2, heads, 3, 5, 4\)'),
    ((X2, torch.rand(2, 3, 3, 5, 4), 1, 1, 1, 1), ValueError, r'heads \(3\) must divide'),
    ((X2, O2, 1, 1, -1, 1), ValueError, r'talk: max_top must be an int in \[0, 2147483647\], got -1'),
    ((X2, O2, 1, 1, 1, True), TypeError, r'talk: max_bottom must be an int in \[0, 2147483647\], got bool'),
    (
        (X2, O2, 1, 2**63, 1, 1),
        ValueError,
        r'talk: max_right must be an int in \[0, 2147483647\], got 9223372036854775808',
    ),
    ((X2.to(torch.int16), O2, 1, 1, 1, 1), TypeError, r'floating-point dtype, got torch.int16'),
]


@pytest.mark.parametrize('engine', ['auto', 'torch', 'reference', 'native', 'triton'])
@pytest.mark.parametrize('args,exc,match', BAD_2D)
def test_bad_inputs_2d(args, exc, match, engine):
    with pytest.raises(exc, match=match):
        talk2d(*args, engine=engine)


def test_bad_engine():
    with pytest.raises(
        ValueError, match=r"talk: engine must be one of \('auto', 'native', 'triton', 'torch', 'reference', 'onnx'\)"
    ):
        talk1d(X1, O1, 2, 2, engine='cuda')
    with pytest.raises(ValueError, match='talk: backend must be one of'):
        talk1d(X1, O1, 2, 2, backend='cuda')


@pytest.mark.parametrize('engine', ['auto', 'torch', 'reference'])
def test_backend_keyword_is_deprecated_and_means_the_engine(engine):
    """The old ``backend=`` spelling warns and computes what the same ``engine=`` computes."""
    x, off = torch.randn(2, 4, 9), torch.rand(2, 2, 9, 2)
    with pytest.warns(DeprecationWarning, match=f'backend={engine!r} is deprecated.*use engine={engine!r}'):
        old = talk1d(x, off, 3, 2, backend=engine)
    assert torch.equal(old, talk1d(x, off, 3, 2, engine=engine))


def test_native_engine_unavailable_raises_and_auto_falls_back(monkeypatch):
    monkeypatch.setenv('MRCONVNEXT_DISABLE_NATIVE', '1')
    engines.reset()  # the one-time warning may have been given already
    with pytest.raises(RuntimeError, match='native TaLK kernels unavailable'):
        talk1d(X1, O1, 2, 2, engine='native')
    with pytest.warns(RuntimeWarning, match='using the PyTorch implementation'):
        y = talk1d(X1, O1, 2, 2)
    torch.testing.assert_close(y, talk1d_reference(X1, O1, 2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        talk1d(X1, O1, 2, 2)  # warned once only


def test_ninja_and_compiler_visible():
    """Documented requirement of the JIT build: a C++ compiler; ninja is found from the venv if not on PATH."""
    if not have_native_cpu():
        pytest.skip('no C++ compiler')
    ensure_ninja()
    assert shutil.which('ninja') is not None
