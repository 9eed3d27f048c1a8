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

import logging
import time
from typing import Any

import torch
from timm.data import create_dataset, create_loader, resolve_data_config
from timm.utils import reparameterize_model

from . import common
from .cli_args import validate_parser as build_parser

__all__ = ['main', 'run', 'build_parser']

_logger = logging.getLogger('mrconvnext.validate')


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
