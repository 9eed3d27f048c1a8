"""What the Triton TaLK kernels share (:mod:`.engine_triton` has the operators and the overview): the window-edge
rules as Triton functions, the window normalizer computed exactly on the host, and whether the kernels run under
Triton's interpreter.

Conventions of :mod:`mrconvnext.ops.talk` and ``kernels/talk/talk_math.h``: a window edge is ``(k, f, live)`` (prefix
index, fraction, whether the offset left the clamp), NaN offsets propagate through the fractions, positions and
fractions are in the accumulation dtype and indices int64.
"""

import torch
import triton
import triton.language as tl

__all__ = ['start_edge', 'end_edge', 'box_edges', 'norm_parts', 'interpreted']


def interpreted() -> bool:
    """Whether the kernels were defined under Triton's interpreter (``TRITON_INTERPRET=1`` at import)."""
    return not isinstance(start_edge, triton.runtime.JITFunction)


@triton.jit
def start_edge(i, d, n):
    """Start edge of windows at int64 positions ``i`` with real boundary ``i - d`` on an axis of length ``n``."""
    fi = i.to(d.dtype)
    lo = (d < fi) == 0  # a <= 0, or a NaN offset (propagated through f)
    hi = (fi - d) > (n - 1)
    fl = tl.floor(tl.where(lo | hi, 0.0, d))
    k = tl.where(lo, 0, tl.where(hi, tl.maximum(n - 2, 0), i - fl.to(tl.int64) - 1))
    f = tl.where(lo, tl.where(d >= fi, 0.0, d), tl.where(hi, tl.where(n >= 2, 1.0, 0.0), 1.0 - (d - fl)))
    return k.to(tl.int64), f.to(d.dtype), (lo | hi) == 0


@triton.jit
def end_edge(i, d, n):
    """End edge (prefix position ``i + d + 1``) of windows at positions ``i``; see :func:`start_edge`."""
    fi = i.to(d.dtype)
    b = fi + d
    hi = (b < n - 1) == 0  # b >= n - 1, or NaN
    lo = b < 0
    fl = tl.floor(tl.where(lo | hi, 0.0, d))
    k = tl.where(hi, n - 1, tl.where(lo, tl.where(n >= 2, 1, 0), i + 1 + fl.to(tl.int64)))
    f = tl.where(hi, tl.where(b >= n - 1, 1.0, d), tl.where(lo, tl.where(n >= 2, 0.0, 1.0), d - fl))
    return k.to(tl.int64), f.to(d.dtype), (lo | hi) == 0


@triton.jit
def box_edges(off, b, h, t, tmask, H, W, sob, soh, sop, sos, ml, mr, mt, mb):
    """The four edges of the boxes at flattened positions ``t`` of heads ``h`` (any shapes that broadcast: a plane
    kernel's ``(BLOCK_T,)`` and one head, or a channels-last tile's ``(BLOCK_N, BLOCK_H)`` and ``(1, BLOCK_H)``),
    from offsets ``(B, heads, H * W, 4)`` with strides (sob, soh, sop, sos)."""
    ob = off + b * sob + h * soh + t * sop
    row, col = t // W, t % W
    kl, fl, live_l = start_edge(col, tl.load(ob, mask=tmask, other=0.0) * ml, W)
    kr, fr, live_r = end_edge(col, tl.load(ob + sos, mask=tmask, other=0.0) * mr, W)
    kt, ft, live_t = start_edge(row, tl.load(ob + 2 * sos, mask=tmask, other=0.0) * mt, H)
    kb, fb, live_b = end_edge(row, tl.load(ob + 3 * sos, mask=tmask, other=0.0) * mb, H)
    return kl, fl, live_l, kr, fr, live_r, kt, ft, live_t, kb, fb, live_b


def norm_parts(*maxima: int) -> tuple[float, float]:
    """The normalizer ``(max_left + max_right + 1) [* (max_top + max_bottom + 1)]``, computed exactly on the host (in
    the kernel, 32-bit integer arithmetic overflowed for maxima near 2**31, or 46341 in 2-D), as two float32 parts
    (Triton passes floats as float32) whose sum in the accumulation dtype is the normalizer to 48 bits: exact
    in float64 up to 2**48, and the nearest float32 in float32."""
    norm = 1
    for a, b in zip(maxima[::2], maxima[1::2]):
        norm *= a + b + 1
    hi = float(torch.tensor(float(norm), dtype=torch.float32))
    return hi, float(norm - int(hi))
