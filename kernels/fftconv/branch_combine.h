// The two passes around the fused FFT convolution that fuse MRConv's per-branch BatchNorm and alpha-weighted sum:
// the forward combine and the gradient statistics of its backward. Included by fftconv_cpu.cpp (one extension).
#pragma once

#include <ATen/core/Tensor.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <vector>

// out[b, c, t] = shift[c] + sum_i a[i, c] * (z[b, i, c, t] - center[i, c]); out (B, C, L) with any strides,
// z (B, N, C, L). Centring each branch on its mean keeps a z with a large mean from cancelling against shift.
void branch_combine(const at::Tensor& z, const at::Tensor& a, const at::Tensor& center, const at::Tensor& shift,
                    at::Tensor& out, int64_t block) {
  check_cpu({&z, &a, &center, &shift, &out});
  TORCH_CHECK(z.dim() == 4 && out.dim() == 3, "branch_combine: expected z (B, N, C, L) and out (B, C, L)");
  const int64_t B = z.size(0), N = z.size(1), C = z.size(2), L = z.size(3);
  TORCH_CHECK(out.size(0) == B && out.size(1) == C && out.size(2) == L, "branch_combine: out must be (B, C, L)");
  TORCH_CHECK(a.is_contiguous() && a.dim() == 2 && a.size(0) == N && a.size(1) == C && center.is_contiguous() &&
                  center.sizes() == a.sizes() && shift.is_contiguous() && shift.numel() == C,
              "branch_combine: a and center must be contiguous (N, C) and shift a (C,) tensor");
  TORCH_CHECK(z.scalar_type() == out.scalar_type() && a.scalar_type() == z.scalar_type() &&
                  center.scalar_type() == z.scalar_type() && shift.scalar_type() == z.scalar_type(),
              "branch_combine: z, a, center, shift and out must share a dtype");
  TORCH_CHECK(block >= 1, "branch_combine: block must be >= 1");
  if (out.numel() == 0) return;
  block = std::min(block, C);
  const int64_t nblk = (C + block - 1) / block;
  AT_DISPATCH_FLOATING_TYPES(z.scalar_type(), "branch_combine", [&] {
    using T = scalar_t;
    const T* zp = z.data_ptr<T>();
    const T* ap = a.data_ptr<T>();
    const T* mp = center.data_ptr<T>();
    const T* sp = shift.data_ptr<T>();
    T* op = out.data_ptr<T>();
    const int64_t zs_b = z.stride(0), zs_i = z.stride(1), zs_c = z.stride(2), zs_t = z.stride(3);
    at::parallel_for(0, B * nblk, 1, [&](int64_t begin, int64_t end) {
      std::vector<T> tmp(block * L);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t b = task / nblk, c0 = (task % nblk) * block, rows = std::min(block, C - c0);
        for (int64_t c = 0; c < rows; ++c) {
          T* dst = tmp.data() + c * L;
          std::fill(dst, dst + L, sp[c0 + c]);
          for (int64_t i = 0; i < N; ++i) {
            const T ai = ap[i * C + c0 + c], mi = mp[i * C + c0 + c];
            const T* zr = zp + b * zs_b + i * zs_i + (c0 + c) * zs_c;
            for (int64_t t = 0; t < L; ++t) dst[t] += ai * (zr[t * zs_t] - mi);
          }
        }
        scatter_rows(tmp.data(), L, rows, L, T(1), static_cast<const T*>(nullptr),
                     op + b * out.stride(0) + c0 * out.stride(1), out.stride(1), out.stride(2));
      }
    });
  });
}

// Row 0: sum_{b,t} g[b, c, t]; row 1 + i: sum_{b,t} g[b, c, t] * (z[b, i, c, t] - mean[i, c]). (N + 1, C) float64,
// accumulated in double: sum g z - mean sum g would cancel for a large mean.
at::Tensor branch_grad_stats(const at::Tensor& g, const at::Tensor& z, const at::Tensor& mean, int64_t block) {
  check_cpu({&g, &z, &mean});
  TORCH_CHECK(g.dim() == 3 && z.dim() == 4, "branch_grad_stats: expected g (B, C, L) and z (B, N, C, L)");
  const int64_t B = z.size(0), N = z.size(1), C = z.size(2), L = z.size(3);
  TORCH_CHECK(g.size(0) == B && g.size(1) == C && g.size(2) == L && g.scalar_type() == z.scalar_type(),
              "branch_grad_stats: g must be (B, C, L) of z's dtype");
  TORCH_CHECK(mean.scalar_type() == at::kDouble && mean.is_contiguous() && mean.dim() == 2 && mean.size(0) == N &&
                  mean.size(1) == C,
              "branch_grad_stats: mean must be a contiguous (N, C) float64 tensor");
  TORCH_CHECK(block >= 1, "branch_grad_stats: block must be >= 1");
  at::Tensor out = at::zeros({N + 1, C}, z.options().dtype(at::kDouble));
  if (z.numel() == 0) return out;
  block = std::min(block, C);
  const int64_t nblk = (C + block - 1) / block;
  AT_DISPATCH_FLOATING_TYPES(z.scalar_type(), "branch_grad_stats", [&] {
    using T = scalar_t;
    const T* gp = g.data_ptr<T>();
    const T* zp = z.data_ptr<T>();
    const double* mp = mean.data_ptr<double>();
    double* op = out.data_ptr<double>();
    const int64_t zs_b = z.stride(0), zs_i = z.stride(1), zs_c = z.stride(2), zs_t = z.stride(3);
    at::parallel_for(0, nblk, 1, [&](int64_t begin, int64_t end) {  // a task owns its channels: no races
      std::vector<T> gbuf(block * L);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t c0 = task * block, rows = std::min(block, C - c0);
        for (int64_t b = 0; b < B; ++b) {
          gather_rows(gp + b * g.stride(0) + c0 * g.stride(1), g.stride(1), g.stride(2), rows, L, L, gbuf.data());
          for (int64_t c = 0; c < rows; ++c) {
            const T* gr = gbuf.data() + c * L;
            double s[8] = {};
            int64_t t = 0;
            for (; t + 8 <= L; t += 8)
              for (int j = 0; j < 8; ++j) s[j] += static_cast<double>(gr[t + j]);
            double acc = 0;
            for (int j = 0; j < 8; ++j) acc += s[j];
            for (; t < L; ++t) acc += gr[t];
            op[c0 + c] += acc;
            for (int64_t i = 0; i < N; ++i) {
              const T* zr = zp + b * zs_b + i * zs_i + (c0 + c) * zs_c;
              const double m = mp[i * C + c0 + c];
              double q[8] = {};
              t = 0;
              if (zs_t == 1)
                for (; t + 8 <= L; t += 8)
                  for (int j = 0; j < 8; ++j) q[j] += static_cast<double>(gr[t + j]) * (static_cast<double>(zr[t + j]) - m);
              double dacc = 0;
              for (int j = 0; j < 8; ++j) dacc += q[j];
              for (; t < L; ++t) dacc += static_cast<double>(gr[t]) * (static_cast<double>(zr[t * zs_t]) - m);
              op[(1 + i) * C + c0 + c] += dacc;
            }
          }
        }
      }
    });
  });
  return out;
}
