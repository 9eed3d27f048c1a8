"""Train a model of the zoo (or any timm model) on ImageNet or any timm data set.

    mrconvnext-train --data-dir /data/imagenet --model mrconvnext_t            # the paper's recipe
    torchrun --nproc_per_node 8 -m mrconvnext.tools.train --data-dir ... --model mrconvnext_t --sync-bn

Built on timm's library: ``create_dataset`` / ``create_loader`` (RandAugment, random erasing),
``Mixup``, ``create_optimizer_v2``, ``create_scheduler_v2``, ``ModelEmaV3``, AMP and
``CheckpointSaver``. Flags are named as in timm's ``train.py``.

Defaults: the ConvNeXt ImageNet recipe the paper trained with (§5.4, App. D.5): AdamW, learning
rate 4e-3 at a global batch of 4096 scaled linearly to the actual global batch, weight decay 0.05,
300 epochs with 20 warm-up epochs and a per-update cosine schedule down to 1e-6, RandAugment
``rand-m9-mstd0.5-inc1``, Mixup 0.8 / CutMix 1.0, label smoothing 0.1, random erasing 0.25,
bicubic training interpolation, EMA of the weights (decay 0.9999) and stochastic depth per size
(ConvNeXt paper: T 0.1, S 0.4, B 0.5; our choice for the small sizes: atto/femto/pico 0.0, nano 0.1).

Kernel parameters (App. D.1.1): the long-kernel tensors (``model.mixer_kernel_parameter_names()``:
Fourier modes, sparse / dilated / dense taps, or the merged kernel of a deployed model) form their
own parameter group with no weight decay and their own learning rate ``--kernel-lr``; by default
``--kernel-lr-base 1e-3`` at the same base batch, scaled like ``--lr`` (the paper gives no ImageNet
value; 1e-3 is our choice, 4x below the global rate). The other names in ``model.no_weight_decay()``
(the branch weights alpha) and all 1-D tensors get the global rate without weight decay; everything
else gets both. Models without these methods (timm's own ConvNeXt) get timm's default groups.

Outputs in ``--output/--experiment``: ``args.yaml``, ``summary.csv`` and ``summary.jsonl`` (one row per
epoch), ``last.pth.tar``, ``model_best.pth.tar`` and the ``checkpoint-N.pth.tar`` history
(timm's CheckpointSaver). ``--resume`` reads a checkpoint with ``torch.load(weights_only=True)`` and
continues with the epoch after the saved one. Before the first epoch the run directory must take a checkpoint
(free space, ``ulimit -f``); a failed save names its cause; an epoch's summary rows follow its checkpoint, and
rows of epochs a run writes again are dropped first (:mod:`mrconvnext.tools.run_dir`).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import logging
import math
import time
from collections import OrderedDict
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import yaml
from timm.data import Mixup, create_dataset, create_loader, resolve_data_config
from timm.data.mixup import FastCollateMixup
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy
from timm.models import resume_checkpoint
from timm.optim import create_optimizer_v2, optimizer_kwargs
from timm.scheduler import create_scheduler_v2, scheduler_kwargs
from timm.utils import (
    ModelEmaV3,
    NativeScaler,
    dispatch_clip_grad,
    distribute_bn,
    get_outdir,
    init_distributed_device,
    random_seed,
    unwrap_model,
    update_summary,
)

from ..layers.sync_bn import convert_sync_batchnorm
from ..models.checkpoint import EMA_KEYS, read_checkpoint, read_state_dict
from . import common, run_dir
from .cli_args import train_parser as build_parser
from .common import evaluate
from .compat import patch_timm_posterize
from .run_dir import RunSaver

__all__ = ['main', 'run', 'build_parser', 'kernel_param_groups', 'default_drop_path', 'DROP_PATH']

_DDP_PARAMETERS = frozenset(inspect.signature(nn.parallel.DistributedDataParallel.__init__).parameters)

_logger = logging.getLogger('mrconvnext.train')

# stochastic depth by model size: ConvNeXt paper for T/S/B; our choice for the small sizes
DROP_PATH = {
    'atto': 0.0,
    'femto': 0.0,
    'pico': 0.0,
    'nano': 0.1,
    't': 0.1,
    'tiny': 0.1,
    's': 0.4,
    'small': 0.4,
    'b': 0.5,
    'base': 0.5,
}


def default_drop_path(model: str) -> float | None:
    """Stochastic depth rate of the recipe for a model name ending in a ConvNeXt size, else ``None``."""
    return DROP_PATH.get(model.rsplit('_', 1)[-1].split('.')[0])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    pre, _ = parser.parse_known_args(argv)
    if pre.config:
        with open(pre.config) as f:
            parser.set_defaults(**yaml.safe_load(f))
    args = parser.parse_args(argv)
    args.data_dir = args.data_dir or args.data
    if args.aa and args.aa.lower() == 'none':
        args.aa = None
    return args


def kernel_param_groups(
    model: nn.Module, weight_decay: float, kernel_lr: float, kernel_weight_decay: float = 0.0
) -> list[dict[str, Any]] | None:
    """timm's decay / no-decay split (``timm.optim.param_groups_weight_decay``: 1-D tensors, biases and the names in
    ``model.no_weight_decay()`` without decay) with the long kernels taken out into a third group (App. D.1.1), or
    ``None`` for timm's defaults.

    Groups, in this order (the order of the optimizer state in checkpoints): ``decay`` (weight decay, global lr),
    ``no_decay`` (global lr, no decay), ``kernel`` (the names in ``model.mixer_kernel_parameter_names()``:
    ``kernel_lr``, ``kernel_weight_decay``); empty groups are dropped. The kernel group is the one thing timm's
    helper cannot express (a group with its own learning rate). Returns ``None`` when the model has no
    ``mixer_kernel_parameter_names``.
    """
    from timm.optim import param_groups_weight_decay

    if not hasattr(model, 'mixer_kernel_parameter_names'):
        return None
    named = {id(p): n for n, p in model.named_parameters()}
    kernel_names = set(model.mixer_kernel_parameter_names())
    no_wd = set(model.no_weight_decay()) if hasattr(model, 'no_weight_decay') else set()
    # timm's helper classifies (decay 1.0 here: with 0 it would put everything in one group); the values are ours
    split: dict[bool, list[nn.Parameter]] = {True: [], False: []}
    for g in param_groups_weight_decay(model, 1.0, no_weight_decay_list=no_wd - kernel_names):
        split[g['weight_decay'] > 0] += [p for p in g['params'] if named[id(p)] not in kernel_names]
    kernel = [p for n, p in model.named_parameters() if p.requires_grad and n in kernel_names]
    groups = [
        {'name': 'decay', 'params': split[True], 'weight_decay': weight_decay},
        {'name': 'no_decay', 'params': split[False], 'weight_decay': 0.0},
        {'name': 'kernel', 'params': kernel, 'weight_decay': kernel_weight_decay, 'lr': kernel_lr},
    ]
    return [g for g in groups if g['params']]


def _scaled_lr(base: float, args: argparse.Namespace) -> float:
    ratio = args.batch_size * args.world_size / args.lr_base_size
    if args.lr_base_scale == 'sqrt':
        ratio = math.sqrt(ratio)
    elif args.lr_base_scale != 'linear':
        raise ValueError(f"--lr-base-scale must be 'linear' or 'sqrt', got {args.lr_base_scale!r}")
    return base * ratio


def _group_lr(optimizer: torch.optim.Optimizer, name: str) -> float | None:
    for g in optimizer.param_groups:
        if g.get('name') == name:
            return g['lr']
    return None


def _output_dir(args: argparse.Namespace, create: bool) -> Path:
    """The run directory: the resumed run's own, else ``--output/--experiment`` (default: time, model, size), made
    with timm's ``get_outdir`` when ``create``."""
    if args.resume and not args.output and not args.experiment:
        return Path(args.resume).resolve().parent  # continue in the run's own directory
    root = args.output or './output/train'
    name = args.experiment or '-'.join(
        [datetime.now().strftime('%Y%m%d-%H%M%S'), args.model.replace('/', '_'), str(args.input_size_resolved)]
    )
    return Path(get_outdir(root, name) if create else Path(root) / name)


