"""Functional operators: no parameters, no knowledge of models."""

from ._native import build_fftconv_cpu, build_talk_cpu
from .conv_bn_sum import branch_conv_bn_sum, branch_conv_bn_sum_supported
from .decompositions import decompositions
from .lag_remap import remap_lags, remapped_layout
from .light_conv import dynamic_conv1d, light_conv1d
from .long_conv import choose_backend, circular_kernel, crop_kernel, fft_length, fft_size, long_conv1d
from .talk import (
    TALK_BACKENDS,
    talk1d,
    talk1d_reference,
    talk2d,
    talk2d_reference,
    talk_backend,
    talk_offsets_dropout,
)

__all__ = [
    'long_conv1d',
    'remap_lags',
    'remapped_layout',
    'branch_conv_bn_sum',
    'branch_conv_bn_sum_supported',
    'fft_size',
    'fft_length',
    'choose_backend',
    'crop_kernel',
    'circular_kernel',
    'TALK_BACKENDS',
    'talk1d',
    'talk1d_reference',
    'talk2d',
    'talk2d_reference',
    'talk_backend',
    'talk_offsets_dropout',
    'build_talk_cpu',
    'build_fftconv_cpu',
    'light_conv1d',
    'dynamic_conv1d',
    'decompositions',
]
