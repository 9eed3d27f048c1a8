"""Independent reference computations for the tests (naive, float64; package code only to tell a branch's kind)."""

import math

import torch
import torch.nn.functional as F

from mrconvnext.layers.kernel_params import DilatedKernel, FourierKernel, FourierSparseKernel, SparseKernel


def shifted_sum_conv(x: torch.Tensor, kernel: torch.Tensor, zero_lag: int) -> torch.Tensor:
    """y[b, c, t] = sum_j kernel[c, j] * x[b, c, t - (j - zero_lag)], zero outside [0, L): a loop over taps."""
    B, C, L = x.shape
    y = torch.zeros_like(x)
    for j in range(kernel.shape[-1]):
        lag = j - zero_lag
        if abs(lag) >= L:
            continue
        if lag >= 0:
            y[..., lag:] += kernel[:, j, None] * x[..., : L - lag]
        else:
            y[..., :lag] += kernel[:, j, None] * x[..., -lag:]
    return y


def remap_lags_loop(kernel: torch.Tensor, zero_lag: int, width: int, new_width: int, new_length: int | None = None):
    """The 2-D lag remap rule tap by tap: ``{new_lag: (C,) weight}`` (see ``mrconvnext.ops.long_conv.lag_remap``).

    Lag ``tau = q * width + r`` (``0 <= r < width``) is read as ``(q, r)`` on ``width - r`` columns and as
    ``(q + 1, r - width)`` on ``r`` columns; each reading with ``|dx| < new_width`` goes to ``dy * new_width + dx``
    with its column fraction; lags ``|tau'| >= new_length`` are dropped."""
    out: dict[int, torch.Tensor] = {}
    for j in range(kernel.shape[-1]):
        q, r = divmod(j - zero_lag, width)
        readings = [(q, r, (width - r) / width)]
        if r > 0:
            readings.append((q + 1, r - width, r / width))
        for dy, dx, frac in readings:
            if abs(dx) >= new_width:
                continue
            lag = dy * new_width + dx
            if new_length is not None and abs(lag) >= new_length:
                continue
            out[lag] = out.get(lag, 0) + frac * kernel[..., j].double()
    return out


def kernel_2d(kernel: torch.Tensor, zero_lag: int, size: tuple[int, int]) -> torch.Tensor:
    """Identity 1 (``shared/notes/gpu-design.md``) by a loop: the ``(C, 2H - 1, 2W - 1)`` 2-D kernel
    ``K2[a, d] = kernel[zero_lag + a * W + d]`` (0 where the index leaves the kernel) that the flattened convolution
    of an ``H x W`` map is."""
    H, W = size
    K2 = torch.zeros(kernel.shape[0], 2 * H - 1, 2 * W - 1, dtype=torch.float64)
    for a in range(-(H - 1), H):
        for d in range(-(W - 1), W):
            j = zero_lag + a * W + d
            if 0 <= j < kernel.shape[-1]:
                K2[:, a + H - 1, d + W - 1] = kernel[:, j].double()
    return K2