def _amp(args: argparse.Namespace, device: torch.device):
    """The tools' AMP rule (:func:`~mrconvnext.tools.common.amp_autocast`) plus a loss scaler for float16 on CUDA."""
    autocast, dtype = common.amp_autocast(args.amp, args.amp_dtype, device)
    scaler = NativeScaler(device=device.type) if device.type == 'cuda' and dtype == torch.float16 else None
    return autocast, scaler


def train_one_epoch(
    epoch: int,
    model: nn.Module,
    loader,
    optimizer: torch.optim.Optimizer,
    loss_fn: nn.Module,
    args: argparse.Namespace,
    device: torch.device,
    lr_scheduler,
    amp_autocast,
    loss_scaler,
    model_ema,
    mixup_fn,
    num_updates: int,
    primary: bool,
) -> tuple[OrderedDict, int]:
    from tqdm import tqdm

    if args.mixup_off_epoch and epoch >= args.mixup_off_epoch:
        if args.prefetcher and getattr(loader, 'mixup_enabled', False):
            loader.mixup_enabled = False
        elif mixup_fn is not None:
            mixup_fn.mixup_enabled = False
    model.train()
    unwrapped = unwrap_model(model)
    loss_sum = torch.zeros((), device=device)
    n_seen = 0
    window_t0, window_n = time.perf_counter(), 0
    t0 = time.perf_counter()
    bar = tqdm(
        loader,
        desc=f'train {epoch}/{args.epochs - 1}',
        disable=not primary or args.no_progress,
        leave=False,
        dynamic_ncols=True,
        mininterval=1.0,
    )
    for step, (x, y) in enumerate(bar):
        if not args.prefetcher:
            x, y = x.to(device), y.to(device)
            if mixup_fn is not None:
                x, y = mixup_fn(x, y)
        if args.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with amp_autocast():
            loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        if loss_scaler is not None:
            loss_scaler(
                loss, optimizer, clip_grad=args.clip_grad, clip_mode=args.clip_mode, parameters=model.parameters()
            )
        else:
            loss.backward()
            if args.clip_grad is not None:
                dispatch_clip_grad(model.parameters(), value=args.clip_grad, mode=args.clip_mode)
            optimizer.step()
        num_updates += 1
        if model_ema is not None:
            model_ema.update(unwrapped, step=num_updates)
        loss_sum += loss.detach() * x.shape[0]
        n_seen += x.shape[0]
        window_n += x.shape[0]
        if lr_scheduler is not None:
            lr_scheduler.step_update(num_updates=num_updates)
        if (step + 1) % args.log_interval == 0 or step + 1 == len(loader):
            now = time.perf_counter()
            rate = window_n * args.world_size / max(now - window_t0, 1e-9)
            window_t0, window_n = now, 0
            bar.set_postfix(
                loss=f'{loss_sum.item() / n_seen:.4f}', lr=f'{optimizer.param_groups[0]["lr"]:.2e}', img_s=f'{rate:.1f}'
            )
    elapsed = time.perf_counter() - t0
    stats = torch.stack([loss_sum, torch.tensor(float(n_seen), device=device)])
    if args.distributed:
        torch.distributed.all_reduce(stats)
    metrics = OrderedDict(
        loss=(stats[0] / stats[1].clamp_min(1)).item(), img_s=stats[1].item() / max(elapsed, 1e-9), time_s=elapsed
    )
    return metrics, num_updates


