"""First run, no ImageNet needed: train, validate, reparameterize, export and benchmark an MRConvNeXt.

    python -m mrconvnext.demo [--workdir mrconvnext-demo] [--epochs 8] [--threads N]

Real data through the same code path as ImageNet: scikit-learn's bundled handwritten digits (1797
8x8 images, nothing is downloaded) are written once as an ImageFolder with a fixed 80/20 held-out
split (``mrconvnext.tools.digits``), then the workflow tools run in turn:

1. ``mrconvnext-train``: ``mrconvnext_atto`` at 32x32 for 8 epochs with the digits recipe (the
   ImageNet defaults switched off explicitly: no Mixup/CutMix/RandAugment/erasing/flips/EMA,
   lr 2e-3 at batch 32, kernel lr 1e-3);
2. ``mrconvnext-validate`` on the held-out split, branched and then with ``--reparam``;
3. ``mrconvnext-export``: reparameterized ``model.safetensors`` + ``config.json`` (and ONNX,
   checked with onnxruntime, when ``onnx`` and ``onnxruntime`` are installed);
4. ``mrconvnext-benchmark``: throughput of timm's ``convnext_atto`` vs the branched and the
   reparameterized model, side by side.

Each step prints the equivalent command line. About 2-3 minutes on 2 CPU cores. Needs
scikit-learn (``pip install '.[tools]'``). Exit status 1 if the held-out top-1 is below 90% or the
reparameterized model's top-1 differs from the branched one's by more than 0.2 points.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import torch

import mrconvnext  # noqa: F401  (registers the models with timm)

from .tools.cli_args import demo_parser

_BASELINES = {
    'mrconvnext_atto': 'convnext_atto',
    'mrconvnext_femto': 'convnext_femto',
    'mrconvnext_pico': 'convnext_pico',
    'mrconvnext_nano': 'convnext_nano',
    'mrconvnext_t': 'convnext_tiny',
    'mrconvnext_s': 'convnext_small',
    'mrconvnext_b': 'convnext_base',
}


def digits_recipe(data_dir: str | Path, output: str | Path, experiment: str, model: str, img_size: int, epochs: int):
    """``mrconvnext-train`` flags of the digits run: every ImageNet default it changes is explicit; one numbered
    checkpoint is kept besides ``last`` and ``model_best`` (not one per epoch)."""
    return [
        '--data-dir', str(data_dir), '--model', model, '--img-size', str(img_size), '--crop-pct', '1.0',
        '-b', '32', '--lr', '2e-3', '--kernel-lr', '1e-3', '--epochs', str(epochs), '--warmup-epochs', '1',
        '--mixup', '0', '--cutmix', '0', '--aa', 'none', '--reprob', '0', '--hflip', '0', '--color-jitter', '0',
        '--scale', '0.7', '1.0', '--no-model-ema', '-j', '0', '--checkpoint-hist', '1',
        '--output', str(output), '--experiment', experiment,
    ]  # fmt: skip


def _show(tool: str, argv: list[str]) -> None:
    print(f'\n$ mrconvnext-{tool} {shlex.join(argv)}', flush=True)


def main(argv: list[str] | None = None) -> None:
    args = demo_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from mrconvnext.tools import benchmark, digits, export, train, validate

    t_start = time.perf_counter()
    work = Path(args.workdir)
    data = work / 'digits'
    print(f'$ python -m mrconvnext.tools.digits {data} --size {args.img_size}')
    digits.export_digits(data, size=args.img_size)
    quiet = ['--no-progress'] if args.no_progress else []

    experiment = f'digits-{args.model}'
    train_argv = digits_recipe(data, work / 'train', experiment, args.model, args.img_size, args.epochs)
    train_argv += ['--seed', str(args.seed)] + quiet
    _show('train', train_argv)
    t0 = time.perf_counter()
    trained = train.run(train_argv)
    t_train = time.perf_counter() - t0
    ckpt = str(Path(trained['output_dir']) / 'last.pth.tar')

    results = {}
    for tag, extra in (('branched', []), ('reparam', ['--reparam'])):
        val_argv = ['--data-dir', str(data), '--checkpoint', ckpt, '-j', '0']
        val_argv += extra + ['--results-file', str(work / f'validate_{tag}.json')] + quiet
        _show('validate', val_argv)
        results[tag] = validate.run(val_argv)

    export_argv = ['--checkpoint', ckpt, '--output', str(work / 'export')]
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401

        export_argv += ['--onnx']
    except ImportError:
        print('(onnx / onnxruntime not installed: skipping the ONNX export)')
    _show('export', export_argv)
    exported = export.run(export_argv)

    baseline = _BASELINES.get(args.model)
    specs = ([baseline] if baseline else []) + [args.model, f'{args.model}:reparam']
    bench_argv = ['--models', *specs, '--img-size', str(args.img_size), '-b', '32', '--num-bench-iter', '7']
    bench_argv += ['--results-file', str(work / 'benchmark.csv')]
    _show('benchmark', bench_argv)
    benchmark.run(bench_argv)

    top1, top1_rep = results['branched']['top1'], results['reparam']['top1']
    print(f'\nsummary ({time.perf_counter() - t_start:.0f} s in all, training {t_train:.0f} s):')
    print(
        f'  held-out top-1 {top1:.2f}% branched, {top1_rep:.2f}% reparameterized ({results["branched"]["samples"]} images)'
    )
    print(
        f'  export {exported["hub_dir"]}: local-dir reload max |diff| {exported["hub_max_abs_diff"]:.2e}'
        + (f', ONNX max |diff| {exported["onnx_max_abs_diff"]:.2e}' if 'onnx_max_abs_diff' in exported else '')
    )
    print(f'  load it: timm.create_model("local-dir:{exported["hub_dir"]}", pretrained=True) after import mrconvnext')
    ok = top1 >= 90.0 and abs(top1 - top1_rep) <= 0.2
    if not ok:
        print('  FAILED: expected top-1 >= 90% and reparameterized within 0.2 points')
        raise SystemExit(1)


if __name__ == '__main__':
    main()
