"""mrconvnext: long-convolution vision backbones (MRConv, TaLK, LightConv/DynamicConv) for timm.

Importing the package registers its models with timm (``timm.create_model('mrconvnext_t')``).
"""

from . import layers, models, ops
from .models import load_convnext_weights, set_engine

__version__ = '0.1.0'
__all__ = ['layers', 'models', 'ops', 'load_convnext_weights', 'set_engine', '__version__']