def _datasets(args: argparse.Namespace):
    """Training and evaluation data sets (timm's ``create_dataset``); an ImageFolder also tells the class count."""
    ds_kwargs = dict(class_map=args.class_map, download=args.dataset_download, batch_size=args.batch_size)
    dataset_train = create_dataset(
        args.dataset, root=args.data_dir, split=args.train_split, is_training=True, seed=args.seed, **ds_kwargs
    )
    dataset_eval = None
    if args.val_split:
        dataset_eval = create_dataset(
            args.dataset, root=args.data_dir, split=args.val_split, is_training=False, **ds_kwargs
        )
    if args.num_classes is None:
        class_to_idx = getattr(getattr(dataset_train, 'reader', None), 'class_to_idx', None)
        if class_to_idx:
            args.num_classes = len(class_to_idx)
    return dataset_train, dataset_eval


def _build_model(args: argparse.Namespace, device: torch.device, primary: bool) -> tuple[nn.Module, dict]:
    """The model on its device (initial weights, channels-last, synchronized BatchNorm) and its data config."""
    # the same initial weights (and sparse tap positions) on every process; per-process seeds after
    random_seed(args.seed, 0)
    if args.drop_path is None:
        args.drop_path = default_drop_path(args.model)
    model = common.create_model(
        args.model,
        pretrained=args.pretrained,
        num_classes=args.num_classes,
        img_size=args.img_size,
        drop_rate=args.drop,
        drop_path_rate=args.drop_path,
        model_kwargs=args.model_kwargs,
    )
    if args.num_classes is None:
        args.num_classes = model.num_classes
    if args.initial_checkpoint:
        common.load_weights(model, args.initial_checkpoint)
    if args.grad_checkpointing:
        model.set_grad_checkpointing(enable=True)
    random_seed(args.seed, args.rank)

    data_config = resolve_data_config(vars(args), model=model, verbose=False)
    args.input_size_resolved = data_config['input_size'][-1]
    if primary:
        n_params = sum(p.numel() for p in model.parameters())
        _logger.info(
            f'{args.model}: {n_params / 1e6:.2f}M parameters, {args.num_classes} classes, input '
            f'{tuple(data_config["input_size"])}, drop_path {args.drop_path}, device {device}, '
            f'{args.world_size} process(es)'
        )

    model.to(device)
    if args.channels_last:
        model.to(memory_format=torch.channels_last)
    if args.distributed and args.sync_bn:
        args.dist_bn = ''  # statistics are synchronized at every step
        model = convert_sync_batchnorm(model, device)
        if primary:
            _logger.info('BatchNorms converted to synchronized BatchNorm')
    return model, data_config


