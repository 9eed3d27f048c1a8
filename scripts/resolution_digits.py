"""The digits resolution experiment of ``docs/resolution.md``: train at 32 px, evaluate at other sizes, fine-tune.

    python scripts/resolution_digits.py [--workdir resolution-digits] [--seeds 0 1 2] [--threads 2]

Per seed, through the workflow tools (``mrconvnext.tools.train`` / ``validate``) and the demo's digits recipe:

1. train ``convnext_atto`` and ``mrconvnext_atto`` at 32 px (8 epochs);
2. evaluate each 32-px checkpoint on the held-out split at 32, 40, 48 and 64 px, ``mrconvnext_atto`` under each
   size rule of ``MRConv2d(lag_remap=...)``: ``'none'`` (the nominal 1-D lags), ``'split'`` (the fractional remap)
   and ``'conv2d'`` (the exact 2-D convolution);
3. fine-tune each 32-px checkpoint for 2 epochs at 48 px (``--initial-checkpoint``; lr 5e-4, kernel lr 2.5e-4, no
   warm-up), under the same rule, and evaluate at 48 px.

Writes ``results.json`` (every run) and ``results.md`` (mean and sample standard deviation over the seeds) in the
work directory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

SIZES = (32, 40, 48, 64)
VARIANTS = (
    ('convnext_atto', 'convnext_atto', {}),
    ('mrconvnext_atto, none', 'mrconvnext_atto', {'lag_remap': 'none'}),
    ('mrconvnext_atto, split', 'mrconvnext_atto', {'lag_remap': 'split'}),
    ('mrconvnext_atto, conv2d', 'mrconvnext_atto', {'lag_remap': 'conv2d'}),
)


def _kwargs(kw: dict) -> list[str]:
    return ['--model-kwargs', *(f'{k}={v}' for k, v in kw.items())] if kw else []


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--workdir', default='resolution-digits')
    p.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    p.add_argument('--epochs', type=int, default=8)
    p.add_argument('--threads', type=int, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from mrconvnext.demo import digits_recipe
    from mrconvnext.tools import digits, train, validate

    work = Path(args.workdir)
    data = work / 'digits'
    digits.export_digits(data, size=32)
    quiet = ['--no-progress']
    rows: list[dict] = []
    out_json = work / 'results.json'

    def evaluate(ckpt: str, size: int, kw: dict) -> float:
        argv = ['--data-dir', str(data), '--checkpoint', ckpt, '--img-size', str(size), '-j', '0', *_kwargs(kw)]
        return validate.run(argv + quiet)['top1']

    t0 = time.perf_counter()
    for seed in args.seeds:
        ckpts = {}
        for model in ('convnext_atto', 'mrconvnext_atto'):
            argv = digits_recipe(data, work / 'train', f'{model}-s{seed}', model, 32, args.epochs)
            ckpts[model] = str(Path(train.run(argv + ['--seed', str(seed)] + quiet)['output_dir']) / 'last.pth.tar')
        for name, model, kw in VARIANTS:
            row = {'seed': seed, 'variant': name}
            for size in SIZES:
                row[f'eval@{size}'] = evaluate(ckpts[model], size, kw)
            ft = digits_recipe(data, work / 'finetune', f'{model}-{kw}-s{seed}'.replace(' ', ''), model, 48, 2)
            ft += ['--initial-checkpoint', ckpts[model], '--seed', str(seed), *_kwargs(kw), *quiet]
            ft += ['--lr', '5e-4', '--kernel-lr', '2.5e-4', '--warmup-epochs', '0']
            ft_ckpt = str(Path(train.run(ft)['output_dir']) / 'last.pth.tar')
            row['finetune@48'] = evaluate(ft_ckpt, 48, kw)
            rows.append(row)
            print(json.dumps(row), f'({time.perf_counter() - t0:.0f} s)', flush=True)
            out_json.write_text(json.dumps(rows, indent=1))

    cols = [f'eval@{s}' for s in SIZES] + ['finetune@48']
    lines = ['| model | ' + ' | '.join(cols) + ' |', '|---' * (len(cols) + 1) + '|']
    for name, _, _ in VARIANTS:
        cells = []
        for c in cols:
            v = [r[c] for r in rows if r['variant'] == name]
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            cells.append(f'{statistics.mean(v):.2f} ± {sd:.2f}')
        lines.append(f'| {name} | ' + ' | '.join(cells) + ' |')
    table = '\n'.join(lines)
    (work / 'results.md').write_text(
        f'held-out top-1 (%), mean ± sample std over seeds {args.seeds}, {len(rows) // len(VARIANTS)} runs each\n\n'
        + table
        + '\n'
    )
    print(table)
    print(f'{time.perf_counter() - t0:.0f} s in all')


if __name__ == '__main__':
    main()
