"""Helpers shared by the workflow tools: devices, model creation, weights-only loading, result files."""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, suppress
from functools import partial
from pathlib import Path
from typing import Any

import timm
import torch
import torch.nn as nn

import mrconvnext
from mrconvnext.models.checkpoint import MODEL_KEYS, read_state_dict

__all__ = [
    'setup_logging',
    'is_zoo_model',
    'zoo_kwargs',
    'create_model',
    'parse_model_spec',
    'is_hub_dir',
    'read_run_args',
    'read_state_dict',
    'load_weights',
    'model_from_source',
    'write_results',
    'read_results',
    'CHECKPOINT_KEYS',
    'EvalShard',
    'evaluate',
    'amp_autocast',
    'model_from_args',
]

_logger = logging.getLogger('mrconvnext.tools')

# keys of a timm training checkpoint that hold a model state dict, in the order they are tried
CHECKPOINT_KEYS = MODEL_KEYS


def setup_logging(level: int = logging.INFO) -> None:
    """Plain ``message`` logging of the tools' own loggers (``mrconvnext.*``) to stderr.

    The root logger is left alone, so third-party INFO chatter (exporters, hub loading) stays quiet
    unless the application configures it.
    """
    logger = logging.getLogger('mrconvnext')
    logger.setLevel(level)
    if not any(getattr(h, '_mrconvnext_tools', False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter('%(message)s'))
        handler._mrconvnext_tools = True
        logger.addHandler(handler)
        logger.propagate = False


AMP_DTYPES = {'float16': torch.float16, 'bfloat16': torch.bfloat16}


def amp_autocast(
    amp: bool, amp_dtype: str, device: torch.device | str
) -> tuple[Callable[[], AbstractContextManager], torch.dtype | None]:
    """The tools' one AMP rule: ``(autocast context factory, dtype)``, ``(suppress, None)`` without ``--amp``.

    ``--amp-dtype`` (``float16`` / ``bfloat16``) on accelerators; on the CPU always bfloat16, the dtype its autocast
    runs fast. A ``float16`` run on CUDA also needs a loss scaler (train decides that from the dtype)."""
    if amp_dtype not in AMP_DTYPES:
        raise ValueError(f'--amp-dtype must be one of {tuple(AMP_DTYPES)}, got {amp_dtype!r}')
    if not amp:
        return suppress, None
    device_type = torch.device(device).type
    dtype = torch.bfloat16 if device_type == 'cpu' else AMP_DTYPES[amp_dtype]
    return partial(torch.autocast, device_type=device_type, dtype=dtype), dtype


def is_zoo_model(name: str) -> bool:
    """True for models registered by this package (they accept ``img_size``, ``deploy``, ...)."""
    return name in set(mrconvnext.models.list_models())


def zoo_kwargs(name: str, img_size: int | None) -> dict[str, Any]:
    """Extra ``create_model`` kwargs for zoo models: the nominal ``img_size`` that sizes the mixers."""
    if img_size is not None and is_zoo_model(name):
        return {'img_size': img_size}
    return {}


def create_model(
    name: str,
    *,
    pretrained: bool = False,
    num_classes: int | None = None,
    img_size: int | None = None,
    drop_rate: float | None = None,
    drop_path_rate: float | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
    **extra: Any,
) -> nn.Module:
    """``timm.create_model`` with the zoo's ``img_size`` passed where the model takes it."""
    kwargs: dict[str, Any] = dict(model_kwargs or {})
    kwargs.update(zoo_kwargs(name, img_size))
    if num_classes is not None:
        kwargs['num_classes'] = num_classes
    if drop_rate is not None:
        kwargs['drop_rate'] = drop_rate
    if drop_path_rate is not None:
        kwargs['drop_path_rate'] = drop_path_rate
    kwargs.update(extra)
    return timm.create_model(name, pretrained=pretrained, **kwargs)


def parse_model_spec(spec: str) -> tuple[str, str]:
    """``'NAME[:reparam]'`` -> ``(NAME, 'reparam' or 'as-built')``: the model as built, or after
    ``timm.utils.reparameterize_model``."""
    name, _, variant = spec.partition(':')
    if variant not in ('', 'reparam'):
        raise ValueError(f'model spec {spec!r}: the only suffix is :reparam')
    return name, variant or 'as-built'


def is_hub_dir(path: str | os.PathLike) -> bool:
    """A ``save_for_hf`` directory: ``config.json`` next to the weights."""
    p = Path(path)
    return p.is_dir() and (p / 'config.json').is_file()


def read_run_args(checkpoint: str | os.PathLike | None) -> dict[str, Any]:
    """The training arguments (``args.yaml``) written by ``mrconvnext-train`` next to a checkpoint, or ``{}``."""
    if not checkpoint:
        return {}
    p = Path(checkpoint)
    f = (p if p.is_dir() else p.parent) / 'args.yaml'
    if not f.is_file():
        return {}
    import yaml

    with open(f) as fh:
        data = yaml.safe_load(fh)
    return data if isinstance(data, dict) else {}


def load_weights(model: nn.Module, path: str | os.PathLike, use_ema: bool = False) -> str:
    """Load a checkpoint (strictly) into ``model`` with the package's one reader (see
    :func:`~mrconvnext.models.read_state_dict` for the formats and the EMA rule); returns the checkpoint key used.

    A checkpoint of another model or size raises ValueError naming the file."""
    sd, key = read_state_dict(path, use_ema=use_ema)
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        raise ValueError(f'{os.fspath(path)} does not fit this {type(model).__name__}: {e}') from e
    return key


def model_from_source(
    model: str | None,
    checkpoint: str | None = None,
    *,
    use_ema: bool = False,
    pretrained: bool = False,
    num_classes: int | None = None,
    img_size: int | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
) -> tuple[nn.Module, dict[str, Any]]:
    """Build the model a tool works on and load its weights.

    ``model`` is a timm name (``mrconvnext_t``), a ``local-dir:`` / ``hf-hub:`` source, or empty when
    ``checkpoint`` says what to build: a ``save_for_hf`` directory (loaded as ``local-dir:``), or a
    training checkpoint / ``.safetensors`` file next to the ``args.yaml`` of its run, which supplies
    the model name, class count, image size and model kwargs unless given here.

    Returns the model (eval mode) and a dict describing where it came from (``model``, ``checkpoint``,
    ``checkpoint_key``, ``run_args``).
    """
    info: dict[str, Any] = {'checkpoint': checkpoint or '', 'checkpoint_key': ''}
    if checkpoint and is_hub_dir(checkpoint):
        if model and not model.startswith('local-dir:'):
            _logger.info(f'{checkpoint} is a hub directory: building the model it describes, not {model}')
        model, checkpoint = 'local-dir:' + os.fspath(checkpoint), None
        info['checkpoint'] = ''
    run_args = read_run_args(checkpoint)
    info['run_args'] = run_args
    if not model:
        model = run_args.get('model')
        if not model:
            raise ValueError('give --model, or a checkpoint written by mrconvnext-train (with args.yaml beside it)')
    if num_classes is None:
        num_classes = run_args.get('num_classes')
    if img_size is None:
        img_size = run_args.get('img_size')
    kwargs = dict(run_args.get('model_kwargs') or {})
    kwargs.update(model_kwargs or {})
    hub = model.startswith(('local-dir:', 'hf-hub:'))
    if hub:
        # the directory's config.json rebuilds the model (its deploy flag and img_size included)
        net = timm.create_model(model, pretrained=True, **kwargs)
    else:
        net = create_model(
            model, pretrained=pretrained, num_classes=num_classes, img_size=img_size, model_kwargs=kwargs
        )
    if checkpoint:
        info['checkpoint_key'] = load_weights(net, checkpoint, use_ema=use_ema)
    info['model'] = model
    info['img_size'] = img_size
    return net.eval(), info


def model_from_args(args: argparse.Namespace) -> tuple[nn.Module, dict[str, Any]]:
    """:func:`model_from_source` with the flags of :func:`mrconvnext.tools.cli_args.add_model_source_args`."""
    return model_from_source(
        args.model,
        args.checkpoint or None,
        use_ema=args.use_ema,
        pretrained=getattr(args, 'pretrained', False),
        num_classes=args.num_classes,
        img_size=args.img_size,
        model_kwargs=args.model_kwargs,
    )


def write_results(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]] | Mapping[str, Any]) -> Path:
    """Write one result (a dict) or a list of them as JSON (``.json``) or CSV (any other suffix)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(rows, Mapping):
        rows = [rows]
    rows = [dict(r) for r in rows]
    if path.suffix == '.json':
        path.write_text(json.dumps(rows if len(rows) != 1 else rows[0], indent=2, default=str) + '\n')
        return path
    fields: list[str] = []
    for r in rows:
        fields.extend(k for k in r if k not in fields)
    with open(path, 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return path


def read_results(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of a JSON (one dict or a list) or CSV results file written by :func:`write_results`."""
    path = Path(path)
    if path.suffix == '.json':
        data = json.loads(path.read_text())
        return data if isinstance(data, list) else [data]
    with open(path, newline='') as f:
        return list(csv.DictReader(f))


