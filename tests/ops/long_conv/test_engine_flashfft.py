"""The flashfftconv adapter against a stand-in that implements the package's documented contract."""

import sys
import types

import pytest
import torch
import torch.nn as nn

from mrconvnext.layers import MRConv1d
from mrconvnext.ops import availability, engines, long_conv1d
from mrconvnext.ops.long_conv import dispatch as long_conv_dispatch
from mrconvnext.ops.long_conv import engine_flashfft
from tests.reference import shifted_sum_conv


def _choice(*args) -> tuple[str, str]:
    """The plan's ``(method, engine)``."""
    return tuple(long_conv_dispatch.long_conv_plan(*args)[:2])


class _ContractFlashFFTConv(nn.Module):
    """flashfftconv.FlashFFTConv as documented: checks its inputs, computes a circular FFT conv."""

    calls = 0

    def __init__(self, seqlen, dtype=torch.bfloat16):
        super().__init__()
        assert seqlen & (seqlen - 1) == 0 and 256 <= seqlen <= 4 * 1024 * 1024, seqlen
        assert dtype in (torch.float16, torch.bfloat16)
        self.seqlen, self.dtype = seqlen, dtype
        self.register_buffer('twiddle', torch.randn(4))  # stands for its DFT buffers

    def forward(self, u, k):
        n = self.seqlen
        assert u.dtype == self.dtype and u.is_contiguous() and u.dim() == 3
        assert k.dtype == torch.float32 and k.dim() == 2 and k.shape[0] == u.shape[1] and k.is_contiguous()
        L = u.shape[-1]
        assert L % 2 == 0 and not (n in (512, 2048) and L % 4) and L <= n
        type(self).calls += 1
        y = torch.fft.irfft(torch.fft.rfft(u.float(), n=n) * torch.fft.rfft(k, n=n), n=n)[..., :L]
        return y.to(u.dtype)


@pytest.fixture
def stand_in(monkeypatch):
    mod = types.ModuleType('flashfftconv')
    mod.FlashFFTConv = _ContractFlashFFTConv
    monkeypatch.setitem(sys.modules, 'flashfftconv', mod)
    monkeypatch.setattr(engine_flashfft, 'instances', {})
    monkeypatch.setattr(long_conv_dispatch, 'FLASHFFT_DEVICES', ('cpu', 'cuda'))  # the stand-in runs CPU tensors
    engines.reset()  # forget whether flashfftconv was importable
    _ContractFlashFFTConv.calls = 0
    yield mod
    engines.reset()


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
@pytest.mark.parametrize('L, reach, causal', [(100, 100, False), (256, 40, False), (1000, 1000, True), (256, 3, True)])
def test_adapter_equals_torch_fft(stand_in, dtype, L, reach, causal):
    K, zero_lag = (reach, 0) if causal else (2 * reach - 1, reach - 1)
    x = torch.randn(2, 3, L).to(dtype)
    k = torch.randn(3, K) / K**0.5
    assert _choice('cpu', dtype, L, K, zero_lag, 'auto', 'auto') == ('fft', 'flashfft')
    y = long_conv1d(x, k, zero_lag=zero_lag)  # auto picks flashfftconv
    assert _ContractFlashFFTConv.calls == 1 and y.dtype == dtype
    y_fft = long_conv1d(x, k, zero_lag=zero_lag, method='fft')
    ref = shifted_sum_conv(x.double(), k.double(), zero_lag)
    tol = 4 * torch.finfo(dtype).eps * ref.abs().max().item()
    torch.testing.assert_close(y.double(), ref, rtol=0, atol=tol)
    torch.testing.assert_close(y, y_fft, rtol=0, atol=tol)


def test_adapter_stacked_kernels(stand_in):
    x = torch.randn(2, 3, 64).to(torch.bfloat16)
    k = torch.randn(4, 3, 127) / 10
    y = long_conv1d(x, k, zero_lag=63, engine='flashfft')
    assert y.shape == (2, 4, 3, 64)
    torch.testing.assert_close(y.float(), long_conv1d(x, k, zero_lag=63, method='fft').float(), rtol=0, atol=0.05)


def test_unsupported_sizes_and_dtypes_fall_back(stand_in):
    choice = _choice
    assert choice('cpu', torch.float32, 64, 127, 63, 'auto', 'auto')[1] != 'flashfft'  # float32 stays exact
    assert choice('cpu', torch.bfloat16, 49, 97, 48, 'auto', 'auto')[1] != 'flashfft'  # odd L
    assert not long_conv_dispatch.flashfft_fits('cpu', torch.bfloat16, 302, 3, 1)  # n = 512 needs L % 4 == 0
    assert long_conv_dispatch.flashfft_fits('cpu', torch.bfloat16, 304, 3, 1)
    assert long_conv_dispatch.flashfft_fft_size(4 * 1024 * 1024, 3, 1) is None  # beyond the largest FFT it takes
    x = torch.randn(1, 2, 49).bfloat16()
    k = torch.randn(2, 97) / 10
    with pytest.warns(RuntimeWarning, match='falling back'):
        y = long_conv1d(x, k, zero_lag=48, engine='flashfft')
    assert _ContractFlashFFTConv.calls == 0
    ref = shifted_sum_conv(x.double(), k.double(), 48)
    torch.testing.assert_close(
        y.double(), ref, rtol=0, atol=4 * torch.finfo(torch.bfloat16).eps * ref.abs().max().item()
    )


def test_missing_package_is_not_used(monkeypatch):
    monkeypatch.setitem(sys.modules, 'flashfftconv', None)  # import raises ImportError
    monkeypatch.setattr(long_conv_dispatch, 'FLASHFFT_DEVICES', ('cpu', 'cuda'))
    engines.reset()
    assert availability.flashfft_module() is None
    x, k = torch.randn(1, 2, 64).bfloat16(), torch.randn(2, 9)
    y = long_conv1d(x, k, zero_lag=4)
    ref = shifted_sum_conv(x.double(), k.double(), 4)
    torch.testing.assert_close(
        y.double(), ref, rtol=0, atol=4 * torch.finfo(torch.bfloat16).eps * ref.abs().max().item()
    )


def test_buffers_stay_out_of_state_dict(stand_in):
    layer = MRConv1d(4, 128, kernel_size=32, kernel_type='fourier', combine='scale').to(torch.bfloat16)
    y = layer(torch.randn(2, 4, 128).bfloat16())
    assert _ContractFlashFFTConv.calls == 1 and y.dtype == torch.bfloat16
    assert not any('twiddle' in k for k in layer.state_dict())
    layer.float()  # must not touch the cached flashfftconv instance's dtype
    assert all(inst.dtype == torch.bfloat16 for inst in engine_flashfft.instances.values())