def _build_optimizer(model: nn.Module, args: argparse.Namespace, primary: bool) -> torch.optim.Optimizer:
    """timm's optimizer with the learning rates scaled from the base batch and the kernel parameter group."""
    # learning rates (linear scaling from the base batch) and parameter groups
    if args.lr is None:
        args.lr = _scaled_lr(args.lr_base, args)
    if args.kernel_lr is None:
        args.kernel_lr = _scaled_lr(args.kernel_lr_base, args)
    groups = kernel_param_groups(model, args.weight_decay, args.kernel_lr, args.kernel_weight_decay)
    opt_kwargs = optimizer_kwargs(cfg=args)
    if groups is not None:
        optimizer = create_optimizer_v2(model, **opt_kwargs, param_group_fn=lambda m: groups)
    else:
        optimizer = create_optimizer_v2(model, **opt_kwargs)
    if primary:
        desc = ', '.join(
            f'{g.get("name", i)}: {len(g["params"])} tensors' for i, g in enumerate(optimizer.param_groups)
        )
        _logger.info(
            f'{type(optimizer).__name__}: lr {args.lr:.3g}, kernel lr {args.kernel_lr:.3g}, '
            f'weight decay {args.weight_decay} ({desc})'
        )
    return optimizer


def _resume(args: argparse.Namespace, model: nn.Module, optimizer, loss_scaler, primary: bool):
    """``(checkpoint contents or None, first epoch)`` of ``--resume`` / ``--start-epoch``."""
    # resume: timm's resume_checkpoint (weights only) restores the model, optimizer and loss scaler and gives the
    # epoch after the saved one; the package's reader gives the rest of the CheckpointSaver file (EMA, saver state)
    resume_state = None
    start_epoch = 0
    if args.resume:
        resume_state = read_checkpoint(args.resume)  # clear errors for a missing or unreadable file
        start_epoch = (
            resume_checkpoint(
                model,
                args.resume,
                optimizer=None if args.no_resume_opt else optimizer,
                loss_scaler=None if args.no_resume_opt else loss_scaler,
                log_info=primary,
            )
            or 0
        )
        if primary:
            _logger.info(f'resumed {args.resume} (saved after epoch {resume_state.get("epoch")})')
    if args.start_epoch is not None:
        start_epoch = args.start_epoch
    return resume_state, start_epoch


