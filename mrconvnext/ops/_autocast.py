"""Autocast control that works on every device, under torch.compile and on the meta device."""

from __future__ import annotations

import contextlib

import torch


def autocast_off(device_type: str) -> contextlib.AbstractContextManager:
    """A context that disables autocast for ``device_type`` where it is enabled, else does nothing.

    ``torch.autocast(device_type, enabled=False)`` itself raises for device types without autocast (e.g. the
    meta device that timm's tests run models on), so it is entered only when autocast is on.
    """
    if device_type in ('cpu', 'cuda', 'xpu', 'mps') and torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()
