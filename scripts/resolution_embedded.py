"""How far each size rule is from the 2-D convolution, for a deployed MRConv2d holding an embedded 3x3 kernel.

    python scripts/resolution_embedded.py [--nominal 14] [--seed 0]

A ``nominal x nominal`` layer whose kernel is a random 3x3 kernel written at its flattened lags ``dy * W + dx``: at
its nominal size the layer is that 3x3 convolution. At other sizes, the relative L2 error of each ``lag_remap`` rule
against ``F.conv2d`` with the same 3x3 kernel, over the interior pixels (float64).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from mrconvnext.layers import LAG_REMAP_RULES, MRConv2d

SIZES = ((14, 18), (20, 10), (14, 28), (10, 10))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--nominal', type=int, default=14)
    p.add_argument('--seed', type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    H = W = args.nominal
    k3 = torch.randn(8, 3, 3, dtype=torch.float64)
    print(f'{"rule":>7} ' + ' '.join(f'{h}x{w}'.rjust(7) for h, w in SIZES))
    for rule in LAG_REMAP_RULES:
        layer = MRConv2d(8, (H, W), deploy=True, lag_remap=rule).double().eval()
        with torch.no_grad():
            layer.kernel.zero_()
            for a in (-1, 0, 1):
                for d in (-1, 0, 1):
                    layer.kernel[:, layer.zero_lag + a * W + d] = k3[:, a + 1, d + 1]
            errors = []
            for h, w in SIZES:
                x = torch.randn(2, 8, h, w, dtype=torch.float64)
                ref = F.conv2d(x, k3.flip(-2, -1).unsqueeze(1), padding=1, groups=8)
                diff = (layer(x) - ref)[..., 1:-1, 1:-1]
                errors.append((diff.norm() / ref[..., 1:-1, 1:-1].norm()).item())
        print(f'{rule:>7} ' + ' '.join(f'{e:7.3f}' for e in errors))


if __name__ == '__main__':
    main()
