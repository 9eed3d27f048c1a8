"""Model files: configs and ``@register_model`` entrypoints (importing registers them with timm)."""

from ._mixer_convnext import MixerConvNeXt, load_convnext_weights, stage_feature_sizes
from .mrconvnext import MRConvNeXt, mrconv_kernel_size

__all__ = ['MixerConvNeXt', 'MRConvNeXt', 'load_convnext_weights', 'stage_feature_sizes', 'mrconv_kernel_size']
