"""What a computation dispatches, for the tests that check which operators run (often on fake CUDA tensors)."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Ops that compute nothing (views and metadata): left out of RecordOps.work
_FREE = ('view', 'expand', 'unsqueeze', 'reshape', 'transpose', 'permute', 'slice', 'select', '_unsafe_view', 't.')


class RecordOps(TorchDispatchMode):
    """Records every operator call under it: ``calls`` holds ``(name, shapes of its tensor arguments)``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, list[tuple[int, ...]]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((str(func), [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    @property
    def work(self) -> list[str]:
        """The calls that compute (views and metadata left out)."""
        return [n for n in self.names if not any(n.startswith('aten.' + f) for f in _FREE)]

    def copies_of(self, numel: int) -> list[tuple[str, list[tuple[int, ...]]]]:
        """Calls that copy or cast a tensor of at least ``numel`` elements."""
        ops = ('aten.clone.default', 'aten.copy_.default', 'aten._to_copy.default', 'aten.contiguous.default')
        return [
            (n, shapes) for n, shapes in self.calls if n in ops and shapes and torch.Size(shapes[0]).numel() >= numel
        ]
