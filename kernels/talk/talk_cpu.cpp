// CPU forward/backward of TaLK 1-D and 2-D (box) summation convolutions, registered as torch operators.
//
// Layouts (all contiguous): x (B, C, L) / (B, C, H, W) in float64/float32/float16/bfloat16; offsets
// (B, NH, L, 2) [start, end] / (B, NH, H, W, 4) [left, right, top, bottom] in the accumulation dtype (float64 for
// float64 x, float32 otherwise); NH heads, H and W the height and width; channel c belongs to head c / (C / NH).
// Forward: parallel over (b, c) rows/planes, prefix table accumulated per row in the accumulation type.
// Backward: (A) dx parallel over rows/planes, scattering into a private prefix-gradient buffer followed by
// a suffix sum, (B) offset gradients parallel over (b, head, position), summing over the head's channels.
// No atomics, deterministic. See talk_math.h for the math.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <vector>

#include "talk_math.h"

namespace {

using namespace mrconvnext::talk;

constexpr int64_t kGrainWork = 16384;  // elements of work per parallel_for task, roughly

int64_t grain_for(int64_t work_per_item) { return std::max<int64_t>(1, kGrainWork / std::max<int64_t>(1, work_per_item)); }

at::ScalarType acc_type_of(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// x in the (B, C, ...) index order; channels_last: laid out as a contiguous (B, L, C) instead (1-D only).
void check_common(const at::Tensor& x, const at::Tensor& off, int64_t x_dim, int64_t off_last,
                  bool channels_last = false) {
  TORCH_CHECK(x.device().is_cpu() && off.device().is_cpu(), "talk (cpu): expected CPU tensors");
  TORCH_CHECK(x.dim() == x_dim, "talk (cpu): x must have ", x_dim, " dims, got ", x.dim());
  TORCH_CHECK(off.dim() == x_dim + 1, "talk (cpu): offsets must have ", x_dim + 1, " dims, got ", off.dim());
  // the channels-last forward reads the offsets through their strides
  const bool dense = channels_last ? x.transpose(1, 2).is_contiguous() : x.is_contiguous() && off.is_contiguous();
  TORCH_CHECK(dense, "talk (cpu): expected contiguous tensors");
  TORCH_CHECK(at::isFloatingType(x.scalar_type()), "talk (cpu): x must be floating point");
  TORCH_CHECK(off.scalar_type() == acc_type_of(x.scalar_type()), "talk (cpu): offsets dtype must be ",
              acc_type_of(x.scalar_type()), ", got ", off.scalar_type());
  TORCH_CHECK(off.size(0) == x.size(0) && off.size(-1) == off_last, "talk (cpu): bad offsets shape");
  for (int64_t d = 2; d < x_dim; ++d) TORCH_CHECK(off.size(d) == x.size(d), "talk (cpu): bad offsets shape");
  TORCH_CHECK(off.size(1) > 0 && x.size(1) % off.size(1) == 0, "talk (cpu): heads must divide channels");
}

// ------------------------------------------------------------------------------------------------ 1-D

at::Tensor talk1d_forward(const at::Tensor& x, const at::Tensor& off, int64_t max_left, int64_t max_right) {
  check_common(x, off, 3, 2);
  TORCH_CHECK(max_left >= 0 && max_right >= 0, "talk (cpu): max offsets must be >= 0");
  const int64_t B = x.size(0), C = x.size(1), L = x.size(2), NH = off.size(1), R = C / NH;
  auto y = at::empty_like(x);
  if (y.numel() == 0) return y;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "talk1d_forward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const acc_t* op = off.data_ptr<acc_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    const acc_t ml = static_cast<acc_t>(max_left), mr = static_cast<acc_t>(max_right);
    const acc_t inv = acc_t(1) / static_cast<acc_t>(max_left + max_right + 1);
    at::parallel_for(0, B * C, grain_for(L), [&](int64_t begin, int64_t end) {
      std::vector<acc_t> P(L + 1);
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / C, h = (row % C) / R;
        const scalar_t* xr = xp + row * L;
        const acc_t* o = op + (b * NH + h) * L * 2;
        P[0] = acc_t(0);
        for (int64_t j = 0; j < L; ++j) P[j + 1] = P[j] + static_cast<acc_t>(xr[j]);
        for (int64_t i = 0; i < L; ++i) {
          const Edge<acc_t> es = start_edge<acc_t>(i, L, o[2 * i] * ml);
          const Edge<acc_t> ee = end_edge<acc_t>(i, L, o[2 * i + 1] * mr);
          yp[row * L + i] = static_cast<scalar_t>(window_sum_1d(P.data(), xr, es, ee) * inv);
        }
      }
    });
  });
  return y;
}

