// Fused forward and backward of the depthwise FFT long convolution on the CPU (float32).
//
//   out[b, i, c, t] = (irfft_n(rfft_n(x[b, c, :]) * k_f[i, c, :]))[t] + bias[c],   0 <= t < L
//
// x (B, C, L) and out (B, N, C, L) with any strides (a flattened channels-last map is read and written in
// place), k_f (N, C, n/2 + 1) complex64 contiguous: the spectra of the circular kernels (see long_conv.py for
// the lag convention; the caller picks n so that nothing wraps around). Parallel over (batch item, block of
// channels); each task gathers its sequences into a zero-tailed buffer, runs one batched real FFT per
// direction with oneMKL DFTI (single-threaded inside the task) and scatters the cropped result, so the
// padded input, spectra and output of a block stay in the core's cache. torch.fft does the same arithmetic
// with whole-tensor or per-chunk calls, paying for padded copies, strided gathers and scatters in memory.
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "dfti.h"

namespace {

struct Plan {
  DFTI_DESCRIPTOR_HANDLE fwd = nullptr;
  DFTI_DESCRIPTOR_HANDLE bwd = nullptr;
};

void dfti_check(MKL_LONG status, const char* what) {
  TORCH_CHECK(status == 0, "fftconv (cpu): ", what, " failed: ", DftiErrorMessage(status));
}

DFTI_DESCRIPTOR_HANDLE make_descriptor(int64_t n, int64_t rows, bool forward) {
  const MKL_LONG spec = n / 2 + 1;
  DFTI_DESCRIPTOR_HANDLE h = nullptr;
  dfti_check(DftiCreateDescriptor_s_1d(&h, DFTI_REAL, static_cast<MKL_LONG>(n)), "DftiCreateDescriptor");
  dfti_check(DftiSetValue(h, DFTI_PLACEMENT, DFTI_NOT_INPLACE), "DFTI_PLACEMENT");
  dfti_check(DftiSetValue(h, DFTI_CONJUGATE_EVEN_STORAGE, DFTI_COMPLEX_COMPLEX), "DFTI_CONJUGATE_EVEN_STORAGE");
  dfti_check(DftiSetValue(h, DFTI_NUMBER_OF_TRANSFORMS, static_cast<MKL_LONG>(rows)), "DFTI_NUMBER_OF_TRANSFORMS");
  dfti_check(DftiSetValue(h, DFTI_INPUT_DISTANCE, forward ? static_cast<MKL_LONG>(n) : spec), "DFTI_INPUT_DISTANCE");
  dfti_check(DftiSetValue(h, DFTI_OUTPUT_DISTANCE, forward ? spec : static_cast<MKL_LONG>(n)),
             "DFTI_OUTPUT_DISTANCE");
  dfti_check(DftiSetValue(h, DFTI_THREAD_LIMIT, static_cast<MKL_LONG>(1)), "DFTI_THREAD_LIMIT");  // one task, one thread
  dfti_check(DftiCommitDescriptor(h), "DftiCommitDescriptor");
  return h;
}

// Committed descriptors per thread (a task never shares its descriptor), kept for the thread's lifetime.
const Plan& plan_for(int64_t n, int64_t rows) {
  thread_local std::unordered_map<uint64_t, Plan> plans;
  const uint64_t key = (static_cast<uint64_t>(n) << 24) | static_cast<uint64_t>(rows);
  auto it = plans.find(key);
  if (it == plans.end()) {
    Plan p;
    p.fwd = make_descriptor(n, rows, true);
    p.bwd = make_descriptor(n, rows, false);
    it = plans.emplace(key, p).first;
  }
  return it->second;
}

// rows sequences of length L (element (c, t) at src[c * sc + t * st]) -> the first L columns of dst (rows, n).
void gather_rows(const float* src, int64_t sc, int64_t st, int64_t rows, int64_t L, int64_t n, float* dst) {
  if (sc == 1) {  // channels-last: walk the channels of one position contiguously
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = 0; c < rows; ++c) dst[c * n + t] = src[t * st + c];
  } else {
    for (int64_t c = 0; c < rows; ++c)
      for (int64_t t = 0; t < L; ++t) dst[c * n + t] = src[c * sc + t * st];
  }
}

