"""A layer's cache of tensors derived from one of its parameters, that cannot serve a stale result.

Rule: an entry is served only while the source tensor holds, bit for bit, the values it was derived from. Every
lookup compares the source with a snapshot of those values (``torch.equal``: same shape, dtype, device and values);
any difference (``load_state_dict``, an optimizer step, ``.copy_``, ``.data`` edits, which bypass the version
counter, ``.to()``, ``.half()``) drops every entry. The comparison reads the source once, ``C * P`` elements for a
``(C, P)`` kernel, against ``C * n log n`` work to rebuild a spectrum, and it synchronizes with the device: callers
use the cache on the CPU only (see :meth:`~mrconvnext.layers.MRConv1d.forward`).

Entries are built without gradients and outside inference mode: plain tensors with no autograd graph, so a layer
holding them can be deep-copied (``timm.utils.reparameterize_model``, ``ModelEmaV3``, exporters) and reused in
training. The cache is not state: it is not in the state dict, and a copy of the layer starts empty.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import torch

__all__ = ['DerivedCache']


class DerivedCache:
    """Up to ``max_entries`` values derived from one source tensor, each under a key (e.g. an input geometry)."""

    def __init__(self, max_entries: int = 8) -> None:
        self.max_entries = max_entries
        self._snapshot: torch.Tensor | None = None
        self._entries: dict[Hashable, object] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __deepcopy__(self, memo: dict) -> DerivedCache:
        return DerivedCache(self.max_entries)  # a copy starts empty: nothing to copy, nothing shared

    def __getstate__(self) -> dict:
        return {'max_entries': self.max_entries, '_snapshot': None, '_entries': {}}

    def clear(self) -> None:
        self._snapshot = None
        self._entries.clear()

    def get(self, source: torch.Tensor, key: Hashable, build: Callable[[], object]) -> object:
        """The value under ``key`` derived from ``source``'s current values, built by ``build()`` when missing."""
        snap = self._snapshot
        fresh = (
            snap is not None
            and snap.shape == source.shape
            and snap.dtype == source.dtype
            and snap.device == source.device
            and torch.equal(snap, source.detach())
        )
        with torch.inference_mode(False), torch.no_grad():  # plain tensors, whatever mode the caller is in
            if not fresh:
                self._entries.clear()
                self._snapshot = source.detach().clone()
            if key not in self._entries:
                if len(self._entries) >= self.max_entries:
                    self._entries.pop(next(iter(self._entries)))  # the oldest
                self._entries[key] = build()
        return self._entries[key]
