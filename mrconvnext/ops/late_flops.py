"""FLOP formulas of operators defined after import (the Triton operators are defined on first use, since Triton is
optional): a ``FlopCounterMode`` copies torch's formula registry when it is made, so one that is active while an
operator is defined would not count that call."""

from __future__ import annotations

from collections.abc import Iterable

from torch.utils import _python_dispatch, flop_counter

__all__ = ['share_with_active_counters']


def share_with_active_counters(ops: Iterable) -> None:
    """Give the ``FlopCounterMode``s active now the registered formulas of ``ops`` (``OpOverloadPacket``s)."""
    ops = list(ops)
    for mode in _python_dispatch._get_current_dispatch_mode_stack():
        # torch wraps the counter in a dispatch mode of its own (``.counter``); older releases pushed the counter
        counter = mode if isinstance(mode, flop_counter.FlopCounterMode) else getattr(mode, 'counter', None)
        if isinstance(counter, flop_counter.FlopCounterMode):
            for op in ops:
                counter.flop_registry.setdefault(op, flop_counter.flop_registry[op])
