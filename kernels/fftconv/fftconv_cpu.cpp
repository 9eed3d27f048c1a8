// Fused depthwise FFT long convolution on the CPU (float32 / float64), forward and backward, plus the two
// passes that fuse per-branch BatchNorm + weighted sum (MRConv training) around it.
//
//   out[b, i, c, t] = (irfft_n(rfft_n(x[b, c, :]) * k_f[i, c, :]))[t] + bias[c],   0 <= t < L
//
// x (B, C, L) and out (B, N, C, L) with any strides (a flattened channels-last map is read and written in
// place), k_f (N, C, n/2 + 1) complex contiguous: the spectra of the circular kernels (mrconvnext/ops/long_conv/
// layout.py has the lag convention; the caller picks n so that nothing wraps around). Parallel over (batch item, block of
// channels); each task gathers its sequences into a zero-tailed buffer, runs one batched in-place real FFT
// per direction with oneMKL DFTI (single-threaded inside the task) and scatters the cropped result, so the
// padded input, spectra and output of a block stay in the core's cache. torch.fft does the same arithmetic
// with whole-tensor or per-chunk calls, paying for padded copies, strided gathers and scatters in memory.
// Sums over the batch (kernel gradients, statistics) go to per-thread partials: no atomics, and the result
// is deterministic for a given thread count.//
// Files: dfti_plans.h (the DFTI descriptors and their cache), row_copies.h (gathers, scatters, row moments),
// branch_combine.h (the BatchNorm combine passes), this file (argument checks, forward, backward, operator registrations).
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "dfti_plans.h"
#include "row_copies.h"

namespace {

template <typename T>
using Complex = c10::complex<T>;

void check_cpu(std::initializer_list<const at::Tensor*> ts) {
  for (const at::Tensor* t : ts) TORCH_CHECK(!t->defined() || t->device().is_cpu(), "fftconv (cpu): expected CPU tensors");
}

// x (B, C, L) real, k_f (N, C, n/2+1) complex of the same precision, contiguous; returns (B, C, L, N, F).
std::array<int64_t, 5> check_conv_args(const at::Tensor& x, const at::Tensor& k_f, int64_t n, int64_t block) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble,
              "fftconv (cpu): x must be float32 or float64, got ", x.scalar_type());
  TORCH_CHECK(k_f.scalar_type() == c10::toComplexType(x.scalar_type()) && k_f.is_contiguous() && k_f.dim() == 3,
              "fftconv (cpu): k_f must be a contiguous (N, C, F) ", c10::toComplexType(x.scalar_type()), " tensor");
  TORCH_CHECK(x.dim() == 3, "fftconv (cpu): expected x (B, C, L)");
  const int64_t B = x.size(0), C = x.size(1), L = x.size(2), N = k_f.size(0), F = n / 2 + 1;
  TORCH_CHECK(n >= L && n < (int64_t(1) << 38), "fftconv (cpu): need L <= n, got L=", L, ", n=", n);
  TORCH_CHECK(k_f.size(1) == C && k_f.size(2) == F, "fftconv (cpu): k_f must be (N, ", C, ", ", F, ")");
  TORCH_CHECK(block >= 1 && block < (int64_t(1) << 24), "fftconv (cpu): block must be in [1, 2^24)");
  return {B, C, L, N, F};
}

void check_bnl(const at::Tensor& t, const char* name, at::ScalarType dtype, int64_t B, int64_t N, int64_t C, int64_t L) {
  TORCH_CHECK(t.scalar_type() == dtype, "fftconv (cpu): ", name, " must have dtype ", dtype);
  TORCH_CHECK(t.dim() == 4 && t.size(0) == B && t.size(1) == N && t.size(2) == C && t.size(3) == L,
              "fftconv (cpu): ", name, " must be (", B, ", ", N, ", ", C, ", ", L, ")");
}

// (threads, N, C, 3) per-thread [count, mean, m2] -> (N, C, 2) [mean, m2 / count] (biased variance).
at::Tensor combine_moments(const at::Tensor& partial) {
  const int64_t threads = partial.size(0), NC = partial.size(1) * partial.size(2);
  at::Tensor out = at::zeros({partial.size(1), partial.size(2), 2}, partial.options());
  const double* pp = partial.data_ptr<double>();
  double* op = out.data_ptr<double>();
  for (int64_t j = 0; j < NC; ++j) {
    double acc[3] = {0, 0, 0};
    for (int64_t r = 0; r < threads; ++r) {
      const double* p = pp + (r * NC + j) * 3;
      if (p[0] > 0) merge_moments(acc, p[0], p[1], p[2]);
    }
    op[2 * j] = acc[1];
    op[2 * j + 1] = acc[0] > 0 ? acc[2] / acc[0] : 0.0;
  }
  return out;
}

}  // namespace

