"""Depthwise long convolutions in the lag convention (:mod:`.api`): the public function, the kernel layouts
(:mod:`.layout`), the size rules of 2-D kernels (:mod:`.lag_remap`), the operators (:mod:`.operators`), the fused
training form (:mod:`.conv_bn_sum`) and one module per engine (``engine_native``, ``engine_torch``,
``engine_flashfft``; the native sources are ``kernels/fftconv``)."""

from . import flops  # noqa: F401 - registers the operators' FLOP formulas
from .api import long_conv1d, long_conv1d_vjp
from .conv_bn_sum import branch_conv_bn_sum, branch_conv_bn_sum_supported
from .engine_torch import direct_conv1d
from .fold_bn import folded_bn_conv
from .lag_remap import conv2d_lags, conv2d_padding, remap_lags, remapped_layout
from .layout import circular_kernel, crop_kernel, fft_length, fft_size, kernel_spectrum

__all__ = [
    'long_conv1d_vjp',
    'folded_bn_conv',
    'long_conv1d',
    'direct_conv1d',
    'branch_conv_bn_sum',
    'branch_conv_bn_sum_supported',
    'remap_lags',
    'remapped_layout',
    'conv2d_lags',
    'conv2d_padding',
    'circular_kernel',
    'crop_kernel',
    'fft_length',
    'fft_size',
    'kernel_spectrum',
]
