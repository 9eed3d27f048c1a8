"""LightConvNeXt / DynConvNeXt: ConvNeXt with LightConv or DynamicConv mixers (Wu et al., ICLR 2019).

Each block's 7x7 depthwise conv becomes a :class:`~mrconvnext.layers.LightConv2d` or
:class:`~mrconvnext.layers.DynamicConv2d` over the row-major flattened feature map.

Per-stage settings (our choice; the paper is about text): kernels grow with depth as in the paper's
encoders (3, 7, 15, 31, ...), starting one step up because a flattened image row is long:
``kernel_sizes = (7, 15, 31, 31)``, and one head per 16 channels (``num_heads = dim // 16``,
at least 1), i.e. 16 channels share each softmax-normalized kernel.

Cite::

    @inproceedings{wu2019pay,
      title = {Pay Less Attention with Lightweight and Dynamic Convolutions},
      author = {Wu, Felix and Fan, Angela and Baevski, Alexei and Dauphin, Yann N. and Auli, Michael},
      booktitle = {International Conference on Learning Representations},
      year = {2019}
    }
"""

from __future__ import annotations

import torch.nn as nn
from timm.models import generate_default_cfgs, register_model

from ..layers import DynamicConv2d, LightConv2d
from .mixer_convnext import CONVNEXT_ARCHS, MixerConvNeXt, convnext_cfg, create_mixer_convnext

__all__ = ['LightConvNeXt', 'DynConvNeXt']


class LightConvNeXt(MixerConvNeXt):
    """ConvNeXt with LightConv mixers.

    Args:
        kernel_sizes: kernel size per stage.
        channels_per_head: channels sharing one kernel (``num_heads = max(1, dim // channels_per_head)``).
        weight_dropout: DropConnect probability on the normalized kernels (training only).
        causal: causal mixers (default bidirectional).
        engine: the mixers' engine, ``'auto'``, ``'torch'`` or ``'triton'``
            (:func:`mrconvnext.ops.light_conv.dispatch.light_conv_engine`; DynConvNeXt's:
            :func:`mrconvnext.ops.light_conv.dispatch.dynamic_conv_engine`).
        **kwargs: :class:`MixerConvNeXt` / timm ``ConvNeXt`` arguments.
    """

    mixer_layer = LightConv2d

    def __init__(
        self,
        kernel_sizes: tuple[int, ...] | list[int] = (7, 15, 31, 31),
        channels_per_head: int = 16,
        weight_dropout: float = 0.0,
        causal: bool = False,
        engine: str = 'auto',
        **kwargs,
    ) -> None:
        if len(kernel_sizes) != len(kwargs.get('depths', (3, 3, 9, 3))):
            raise ValueError(f'kernel_sizes needs one entry per stage, got {kernel_sizes}')
        self.kernel_sizes = tuple(kernel_sizes)
        self.channels_per_head = channels_per_head
        # subclasses add their mixers' own options (DynConvNeXt: predictor_bias) before calling this
        extra = getattr(self, 'extra_mixer_cfg', {})
        self.mixer_cfg = dict(weight_dropout=weight_dropout, causal=causal, engine=engine, **extra)
        super().__init__(**kwargs)

    def make_mixer(self, stage: int, dim: int, input_size: tuple[int, int]) -> nn.Module:
        heads = max(1, dim // self.channels_per_head)
        return self.mixer_layer(
            dim, input_size, kernel_size=self.kernel_sizes[stage], num_heads=heads, **self.mixer_cfg
        )


class DynConvNeXt(LightConvNeXt):
    """ConvNeXt with DynamicConv mixers: the arguments of :class:`LightConvNeXt` (``engine``: 'auto' is Triton on
    CUDA, :func:`mrconvnext.ops.light_conv.dispatch.dynamic_conv_engine`) and ``predictor_bias`` (a bias in the kernel predictor:
    off, as in the paper; checkpoints with one still load)."""

    mixer_layer = DynamicConv2d

    def __init__(self, predictor_bias: bool = False, **kwargs) -> None:
        self.extra_mixer_cfg = dict(predictor_bias=predictor_bias)
        super().__init__(**kwargs)


_PAPER = dict(paper_ids='arXiv:1901.10430', paper_name='Pay Less Attention with Lightweight and Dynamic Convolutions')
_SIZES = ('atto', 'femto', 'pico', 'nano', 't', 's', 'b')
default_cfgs = generate_default_cfgs(
    {f'{family}_{size}': convnext_cfg(**_PAPER) for family in ('lightconvnext', 'dynconvnext') for size in _SIZES}
)


def _light(size: str, pretrained: bool, kwargs: dict) -> LightConvNeXt:
    return create_mixer_convnext(
        LightConvNeXt, f'lightconvnext_{size}', pretrained, **dict(CONVNEXT_ARCHS[size], **kwargs)
    )


def _dyn(size: str, pretrained: bool, kwargs: dict) -> DynConvNeXt:
    return create_mixer_convnext(DynConvNeXt, f'dynconvnext_{size}', pretrained, **dict(CONVNEXT_ARCHS[size], **kwargs))


@register_model
def lightconvnext_atto(pretrained: bool = False, **kwargs) -> LightConvNeXt:
    return _light('atto', pretrained, kwargs)


@register_model
def lightconvnext_femto(pretrained: bool = False, **kwargs) -> LightConvNeXt:
    return _light('femto', pretrained, kwargs)


@register_model
def lightconvnext_pico(pretrained: bool = False, **kwargs) -> LightConvNeXt:
    return _light('pico', pretrained, kwargs)


@register_model
def lightconvnext_nano(pretrained: bool = False, **kwargs) -> LightConvNeXt:
    return _light('nano', pretrained, kwargs)


@register_model
def lightconvnext_t(pretrained: bool = False, **kwargs) -> LightConvNeXt:
    return _light('t', pretrained, kwargs)


@register_model
def dynconvnext_atto(pretrained: bool = False, **kwargs) -> DynConvNeXt:
    return _dyn('atto', pretrained, kwargs)


@register_model
def dynconvnext_femto(pretrained: bool = False, **kwargs) -> DynConvNeXt:
    return _dyn('femto', pretrained, kwargs)


@register_model
def dynconvnext_pico(pretrained: bool = False, **kwargs) -> DynConvNeXt:
    return _dyn('pico', pretrained, kwargs)


@register_model
def dynconvnext_nano(pretrained: bool = False, **kwargs) -> DynConvNeXt:
    return _dyn('nano', pretrained, kwargs)


@register_model
def dynconvnext_t(pretrained: bool = False, **kwargs) -> DynConvNeXt:
    return _dyn('t', pretrained, kwargs)


@register_model
def lightconvnext_s(pretrained: bool = False, **kwargs) -> LightConvNeXt:
    return _light('s', pretrained, kwargs)


@register_model
def lightconvnext_b(pretrained: bool = False, **kwargs) -> LightConvNeXt:
    return _light('b', pretrained, kwargs)


@register_model
def dynconvnext_s(pretrained: bool = False, **kwargs) -> DynConvNeXt:
    return _dyn('s', pretrained, kwargs)


@register_model
def dynconvnext_b(pretrained: bool = False, **kwargs) -> DynConvNeXt:
    return _dyn('b', pretrained, kwargs)