// Forward; with_stats also returns the per-(i, c) [mean, biased variance] over (b, t) of the written values,
// (N, C, 2) float64 (the BatchNorm statistics of each branch, without a second pass over out): per-row moments merged
// per thread, then across threads.
// ones (N, C, L), optional (no bias then): the response of each kernel to a constant 1, ones[i, c, t] = sum of the
// taps whose lags reach inside [0, L) from t. Each row of x is then centred on its mean mu before the transform and
// mu * ones added back after it: the same result in exact arithmetic, but the transforms' rounding error scales with
// the centred row, not with mu. Without it, a row of mean 1000 and unit spread convolved with a short kernel came out
// 3.5e-4 of its spread off in float32, which a following BatchNorm turns into 3.5e-4 of a unit output.
at::Tensor fft_conv_forward(const at::Tensor& x, const at::Tensor& k_f, int64_t n, const c10::optional<at::Tensor>& bias,
                            at::Tensor& out, int64_t block, bool with_stats, const c10::optional<at::Tensor>& ones_opt) {
  check_cpu({&x, &k_f, &out});
  const std::array<int64_t, 5> dims = check_conv_args(x, k_f, n, block);
  const int64_t B = dims[0], C = dims[1], L = dims[2], N = dims[3], F = dims[4];
  check_bnl(out, "out", x.scalar_type(), B, N, C, L);
  at::Tensor bias_c;
  if (bias.has_value() && bias->defined()) {
    bias_c = bias->contiguous();
    TORCH_CHECK(bias_c.device().is_cpu() && bias_c.scalar_type() == x.scalar_type() && bias_c.numel() == C,
                "fftconv (cpu): bias must be a (C,) CPU tensor of x's dtype");
  }
  const bool centred = ones_opt.has_value() && ones_opt->defined();
  if (centred) {
    TORCH_CHECK(!bias_c.defined(), "fftconv (cpu): ones (centring) and bias are exclusive");
    TORCH_CHECK(ones_opt->is_contiguous() && ones_opt->device().is_cpu(), "fftconv (cpu): ones must be contiguous CPU");
    check_bnl(ones_opt->unsqueeze(0), "ones", x.scalar_type(), 1, N, C, L);
  }
  const int64_t threads = at::get_num_threads();
  // per thread and (i, c): [count, mean, sum of squared deviations]
  at::Tensor partial = with_stats ? at::zeros({threads, N, C, 3}, x.options().dtype(at::kDouble)) : at::Tensor();
  if (x.numel() == 0 || N == 0) return with_stats ? combine_moments(partial) : at::Tensor();
  block = std::min(block, C);
  const int64_t nblk = (C + block - 1) / block;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fft_conv_forward", [&] {
    using T = scalar_t;
    const T* xp = x.data_ptr<T>();
    const T* kp = reinterpret_cast<const T*>(k_f.data_ptr<Complex<T>>());
    const T* bp = bias_c.defined() ? bias_c.data_ptr<T>() : nullptr;
    T* op = out.data_ptr<T>();
    const T* onesp = centred ? ones_opt->data_ptr<T>() : nullptr;
    double* sp = with_stats ? partial.data_ptr<double>() : nullptr;
    const int64_t xs_b = x.stride(0), xs_c = x.stride(1), xs_t = x.stride(2);
    const int64_t os_b = out.stride(0), os_i = out.stride(1), os_c = out.stride(2), os_t = out.stride(3);
    const T inv_n = T(1) / static_cast<T>(n);
    // In-place transforms: a row of a task buffer holds x (n reals, zero from L on), then its spectrum (F complex,
    // 2F = n + 2 reals). One buffer for x / X and one for the current branch's product / result, instead of
    // separate input, spectrum, product and result buffers, keeps a task's working set in L2: at ConvNeXt-T
    // stage 1 the reparameterized forward took 9.7-10.6 ms instead of 13.0-13.8 ms. With a single kernel the
    // product overwrites X itself.
    const int64_t ld = 2 * F;
    at::parallel_for(0, B * nblk, 1, [&](int64_t begin, int64_t end) {
      std::vector<T> buf(block * ld), prod(N > 1 ? block * ld : 0), mu(centred ? block : 0);
      double* part = with_stats ? sp + at::get_thread_num() * N * C * 3 : nullptr;
      for (int64_t task = begin; task < end; ++task) {
        const int64_t b = task / nblk, c0 = (task % nblk) * block, rows = std::min(block, C - c0);
        const Plan& plan = plan_for<T>(n, rows);
        gather_rows(xp + b * xs_b + c0 * xs_c, xs_c, xs_t, rows, L, ld, buf.data());
        if (centred)
          for (int64_t c = 0; c < rows; ++c) {
            double m, m2;
            row_moments(buf.data() + c * ld, L, T(1), T(0), &m, &m2);
            mu[c] = static_cast<T>(m);
            for (int64_t t = 0; t < L; ++t) buf[c * ld + t] -= mu[c];
          }
        zero_tails(buf.data(), rows, ld, L, n);
        dfti_check(DftiComputeForward(plan.fwd, buf.data()), "DftiComputeForward");
        T* res = N > 1 ? prod.data() : buf.data();
        for (int64_t i = 0; i < N; ++i) {
          const T* kb = kp + 2 * (i * C + c0) * F;
          for (int64_t j = 0; j < rows * F; ++j) {  // complex product, written out (std::complex adds NaN checks)
            const T ar = buf[2 * j], ai = buf[2 * j + 1], br = kb[2 * j], bi = kb[2 * j + 1];
            res[2 * j] = ar * br - ai * bi;
            res[2 * j + 1] = ar * bi + ai * br;
          }
          dfti_check(DftiComputeBackward(plan.bwd, res), "DftiComputeBackward");
          const T* bb = bp ? bp + c0 : nullptr;
          T scale = inv_n;
          if (centred) {  // res = res / n + mu * ones, in place
            for (int64_t c = 0; c < rows; ++c) {
              const T* o = onesp + (i * C + c0 + c) * L;
              T* r = res + c * ld;
              for (int64_t t = 0; t < L; ++t) r[t] = r[t] * inv_n + mu[c] * o[t];
            }
            scale = T(1);
          }
          scatter_rows(res, ld, rows, L, scale, bb, op + b * os_b + i * os_i + c0 * os_c, os_c, os_t);
          if (part)
            for (int64_t c = 0; c < rows; ++c) {
              double m, m2;
              row_moments(res + c * ld, L, scale, bb ? bb[c] : T(0), &m, &m2);
              merge_moments(part + (i * C + c0 + c) * 3, static_cast<double>(L), m, m2);
            }
        }
      }
    });
  });
  return with_stats ? combine_moments(partial) : at::Tensor();
}

