"""TaLK for ONNX runtimes: the ``'onnx'`` engine, standard ATen ops chosen for what ONNX Runtime runs fast.

What ``engine='auto'`` resolves to while ``torch.onnx.export`` traces a model
(:func:`mrconvnext.ops.availability.onnx_exporting`); inference only. Conventions are those of :mod:`mrconvnext.ops.talk`,
results the specification's (:mod:`.reference`) up to float32 rounding.

1-D: the inclusive prefix table (``P[t + 1]``, no padding) and ``x`` are laid out position-major over all channels,
``(B, L, C)``, one row of the ``R`` channels of a head per image, position and head, and a window end at
``u = k + f`` reads ``P(u) = P[k + 1] + (f - 1) x[k]`` (the identity ``P[k + 1] - P[k] = x[k]``: no cancellation in
a long prefix sum), so the four lookups of a window are ``Gather``s of whole rows along axis 0 with two
``(B, L, heads)`` indices; each cell index takes one NaN guard (``IsNaN``, ``Where``) in place of ``nan_to_num``'s
tests for NaN and both infinities. The specification gathers single elements (``GatherElements``), which needs its
indices broadcast to the full ``(B, C, L)`` shape first (an ``Expand`` of int64 indices per lookup). The layout is
the ConvNeXt block's channels-last one: the form enters and leaves it by a ``(B, C, L) <-> (B, L, C)`` transpose,
and a flattened map that crosses the layer boundary through :func:`mrconvnext.ops.map_layout.flatten_map` /
:func:`~mrconvnext.ops.map_layout.unflatten_map` meets each of them with its inverse, so the runtime drops both and
the block's own transpose to channels-last after the mixer (one transpose of the map per mixer is left, into the
layout; a per-head layout ``(B, heads, L, R)`` kept three). The row indices are sums of broadcasts along long
innermost spans (ONNX Runtime's slow broadcast is the one with a short innermost span, such as ``heads``), and the
positions the window arithmetic starts from are constants of the offsets' full ``(L, heads)`` shape.
2-D on maps of up to :data:`~.dispatch.ONNX_DENSE_MAX_POSITIONS` positions: one ``(HW, HW)`` matrix per image and
head, column ``p`` the outer product of the box's row and column weights (``P(u) = P[k] + (u - k) x[k]`` read as weights
on the cells: 1 below ``k``, ``u - k`` at ``k``), and one batched ``MatMul`` (``HW`` multiply-adds per element
instead of sixteen full-size lookups); :func:`talk2d_separable`, the same weights one axis at a time, is the
benchmark's alternative. Larger maps (:func:`talk2d_table`): four channels-last tables (inclusive 2-D,
column and row prefix sums, and ``x``) stacked per cell and head, so that one row ``Gather`` at each box corner's
cell reads all four, and a batched ``MatMul`` weighs the sixteen rows of a box; it replaced the specification's
sixteen ``GatherElements`` of broadcast indices (``talkconvnext2d_atto`` in ONNX Runtime, 2 threads: 0.82 of the time
at batch 1, 0.87 at batch 8; building the tables by two ``MatMul``s with prefix-sum matrices instead of the stack
measured slower, its gather reading four times as many rows of a quarter the width). ``python
scripts/bench_onnx_forms.py --ops talk --doc`` times the forms kept.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .checks import acc_dtype, check_inputs, check_maxima
from .dispatch import talk2d_onnx_method
from .reference import window_bounds

__all__ = ['talk1d_onnx', 'talk2d_onnx', 'talk2d_deform', 'talk2d_dense', 'talk2d_separable', 'talk2d_table']


def talk1d_onnx(x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int) -> torch.Tensor:
    """TaLK 1-D, ``(B, C, L) -> (B, C, L)``, with row gathers from a position-major inclusive prefix table
    ``(B, L, C)``."""
    heads = check_inputs(x, offsets, 1)
    max_left, max_right = check_maxima(max_left, max_right)
    B, C, L = x.shape
    R = C // heads
    acc = acc_dtype(x.dtype)
    xt = x.to(acc).transpose(1, 2)  # (B, L, C)
    inclusive = xt.cumsum(1).reshape(-1, R)  # row (b, t, h): sum_{j <= t} x[j] = P[t + 1]
    values = xt.reshape(-1, R)  # row (b, t, h): x[t]
    off = offsets.to(acc).transpose(1, 2)  # (B, L, heads, 2)
    # the positions at the offsets' full (L, heads) shape, a constant of the graph: broadcast from (L, 1), ONNX
    # Runtime runs the window arithmetic's first ops per run of `heads` values (the module docstring)
    pos = torch.arange(L, device=x.device, dtype=acc).view(L, 1).expand(L, heads)
    u_s, u_e = window_bounds(pos, off[..., 0] * max_left, off[..., 1] * max_right, L)  # (B, L, heads)
    # the cells of window_edges; a NaN edge reads cell 0 and its NaN reaches the output through u - k
    k_s = torch.ceil(u_s).detach() - 1
    k_e = torch.floor(u_e).detach().clamp(max=L - 1)
    # row of (b, k, h): (b L + k) heads + h, as sums of broadcasts along long innermost spans
    head_of = torch.arange(heads, device=x.device).repeat(L)  # (L heads,)
    batch_of = torch.arange(B, device=x.device).view(B, 1) * (L * heads)

    def interp(u, k):  # P(u) = P[k] + (u - k) x[k] = P[k + 1] + (u - k - 1) x[k]: one index for both tables
        k = torch.where(torch.isnan(k), 0.0, k.clamp(min=0))
        index = ((k.long() * heads).reshape(B, L * heads) + head_of + batch_of).reshape(-1)
        p = inclusive.index_select(0, index).view(B, L, heads, R)
        v = values.index_select(0, index).view(B, L, heads, R)
        return p + (u - k - 1).unsqueeze(-1) * v

    y = (interp(u_e, k_e) - interp(u_s, k_s)) / (max_left + max_right + 1)  # (B, L, heads, R)
    return y.reshape(B, L, C).transpose(1, 2).to(x.dtype)


def talk2d_onnx(
    x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int, max_top: int, max_bottom: int
) -> torch.Tensor:
    """TaLK 2-D box op, ``(B, C, H, W) -> (B, C, H, W)``: :func:`talk2d_dense`, :func:`talk2d_table` or (opted in)
    :func:`talk2d_deform` by the map's positions (:func:`.dispatch.talk2d_onnx_method`)."""
    method = talk2d_onnx_method(x.shape[-2] * x.shape[-1])
    fn = {'dense': talk2d_dense, 'table': talk2d_table, 'deform': talk2d_deform}[method]
    return fn(x, offsets, max_left, max_right, max_top, max_bottom)


