"""GPU benchmark of the TaLK operators by implementation: the Triton kernels and the fused PyTorch ops.

Shapes of TaLK-ConvNeXt-T's first and third stages (``--batch`` x 96 x 56², x 384 x 14²; 16 channels per head;
maximum offsets as the models set them: half the flattened map for 1-D, half the width / height for 2-D), offsets
uniform in [0, 1). Modes: ``fwd`` (forward under ``no_grad``) and ``fwd+bwd`` (forward, then the gradients of x
and the offsets for a random cotangent). Each case is timed with ``triton.testing.do_bench`` (CUDA events,
median of its repeats after warm-up); peak memory is ``torch.cuda.max_memory_allocated`` over one call, minus the
inputs. Ratios are time over the Triton kernels' time of the same case.

    python scripts/bench_talk_gpu.py [--batch 64] [--out results]

The CUDA C++ kernel this compared against was removed after its H100 run (docs/gpu/README.md).
"""

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package

import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from mrconvnext.ops.talk import talk1d, talk2d  # noqa: E402

STAGES = {'stage1': (96, 56), 'stage3': (384, 14)}


def _case(op: str, stage: str, batch: int, dtype: torch.dtype):
    C, S = STAGES[stage]
    heads = C // 16
    x = torch.randn(batch, C, S, S, device='cuda', dtype=dtype)
    if op == 'talk1d':
        L = S * S
        x = x.flatten(2)
        off = torch.rand(batch, heads, L, 2, device='cuda')
        return x, off, lambda a, o, b: talk1d(a, o, L // 2, L // 2, engine=b)
    off = torch.rand(batch, heads, S, S, 4, device='cuda')
    return x, off, lambda a, o, b: talk2d(a, o, S // 2, S // 2, S // 2, S // 2, engine=b)


def _call(fn, x, off, engine: str, mode: str):
    if mode == 'fwd':

        def run():
            with torch.no_grad():
                fn(x, off, engine)

        return run
    xg, og = x.detach().requires_grad_(), off.detach().requires_grad_()
    g = torch.randn_like(x)

    def run():
        torch.autograd.grad(fn(xg, og, engine), (xg, og), g)

    return run


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--batch', type=int, default=64)
    p.add_argument('--out', default='results', help="directory of gpu_talk_ops.{md,csv} ('' to skip)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit('bench_talk_gpu: no CUDA device visible')
    impls = ['triton', 'torch']
    rows = []
    for op in ('talk1d', 'talk2d'):
        for stage in STAGES:
            for dtype in (torch.float32, torch.bfloat16):
                x, off, fn = _case(op, stage, args.batch, dtype)
                for mode in ('fwd', 'fwd+bwd'):
                    base = None
                    for impl in impls:
                        run = _call(fn, x, off, impl, mode)
                        ms = do_bench(run, warmup=25, rep=200, return_mode='median')
                        torch.cuda.synchronize()
                        torch.cuda.reset_peak_memory_stats()
                        before = torch.cuda.memory_allocated()
                        run()
                        torch.cuda.synchronize()
                        peak = (torch.cuda.max_memory_allocated() - before) / 2**20
                        base = ms if impl == 'triton' else base
                        row = dict(op=op, stage=stage, B=args.batch, C=x.shape[1], dtype=str(dtype).split('.')[1])
                        row.update(mode=mode, impl=impl, median_ms=round(ms, 4), ratio_vs_triton=round(ms / base, 3))
                        row['peak_extra_mb'] = round(peak, 1)
                        rows.append(row)
                        print(' '.join(f'{k}={v}' for k, v in row.items()), flush=True)
                del x, off
    header = list(rows[0])
    lines = [
        f'TaLK operators on {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}',
        '',
        '| ' + ' | '.join(header) + ' |',
        '|' + ' --- |' * len(header),
    ]
    lines += ['| ' + ' | '.join(str(r[k]) for k in header) + ' |' for r in rows]
    print('\n'.join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / 'gpu_talk_ops.md').write_text('\n'.join(lines) + '\n')
        with open(out / 'gpu_talk_ops.csv', 'w', newline='') as f:
            w = csv.DictWriter(f, fieldnames=header)
            w.writeheader()
            w.writerows(rows)
    return rows


if __name__ == '__main__':
    main()
