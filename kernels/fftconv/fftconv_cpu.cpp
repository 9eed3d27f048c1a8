// Fused forward of the depthwise FFT long convolution on the CPU (float32).
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
      const float* xb = xp + b * xs_b + c0 * xs_c;
      if (xs_c == 1) {  // channels-last: walk the channels of one position contiguously
        for (int64_t t = 0; t < L; ++t)
          for (int64_t c = 0; c < rows; ++c) in[c * n + t] = xb[t * xs_t + c];
      } else {
        for (int64_t c = 0; c < rows; ++c)
          for (int64_t t = 0; t < L; ++t) in[c * n + t] = xb[c * xs_c + t * xs_t];
      }
      dfti_check(DftiComputeForward(plan.fwd, in.data(), spec.data()), "DftiComputeForward");
      for (int64_t i = 0; i < N; ++i) {
        const float* kb = kp + 2 * (i * C + c0) * F;
        for (int64_t j = 0; j < rows * F; ++j) {  // complex product, written out (std::complex adds NaN checks)
          const float ar = spec[2 * j], ai = spec[2 * j + 1], br = kb[2 * j], bi = kb[2 * j + 1];
          prod[2 * j] = ar * br - ai * bi;
          prod[2 * j + 1] = ar * bi + ai * br;
        }
        dfti_check(DftiComputeBackward(plan.bwd, prod.data(), res.data()), "DftiComputeBackward");
        float* ob = op + b * os_b + i * os_i + c0 * os_c;
        if (os_c == 1) {
          for (int64_t t = 0; t < L; ++t)
            for (int64_t c = 0; c < rows; ++c) ob[t * os_t + c] = res[c * n + t] * inv_n + (bp ? bp[c0 + c] : 0.0f);
        } else {
          for (int64_t c = 0; c < rows; ++c) {
            const float bc = bp ? bp[c0 + c] : 0.0f;
            for (int64_t t = 0; t < L; ++t) ob[c * os_c + t * os_t] = res[c * n + t] * inv_n + bc;
          }
        }
      }
    }
  });
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Fused depthwise FFT convolution forward, CPU (oneMKL DFTI from libtorch_cpu)";
  m.def("fft_conv_forward", &fft_conv_forward,
        "out[b, i, c, :L] = irfft(rfft(x[b, c], n) * k_f[i, c])[:L] + bias[c]; x (B, C, L) and out (B, N, C, L) "
        "float32 with any strides, k_f (N, C, n/2+1) complex64; block = channels per task",
        py::arg("x"), py::arg("k_f"), py::arg("n"), py::arg("bias"), py::arg("out"), py::arg("block"));
}
