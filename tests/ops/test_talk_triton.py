"""The Triton TaLK kernels beyond their numerics (which tests/ops/test_talk.py checks against the float64 references
through Triton's interpreter, and tests/cuda on a GPU): operator registration, backend selection, and that every
kernel compiles for a Hopper GPU (sm_90) on a machine without one."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from mrconvnext.ops import talk
from mrconvnext.ops.talk import talk_backend

triton_cpu = pytest.mark.skipif(
    talk._triton_unavailable('cpu') is not None, reason=str(talk._triton_unavailable('cpu'))
)


@triton_cpu
def test_operators_registered_with_autograd():
    """Schema and autograd registration of the four operators (fake tensors and AOT dispatch need compiled kernels:
    the interpreter launches on real memory, so tests/cuda runs the full opcheck)."""
    from mrconvnext.ops import talk_triton as tt

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


@triton_cpu
def test_backend_selection_on_cpu(monkeypatch):
    assert talk_backend('cpu', 'triton') == 'triton'  # the interpreter is on
    assert talk_backend('cpu', 'auto') in ('native', 'torch')  # 'auto' never interprets
    from mrconvnext.ops import talk_triton

    monkeypatch.setattr(talk_triton, 'interpreted', lambda: False)
    monkeypatch.setattr(talk, '_TRITON_REASONS', {})
    with pytest.raises(RuntimeError, match=r'Triton TaLK kernels unavailable for cpu: .*TRITON_INTERPRET=1'):
        talk_backend('cpu', 'triton')
    with pytest.raises(RuntimeError, match='no Triton kernels for meta tensors'):
        talk_backend('meta', 'triton')


def test_the_operators_own_backends_refuse_triton():
    x, off = torch.randn(1, 2, 5), torch.rand(1, 1, 5, 2)
    with pytest.raises(ValueError, match=r"expected 'auto', 'native' or 'torch' for this operator, got 'triton'"):
        talk.talk1d_op(x, off, 1, 1, 'triton')


# Every kernel with the argument types the operators pass, float32 and float64 accumulation, bf16 storage.
_COMPILE_ALL = textwrap.dedent(
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from mrconvnext.ops import talk_triton as tt

    target = GPUTarget('cuda', 90, 32)
    ce = 'constexpr'
    i64s = lambda *names: {n: 'i64' for n in names}
    blocks = dict(BLOCK_R=8, BLOCK_L=128)
    done = 0
    for acc, f64 in (('fp32', False), ('fp64', True)):
        kernels = [
            (tt._scan_kernel, dict(src='*bf16', dst=f'*{acc}', A2='i32', M='i32', L='i32',
                                   **i64s('ss0', 'ss1', 'ss2', 'ss3', 'sd0', 'sd1', 'sd2', 'sd3'),
                                   REVERSE=ce, ACC_F64=ce, BLOCK_M=ce, BLOCK_L=ce),
             dict(REVERSE=True, ACC_F64=f64, BLOCK_M=8, BLOCK_L=128)),
            (tt._talk1d_fwd_kernel, dict(x='*bf16', P=f'*{acc}', off=f'*{acc}', y='*bf16', C='i32', L='i32', R='i32',
                                         heads='i32', **i64s('sxb', 'sxc', 'sxl', 'syb', 'syc', 'syl'), ml='i32',
                                         mr='i32', norm_hi='fp32', norm_lo='fp32', BLOCK_R=ce, BLOCK_L=ce), blocks),
            (tt._talk1d_bwd_kernel, dict(g='*bf16', x='*bf16', off=f'*{acc}', dP=f'*{acc}', doff=f'*{acc}', C='i32',
                                         L='i32', R='i32', heads='i32', **i64s('sgb', 'sgc', 'sgl', 'sxb', 'sxc', 'sxl'),
                                         ml='i32', mr='i32', norm_hi='fp32', norm_lo='fp32', NEED_DX=ce, NEED_DOFF=ce, BLOCK_R=ce, BLOCK_L=ce),
             dict(NEED_DX=True, NEED_DOFF=True, **blocks)),
            (tt._talk2d_fwd_kernel, dict(P=f'*{acc}', off=f'*{acc}', y='*bf16', C='i32', H='i32', W='i32', R='i32',
                                         heads='i32', ml='i32', mr='i32', mt='i32', mb='i32', norm_hi='fp32',
                                         norm_lo='fp32', BLOCK_R=ce, BLOCK_N=ce),
             dict(BLOCK_R=8, BLOCK_N=128)),
            (tt._talk2d_bwd_kernel, dict(g='*bf16', P=f'*{acc}', off=f'*{acc}', dP=f'*{acc}', doff=f'*{acc}', C='i32',
                                         H='i32', W='i32', R='i32', heads='i32', ml='i32', mr='i32', mt='i32',
                                         mb='i32', norm_hi='fp32', norm_lo='fp32', NEED_DX=ce, NEED_DOFF=ce, BLOCK_R=ce, BLOCK_N=ce),
             dict(NEED_DX=True, NEED_DOFF=True, BLOCK_R=8, BLOCK_N=128)),
        ]
        for fn, signature, constexprs in kernels:
            triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs), target=target)
            done += 1
    print('compiled', done)
    """
)


def test_kernels_compile_for_hopper():
    """Triton's compiler (front end to PTX and ptxas) accepts every kernel for sm_90 without a GPU: catches what
    the interpreter never sees (type-inconsistent loop variables, unsupported ops). In a fresh process, without
    the interpreter the kernels here were defined under."""
    pytest.importorskip('triton')
    env = {k: v for k, v in os.environ.items() if k != 'TRITON_INTERPRET'}
    proc = subprocess.run([sys.executable, '-c', _COMPILE_ALL], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'compiled 10' in proc.stdout
