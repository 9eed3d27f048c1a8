"""TaLK's fused PyTorch engine (``engine='torch'``): the native kernels' math and signatures in PyTorch ops.

Same edge rules as ``kernels/talk/talk_math.h``; O(B*C*L) memory; runs on any device. Used where neither the native
CPU kernel nor Triton can run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ['TorchEngine', 'TORCH_ENGINE']


# ------------------------------------------------------------------------ fused PyTorch implementation
# Same math and API as the native kernels (kernels/talk/talk_math.h), vectorized with PyTorch ops.


def _start_edges(pos: torch.Tensor, d: torch.Tensor, n: int):
    """Start edge (k, f, live) of windows at ``pos`` with real boundary ``pos - d``; see talk_math.h."""
    fl = torch.floor(d)
    k = pos - fl - 1
    f = 1 - (d - fl)
    lo = ~(d < pos)  # a <= 0, or NaN (propagated through f)
    hi = (pos - d) > (n - 1)
    k = torch.where(lo, 0, torch.where(hi, max(n - 2, 0), k))
    f = torch.where(lo, torch.where(d >= pos, 0.0, d), torch.where(hi, 1.0 if n >= 2 else 0.0, f))
    return k.long(), f, ~(lo | hi)


def _end_edges(pos: torch.Tensor, d: torch.Tensor, n: int):
    """End edge (k, f, live) of windows at ``pos`` with real boundary ``pos + d`` (prefix position + 1)."""
    fl = torch.floor(d)
    k = pos + 1 + fl
    f = d - fl
    b = pos + d
    hi = ~(b < n - 1)  # b >= n - 1, or NaN
    lo = b < 0
    k = torch.where(hi, n - 1, torch.where(lo, 1 if n >= 2 else 0, k))
    f = torch.where(hi, torch.where(b >= n - 1, 1.0, d), torch.where(lo, 0.0 if n >= 2 else 1.0, f))
    return k.long(), f, ~(lo | hi)


def _suffix_sum(t: torch.Tensor, dim: int) -> torch.Tensor:
    return t.flip(dim).cumsum(dim).flip(dim)


class TorchEngine:
    """Fused PyTorch implementation with the native extension's function signatures."""

    @staticmethod
    def _edges_1d(off: torch.Tensor, L: int, ml: int, mr: int):
        pos = torch.arange(L, device=off.device, dtype=off.dtype)
        return _start_edges(pos, off[..., 0] * ml, L), _end_edges(pos, off[..., 1] * mr, L)

    @staticmethod
    def talk1d_forward(x: torch.Tensor, off: torch.Tensor, max_left: int, max_right: int) -> torch.Tensor:
        B, C, L = x.shape
        heads = off.shape[1]
        shape = (B, heads, C // heads, L)
        xv = x.view(shape)
        P = F.pad(torch.cumsum(xv, -1, dtype=off.dtype), (1, 0))
        start, end = TorchEngine._edges_1d(off, L, max_left, max_right)

        def interp(edge):
            k, f, _ = edge
            idx = k.unsqueeze(2).expand(shape)
            return P.gather(-1, idx) + f.unsqueeze(2) * xv.gather(-1, idx).to(off.dtype)

        y = (interp(end) - interp(start)) * (1.0 / (max_left + max_right + 1))
        return y.view(B, C, L).to(x.dtype)

    @staticmethod
    def talk1d_backward(g, x, off, max_left, max_right, need_dx, need_doff):
        B, C, L = x.shape
        heads = off.shape[1]
        shape = (B, heads, C // heads, L)
        gs = g.view(shape).to(off.dtype) * (1.0 / (max_left + max_right + 1))
        start, end = TorchEngine._edges_1d(off, L, max_left, max_right)
        dx = doff = None
        if need_dx:
            dP = gs.new_zeros(B, heads, C // heads, L + 1)
            for (k, f, _), sign in ((end, 1.0), (start, -1.0)):
                idx = k.unsqueeze(2).expand(shape)
                f = f.unsqueeze(2)
                dP.scatter_add_(-1, idx, sign * (1 - f) * gs)
                dP.scatter_add_(-1, idx + 1, sign * f * gs)
            dx = _suffix_sum(dP[..., 1:], -1).reshape(B, C, L).to(g.dtype)
        if need_doff:
            xv = x.view(shape)
            grads = []
            for (k, _, live), m in ((start, max_left), (end, max_right)):
                slope = xv.gather(-1, k.unsqueeze(2).expand(shape)).to(off.dtype)
                grads.append((gs * slope).sum(2) * m * live)
            doff = torch.stack(grads, -1)
        return dx, doff

    @staticmethod
    def _edges_2d(off: torch.Tensor, H: int, W: int, maxes: tuple[int, int, int, int]):
        ml, mr, mt, mb = maxes
        cols = torch.arange(W, device=off.device, dtype=off.dtype)
        rows = torch.arange(H, device=off.device, dtype=off.dtype)[:, None]
        return (
            _start_edges(cols, off[..., 0] * ml, W),
            _end_edges(cols, off[..., 1] * mr, W),
            _start_edges(rows, off[..., 2] * mt, H),
            _end_edges(rows, off[..., 3] * mb, H),
        )

    @staticmethod
    def _corner_terms(P, ev, eu, W1, R):
        """Flat index (B, heads, R, N) of P[kv, ku] and the fractions (B, heads, 1, N) of one box corner."""
        B, heads, H, W = ev[0].shape
        shape = (B, heads, 1, H * W)
        idx = (ev[0] * W1 + eu[0]).reshape(shape).expand(B, heads, R, H * W)
        return idx, ev[1].reshape(shape), eu[1].reshape(shape)

    @staticmethod
    def talk2d_forward(x, off, max_left, max_right, max_top, max_bottom):
        B, C, H, W = x.shape
        heads, R, W1 = off.shape[1], C // off.shape[1], W + 1
        P = F.pad(torch.cumsum(x, 2, dtype=off.dtype).cumsum(3), (1, 0, 1, 0))
        Pf = P.view(B, heads, R, (H + 1) * W1)
        el, er, et, eb = TorchEngine._edges_2d(off, H, W, (max_left, max_right, max_top, max_bottom))

        def corner(ev, eu):
            idx, fv, fu = TorchEngine._corner_terms(Pf, ev, eu, W1, R)
            p00, p01 = Pf.gather(-1, idx), Pf.gather(-1, idx + 1)
            p10, p11 = Pf.gather(-1, idx + W1), Pf.gather(-1, idx + W1 + 1)
            return (1 - fv) * ((1 - fu) * p00 + fu * p01) + fv * ((1 - fu) * p10 + fu * p11)

        box = corner(eb, er) - corner(eb, el) - corner(et, er) + corner(et, el)
        y = box * (1.0 / ((max_left + max_right + 1) * (max_top + max_bottom + 1)))
        return y.reshape(B, C, H, W).to(x.dtype), P

    @staticmethod
    def talk2d_backward(g, P, off, max_left, max_right, max_top, max_bottom, need_dx, need_doff):
        B, C, H, W = g.shape
        heads, R, W1 = off.shape[1], C // off.shape[1], W + 1
        Pf = P.view(B, heads, R, (H + 1) * W1)
        inv = 1.0 / ((max_left + max_right + 1) * (max_top + max_bottom + 1))
        gs = g.reshape(B, heads, R, H * W).to(off.dtype) * inv
        el, er, et, eb = TorchEngine._edges_2d(off, H, W, (max_left, max_right, max_top, max_bottom))
        corners = ((eb, er, 1.0), (eb, el, -1.0), (et, er, -1.0), (et, el, 1.0))
        dx = doff = None
        if need_dx:
            dP = torch.zeros_like(Pf)
            for ev, eu, sign in corners:
                idx, fv, fu = TorchEngine._corner_terms(Pf, ev, eu, W1, R)
                gv = sign * gs
                dP.scatter_add_(-1, idx, gv * (1 - fv) * (1 - fu))
                dP.scatter_add_(-1, idx + 1, gv * (1 - fv) * fu)
                dP.scatter_add_(-1, idx + W1, gv * fv * (1 - fu))
                dP.scatter_add_(-1, idx + W1 + 1, gv * fv * fu)
            dP = dP.view(B, C, H + 1, W1)[:, :, 1:, 1:]
            dx = _suffix_sum(_suffix_sum(dP, 2), 3).to(g.dtype).contiguous()
        if need_doff:

            def slopes(ev, eu):
                idx, fv, fu = TorchEngine._corner_terms(Pf, ev, eu, W1, R)
                p00, p01 = Pf.gather(-1, idx), Pf.gather(-1, idx + 1)
                p10, p11 = Pf.gather(-1, idx + W1), Pf.gather(-1, idx + W1 + 1)
                du = (1 - fv) * (p01 - p00) + fv * (p11 - p10)
                dv = (1 - fu) * (p10 - p00) + fu * (p11 - p01)
                return du, dv

            du_br, dv_br = slopes(eb, er)
            du_bl, dv_bl = slopes(eb, el)
            du_tr, dv_tr = slopes(et, er)
            du_tl, dv_tl = slopes(et, el)
            terms = (du_bl - du_tl, du_br - du_tr, dv_tr - dv_tl, dv_br - dv_bl)  # left, right, top, bottom
            grads = []
            for term, m, edge in zip(terms, (max_left, max_right, max_top, max_bottom), (el, er, et, eb)):
                s = (gs * term).sum(2).view(B, heads, H, W)
                grads.append(s * m * edge[2])
            doff = torch.stack(grads, -1)
        return dx, doff


TORCH_ENGINE = TorchEngine()
