"""mrconvnext: long-convolution vision backbones (MRConv, TaLK, LightConv/DynamicConv) for timm."""

from . import layers, ops

__version__ = '0.1.0'
__all__ = ['layers', 'ops', '__version__']
