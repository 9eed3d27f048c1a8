"""The run directory of ``mrconvnext-train``: checkpoints that fail early and clearly, and summaries that hold each
epoch once.

* :func:`check_writable` runs before the first epoch: the directory takes a file, and one checkpoint fits in its
  free space and under the process's file-size limit (``ulimit -f``). A full disk otherwise surfaced after a whole
  epoch as torch's "enforce fail at inline_container.cc: unexpected pos ...".
* :class:`RunSaver` is timm's ``CheckpointSaver`` whose write names the cause of a failure (disk full, file-size
  limit, or the OS error) and removes its partial file; ``last.pth.tar`` keeps the previous epoch.
* The caller writes an epoch's summary rows only after its checkpoint is renamed into place, and
  :func:`trim_summaries` drops rows from the resumed epoch on, so a resumed run never logs an epoch twice.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import os
import shutil
from pathlib import Path

import torch.nn as nn
from timm.utils import CheckpointSaver, unwrap_model

__all__ = ['checkpoint_bytes', 'check_writable', 'save_failure_cause', 'RunSaver', 'trim_summaries']

_MB = 1 << 20
# optimizer state tensors per parameter: Adam-family moments (SGD with momentum has one; this errs on the large side)
_OPTIMIZER_STATES = 2


def checkpoint_bytes(model: nn.Module, with_ema: bool) -> int:
    """About the size of one training checkpoint: the weights and buffers, the optimizer's two state tensors per
    parameter and the EMA copy when kept."""
    model = unwrap_model(model)
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    params = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return weights * (2 if with_ema else 1) + _OPTIMIZER_STATES * params


def _file_size_limit() -> int | None:
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def check_writable(directory: Path, needed: int) -> None:
    """Raise ``OSError`` naming the problem unless ``directory`` takes a file and a ``needed``-byte checkpoint fits
    (free space and file-size limit)."""
    probe = directory / '.write-probe'
    try:
        with open(probe, 'wb') as f:
            f.write(b'\0' * 4096)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        with contextlib.suppress(OSError):
            probe.unlink(missing_ok=True)
        raise OSError(e.errno, f'the run directory {directory} is not writable: {e.strerror or e}') from e
    probe.unlink()
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise OSError(
            errno.ENOSPC,
            f'disk full: {free / _MB:.0f} MB free in {directory}, one checkpoint needs about {needed / _MB:.0f} MB '
            f'(weights, optimizer state, EMA; the history keeps up to --checkpoint-hist of them)',
        )
    limit = _file_size_limit()
    if limit is not None and limit < needed:
        raise OSError(
            errno.EFBIG,
            f'file-size limit (ulimit -f) of {limit / _MB:.1f} MB is below one checkpoint, about {needed / _MB:.0f} MB',
        )


def save_failure_cause(path: Path, needed: int, error: BaseException) -> tuple[int, str]:
    """``(errno, why)`` writing a ``needed``-byte checkpoint to ``path`` failed with ``error``. torch's zip writer reports a full
    disk or an exceeded file-size limit as "unexpected pos" without the OS error, so the cause is asked of the OS
    again: appending a little to the partial file fails the same way. Call it before removing that file."""
    for e in (error, error.__cause__, error.__context__):
        if isinstance(e, OSError) and e.errno is not None:
            return e.errno, _describe(e.errno, needed, e.strerror)
    try:
        with open(path, 'ab') as f:
            f.write(b'\0' * _MB)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        return e.errno or errno.EIO, _describe(e.errno, needed, e.strerror)
    return errno.EIO, f'{type(error).__name__}: {error}'


def _describe(code: int | None, needed: int, strerror: str | None) -> str:
    if code in (errno.ENOSPC, errno.EDQUOT):
        return f'disk full ({strerror}); one checkpoint needs about {needed / _MB:.0f} MB'
    if code == errno.EFBIG:
        limit = _file_size_limit()
        shown = f' of {limit / _MB:.1f} MB' if limit is not None else ''
        return f'file-size limit (ulimit -f){shown} exceeded; one checkpoint needs about {needed / _MB:.0f} MB'
    return f'{strerror or "OS error"} (errno {code})'


class RunSaver(CheckpointSaver):
    """timm's ``CheckpointSaver`` (same files, history and resume bookkeeping) whose write fails with an ``OSError``
    that names its cause (:func:`save_failure_cause`) and leaves no partial file."""

    def __init__(self, *args, checkpoint_size: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.checkpoint_size = checkpoint_size

    def _save(self, save_path, epoch, metric=None):
        try:
            super()._save(save_path, epoch, metric)
        except (OSError, RuntimeError) as e:
            path = Path(save_path)
            code, cause = save_failure_cause(path, self.checkpoint_size, e)
            path.unlink(missing_ok=True)
            last = Path(self.checkpoint_dir) / f'last{self.extension}'
            kept = f'; {last} keeps the previous epoch' if last.exists() else ''
            raise OSError(
                code,
                f'saving the checkpoint of epoch {epoch} to {path} failed: {cause}{kept}',
            ) from e


def trim_summaries(directory: Path, start_epoch: int) -> int:
    """Drop the rows of epochs ``>= start_epoch`` from ``summary.jsonl`` and ``summary.csv`` (a run resumed from an
    earlier checkpoint writes them again); returns how many rows were dropped. Each file is rewritten through a
    temporary file and renamed into place."""
    dropped = 0
    jsonl = directory / 'summary.jsonl'
    if jsonl.exists():
        lines = [line for line in jsonl.read_text().splitlines() if line.strip()]
        keep = [line for line in lines if json.loads(line).get('epoch', -1) < start_epoch]
        dropped = len(lines) - len(keep)
        if dropped:
            _rewrite(jsonl, ''.join(line + '\n' for line in keep))
    table = directory / 'summary.csv'
    if table.exists():
        with open(table, newline='') as f:
            reader = csv.DictReader(f)
            fields, rows = reader.fieldnames, list(reader)
        keep_rows = [r for r in rows if int(float(r.get('epoch', -1))) < start_epoch]
        if fields and len(keep_rows) < len(rows):
            tmp = table.with_suffix('.csv.tmp')
            with open(tmp, 'w', newline='') as f:
                writer = csv.DictWriter(f, fieldnames=fields)
                writer.writeheader()
                writer.writerows(keep_rows)
            os.replace(tmp, table)
            dropped = max(dropped, len(rows) - len(keep_rows))
    return dropped


def _rewrite(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + '.tmp')
    tmp.write_text(text)
    os.replace(tmp, path)