def _build_loaders(args: argparse.Namespace, data_config: dict, dataset_train, dataset_eval, device: torch.device):
    """``(train loader, eval loader or None, Mixup or None)``."""
    # loaders (timm transforms: RandomResizedCrop, flips, RandAugment, random erasing)
    if args.aa:
        patch_timm_posterize()  # recent Pillow rejects the 0-bit posterize of RandAugment's top magnitude
    mixup_active = args.mixup > 0 or args.cutmix > 0.0 or args.cutmix_minmax is not None
    mixup_fn = collate_fn = None
    if mixup_active:
        mixup_args = dict(
            mixup_alpha=args.mixup,
            cutmix_alpha=args.cutmix,
            cutmix_minmax=args.cutmix_minmax,
            prob=args.mixup_prob,
            switch_prob=args.mixup_switch_prob,
            mode=args.mixup_mode,
            label_smoothing=args.smoothing,
            num_classes=args.num_classes,
        )
        if args.prefetcher:
            collate_fn = FastCollateMixup(**mixup_args)
        else:
            mixup_fn = Mixup(**mixup_args)
    common_loader = dict(
        mean=data_config['mean'],
        std=data_config['std'],
        num_workers=args.workers,
        distributed=args.distributed,
        pin_memory=args.pin_mem,
        device=device,
        use_prefetcher=args.prefetcher,
    )
    loader_train = create_loader(
        dataset_train,
        input_size=data_config['input_size'],
        batch_size=args.batch_size,
        is_training=True,
        no_aug=args.no_aug,
        re_prob=args.reprob,
        re_mode=args.remode,
        re_count=args.recount,
        scale=args.scale,
        ratio=args.ratio,
        hflip=args.hflip,
        vflip=args.vflip,
        color_jitter=args.color_jitter,
        auto_augment=args.aa,
        interpolation=args.train_interpolation,
        collate_fn=collate_fn,
        **common_loader,
    )
    loader_eval = None
    if dataset_eval is not None:
        # each process evaluates its own share, every image once (timm's distributed eval sampler pads with repeats)
        sharded = args.distributed and not isinstance(dataset_eval, torch.utils.data.IterableDataset)
        if sharded:
            dataset_eval = common.EvalShard(dataset_eval, args.rank, args.world_size)
        loader_eval = create_loader(
            dataset_eval,
            input_size=data_config['input_size'],
            batch_size=args.validation_batch_size or args.batch_size,
            is_training=False,
            interpolation=data_config['interpolation'],
            crop_pct=data_config['crop_pct'],
            **{**common_loader, 'distributed': args.distributed and not sharded},
        )
    return loader_train, loader_eval, mixup_fn


def _train_loss(args: argparse.Namespace, device: torch.device) -> nn.Module:
    """Soft-target cross-entropy under Mixup / CutMix (they smooth the labels), else label smoothing or plain CE."""
    mixup_active = args.mixup > 0 or args.cutmix > 0.0 or args.cutmix_minmax is not None
    if mixup_active:
        train_loss_fn = SoftTargetCrossEntropy()  # Mixup applies the label smoothing
    elif args.smoothing:
        train_loss_fn = LabelSmoothingCrossEntropy(smoothing=args.smoothing)
    else:
        train_loss_fn = nn.CrossEntropyLoss()
    return train_loss_fn.to(device)


