"""The digits ImageFolder: a fixed, class-stratified, disjoint 80/20 split of scikit-learn's 1797 images."""

import json

import numpy as np
import pytest
from PIL import Image

from mrconvnext.tools import digits


def _indices(root, split):
    return sorted(int(p.stem) for p in (root / split).glob('*/*.png'))


def test_split_is_fixed_stratified_and_disjoint(digits_dir):
    from sklearn.datasets import load_digits

    labels = load_digits().target
    train, val = digits._split_indices(labels, 0.2, 0)
    train2, val2 = digits._split_indices(labels, 0.2, 0)
    assert np.array_equal(train, train2) and np.array_equal(val, val2)  # deterministic
    assert not set(train) & set(val) and len(train) + len(val) == 1797  # real held-out data
    for c in range(10):  # every digit is split 80/20
        n = (labels == c).sum()
        assert abs((labels[val] == c).sum() - 0.2 * n) <= 0.5
    # the folder holds exactly that split, each image under its own label
    assert _indices(digits_dir, 'train') == train.tolist()
    assert _indices(digits_dir, 'val') == val.tolist()
    for p in list((digits_dir / 'val').glob('*/*.png'))[:20]:
        assert int(p.parent.name) == labels[int(p.stem)]
    meta = json.loads((digits_dir / 'digits.json').read_text())
    assert meta['counts'] == {'train': len(train), 'val': len(val)}


def test_images_are_upscaled_rgb(digits_dir):
    img = Image.open(next((digits_dir / 'train').glob('0/*.png')))
    assert img.mode == 'RGB' and img.size == (32, 32)


def test_export_is_idempotent(digits_dir):
    before = {p: p.stat().st_mtime_ns for p in (digits_dir / 'val').glob('*/*.png')}
    assert digits.export_digits(digits_dir, size=32) == digits_dir  # same arguments: nothing rewritten
    assert {p: p.stat().st_mtime_ns for p in (digits_dir / 'val').glob('*/*.png')} == before


def test_bad_arguments():
    with pytest.raises(ValueError, match='val_fraction'):
        digits.export_digits('unused', val_fraction=1.5)
