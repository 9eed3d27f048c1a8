"""Multiply-accumulates and parameters of models, every mixer counted.

    mrconvnext-flops --models convnext_tiny mrconvnext_t:reparam talkconvnext_t --img-size 224

One forward of one image (batch 1) in eval mode under ``torch.utils.flop_counter.FlopCounterMode``. GMACs are its
flops / 2, timm's convention (a multiply-add is one MAC; the paper's "FLOPs" column is this too). The operators of
this package count through their registered formulas (``mrconvnext/ops/*/flops.py``: the FFT convolutions at the
cost of their transforms, TaLK, DynamicConv, the fused convolution + BatchNorm); ``mrconvnext ops`` is their share,
and ``GMACs w/o`` the total without it, what a counter that does not know them reports. ``NAME:reparam`` counts the
model after ``timm.utils.reparameterize_model``; a branched MRConv model also counts building its kernels (the
Fourier modes' matmuls), once per forward whatever the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
from timm.utils import reparameterize_model
from torch.utils.flop_counter import FlopCounterMode

from . import common
from .cli_args import flops_parser

__all__ = ['MacCount', 'count_macs', 'format_table', 'run', 'main']


@dataclass
class MacCount:
    """GMACs of one forward (``total``; ``mixers``: this package's operators) and the parameters in millions."""

    total: float
    mixers: float
    params_m: float
    by_op: dict[str, float] = field(default_factory=dict)


def count_macs(model: nn.Module, img_size: int | tuple[int, int], in_chans: int = 3) -> MacCount:
    """Count one eval forward of a ``(1, in_chans, H, W)`` input on the model's device (its mode is restored)."""
    h, w = (img_size, img_size) if isinstance(img_size, int) else img_size
    param = next(model.parameters(), None)
    x = torch.randn(1, in_chans, h, w, device=param.device if param is not None else 'cpu')
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(x)
    finally:
        model.train(was_training)
    by_op = {str(op): flops / 2e9 for op, flops in counter.get_flop_counts()['Global'].items()}
    mixers = sum(v for op, v in by_op.items() if op.startswith('mrconvnext.'))
    params = sum(p.numel() for p in model.parameters()) / 1e6
    return MacCount(sum(by_op.values()), mixers, params, by_op)


def _model(spec: str, img_size: int) -> nn.Module:
    name, variant = common.parse_model_spec(spec)
    model = common.create_model(name, img_size=img_size)
    return reparameterize_model(model.eval()) if variant == 'reparam' else model


def format_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of :func:`main`'s rows."""
    head = '| model | params (M) | GMACs | mrconvnext ops | GMACs w/o |\n|---|---:|---:|---:|---:|'
    lines = [
        f'| {r["model"]} | {r["params_m"]:.2f} | {r["gmacs"]:.2f} | {r["mixer_gmacs"]:.3f} | '
        f'{r["gmacs"] - r["mixer_gmacs"]:.2f} |'
        for r in rows
    ]
    return '\n'.join([head, *lines])


def run(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Count, print the table and return its rows (also written to ``--results-file``)."""
    args = flops_parser().parse_args(argv)
    rows = []
    for spec in args.models:
        c = count_macs(_model(spec, args.img_size), args.img_size)
        rows.append(dict(model=spec, img_size=args.img_size, params_m=c.params_m, gmacs=c.total, mixer_gmacs=c.mixers))
    print(format_table(rows))
    if args.results_file:
        common.write_results(args.results_file, rows)
    return rows


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``mrconvnext-flops``): :func:`run` without a return value."""
    run(argv)


if __name__ == '__main__':
    main()