def _make_saver(
    args, model, optimizer, model_ema, loss_scaler, output_dir: Path, resume_state, start_epoch: int
) -> RunSaver:
    """Checks that the run directory takes a checkpoint (raises OSError naming why not), writes ``args.yaml``, drops
    summary rows of epochs this run writes again; timm's CheckpointSaver (as :class:`RunSaver`) for the directory,
    its history restored when the run resumes in its own directory."""
    needed = run_dir.checkpoint_bytes(model, with_ema=model_ema is not None)
    run_dir.check_writable(output_dir, needed)
    dropped = run_dir.trim_summaries(output_dir, start_epoch)
    if dropped:
        _logger.info(f'summary: dropped {dropped} row(s) of epoch {start_epoch} on, which this run writes again')
    decreasing = 'loss' in args.eval_metric
    saved_args = {k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, list, dict, type(None)))}
    (output_dir / 'args.yaml').write_text(yaml.safe_dump(saved_args, default_flow_style=False))
    saver = RunSaver(
        model=model,
        optimizer=optimizer,
        args=None,  # no argparse.Namespace in the file: plain torch.load(weights_only=True) reads it
        model_ema=model_ema,
        amp_scaler=loss_scaler,
        checkpoint_dir=str(output_dir),
        recovery_dir=str(output_dir),
        decreasing=decreasing,
        max_history=args.checkpoint_hist,
        checkpoint_size=needed,
    )
    if (
        resume_state is not None
        and 'saver' in resume_state
        and Path(args.resume).resolve().parent == output_dir.resolve()
    ):
        saver.load_state_dict(resume_state['saver'])
    return saver


