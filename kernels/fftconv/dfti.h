// The subset of oneMKL's DFTI C interface used by fftconv_cpu.cpp, declared here so that the extension
// builds without MKL headers. The functions are resolved at load time from libtorch_cpu, which exports
// them on torch builds with MKL (torch.backends.mkl.is_available(); the x86-64 wheels). Enumerator values
// are those of oneMKL's mkl_dfti.h (an ABI that has not changed since MKL 10). Linux LP64: MKL_LONG = long.
#pragma once

extern "C" {

typedef long MKL_LONG;
typedef struct DFTI_DESCRIPTOR* DFTI_DESCRIPTOR_HANDLE;

enum DFTI_CONFIG_PARAM {
  DFTI_CONJUGATE_EVEN_STORAGE = 10,
  DFTI_PLACEMENT = 11,
  DFTI_NUMBER_OF_TRANSFORMS = 7,
  DFTI_INPUT_DISTANCE = 14,
  DFTI_OUTPUT_DISTANCE = 15,
  DFTI_THREAD_LIMIT = 27,
};

enum DFTI_CONFIG_VALUE {
  DFTI_REAL = 33,
  DFTI_COMPLEX_COMPLEX = 39,
  DFTI_INPLACE = 43,
};

// DftiCreateDescriptor(&h, DFTI_SINGLE / DFTI_DOUBLE, DFTI_REAL, 1, n) is a macro for these in mkl_dfti.h.
MKL_LONG DftiCreateDescriptor_s_1d(DFTI_DESCRIPTOR_HANDLE*, enum DFTI_CONFIG_VALUE domain, ...);
MKL_LONG DftiCreateDescriptor_d_1d(DFTI_DESCRIPTOR_HANDLE*, enum DFTI_CONFIG_VALUE domain, ...);
MKL_LONG DftiCommitDescriptor(DFTI_DESCRIPTOR_HANDLE);
MKL_LONG DftiComputeForward(DFTI_DESCRIPTOR_HANDLE, void*, ...);
MKL_LONG DftiComputeBackward(DFTI_DESCRIPTOR_HANDLE, void*, ...);
MKL_LONG DftiSetValue(DFTI_DESCRIPTOR_HANDLE, enum DFTI_CONFIG_PARAM, ...);
MKL_LONG DftiFreeDescriptor(DFTI_DESCRIPTOR_HANDLE*);
char* DftiErrorMessage(MKL_LONG);

}  // extern "C"
