"""Modules that own parameters."""

from .kernel_params import DenseKernel, DilatedKernel, FourierKernel, FourierSparseKernel, SparseKernel
from .light_conv import DynamicConv1d, DynamicConv2d, LightConv1d, LightConv2d
from .mrconv import COMBINE_MODES, KERNEL_TYPES, LAG_REMAP_RULES, MRConv1d, MRConv2d, num_branches
from .sync_bn import DistBatchNorm, convert_sync_batchnorm
from .talk import TaLKConv1d, TaLKConv2d, TaLKConvFlat2d

__all__ = [
    'MRConv1d',
    'MRConv2d',
    'KERNEL_TYPES',
    'COMBINE_MODES',
    'LAG_REMAP_RULES',
    'num_branches',
    'DenseKernel',
    'DilatedKernel',
    'FourierKernel',
    'SparseKernel',
    'FourierSparseKernel',
    'TaLKConv1d',
    'TaLKConv2d',
    'TaLKConvFlat2d',
    'LightConv1d',
    'LightConv2d',
    'DynamicConv1d',
    'DynamicConv2d',
    'DistBatchNorm',
    'convert_sync_batchnorm',
]