def _record_epoch(epoch: int, train_metrics, eval_metrics, optimizer, args, output_dir: Path, saver):
    """The checkpoint, then (once it is in place) the summary rows (timm's ``update_summary`` CSV, our JSONL) and the
    log line; returns ``(best_metric, best_epoch)``. Rows after the checkpoint: a run killed while saving resumes
    from the previous epoch's checkpoint with no row of this epoch to repeat."""
    metric_key = f'ema_{args.eval_metric}' if f'ema_{args.eval_metric}' in eval_metrics else args.eval_metric
    metric = eval_metrics.get(metric_key)
    best_metric, best_epoch = saver.save_checkpoint(epoch, metric=metric)
    lrs = {'lr': optimizer.param_groups[0]['lr'], 'kernel_lr': _group_lr(optimizer, 'kernel')}
    update_summary(
        epoch,
        train_metrics,
        eval_metrics,
        filename=str(output_dir / 'summary.csv'),
        lr=lrs['lr'],
        write_header=None,
    )
    row = {'epoch': epoch, **{f'train_{k}': v for k, v in train_metrics.items()}}
    row.update({f'eval_{k}': v for k, v in eval_metrics.items()})
    row.update(lrs)
    with open(output_dir / 'summary.jsonl', 'a') as f:
        f.write(json.dumps(row) + '\n')
    shown = ', '.join(f'{k} {v:.4g}' for k, v in eval_metrics.items())
    _logger.info(
        f'epoch {epoch}: train loss {train_metrics["loss"]:.4f} ({train_metrics["img_s"]:.0f} img/s, '
        f'{train_metrics["time_s"]:.1f} s), lr {lrs["lr"]:.3g}' + (f' | eval {shown}' if shown else '')
    )
    return best_metric, best_epoch


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Run training; returns ``output_dir``, ``best_metric``, ``best_epoch``, ``last_epoch``, ``eval_metrics``
    (of the last epoch) and ``model`` (the trained, unwrapped model of this process)."""
    common.setup_logging()
    args = parse_args(argv)
    for module in args.device_modules or []:
        importlib.import_module(module)
    if not args.data_dir and not args.dataset:
        raise SystemExit('mrconvnext-train: give --data-dir (an ImageFolder root) or --dataset')

    device = init_distributed_device(args)
    primary = args.rank == 0
    args.prefetcher = device.type == 'cuda' and not args.no_prefetcher
    dataset_train, dataset_eval = _datasets(args)
    model, data_config = _build_model(args, device, primary)
    optimizer = _build_optimizer(model, args, primary)
    amp_autocast, loss_scaler = _amp(args, device)
    resume_state, start_epoch = _resume(args, model, optimizer, loss_scaler, primary)
    model_ema = None
    if args.model_ema:
        model_ema = ModelEmaV3(model, decay=args.model_ema_decay, use_warmup=args.model_ema_warmup)
        if resume_state is not None and any(k in resume_state for k in EMA_KEYS):
            model_ema.module.load_state_dict(read_state_dict(resume_state, use_ema=True)[0])

    if args.distributed:
        ddp_kwargs = {'device_ids': [device]} if device.type == 'cuda' else {}
        # torch >= 2.15 names the forward buffer sync `forward_sync_buffers` and warns on `broadcast_buffers`
        sync = 'forward_sync_buffers' if 'forward_sync_buffers' in _DDP_PARAMETERS else 'broadcast_buffers'
        ddp_kwargs[sync] = not args.no_ddp_bb
        model = nn.parallel.DistributedDataParallel(model, **ddp_kwargs)
    if args.torchcompile:
        model = torch.compile(model, backend=args.torchcompile)

    loader_train, loader_eval, mixup_fn = _build_loaders(args, data_config, dataset_train, dataset_eval, device)
    train_loss_fn = _train_loss(args, device)

    updates_per_epoch = len(loader_train)
    lr_scheduler, num_epochs = create_scheduler_v2(
        optimizer, **scheduler_kwargs(args), updates_per_epoch=updates_per_epoch
    )
    if start_epoch > 0:
        if args.sched_on_updates:
            lr_scheduler.step_update(start_epoch * updates_per_epoch)
        else:
            lr_scheduler.step(start_epoch)

    output_dir = _output_dir(args, create=primary)
    saver = None
    if primary:
        saver = _make_saver(args, model, optimizer, model_ema, loss_scaler, output_dir, resume_state, start_epoch)
        _logger.info(f'output: {output_dir}  ({num_epochs} epochs, {updates_per_epoch} updates per epoch)')

    best_metric = best_epoch = None
    eval_metrics: dict[str, float] = {}
    num_updates = start_epoch * updates_per_epoch
    epoch = start_epoch - 1
    for epoch in range(start_epoch, num_epochs):
        if args.distributed and hasattr(loader_train.sampler, 'set_epoch'):
            loader_train.sampler.set_epoch(epoch)
        train_metrics, num_updates = train_one_epoch(
            epoch,
            model,
            loader_train,
            optimizer,
            train_loss_fn,
            args,
            device,
            lr_scheduler,
            amp_autocast,
            loss_scaler,
            model_ema,
            mixup_fn,
            num_updates,
            primary,
        )
        if args.distributed and args.dist_bn in ('broadcast', 'reduce'):
            distribute_bn(model, args.world_size, args.dist_bn == 'reduce')
        eval_metrics = {}
        if loader_eval is not None:
            progress = primary and not args.no_progress
            eval_metrics = evaluate(
                model, loader_eval, device, amp_autocast, args.distributed, progress=progress, desc=f'eval {epoch}'
            )
            if model_ema is not None:
                ema = evaluate(model_ema.module, loader_eval, device, amp_autocast, args.distributed, progress=progress)
                eval_metrics.update({f'ema_{k}': v for k, v in ema.items()})
        if not args.sched_on_updates:
            lr_scheduler.step(epoch + 1, eval_metrics.get(args.eval_metric))

        if primary:
            best_metric, best_epoch = _record_epoch(
                epoch, train_metrics, eval_metrics, optimizer, args, output_dir, saver
            )

    if primary and best_metric is not None:
        _logger.info(f'best {args.eval_metric}: {best_metric:.4f} (epoch {best_epoch})')
    unwrapped = unwrap_model(model)
    return {
        'output_dir': str(output_dir),
        'best_metric': best_metric,
        'best_epoch': best_epoch,
        'last_epoch': epoch,
        'eval_metrics': eval_metrics,
        'model': unwrapped,
        'model_ema': model_ema.module if model_ema is not None else None,
        'args': args,
    }


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``mrconvnext-train``): :func:`run` without a return value."""
    run(argv)


if __name__ == '__main__':
    main()
