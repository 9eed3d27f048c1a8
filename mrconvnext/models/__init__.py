"""Model files: configs and ``@register_model`` entrypoints (importing registers them with timm)."""

from .checkpoint import read_state_dict
from .lightconvnext import DynConvNeXt, LightConvNeXt
from .mixer_convnext import MixerConvNeXt, load_convnext_weights, set_engine, stage_feature_sizes
from .mrconvnext import MRConvNeXt, mrconv_kernel_size
from .talkconvnext import TaLKConvNeXt, TaLKConvNeXt2d

MODEL_MODULES = ('mrconvnext', 'talkconvnext', 'lightconvnext')


def list_models() -> list[str]:
    """Names of every model this package registers with timm."""
    import timm

    return sorted(name for module in MODEL_MODULES for name in timm.list_models(module=module))


__all__ = [
    'list_models',
    'MixerConvNeXt',
    'MRConvNeXt',
    'TaLKConvNeXt',
    'TaLKConvNeXt2d',
    'LightConvNeXt',
    'DynConvNeXt',
    'load_convnext_weights',
    'set_engine',
    'read_state_dict',
    'stage_feature_sizes',
    'mrconv_kernel_size',
]