def talk2d_deform(
    x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int, max_top: int, max_bottom: int
) -> torch.Tensor:
    """TaLK 2-D box op, ``(B, C, H, W) -> (B, C, H, W)``, as one deformable convolution (torchvision's
    ``deform_conv2d``, which exports as ONNX ``DeformConv``): the taps of a ``2 x 2`` kernel of ones, per channel, at
    ``(i + a, j + b)`` of the exclusive ``(H + 1, W + 1)`` integral image, moved to the box's corners (top or
    bottom, left or right) of position ``(i, j)``, where the bilinear sample of the integral image is the
    interpolated prefix ``Pex + fu Cex + fv Rex + fu fv x`` of :func:`.reference.talk2d_reference`; the mask holds the
    corners' signs over the box's maximum area, one offset group per head. A NaN edge sets the position's four edges
    to 0 (valid samples, at the integral image's corner) and the head's mask to NaN, so the output there is NaN.

    Differentiable (torchvision's backward), but at an integer start edge (top, left) the bilinear sample's
    derivative is the cell to its right, where the specification takes the one the window grows into (to its left):
    the edges' one-sided derivatives differ there, and only there. Channels-first, as the ConvNeXt block's stream."""
    from torchvision.ops import deform_conv2d

    heads = check_inputs(x, offsets, 2)
    ml, mr, mt, mb = check_maxima(max_left, max_right, max_top, max_bottom)
    B, C, H, W = x.shape
    acc = acc_dtype(x.dtype)
    integral = F.pad(x.to(acc).cumsum(2).cumsum(3), (1, 0, 1, 0))  # (B, C, H + 1, W + 1): sum over [0, v) x [0, u)
    off = offsets.to(acc).permute(0, 1, 4, 2, 3)  # (B, heads, 4, H, W): positions innermost, runs of H W values
    i = torch.arange(H, device=x.device, dtype=acc).view(H, 1).expand(H, W)
    j = torch.arange(W, device=x.device, dtype=acc).view(1, W).expand(H, W)
    left, right = window_bounds(j, off[:, :, 0] * ml, off[:, :, 1] * mr, W)  # (B, heads, H, W)
    top, bottom = window_bounds(i, off[:, :, 2] * mt, off[:, :, 3] * mb, H)
    nan = torch.isnan(left + right + top + bottom)
    left, right, top, bottom = (torch.where(nan, 0.0, e) for e in (left, right, top, bottom))
    # taps (a, b) in deform_conv2d's order (0, 0), (0, 1), (1, 0), (1, 1), sampled at (i + a + dy, j + b + dx)
    dy = torch.stack([top - i, top - i, bottom - (i + 1), bottom - (i + 1)], 2)  # (B, heads, 4, H, W)
    dx = torch.stack([left - j, right - (j + 1), left - j, right - (j + 1)], 2)
    shifts = torch.stack([dy, dx], 3).reshape(B, heads * 8, H, W)  # channel (head, tap, [dy, dx])
    # corners (top, left) - (top, right) - (bottom, left) + (bottom, right), over the box's maximum area
    signs = torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=acc, device=x.device).view(4, 1, 1)
    signs = signs.expand(4, H, W) / ((ml + mr + 1) * (mt + mb + 1))
    mask = torch.where(nan.unsqueeze(2), float('nan'), signs).reshape(B, heads * 4, H, W)
    ones = torch.ones(C, 1, 2, 2, dtype=acc, device=x.device)
    return deform_conv2d(integral, shifts, ones, mask=mask).to(x.dtype)


