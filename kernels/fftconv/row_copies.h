// Row copies of the fused FFT convolution: strided / channels-last sequences <-> the rows of a task's transform
// buffer (4 x 4 tiles for channels-last), zero tails, and the row moments and their merge (BatchNorm statistics).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace {

// 4 x 4 tile of a channels-last block (position t, channel c at p[t * sp + c]) <-> the same tile of a row-major
// buffer (c, t at q[c * ld + t]), optionally scaled and shifted per channel on the way to the channels-last side.
// Copying whole tiles keeps every load and store on a few cache lines; the element-wise loop touched one buffer
// row (n elements apart) per element and took about a third of the fused forward's non-FFT time at stage 1.
template <typename T>
inline void tile_cl_to_rows(const T* p, int64_t sp, T* q, int64_t ld) {
#if defined(__SSE__)
  if constexpr (std::is_same_v<T, float>) {
    __m128 r0 = _mm_loadu_ps(p), r1 = _mm_loadu_ps(p + sp), r2 = _mm_loadu_ps(p + 2 * sp), r3 = _mm_loadu_ps(p + 3 * sp);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    _mm_storeu_ps(q, r0), _mm_storeu_ps(q + ld, r1), _mm_storeu_ps(q + 2 * ld, r2), _mm_storeu_ps(q + 3 * ld, r3);
    return;
  }
#endif
  for (int64_t c = 0; c < 4; ++c)
    for (int64_t t = 0; t < 4; ++t) q[c * ld + t] = p[t * sp + c];
}

template <typename T>
inline void tile_rows_to_cl(const T* q, int64_t ld, T scale, const T* shift, T* p, int64_t sp) {
#if defined(__SSE__)
  if constexpr (std::is_same_v<T, float>) {
    __m128 r0 = _mm_loadu_ps(q), r1 = _mm_loadu_ps(q + ld), r2 = _mm_loadu_ps(q + 2 * ld), r3 = _mm_loadu_ps(q + 3 * ld);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    const __m128 sc = _mm_set1_ps(scale), sh = _mm_loadu_ps(shift);
    _mm_storeu_ps(p, _mm_add_ps(_mm_mul_ps(r0, sc), sh));
    _mm_storeu_ps(p + sp, _mm_add_ps(_mm_mul_ps(r1, sc), sh));
    _mm_storeu_ps(p + 2 * sp, _mm_add_ps(_mm_mul_ps(r2, sc), sh));
    _mm_storeu_ps(p + 3 * sp, _mm_add_ps(_mm_mul_ps(r3, sc), sh));
    return;
  }
#endif
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t c = 0; c < 4; ++c) p[t * sp + c] = q[c * ld + t] * scale + shift[c];
}

// Zero columns [L, n) of each of `rows` rows ld apart: the padding of an in-place transform's input, which the
// previous transform in the same buffer overwrote.
template <typename T>
void zero_tails(T* buf, int64_t rows, int64_t ld, int64_t L, int64_t n) {
  for (int64_t c = 0; c < rows; ++c) std::fill(buf + c * ld + L, buf + c * ld + n, T(0));
}

// rows sequences of length L (element (c, t) at src[c * sc + t * st]) -> the first L columns of dst (rows, ld).
template <typename T>
void gather_rows(const T* src, int64_t sc, int64_t st, int64_t rows, int64_t L, int64_t ld, T* dst) {
  if (sc == 1) {  // channels-last: 4 x 4 tiles, then the ragged edges element by element
    const int64_t L4 = L - L % 4, R4 = rows - rows % 4;
    for (int64_t t = 0; t < L4; t += 4)
      for (int64_t c = 0; c < R4; c += 4) tile_cl_to_rows(src + t * st + c, st, dst + c * ld + t, ld);
    for (int64_t c = R4; c < rows; ++c)
      for (int64_t t = 0; t < L4; ++t) dst[c * ld + t] = src[t * st + c];
    for (int64_t t = L4; t < L; ++t)
      for (int64_t c = 0; c < rows; ++c) dst[c * ld + t] = src[t * st + c];
  } else {
    for (int64_t c = 0; c < rows; ++c)
      for (int64_t t = 0; t < L; ++t) dst[c * ld + t] = src[c * sc + t * st];
  }
}

// dst(c, t) = src[c * ld + t] * scale + bias[c] for t < L (bias may be null); dst element at c * dc + t * dt.
template <typename T>
void scatter_rows(const T* src, int64_t ld, int64_t rows, int64_t L, T scale, const T* bias, T* dst, int64_t dc,
                  int64_t dt) {
  if (dc == 1) {  // channels-last: 4 x 4 tiles, then the ragged edges element by element
    const int64_t L4 = L - L % 4, R4 = rows - rows % 4;
    const T zeros[4] = {T(0), T(0), T(0), T(0)};
    for (int64_t t = 0; t < L4; t += 4)
      for (int64_t c = 0; c < R4; c += 4)
        tile_rows_to_cl(src + c * ld + t, ld, scale, bias ? bias + c : zeros, dst + t * dt + c, dt);
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = t < L4 ? R4 : 0; c < rows; ++c) dst[t * dt + c] = src[c * ld + t] * scale + (bias ? bias[c] : T(0));
  } else {
    for (int64_t c = 0; c < rows; ++c) {
      const T bc = bias ? bias[c] : T(0);
      for (int64_t t = 0; t < L; ++t) dst[c * dc + t * dt] = src[c * ld + t] * scale + bc;
    }
  }
}

// Moments of one row u[t] = v[t] * scale + shift, t < L, in double and in two passes over the row (it is in cache
// right after its inverse transform): mean, then the sum of squared deviations from it. E[u^2] - E[u]^2 would cancel
// catastrophically when |mean| >> std (a residual stream with a large mean): at mean 1000 that lost 4e-2 of a unit
// variance in float32.
template <typename T>
void row_moments(const T* v, int64_t L, T scale, T shift, double* mean, double* m2) {
  double s[8] = {};
  int64_t t = 0;
  for (; t + 8 <= L; t += 8)
    for (int j = 0; j < 8; ++j) s[j] += static_cast<double>(v[t + j] * scale + shift);
  double total = 0;
  for (int j = 0; j < 8; ++j) total += s[j];
  for (; t < L; ++t) total += static_cast<double>(v[t] * scale + shift);
  const double mu = total / static_cast<double>(L);
  double q[8] = {};
  t = 0;
  for (; t + 8 <= L; t += 8)
    for (int j = 0; j < 8; ++j) {
      const double d = static_cast<double>(v[t + j] * scale + shift) - mu;
      q[j] += d * d;
    }
  double dev = 0;
  for (int j = 0; j < 8; ++j) dev += q[j];
  for (; t < L; ++t) {
    const double d = static_cast<double>(v[t] * scale + shift) - mu;
    dev += d * d;
  }
  *mean = mu;
  *m2 = dev;
}

// Merge a group of n_b values with mean mean_b and squared deviations m2_b into acc = [count, mean, m2] (Chan et al.'s
// pairwise update; stable whatever the means).
inline void merge_moments(double* acc, double n_b, double mean_b, double m2_b) {
  const double n_a = acc[0];
  if (n_a == 0) {
    acc[0] = n_b, acc[1] = mean_b, acc[2] = m2_b;
    return;
  }
  const double n = n_a + n_b, d = mean_b - acc[1];
  acc[1] += d * (n_b / n);
  acc[2] += m2_b + d * d * (n_a * n_b / n);
  acc[0] = n;
}

}  // namespace
