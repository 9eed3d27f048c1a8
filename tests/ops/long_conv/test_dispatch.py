"""The long convolution's dispatch: one plan per call (method, engine, operator), the operator that runs is the one
the plan names, and MRConv's training form (fused, fold, per-branch) from the BatchNorm's facts."""

import pytest
import torch

from mrconvnext.ops import availability, long_conv1d
from mrconvnext.ops.long_conv import dispatch
from tests.dispatch import RecordOps

NATIVE = availability.native_available(availability.FFTCONV_EXT)
F32, BF16 = torch.float32, torch.bfloat16


@pytest.mark.parametrize(
    'device, dtype, length, taps, method, engine, batch, grad, want',
    [
        ('cpu', F32, 3136, 3136, 'auto', 'torch', 8, False, ('fft', 'torch', 'fft_conv_torch')),
        ('cpu', F32, 3136, 7, 'auto', 'auto', 8, False, ('direct', 'torch', 'direct')),
        ('cuda', F32, 3136, 3136, 'auto', 'auto', 8, False, ('fft', 'torch', 'fft_conv')),
        ('cuda', BF16, 196, 196, 'auto', 'auto', 128, False, ('toeplitz', 'torch', 'toeplitz')),
        ('cuda', BF16, 196, 196, 'auto', 'auto', 128, True, ('toeplitz', 'torch', 'toeplitz')),
        ('cuda', BF16, 196, 196, 'auto', 'auto', 32, True, ('fft', 'torch', 'fft_conv')),
        ('cuda', BF16, 3136, 3136, 'auto', 'torch', 128, True, ('fft', 'torch', 'fft_conv_torch')),
        ('cpu', F32, 3136, 3136, 'rowdft', 'auto', 8, False, ('rowdft', 'torch', 'rowdft')),
        ('cpu', F32, 3136, 3136, 'auto', 'onnx', 8, False, ('rowdft', 'onnx', 'rowdft_onnx')),
        ('cpu', F32, 49, 97, 'auto', 'onnx', 8, False, ('direct', 'onnx', 'direct_onnx')),
        ('cpu', F32, 100, 199, 'auto', 'onnx', 8, False, ('direct', 'onnx', 'direct_onnx')),
        ('cpu', F32, 101, 201, 'auto', 'onnx', 8, False, ('rowdft', 'onnx', 'rowdft_onnx')),
        ('cpu', F32, 49, 7, 'auto', 'onnx', 8, False, ('direct', 'torch', 'direct')),
        ('cpu', F32, 3136, 3136, 'direct', 'onnx', 8, False, ('direct', 'onnx', 'direct_onnx')),
        ('cpu', F32, 3136, 7, 'direct', 'onnx', 8, False, ('direct', 'torch', 'direct')),
        ('cpu', F32, 49, 97, 'toeplitz', 'onnx', 8, False, ('toeplitz', 'torch', 'toeplitz')),
        ('meta', F32, 3136, 3136, 'auto', 'auto', 8, False, ('fft', 'torch', 'fft_conv')),
    ],
)
def test_plan(device, dtype, length, taps, method, engine, batch, grad, want):
    plan = dispatch.long_conv_plan(device, dtype, length, taps, taps // 2, method, engine, batch, grad)
    assert tuple(plan) == want


LIMIT = dispatch.DIRECT_CUDA_MAX_MACS


@pytest.mark.parametrize(
    'device, dtype, length, taps, batch, channels, grad, want',
    [
        ('cuda', BF16, 196, 391, 1, 384, False, 'direct'),  # ConvNeXt-T's third stage, deployed, batch 1
        ('cuda', F32, 196, 391, 1, 384, False, 'direct'),
        ('cuda', BF16, 196, 391, 1, 384, True, 'fft'),  # a backward to come
        ('cuda', BF16, 3136, 6271, 1, 96, False, 'direct'),  # the first stage at batch 1
        ('cuda', BF16, 3136, 6271, 2, 96, False, 'fft'),  # at batch 2: more work than the limit
        ('cuda', BF16, 196, 391, 128, 384, False, 'toeplitz'),  # a large batch of a short map: the GEMM
        ('cuda', BF16, 196, 391, 1, None, False, 'fft'),  # the channels not known
        ('cuda', BF16, 196, 391, None, 384, False, 'fft'),  # the batch not known
        ('cpu', F32, 196, 391, 1, 384, False, 'fft'),  # the CPU's FFT kernels are not bound by a host
        ('cuda', BF16, 100, 100, 1, LIMIT // 10_000, False, 'direct'),  # exactly the limit
        ('cuda', BF16, 100, 100, 1, LIMIT // 10_000 + 1, False, 'fft'),  # one sequence more
    ],
)
def test_small_cuda_work_runs_the_direct_method(device, dtype, length, taps, batch, channels, grad, want):
    """On CUDA, a forward without a backward that would run torch.fft runs the direct method where its
    multiply-adds (batch x channels x length x taps) are at most ``DIRECT_CUDA_MAX_MACS``."""
    assert LIMIT % 10_000 == 0
    plan = dispatch.long_conv_plan(device, dtype, length, taps, taps // 2, 'auto', 'auto', batch, grad, channels)
    assert plan.method == want, plan


def test_the_direct_work_counts_every_kernel():
    """Stacked kernels multiply the work: N kernels over C channels are N C convolutions per image."""
    ok = dispatch.long_conv_plan('cuda', BF16, 100, 100, 49, 'auto', 'auto', 1, False, LIMIT // 10_000)
    assert ok.method == 'direct'
    with torch._subclasses.fake_tensor.FakeTensorMode():
        x = torch.randn(1, LIMIT // 20_000, 100, device='cuda', dtype=BF16)
        k = torch.randn(2, LIMIT // 20_000, 100, device='cuda')
        with RecordOps() as rec:
            long_conv1d(x, k, zero_lag=49)  # 2 kernels x C channels: exactly the limit
        assert 'aten.convolution.default' in rec.names
        with RecordOps() as rec:
            long_conv1d(torch.cat([x, x[:, :1]], 1), torch.cat([k, k[:, :1]], 1), zero_lag=49)  # two more
        assert 'aten.convolution.default' not in rec.names and 'mrconvnext.fft_conv.default' in rec.names


def test_a_small_deployed_convolution_on_cuda_is_one_conv_with_its_bias():
    """On fake CUDA tensors, the deployed third stage of ConvNeXt-T at batch 1 (bf16, no gradient) runs one
    grouped convolution that adds the bias itself: no FFT and no separate addition (in float32 too); with a gradient
    to come it runs the FFT. (Half inputs: autocast needs a visible GPU, and plans as they do.)"""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.randn(1, 196, 384, device='cuda').mT  # a flattened channels-last map
        k, b = torch.randn(384, 391, device='cuda'), torch.randn(384, device='cuda')
        with RecordOps() as rec, torch.no_grad():
            y = long_conv1d(x.to(BF16), k, b, zero_lag=195)
        assert y.shape == (1, 384, 196) and y.dtype == BF16
        assert rec.work.count('aten.convolution.default') == 1, rec.work
        assert not [n for n in rec.work if 'fft' in n or n.startswith('aten.add')], rec.work
        with RecordOps() as rec, torch.no_grad():
            long_conv1d(x, k, b, zero_lag=195)
        assert rec.work.count('aten.convolution.default') == 1, rec.work
        with RecordOps() as rec:
            long_conv1d(x.to(BF16), k.requires_grad_(), b, zero_lag=195)
        assert 'mrconvnext.fft_conv.default' in rec.names and 'aten.convolution.default' not in rec.names


@pytest.mark.skipif(not NATIVE, reason='the fused native kernels do not build here')
def test_cpu_auto_plans_the_native_kernels():
    assert tuple(dispatch.long_conv_plan('cpu', F32, 3136, 3136, 1567, 'auto', 'auto')) == ('fft', 'native', 'fft_conv')


def test_without_native_kernels_auto_keeps_the_per_device_operator(monkeypatch):
    """Where the native kernels are off, 'auto' still plans the per-device operator (its CPU kernel runs torch.fft),
    so a program exported there runs the native kernels where they build."""
    monkeypatch.setenv('MRCONVNEXT_DISABLE_NATIVE', '1')
    assert tuple(dispatch.long_conv_plan('cpu', F32, 3136, 3136, 1567, 'auto', 'auto')) == ('fft', 'torch', 'fft_conv')
    assert dispatch.branch_sum_form('cpu', F32, 'auto', 'auto', batch_stats=True, plain=True, synchronized=False) == (
        'branches'
    )


@pytest.mark.parametrize('engine', ['auto', 'torch'])
def test_the_planned_operator_is_the_one_that_runs(engine):
    x, k = torch.randn(2, 3, 50), torch.randn(3, 99)
    plan = dispatch.long_conv_plan('cpu', x.dtype, 50, 99, 49, 'fft', engine, 2)
    with RecordOps() as rec:
        y = long_conv1d(x, k, zero_lag=49, method='fft', engine=engine)
    ran = {n.split('.')[1] for n in rec.names if n.startswith('mrconvnext.')}
    assert ran == {plan.operator}
    torch.testing.assert_close(y, long_conv1d(x, k, zero_lag=49, method='direct'), rtol=1e-4, atol=1e-4)


def _form(device='cuda', dtype=F32, method='auto', engine='auto', **facts):
    kw = dict(batch_stats=True, plain=True, synchronized=False, whole_map=True) | facts
    return dispatch.branch_sum_form(device, dtype, method, engine, **kw)


def test_training_forms(monkeypatch):
    assert _form() == 'fold'
    assert _form(plain=False, synchronized=True) == 'fold'
    assert _form(plain=False) == 'branches'  # another norm module: called as it is
    assert _form(batch_stats=False) == 'branches'
    assert _form(whole_map=False) == 'branches'  # statistics over part of the map
    assert _form('cpu', engine='torch') == 'branches'
    assert _form('cpu', plain=False, synchronized=True) == 'branches'
    assert _form('cpu', dtype=BF16) == 'branches'
    if NATIVE:
        assert _form('cpu') == 'fused' and _form('cpu', method='fft', engine='native') == 'fused'
        assert _form('cpu', method='toeplitz') == 'branches'
    monkeypatch.setattr(dispatch, 'NO_FOLD_DEVICES', ())
    assert _form('cpu', engine='torch') == 'fold'
    monkeypatch.setattr(dispatch, 'NO_FOLD_DEVICES', ('cpu', 'cuda'))
    assert _form() == 'branches'
