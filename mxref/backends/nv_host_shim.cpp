// mxref nv-host shim: NVIDIA's own conversion functions (cuda_fp4.h, cuda_fp6.h, cuda_fp8.h),
// compiled as host code, exported with C linkage for ctypes (mxref/backends/nv_host.py builds
// and loads it). Every numeric decision below is the header's; the shim only loops.
//
// Element formats (fmt): 0 E2M1, 1 E2M3, 2 E3M2, 3 E4M3, 4 E5M2. FP4/FP6 conversions take a
// rounding mode and always saturate finite overflow; FP8 conversions round to nearest and take
// a saturation mode. The shim passes cudaRoundNearest and __NV_SATFINITE.
// Sources (src): 0 fp32 bits, 1 bf16 bits, 2 fp16 bits, 3 float64 values.
#include <cuda_fp4.h>   // includes cuda_fp6.h and cuda_fp8.h
#include <cstdint>
#include <cstring>

namespace {

template <typename T>
__nv_fp8_storage_t cvt_one(int fmt, T x);

#define MXREF_NV_DISPATCH(F4, F6, F8)                                                  \
    switch (fmt) {                                                                     \
        case 0: return (__nv_fp8_storage_t)F4(x, __NV_E2M1, cudaRoundNearest);         \
        case 1: return (__nv_fp8_storage_t)F6(x, __NV_E2M3, cudaRoundNearest);         \
        case 2: return (__nv_fp8_storage_t)F6(x, __NV_E3M2, cudaRoundNearest);         \
        case 3: return F8(x, __NV_SATFINITE, __NV_E4M3);                               \
        default: return F8(x, __NV_SATFINITE, __NV_E5M2);                              \
    }

template <>
__nv_fp8_storage_t cvt_one<float>(int fmt, float x) {
    MXREF_NV_DISPATCH(__nv_cvt_float_to_fp4, __nv_cvt_float_to_fp6, __nv_cvt_float_to_fp8)
}

template <>
__nv_fp8_storage_t cvt_one<double>(int fmt, double x) {
    MXREF_NV_DISPATCH(__nv_cvt_double_to_fp4, __nv_cvt_double_to_fp6, __nv_cvt_double_to_fp8)
}

template <>
__nv_fp8_storage_t cvt_one<__nv_bfloat16_raw>(int fmt, __nv_bfloat16_raw x) {
    MXREF_NV_DISPATCH(__nv_cvt_bfloat16raw_to_fp4, __nv_cvt_bfloat16raw_to_fp6,
                      __nv_cvt_bfloat16raw_to_fp8)
}

template <>
__nv_fp8_storage_t cvt_one<__half_raw>(int fmt, __half_raw x) {
    MXREF_NV_DISPATCH(__nv_cvt_halfraw_to_fp4, __nv_cvt_halfraw_to_fp6, __nv_cvt_halfraw_to_fp8)
}

}  // namespace

extern "C" {

// Element conversion of n source values to n codes (one per byte). Returns 0, or -1 for an
// unknown fmt/src (the caller checks both; this is a second guard).
int mxref_nv_convert(int fmt, int src, const void *in, uint8_t *out, int64_t n) {
    if (fmt < 0 || fmt > 4 || src < 0 || src > 3) return -1;
    for (int64_t i = 0; i < n; ++i) {
        if (src == 0) {
            uint32_t b;
            std::memcpy(&b, (const uint32_t *)in + i, 4);
            float f;
            std::memcpy(&f, &b, 4);
            out[i] = cvt_one<float>(fmt, f);
        } else if (src == 3) {
            out[i] = cvt_one<double>(fmt, ((const double *)in)[i]);
        } else {
            unsigned short b = ((const uint16_t *)in)[i];
            if (src == 1) {
                __nv_bfloat16_raw r;
                r.x = b;
                out[i] = cvt_one<__nv_bfloat16_raw>(fmt, r);
            } else {
                __half_raw r;
                r.x = b;
                out[i] = cvt_one<__half_raw>(fmt, r);
            }
        }
    }
    return 0;
}

// __nv_cvt_double_to_e8m0 of n values: rounding 0 = cudaRoundZero, 1 = cudaRoundPosInf (the
// two modes the header accepts); satfinite 1 = __NV_SATFINITE, 0 = __NV_NOSAT.
int mxref_nv_e8m0(const double *in, uint8_t *out, int64_t n, int rounding, int satfinite) {
    if (rounding < 0 || rounding > 1) return -1;
    const cudaRoundMode rm = rounding ? cudaRoundPosInf : cudaRoundZero;
    const __nv_saturation_t sat = satfinite ? __NV_SATFINITE : __NV_NOSAT;
    for (int64_t i = 0; i < n; ++i) out[i] = __nv_cvt_double_to_e8m0(in[i], sat, rm);
    return 0;
}

// __nv_cvt_float_to_e8m0 of n fp32 values (the entry point the docs describe for fp32 scales).
int mxref_nv_e8m0_f32(const float *in, uint8_t *out, int64_t n, int rounding, int satfinite) {
    if (rounding < 0 || rounding > 1) return -1;
    const cudaRoundMode rm = rounding ? cudaRoundPosInf : cudaRoundZero;
    const __nv_saturation_t sat = satfinite ? __NV_SATFINITE : __NV_NOSAT;
    for (int64_t i = 0; i < n; ++i) out[i] = __nv_cvt_float_to_e8m0(in[i], sat, rm);
    return 0;
}

}  // extern "C"
