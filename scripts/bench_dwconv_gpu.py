"""The 7x7 budget: what convnext_tiny's depthwise convolutions cost, per stage, forward, input gradient (dgrad) and
weight gradient (wgrad) timed apart, and the kernels a profile of one step shows.

    python scripts/bench_dwconv_gpu.py [--batch 128] [--img-size 224] [--device cuda] [--repeats 20] [--out DIR]

Each stage's ``Conv2d(C, C, 7, padding=3, groups=C)`` runs in bf16 on a channels-last map, as timm's ConvNeXt runs
it under bf16 autocast (the input here is already bf16: the cast from the float32 residual stream is not timed).
Times are medians in ms (``triton.testing.do_bench`` on a GPU, wall clock on the CPU); ``model_ms`` multiplies by ConvNeXt-T's
depths (3, 3, 9, 3). ``floor_ms`` is the forward's bytes (read and write the map in bf16: 4 B per element) at
``--bandwidth`` GB/s. The profile lists each stage's kernels of one forward and backward by their device time.
``--device cpu`` runs the same at any size (the GPU check's dry run).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import markdown_report, time_calls  # noqa: E402

DEPTHS = (3, 3, 9, 3)
DIMS = (96, 192, 384, 768)


def _time(fn, repeats: int, device: torch.device) -> float:
    """Median ms: ``triton.testing.do_bench`` (CUDA events) on a GPU, wall clock of ``repeats`` calls on the CPU."""
    if device.type == 'cuda':
        from triton.testing import do_bench

        return do_bench(fn, warmup=25, rep=max(repeats, 1) * 10, return_mode='median')
    fn()
    return statistics.median(time_calls(fn, repeats))


def _kernels(conv: nn.Module, x: torch.Tensor, g: torch.Tensor, device: torch.device, top: int = 4) -> str:
    """The ``top`` kernels of one forward and backward by device (or CPU) self time: ``name ms; ...``."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] if device.type == 'cuda' else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        conv(x).backward(g)
        if device.type == 'cuda':
            torch.cuda.synchronize()
    key = 'self_device_time_total' if device.type == 'cuda' else 'self_cpu_time_total'
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0), reverse=True)[:top]
    return '; '.join(f'{e.key[:60]} {getattr(e, key, 0) / 1000:.3f}' for e in events)


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--batch', type=int, default=128)
    p.add_argument('--img-size', type=int, default=224)
    p.add_argument('--device', default='cuda')
    p.add_argument('--repeats', type=int, default=20)
    p.add_argument('--bandwidth', type=float, default=3350.0, help='GB/s for floor_ms (H100 SXM: 3350)')
    p.add_argument('--out', default='', help='directory for dwconv_budget.{md,csv}')
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        sys.exit('bench_dwconv_gpu: no CUDA device visible (--device cpu runs the same on the CPU)')
    dtype = torch.bfloat16
    rows = []
    for i, (C, depth) in enumerate(zip(DIMS, DEPTHS)):
        hw = args.img_size // 4 // 2**i
        conv = nn.Conv2d(C, C, 7, padding=3, groups=C).to(device, dtype).to(memory_format=torch.channels_last)
        x = torch.randn(args.batch, C, hw, hw, device=device, dtype=dtype).to(memory_format=torch.channels_last)
        x.requires_grad_()
        y = conv(x)
        g = torch.randn_like(y)
        fwd = _time(lambda c=conv, x=x: c(x), args.repeats, device)
        dgrad = _time(lambda y=y, x=x, g=g: torch.autograd.grad(y, x, g, retain_graph=True), args.repeats, device)
        wgrad = _time(
            lambda y=y, w=conv.weight, g=g: torch.autograd.grad(y, w, g, retain_graph=True), args.repeats, device
        )
        floor = 4 * x.numel() / (args.bandwidth * 1e6)
        rows.append(
            dict(stage=i + 1, C=C, map=f'{hw}x{hw}', fwd_ms=round(fwd, 4), dgrad_ms=round(dgrad, 4),
                 wgrad_ms=round(wgrad, 4), floor_ms=round(floor, 4), depth=depth,
                 model_ms=round(depth * (fwd + dgrad + wgrad), 4), kernels=_kernels(conv, x, g, device))
        )  # fmt: skip
    total = dict(stage='all', model_ms=round(sum(r['model_ms'] for r in rows), 4))
    total['fwd_ms'] = round(sum(r['depth'] * r['fwd_ms'] for r in rows), 4)
    name = torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'
    title = (
        f'# The 7x7 budget: convnext_tiny depthwise convs on {name}, batch {args.batch}, {args.img_size}px, bf16 '
        f'channels-last, torch {torch.__version__}; median of {args.repeats} (ms)'
    )
    lines = markdown_report([*rows, total], title, args.out, 'dwconv_budget')
    print('\n'.join(lines))
    return rows


if __name__ == '__main__':
    main()
