"""CUDA autocast for fake CUDA tensors, for the scripts that count what a computation dispatches on CUDA without a
GPU (``bench_longconv_gpu.py --accounting``, ``gpu_cost.py``). Imports torch only: ``gpu_cost.py --code`` counts
another checkout's package, which must not be imported before it."""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def fake_cuda_autocast(dtype=None):
    """CUDA autocast (bf16 unless ``dtype``) for fake CUDA tensors: ``torch.autocast('cuda')`` turns itself off
    without a visible GPU, so the state is set directly, with ``torch.autocast``'s nesting count (an inner region,
    such as an ``autocast(enabled=False)`` inside the model, leaves the cast weights cached) and the cache cleared
    when the outermost region ends, as ``torch.autocast`` does. The weight-cast cache is switched on for the region,
    as ``torch.autocast(cache_enabled=True)`` does: the process-wide switch may have been left off by other code."""
    enabled, previous = torch.is_autocast_enabled('cuda'), torch.get_autocast_dtype('cuda')
    cache = torch.is_autocast_cache_enabled()
    torch.set_autocast_enabled('cuda', True)
    torch.set_autocast_dtype('cuda', dtype or torch.bfloat16)
    torch.set_autocast_cache_enabled(True)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled('cuda', enabled)
        torch.set_autocast_dtype('cuda', previous)
        torch.set_autocast_cache_enabled(cache)
