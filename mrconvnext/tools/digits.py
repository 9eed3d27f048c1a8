"""scikit-learn's bundled handwritten digits as an ImageFolder, so a first run uses ImageNet's code path.

    python -m mrconvnext.tools.digits DIR [--size 32] [--val-fraction 0.2] [--seed 0]

The 1797 8x8 grey images (values 0..16, shipped inside scikit-learn: nothing is downloaded) are
split once into ``train`` and ``val`` with a fixed, class-stratified split (default 80/20:
1437 / 360 images), upscaled with bicubic interpolation to ``size x size``, made RGB and written
as PNGs to ``DIR/<split>/<digit>/<index>.png``. timm's ``create_dataset('', root=DIR,
split='validation')`` finds ``val`` (timm maps the name 'validation' to it), so the same flags as
for ImageNet work. The split is deterministic: the same arguments write the same files (a
``digits.json`` marker records them and a second call with equal arguments returns at once).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .cli_args import digits_parser

__all__ = ['export_digits', 'NUM_CLASSES', 'main']

NUM_CLASSES = 10
_MARKER = 'digits.json'


def _split_indices(labels: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Class-stratified split: the same fraction of every digit goes to validation."""
    rng = np.random.default_rng(seed)
    train, val = [], []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        idx = idx[rng.permutation(len(idx))]
        n_val = int(round(len(idx) * val_fraction))
        val.append(idx[:n_val])
        train.append(idx[n_val:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(val))


def export_digits(root: str | Path, size: int = 32, val_fraction: float = 0.2, seed: int = 0) -> Path:
    """Write the digits ImageFolder under ``root`` (``train/`` and ``val/``) and return ``root``."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the digits data set ships with scikit-learn: pip install scikit-learn (or '.[tools]')"
        ) from e
    from PIL import Image

    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f'val_fraction must be in (0, 1), got {val_fraction}')
    if size < 8:
        raise ValueError(f'size must be >= 8 (the source images are 8x8), got {size}')
    root = Path(root)
    meta = {'source': 'sklearn.datasets.load_digits', 'size': size, 'val_fraction': val_fraction, 'seed': seed}
    marker = root / _MARKER
    if marker.is_file():
        try:
            if json.loads(marker.read_text()).get('args') == meta:
                return root
        except (OSError, ValueError):
            pass

    digits = load_digits()
    images = digits.images  # (1797, 8, 8), 0..16
    labels = digits.target.astype(int)
    train_idx, val_idx = _split_indices(labels, val_fraction, seed)
    counts = {}
    for split, indices in (('train', train_idx), ('val', val_idx)):
        for c in range(NUM_CLASSES):
            (root / split / str(c)).mkdir(parents=True, exist_ok=True)
        for i in indices:
            grey = np.clip(images[i] * (255.0 / 16.0), 0, 255).round().astype(np.uint8)
            img = Image.fromarray(grey, mode='L').resize((size, size), Image.Resampling.BICUBIC).convert('RGB')
            img.save(root / split / str(labels[i]) / f'{i:04d}.png')
        counts[split] = int(len(indices))
    marker.write_text(json.dumps({'args': meta, 'counts': counts}, indent=2) + '\n')
    return root


def main(argv: list[str] | None = None) -> None:
    args = digits_parser().parse_args(argv)
    root = export_digits(args.root, args.size, args.val_fraction, args.seed)
    counts = json.loads((root / _MARKER).read_text())['counts']
    print(
        f'digits ImageFolder at {root}: {counts["train"]} train / {counts["val"]} val images, {args.size}x{args.size}'
    )


if __name__ == '__main__':
    main()
