"""The one checkpoint reader of the package: weights only, clear errors, one EMA rule.

Files: ``.safetensors`` (read with safetensors), anything else with ``torch.load(weights_only=True)``: nothing is
ever unpickled. A timm training checkpoint (a dict holding the state dict under a key) gives, in this order:

- ``use_ema=False`` (the default): ``state_dict``, ``model``, ``module``: the trained weights;
- ``use_ema=True``: ``state_dict_ema``, ``model_ema``, and a ValueError if the file has neither.

A bare state dict is taken as it is. ``module.`` prefixes (DDP) are stripped with timm's ``clean_state_dict``.
Every problem with the file (missing, a folder, empty, truncated, random bytes, a pickled object, a
safetensors header that does not parse, values that are not tensors) is a ``FileNotFoundError`` or a
``ValueError`` naming the file and what is wrong, never a raw library error.

Why not ``timm.models.load_state_dict``: it reads the same formats (weights only) but lets library errors through
unexplained, silently gives the model weights when EMA weights were asked for and are missing, and does not check
that the values are tensors. Those are the three things this reader adds; timm's ``clean_state_dict`` does the rest.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch

__all__ = ['read_state_dict', 'read_checkpoint', 'MODEL_KEYS', 'EMA_KEYS']

MODEL_KEYS = ('state_dict', 'model', 'module')
EMA_KEYS = ('state_dict_ema', 'model_ema')


def read_checkpoint(path: str | os.PathLike) -> object:
    """The object a checkpoint file holds (weights only; see the module docstring for the formats and errors)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f'no checkpoint file at {path}')
    if not os.path.isfile(path):
        raise ValueError(f'{path} is not a file (a checkpoint is a .safetensors or torch.save file)')
    if os.path.getsize(path) == 0:
        raise ValueError(f'{path} is empty')
    try:
        if path.endswith('.safetensors'):
            from safetensors.torch import load_file

            return load_file(path)
        return torch.load(path, map_location='cpu', weights_only=True)
    except Exception as e:  # truncated, foreign, pickled-object or corrupt files: one clear error
        kind = 'safetensors' if path.endswith('.safetensors') else 'torch.save (weights only)'
        raise ValueError(f'could not read {path} as a {kind} checkpoint: {type(e).__name__}: {e}') from e


def read_state_dict(
    source: str | os.PathLike | Mapping[str, torch.Tensor], use_ema: bool = False
) -> tuple[dict[str, torch.Tensor], str]:
    """A state dict from a file or a mapping; returns it and the key it came from (``''`` for a bare one).

    See the module docstring for the formats, the EMA rule and the errors.
    """
    from timm.models import clean_state_dict

    name = 'the given state dict'
    if isinstance(source, Mapping):
        ckpt = source
    elif isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        ckpt = read_checkpoint(name)
    else:
        raise TypeError(f'expected a checkpoint path or a state dict, got {type(source).__name__}')
    if not isinstance(ckpt, Mapping):
        raise ValueError(f'{name} holds a {type(ckpt).__name__}, not a state dict')
    key = ''
    for k in EMA_KEYS if use_ema else MODEL_KEYS:
        if isinstance(ckpt.get(k), Mapping):
            key = k
            break
    if use_ema and not key:
        raise ValueError(f'{name} has no EMA weights (none of {EMA_KEYS})')
    sd = ckpt[key] if key else ckpt
    bad = [k for k, v in sd.items() if not isinstance(v, torch.Tensor)]
    if bad:
        where = f'{name}[{key!r}]' if key else name
        raise ValueError(
            f'{where} is not a state dict of tensors: {len(bad)} entries are not tensors '
            f'(e.g. {bad[0]!r}: {type(sd[bad[0]]).__name__}); a training checkpoint keeps its weights under one '
            f'of {MODEL_KEYS + EMA_KEYS}'
        )
    return clean_state_dict(dict(sd)), key