// dst(c, t) = src[c * n + t] * scale + bias[c] for t < L (bias may be null), dst element at c * dc + t * dt.
void scatter_rows(const float* src, int64_t n, int64_t rows, int64_t L, float scale, const float* bias, float* dst,
                  int64_t dc, int64_t dt) {
  if (dc == 1) {
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = 0; c < rows; ++c) dst[t * dt + c] = src[c * n + t] * scale + (bias ? bias[c] : 0.0f);
  } else {
    for (int64_t c = 0; c < rows; ++c) {
      const float bc = bias ? bias[c] : 0.0f;
      for (int64_t t = 0; t < L; ++t) dst[c * dc + t * dt] = src[c * n + t] * scale + bc;
    }
  }
}

}  // namespace

void fft_conv_forward(const at::Tensor& x, const at::Tensor& k_f, int64_t n, const c10::optional<at::Tensor>& bias,
                      at::Tensor& out, int64_t block) {
  TORCH_CHECK(x.device().is_cpu() && k_f.device().is_cpu() && out.device().is_cpu(),
              "fftconv (cpu): expected CPU tensors");
  TORCH_CHECK(x.scalar_type() == at::kFloat && out.scalar_type() == at::kFloat, "fftconv (cpu): x and out must be float32");
  TORCH_CHECK(k_f.scalar_type() == at::kComplexFloat && k_f.is_contiguous() && k_f.dim() == 3,
              "fftconv (cpu): k_f must be a contiguous (N, C, F) complex64 tensor");
  TORCH_CHECK(x.dim() == 3 && out.dim() == 4, "fftconv (cpu): expected x (B, C, L) and out (B, N, C, L)");
  const int64_t B = x.size(0), C = x.size(1), L = x.size(2), N = k_f.size(0), F = n / 2 + 1;
  TORCH_CHECK(n >= L && n < (int64_t(1) << 40), "fftconv (cpu): need L <= n, got L=", L, ", n=", n);
  TORCH_CHECK(k_f.size(1) == C && k_f.size(2) == F, "fftconv (cpu): k_f must be (N, ", C, ", ", F, ")");
  TORCH_CHECK(out.size(0) == B && out.size(1) == N && out.size(2) == C && out.size(3) == L,
              "fftconv (cpu): out must be (", B, ", ", N, ", ", C, ", ", L, ")");
  TORCH_CHECK(block >= 1 && block < (int64_t(1) << 24), "fftconv (cpu): block must be in [1, 2^24)");
  const float* bp = nullptr;
  at::Tensor bias_c;
  if (bias.has_value() && bias->defined()) {
    bias_c = bias->contiguous();
    TORCH_CHECK(bias_c.device().is_cpu() && bias_c.scalar_type() == at::kFloat && bias_c.numel() == C,
                "fftconv (cpu): bias must be a float32 (C,) CPU tensor");
    bp = bias_c.data_ptr<float>();
  }
  if (x.numel() == 0 || N == 0) return;
  block = std::min(block, C);
  const int64_t nblk = (C + block - 1) / block;
  const float* xp = x.data_ptr<float>();
  const auto* kp = reinterpret_cast<const float*>(k_f.data_ptr<c10::complex<float>>());
  float* op = out.data_ptr<float>();
  const int64_t xs_b = x.stride(0), xs_c = x.stride(1), xs_t = x.stride(2);
  const int64_t os_b = out.stride(0), os_i = out.stride(1), os_c = out.stride(2), os_t = out.stride(3);
  const float inv_n = 1.0f / static_cast<float>(n);

  at::parallel_for(0, B * nblk, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> in(block * n, 0.0f);  // columns [L, n) stay zero: the padding
    std::vector<float> res(block * n);
    std::vector<float> spec(2 * block * F), prod(2 * block * F);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / nblk, c0 = (task % nblk) * block, rows = std::min(block, C - c0);
      const Plan& plan = plan_for(n, rows);
      gather_rows(xp + b * xs_b + c0 * xs_c, xs_c, xs_t, rows, L, n, in.data());
      dfti_check(DftiComputeForward(plan.fwd, in.data(), spec.data()), "DftiComputeForward");
      for (int64_t i = 0; i < N; ++i) {
        const float* kb = kp + 2 * (i * C + c0) * F;
        for (int64_t j = 0; j < rows * F; ++j) {  // complex product, written out (std::complex adds NaN checks)
          const float ar = spec[2 * j], ai = spec[2 * j + 1], br = kb[2 * j], bi = kb[2 * j + 1];
          prod[2 * j] = ar * br - ai * bi;
          prod[2 * j + 1] = ar * bi + ai * br;
        }
        dfti_check(DftiComputeBackward(plan.bwd, prod.data(), res.data()), "DftiComputeBackward");
        scatter_rows(res.data(), n, rows, L, inv_n, bp ? bp + c0 : nullptr, op + b * os_b + i * os_i + c0 * os_c, os_c,
                     os_t);
      }
    }
  });
}