def conv2d_same(x: torch.Tensor, K2: torch.Tensor) -> torch.Tensor:
    """``y[b, c, i, j] = sum_{a, d} K2[c, a, d] x[b, c, i - a, j - d]`` (centred, zero padded) by ``F.conv2d``."""
    C, kh, kw = K2.shape
    return F.conv2d(x.double(), K2.flip(-2, -1).unsqueeze(1), padding=(kh // 2, kw // 2), groups=C)


# --- TaLK (Lioutas & Guo, 2020): windows with real-valued edges, by loops over cells


def overlap(lo: float, hi: float, j: int) -> float:
    """Length of [lo, hi] ∩ [j, j + 1]: the weight of cell j in a window with real edges."""
    return max(0.0, min(hi, j + 1) - max(lo, j))


def naive_talk1d(x: torch.Tensor, off: torch.Tensor, ml: int, mr: int) -> torch.Tensor:
    """O(L * K) loops: y_i = sum_j |[a_l, a_r + 1] ∩ [j, j + 1]| x_j / (ml + mr + 1), edges clamped."""
    B, C, L = x.shape
    heads = off.shape[1]
    R = C // heads
    y = torch.zeros_like(x)
    for b in range(B):
        for h in range(heads):
            for i in range(L):
                lo = min(max(i - off[b, h, i, 0].item() * ml, 0.0), L - 1)
                hi = min(max(i + off[b, h, i, 1].item() * mr, 0.0), L - 1) + 1
                for j in range(math.floor(lo), min(L, math.ceil(hi))):
                    y[b, h * R : (h + 1) * R, i] += overlap(lo, hi, j) * x[b, h * R : (h + 1) * R, j]
    return y / (ml + mr + 1)


def paper_eq5_talk1d(x: torch.Tensor, off: torch.Tensor, ml: int, mr: int) -> torch.Tensor:
    """Eq. 2-5 and 8 literally: S_0 = 0, S_t = S_{t-1} + x_t (1-based), floor/ceil interpolation."""
    B, C, L = x.shape
    heads = off.shape[1]
    R = C // heads
    y = torch.zeros_like(x)
    for b in range(B):
        for c in range(C):
            S = [0.0]
            for t in range(L):
                S.append(S[-1] + x[b, c, t].item())  # S[t] in 1-based token indexing
            for i in range(L):  # 0-based i is token i + 1
                h = c // R
                al = min(max(i + 1 - off[b, h, i, 0].item() * ml, 1.0), L)
                ar = min(max(i + 1 + off[b, h, i, 1].item() * mr, 1.0), L)
                gl = math.ceil(al) - al
                gr = ar - math.floor(ar)
                s_left = gl * S[math.floor(al) - 1] + (1 - gl) * S[math.ceil(al) - 1]
                s_right = (1 - gr) * S[math.floor(ar)] + gr * S[math.ceil(ar)]
                y[b, c, i] = (s_right - s_left) / (ml + mr + 1)
    return y


def naive_talk2d(x: torch.Tensor, off: torch.Tensor, ml: int, mr: int, mt: int, mb: int) -> torch.Tensor:
    """Loops over each box: weight of pixel (r, s) = row overlap * column overlap, normalized by max area."""
    B, C, H, W = x.shape
    heads = off.shape[1]
    R = C // heads
    y = torch.zeros_like(x)
    for b in range(B):
        for h in range(heads):
            for i in range(H):
                for j in range(W):
                    o = off[b, h, i, j].tolist()
                    c_lo = min(max(j - o[0] * ml, 0.0), W - 1)
                    c_hi = min(max(j + o[1] * mr, 0.0), W - 1) + 1
                    r_lo = min(max(i - o[2] * mt, 0.0), H - 1)
                    r_hi = min(max(i + o[3] * mb, 0.0), H - 1) + 1
                    acc = torch.zeros(R, dtype=x.dtype)
                    for r in range(math.floor(r_lo), min(H, math.ceil(r_hi))):
                        for s in range(math.floor(c_lo), min(W, math.ceil(c_hi))):
                            w = overlap(r_lo, r_hi, r) * overlap(c_lo, c_hi, s)
                            acc += w * x[b, h * R : (h + 1) * R, r, s]
                    y[b, h * R : (h + 1) * R, i, j] = acc
    return y / ((ml + mr + 1) * (mt + mb + 1))


# --- LightConv / DynamicConv: tap loops in plain Python


def lags(K: int, causal: bool) -> list[int]:
    """Documented convention: tap k has lag k - zero_lag (positive = past)."""
    zero_lag = 0 if causal else (K - 1) // 2
    return [k - zero_lag for k in range(K)]


def naive_light(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """y[b, c, t] = bias[c] + sum_k w[c // R, k] * x[b, c, t - lag_k]: :func:`naive_dynamic` with the same
    ``(H, K)`` kernel at every batch item and position."""
    B, _, n = x.shape
    return naive_dynamic(x, w[None, :, None, :].expand(B, -1, n, -1), bias, causal)


def naive_dynamic(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """y[b, c, t] = bias[c] + sum_k w[b, c // R, t, k] * x[b, c, t - lag_k], plain Python loops."""
    B, C, n = x.shape
    H, K = w.shape[1], w.shape[3]
    R = C // H
    xs, ws = x.tolist(), w.tolist()
    out = [[[0.0] * n for _ in range(C)] for _ in range(B)]
    for b in range(B):
        for c in range(C):
            for t in range(n):
                acc = 0.0 if bias is None else float(bias[c])
                for k, lag in enumerate(lags(K, causal)):
                    s = t - lag
                    if 0 <= s < n:
                        acc += ws[b][c // R][t][k] * xs[b][c][s]
                out[b][c][t] = acc
    return torch.tensor(out, dtype=x.dtype)


# --- MRConv kernels


def fourier_lags(modes: torch.Tensor, size: int) -> torch.Tensor:
    """Naive inverse real DFT (norm='ortho') of the low modes; returns values at circular indices 0..size-1."""
    c = modes.double()[..., 0] + 1j * modes.double()[..., 1]  # (C, m)
    t = torch.arange(size, dtype=torch.float64)
    out = torch.zeros(c.shape[0], size, dtype=torch.float64)
    for f in range(c.shape[1]):
        # the real DFT keeps DC and Nyquist once and every other mode with its conjugate twin
        weight = 1.0 if f == 0 or (size % 2 == 0 and f == size // 2) else 2.0
        out += weight * (c[:, f : f + 1] * torch.exp(2j * math.pi * f * t / size)).real
    return out / math.sqrt(size)


def dense_kernel(lags: dict[int, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """``{lag: (C,) value}`` as a symmetric ``(C, 2R - 1)`` kernel and its zero lag."""
    R = max(abs(lag) for lag in lags) + 1
    k = torch.zeros(next(iter(lags.values())).shape[0], 2 * R - 1, dtype=torch.float64)
    for lag, v in lags.items():
        k[:, lag + R - 1] = v
    return k, R - 1


def branch_kernel_reference(branch, reach: int, causal: bool) -> torch.Tensor:
    """``(C, P)`` float64: an MRConv branch kernel rebuilt from its parameters by naive formulas, lag by lag, in the
    layout of ``reach`` (``P = reach`` causal, else ``2 reach - 1`` centred on lag 0)."""
    C = branch.dim
    size = reach if causal else 2 * reach - 1
    zero = 0 if causal else reach - 1
    k = torch.zeros(C, size, dtype=torch.float64)

    def put(c, lag, v):
        if -(reach - 1) <= lag <= reach - 1 and (lag >= 0 or not causal):
            k[c, lag + zero] += v

    if isinstance(branch, FourierSparseKernel):
        return branch_kernel_reference(branch.fourier, reach, causal) + branch_kernel_reference(
            branch.sparse, reach, causal
        )
    if isinstance(branch, FourierKernel):
        vals = fourier_lags(branch.modes.detach(), branch.size)
        for idx in range(branch.size):
            lag = idx if idx < branch.reach else idx - branch.size
            for c in range(C):
                put(c, lag, vals[c, idx])
    elif isinstance(branch, SparseKernel):
        for c in range(C):
            for p, w in zip(branch.positions[c].tolist(), branch.weight[c].detach().double()):
                put(c, p - branch.zero_lag, w)
    elif isinstance(branch, DilatedKernel):
        n = branch.weight.shape[1]
        js = range(n) if causal else range(-(n + 1) // 2 + 1, (n + 1) // 2)
        for c in range(C):
            for col, j in enumerate(js):
                put(c, j * branch.dilation, branch.weight[c, col].detach().double())
    else:  # dense
        for c in range(C):
            for idx in range(branch.size):
                put(c, idx - branch.zero_lag, branch.weight[c, idx].detach().double())
    return k
