"""GPU benchmark of TaLK per ConvNeXt-T stage, beside timm's 7x7 depthwise conv, with bytes moved.

Per stage (C, H x W) = (96, 56²), (192, 28²), (384, 14²), (768, 7²) with 16 channels per head and the models' maximum
offsets (half the flattened map for 1-D, half the width / height for 2-D), a channels-last float32 input under bf16
autocast, as in a ConvNeXt block:

- ``dwconv7x7``: the mixer ConvNeXt-T has there (timm's ``create_conv2d(C, C, 7, depthwise=True)``);
- ``talk1d/<engine>``, ``talk2d/<engine>``: the whole mixer (``TaLKConvFlat2d`` / ``TaLKConv2d``: offset projection,
  sigmoid, the TaLK operator) on the Triton kernels or the fused PyTorch ops;
- ``op1d/triton``, ``op2d/triton``: the operator alone on a bf16 map and precomputed offsets.

Modes ``fwd`` (no_grad) and ``fwd+bwd`` (gradients of x and the parameters, or of x and the offsets, for a random
cotangent). Times are ``triton.testing.do_bench`` medians (CUDA events, after warm-up); ratios are over ``dwconv7x7``
of the same stage and mode; peak memory is ``torch.cuda.max_memory_allocated`` over one call, minus what was
allocated before. ``bytes/elem`` is the forward traffic per map element the operator's design needs under bf16
(``--accounting`` prints the model alone, without a GPU): x read (2 B), the float32 table written (4 B) and read at the
edges (counted once: the gathers hit cache), y written (2 B), the offsets (4 B per side and head, over the head's 16
channels), and the scan's read of x (2 B) where the table is built (not for the plane kernels);
ConvNeXt's conv is 10 B (``../shared/notes/gpu-design.md``). Every stage's channels-last map takes the tables (the
one-launch plane kernels, x and y once and no table, serve channels-first maps of at most 256 positions only).

    python scripts/bench_talk_gpu.py [--batch 128] [--out results]
    python scripts/bench_talk_gpu.py --accounting
"""

import argparse
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package

import torch  # noqa: E402
from _bench import gpu_time_and_peak, markdown_report  # noqa: E402

STAGES = [(96, 56), (192, 28), (384, 14), (768, 7)]  # (C, side)
HEAD_DIM = 16


def bytes_per_element(op: str) -> float:
    """Forward bytes per map element of the Triton operator on a channels-last bf16 map (the module docstring)."""
    sides = 2 if op == 'talk1d' else 4
    offsets = 4 * sides / HEAD_DIM
    return 2 + 4 + 4 + 2 + 2 + offsets  # scan: x read, table written; gathers: table and x read; y written


def accounting() -> list[str]:
    lines = ['| stage | C | H x W | talk1d B/elem | talk2d B/elem | dwconv B/elem |', '|' + ' --- |' * 6]
    for i, (C, S) in enumerate(STAGES):
        lines.append(
            f'| {i + 1} | {C} | {S}x{S} | {bytes_per_element("talk1d"):.2f} | {bytes_per_element("talk2d"):.2f} | 10 |'
        )
    return lines


def _op1d(x: torch.Tensor, off: torch.Tensor, half: int) -> torch.Tensor:
    from mrconvnext.ops.talk import talk1d

    return talk1d(x.flatten(2), off, half, half, engine='triton')


def _op2d(x: torch.Tensor, off: torch.Tensor, half: int) -> torch.Tensor:
    from mrconvnext.ops.talk import talk2d

    return talk2d(x, off, half, half, half, half, engine='triton')


def _runner(module, inputs: list, mode: str, params: list):
    if mode == 'fwd':

        def run():
            with torch.no_grad(), torch.autocast('cuda', dtype=torch.bfloat16):
                module(*inputs)

        return run
    leaves = [t.detach().requires_grad_() for t in inputs]

    def run():
        with torch.autocast('cuda', dtype=torch.bfloat16):
            y = module(*leaves)
        torch.autograd.grad(y, [*leaves, *params], torch.ones_like(y))

    return run


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--batch', type=int, default=128)
    p.add_argument('--accounting', action='store_true', help='print the byte model only (no GPU needed)')
    p.add_argument('--out', default='results', help="directory of gpu_talk_ops.{md,csv} ('' to skip)")
    args = p.parse_args(argv)
    if args.accounting:
        print('\n'.join(accounting()))
        return []
    if not torch.cuda.is_available():
        sys.exit('bench_talk_gpu: no CUDA device visible (--accounting needs none)')
    from timm.layers import create_conv2d

    from mrconvnext.layers import TaLKConv2d, TaLKConvFlat2d

    rows = []
    for stage, (C, S) in enumerate(STAGES, 1):
        L, heads = S * S, C // HEAD_DIM
        x = torch.randn(args.batch, C, S, S, device='cuda').contiguous(memory_format=torch.channels_last)
        xb = x.to(torch.bfloat16)
        off1 = torch.rand(args.batch, L, heads, 2, device='cuda').transpose(1, 2)  # as the projection gives them
        off2 = torch.rand(args.batch, S, S, heads, 4, device='cuda').permute(0, 3, 1, 2, 4)
        cases = {'dwconv7x7': (create_conv2d(C, C, 7, depthwise=True), [x])}
        for engine in ('triton', 'torch'):
            torch.manual_seed(0)
            cases[f'talk1d/{engine}'] = (TaLKConvFlat2d(C, (S, S), num_heads=heads, engine=engine), [x])
            cases[f'talk2d/{engine}'] = (TaLKConv2d(C, (S, S), num_heads=heads, engine=engine), [x])
        cases['op1d/triton'] = (functools.partial(_op1d, half=L // 2), [xb, off1])
        cases['op2d/triton'] = (functools.partial(_op2d, half=S // 2), [xb, off2])
        elements = args.batch * C * L
        for mode in ('fwd', 'fwd+bwd'):
            base = None
            for name, (module, inputs) in cases.items():
                if isinstance(module, torch.nn.Module):
                    module = module.cuda().to(memory_format=torch.channels_last)
                    params = [q for q in module.parameters() if q.requires_grad]
                else:
                    params = []
                run = _runner(module, inputs, mode, params)
                ms, peak = gpu_time_and_peak(run)
                base = ms if name == 'dwconv7x7' else base
                row = dict(stage=stage, B=args.batch, C=C, HW=f'{S}x{S}', mode=mode, case=name)
                row.update(median_ms=round(ms, 4), ratio_vs_dwconv=round(ms / base, 3), peak_extra_mb=round(peak, 1))
                if mode == 'fwd' and name.startswith('op'):
                    b = bytes_per_element('talk1d' if name.startswith('op1d') else 'talk2d')
                    row['model_GBps'] = round(elements * b / (ms * 1e-3) / 1e9, 1)
                rows.append(row)
                print(' '.join(f'{k}={v}' for k, v in row.items()), flush=True)
        del x, xb, cases
    title = f'TaLK per stage on {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}'
    print('\n'.join(markdown_report(rows, title, args.out, 'gpu_talk_ops', accounting())))
    return rows


if __name__ == '__main__':
    main()