// Forward for a channels-last map: x (B, L, C) contiguous (the transpose of a (B, C, L) view with strides
// (L*C, 1, C)), y likewise. Parallel over (b, head): one prefix table (L + 1, R) with the head's R channels
// side by side, the window edges computed once per position and applied to the R channels in a contiguous
// inner loop (the (B, C, L) kernel recomputes them per channel), and no transposing copies of x or y.
at::Tensor talk1d_forward_cl(const at::Tensor& x, const at::Tensor& off, int64_t max_left, int64_t max_right) {
  TORCH_CHECK(x.dim() == 3, "talk (cpu): expected x (B, L, C)");
  check_common(x.transpose(1, 2), off, 3, 2, /*channels_last=*/true);
  const int64_t B = x.size(0), L = x.size(1), C = x.size(2), NH = off.size(1);
  TORCH_CHECK(max_left >= 0 && max_right >= 0, "talk (cpu): max offsets must be >= 0");
  const int64_t R = C / NH;
  // offsets (B, NH, L, 2) with any strides, e.g. the (B, NH, L, 2) view of a (B, L, NH, 2) projection
  const int64_t so_b = off.stride(0), so_h = off.stride(1), so_i = off.stride(2), so_s = off.stride(3);
  auto y = at::empty_like(x);
  if (y.numel() == 0) return y;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "talk1d_forward_cl_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const acc_t* op = off.data_ptr<acc_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    const acc_t ml = static_cast<acc_t>(max_left), mr = static_cast<acc_t>(max_right);
    const acc_t inv = acc_t(1) / static_cast<acc_t>(max_left + max_right + 1);
    at::parallel_for(0, B * NH, grain_for(L * R), [&](int64_t begin, int64_t end) {
      std::vector<acc_t> P((L + 1) * R);  // the head's R channels side by side
      for (int64_t t = begin; t < end; ++t) {
        const int64_t b = t / NH, h = t % NH;
        const scalar_t* xh = xp + b * L * C + h * R;
        scalar_t* yh = yp + b * L * C + h * R;
        acc_t* Pp = P.data();
        for (int64_t c = 0; c < R; ++c) Pp[c] = acc_t(0);
        for (int64_t j = 0; j < L; ++j)
          for (int64_t c = 0; c < R; ++c) Pp[(j + 1) * R + c] = Pp[j * R + c] + static_cast<acc_t>(xh[j * C + c]);
        const acc_t* o = op + b * so_b + h * so_h;
        for (int64_t i = 0; i < L; ++i) {
          const Edge<acc_t> es = start_edge<acc_t>(i, L, o[i * so_i] * ml);
          const Edge<acc_t> ee = end_edge<acc_t>(i, L, o[i * so_i + so_s] * mr);
          for (int64_t c = 0; c < R; ++c)
            yh[i * C + c] = static_cast<scalar_t>(window_sum_1d(Pp + c, xh + c, es, ee, R, C) * inv);
        }
      }
    });
  });
  return y;
}

