// CUDA forward/backward of TaLK 1-D and 2-D (box) summation convolutions.
//
// Same layouts and math as talk_cpu.cpp (shared through talk_math.h). One thread per output element
// (grid-stride loops, int64 indexing). The prefix table / integral image is computed with ATen cumsum in the
// accumulation dtype. Backward: dx by atomicAdd scatter into a prefix-gradient buffer followed by a suffix
// cumsum; offset gradients by one thread per (b, head, position) looping over the head's channels (no atomics).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <vector>

#include "talk_math.h"

namespace mrconvnext {
namespace talk {
namespace {

constexpr int kThreads = 256;

inline unsigned int blocks_for(int64_t n) {
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20)));
}

#define TALK_GRID_LOOP(t, n)                                                                   \
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < (n); \
       t += static_cast<int64_t>(blockDim.x) * gridDim.x)

at::ScalarType acc_type_of(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// A kernel launched on host pointers does not fail by itself: refuse anything that is not on one CUDA device.
void check_cuda(const std::vector<const at::Tensor*>& ts, const char* what) {
  const at::Device dev = ts[0]->device();
  for (const at::Tensor* t : ts) {
    TORCH_CHECK(t->is_cuda(), what, ": expected CUDA tensors, got a tensor on ", t->device());
    TORCH_CHECK(t->device() == dev, what, ": tensors on different devices (", dev, " vs ", t->device(), ")");
    TORCH_CHECK(t->is_contiguous(), what, ": expected contiguous tensors");
  }
}

void check_layout(const at::Tensor& x, const at::Tensor& off, int64_t x_dim, int64_t off_last, const char* what) {
  TORCH_CHECK(x.dim() == x_dim && off.dim() == x_dim + 1, what, ": bad ranks");
  TORCH_CHECK(at::isFloatingType(x.scalar_type()), what, ": x must be floating point");
  TORCH_CHECK(off.scalar_type() == acc_type_of(x.scalar_type()), what, ": offsets dtype must be ",
              acc_type_of(x.scalar_type()), ", got ", off.scalar_type());
  TORCH_CHECK(off.size(0) == x.size(0) && off.size(-1) == off_last, what, ": bad offsets shape");
  for (int64_t d = 2; d < x_dim; ++d) TORCH_CHECK(off.size(d) == x.size(d), what, ": bad offsets shape");
  TORCH_CHECK(off.size(1) > 0 && x.size(1) % off.size(1) == 0, what, ": heads must divide channels");
}

// ------------------------------------------------------------------------------------------------ 1-D

template <typename scalar_t, typename acc_t>
__global__ void fwd1d_kernel(const scalar_t* __restrict__ x, const acc_t* __restrict__ P,
                             const acc_t* __restrict__ off, scalar_t* __restrict__ y, int64_t n, int64_t C,
                             int64_t L, int64_t NH, int64_t R, acc_t ml, acc_t mr, acc_t inv) {
  TALK_GRID_LOOP(t, n) {
    const int64_t i = t % L, row = t / L, b = row / C, h = (row % C) / R;
    const acc_t* o = off + ((b * NH + h) * L + i) * 2;
    const Edge<acc_t> es = start_edge<acc_t>(i, L, o[0] * ml);
    const Edge<acc_t> ee = end_edge<acc_t>(i, L, o[1] * mr);
    y[t] = static_cast<scalar_t>(window_sum_1d(P + row * (L + 1), x + row * L, es, ee) * inv);
  }
}

template <typename scalar_t, typename acc_t>
__global__ void bwd1d_dx_kernel(const scalar_t* __restrict__ g, const acc_t* __restrict__ off,
                                acc_t* __restrict__ dP, int64_t n, int64_t C, int64_t L, int64_t NH, int64_t R,
                                acc_t ml, acc_t mr, acc_t inv) {
  TALK_GRID_LOOP(t, n) {
    const int64_t i = t % L, row = t / L, b = row / C, h = (row % C) / R;
    const acc_t* o = off + ((b * NH + h) * L + i) * 2;
    const Edge<acc_t> es = start_edge<acc_t>(i, L, o[0] * ml);
    const Edge<acc_t> ee = end_edge<acc_t>(i, L, o[1] * mr);
    const Scatter1d<acc_t> s = scatter_1d(es, ee, static_cast<acc_t>(g[t]) * inv);
    acc_t* d = dP + row * (L + 1);
#pragma unroll
    for (int q = 0; q < 4; ++q) atomicAdd(d + s.idx[q], s.w[q]);
  }
}

template <typename scalar_t, typename acc_t>
__global__ void bwd1d_off_kernel(const scalar_t* __restrict__ g, const scalar_t* __restrict__ x,
                                 const acc_t* __restrict__ off, acc_t* __restrict__ doff, int64_t n, int64_t C,
                                 int64_t L, int64_t NH, int64_t R, acc_t ml, acc_t mr, acc_t inv) {
  TALK_GRID_LOOP(t, n) {
    const int64_t i = t % L, bh = t / L, b = bh / NH, h = bh % NH;
    const acc_t* o = off + t * 2;
    const Edge<acc_t> es = start_edge<acc_t>(i, L, o[0] * ml);
    const Edge<acc_t> ee = end_edge<acc_t>(i, L, o[1] * mr);
    acc_t ss = acc_t(0), se = acc_t(0);
    if (es.live || ee.live) {
      for (int64_t c = h * R; c < (h + 1) * R; ++c) {
        const int64_t row = b * C + c;
        const acc_t gv = static_cast<acc_t>(g[row * L + i]);
        ss += gv * slope_1d(x + row * L, es);
        se += gv * slope_1d(x + row * L, ee);
      }
    }
    doff[t * 2] = es.live ? ss * ml * inv : acc_t(0);
    doff[t * 2 + 1] = ee.live ? se * mr * inv : acc_t(0);
  }
}

// ------------------------------------------------------------------------------------------------ 2-D

struct Dims2d {
  int64_t C, Hh, Ww, NH, R;
};

template <typename acc_t>
struct Edges2d {
  Edge<acc_t> l, r, t, b;
};

template <typename acc_t>
__device__ __forceinline__ Edges2d<acc_t> edges_2d(const acc_t* oo, int64_t row, int64_t col, const Dims2d& d,
                                                   acc_t ml, acc_t mr, acc_t mt, acc_t mb) {
  Edges2d<acc_t> e;
  e.l = start_edge<acc_t>(col, d.Ww, oo[0] * ml);
  e.r = end_edge<acc_t>(col, d.Ww, oo[1] * mr);
  e.t = start_edge<acc_t>(row, d.Hh, oo[2] * mt);
  e.b = end_edge<acc_t>(row, d.Hh, oo[3] * mb);
  return e;
}

template <typename scalar_t, typename acc_t>
__global__ void fwd2d_kernel(const acc_t* __restrict__ P, const acc_t* __restrict__ off, scalar_t* __restrict__ y,
                             int64_t n, Dims2d d, acc_t ml, acc_t mr, acc_t mt, acc_t mb, acc_t inv) {
  const int64_t plane = d.Hh * d.Ww, w1 = d.Ww + 1, pplane = (d.Hh + 1) * w1;
  TALK_GRID_LOOP(t, n) {
    const int64_t pos = t % plane, pl = t / plane, b = pl / d.C, h = (pl % d.C) / d.R;
    const int64_t r = pos / d.Ww, c = pos % d.Ww;
    const Edges2d<acc_t> e = edges_2d(off + ((b * d.NH + h) * plane + pos) * 4, r, c, d, ml, mr, mt, mb);
    y[t] = static_cast<scalar_t>(box_sum_2d(P + pl * pplane, w1, e.t, e.b, e.l, e.r) * inv);
  }
}

template <typename scalar_t, typename acc_t>
__global__ void bwd2d_dx_kernel(const scalar_t* __restrict__ g, const acc_t* __restrict__ off,
                                acc_t* __restrict__ dP, int64_t n, Dims2d d, acc_t ml, acc_t mr, acc_t mt,
                                acc_t mb, acc_t inv) {
  const int64_t plane = d.Hh * d.Ww, w1 = d.Ww + 1, pplane = (d.Hh + 1) * w1;
  TALK_GRID_LOOP(t, n) {
    const int64_t pos = t % plane, pl = t / plane, b = pl / d.C, h = (pl % d.C) / d.R;
    const int64_t r = pos / d.Ww, c = pos % d.Ww;
    const Edges2d<acc_t> e = edges_2d(off + ((b * d.NH + h) * plane + pos) * 4, r, c, d, ml, mr, mt, mb);
    const Scatter2d<acc_t> s = scatter_2d(w1, e.t, e.b, e.l, e.r, static_cast<acc_t>(g[t]) * inv);
    acc_t* dst = dP + pl * pplane;
#pragma unroll
    for (int q = 0; q < 16; ++q) atomicAdd(dst + s.idx[q], s.w[q]);
  }
}

template <typename scalar_t, typename acc_t>
__global__ void bwd2d_off_kernel(const scalar_t* __restrict__ g, const acc_t* __restrict__ P,
                                 const acc_t* __restrict__ off, acc_t* __restrict__ doff, int64_t n, Dims2d d,
                                 acc_t ml, acc_t mr, acc_t mt, acc_t mb, acc_t inv) {
  const int64_t plane = d.Hh * d.Ww, w1 = d.Ww + 1, pplane = (d.Hh + 1) * w1;
  TALK_GRID_LOOP(t, n) {
    const int64_t pos = t % plane, bh = t / plane, b = bh / d.NH, h = bh % d.NH;
    const int64_t r = pos / d.Ww, c = pos % d.Ww;
    const Edges2d<acc_t> e = edges_2d(off + t * 4, r, c, d, ml, mr, mt, mb);
    const bool live[4] = {e.l.live, e.r.live, e.t.live, e.b.live};
    acc_t sum[4] = {acc_t(0), acc_t(0), acc_t(0), acc_t(0)};
    if (live[0] || live[1] || live[2] || live[3]) {
      for (int64_t ch = h * d.R; ch < (h + 1) * d.R; ++ch) {
        const int64_t pl = b * d.C + ch;
        const acc_t gv = static_cast<acc_t>(g[pl * plane + pos]);
        acc_t sl[4];
        box_slopes_2d(P + pl * pplane, w1, e.t, e.b, e.l, e.r, sl);
#pragma unroll
        for (int q = 0; q < 4; ++q) sum[q] += gv * sl[q];
      }
    }
    const acc_t scale[4] = {ml * inv, mr * inv, mt * inv, mb * inv};
#pragma unroll
    for (int q = 0; q < 4; ++q) doff[t * 4 + q] = live[q] ? sum[q] * scale[q] : acc_t(0);
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------ launchers

at::Tensor talk1d_forward_cuda(const at::Tensor& x, const at::Tensor& off, int64_t max_left, int64_t max_right) {
  check_cuda({&x, &off}, "talk1d_forward (cuda)");
  check_layout(x, off, 3, 2, "talk1d_forward (cuda)");
  TORCH_CHECK(max_left >= 0 && max_right >= 0, "talk1d_forward (cuda): max offsets must be >= 0");
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t C = x.size(1), L = x.size(2), NH = off.size(1), R = C / NH, n = x.numel();
  auto y = at::empty_like(x);
  if (n == 0) return y;
  const auto P = at::constant_pad_nd(at::cumsum(x, 2, acc_type_of(x.scalar_type())), {1, 0}, 0).contiguous();
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "talk1d_forward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t inv = acc_t(1) / static_cast<acc_t>(max_left + max_right + 1);
    fwd1d_kernel<scalar_t, acc_t><<<blocks_for(n), kThreads, 0, stream>>>(
        x.data_ptr<scalar_t>(), P.data_ptr<acc_t>(), off.data_ptr<acc_t>(), y.data_ptr<scalar_t>(), n, C, L, NH, R,
        static_cast<acc_t>(max_left), static_cast<acc_t>(max_right), inv);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return y;
}

std::vector<at::Tensor> talk1d_backward_cuda(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& off,
                                             int64_t max_left, int64_t max_right, bool need_dx, bool need_doff) {
  check_cuda({&grad_y, &x, &off}, "talk1d_backward (cuda)");
  check_layout(x, off, 3, 2, "talk1d_backward (cuda)");
  TORCH_CHECK(grad_y.sizes() == x.sizes() && grad_y.scalar_type() == x.scalar_type(),
              "talk1d_backward (cuda): grad_y must match x");
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t B = x.size(0), C = x.size(1), L = x.size(2), NH = off.size(1), R = C / NH, n = x.numel();
  const auto acc = acc_type_of(x.scalar_type());
  at::Tensor dx, doff;
  if (need_doff) doff = at::zeros_like(off);
  if (n == 0) {
    if (need_dx) dx = at::zeros_like(x);
    return {dx, doff};
  }
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "talk1d_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t ml = static_cast<acc_t>(max_left), mr = static_cast<acc_t>(max_right);
    const acc_t inv = acc_t(1) / static_cast<acc_t>(max_left + max_right + 1);
    if (need_dx) {
      auto dP = at::zeros({B, C, L + 1}, x.options().dtype(acc));
      bwd1d_dx_kernel<scalar_t, acc_t><<<blocks_for(n), kThreads, 0, stream>>>(
          grad_y.data_ptr<scalar_t>(), off.data_ptr<acc_t>(), dP.data_ptr<acc_t>(), n, C, L, NH, R, ml, mr, inv);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      dx = dP.narrow(2, 1, L).flip({2}).cumsum(2).flip({2}).to(x.scalar_type()).contiguous();
    }
    if (need_doff) {
      const int64_t m = B * NH * L;
      bwd1d_off_kernel<scalar_t, acc_t><<<blocks_for(m), kThreads, 0, stream>>>(
          grad_y.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), off.data_ptr<acc_t>(), doff.data_ptr<acc_t>(), m, C,
          L, NH, R, ml, mr, inv);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
  return {dx, doff};
}

std::vector<at::Tensor> talk2d_forward_cuda(const at::Tensor& x, const at::Tensor& off, int64_t max_left,
                                            int64_t max_right, int64_t max_top, int64_t max_bottom) {
  check_cuda({&x, &off}, "talk2d_forward (cuda)");
  check_layout(x, off, 4, 4, "talk2d_forward (cuda)");
  TORCH_CHECK(max_left >= 0 && max_right >= 0 && max_top >= 0 && max_bottom >= 0,
              "talk2d_forward (cuda): max offsets must be >= 0");
  const c10::cuda::CUDAGuard guard(x.device());
  const Dims2d d{x.size(1), x.size(2), x.size(3), off.size(1), x.size(1) / off.size(1)};
  const int64_t n = x.numel();
  const auto P =
      at::constant_pad_nd(at::cumsum(x, 2, acc_type_of(x.scalar_type())).cumsum(3), {1, 0, 1, 0}, 0).contiguous();
  auto y = at::empty_like(x);
  if (n == 0) return {y, P};
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "talk2d_forward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t inv = acc_t(1) / (static_cast<acc_t>(max_left + max_right + 1) *
                                  static_cast<acc_t>(max_top + max_bottom + 1));
    fwd2d_kernel<scalar_t, acc_t><<<blocks_for(n), kThreads, 0, stream>>>(
        P.data_ptr<acc_t>(), off.data_ptr<acc_t>(), y.data_ptr<scalar_t>(), n, d, static_cast<acc_t>(max_left),
        static_cast<acc_t>(max_right), static_cast<acc_t>(max_top), static_cast<acc_t>(max_bottom), inv);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {y, P};
}

std::vector<at::Tensor> talk2d_backward_cuda(const at::Tensor& grad_y, const at::Tensor& P, const at::Tensor& off,
                                             int64_t max_left, int64_t max_right, int64_t max_top,
                                             int64_t max_bottom, bool need_dx, bool need_doff) {
  check_cuda({&grad_y, &P, &off}, "talk2d_backward (cuda)");
  check_layout(grad_y, off, 4, 4, "talk2d_backward (cuda)");
  const int64_t B = grad_y.size(0), C = grad_y.size(1), Hh = grad_y.size(2), Ww = grad_y.size(3);
  TORCH_CHECK(P.dim() == 4 && P.size(0) == B && P.size(1) == C && P.size(2) == Hh + 1 && P.size(3) == Ww + 1 &&
                  P.scalar_type() == off.scalar_type(),
              "talk2d_backward (cuda): integral image has the wrong shape or dtype");
  const c10::cuda::CUDAGuard guard(grad_y.device());
  const Dims2d d{C, Hh, Ww, off.size(1), C / off.size(1)};
  const int64_t n = grad_y.numel();
  at::Tensor dx, doff;
  if (need_doff) doff = at::zeros_like(off);
  if (n == 0) {
    if (need_dx) dx = at::zeros_like(grad_y);
    return {dx, doff};
  }
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_y.scalar_type(), "talk2d_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t ml = max_left, mr = max_right, mt = max_top, mb = max_bottom;
    const acc_t inv = acc_t(1) / (static_cast<acc_t>(max_left + max_right + 1) *
                                  static_cast<acc_t>(max_top + max_bottom + 1));
    if (need_dx) {
      auto dP = at::zeros_like(P);
      bwd2d_dx_kernel<scalar_t, acc_t><<<blocks_for(n), kThreads, 0, stream>>>(
          grad_y.data_ptr<scalar_t>(), off.data_ptr<acc_t>(), dP.data_ptr<acc_t>(), n, d, ml, mr, mt, mb, inv);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      dx = dP.narrow(2, 1, Hh)
               .narrow(3, 1, Ww)
               .flip({2, 3})
               .cumsum(2)
               .cumsum(3)
               .flip({2, 3})
               .to(grad_y.scalar_type())
               .contiguous();
    }
    if (need_doff) {
      const int64_t m = B * d.NH * Hh * Ww;
      bwd2d_off_kernel<scalar_t, acc_t><<<blocks_for(m), kThreads, 0, stream>>>(
          grad_y.data_ptr<scalar_t>(), P.data_ptr<acc_t>(), off.data_ptr<acc_t>(), doff.data_ptr<acc_t>(), m, d,
          ml, mr, mt, mb, inv);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
  return {dx, doff};
}

}  // namespace talk
}  // namespace mrconvnext
