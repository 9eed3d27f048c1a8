// Per-element arithmetic of the TaLK (time-aware large kernel) summation convolution.
//
// Included by talk_cpu.cpp. The GPU kernels are Triton (mrconvnext/ops/talk/engine_triton.py) and follow these conventions
// line for line (start/end edges, the fraction at kinks, NaN propagation), tested against the same float64
// references. No torch headers here: plain templates over the accumulation type
// acc_t (float, or double for double inputs) and the storage type of x.
//
// Conventions (one axis of length n, position i, relative offset o in [0, 1], maximum offset m):
//   * prefix table P[0..n], P[t] = sum_{j < t} x[j]  (P[0] = 0, i.e. the paper's S_{t-1});
//   * window [a, b] with a = i - o_start * m_start and b = i + o_end * m_end, each clamped to [0, n - 1];
//   * the window sum is Pint(b + 1) - Pint(a), Pint = P linearly interpolated at a real position u in [0, n];
//     this is the sum of x over [a, b + 1] with fractional weights on the two partially covered cells
//     (paper Eq. 3 and 5);
//   * an Edge (k, f) stands for u = k + f with k in [0, n - 1], f in [0, 1]: Pint(u) = P[k] + f * x[k]
//     = (1 - f) * P[k] + f * P[k + 1]; dPint/du = x[k] (paper Eq. 6);
//   * at an integer boundary (not differentiable) k is the cell the window grows into when its offset
//     increases: the one-sided derivative in the direction of a larger window. This matters for offsets that
//     are exactly 0 (e.g. after offsets dropout) and is the convention of the PyTorch reference as well.
//     Consequently the derivative w.r.t. the offset is zero (live == false) where the boundary is clamped or
//     sits exactly on the sequence end it would grow past (a <= 0, b >= n - 1).
//   * positions are computed as i -/+ o * m, keeping the fraction of o * m exact in float32 even for very
//     long axes (i up to 2^24).
// 2-D: integral image P[0..h][0..w] with a zero first row and column; the box sum is the bilinear
// interpolation of P at the four real-valued corners, i.e. the box with fractional border strips/corners.
#pragma once

#include <cmath>
#include <cstdint>

#define TALK_HD inline

