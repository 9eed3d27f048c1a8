"""The Triton TaLK kernels beyond their numerics (which tests/ops/talk/test_api.py checks against the float64 references
through Triton's interpreter, and tests/cuda on a GPU): operator registration, backend selection, and that every
kernel compiles for a Hopper GPU (sm_90) on a machine without one."""

import textwrap

import pytest
import torch

from mrconvnext.ops import availability
from mrconvnext.ops.talk import dispatch as talk_dispatch
from mrconvnext.ops.talk import operators, talk1d, talk1d_reference, talk2d, talk2d_reference
from tests.hopper import assert_fits_hopper, compile_for_hopper
from tests.limits import run_compiled_triton

triton_cpu = pytest.mark.skipif(
    availability.triton_unavailable('cpu') is not None, reason=str(availability.triton_unavailable('cpu'))
)


@triton_cpu
def test_operators_registered_with_autograd():
    """Schema and autograd registration of the five operators (fake tensors and AOT dispatch need compiled kernels:
    the interpreter launches on real memory, so tests/cuda runs the full opcheck)."""
    from mrconvnext.ops.talk import engine_triton as tt

    utils = ('test_schema', 'test_autograd_registration')
    x = torch.randn(2, 4, 20, requires_grad=True)
    off = torch.rand(2, 2, 20, 2, requires_grad=True)
    torch.library.opcheck(tt.talk1d_triton, (x, off, 3, 2), test_utils=utils)
    g = torch.randn(2, 4, 20)
    torch.library.opcheck(tt.talk1d_triton_backward, (g, x.detach(), off.detach(), 3, 2, True, True), test_utils=utils)
    x2 = torch.randn(2, 4, 5, 6, requires_grad=True)
    off2 = torch.rand(2, 2, 5, 6, 4, requires_grad=True)
    torch.library.opcheck(tt.talk2d_triton, (x2, off2, 2, 1, 1, 2), test_utils=utils)
    _, P = tt.talk2d_triton(x2.detach(), off2.detach(), 2, 1, 1, 2)
    g2 = torch.randn(2, 4, 5, 6)
    torch.library.opcheck(tt.talk2d_triton_backward, (g2, P, off2.detach(), 2, 1, 1, 2, True, False), test_utils=utils)
    x2_cl = x2.detach().to(memory_format=torch.channels_last).requires_grad_(True)
    torch.library.opcheck(tt.talk2d_triton, (x2_cl, off2, 2, 1, 1, 2), test_utils=utils)  # the table left out
    torch.library.opcheck(tt.talk2d_triton_table, (x2_cl.detach(),), test_utils=('test_schema',))


