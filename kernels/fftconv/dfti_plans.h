// oneMKL DFTI plans of the fused FFT convolution: committed descriptors, cached per thread, bounded, freed.
//
// A task runs one batched in-place real transform per direction of `rows` rows of length n, single-threaded
// (tasks are the parallelism), so each thread keeps its own committed descriptors. The cache is keyed by the
// full (n, rows) pair (no bit packing, so no hidden limits on either) and holds at most kMaxPlans entries per
// thread and precision, least recently used first out; evicting an entry frees its descriptors
// (DftiFreeDescriptor), as does the thread's exit. plan_counts() reports descriptors created and freed.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <list>
#include <tuple>

#include "dfti.h"

namespace {

template <typename T>
struct Prec;
template <>
struct Prec<float> {
  static MKL_LONG create(DFTI_DESCRIPTOR_HANDLE* h, MKL_LONG n) { return DftiCreateDescriptor_s_1d(h, DFTI_REAL, n); }
};
template <>
struct Prec<double> {
  static MKL_LONG create(DFTI_DESCRIPTOR_HANDLE* h, MKL_LONG n) { return DftiCreateDescriptor_d_1d(h, DFTI_REAL, n); }
};

void dfti_check(MKL_LONG status, const char* what) {
  TORCH_CHECK(status == 0, "fftconv (cpu): ", what, " failed: ", DftiErrorMessage(status));
}

std::atomic<int64_t> g_descriptors_created{0}, g_descriptors_freed{0};

// In-place batched real transforms of `rows` rows of 2F = 2 (n / 2 + 1) reals: n reals in, F complex out (CCE).
template <typename T>
DFTI_DESCRIPTOR_HANDLE make_descriptor(int64_t n, int64_t rows, bool forward) {
  // MKL_LONG is 64-bit where this builds (LP64 Linux / macOS); the distances below are at most n + 2
  TORCH_CHECK(n >= 1 && rows >= 1 && n < std::numeric_limits<MKL_LONG>::max() / 2 &&
                  rows <= std::numeric_limits<MKL_LONG>::max(),
              "fftconv (cpu): transform length ", n, " and row count ", rows, " must be positive and fit MKL_LONG");
  const MKL_LONG spec = n / 2 + 1;
  DFTI_DESCRIPTOR_HANDLE h = nullptr;
  dfti_check(Prec<T>::create(&h, static_cast<MKL_LONG>(n)), "DftiCreateDescriptor");
  ++g_descriptors_created;
  auto set = [&](MKL_LONG status, const char* what) {
    if (status != 0) {  // do not leak the half-configured descriptor
      DftiFreeDescriptor(&h);
      ++g_descriptors_freed;
    }
    dfti_check(status, what);
  };
  set(DftiSetValue(h, DFTI_PLACEMENT, DFTI_INPLACE), "DFTI_PLACEMENT");
  set(DftiSetValue(h, DFTI_CONJUGATE_EVEN_STORAGE, DFTI_COMPLEX_COMPLEX), "DFTI_CONJUGATE_EVEN_STORAGE");
  set(DftiSetValue(h, DFTI_NUMBER_OF_TRANSFORMS, static_cast<MKL_LONG>(rows)), "DFTI_NUMBER_OF_TRANSFORMS");
  set(DftiSetValue(h, DFTI_INPUT_DISTANCE, forward ? 2 * spec : spec), "DFTI_INPUT_DISTANCE");
  set(DftiSetValue(h, DFTI_OUTPUT_DISTANCE, forward ? spec : 2 * spec), "DFTI_OUTPUT_DISTANCE");
  set(DftiSetValue(h, DFTI_THREAD_LIMIT, static_cast<MKL_LONG>(1)), "DFTI_THREAD_LIMIT");  // one task, one thread
  set(DftiCommitDescriptor(h), "DftiCommitDescriptor");
  return h;
}

// The forward and backward descriptors of one (n, rows); owns them (move-only, freed on destruction).
struct Plan {
  DFTI_DESCRIPTOR_HANDLE fwd = nullptr;
  DFTI_DESCRIPTOR_HANDLE bwd = nullptr;
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  Plan(Plan&& o) noexcept : fwd(o.fwd), bwd(o.bwd) { o.fwd = o.bwd = nullptr; }
  ~Plan() {
    for (DFTI_DESCRIPTOR_HANDLE* h : {&fwd, &bwd})
      if (*h != nullptr) {
        DftiFreeDescriptor(h);
        ++g_descriptors_freed;
      }
  }
};

// At most this many (n, rows) plans per thread and precision. A model uses one n per stage and input size and a
// row count per channel block (the last block of a stage may be shorter), so a network at a few input sizes
// stays well inside it; a long tail of sizes (e.g. a sweep) recycles the oldest plans instead of growing.
constexpr size_t kMaxPlans = 32;

// The committed plan of (n, rows) for this thread. The reference stays valid until this thread's next call:
// a task fetches its plan and uses it before it fetches another.
template <typename T>
const Plan& plan_for(int64_t n, int64_t rows) {
  struct Entry {
    int64_t n, rows;
    Plan plan;
  };
  thread_local std::list<Entry> plans;  // most recently used first
  for (auto it = plans.begin(); it != plans.end(); ++it)
    if (it->n == n && it->rows == rows) {
      plans.splice(plans.begin(), plans, it);
      return plans.front().plan;
    }
  Plan p;
  p.fwd = make_descriptor<T>(n, rows, true);
  p.bwd = make_descriptor<T>(n, rows, false);
  plans.push_front(Entry{n, rows, std::move(p)});
  if (plans.size() > kMaxPlans) plans.pop_back();
  return plans.front().plan;
}

// (created, freed) descriptors so far, all threads and precisions.
std::tuple<int64_t, int64_t> plan_counts() { return {g_descriptors_created.load(), g_descriptors_freed.load()}; }

}  // namespace
