// C-linkage wrapper over AMD's host model of the gfx950 scaled conversions
// (amd_hip_ocp_host.hpp, namespace fcbx), for the mxref ``amd-host`` verify backend.
//
// The AMD header is not part of mxref: mxref/backends/amd_host.py finds it (a ROCm install,
// a Triton source tree or wheel that ships it, or $MXREF_AMD_OCP_HOST) and copies it into a
// private build folder next to a small stand-in for its companion amd_hip_ocp_types.h (the
// macros and storage typedefs it needs on the host; the real one requires hipcc or GCC >= 14).
// Nothing here restates AMD's rounding: every code comes from fcbx::from_float.
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "amd_hip_ocp_host.hpp"

namespace {

template <fcbx::Encoding E>
void convert_f32(const uint32_t* in, const int8_t* scale_exp, uint8_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, &in[i], sizeof f);
    // sat = true: what __amd_cvt_floatx2_to_fp4x2_scale and fp6_cvt_packedx32 instantiate
    out[i] = static_cast<uint8_t>(fcbx::from_float<float, E, true>(f, scale_exp[i]));
  }
}

}  // namespace

extern "C" {

// fmt: 0 E2M1 (FP4), 1 E2M3 (FP6), 2 E3M2 (BF6). in: float32 bit patterns; scale_exp: the
// int8 scale exponent per element (E8M0 byte - 127; -128 is AMD's NaN scale).
// Returns 0, or 1 for an unknown fmt.
int mxref_amd_from_float(int fmt, const uint32_t* in, const int8_t* scale_exp, uint8_t* out,
                         int64_t n) {
  switch (fmt) {
    case 0:
      convert_f32<fcbx::Encoding::E2M1>(in, scale_exp, out, n);
      return 0;
    case 1:
      convert_f32<fcbx::Encoding::E2M3>(in, scale_exp, out, n);
      return 0;
    case 2:
      convert_f32<fcbx::Encoding::E3M2>(in, scale_exp, out, n);
      return 0;
    default:
      return 1;
  }
}

// The inverse, fcbx::to_float<float, E, true>: element code and scale exponent -> float32 bits.
int mxref_amd_to_float(int fmt, const uint8_t* in, const int8_t* scale_exp, uint32_t* out,
                       int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float f;
    switch (fmt) {
      case 0:
        f = fcbx::to_float<float, fcbx::Encoding::E2M1, true>(in[i], scale_exp[i]);
        break;
      case 1:
        f = fcbx::to_float<float, fcbx::Encoding::E2M3, true>(in[i], scale_exp[i]);
        break;
      case 2:
        f = fcbx::to_float<float, fcbx::Encoding::E3M2, true>(in[i], scale_exp[i]);
        break;
      default:
        return 1;
    }
    std::memcpy(&out[i], &f, sizeof f);
  }
  return 0;
}

}  // extern "C"