class EvalShard(torch.utils.data.Dataset):
    """Samples ``rank, rank + world_size, ...`` of a map-style dataset: one process's share of a distributed
    evaluation, with every sample in exactly one share. timm's ``OrderedDistributedSampler`` pads the shares to one
    length by repeating samples, so that the summed counts exceed the dataset (360 for 359 images on 2 processes);
    here the shares differ in length by at most one and :func:`evaluate` adds up exactly the dataset. The wrapped
    dataset's ``transform`` is read and set through the shard (``timm.data.create_loader`` sets it)."""

    def __init__(self, dataset: torch.utils.data.Dataset, rank: int, world_size: int) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f'EvalShard: expected 0 <= rank < world_size, got rank {rank}, world_size {world_size}')
        if len(dataset) < world_size:
            raise ValueError(
                f'EvalShard: {len(dataset)} evaluation samples cannot give each of {world_size} processes one'
            )
        self.dataset, self.rank, self.world_size = dataset, rank, world_size
        self.indices = range(rank, len(dataset), world_size)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int):
        return self.dataset[self.indices[i]]

    @property
    def transform(self):
        return self.dataset.transform

    @transform.setter
    def transform(self, value) -> None:
        self.dataset.transform = value


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: Iterable,
    device: torch.device | str,
    amp_autocast=None,
    distributed: bool = False,
    *,
    progress: bool = False,
    desc: str = 'eval',
    channels_last: bool = False,
) -> dict[str, float]:
    """Top-1 / top-5 accuracy (percent) and mean cross-entropy over a loader, with timm's ``accuracy`` and
    ``AverageMeter``.

    The meters weight each batch by its size, and across processes their sums are added (``reduce_tensor`` with
    ``n=1``) before dividing by the total count, so the result is the accuracy over all samples seen, not an
    average of per-batch or per-process averages. Returns ``loss``, ``top1``, ``top5`` and ``samples``.
    """
    from timm.utils import AverageMeter, accuracy, reduce_tensor
    from tqdm import tqdm

    amp_autocast = amp_autocast or suppress
    was_training = model.training
    model.eval()
    meters = {k: AverageMeter() for k in ('loss', 'top1', 'top5')}
    for x, y in tqdm(loader, desc=desc, disable=not progress, leave=False, dynamic_ncols=True, mininterval=1.0):
        x, y = x.to(device), y.to(device)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with amp_autocast():
            out = model(x)
        out = out.float()
        top1, top5 = accuracy(out, y, topk=(1, 5))
        n = y.numel()
        # 0-d tensors on the device: the meters' sums stay there, no host sync per batch
        meters['loss'].update(torch.nn.functional.cross_entropy(out, y).double(), n)
        meters['top1'].update(top1.double(), n)
        meters['top5'].update(top5.double(), n)
    count = float(meters['loss'].count)
    sums = torch.stack([torch.as_tensor(m.sum, dtype=torch.float64, device=device) for m in meters.values()])
    sums = torch.cat([sums, torch.tensor([count], dtype=torch.float64, device=device)])
    if distributed:
        sums = reduce_tensor(sums, 1)
    sums = sums.cpu()
    model.train(was_training)
    count = max(sums[3].item(), 1.0)
    return {
        'loss': sums[0].item() / count,
        'top1': sums[1].item() / count,
        'top5': sums[2].item() / count,
        'samples': int(sums[3].item()),
    }
