"""RandAugment's top-magnitude posterize (0 bits) must not crash training on recent Pillow."""

import pytest
from PIL import Image
from timm.data import auto_augment

from mrconvnext.tools import compat


@pytest.fixture(autouse=True)
def _restore_timm_ops():
    """The patch rewrites timm's global op table: put it back for the tests that follow."""
    saved = dict(auto_augment.NAME_TO_OP)
    yield
    auto_augment.NAME_TO_OP.clear()
    auto_augment.NAME_TO_OP.update(saved)


def test_zero_bit_posterize_gives_a_black_image_after_the_patch():
    img = Image.new('RGB', (16, 16), (200, 100, 50))
    compat.patch_timm_posterize()
    op = auto_augment.AugmentOp('PosterizeIncreasing', prob=1.0, magnitude=10)  # 4 - int(4 * 10 / 10) = 0 bits
    out = op(img)
    assert out.size == img.size and out.getextrema() == ((0, 0), (0, 0), (0, 0))
    assert auto_augment.AugmentOp('PosterizeIncreasing', prob=1.0, magnitude=5)(img).getextrema() != out.getextrema()
    assert compat.posterize(img, 8) is img


def test_the_convnext_policy_runs_at_its_clipped_top_magnitude():
    compat.patch_timm_posterize()
    ra = auto_augment.rand_augment_transform('rand-m10-n2-inc1', {'translate_const': 10, 'img_mean': (124, 116, 104)})
    img = Image.new('RGB', (32, 32), (120, 60, 30))
    outputs = [ra(img) for _ in range(200)]  # every op of the policy, at magnitude 10, many times
    assert all(isinstance(o, Image.Image) and o.size == img.size and o.mode == img.mode for o in outputs)
    assert any(o.getextrema() == ((0, 0), (0, 0), (0, 0)) for o in outputs)  # the 0-bit posterize ran