def _corner_cells(u: torch.Tensor, n: int, end: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(k, f)``: the cell of :func:`.reference.window_edges` at an edge ``u`` of :func:`.reference.window_bounds` and
    the fraction ``u - k``. A NaN edge reads cell 0 and its NaN reaches the output through ``f``."""
    k = torch.floor(u) if end else torch.ceil(u) - 1
    k = k.detach().clamp(0, n - 1)
    k = torch.where(torch.isnan(k), 0.0, k)
    return k, u - k


def talk2d_table(
    x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int, max_top: int, max_bottom: int
) -> torch.Tensor:
    """TaLK 2-D box op, ``(B, C, H, W) -> (B, C, H, W)``, from four channels-last inclusive tables read at one cell per
    box corner: the interpolated integral image at ``(kv + fv, ku + fu)`` is
    ``Pin + (fu - 1) Cin + (fv - 1) Rin + (fu - 1)(fv - 1) x`` at ``(kv, ku)`` (``Pin`` the inclusive 2-D prefix sums,
    ``Cin`` / ``Rin`` the inclusive column / row sums; the exclusive ``Pex + fu Cex + fv Rex + fu fv x`` with each
    exclusive sum written as an inclusive one less its last terms, so that no table needs the shift and padding of
    an exclusive one), so one ``Gather`` of rows ``(image, cell, head)`` holding the four tables' ``R`` channels
    serves all four corners, and a batched ``MatMul`` weighs the sixteen rows of each box (signs, fractions and the
    normalizer). Enters the channels-last layout by one transpose and leaves it by the inverse of the ConvNeXt
    block's."""
    heads = check_inputs(x, offsets, 2)
    ml, mr, mt, mb = check_maxima(max_left, max_right, max_top, max_bottom)
    B, C, H, W = x.shape
    R, N = C // heads, H * W
    acc = acc_dtype(x.dtype)
    xt = x.to(acc).permute(0, 2, 3, 1)  # (B, H, W, C)
    rin = xt.cumsum(2)  # sum over the row up to the cell
    cin = xt.cumsum(1)  # over the column down to it
    pin = rin.cumsum(1)  # over the rectangle up to it
    tables = torch.stack([t.reshape(B, N, heads, R) for t in (pin, cin, rin, xt)], 3)  # (B, N, heads, 4, R)
    off = offsets.to(acc).permute(0, 2, 3, 1, 4).reshape(B, N, heads, 4)
    # the row and column of each position at the offsets' full (N, heads) shape (as talk1d_onnx's positions)
    pos_h = torch.arange(H, device=x.device, dtype=acc).repeat_interleave(W).view(N, 1).expand(N, heads)
    pos_w = torch.arange(W, device=x.device, dtype=acc).repeat(H).view(N, 1).expand(N, heads)
    left, right = window_bounds(pos_w, off[..., 0] * ml, off[..., 1] * mr, W)  # (B, N, heads)
    top, bottom = window_bounds(pos_h, off[..., 2] * mt, off[..., 3] * mb, H)
    (kl, fl), (kr, fr) = _corner_cells(left, W, False), _corner_cells(right, W, True)
    (kt, ft), (kb, fb) = _corner_cells(top, H, False), _corner_cells(bottom, H, True)
    # corners (bottom, right) + (top, left) - (bottom, left) - (top, right), last: (B, N, heads, 4)
    kv, fv = torch.stack([kb, kb, kt, kt], -1), torch.stack([fb, fb, ft, ft], -1) - 1
    ku, fu = torch.stack([kr, kl, kr, kl], -1), torch.stack([fr, fl, fr, fl], -1) - 1
    # the corners' signs over the box's maximum area at full shape: a (4, 1) constant broadcast over the weights
    # would be a run of 4 values at a time in ONNX Runtime
    one = torch.ones_like(fr) / ((ml + mr + 1) * (mt + mb + 1))
    sign = torch.stack([one, -one, -one, one], -1)
    weights = torch.stack([sign, sign * fu, sign * fv, sign * fu * fv], -1)  # (B, N, heads, 4, 4)
    # row of (b, cell, h): (b N + cell) heads + h, as sums of broadcasts along long innermost spans
    head_of = torch.arange(heads, device=x.device).repeat_interleave(4).repeat(N)  # (N heads 4,)
    batch_of = torch.arange(B, device=x.device).view(B, 1) * (N * heads)
    cells = ((kv * W + ku).long() * heads).reshape(B, N * heads * 4)
    rows = tables.reshape(-1, 4 * R).index_select(0, (cells + head_of + batch_of).reshape(-1))
    y = torch.matmul(weights.reshape(B, N, heads, 1, 16), rows.view(B, N, heads, 16, R))  # (B, N, heads, 1, R)
    return y.reshape(B, H, W, C).permute(0, 3, 1, 2).to(x.dtype)


def _cells(u: torch.Tensor, n: int, end: bool) -> torch.Tensor:
    """``(..., n, m)`` weights of the ``n`` cells in the interpolated prefix ``P(u) = P[k] + (u - k) x[k]`` at the
    edges ``u`` (``(..., m)``, one per position) of :func:`.reference.window_bounds`: ``min(max(u - i, 0), 1)`` for
    cell ``i``; the cells ahead of the positions, so that ONNX Runtime broadcasts both operands of ``u - i`` along
    runs of ``m`` values. The derivative in
    ``u`` goes to the cell the specification's lookup reads, the one the edge grows into: for an end the cell with
    ``0 <= u - i < 1``, for a start the one with ``0 < u - i <= 1``. Written with ``relu`` alone, whose gradient at
    0 is 0 in every torch version (``clamp``'s at its bounds changed between 2.11 and 2.14): ``relu(a) - relu(a - 1)``
    for a start (exact), ``1 - (relu(1 - a) - relu(-a))`` for an end (within half an ulp of 1 of the weight). A NaN
    ``u`` makes every weight NaN."""
    a = u.unsqueeze(-2) - torch.arange(n, device=u.device, dtype=u.dtype).view(n, 1)
    if end:
        return 1 - (torch.relu(1 - a) - torch.relu(-a))
    return torch.relu(a) - torch.relu(a - 1)


def _box_weights(
    x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int, max_top: int, max_bottom: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The checked inputs' ``(rows, cols, heads)``: ``rows (B, heads, H, HW)`` and ``cols (B, heads, W, HW)`` the
    weights of the cells on each axis in the box of every position (each an end's :func:`_cells` less a start's), the
    columns' divided by the box's maximum area, in :func:`.checks.acc_dtype`."""
    heads = check_inputs(x, offsets, 2)
    ml, mr, mt, mb = check_maxima(max_left, max_right, max_top, max_bottom)
    B, _, H, W = x.shape
    acc = acc_dtype(x.dtype)
    off = offsets.to(acc).reshape(B, heads, H * W, 4)
    pos_h = torch.arange(H, device=x.device, dtype=acc).repeat_interleave(W)  # the row of each position
    pos_w = torch.arange(W, device=x.device, dtype=acc).repeat(H)
    left, right = window_bounds(pos_w, off[..., 0] * ml, off[..., 1] * mr, W)
    top, bottom = window_bounds(pos_h, off[..., 2] * mt, off[..., 3] * mb, H)
    rows = _cells(bottom, H, end=True) - _cells(top, H, end=False)
    cols = (_cells(right, W, end=True) - _cells(left, W, end=False)) / ((ml + mr + 1) * (mt + mb + 1))
    return rows, cols, heads


def talk2d_dense(
    x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int, max_top: int, max_bottom: int
) -> torch.Tensor:
    """TaLK 2-D box op, ``(B, C, H, W) -> (B, C, H, W)``, as one ``(HW, HW)`` matrix per image and head: column
    ``p`` holds the weights of every cell in the box of ``p`` (its row weights times its column weights), and the ``R``
    channels of the head are multiplied by it."""
    rows, cols, heads = _box_weights(x, offsets, max_left, max_right, max_top, max_bottom)
    B, C, H, W = x.shape
    R, N = C // heads, H * W
    box = (rows.unsqueeze(3) * cols.unsqueeze(2)).reshape(B, heads, N, N)  # (b, head, q, p): cell q in p's box
    y = torch.matmul(x.to(rows.dtype).reshape(B, heads, R, N), box)
    return y.reshape(B, C, H, W).to(x.dtype)


def talk2d_separable(
    x: torch.Tensor, offsets: torch.Tensor, max_left: int, max_right: int, max_top: int, max_bottom: int
) -> torch.Tensor:
    """TaLK 2-D box op, ``(B, C, H, W) -> (B, C, H, W)``, the box's weights one axis at a time: a batched ``MatMul``
    of each image's and head's ``(R H, W)`` rows with the column weights of every position, ``(W, HW)``, then per
    position the product with its row weights and a sum over the rows. The same ``R H^2 W^2`` multiply-adds as
    :func:`talk2d_dense`, without the ``(HW, HW)`` matrix's outer products."""
    rows, cols, heads = _box_weights(x, offsets, max_left, max_right, max_top, max_bottom)
    B, C, H, W = x.shape
    R, N = C // heads, H * W
    z = torch.matmul(x.to(cols.dtype).reshape(B, heads, R * H, W), cols)  # (B, heads, (R, H), HW)
    y = (z.view(B, heads, R, H, N) * rows.unsqueeze(2)).sum(3)  # (B, heads, R, HW)
    return y.reshape(B, C, H, W).to(x.dtype)