std::vector<at::Tensor> talk1d_backward(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& off,
                                        int64_t max_left, int64_t max_right, bool need_dx, bool need_doff) {
  check_common(x, off, 3, 2);
  TORCH_CHECK(grad_y.sizes() == x.sizes() && grad_y.scalar_type() == x.scalar_type() && grad_y.is_contiguous(),
              "talk (cpu): grad_y must be contiguous with x's shape and dtype");
  const int64_t B = x.size(0), C = x.size(1), L = x.size(2), NH = off.size(1), R = C / NH;
  at::Tensor dx, doff;
  if (need_dx) dx = at::empty_like(x);
  if (need_doff) doff = at::zeros_like(off);
  if (x.numel() == 0) return {dx, doff};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "talk1d_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* gp = grad_y.data_ptr<scalar_t>();
    const acc_t* op = off.data_ptr<acc_t>();
    const acc_t ml = static_cast<acc_t>(max_left), mr = static_cast<acc_t>(max_right);
    const acc_t inv = acc_t(1) / static_cast<acc_t>(max_left + max_right + 1);
    if (need_dx) {
      scalar_t* dxp = dx.data_ptr<scalar_t>();
      at::parallel_for(0, B * C, grain_for(L), [&](int64_t begin, int64_t end) {
        std::vector<acc_t> dP(L + 1);
        for (int64_t row = begin; row < end; ++row) {
          const int64_t b = row / C, h = (row % C) / R;
          const acc_t* o = op + (b * NH + h) * L * 2;
          const scalar_t* gr = gp + row * L;
          std::fill(dP.begin(), dP.end(), acc_t(0));
          for (int64_t i = 0; i < L; ++i) {
            const Edge<acc_t> es = start_edge<acc_t>(i, L, o[2 * i] * ml);
            const Edge<acc_t> ee = end_edge<acc_t>(i, L, o[2 * i + 1] * mr);
            const Scatter1d<acc_t> s = scatter_1d(es, ee, static_cast<acc_t>(gr[i]) * inv);
            for (int q = 0; q < 4; ++q) dP[s.idx[q]] += s.w[q];
          }
          acc_t run = acc_t(0);
          for (int64_t j = L - 1; j >= 0; --j) {
            run += dP[j + 1];
            dxp[row * L + j] = static_cast<scalar_t>(run);
          }
        }
      });
    }
    if (need_doff) {
      acc_t* dop = doff.data_ptr<acc_t>();
      at::parallel_for(0, B * NH * L, grain_for(R), [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t i = t % L, bh = t / L, b = bh / NH, h = bh % NH;
          const acc_t* o = op + t * 2;
          const Edge<acc_t> es = start_edge<acc_t>(i, L, o[0] * ml);
          const Edge<acc_t> ee = end_edge<acc_t>(i, L, o[1] * mr);
          if (!es.live && !ee.live) continue;
          acc_t ss = acc_t(0), se = acc_t(0);
          for (int64_t c = h * R; c < (h + 1) * R; ++c) {
            const int64_t row = b * C + c;
            const acc_t g = static_cast<acc_t>(gp[row * L + i]);
            ss += g * slope_1d(xp + row * L, es);
            se += g * slope_1d(xp + row * L, ee);
          }
          dop[t * 2] = es.live ? ss * ml * inv : acc_t(0);
          dop[t * 2 + 1] = ee.live ? se * mr * inv : acc_t(0);
        }
      });
    }
  });
  return {dx, doff};
}

// ------------------------------------------------------------------------------------------------ 2-D

// Returns {y, P}: P is the (B, C, H + 1, W + 1) integral image in the accumulation dtype, kept for backward.
std::vector<at::Tensor> talk2d_forward(const at::Tensor& x, const at::Tensor& off, int64_t max_left,
                                       int64_t max_right, int64_t max_top, int64_t max_bottom) {
  check_common(x, off, 4, 4);
  TORCH_CHECK(max_left >= 0 && max_right >= 0 && max_top >= 0 && max_bottom >= 0,
              "talk (cpu): max offsets must be >= 0");
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), NH = off.size(1), R = C / NH;
  const int64_t w1 = W + 1, plane = H * W, pplane = (H + 1) * w1;
  auto y = at::empty_like(x);
  auto P = at::empty({B, C, H + 1, W + 1}, x.options().dtype(acc_type_of(x.scalar_type())));
  if (y.numel() == 0) return {y, P.zero_()};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "talk2d_forward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const acc_t* op = off.data_ptr<acc_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    acc_t* Pp = P.data_ptr<acc_t>();
    const acc_t ml = max_left, mr = max_right, mt = max_top, mb = max_bottom;
    const acc_t inv = acc_t(1) / (static_cast<acc_t>(max_left + max_right + 1) *
                                  static_cast<acc_t>(max_top + max_bottom + 1));
    at::parallel_for(0, B * C, grain_for(plane), [&](int64_t begin, int64_t end) {
      for (int64_t pl = begin; pl < end; ++pl) {
        const int64_t b = pl / C, h = (pl % C) / R;
        const scalar_t* xr = xp + pl * plane;
        acc_t* Pr = Pp + pl * pplane;
        for (int64_t u = 0; u < w1; ++u) Pr[u] = acc_t(0);
        for (int64_t r = 0; r < H; ++r) {
          acc_t run = acc_t(0);
          Pr[(r + 1) * w1] = acc_t(0);
          for (int64_t c = 0; c < W; ++c) {
            run += static_cast<acc_t>(xr[r * W + c]);
            Pr[(r + 1) * w1 + c + 1] = Pr[r * w1 + c + 1] + run;
          }
        }
        const acc_t* o = op + (b * NH + h) * plane * 4;
        for (int64_t r = 0; r < H; ++r) {
          for (int64_t c = 0; c < W; ++c) {
            const acc_t* oo = o + (r * W + c) * 4;
            const BoxEdges<acc_t> e = box_edges<acc_t>(r, c, H, W, oo, ml, mr, mt, mb);
            const Edge<acc_t> &el = e.l, &er = e.r, &et = e.t, &eb = e.b;
            yp[pl * plane + r * W + c] = static_cast<scalar_t>(box_sum_2d(Pr, w1, et, eb, el, er) * inv);
          }
        }
      }
    });
  });
  return {y, P};
}

