"""Lightweight and dynamic convolutions (Wu et al., ICLR 2019): the public functions (:mod:`.api`), the DynamicConv
operators (:mod:`.operators`) and the memory-heavy unfold forms (:mod:`.reference`)."""

from . import flops  # noqa: F401 - registers the operators' FLOP formulas
from .api import dynamic_conv1d, dynamic_softmax_conv1d, light_conv1d
from .checks import zero_lag_for
from .operators import dynamic_conv_decomposition
from .reference import dynamic_conv1d_unfold, light_conv1d_unfold

__all__ = [
    'light_conv1d',
    'dynamic_conv1d',
    'dynamic_softmax_conv1d',
    'light_conv1d_unfold',
    'dynamic_conv1d_unfold',
    'zero_lag_for',
    'dynamic_conv_decomposition',
]
