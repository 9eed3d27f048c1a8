"""Helpers shared by the operator families and the layers: argument checks (one rule, one message) and autocast
control."""

from __future__ import annotations

import contextlib
import operator

import torch

__all__ = ['autocast_dtype', 'autocast_off', 'check_choice', 'check_int', 'check_size2']


def check_int(owner: str, name: str, value: object, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int if it is an integer (not a bool) in ``[minimum, maximum]``; else a ``TypeError`` /
    ``ValueError`` that names ``owner``, the argument, what was expected and what arrived."""
    want = f'an int >= {minimum}' if maximum is None else f'an int in [{minimum}, {maximum}]'
    if torch.compiler.is_compiling():  # sizes traced by torch.compile must not be specialized by operator.index
        return value
    if isinstance(value, bool):
        raise TypeError(f'{owner}: {name} must be {want}, got bool')
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f'{owner}: {name} must be {want}, got {type(value).__name__}') from None
    if value < minimum or (maximum is not None and value > maximum):
        raise ValueError(f'{owner}: {name} must be {want}, got {value}')
    return value


def check_size2(owner: str, name: str, value: object) -> tuple[int, int]:
    """``value`` as ``(H, W)`` if it is a pair of positive ints, else a ``ValueError`` / ``TypeError`` naming it."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f'{owner} expects {name} as two positive ints (H, W), got {value!r}')
    return check_int(owner, f'{name}[0]', value[0]), check_int(owner, f'{name}[1]', value[1])


def check_choice(owner: str, name: str, value: object, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``, else a ``ValueError`` naming ``owner``, the argument and the choices."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f'{owner}: {name} must be one of {choices}, got {value!r}')
    return value


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast gives matrix products on ``device_type`` where it is enabled, else None (also for device
    types without autocast, such as meta)."""
    if device_type in ('cpu', 'cuda', 'xpu', 'mps') and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return None


def autocast_off(device_type: str) -> contextlib.AbstractContextManager:
    """A context that disables autocast for ``device_type`` where it is enabled, else does nothing.

    ``torch.autocast(device_type, enabled=False)`` itself raises for device types without autocast (e.g. the
    meta device that timm's tests run models on), so it is entered only when autocast is on.
    """
    if device_type in ('cpu', 'cuda', 'xpu', 'mps') and torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()