std::vector<at::Tensor> talk2d_backward(const at::Tensor& grad_y, const at::Tensor& P, const at::Tensor& off,
                                        int64_t max_left, int64_t max_right, int64_t max_top,
                                        int64_t max_bottom, bool need_dx, bool need_doff) {
  TORCH_CHECK(grad_y.device().is_cpu() && P.device().is_cpu() && off.device().is_cpu(),
              "talk (cpu): expected CPU tensors");
  TORCH_CHECK(grad_y.dim() == 4 && grad_y.is_contiguous() && P.is_contiguous() && off.is_contiguous(),
              "talk (cpu): expected contiguous (B, C, H, W) grad_y");
  const int64_t B = grad_y.size(0), C = grad_y.size(1), H = grad_y.size(2), W = grad_y.size(3);
  TORCH_CHECK(P.dim() == 4 && P.size(0) == B && P.size(1) == C && P.size(2) == H + 1 && P.size(3) == W + 1,
              "talk (cpu): integral image has the wrong shape");
  TORCH_CHECK(P.scalar_type() == acc_type_of(grad_y.scalar_type()) && off.scalar_type() == P.scalar_type(),
              "talk (cpu): integral image / offsets dtype mismatch");
  TORCH_CHECK(off.dim() == 5 && off.size(0) == B && off.size(2) == H && off.size(3) == W && off.size(4) == 4 &&
                  off.size(1) > 0 && C % off.size(1) == 0,
              "talk (cpu): bad offsets shape");
  const int64_t NH = off.size(1), R = C / NH;
  const int64_t w1 = W + 1, plane = H * W, pplane = (H + 1) * w1;
  at::Tensor dx, doff;
  if (need_dx) dx = at::empty_like(grad_y);
  if (need_doff) doff = at::zeros_like(off);
  if (grad_y.numel() == 0) return {dx, doff};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_y.scalar_type(), "talk2d_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* gp = grad_y.data_ptr<scalar_t>();
    const acc_t* Pp = P.data_ptr<acc_t>();
    const acc_t* op = off.data_ptr<acc_t>();
    const acc_t ml = max_left, mr = max_right, mt = max_top, mb = max_bottom;
    const acc_t inv = acc_t(1) / (static_cast<acc_t>(max_left + max_right + 1) *
                                  static_cast<acc_t>(max_top + max_bottom + 1));
    if (need_dx) {
      scalar_t* dxp = dx.data_ptr<scalar_t>();
      at::parallel_for(0, B * C, grain_for(plane), [&](int64_t begin, int64_t end) {
        std::vector<acc_t> dP(pplane);
        for (int64_t pl = begin; pl < end; ++pl) {
          const int64_t b = pl / C, h = (pl % C) / R;
          const acc_t* o = op + (b * NH + h) * plane * 4;
          const scalar_t* gr = gp + pl * plane;
          std::fill(dP.begin(), dP.end(), acc_t(0));
          for (int64_t r = 0; r < H; ++r) {
            for (int64_t c = 0; c < W; ++c) {
              const acc_t* oo = o + (r * W + c) * 4;
              const BoxEdges<acc_t> e = box_edges<acc_t>(r, c, H, W, oo, ml, mr, mt, mb);
              const Edge<acc_t> &el = e.l, &er = e.r, &et = e.t, &eb = e.b;
              const Scatter2d<acc_t> s =
                  scatter_2d(w1, et, eb, el, er, static_cast<acc_t>(gr[r * W + c]) * inv);
              for (int q = 0; q < 16; ++q) dP[s.idx[q]] += s.w[q];
            }
          }
          // 2-D suffix sum in place: dP[v][u] <- sum_{v' >= v, u' >= u} dP[v'][u']; dx[r][c] = that at (r+1, c+1).
          for (int64_t v = H; v >= 1; --v) {
            acc_t run = acc_t(0);
            for (int64_t u = W; u >= 1; --u) {
              run += dP[v * w1 + u];
              dP[v * w1 + u] = run + (v < H ? dP[(v + 1) * w1 + u] : acc_t(0));
            }
          }
          for (int64_t r = 0; r < H; ++r)
            for (int64_t c = 0; c < W; ++c)
              dxp[pl * plane + r * W + c] = static_cast<scalar_t>(dP[(r + 1) * w1 + c + 1]);
        }
      });
    }
    if (need_doff) {
      acc_t* dop = doff.data_ptr<acc_t>();
      const acc_t scale[4] = {ml * inv, mr * inv, mt * inv, mb * inv};
      at::parallel_for(0, B * NH * plane, grain_for(R * 16), [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t pos = t % plane, bh = t / plane, b = bh / NH, h = bh % NH;
          const int64_t r = pos / W, c = pos % W;
          const acc_t* oo = op + t * 4;
          const BoxEdges<acc_t> e = box_edges<acc_t>(r, c, H, W, oo, ml, mr, mt, mb);
          const Edge<acc_t> &el = e.l, &er = e.r, &et = e.t, &eb = e.b;
          const bool live[4] = {el.live, er.live, et.live, eb.live};
          if (!(live[0] || live[1] || live[2] || live[3])) continue;
          acc_t sum[4] = {acc_t(0), acc_t(0), acc_t(0), acc_t(0)};
          for (int64_t ch = h * R; ch < (h + 1) * R; ++ch) {
            const int64_t pl = b * C + ch;
            const acc_t g = static_cast<acc_t>(gp[pl * plane + pos]);
            acc_t sl[4];
            box_slopes_2d(Pp + pl * pplane, w1, et, eb, el, er, sl);
            for (int q = 0; q < 4; ++q) sum[q] += g * sl[q];
          }
          for (int q = 0; q < 4; ++q) dop[t * 4 + q] = live[q] ? sum[q] * scale[q] : acc_t(0);
        }
      });
    }
  });
  return {dx, doff};
}

}  // namespace

// The operators of this library, in the namespace TORCH_EXTENSION_NAME (the build's name, unique per source content:
// see mrconvnext/ops/native_build.py), called through torch.ops; CPU tensors only (the callers check).
TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) {
  m.def("talk1d_forward(Tensor x, Tensor offsets, int max_left, int max_right) -> Tensor", &talk1d_forward);
  // x (B, L, C) channels-last, offsets (B, NH, L, 2) -> y (B, L, C)
  m.def("talk1d_forward_cl(Tensor x, Tensor offsets, int max_left, int max_right) -> Tensor", &talk1d_forward_cl);
  m.def("talk1d_backward(Tensor grad_y, Tensor x, Tensor offsets, int max_left, int max_right, bool need_dx, "
        "bool need_doff) -> Tensor[]", &talk1d_backward);
  // returns (y, integral image)
  m.def("talk2d_forward(Tensor x, Tensor offsets, int max_left, int max_right, int max_top, int max_bottom) "
        "-> Tensor[]", &talk2d_forward);
  m.def("talk2d_backward(Tensor grad_y, Tensor P, Tensor offsets, int max_left, int max_right, int max_top, "
        "int max_bottom, bool need_dx, bool need_doff) -> Tensor[]", &talk2d_backward);
}