// Backward of fft_conv_forward (without the bias): with G_i = rfft_n(dy_i) and X = rfft_n(x),
//   grad_x = crop_L(irfft_n(sum_i G_i * conj(k_f[i])))        written to a tensor laid out like x;
//   grad_k_f[i] = sum_b G_bi * conj(X_b)                       un-normalized spectrum; the caller's irfft_n
// gives the gradient of the circular kernel. dy = grad (B, N, C, L); or, with coef (4, N, C) and z given,
// grad is g (B, C, L) and dy_i = coef[0, i] * g + coef[1, i] * (z_i - coef[3, i]) + coef[2, i] per channel (the
// BatchNorm backward folded into the gather, so the (B, N, C, L) gradient never exists). coef[3] is the branch mean
// in x's dtype: z_i - mean is then exact or nearly so, where coef1 * z_i + const would cancel for a large mean.
std::vector<at::Tensor> fft_conv_backward(const at::Tensor& x, const at::Tensor& k_f, int64_t n, const at::Tensor& grad,
                                          bool need_x, bool need_k, int64_t block,
                                          const c10::optional<at::Tensor>& z_opt,
                                          const c10::optional<at::Tensor>& coef_opt) {
  check_cpu({&x, &k_f, &grad});
  const std::array<int64_t, 5> dims = check_conv_args(x, k_f, n, block);
  const int64_t B = dims[0], C = dims[1], L = dims[2], N = dims[3], F = dims[4];
  const bool folded = coef_opt.has_value() && coef_opt->defined();
  at::Tensor z, coef;
  if (folded) {
    TORCH_CHECK(z_opt.has_value() && z_opt->defined(), "fftconv (cpu): coef needs z");
    z = *z_opt;
    coef = coef_opt->contiguous();
    check_cpu({&z, &coef});
    check_bnl(z, "z", x.scalar_type(), B, N, C, L);
    TORCH_CHECK(coef.scalar_type() == x.scalar_type() && coef.dim() == 3 && coef.size(0) == 4 && coef.size(1) == N &&
                    coef.size(2) == C,
                "fftconv (cpu): coef must be (4, ", N, ", ", C, ") of x's dtype");
    TORCH_CHECK(grad.scalar_type() == x.scalar_type() && grad.sizes() == x.sizes(),
                "fftconv (cpu): with coef, grad must be (", B, ", ", C, ", ", L, ") of x's dtype");
  } else {
    check_bnl(grad, "grad_y", x.scalar_type(), B, N, C, L);
  }
  at::Tensor grad_x = need_x ? at::empty_like(x) : at::Tensor();
  const int64_t threads = at::get_num_threads();
  at::Tensor partial = need_k ? at::zeros({threads, N, C, F}, k_f.options()) : at::Tensor();
  if (x.numel() == 0 || N == 0 || (!need_x && !need_k)) return {grad_x, need_k ? partial.sum(0) : at::Tensor()};
  block = std::min(block, C);
  const int64_t nblk = (C + block - 1) / block;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fft_conv_backward", [&] {
    using T = scalar_t;
    const T* xp = x.data_ptr<T>();
    const T* gp = grad.data_ptr<T>();
    const T* zp = folded ? z.data_ptr<T>() : nullptr;
    const T* cp = folded ? coef.data_ptr<T>() : nullptr;
    const T* kp = reinterpret_cast<const T*>(k_f.data_ptr<Complex<T>>());
    T* dxp = need_x ? grad_x.data_ptr<T>() : nullptr;
    T* pp = need_k ? reinterpret_cast<T*>(partial.data_ptr<Complex<T>>()) : nullptr;
    const int64_t xs_b = x.stride(0), xs_c = x.stride(1), xs_t = x.stride(2);
    // g: (B, C, L) when folded (no branch axis), else (B, N, C, L)
    const int64_t gs_b = grad.stride(0), gs_i = folded ? 0 : grad.stride(1), gs_c = grad.stride(folded ? 1 : 2),
                  gs_t = grad.stride(folded ? 2 : 3);
    const int64_t zs_b = folded ? z.stride(0) : 0, zs_i = folded ? z.stride(1) : 0, zs_c = folded ? z.stride(2) : 0,
                  zs_t = folded ? z.stride(3) : 0;
    const int64_t ds_b = need_x ? grad_x.stride(0) : 0, ds_c = need_x ? grad_x.stride(1) : 0,
                  ds_t = need_x ? grad_x.stride(2) : 0;
    const T inv_n = T(1) / static_cast<T>(n);
    // In-place transforms in rows of 2F reals, as in the forward: x -> X, each dy_i -> G_i, and the accumulated
    // grad_x spectrum -> grad_x, three task buffers instead of five.
    const int64_t ld = 2 * F;
    at::parallel_for(0, B * nblk, 1, [&](int64_t begin, int64_t end) {
      std::vector<T> xs(need_k ? block * ld : 0), gs(block * ld), acc(need_x ? block * ld : 0);
      std::vector<T> gbuf(folded ? block * L : 0);
      T* part = need_k ? pp + at::get_thread_num() * 2 * N * C * F : nullptr;
      for (int64_t task = begin; task < end; ++task) {
        const int64_t b = task / nblk, c0 = (task % nblk) * block, rows = std::min(block, C - c0);
        const Plan& plan = plan_for<T>(n, rows);
        if (need_k) {
          gather_rows(xp + b * xs_b + c0 * xs_c, xs_c, xs_t, rows, L, ld, xs.data());
          zero_tails(xs.data(), rows, ld, L, n);
          dfti_check(DftiComputeForward(plan.fwd, xs.data()), "DftiComputeForward");
        }
        if (need_x) std::fill(acc.begin(), acc.begin() + rows * ld, T(0));
        if (folded) gather_rows(gp + b * gs_b + c0 * gs_c, gs_c, gs_t, rows, L, L, gbuf.data());
        for (int64_t i = 0; i < N; ++i) {
          if (folded) {  // dy_i = A g + Bc (z_i - M) + D, row by row
            for (int64_t c = 0; c < rows; ++c) {
              const T A = cp[(0 * N + i) * C + c0 + c], Bc = cp[(1 * N + i) * C + c0 + c],
                      D = cp[(2 * N + i) * C + c0 + c], M = cp[(3 * N + i) * C + c0 + c];
              const T* zr = zp + b * zs_b + i * zs_i + (c0 + c) * zs_c;
              const T* gr = gbuf.data() + c * L;
              T* dst = gs.data() + c * ld;
              for (int64_t t = 0; t < L; ++t) dst[t] = A * gr[t] + Bc * (zr[t * zs_t] - M) + D;
            }
          } else {
            gather_rows(gp + b * gs_b + i * gs_i + c0 * gs_c, gs_c, gs_t, rows, L, ld, gs.data());
          }
          zero_tails(gs.data(), rows, ld, L, n);
          dfti_check(DftiComputeForward(plan.fwd, gs.data()), "DftiComputeForward");
          if (need_x) {
            const T* kb = kp + 2 * (i * C + c0) * F;
            for (int64_t j = 0; j < rows * F; ++j) {  // acc += G * conj(K)
              const T gr = gs[2 * j], gi = gs[2 * j + 1], kr = kb[2 * j], ki = kb[2 * j + 1];
              acc[2 * j] += gr * kr + gi * ki;
              acc[2 * j + 1] += gi * kr - gr * ki;
            }
          }
          if (need_k) {
            T* pb = part + 2 * (i * C + c0) * F;
            for (int64_t j = 0; j < rows * F; ++j) {  // partial += G * conj(X)
              const T gr = gs[2 * j], gi = gs[2 * j + 1], xr = xs[2 * j], xi = xs[2 * j + 1];
              pb[2 * j] += gr * xr + gi * xi;
              pb[2 * j + 1] += gi * xr - gr * xi;
            }
          }
        }
        if (need_x) {
          dfti_check(DftiComputeBackward(plan.bwd, acc.data()), "DftiComputeBackward");
          scatter_rows(acc.data(), ld, rows, L, inv_n, static_cast<const T*>(nullptr), dxp + b * ds_b + c0 * ds_c,
                       ds_c, ds_t);
        }
      }
    });
  });
  return {grad_x, need_k ? partial.sum(0) : at::Tensor()};
}

