"""Compatibility shims for the library versions the workflow runs with.

RandAugment posterize with recent Pillow (13.0 here): timm's ``PosterizeIncreasing`` keeps ``4 - int(4 * m / 10)``
bits, i.e. 0 bits at magnitude 10 (which the ConvNeXt policy ``rand-m9-mstd0.5-inc1`` reaches whenever
its sampled magnitude is clipped at 10). Older Pillow turned 0 bits into a black image (as the
TensorFlow reference does); Pillow 13.0's ``ImageOps.posterize`` raises ``ValueError`` for it, which
kills a training run at a random step. :func:`patch_timm_posterize` points timm's three posterize
ops at a function with the old semantics (0 bits: black image), only if the installed Pillow rejects
0 bits. It must run before the transforms are built (they look the op up at construction).
"""

from __future__ import annotations

import logging

__all__ = ['posterize', 'patch_timm_posterize', 'pillow_rejects_zero_bits']

_logger = logging.getLogger('mrconvnext.tools')
_POSTERIZE_OPS = ('Posterize', 'PosterizeIncreasing', 'PosterizeOriginal')


def pillow_rejects_zero_bits() -> bool:
    from PIL import Image, ImageOps

    try:
        ImageOps.posterize(Image.new('L', (1, 1)), 0)
    except ValueError:
        return True
    return False


def posterize(img, bits_to_keep, **_):
    """timm's posterize op with 0 bits giving a black image (every bit masked), as Pillow < 13 did."""
    from PIL import Image, ImageOps

    if bits_to_keep >= 8:
        return img
    if bits_to_keep <= 0:
        return Image.new(img.mode, img.size)
    return ImageOps.posterize(img, bits_to_keep)


def patch_timm_posterize() -> bool:
    """Install :func:`posterize` for timm's posterize ops if Pillow rejects 0 bits; True if patched."""
    from timm.data import auto_augment

    if not pillow_rejects_zero_bits():
        return False
    patched = False
    for name in _POSTERIZE_OPS:
        if name in auto_augment.NAME_TO_OP and auto_augment.NAME_TO_OP[name] is not posterize:
            auto_augment.NAME_TO_OP[name] = posterize
            patched = True
    if patched:
        _logger.info('timm RandAugment posterize: 0 bits -> black image (this Pillow rejects 0 bits)')
    return True
