"""A trivial Triton kernel, defined when :func:`mrconvnext.ops.availability.triton_unavailable` first asks: whether
Triton imports, whether its interpreter is on (``TRITON_INTERPRET=1`` before first use), and whether this torch's
``wrap_triton`` takes an interpreted kernel. No family's kernels are imported for that."""

import triton
import triton.language as tl

__all__ = ['probe_jit', 'interpreted']


@triton.jit
def probe_jit(x):
    tl.store(x, 0)


def interpreted() -> bool:
    """Whether Triton's interpreter defined the probe (and so every kernel defined in this process since)."""
    return not isinstance(probe_jit, triton.runtime.JITFunction)