namespace mrconvnext {
namespace talk {

TALK_HD float talk_floor(float v) { return floorf(v); }
TALK_HD double talk_floor(double v) { return floor(v); }

template <typename acc_t>
struct Edge {
  int64_t k;   // cell index in [0, n - 1]
  acc_t f;     // fraction in [0, 1]: position k + f on the prefix axis
  bool live;   // false where the boundary is clamped / on the end it would grow past (zero offset gradient)
};

// Start edge of the window at i: real boundary a = i - d, d = o * m (offset times maximum).
template <typename acc_t>
TALK_HD Edge<acc_t> start_edge(int64_t i, int64_t n, acc_t d) {
  Edge<acc_t> e;
  const acc_t fi = static_cast<acc_t>(i);
  if (!(d < fi)) {  // a <= 0: at/clamped to 0, Pint(0) = P[0]; a NaN offset propagates through f
    e.k = 0;
    e.f = d >= fi ? acc_t(0) : d;
    e.live = false;
  } else if (fi - d > static_cast<acc_t>(n - 1)) {  // a > n - 1 (only for negative offsets)
    e.k = n >= 2 ? n - 2 : 0;
    e.f = n >= 2 ? acc_t(1) : acc_t(0);
    e.live = false;
  } else {
    // u = a = i - d > 0; growing the window moves u down, so take the cell below: k = ceil(u) - 1 >= 0.
    const acc_t fl = talk_floor(d);
    e.k = i - static_cast<int64_t>(fl) - 1;
    e.f = acc_t(1) - (d - fl);
    e.live = true;
  }
  return e;
}

// End edge of the window at i: real boundary b = i + d, d = o * m; prefix position u = b + 1.
template <typename acc_t>
TALK_HD Edge<acc_t> end_edge(int64_t i, int64_t n, acc_t d) {
  Edge<acc_t> e;
  const acc_t fi = static_cast<acc_t>(i);
  if (!(fi + d < static_cast<acc_t>(n - 1))) {  // b >= n - 1: at/clamped to n - 1, u = n; NaN propagates
    e.k = n - 1;
    e.f = fi + d >= static_cast<acc_t>(n - 1) ? acc_t(1) : d;
    e.live = false;
  } else if (fi + d < acc_t(0)) {  // b < 0 (only for negative offsets): u = 1
    e.k = n >= 2 ? 1 : 0;
    e.f = n >= 2 ? acc_t(0) : acc_t(1);
    e.live = false;
  } else {
    // growing the window moves u up: k = floor(u) <= n - 1 since b < n - 1.
    const acc_t fl = talk_floor(d);
    e.k = i + 1 + static_cast<int64_t>(fl);
    e.f = d - fl;
    e.live = true;
  }
  return e;
}

// ---------------------------------------------------------------------------------------------- 1-D

// Pint(u) of one row: P has n + 1 entries `sp` elements apart, x n entries `sx` apart (1 and 1 for a
// (B, C, L) row; a channels-last (B, L, C) map has x entries C apart).
template <typename acc_t, typename scalar_t>
TALK_HD acc_t prefix_at(const acc_t* P, const scalar_t* x, const Edge<acc_t>& e, int64_t sp = 1, int64_t sx = 1) {
  return P[e.k * sp] + e.f * static_cast<acc_t>(x[e.k * sx]);
}

// Un-normalized window sum of one row.
template <typename acc_t, typename scalar_t>
TALK_HD acc_t window_sum_1d(const acc_t* P, const scalar_t* x, const Edge<acc_t>& es, const Edge<acc_t>& ee,
                            int64_t sp = 1, int64_t sx = 1) {
  return prefix_at(P, x, ee, sp, sx) - prefix_at(P, x, es, sp, sx);
}

// d(window sum)/dP: 4 (index, weight) pairs for an upstream gradient g, indices into P[0..n].
// Then dx[j] = sum_{t > j} dP[t].
template <typename acc_t>
struct Scatter1d {
  int64_t idx[4];
  acc_t w[4];
};

template <typename acc_t>
TALK_HD Scatter1d<acc_t> scatter_1d(const Edge<acc_t>& es, const Edge<acc_t>& ee, acc_t g) {
  Scatter1d<acc_t> s;
  s.idx[0] = ee.k;
  s.w[0] = (acc_t(1) - ee.f) * g;
  s.idx[1] = ee.k + 1;
  s.w[1] = ee.f * g;
  s.idx[2] = es.k;
  s.w[2] = -(acc_t(1) - es.f) * g;
  s.idx[3] = es.k + 1;
  s.w[3] = -es.f * g;
  return s;
}

// Slope dPint/du of one row at an edge (paper Eq. 6 without the max factor).
template <typename acc_t, typename scalar_t>
TALK_HD acc_t slope_1d(const scalar_t* x, const Edge<acc_t>& e) {
  return static_cast<acc_t>(x[e.k]);
}
// y = (Pint(u_end) - Pint(u_start)) * inv_norm with u_start = i - o_s * m_s, u_end = i + o_e * m_e + 1, so
//   dy/do_s = m_s * inv_norm * slope(start),   dy/do_e = m_e * inv_norm * slope(end)   (when live).

// ---------------------------------------------------------------------------------------------- 2-D

// Bilinear interpolation of one integral image (row stride w1 = w + 1) at (v, u) = rows edge ev, cols edge eu.
template <typename acc_t>
TALK_HD acc_t bilerp(const acc_t* P, int64_t w1, const Edge<acc_t>& ev, const Edge<acc_t>& eu) {
  const acc_t* p0 = P + ev.k * w1 + eu.k;
  const acc_t* p1 = p0 + w1;
  const acc_t gu = acc_t(1) - eu.f;
  return (acc_t(1) - ev.f) * (gu * p0[0] + eu.f * p0[1]) + ev.f * (gu * p1[0] + eu.f * p1[1]);
}

// The four edges of the box of pixel (r, c) in an H x W image: o = its offsets [left, right, top, bottom], each
// times its maximum (ml, mr, mt, mb).
template <typename acc_t>
struct BoxEdges {
  Edge<acc_t> l, r, t, b;
};

template <typename acc_t>
TALK_HD BoxEdges<acc_t> box_edges(int64_t r, int64_t c, int64_t H, int64_t W, const acc_t* o, acc_t ml, acc_t mr,
                                  acc_t mt, acc_t mb) {
  return {start_edge<acc_t>(c, W, o[0] * ml), end_edge<acc_t>(c, W, o[1] * mr), start_edge<acc_t>(r, H, o[2] * mt),
          end_edge<acc_t>(r, H, o[3] * mb)};
}

// Un-normalized box sum: rows [top, bottom], cols [left, right] (start/end edges of each axis).
template <typename acc_t>
TALK_HD acc_t box_sum_2d(const acc_t* P, int64_t w1, const Edge<acc_t>& et, const Edge<acc_t>& eb,
                         const Edge<acc_t>& el, const Edge<acc_t>& er) {
  return bilerp(P, w1, eb, er) - bilerp(P, w1, eb, el) - bilerp(P, w1, et, er) + bilerp(P, w1, et, el);
}

// d(box sum)/dP: 16 (index, weight) pairs into the (h + 1) x (w + 1) integral image.
// Then dx[r][c] = sum_{v > r, u > c} dP[v][u].
template <typename acc_t>
struct Scatter2d {
  int64_t idx[16];
  acc_t w[16];
};

template <typename acc_t>
TALK_HD void scatter_corner(Scatter2d<acc_t>& s, int slot, int64_t w1, const Edge<acc_t>& ev,
                            const Edge<acc_t>& eu, acc_t g) {
  const int64_t base = ev.k * w1 + eu.k;
  const acc_t gv = (acc_t(1) - ev.f) * g, fv = ev.f * g;
  s.idx[slot + 0] = base;
  s.w[slot + 0] = gv * (acc_t(1) - eu.f);
  s.idx[slot + 1] = base + 1;
  s.w[slot + 1] = gv * eu.f;
  s.idx[slot + 2] = base + w1;
  s.w[slot + 2] = fv * (acc_t(1) - eu.f);
  s.idx[slot + 3] = base + w1 + 1;
  s.w[slot + 3] = fv * eu.f;
}

template <typename acc_t>
TALK_HD Scatter2d<acc_t> scatter_2d(int64_t w1, const Edge<acc_t>& et, const Edge<acc_t>& eb,
                                    const Edge<acc_t>& el, const Edge<acc_t>& er, acc_t g) {
  Scatter2d<acc_t> s;
  scatter_corner(s, 0, w1, eb, er, g);
  scatter_corner(s, 4, w1, eb, el, -g);
  scatter_corner(s, 8, w1, et, er, -g);
  scatter_corner(s, 12, w1, et, el, g);
  return s;
}

// Partial derivatives of bilerp w.r.t. the column position u and the row position v.
template <typename acc_t>
TALK_HD acc_t bilerp_du(const acc_t* P, int64_t w1, const Edge<acc_t>& ev, const Edge<acc_t>& eu) {
  const acc_t* p0 = P + ev.k * w1 + eu.k;
  const acc_t* p1 = p0 + w1;
  return (acc_t(1) - ev.f) * (p0[1] - p0[0]) + ev.f * (p1[1] - p1[0]);
}

template <typename acc_t>
TALK_HD acc_t bilerp_dv(const acc_t* P, int64_t w1, const Edge<acc_t>& ev, const Edge<acc_t>& eu) {
  const acc_t* p0 = P + ev.k * w1 + eu.k;
  const acc_t* p1 = p0 + w1;
  return (acc_t(1) - eu.f) * (p1[0] - p0[0]) + eu.f * (p1[1] - p0[1]);
}

// Slopes of the box sum w.r.t. the four relative offsets, without the max * inv_norm factors and the live
// masks, in the offsets layout order (left, right, top, bottom). Signs: u_left = j - o_l * m_l enters the box
// sum negatively, so both minus signs cancel; likewise for the top edge.
template <typename acc_t>
TALK_HD void box_slopes_2d(const acc_t* P, int64_t w1, const Edge<acc_t>& et, const Edge<acc_t>& eb,
                           const Edge<acc_t>& el, const Edge<acc_t>& er, acc_t out[4]) {
  out[0] = bilerp_du(P, w1, eb, el) - bilerp_du(P, w1, et, el);
  out[1] = bilerp_du(P, w1, eb, er) - bilerp_du(P, w1, et, er);
  out[2] = bilerp_dv(P, w1, et, er) - bilerp_dv(P, w1, et, el);
  out[3] = bilerp_dv(P, w1, eb, er) - bilerp_dv(P, w1, eb, el);
}

}  // namespace talk
}  // namespace mrconvnext
