"""Functional operators: no parameters, no knowledge of models. One package per family (``long_conv``, ``talk``,
``light_conv``), each deciding what runs in its ``dispatch`` module; :mod:`.availability` knows what can run here and
:mod:`.engines` answers what runs where."""

from . import availability, engines
from .availability import build_native
from .decompositions import decompositions
from .light_conv import dynamic_conv1d, dynamic_softmax_conv1d, light_conv1d
from .long_conv import (
    branch_conv_bn_sum,
    branch_conv_bn_sum_supported,
    circular_kernel,
    crop_kernel,
    direct_conv1d,
    fft_length,
    fft_size,
    long_conv1d,
    remap_lags,
    remapped_layout,
)
from .talk import MAX_OFFSET, talk1d, talk1d_reference, talk2d, talk2d_reference, talk_offsets_dropout

__all__ = [
    'availability',
    'engines',
    'build_native',
    'long_conv1d',
    'direct_conv1d',
    'remap_lags',
    'remapped_layout',
    'branch_conv_bn_sum',
    'branch_conv_bn_sum_supported',
    'fft_size',
    'fft_length',
    'crop_kernel',
    'circular_kernel',
    'MAX_OFFSET',
    'talk1d',
    'talk1d_reference',
    'talk2d',
    'talk2d_reference',
    'talk_offsets_dropout',
    'light_conv1d',
    'dynamic_conv1d',
    'dynamic_softmax_conv1d',
    'decompositions',
]