def test_a_forward_that_leaves_its_table_out_needs_a_table_operator():
    """The shared 2-D autograd: a forward whose second output is the ``(0,)`` stand-in has x saved and the table
    rebuilt by ``table_op``; without one, the backward says so rather than handing the backward operator x."""
    from mrconvnext.ops.talk.autograd import register_talk2d_autograd

    @torch.library.custom_op('mrconvnext_test::leaves_table_out', mutates_args=())
    def leaves_table_out(x: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.clone(), x.new_empty(0)

    @leaves_table_out.register_fake
    def _(x, offsets):
        return torch.empty_like(x), x.new_empty(0)

    register_talk2d_autograd(leaves_table_out, lambda *args: None)
    x = torch.randn(1, 2, 3, 3, requires_grad=True)
    y, _ = leaves_table_out(x, torch.rand(1, 1, 3, 3, 4))
    with pytest.raises(RuntimeError, match='left the table out, and no table operator rebuilds it'):
        y.sum().backward()


@triton_cpu
def test_engine_selection_on_cpu():
    assert talk_dispatch.talk_engine('cpu', 'triton') == 'triton'  # the interpreter is on
    assert talk_dispatch.talk_engine('cpu', 'auto') in ('native', 'torch')  # 'auto' never interprets
    with pytest.raises(RuntimeError, match='no Triton kernels for meta tensors'):
        talk_dispatch.talk_engine('meta', 'triton')


def test_triton_on_cpu_without_the_interpreter_is_a_clear_error():
    """Without TRITON_INTERPRET=1 (a fresh process), engine='triton' on CPU tensors says what is missing."""
    code = (
        'import pytest, torch\n'
        'from mrconvnext.ops import talk1d\n'
        'x, off = torch.randn(1, 2, 5), torch.rand(1, 1, 5, 2)\n'
        'with pytest.raises(RuntimeError, match=r"Triton TaLK kernels unavailable for cpu: .*TRITON_INTERPRET=1"):\n'
        '    talk1d(x, off, 1, 1, engine="triton")\n'
    )
    out = run_compiled_triton('-c', code)
    assert out.returncode == 0, out.stderr[-3000:]


def talk1d_on_cuda_grad(x, off, g):
    """``(dx, doff)`` of ``talk1d(engine='triton')`` for the cotangent ``g``."""
    x, off = x.detach().requires_grad_(), off.detach().requires_grad_()
    return torch.autograd.grad(talk1d(x, off, 4, 3, engine='triton'), (x, off), g)


@triton_cpu
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_the_cuda_implementations_run_the_triton_engine(dtype):
    """The per-device operators' CUDA implementations are the Triton engine: run on CPU tensors under the
    interpreter, forward and backward equal engine='triton' (bitwise in 1-D) and the reference to rounding."""
    x = torch.randn(2, 4, 13, dtype=dtype)
    off = torch.rand(2, 2, 13, 2, dtype=dtype)
    y = operators.talk1d_on_cuda(x, off, 4, 3)
    assert torch.equal(y, talk1d(x, off, 4, 3, engine='triton'))
    torch.testing.assert_close(y, talk1d_reference(x, off, 4, 3))
    g = torch.randn_like(x)
    dx, doff = operators.talk1d_backward_on_cuda(g, x, off, 4, 3, True, True)
    xr, offr = x.clone().requires_grad_(), off.clone().requires_grad_()
    rdx, rdoff = torch.autograd.grad(talk1d_reference(xr, offr, 4, 3), (xr, offr), g)
    torch.testing.assert_close(dx, rdx)
    torch.testing.assert_close(doff, rdoff)
    # a channels-last x: the operator's dx stays contiguous, as its fake implementation says
    xc = x.mT.contiguous().mT
    dxc, doffc = operators.talk1d_backward_on_cuda(g, xc, off, 4, 3, True, True)
    assert dxc.is_contiguous() and torch.equal(dxc, talk1d_on_cuda_grad(xc, off, g)[0])
    torch.testing.assert_close(dxc, rdx)
    x2, off2 = torch.randn(2, 4, 5, 6, dtype=dtype), torch.rand(2, 2, 5, 6, 4, dtype=dtype)
    y2, P = operators.talk2d_on_cuda(x2, off2, 2, 1, 1, 2)
    assert P.shape == (2, 4, 6, 7) and P.is_contiguous()  # the operator's second output is always the table
    # engine='triton' runs the plane kernels at this size in float32 (another order of the same sums)
    torch.testing.assert_close(y2, talk2d(x2, off2, 2, 1, 1, 2, engine='triton'), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(y2, talk2d_reference(x2, off2, 2, 1, 1, 2))
    g2 = torch.randn_like(x2)
    dx2, doff2 = operators.talk2d_backward_on_cuda(g2, P, off2, 2, 1, 1, 2, True, True)
    xr2, offr2 = x2.clone().requires_grad_(), off2.clone().requires_grad_()
    rdx2, rdoff2 = torch.autograd.grad(talk2d_reference(xr2, offr2, 2, 1, 1, 2), (xr2, offr2), g2)
    torch.testing.assert_close(dx2, rdx2)
    torch.testing.assert_close(doff2, rdoff2)


@triton_cpu
@pytest.mark.parametrize('dims', [1, 2])
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16])
@pytest.mark.parametrize('layout', ['contiguous', 'channels_last'])
def test_plane_kernels_equal_the_table_kernels(monkeypatch, dims, dtype, layout):
    """Short rows (1-D, 144 positions) and small maps (2-D, 12 x 12): the one-launch plane kernels (a channels-first
    x) and the scan + gather kernels give the same y, dx and doffsets (float32 accumulation both, summed in another
    order: float16 results can round one unit apart). The tables: channels-first ones forced by PLANE_MAX_LENGTH =
    0, or the channels-last ones, which a channels-last x takes at every size; y and dx are laid out like x."""
    from mrconvnext.ops.talk import engine_triton as tt
    from mrconvnext.ops.talk import triton_plane, triton_table

    # 144 positions: more than one block of the plane products (64 inputs, 16 outputs per step) and of the gathers
    # (128 positions per program, 1-D and the 2-D forward); 16 channels per head: two steps of the gathers' 8. One
    # image: the interpreter's time grows with the programs (one per image and head), and the batch strides of both
    # kernel families are checked against the references in test_api.py (two images there).
    B, C, H, S = 1, 32, 2, 12
    assert S * S > max(triton_plane.plane_blocks(C // H)['BLOCK_J'], triton_table.TABLE_BLOCK_L)
    assert S * S <= tt.PLANE_MAX_LENGTH and C // H > triton_table.TABLE_BLOCK_R
    x = torch.randn(B, C, S * S) if dims == 1 else torch.randn(B, C, S, S)
    x = x.to(dtype)
    off = torch.rand(B, H, S * S, 2) if dims == 1 else torch.rand(B, H, S, S, 4)
    g = torch.randn(x.shape).to(dtype)

    def run(x):
        xg, og = x.clone().requires_grad_(), off.clone().requires_grad_()
        y = talk1d(xg, og, 72, 72, engine='triton') if dims == 1 else talk2d(xg, og, 6, 6, 6, 6, engine='triton')
        return (y, *torch.autograd.grad(y, (xg, og), g))

    assert tt.plane_applies(x.flatten(2), H)
    plane = run(x)
    if layout == 'channels_last':
        x = x.mT.contiguous().mT if dims == 1 else x.contiguous(memory_format=torch.channels_last)
        assert not tt.plane_applies(x.flatten(2), H)
    else:
        monkeypatch.setattr(tt, 'PLANE_MAX_LENGTH', 0)
    table = run(x)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2**-10, atol=1e-4)
    for a, b in zip(plane, table):
        torch.testing.assert_close(a, b, **tol)
    for t in table[:2]:  # y and dx laid out like x
        assert t.stride() == x.stride()
    assert plane[2].stride() == table[2].stride()  # doffsets laid out like the offsets, by both


@triton_cpu
@pytest.mark.parametrize('dims', [1, 2])
@pytest.mark.parametrize('C,S', [(384, 14), (768, 7)])
def test_channels_last_tables_at_convnext_t_s_small_stages(dims, C, S):
    """TaLK-ConvNeXt-T's stages 3 and 4 (384 x 14 x 14 and 768 x 7 x 7, 24 and 48 heads of 16 channels: several
    programs of heads), channels-last as its blocks hand them over: the channels-last tables run, not the plane
    kernels, and y, dx and doffsets match the float64 specification (float32 maps, one image, offsets half the row
    or side)."""
    from mrconvnext.ops.talk import engine_triton as tt

    heads = C // 16
    x = torch.randn(1, C, S, S).contiguous(memory_format=torch.channels_last)
    if dims == 1:  # the flattened map and offsets as TaLKConvFlat2d gives them
        x, off = x.flatten(2), torch.rand(1, S * S, heads, 2).transpose(1, 2)
        maxes, op, ref = (S * S // 2,) * 2, talk1d, talk1d_reference
    else:  # as TaLKConv2d gives them
        off = torch.rand(1, S, S, heads, 4).permute(0, 3, 1, 2, 4)
        maxes, op, ref = (S // 2,) * 4, talk2d, talk2d_reference
    assert not tt.plane_applies(x.flatten(2), heads)
    g = torch.randn(x.shape)
    xg, og = x.clone().requires_grad_(), off.clone().requires_grad_()
    y = op(xg, og, *maxes, engine='triton')
    got = (y, *torch.autograd.grad(y, (xg, og), g))
    x64, o64 = x.double().requires_grad_(), off.double().requires_grad_()
    y64 = ref(x64, o64, *maxes)
    want = (y64, *torch.autograd.grad(y64, (x64, o64), g.double()))
    assert y.stride() == x.stride() and got[1].stride() == x.stride()
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5)


def _kernels() -> list:
    """Every kernel with the argument types and the block sizes its launcher passes (read from the kernel modules):
    float32 and float64 accumulation, bf16 storage; the channels-last kernels at TaLK-ConvNeXt-T's stage 1 (6 heads
    of 16 channels), the 2-D channels-last scan at 56 and 256 positions per row."""
    import torch

    from mrconvnext.ops.talk import triton_channels_last as cl_mod
    from mrconvnext.ops.talk import triton_plane, triton_scan, triton_table

    ce = 'constexpr'
    i64s = lambda *names: {n: 'i64' for n in names}  # noqa: E731
    i32s = lambda *names: {n: 'i32' for n in names}  # noqa: E731
    norm = dict(norm_hi='fp32', norm_lo='fp32')
    heads, R = 6, 16
    scan, cl_scan = triton_scan.SCAN_BLOCKS, triton_scan.CL_SCAN_BLOCKS
    blocks = dict(BLOCK_R=triton_table.TABLE_BLOCK_R, BLOCK_L=triton_table.TABLE_BLOCK_L)
    cl = cl_mod.cl_blocks(heads, R)
    out = []
    for acc, f64 in (('fp32', False), ('fp64', True)):
        acc_dtype = torch.float64 if f64 else torch.float32
        out += [
            ('scan_jit', dict(src='*bf16', dst=f'*{acc}', **i32s('A2', 'M', 'L'),
                              **i64s('ss0', 'ss1', 'ss2', 'ss3', 'sd0', 'sd1', 'sd2', 'sd3'),
                              REVERSE=ce, ACC_F64=ce, BLOCK_M=ce, BLOCK_L=ce),
             dict(REVERSE=True, ACC_F64=f64, **scan)),
            ('scan_jit', dict(src=f'*{acc}', dst='*bf16', **i32s('A2', 'M', 'L'),
                              **i64s('ss0', 'ss1', 'ss2', 'ss3', 'sd0', 'sd1', 'sd2', 'sd3'),
                              REVERSE=ce, ACC_F64=ce, BLOCK_M=ce, BLOCK_L=ce),
             dict(REVERSE=True, ACC_F64=f64, **cl_scan)),
            ('talk1d_fwd_jit', dict(x='*bf16', P=f'*{acc}', off=f'*{acc}', y='*bf16', **i32s('C', 'L', 'R', 'heads'),
                                    **i64s('sxb', 'sxc', 'sxl', 'syb', 'syc', 'syl'), **i32s('ml', 'mr'), **norm,
                                    BLOCK_R=ce, BLOCK_L=ce), blocks),
            ('talk1d_bwd_jit', dict(g='*bf16', x='*bf16', off=f'*{acc}', dP=f'*{acc}', doff=f'*{acc}',
                                    **i32s('C', 'L', 'R', 'heads'), **i64s('sgb', 'sgc', 'sgl', 'sxb', 'sxc', 'sxl'),
                                    **i32s('ml', 'mr'), **norm, NEED_DX=ce, NEED_DOFF=ce, BLOCK_R=ce, BLOCK_L=ce),
             dict(NEED_DX=True, NEED_DOFF=True, **blocks)),
            ('talk1d_fwd_cl_jit', dict(x='*bf16', P=f'*{acc}', off=f'*{acc}', y='*bf16', **i32s('C', 'L', 'R', 'heads'),
                                       **i64s('sxb', 'sxl', 'sob', 'soh', 'sol', 'sos'), **i32s('ml', 'mr'), **norm,
                                       BLOCK_L=ce, BLOCK_H=ce, BLOCK_R=ce), cl),
            ('talk1d_bwd_cl_jit', dict(g='*bf16', x='*bf16', off=f'*{acc}', dP=f'*{acc}', doff=f'*{acc}',
                                       **i32s('C', 'L', 'R', 'heads'),
                                       **i64s('sgb', 'sgl', 'sgc', 'sxb', 'sxl', 'sob', 'soh', 'sol', 'sos'),
                                       **i32s('ml', 'mr'), **norm, NEED_DX=ce, NEED_DOFF=ce, BLOCK_L=ce, BLOCK_H=ce,
                                       BLOCK_R=ce), dict(NEED_DX=True, NEED_DOFF=True, **cl_mod.cl_blocks(heads, R, cl_mod.CL_BWD_BLOCK_L))),
            ('talk2d_fwd_jit', dict(P=f'*{acc}', off=f'*{acc}', y='*bf16', **i32s('C', 'H', 'W', 'R', 'heads'),
                                    **i32s('ml', 'mr', 'mt', 'mb'), **norm, BLOCK_R=ce, BLOCK_N=ce),
             dict(BLOCK_R=blocks['BLOCK_R'], BLOCK_N=triton_table.block_2d(acc_dtype, backward=False))),
            ('talk2d_bwd_jit', dict(g='*bf16', P=f'*{acc}', off=f'*{acc}', dP=f'*{acc}', doff=f'*{acc}',
                                    **i32s('C', 'H', 'W', 'R', 'heads'), **i32s('ml', 'mr', 'mt', 'mb'), **norm,
                                    NEED_DX=ce, NEED_DOFF=ce, BLOCK_R=ce, BLOCK_N=ce),
             dict(NEED_DX=True, NEED_DOFF=True, BLOCK_R=blocks['BLOCK_R'],
                  BLOCK_N=triton_table.block_2d(acc_dtype, backward=True))),
            ('scan2d_cl_jit', dict(src='*bf16', dst=f'*{acc}', **i32s('H', 'W', 'C'),
                                   **i64s('ssb', 'ssh', 'ssw', 'sdb', 'sdh', 'sdw'), REVERSE=ce, ACC_F64=ce,
                                   BLOCK_W=ce, BLOCK_C=ce), dict(REVERSE=False, ACC_F64=f64, **triton_scan.scan2d_cl_blocks(56))),
            ('scan2d_cl_jit', dict(src=f'*{acc}', dst='*bf16', **i32s('H', 'W', 'C'),
                                   **i64s('ssb', 'ssh', 'ssw', 'sdb', 'sdh', 'sdw'), REVERSE=ce, ACC_F64=ce,
                                   BLOCK_W=ce, BLOCK_C=ce), dict(REVERSE=True, ACC_F64=f64, **triton_scan.scan2d_cl_blocks(256))),
            ('talk2d_fwd_cl_jit', dict(P=f'*{acc}', off=f'*{acc}', y='*bf16', **i32s('C', 'H', 'W', 'R', 'heads'),
                                       **i64s('sob', 'soh', 'sop', 'sos'), **i32s('ml', 'mr', 'mt', 'mb'), **norm,
                                       BLOCK_L=ce, BLOCK_H=ce, BLOCK_R=ce), cl_mod.cl_blocks(heads, R, cl_mod.block_2d_cl(acc_dtype, backward=False))),
            ('talk2d_bwd_cl_jit', dict(g='*bf16', P=f'*{acc}', off=f'*{acc}', dP=f'*{acc}', doff=f'*{acc}',
                                       **i32s('C', 'H', 'W', 'R', 'heads'),
                                       **i64s('sgb', 'sgp', 'sgc', 'sob', 'soh', 'sop', 'sos'),
                                       **i32s('ml', 'mr', 'mt', 'mb'), **norm, NEED_DX=ce, NEED_DOFF=ce, BLOCK_L=ce,
                                       BLOCK_H=ce, BLOCK_R=ce), dict(NEED_DX=True, NEED_DOFF=True, **cl_mod.cl_blocks(heads, R, cl_mod.block_2d_cl(acc_dtype, backward=True)))),
        ]  # fmt: skip
    plane = triton_plane.plane_blocks(R)  # float32 accumulation only
    out += [
        ('talk1d_plane_fwd_jit', dict(x='*bf16', off='*fp32', y='*bf16', **i32s('L', 'R', 'heads'),
                                      **i64s('sxb', 'sxc', 'sxl', 'syb', 'syc', 'syl', 'sob', 'soh', 'sol', 'sos'),
                                      **i32s('ml', 'mr'), **norm, PRECISION=ce, BLOCK_T=ce, BLOCK_J=ce, BLOCK_R=ce),
         plane),
        ('talk1d_plane_bwd_jit', dict(g='*bf16', x='*bf16', off='*fp32', dx='*bf16', doff='*fp32',
                                      **i32s('L', 'R', 'heads'),
                                      **i64s('sgb', 'sgc', 'sgl', 'sxb', 'sxc', 'sxl', 'sdb', 'sdc', 'sdl', 'sob',
                                             'soh', 'sol', 'sos'), **i32s('ml', 'mr'), **norm, NEED_DX=ce, NEED_DOFF=ce,
                                      PRECISION=ce, BLOCK_T=ce, BLOCK_J=ce, BLOCK_R=ce),
         dict(NEED_DX=True, NEED_DOFF=True, **triton_plane.plane_blocks(R, dims=1, backward=True))),
        ('talk2d_plane_fwd_jit', dict(x='*bf16', off='*fp32', y='*bf16', **i32s('H', 'W', 'R', 'heads'),
                                      **i64s('sxb', 'sxc', 'sxp', 'syb', 'syc', 'syp', 'sob', 'soh', 'sop', 'sos'),
                                      **i32s('ml', 'mr', 'mt', 'mb'), **norm, PRECISION=ce, BLOCK_T=ce, BLOCK_J=ce,
                                      BLOCK_R=ce), plane),
        ('talk2d_plane_bwd_jit', dict(g='*bf16', x='*fp32', off='*fp32', dx='*bf16', doff='*fp32',
                                      **i32s('H', 'W', 'R', 'heads'),
                                      **i64s('sgb', 'sgc', 'sgp', 'sxb', 'sxc', 'sxp', 'sdb', 'sdc', 'sdp', 'sob',
                                             'soh', 'sop', 'sos'), **i32s('ml', 'mr', 'mt', 'mb'), **norm, NEED_DX=ce,
                                      NEED_DOFF=ce, PRECISION=ce, BLOCK_T=ce, BLOCK_J=ce, BLOCK_R=ce),
         dict(NEED_DX=True, NEED_DOFF=True, **triton_plane.plane_blocks(R, dims=2, backward=True))),
    ]  # fmt: skip
    modules = {name: mod.__name__ for mod in (triton_scan, triton_table, cl_mod, triton_plane) for name in mod.__all__}
    return [(modules[name], name, sig, const) for name, sig, const in out]


def test_kernels_fit_hopper():
    """Every kernel compiles for sm_90 without a GPU (Triton's pipeline to a cubin: catches what the interpreter
    never sees, such as type-inconsistent loop variables), with no register spills (no stack or local memory, no
    LDL/STL) and shared memory within a block's limit."""
    pytest.importorskip('triton')
    report = compile_for_hopper(_kernels())
    assert len(report) == 28
    assert_fits_hopper(report)


_FAKE_CUDA_1D = textwrap.dedent(
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from mrconvnext.ops.talk import talk1d
    from mrconvnext.ops.talk.engine_triton import (
        talk1d_triton_backward, talk2d_triton, talk2d_triton_backward, talk2d_triton_table,
    )
    from tests.dispatch import RecordOps


    B, C, L, heads = 32, 96, 3136, 6
    with FakeTensorMode():
        x = torch.randn(B, L, C, device='cuda', dtype=torch.bfloat16).transpose(1, 2)  # a flattened channels-last map
        off = torch.rand(B, L, heads, 2, device='cuda').transpose(1, 2)  # as TaLKConv1d's projection gives them
        ops = RecordOps()
        with ops:
            y = talk1d(x, off, L // 2, L // 2)
            dx, doff = talk1d_triton_backward(torch.randn_like(y), x, off, L // 2, L // 2, True, True)
    assert y.stride() == x.stride() and dx.stride() == x.stride(), (y.stride(), dx.stride())
    assert 'mrconvnext.talk1d_triton.default' in ops.names, ops.names
    assert not ops.copies_of(B * C * L), ops.copies_of(B * C * L)

    B, C, H, W = 32, 192, 28, 28  # TaLK-2D, stage 2
    with FakeTensorMode():
        x = torch.randn(B, C, H, W, device='cuda', dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        off = torch.rand(B, H, W, 12, 4, device='cuda').permute(0, 3, 1, 2, 4)  # as TaLKConv2d's projection gives
        ops = RecordOps()
        with ops:
            y, left_out = talk2d_triton(x, off, 14, 14, 14, 14)
            P = talk2d_triton_table(x)  # what the autograd rebuilds for the backward
            dx, doff = talk2d_triton_backward(torch.randn_like(y), P, off, 14, 14, 14, 14, True, True)
    assert y.is_contiguous(memory_format=torch.channels_last) and dx.is_contiguous(memory_format=torch.channels_last)
    assert left_out.shape == (0,) and P.dtype == torch.float32
    assert P.shape == (B, C, H + 1, W + 1) and P.stride(1) == 1 and doff.shape == off.shape
    assert not ops.copies_of(B * C * H * W), ops.copies_of(B * C * H * W)

    # stage 3 (196 positions, within PLANE_MAX_LENGTH): a channels-last map takes the tables too (the plane kernels
    # would save a float32 copy of x); what the autograd saves is x itself and the offsets, no table
    B, C, H, W = 8, 384, 14, 14
    saved = []
    with FakeTensorMode():
        x = torch.randn(B, C, H, W, device='cuda', dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        off = torch.rand(B, H, W, 24, 4, device='cuda').permute(0, 3, 1, 2, 4)
        x.requires_grad_(True)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            y, left_out = talk2d_triton(x, off, 7, 7, 7, 7)
        assert left_out.shape == (0,) and y.is_contiguous(memory_format=torch.channels_last)
        assert [t.shape for t in saved] == [x.shape, off.shape] and saved[0] is x, [t.shape for t in saved]
        P = talk2d_triton_table(x.detach())
        assert P.shape == (B, C, H + 1, W + 1) and P.stride(1) == 1, (P.shape, P.stride())
    """
)


def test_on_fake_cuda_channels_last_maps_are_read_in_place():
    """TaLK 1-D on a flattened channels-last map and TaLK 2-D on a channels-last map (fake CUDA tensors, compiled
    kernels, fresh process): nothing of the map's size is copied or cast, y and dx keep x's layout (the 2-D integral
    image too, which the 2-D forward leaves out: its autograd saves x and the offsets alone)."""
    pytest.importorskip('triton')
    proc = run_compiled_triton('-c', _FAKE_CUDA_1D)
    assert proc.returncode == 0, proc.stderr[-3000:]
