"""TaLK specification: the reference implementations (conventions in :mod:`mrconvnext.ops.talk`).

``talk1d_reference`` / ``talk2d_reference`` (cumsum + gather + autograd) *are* the specification every engine
(:mod:`.talk_torch`, the native CPU kernel, :mod:`.talk_triton`) is tested against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .checks import acc_dtype, check_inputs, check_maxima

__all__ = ['talk1d_reference', 'talk2d_reference', 'window_bounds', 'window_edges']


# ------------------------------------------------------------------------------------------ reference


def window_bounds(pos: torch.Tensor, d_start: torch.Tensor, d_end: torch.Tensor, n: int):
    """Window boundaries on one axis of ``n`` cells: ``(u_start, u_end)``, the real positions on the prefix axis
    (``0 <= u_start <= n - 1``, ``1 <= u_end <= n``)."""
    a = pos - d_start
    b = pos + d_end
    # Clamp with torch.where (explicit about the gradient at the bounds): zero gradient when a boundary is
    # outside or exactly on the end it would grow past (a <= 0, b >= n - 1), the one-sided derivative of a
    # growing window; the other two bounds only matter for offsets outside [0, 1].
    u_s = torch.where(a <= 0, 0.0, torch.where(a > n - 1, n - 1.0, a))
    u_e = torch.where(b >= n - 1, n - 1.0, torch.where(b < 0, 0.0, b)) + 1
    return u_s, u_e


def window_edges(pos: torch.Tensor, d_start: torch.Tensor, d_end: torch.Tensor, n: int):
    """Window boundaries on one axis of ``n`` cells: ``((u, k), (u, k))`` for the start and the end, ``u = k + f`` the
    real position on the prefix axis (:func:`window_bounds`) and ``k`` (detached) the cell it interpolates in."""
    u_s, u_e = window_bounds(pos, d_start, d_end, n)
    # k: the cell a growing window moves into (the derivative convention at integer positions). A NaN offset
    # gives a NaN boundary u; its index is set to 0 so the lookup is valid and the NaN reaches the output
    # through u - k, as in the fused and native implementations.
    k_s = torch.nan_to_num(torch.ceil(u_s) - 1, nan=0.0).clamp(min=0).detach()
    k_e = torch.nan_to_num(torch.floor(u_e), nan=0.0).clamp(max=n - 1).detach()
    return (u_s, k_s), (u_e, k_e)


def talk1d_reference(x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int) -> torch.Tensor:
    """Pure-PyTorch TaLK 1-D (autograd through cumsum/gather/interpolation). ``(B, C, L) -> (B, C, L)``."""
    heads = check_inputs(x, offsets, 1)
    max_left, max_right = check_maxima(max_left, max_right)
    B, C, L = x.shape
    R = C // heads
    acc = acc_dtype(x.dtype)
    P = F.pad(torch.cumsum(x.to(acc).reshape(B, heads, R, L), -1), (1, 0))  # P[t] = sum_{j<t} x[j]
    off = offsets.to(acc)
    pos = torch.arange(L, device=x.device, dtype=acc)
    start, end = window_edges(pos, off[..., 0] * max_left, off[..., 1] * max_right, L)

    def interp(edge):
        u, k = edge
        idx = k.long().unsqueeze(2).expand(B, heads, R, L)
        p0, p1 = P.gather(-1, idx), P.gather(-1, idx + 1)
        return p0 + (u - k).unsqueeze(2) * (p1 - p0)

    y = (interp(end) - interp(start)) / (max_left + max_right + 1)
    return y.reshape(B, C, L).to(x.dtype)


def talk2d_reference(
    x: torch.Tensor,
    offsets: torch.Tensor,
    max_left: int,
    max_right: int,
    max_top: int,
    max_bottom: int,
) -> torch.Tensor:
    """Pure-PyTorch TaLK 2-D box op (bilinear lookups in the integral image). ``(B, C, H, W) -> same``."""
    heads = check_inputs(x, offsets, 2)
    ml, mr, mt, mb = check_maxima(max_left, max_right, max_top, max_bottom)
    B, C, H, W = x.shape
    R, N, W1 = C // heads, H * W, W + 1
    acc = acc_dtype(x.dtype)
    P = F.pad(x.to(acc).reshape(B, heads, R, H, W).cumsum(-2).cumsum(-1), (1, 0, 1, 0))
    P = P.reshape(B, heads, R, (H + 1) * W1)
    off = offsets.to(acc)
    cols = torch.arange(W, device=x.device, dtype=acc)
    rows = torch.arange(H, device=x.device, dtype=acc)[:, None]
    left, right = window_edges(cols, off[..., 0] * ml, off[..., 1] * mr, W)
    top, bottom = window_edges(rows, off[..., 2] * mt, off[..., 3] * mb, H)

    def corner(ev, eu):
        (v, kv), (u, ku) = ev, eu
        idx = (kv.long() * W1 + ku.long()).reshape(B, heads, 1, N)
        fv = (v - kv).reshape(B, heads, 1, N)
        fu = (u - ku).reshape(B, heads, 1, N)

        def at(shift: int) -> torch.Tensor:  # index arithmetic per head, broadcast to the channels last
            return P.gather(-1, (idx + shift).expand(B, heads, R, N))

        p00, p01, p10, p11 = at(0), at(1), at(W1), at(W1 + 1)
        return (1 - fv) * ((1 - fu) * p00 + fu * p01) + fv * ((1 - fu) * p10 + fu * p11)

    box = corner(bottom, right) - corner(bottom, left) - corner(top, right) + corner(top, left)
    return (box / ((ml + mr + 1) * (mt + mb + 1))).reshape(B, C, H, W).to(x.dtype)
