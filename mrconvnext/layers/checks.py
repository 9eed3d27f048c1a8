"""Input validation shared by the token mixers: clear errors instead of silent garbage."""

from __future__ import annotations

import torch
import torch.nn as nn

_LAYOUT = {3: '(B, C, L)', 4: '(B, C, H, W)'}


def set_engine_of(layer: nn.Module, choices: tuple[str, ...], method: str | None, engine: str | None) -> None:
    """``layer.engine = engine`` (one of ``choices``; None: keep) for a mixer whose family has one method, so
    ``method`` must be None; a ``ValueError`` names what arrived."""
    from ..ops.checks import check_choice

    cls = type(layer).__name__
    if method is not None:
        raise ValueError(f'{cls} has one method (its engine= chooses the implementation), got method={method!r}')
    if engine is not None:
        layer.engine = check_choice(cls, 'engine', engine, choices)


def check_mixer_input(module: nn.Module, x: object, rank: int) -> torch.Tensor:
    """Check that ``x`` is a non-empty floating-point ``(B, C, L)`` / ``(B, C, H, W)`` tensor with
    ``module.dim`` channels; raise ``TypeError`` / ``ValueError`` naming what was expected and what arrived."""
    cls = type(module).__name__
    layout = _LAYOUT[rank]
    if not isinstance(x, torch.Tensor):
        raise TypeError(f'{cls} expects a torch.Tensor, got {type(x).__name__}')
    if not x.is_floating_point():
        raise TypeError(f'{cls} expects a floating-point input, got dtype {x.dtype}')
    if x.dim() != rank:
        raise ValueError(f'{cls} expects input of shape {layout}, got shape {tuple(x.shape)}')
    if x.shape[1] != module.dim:
        raise ValueError(f'{cls} expects {module.dim} channels, got {x.shape[1]} (input shape {tuple(x.shape)})')
    if x.numel() == 0:
        raise ValueError(f'{cls} got an empty input of shape {tuple(x.shape)}')
    return x
