"""GPU model benchmark: every family's ConvNeXt-T model next to timm's ``convnext_tiny``, eager and compiled.

Runs ``mrconvnext.tools.benchmark`` (interleaved rounds, CUDA events, medians; peak memory in a fresh process per
model) with bf16 autocast and channels-last at 224², once eager and once with ``--torchcompile``, and writes one
table, ratios to ``convnext_tiny`` within each run, to ``results/gpu_<gpu>.{md,csv}`` with the GPU name, driver,
torch, CUDA and Triton versions.

    python scripts/bench_gpu.py [--batch-size 128] [--modes eager compiled] [--out results]

``--device cpu`` (with ``--img-size`` and ``--compile-backend``) runs the same plumbing on the CPU: the GPU check's
dry run (``scripts/gpu_check.sh --dry-run``).
"""

import argparse
import csv
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package

import torch  # noqa: E402

from mrconvnext.tools import benchmark  # noqa: E402

MODELS = [
    'convnext_tiny',
    'mrconvnext_t',
    'mrconvnext_t:reparam',
    'talkconvnext_t',
    'talkconvnext2d_t',
    'lightconvnext_t',
    'dynconvnext_t',
]
COLUMNS = [
    'mode',
    'model',
    'infer_img_s',
    'infer_ratio',
    'infer_spread_pct',
    'train_img_s',
    'train_ratio',
    'train_spread_pct',
    'train_step_ms',
    'infer_peak_mb',
    'train_peak_mb',
    'train_mem_ratio',
]


def environment() -> dict[str, str]:
    """GPU name, driver, torch, CUDA and Triton versions."""
    try:
        driver = subprocess.run(
            ['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        driver = 'unknown (no nvidia-smi)'
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = 'not installed'
    return {
        'gpu': torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu',
        'driver': driver or 'unknown',
        'torch': torch.__version__,
        'cuda': str(torch.version.cuda),
        'triton': triton_version,
    }


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('-b', '--batch-size', type=int, default=128)
    p.add_argument('--modes', nargs='+', choices=('eager', 'compiled'), default=['eager', 'compiled'])
    p.add_argument('--models', nargs='+', default=MODELS, help='first = baseline')
    p.add_argument('--num-bench-iter', type=int, default=20)
    p.add_argument('--img-size', type=int, default=224)
    p.add_argument('--device', default='cuda')
    p.add_argument('--compile-backend', default='inductor', help='torch.compile backend of the compiled mode')
    p.add_argument('--out', default='results')
    args = p.parse_args(argv)
    if args.device == 'cuda' and not torch.cuda.is_available():
        sys.exit('bench_gpu: no CUDA device visible (--device cpu runs the same plumbing on the CPU)')
    env = environment()
    common = ['--models', *args.models, '-b', str(args.batch_size), '--img-size', str(args.img_size), '--amp']
    common += ['--amp-dtype', 'bfloat16', '--channels-last', '--device', args.device]
    common += ['--num-bench-iter', str(args.num_bench_iter)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = re.sub(r'[^A-Za-z0-9]+', '_', env['gpu']).strip('_').lower()
    rows: list[dict] = []
    for mode in args.modes:
        extra = ['--torchcompile', args.compile_backend, '--no-memory'] if mode == 'compiled' else []
        results = out / f'gpu_{tag}_{mode}_raw.csv'
        for row in benchmark.run([*common, *extra, '--results-file', str(results)]):
            row['mode'] = mode
            if row.get('train_img_s'):
                row['train_step_ms'] = round(1000 * args.batch_size / row['train_img_s'], 2)
            rows.append(row)
        torch._dynamo.reset()
    head = ', '.join(f'{k} {v}' for k, v in env.items())
    lines = [
        f'# GPU benchmark: {head}',
        '',
        f'batch {args.batch_size}, {args.img_size}², bf16 autocast, channels-last; median of {args.num_bench_iter} interleaved '
        f'rounds ({"CUDA events" if args.device == "cuda" else "wall clock"}); ratios to {args.models[0]} of the same '
        'mode; peak memory measured eager (max allocated on CUDA).',
        '',
        '| ' + ' | '.join(COLUMNS) + ' |',
        '|' + ' --- |' * len(COLUMNS),
    ]
    lines += ['| ' + ' | '.join('-' if r.get(k) is None else str(r.get(k)) for k in COLUMNS) + ' |' for r in rows]
    (out / f'gpu_{tag}.md').write_text('\n'.join(lines) + '\n')
    with open(out / f'gpu_{tag}.csv', 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=[*COLUMNS, *env], extrasaction='ignore')
        w.writeheader()
        w.writerows({**r, **env} for r in rows)
    print('\n'.join(lines))
    return rows


if __name__ == '__main__':
    main()
