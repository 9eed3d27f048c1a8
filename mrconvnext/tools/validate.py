"""Top-1 / top-5 accuracy of a model on an ImageFolder or any timm data set.

    mrconvnext-validate --data-dir /data/imagenet --model mrconvnext_t --checkpoint run/model_best.pth.tar
    mrconvnext-validate --data-dir /data/imagenet --checkpoint run/model_best.pth.tar --reparam --use-ema
    mrconvnext-validate --data-dir /data/imagenet --model local-dir:exported/        # a hub directory

The model comes from ``--model`` (a timm name, ``local-dir:DIR`` or ``hf-hub:ORG/NAME``) and
``--checkpoint``: a ``mrconvnext-train`` checkpoint (its ``args.yaml`` supplies the model name,
classes, image size and kwargs when they are not given), a ``.safetensors`` / state-dict file, or a
``save_for_hf`` directory. Files are read with ``torch.load(weights_only=True)`` or safetensors.
``--reparam`` folds the branches with ``timm.utils.reparameterize_model`` before evaluating.
Results (top-1, top-5, loss, parameter count, timing) are printed and written to
``--results-file`` (``.json`` or ``.csv``).
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

import torch
from timm.data import create_dataset, create_loader, resolve_data_config
from timm.utils import reparameterize_model

from . import common

__all__ = ['main', 'run', 'build_parser']

_logger = logging.getLogger('mrconvnext.validate')


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, prog='mrconvnext-validate'
    )
    p.add_argument('data', nargs='?', metavar='DIR', help='data set root (same as --data-dir)')
    p.add_argument('--data-dir', metavar='DIR')
    p.add_argument('--dataset', default='', metavar='NAME', help='timm dataset "<type>/<name>" (default: folder)')
    p.add_argument('--split', default='validation', metavar='NAME')
    p.add_argument('--dataset-download', action='store_true')
    p.add_argument('--class-map', default='', metavar='FILENAME')
    common.add_model_source_args(p, pretrained=True)
    p.add_argument('--input-size', default=None, nargs=3, type=int, metavar='N')
    p.add_argument('--crop-pct', default=None, type=float)
    p.add_argument('--mean', type=float, nargs='+', default=None)
    p.add_argument('--std', type=float, nargs='+', default=None)
    p.add_argument('--interpolation', default='')
    p.add_argument('-b', '--batch-size', type=int, default=256)
    p.add_argument('-j', '--workers', type=int, default=4)
    p.add_argument('--device', default=common.default_device())
    p.add_argument('--amp', action='store_true', help='mixed precision (bfloat16 on CPU)')
    p.add_argument('--amp-dtype', default='float16')
    p.add_argument('--channels-last', action='store_true')
    p.add_argument('--reparam', action='store_true', help='reparameterize (fold branches) before evaluating')
    p.add_argument('--torchcompile', nargs='?', default=None, const='inductor', help='torch.compile backend')
    p.add_argument('--results-file', default='', metavar='FILE', help='write results here (.json or .csv)')
    p.add_argument('--no-progress', action='store_true')
    return p


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Evaluate; returns the results dict (``top1``, ``top5``, ``loss``, ...)."""
    common.setup_logging()
    args = build_parser().parse_args(argv)
    data_dir = args.data_dir or args.data
    if not data_dir and not args.dataset:
        raise SystemExit('mrconvnext-validate: give --data-dir (an ImageFolder root) or --dataset')
    device = torch.device(args.device)

    model, info = common.model_from_args(args)
    if args.reparam:
        model = reparameterize_model(model)
    model.to(device).eval()
    if args.channels_last:
        model.to(memory_format=torch.channels_last)

    # data config: explicit flags, then the training run's flags, then the model's pretrained_cfg
    run = info.get('run_args') or {}
    data_args = {
        k: getattr(args, k) if getattr(args, k) not in (None, '') else run.get(k)
        for k in ('img_size', 'input_size', 'crop_pct', 'mean', 'std', 'interpolation')
    }
    data_config = resolve_data_config(data_args, model=model)
    dataset = create_dataset(
        args.dataset, root=data_dir, split=args.split, class_map=args.class_map, download=args.dataset_download
    )
    loader = create_loader(
        dataset,
        input_size=data_config['input_size'],
        batch_size=args.batch_size,
        is_training=False,
        interpolation=data_config['interpolation'],
        mean=data_config['mean'],
        std=data_config['std'],
        num_workers=args.workers,
        crop_pct=data_config['crop_pct'],
        device=device,
        use_prefetcher=False,
    )
    amp_autocast, _ = common.amp_autocast(args.amp, args.amp_dtype, device)

    run_model = torch.compile(model, backend=args.torchcompile) if args.torchcompile else model
    t0 = time.perf_counter()
    metrics = common.evaluate(
        run_model,
        loader,
        device,
        amp_autocast,
        progress=not args.no_progress,
        desc='validate',
        channels_last=args.channels_last,
    )
    elapsed = time.perf_counter() - t0
    deployed = bool(getattr(model, 'is_deployed', lambda: False)())
    results = {
        'model': info['model'],
        'checkpoint': info['checkpoint'],
        'checkpoint_key': info['checkpoint_key'],
        'reparam': args.reparam,
        'deployed': deployed,
        'torchcompile': args.torchcompile or '',
        'top1': round(metrics['top1'], 4),
        'top5': round(metrics['top5'], 4),
        'loss': round(metrics['loss'], 6),
        'samples': metrics['samples'],
        'param_count': round(sum(p.numel() for p in model.parameters()) / 1e6, 4),
        'img_size': data_config['input_size'][-1],
        'crop_pct': data_config['crop_pct'],
        'interpolation': data_config['interpolation'],
        'eval_time_s': round(elapsed, 3),
        'img_s': round(metrics['samples'] / max(elapsed, 1e-9), 2),
    }
    _logger.info(
        f'{results["model"]}{" (reparameterized)" if args.reparam else ""}: top-1 {results["top1"]:.2f} '
        f'top-5 {results["top5"]:.2f} loss {results["loss"]:.4f} on {results["samples"]} images '
        f'({results["param_count"]:.2f}M params, {results["img_s"]:.1f} img/s)'
    )
    if args.results_file:
        common.write_results(args.results_file, results)
    return results


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``mrconvnext-validate``): :func:`run` without a return value."""
    run(argv)


if __name__ == '__main__':
    main()
