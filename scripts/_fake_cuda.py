"""CUDA autocast for fake CUDA tensors, for the scripts that count what a computation dispatches on CUDA without a
GPU (``bench_longconv_gpu.py --accounting``, ``gpu_cost.py``). Imports torch only: ``gpu_cost.py --code`` counts
another checkout's package, which must not be imported before it."""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def fake_cuda_autocast(dtype=None):
    """CUDA autocast (bf16 unless ``dtype``) for fake CUDA tensors: ``torch.autocast('cuda')`` turns itself off
    without a visible GPU, so the state is set directly, and reset on the way out."""
    torch.set_autocast_enabled('cuda', True)
    torch.set_autocast_dtype('cuda', dtype or torch.bfloat16)
    try:
        yield
    finally:
        torch.set_autocast_enabled('cuda', False)
        torch.clear_autocast_cache()  # as torch.autocast leaves: the next region casts the weights again
