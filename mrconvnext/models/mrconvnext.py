"""MRConvNeXt: ConvNeXt with MRConv token mixers (Cunningham et al., NeurIPS 2024, §5.4, App. D.5).

Each block's 7x7 depthwise conv becomes an :class:`~mrconvnext.layers.MRConv2d` over the row-major
flattened feature map. Kernel settings follow App. D.5: at most 5 resolutions and a smallest
kernel (reach) per stage of ``max(ceil(L / 16), 28)`` for stage sequence length ``L``, which gives
the paper's (196, 49, 28, 28) at 224x224 and derives the small variants' settings by the same rule.

Mode and tap counts (chosen to land on the paper's Table 12 parameter counts, checked in the tests):
37 Fourier modes per branch (MRConvNeXt-T/S/B Fourier: 29.9M / 53.2M / 92.6M vs 30M / 53M / 93M)
and 80 sparse taps per branch (Fourier+Sparse: 31.6M / 56.9M / 97.5M vs 32M / 57M / 98M). The Fourier variants are
registered as ``mrconvnext_fourier_t`` / ``_s`` / ``_b`` (``kernel_type='fourier'``); ``mrconvnext_t`` / ``_s`` /
``_b`` are the Fourier+Sparse ones.

Other input sizes: at another feature-map width each mixer adapts its kernel by its ``lag_remap`` rule
(:class:`~mrconvnext.layers.MRConv2d`), and a checkpoint trained at one ``img_size`` loads into a model built at
another (the mixers take the checkpoint's grid). ``docs/resolution.md`` measures the rules.

No ImageNet weights for MRConvNeXt exist; ``pretrained=True`` needs a weight source you provide
(``pretrained_cfg_overlay=dict(file=...)``, ``local-dir:`` or ``hf-hub:``). To start from timm's
ImageNet ConvNeXt, use :func:`~mrconvnext.models.load_convnext_weights`.

Cite::

    @inproceedings{cunningham2024mrconv,
      title = {Reparameterized Multi-Resolution Convolutions for Long Sequence Modelling},
      author = {Cunningham, Harry Jake and Giannone, Giorgio and Zhang, Mingtian and Deisenroth, Marc Peter},
      booktitle = {Advances in Neural Information Processing Systems},
      year = {2024}
    }
"""

from __future__ import annotations

import math

import torch.nn as nn
from timm.models import generate_default_cfgs, register_model

from ..layers import MRConv2d
from ..ops import engines
from .mixer_convnext import CONVNEXT_ARCHS, MixerConvNeXt, convnext_cfg, create_mixer_convnext

__all__ = ['MRConvNeXt', 'mrconv_kernel_size']


def mrconv_kernel_size(seq_len: int, max_branches: int = 5, min_size: int = 28) -> int:
    """App. D.5 rule: the smallest reach is ``max(ceil(L / 2**(max_branches - 1)), min_size)``."""
    return max(math.ceil(seq_len / 2 ** (max_branches - 1)), min_size)


class MRConvNeXt(MixerConvNeXt):
    """ConvNeXt with MRConv mixers.

    Args:
        kernel_type: ``'fourier_sparse'`` (the paper's best), ``'fourier'``, ``'sparse'``,
            ``'dilated'`` or ``'dense'``.
        combine: ``'bn'`` (BatchNorm per branch + alpha) or ``'scale'`` (linear rescaling).
        kernel_sizes: smallest reach per stage; default from :func:`mrconv_kernel_size`.
        max_branches: resolutions per mixer at most.
        num_modes: Fourier modes per branch.
        num_taps: taps per branch (``sparse`` / ``fourier_sparse``) or per side (``dilated``); default the
            layer's (:func:`~mrconvnext.layers.mrconv.default_num_taps`: 80, or the kernel size for ``dilated``).
        causal: causal mixers (default bidirectional).
        groups: reduced-dimension mixers (paper App. B.2): ``dim / groups`` filters per branch, each shared by
            ``groups`` channels (:class:`~mrconvnext.layers.MRConv1d`); must divide every stage's width. Default 1.
        heads: multi-head mixers (paper App. B.1): each mixer convolves ``heads`` copies of its input with filters
            of their own and returns ``heads * dim`` channels, which the block's norm and first pointwise layer take
            (that layer, ``heads`` times wider at its input, mixes the heads). Default 1; ConvNeXt checkpoints
            (:func:`~mrconvnext.models.load_convnext_weights`) do not fit the wider layers.
        lag_remap: the mixers' rule at other input sizes (:class:`~mrconvnext.layers.MRConv2d`): ``'split'``
            (default), ``'conv2d'`` (the exact 2-D convolution of the nominal layer) or ``'none'``.
        method: the mixers' convolution method (``'auto'``, ``'fft'``, ``'direct'``, ``'toeplitz'``, ``'rowdft'``;
            :mod:`mrconvnext.ops.long_conv.dispatch`).
        engine: the mixers' engine (``'auto'``, ``'native'``, ``'torch'``, ``'flashfft'``).
        backend: deprecated spelling of ``method`` / ``engine`` (configs that hold it still load, with a warning).
        **kwargs: :class:`MixerConvNeXt` / timm ``ConvNeXt`` arguments (``img_size``, ``deploy``,
            ``depths``, ``dims``, ``num_classes``, ``in_chans``, ``drop_path_rate``, ...).
    """

    def __init__(
        self,
        kernel_type: str = 'fourier_sparse',
        combine: str = 'bn',
        kernel_sizes: tuple[int, ...] | list[int] | None = None,
        max_branches: int = 5,
        num_modes: int = 37,
        num_taps: int | None = None,
        causal: bool = False,
        groups: int = 1,
        heads: int = 1,
        lag_remap: str | bool = 'split',
        method: str = 'auto',
        engine: str = 'auto',
        backend: str | None = None,
        **kwargs,
    ) -> None:
        if kernel_sizes is not None and len(kernel_sizes) != len(kwargs.get('depths', (3, 3, 9, 3))):
            raise ValueError(f'kernel_sizes needs one entry per stage, got {kernel_sizes}')
        if backend is not None:
            method, engine = engines.from_backend(type(self).__name__, 'long_conv', backend, method, engine)
        self.mixer_cfg = dict(
            kernel_type=kernel_type,
            combine=combine,
            max_branches=max_branches,
            num_modes=num_modes,
            num_taps=num_taps,
            causal=causal,
            groups=groups,
            heads=heads,
            lag_remap=lag_remap,
            method=method,
            engine=engine,
        )
        self.kernel_sizes = tuple(kernel_sizes) if kernel_sizes is not None else None
        super().__init__(**kwargs)

    def make_mixer(self, stage: int, dim: int, input_size: tuple[int, int]) -> nn.Module:
        L = input_size[0] * input_size[1]
        cfg = self.mixer_cfg
        l0 = self.kernel_sizes[stage] if self.kernel_sizes else mrconv_kernel_size(L, cfg['max_branches'])
        return MRConv2d(dim, input_size, kernel_size=l0, deploy=self.deploy, **cfg)