// Backward of fft_conv_forward (without the bias): with G_i = rfft_n(grad_y[:, i]) and X = rfft_n(x),
//   grad_x = crop_L(irfft_n(sum_i G_i * conj(k_f[i])))        written to a tensor laid out like x;
//   grad_k_f[i] = sum_b G_bi * conj(X_b)                       un-normalized spectrum; the caller's irfft_n
// gives the gradient of the circular kernel. Same tasks as the forward; the sum over b is accumulated per
// thread (no atomics, deterministic for a fixed thread count) and the thread partials are added at the end.
std::vector<at::Tensor> fft_conv_backward(const at::Tensor& x, const at::Tensor& k_f, int64_t n, const at::Tensor& grad_y,
                                          bool need_x, bool need_k, int64_t block) {
  TORCH_CHECK(x.device().is_cpu() && k_f.device().is_cpu() && grad_y.device().is_cpu(),
              "fftconv (cpu): expected CPU tensors");
  TORCH_CHECK(x.scalar_type() == at::kFloat && grad_y.scalar_type() == at::kFloat,
              "fftconv (cpu): x and grad_y must be float32");
  TORCH_CHECK(k_f.scalar_type() == at::kComplexFloat && k_f.is_contiguous() && k_f.dim() == 3,
              "fftconv (cpu): k_f must be a contiguous (N, C, F) complex64 tensor");
  TORCH_CHECK(x.dim() == 3 && grad_y.dim() == 4, "fftconv (cpu): expected x (B, C, L) and grad_y (B, N, C, L)");
  const int64_t B = x.size(0), C = x.size(1), L = x.size(2), N = k_f.size(0), F = n / 2 + 1;
  TORCH_CHECK(n >= L && n < (int64_t(1) << 40), "fftconv (cpu): need L <= n, got L=", L, ", n=", n);
  TORCH_CHECK(k_f.size(1) == C && k_f.size(2) == F, "fftconv (cpu): k_f must be (N, ", C, ", ", F, ")");
  TORCH_CHECK(grad_y.size(0) == B && grad_y.size(1) == N && grad_y.size(2) == C && grad_y.size(3) == L,
              "fftconv (cpu): grad_y must be (", B, ", ", N, ", ", C, ", ", L, ")");
  TORCH_CHECK(block >= 1 && block < (int64_t(1) << 24), "fftconv (cpu): block must be in [1, 2^24)");
  at::Tensor grad_x = need_x ? at::empty_like(x) : at::Tensor();
  const int64_t threads = at::get_num_threads();
  at::Tensor partial = need_k ? at::zeros({threads, N, C, F}, k_f.options()) : at::Tensor();
  if (x.numel() == 0 || N == 0 || (!need_x && !need_k))
    return {grad_x, need_k ? partial.sum(0) : at::Tensor()};
  block = std::min(block, C);
  const int64_t nblk = (C + block - 1) / block;
  const float* xp = x.data_ptr<float>();
  const float* gp = grad_y.data_ptr<float>();
  const auto* kp = reinterpret_cast<const float*>(k_f.data_ptr<c10::complex<float>>());
  float* dxp = need_x ? grad_x.data_ptr<float>() : nullptr;
  auto* pp = need_k ? reinterpret_cast<float*>(partial.data_ptr<c10::complex<float>>()) : nullptr;
  const int64_t xs_b = x.stride(0), xs_c = x.stride(1), xs_t = x.stride(2);
  const int64_t gs_b = grad_y.stride(0), gs_i = grad_y.stride(1), gs_c = grad_y.stride(2), gs_t = grad_y.stride(3);
  const int64_t ds_b = need_x ? grad_x.stride(0) : 0, ds_c = need_x ? grad_x.stride(1) : 0,
                ds_t = need_x ? grad_x.stride(2) : 0;
  const float inv_n = 1.0f / static_cast<float>(n);

  at::parallel_for(0, B * nblk, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> in(block * n, 0.0f);  // columns [L, n) stay zero: the padding
    std::vector<float> res(need_x ? block * n : 0);
    std::vector<float> xs(need_k ? 2 * block * F : 0), gs(2 * block * F), acc(need_x ? 2 * block * F : 0);
    float* part = need_k ? pp + at::get_thread_num() * 2 * N * C * F : nullptr;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / nblk, c0 = (task % nblk) * block, rows = std::min(block, C - c0);
      const Plan& plan = plan_for(n, rows);
      if (need_k) {
        gather_rows(xp + b * xs_b + c0 * xs_c, xs_c, xs_t, rows, L, n, in.data());
        dfti_check(DftiComputeForward(plan.fwd, in.data(), xs.data()), "DftiComputeForward");
      }
      if (need_x) std::fill(acc.begin(), acc.begin() + 2 * rows * F, 0.0f);
      for (int64_t i = 0; i < N; ++i) {
        gather_rows(gp + b * gs_b + i * gs_i + c0 * gs_c, gs_c, gs_t, rows, L, n, in.data());
        dfti_check(DftiComputeForward(plan.fwd, in.data(), gs.data()), "DftiComputeForward");
        if (need_x) {
          const float* kb = kp + 2 * (i * C + c0) * F;
          for (int64_t j = 0; j < rows * F; ++j) {  // acc += G * conj(K)
            const float gr = gs[2 * j], gi = gs[2 * j + 1], kr = kb[2 * j], ki = kb[2 * j + 1];
            acc[2 * j] += gr * kr + gi * ki;
            acc[2 * j + 1] += gi * kr - gr * ki;
          }
        }
        if (need_k) {
          float* pb = part + 2 * (i * C + c0) * F;
          for (int64_t j = 0; j < rows * F; ++j) {  // partial += G * conj(X)
            const float gr = gs[2 * j], gi = gs[2 * j + 1], xr = xs[2 * j], xi = xs[2 * j + 1];
            pb[2 * j] += gr * xr + gi * xi;
            pb[2 * j + 1] += gi * xr - gr * xi;
          }
        }
      }
      if (need_x) {
        dfti_check(DftiComputeBackward(plan.bwd, acc.data(), res.data()), "DftiComputeBackward");
        scatter_rows(res.data(), n, rows, L, inv_n, nullptr, dxp + b * ds_b + c0 * ds_c, ds_c, ds_t);
      }
    }
  });
  return {grad_x, need_k ? partial.sum(0) : at::Tensor()};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Fused depthwise FFT convolution forward and backward, CPU (oneMKL DFTI from libtorch_cpu)";
  m.def("fft_conv_forward", &fft_conv_forward,
        "out[b, i, c, :L] = irfft(rfft(x[b, c], n) * k_f[i, c])[:L] + bias[c]; x (B, C, L) and out (B, N, C, L) "
        "float32 with any strides, k_f (N, C, n/2+1) complex64; block = channels per task",
        py::arg("x"), py::arg("k_f"), py::arg("n"), py::arg("bias"), py::arg("out"), py::arg("block"));
  m.def("fft_conv_backward", &fft_conv_backward,
        "(grad_x laid out like x or undefined, un-normalized grad spectrum (N, C, F) or undefined) of "
        "fft_conv_forward without bias",
        py::arg("x"), py::arg("k_f"), py::arg("n"), py::arg("grad_y"), py::arg("need_x"), py::arg("need_k"),
        py::arg("block"));
}