#include "branch_combine.h"

// The operators of this library, in the namespace TORCH_EXTENSION_NAME (the build's name, unique per source content:
// see mrconvnext/ops/native_build.py), called through torch.ops; CPU tensors only.
TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) {
  // out[b, i, c, :L] = irfft(rfft(x[b, c], n) * k_f[i, c])[:L] + bias[c]; x (B, C, L) and out (B, N, C, L) with any
  // strides, k_f (N, C, n/2+1) complex; block = channels per task; with_stats: also returns the (N, C, 2) float64
  // [mean, biased variance] of out over (b, t) (else an undefined tensor, None in Python)
  m.def("fft_conv_forward(Tensor x, Tensor k_f, int n, Tensor? bias, Tensor(a!) out, int block, "
        "bool with_stats=False, Tensor? ones=None) -> Tensor", &fft_conv_forward);
  // (grad_x laid out like x or None, un-normalized grad spectrum (N, C, F) or None) of fft_conv_forward without
  // bias; with z and coef (4, N, C), grad is g (B, C, L) and dy_i = coef0 g + coef1 (z_i - coef3) + coef2
  m.def("fft_conv_backward(Tensor x, Tensor k_f, int n, Tensor grad, bool need_x, bool need_k, int block, "
        "Tensor? z=None, Tensor? coef=None) -> Tensor[]", &fft_conv_backward);
  // out[b, c, t] = shift[c] + sum_i a[i, c] (z[b, i, c, t] - center[i, c])
  m.def("branch_combine(Tensor z, Tensor a, Tensor center, Tensor shift, Tensor(a!) out, int block) -> ()",
        &branch_combine);
  // (created, freed): DFTI descriptors of the per-thread plan caches so far
  m.def("plan_counts() -> (int, int)", &plan_counts);
  // (N + 1, C) float64: row 0 = sum over (b, t) of g, row 1 + i = sum of g * (z_i - mean_i)
  m.def("branch_grad_stats(Tensor g, Tensor z, Tensor mean, int block) -> Tensor", &branch_grad_stats);
}