_PAPER = dict(
    paper_ids='arXiv:2408.09453',
    paper_name='Reparameterized Multi-Resolution Convolutions for Long Sequence Modelling',
)
default_cfgs = generate_default_cfgs(
    {
        name: convnext_cfg(**_PAPER)
        for name in (
            'mrconvnext_atto',
            'mrconvnext_femto',
            'mrconvnext_pico',
            'mrconvnext_nano',
            'mrconvnext_t',
            'mrconvnext_s',
            'mrconvnext_b',
            'mrconvnext_fourier_t',
            'mrconvnext_fourier_s',
            'mrconvnext_fourier_b',
        )
    }
)


@register_model
def mrconvnext_atto(pretrained: bool = False, **kwargs) -> MRConvNeXt:
    return create_mixer_convnext(MRConvNeXt, 'mrconvnext_atto', pretrained, **dict(CONVNEXT_ARCHS['atto'], **kwargs))


@register_model
def mrconvnext_femto(pretrained: bool = False, **kwargs) -> MRConvNeXt:
    return create_mixer_convnext(MRConvNeXt, 'mrconvnext_femto', pretrained, **dict(CONVNEXT_ARCHS['femto'], **kwargs))


@register_model
def mrconvnext_pico(pretrained: bool = False, **kwargs) -> MRConvNeXt:
    return create_mixer_convnext(MRConvNeXt, 'mrconvnext_pico', pretrained, **dict(CONVNEXT_ARCHS['pico'], **kwargs))


@register_model
def mrconvnext_nano(pretrained: bool = False, **kwargs) -> MRConvNeXt:
    return create_mixer_convnext(MRConvNeXt, 'mrconvnext_nano', pretrained, **dict(CONVNEXT_ARCHS['nano'], **kwargs))


@register_model
def mrconvnext_t(pretrained: bool = False, **kwargs) -> MRConvNeXt:
    return create_mixer_convnext(MRConvNeXt, 'mrconvnext_t', pretrained, **dict(CONVNEXT_ARCHS['t'], **kwargs))


@register_model
def mrconvnext_s(pretrained: bool = False, **kwargs) -> MRConvNeXt:
    return create_mixer_convnext(MRConvNeXt, 'mrconvnext_s', pretrained, **dict(CONVNEXT_ARCHS['s'], **kwargs))


@register_model
def mrconvnext_b(pretrained: bool = False, **kwargs) -> MRConvNeXt:
    return create_mixer_convnext(MRConvNeXt, 'mrconvnext_b', pretrained, **dict(CONVNEXT_ARCHS['b'], **kwargs))


# Paper Table 12's Fourier-kernel variants (30 / 53 / 93 M parameters): the same models with kernel_type='fourier'.


@register_model
def mrconvnext_fourier_t(pretrained: bool = False, **kwargs) -> MRConvNeXt:
    kwargs = dict(CONVNEXT_ARCHS['t'], kernel_type='fourier', **kwargs)
    return create_mixer_convnext(MRConvNeXt, 'mrconvnext_fourier_t', pretrained, **kwargs)


@register_model
def mrconvnext_fourier_s(pretrained: bool = False, **kwargs) -> MRConvNeXt:
    kwargs = dict(CONVNEXT_ARCHS['s'], kernel_type='fourier', **kwargs)
    return create_mixer_convnext(MRConvNeXt, 'mrconvnext_fourier_s', pretrained, **kwargs)


@register_model
def mrconvnext_fourier_b(pretrained: bool = False, **kwargs) -> MRConvNeXt:
    kwargs = dict(CONVNEXT_ARCHS['b'], kernel_type='fourier', **kwargs)
    return create_mixer_convnext(MRConvNeXt, 'mrconvnext_fourier_b', pretrained, **kwargs)
