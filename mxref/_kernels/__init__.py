"""Integer-domain Numba kernels: fp32 bit patterns in, element codes and scale bytes out.

No float arithmetic decides anything here: values are (significand, exponent) integer pairs,
rounding is done on the discarded bits, the block amax is an integer max over
``bits & 0x7FFFFFFF``. fastmath is off everywhere (tests/test_numba_policy.py asserts it).

* :mod:`.f32`: the one rounding (round_magnitude), integer fp32 arithmetic, Philox;
* :mod:`.semantics`: every profile knob once (block_policy, shared_exponent and its fast twin
  shared_exponent_thresholds, finish_code, zero_code, nvfp4_block_scale, ...);
* :mod:`.mx`: MX quantize / dequantize loops; :mod:`.nvfp4`: NVFP4 loops.

Callers use ``from mxref import _kernels as K; K.name``: every name is re-exported here.
"""
# numba's runtime settings (threading layer, ...) are chosen before numba is first imported
from .._numba_setup import configure as _configure_numba

_configure_numba()

from .f32 import (  # noqa: E402, F401
    _JIT, F32_2688, F32_448, F32_E4M3_TINY, F32_INF, F32_MAXBITS, F32_ONE, F32_PARAMS, F32_QNAN,
    F32_SIX, RNE, STOCHASTIC, TIES_AWAY, TIES_ZERO, bit_length, element_quotient,
    exact_quotient, f32_div, f32_min_pos, f32_mul, f32_parts, njit, normalize_f32, philox4x32,
    philox_stream, philox_stream4, round_magnitude, to_f32_bits)
from .semantics import (  # noqa: E402, F401
    CEIL, EVEN, FINITE_RULE, FLOOR, INT8_FULL, INT8_SYMMETRIC, LN2_Q32, NAN_SCALE,
    NONSATURATING, NV_EXACT, NV_TE,
    NV_TORCHAO, NV_TRITON_KERNELS, POISON, RCEIL, ROUND_DOWN, SAT_RNE, SATURATE, SCALE_MAX, SZ_INPUT_TO_POS,
    SZ_NEVER_NEG, SZ_PRESERVE, block_amax, block_poisoned, block_policy, clamp_exponent,
    code_to_f32, element_exponent, element_parts, encode_f32, encode_fast_ok, finish_code,
    finish_element, int_full, nan_element, nan_element_code, nonfinite_policy, nvfp4_block_scale, overflow_code, rceil_via_f32_log2,
    scale_thresholds, shared_exponent, shared_exponent_thresholds, te_4over6_block_scale,
    thresholds_exact, zero_code)
from .mx import (  # noqa: E402, F401
    CHUNK_BLOCKS, add32, and32, block_amax_amin, block_amax_only, dequantize_mx,
    encode_block_fast, encode_elements, encode_span_fast, flat_ok, or32, quantize_mx,
    quantize_mx_flat, shl32, shr32, sub32)
from .nvfp4 import dequantize_nvfp4, nvfp4_tensor_constants, quantize_nvfp4  # noqa: E402, F401
