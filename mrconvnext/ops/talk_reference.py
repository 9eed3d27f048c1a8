"""TaLK specification: the conventions (in :mod:`.talk`), the input checks and the reference implementation.

``talk1d_reference`` / ``talk2d_reference`` (cumsum + gather + autograd) *are* the specification every engine
(:mod:`.talk_torch`, the native CPU kernel, :mod:`.talk_triton`) is tested against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._args import check_int

__all__ = ['talk1d_reference', 'talk2d_reference']


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


# ------------------------------------------------------------------------------------------ validation


# Largest maximum offset: a window of 2**31 positions covers any row a kernel indexes, and every engine computes
# the normalizer exactly up to it (the operators' int64 schema would refuse 2**63 with an unclear message).
MAX_OFFSET = 2**31 - 1


def _check_max(name: str, value: int) -> int:
    return check_int('talk', name, value, minimum=0, maximum=MAX_OFFSET)


def _check_inputs(x: torch.Tensor, offsets: torch.Tensor, spatial: int) -> int:
    """Validate ``x`` / ``offsets`` of a ``spatial``-D TaLK op; returns the number of heads."""
    names = {1: ('(B, C, L)', '(B, heads, L, 2)', 2), 2: ('(B, C, H, W)', '(B, heads, H, W, 4)', 4)}
    x_layout, off_layout, n_off = names[spatial]
    for name, t in (('x', x), ('offsets', offsets)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f'{name}: expected a torch.Tensor, got {type(t).__name__}')
    if x.dim() != 2 + spatial:
        raise ValueError(f'x: expected a {2 + spatial}-D tensor {x_layout}, got shape {tuple(x.shape)}')
    if not x.is_floating_point():
        raise TypeError(f'x: expected a floating-point dtype, got {x.dtype}')
    if not offsets.is_floating_point():
        raise TypeError(f'offsets: expected a floating-point dtype, got {offsets.dtype}')
    B, C = x.shape[:2]
    expected_tail = (*x.shape[2:], n_off)
    if offsets.dim() != 3 + spatial or offsets.shape[0] != B or tuple(offsets.shape[2:]) != expected_tail:
        exp = f'({B}, heads, {", ".join(str(s) for s in expected_tail)})'
        raise ValueError(f'offsets: expected shape {off_layout} = {exp}, got {tuple(offsets.shape)}')
    heads = offsets.shape[1]
    if heads == 0 or C % heads != 0:
        raise ValueError(f'offsets: the number of heads ({heads}) must divide the channels ({C})')
    if offsets.device != x.device:
        raise ValueError(f'offsets on {offsets.device} but x on {x.device}')
    return heads


# ------------------------------------------------------------------------------------------ reference


def _ref_edges(pos: torch.Tensor, d_start: torch.Tensor, d_end: torch.Tensor, n: int):
    """Reference boundaries on one axis: (u, k) for start and end, u = k + f on the prefix axis."""
    a = pos - d_start
    b = pos + d_end
    # Clamp with torch.where (explicit about the gradient at the bounds): zero gradient when a boundary is
    # outside or exactly on the end it would grow past (a <= 0, b >= n - 1), the one-sided derivative of a
    # growing window; the other two bounds only matter for offsets outside [0, 1].
    u_s = torch.where(a <= 0, 0.0, torch.where(a > n - 1, n - 1.0, a))
    u_e = torch.where(b >= n - 1, n - 1.0, torch.where(b < 0, 0.0, b)) + 1
    # k: the cell a growing window moves into (the derivative convention at integer positions). A NaN offset
    # gives a NaN boundary u; its index is set to 0 so the lookup is valid and the NaN reaches the output
    # through u - k, as in the fused and native implementations.
    k_s = torch.nan_to_num(torch.ceil(u_s) - 1, nan=0.0).clamp(min=0).detach()
    k_e = torch.nan_to_num(torch.floor(u_e), nan=0.0).clamp(max=n - 1).detach()
    return (u_s, k_s), (u_e, k_e)


def talk1d_reference(x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int) -> torch.Tensor:
    """Pure-PyTorch TaLK 1-D (autograd through cumsum/gather/interpolation). ``(B, C, L) -> (B, C, L)``."""
    heads = _check_inputs(x, offsets, 1)
    max_left, max_right = _check_max('max_left', max_left), _check_max('max_right', max_right)
    B, C, L = x.shape
    R = C // heads
    acc = _acc_dtype(x.dtype)
    P = F.pad(torch.cumsum(x.to(acc).reshape(B, heads, R, L), -1), (1, 0))  # P[t] = sum_{j<t} x[j]
    off = offsets.to(acc)
    pos = torch.arange(L, device=x.device, dtype=acc)
    start, end = _ref_edges(pos, off[..., 0] * max_left, off[..., 1] * max_right, L)

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
    heads = _check_inputs(x, offsets, 2)
    ml, mr = _check_max('max_left', max_left), _check_max('max_right', max_right)
    mt, mb = _check_max('max_top', max_top), _check_max('max_bottom', max_bottom)
    B, C, H, W = x.shape
    R, N, W1 = C // heads, H * W, W + 1
    acc = _acc_dtype(x.dtype)
    P = F.pad(x.to(acc).reshape(B, heads, R, H, W).cumsum(-2).cumsum(-1), (1, 0, 1, 0))
    P = P.reshape(B, heads, R, (H + 1) * W1)
    off = offsets.to(acc)
    cols = torch.arange(W, device=x.device, dtype=acc)
    rows = torch.arange(H, device=x.device, dtype=acc)[:, None]
    left, right = _ref_edges(cols, off[..., 0] * ml, off[..., 1] * mr, W)
    top, bottom = _ref_edges(rows, off[..., 2] * mt, off[..., 3] * mb, H)

    def corner(ev, eu):
        (v, kv), (u, ku) = ev, eu
        idx = (kv.long() * W1 + ku.long()).reshape(B, heads, 1, N).expand(B, heads, R, N)
        fv = (v - kv).reshape(B, heads, 1, N)
        fu = (u - ku).reshape(B, heads, 1, N)
        p00, p01 = P.gather(-1, idx), P.gather(-1, idx + 1)
        p10, p11 = P.gather(-1, idx + W1), P.gather(-1, idx + W1 + 1)
        return (1 - fv) * ((1 - fu) * p00 + fu * p01) + fv * ((1 - fu) * p10 + fu * p11)

    box = corner(bottom, right) - corner(bottom, left) - corner(top, right) + corner(top, left)
    return (box / ((ml + mr + 1) * (mt + mb + 1))).reshape(B, C, H, W).to(x.dtype)
