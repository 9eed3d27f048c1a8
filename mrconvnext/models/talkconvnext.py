"""TaLK-ConvNeXt: ConvNeXt with TaLK mixers (Lioutas & Guo, ICML 2020), 1D and 2D.

- ``talkconvnext_*``: :class:`~mrconvnext.layers.TaLKConvFlat2d`, adaptive windows along the row-major
  flattened feature map (they wrap across image rows, like the paper's 1D op applied to an image).
- ``talkconvnext2d_*``: :class:`~mrconvnext.layers.TaLKConv2d`, adaptive boxes over the 2D integral
  image (beyond the paper: boxes respect rows and columns).

Per-stage settings (our rule): maximum offsets are half the stage's nominal extent on each side
(1D: ``H*W // 2``; 2D: ``W // 2`` left/right, ``H // 2`` top/bottom), so a window can grow to the whole
map; it starts at half that (sigmoid(0) = 0.5) and learns per position how far to reach. One head per
16 channels (``num_heads = dim // 16``, at least 1): 16 channels share each window.

Cite::

    @inproceedings{lioutas2020talk,
      title = {Time-aware Large Kernel Convolutions},
      author = {Lioutas, Vasileios and Guo, Yuhong},
      booktitle = {International Conference on Machine Learning},
      year = {2020}
    }
"""

from __future__ import annotations

import torch.nn as nn
from timm.models import generate_default_cfgs, register_model

from ..layers import TaLKConv2d, TaLKConvFlat2d
from ..ops import engines
from .mixer_convnext import CONVNEXT_ARCHS, MixerConvNeXt, convnext_cfg, create_mixer_convnext

__all__ = ['TaLKConvNeXt', 'TaLKConvNeXt2d']


class TaLKConvNeXt(MixerConvNeXt):
    """ConvNeXt with 1D (flattened) TaLK mixers.

    Args:
        channels_per_head: channels sharing one window (``num_heads = max(1, dim // channels_per_head)``).
        offsets_dropout: offsets dropout probability (training only, never rescales offsets above 1); 0 by default
            (the paper trains with 0.1: see docs/workflow.md's recipe table).
        causal: windows that only look back in raster order (1-D: ``max_right = 0``; 2-D: boxes reaching up and left
            only); the paper's decoder setting, off for images.
        engine: the mixers' TaLK engine (``'auto'``: Triton on CUDA, the native kernels on the CPU where they build,
            else PyTorch; :mod:`mrconvnext.ops.talk.dispatch`).
        backend: deprecated spelling of ``engine`` (configs that hold it still load, with a warning).
        **kwargs: :class:`MixerConvNeXt` / timm ``ConvNeXt`` arguments.
    """

    mixer_layer = TaLKConvFlat2d

    def __init__(
        self,
        channels_per_head: int = 16,
        offsets_dropout: float = 0.0,
        causal: bool = False,
        engine: str = 'auto',
        backend: str | None = None,
        **kwargs,
    ) -> None:
        if backend is not None:
            engine = engines.from_backend(type(self).__name__, 'talk', backend, 'auto', engine)[1]
        self.channels_per_head = channels_per_head
        self.mixer_cfg = dict(offsets_dropout=offsets_dropout, causal=causal, engine=engine)
        super().__init__(**kwargs)

    def make_mixer(self, stage: int, dim: int, input_size: tuple[int, int]) -> nn.Module:
        heads = max(1, dim // self.channels_per_head)
        return self.mixer_layer(dim, input_size, num_heads=heads, **self.mixer_cfg)


class TaLKConvNeXt2d(TaLKConvNeXt):
    """ConvNeXt with 2D box TaLK mixers (same arguments as :class:`TaLKConvNeXt`)."""

    mixer_layer = TaLKConv2d


_PAPER = dict(paper_ids='arXiv:2002.03184', paper_name='Time-aware Large Kernel Convolutions')
_SIZES = ('atto', 'femto', 'pico', 'nano', 't', 's', 'b')
default_cfgs = generate_default_cfgs(
    {f'{family}_{size}': convnext_cfg(**_PAPER) for family in ('talkconvnext', 'talkconvnext2d') for size in _SIZES}
)


def _talk(size: str, pretrained: bool, kwargs: dict) -> TaLKConvNeXt:
    return create_mixer_convnext(
        TaLKConvNeXt, f'talkconvnext_{size}', pretrained, **dict(CONVNEXT_ARCHS[size], **kwargs)
    )


def _talk2d(size: str, pretrained: bool, kwargs: dict) -> TaLKConvNeXt2d:
    return create_mixer_convnext(
        TaLKConvNeXt2d, f'talkconvnext2d_{size}', pretrained, **dict(CONVNEXT_ARCHS[size], **kwargs)
    )


@register_model
def talkconvnext_atto(pretrained: bool = False, **kwargs) -> TaLKConvNeXt:
    return _talk('atto', pretrained, kwargs)


@register_model
def talkconvnext_femto(pretrained: bool = False, **kwargs) -> TaLKConvNeXt:
    return _talk('femto', pretrained, kwargs)


@register_model
def talkconvnext_pico(pretrained: bool = False, **kwargs) -> TaLKConvNeXt:
    return _talk('pico', pretrained, kwargs)


@register_model
def talkconvnext_nano(pretrained: bool = False, **kwargs) -> TaLKConvNeXt:
    return _talk('nano', pretrained, kwargs)


@register_model
def talkconvnext_t(pretrained: bool = False, **kwargs) -> TaLKConvNeXt:
    return _talk('t', pretrained, kwargs)


@register_model
def talkconvnext_s(pretrained: bool = False, **kwargs) -> TaLKConvNeXt:
    return _talk('s', pretrained, kwargs)


@register_model
def talkconvnext_b(pretrained: bool = False, **kwargs) -> TaLKConvNeXt:
    return _talk('b', pretrained, kwargs)


@register_model
def talkconvnext2d_atto(pretrained: bool = False, **kwargs) -> TaLKConvNeXt2d:
    return _talk2d('atto', pretrained, kwargs)


@register_model
def talkconvnext2d_femto(pretrained: bool = False, **kwargs) -> TaLKConvNeXt2d:
    return _talk2d('femto', pretrained, kwargs)


@register_model
def talkconvnext2d_pico(pretrained: bool = False, **kwargs) -> TaLKConvNeXt2d:
    return _talk2d('pico', pretrained, kwargs)


@register_model
def talkconvnext2d_nano(pretrained: bool = False, **kwargs) -> TaLKConvNeXt2d:
    return _talk2d('nano', pretrained, kwargs)


@register_model
def talkconvnext2d_t(pretrained: bool = False, **kwargs) -> TaLKConvNeXt2d:
    return _talk2d('t', pretrained, kwargs)


@register_model
def talkconvnext2d_s(pretrained: bool = False, **kwargs) -> TaLKConvNeXt2d:
    return _talk2d('s', pretrained, kwargs)


@register_model
def talkconvnext2d_b(pretrained: bool = False, **kwargs) -> TaLKConvNeXt2d:
    return _talk2d('b', pretrained, kwargs)
