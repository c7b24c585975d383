"""Every named peer profile reproduces a documented divergence (mx_anchors.md section B).

Expected bytes are worked out by hand from the research notes, not from mxref.
"""
import numpy as np
import pytest

import mxref


def block(*vals, n=32, fill=0.0):
    x = np.full(n, fill, dtype=np.float32)
    x[: len(vals)] = vals
    return x


def q(x, fmt, profile, **kw):
    return mxref.quantize(np.asarray(x, dtype=np.float32), fmt, profile, **kw)


def test_b1_floor_vs_rceil_e4m3_amax_480():
    ocp, rc = q(block(480.0, 1.0), "mxfp8_e4m3", "ocp"), q(block(480.0, 1.0), "mxfp8_e4m3", "rceil")
    assert (ocp.scales[0], ocp.codes[0]) == (0x7F, 0x7E)          # 480 -> 448 clamped
    assert (rc.scales[0], rc.codes[0]) == (0x80, 0x77)            # 480 / 2 = 240 = 1.875 * 2^7
    assert ocp.dequantize()[0] == 448.0 and rc.dequantize()[0] == 480.0


@pytest.mark.parametrize("profile", ["rceil", "torchao_rceil", "triton_kernels_round_up"])
def test_b1_rceil_family_fp4(profile):
    r = q(block(7.0, 0.25, 1.0), "mxfp4", profile)
    assert r.scales[0] == 0x80 and list(r.codes[:3]) == [0x6, 0x0, 0x1]  # 7/2 = 3.5 -> 4 (tie, even)


def test_b2_torchao_ceil_is_not_rceil():
    assert q(block(300.0), "mxfp8_e4m3", "torchao_ceil").scales[0] == 0x80
    assert q(block(300.0), "mxfp8_e4m3", "rceil").scales[0] == 0x7F


def test_b3_even_rounds_amax_up_at_1_75_in_fp4():
    assert q(block(7.0), "mxfp4", "torchao_even").scales[0] == 0x80
    assert q(block(6.5), "mxfp4", "torchao_even").scales[0] == 0x7F   # sig 1.625 < 1.75
    assert q(block(7.0), "mxfp4", "ocp").scales[0] == 0x7F


def test_b4_round_down_saturates_block_max():
    r = q(block(256.0), "mxfp8_e4m3", "triton_kernels_round_down")
    assert r.scales[0] == 0x7E and r.codes[0] == 0x7E                 # 256 / 0.5 = 512 -> 448
    assert q(block(256.0), "mxfp8_e4m3", "ocp").scales[0] == 0x7F


def test_b5_rceil_fp32_subnormal_edge():
    amax = np.uint32(0x00001000).view(np.float32)                     # 2^-137
    assert q(block(amax), "mxfp4", "rceil").scales[0] == 0x00
    assert q(block(amax), "mxfp4", "triton_kernels_round_up").scales[0] == 0x01


def test_b6_inf_block_ocp_poisons_te_saturates():
    ocp = q(block(np.inf, 1.0), "mxfp8_e4m3", "ocp")
    te = q(block(np.inf, 1.0), "mxfp8_e4m3", "te_mxfp8")
    assert ocp.scales[0] == 0xFF
    assert te.scales[0] == 0xFE and te.codes[0] == 0x7E and te.codes[1] == 0x00


def test_b7_nan_block_ocp_poisons_te_ignores():
    x = block(np.nan, 1.0)
    assert q(x, "mxfp8_e4m3", "ocp").scales[0] == 0xFF
    te = q(x, "mxfp8_e4m3", "te_mxfp8")
    # amax = 1.0: rceil -> ceil(log2(1/448)) = -8 -> byte 0x77; 1.0 * 2^8 = 256 -> code 0x78
    assert te.scales[0] == 0x77 and te.codes[0] == 0x7F and te.codes[1] == 0x78


def test_b8_zero_block_scale_byte_zero_every_rule():
    for p in ["ocp", "rceil", "torchao_ceil", "torchao_even", "triton_kernels_round_down"]:
        r = q(block(), "mxfp4", p)
        assert r.scales[0] == 0x00 and not r.codes.any()


def test_b15_microxcaling_ties_away():
    x = block(6.0, 0.25, 0.75, 1.25, 2.5, 5.0)
    assert list(q(x, "mxfp4", "ocp").codes[:6]) == [7, 0, 2, 2, 4, 6]
    assert list(q(x, "mxfp4", "microxcaling").codes[:6]) == [7, 1, 2, 3, 5, 7]


def test_microxcaling_cpp_zeros_are_positive():
    # mx/cpp/quantize.cuh quantize_elemwise: `if (tmant == 0) return 0.0;` -- an input -0.0 and
    # -0.1 (0.1 < 0.25, half of the smallest E2M1 step at X = 1) both give +0
    x = block(4.0, -0.0, -0.1)
    assert list(q(x, "mxfp4", "microxcaling").codes[:3]) == [6, 0, 0]
    assert list(q(x, "mxfp4", "ocp").codes[:3]) == [6, 8, 8]


def test_b27_mxint8_minus_two_only_in_gfloat():
    # x/X = -127.5/64 is the tie between k = -127 (0x81) and k = -128 (0x80); gfloat's int8
    # reaches -2.0 and RNE picks the even k; ocp / microxcaling keep -2.0 unused
    x = block(-127.5 / 64, 1.0)
    assert q(x, "mxint8", "gfloat").codes[0] == 0x80
    assert q(x, "mxint8", "ocp").codes[0] == 0x81
    assert q(x, "mxint8", "microxcaling").codes[0] == 0x81


def test_b16_ties_up_fp4():
    x = block(6.0, 0.25, 1.25, 2.5, 5.0)
    r = q(x, "mxfp4", "triton_kernels_ties_up")
    assert list(r.codes[1:5]) == [1, 3, 5, 7]   # 0.5, 1.5, 3, 6


def test_ties_zero_profile_knob():
    prof = mxref.get_profile("ocp").replace(name="quartet", rounding="ties_zero")
    r = q(block(6.0, 0.75, 1.75, 3.5), "mxfp4", prof)
    assert list(r.codes[1:4]) == [1, 3, 5]      # 0.5, 1.5, 3 where RNE gives 1, 2, 4


def test_b18_nvfp4_op_order():
    x = np.zeros(16, dtype=np.float32)
    x[0] = 11.0625
    g = np.float32(29.5)
    assert mxref.quantize(x, "nvfp4", "ocp", global_amax=g).scales[0] == 0x72       # 160
    assert mxref.quantize(x, "nvfp4", "torchao_nvfp4", global_amax=g).scales[0] == 0x72
    assert mxref.quantize(x, "nvfp4", "te_nvfp4", global_amax=g).scales[0] == 0x73  # 176


def test_b19_torchao_nvfp4_scale_clamped_to_2m6():
    x = np.zeros(16, dtype=np.float32)
    x[0] = 0.05
    single = dict(nvfp4_tensor_scale=False)
    ocp = mxref.quantize(x, "nvfp4", mxref.get_profile("ocp").replace(**single))
    tao = mxref.quantize(x, "nvfp4", mxref.get_profile("torchao_nvfp4").replace(**single))
    # 0.05 / 6 = 0.00833: E4M3 subnormal 4 * 2^-9 = 0.0078125 (code 0x04); torchao: 2^-6 (0x08)
    assert ocp.scales[0] == 0x04 and tao.scales[0] == 0x08
    assert tao.codes[0] == 0x5                  # 0.05 / 0.015625 = 3.2 -> 3


def test_torchao_nvfp4_multiplies_by_reciprocal():
    """torchao 0.18: x * fl(fl(1/T)/S). T = 2688/2688 = 1, S = 1440/6 = 240 (0x77): 300/240 =
    1.25 is an E2M1 tie (exact order: even, 1.0); fl(1/240) = 0.0041666669 rounds up, so
    300 * fl(1/240) = 1.2500001 -> 1.5 (code 0x3). Hand-worked, and what torchao 0.18 gives."""
    x = np.zeros((2, 16), np.float32)
    x[0, 0] = 2688.0
    x[1, :2] = [1440.0, 300.0]
    assert np.float32(1) / np.float32(240) * np.float32(300) > np.float32(1.25)
    tao = mxref.quantize(x, "nvfp4", "torchao_nvfp4")
    ocp = mxref.quantize(x, "nvfp4", "ocp")
    assert tao.tensor_scale == 1.0 and tao.scales[1, 0] == 0x77
    assert tao.codes[1, 1] == 0x3 and ocp.codes[1, 1] == 0x2


def test_b20_nvfp4_zero_tensor():
    r = mxref.quantize(np.zeros(32, np.float32), "nvfp4", "te_nvfp4")
    assert not r.scales.any() and not r.codes.any() and r.tensor_scale == 1.0


def test_b23_te_nvfp4_negative_zero_input_is_positive():
    x = np.zeros(16, dtype=np.float32)
    x[:3] = [6.0, -0.0, -0.1]
    te = mxref.quantize(x, "nvfp4", "te_nvfp4", global_amax=np.float32(6.0))
    ocp = mxref.quantize(x, "nvfp4", "ocp", global_amax=np.float32(6.0))
    assert te.codes[1] == 0x0 and te.codes[2] == 0x8
    assert ocp.codes[1] == 0x8 and ocp.codes[2] == 0x8


def test_b27_mxint8_never_emits_minus_128():
    r = q(block(-2.0, 1.0), "mxint8", "ocp")
    # amax 2 -> floor s = 1: -2 / 2 = -1 -> -64 (0xC0); with rceil s = 1 too
    assert r.codes[0] == 0xC0
    r = q(block(-1.9999999, 0.0), "mxint8", "ocp")   # s = 0: -1.99.. * 64 -> -128 saturates to -127
    assert r.codes[0] == 0x81


def test_scale_overflow_nan_in_microxcaling():
    big = np.float32(3.4e38)                       # 2^127 * 1.9989 > 127/64: rceil exponent 128
    assert q(block(big), "mxint8", "rceil").scales[0] == 0xFE
    prof = mxref.get_profile("rceil").replace(name="r", scale_overflow="nan")
    assert q(block(big), "mxint8", prof).scales[0] == 0xFF


def test_nonsaturating_fp8_overflow():
    prof = mxref.get_profile("ocp").replace(name="ns", overflow="nonsaturating")
    e4 = q(block(464.0 + 16, 1.0), "mxfp8_e4m3", prof)      # 480 at scale 2^0 -> NaN
    assert e4.codes[0] == 0x7F
    e5 = q(block(61440.0), "mxfp8_e5m2", prof)              # tie to 65536 -> Inf
    assert e5.codes[0] == 0x7C
    assert q(block(61440.0), "mxfp8_e5m2", "ocp").codes[0] == 0x7B


def test_flush_fp32_subnormals():
    sub = np.uint32(0x00400000).view(np.float32)             # 2^-127
    prof = mxref.get_profile("ocp").replace(name="flush", flush_fp32_subnormals=True)
    kept = q(block(sub), "mxfp8_e4m3", "ocp")
    flushed = q(block(sub), "mxfp8_e4m3", prof)
    # kept: amax 2^-127 -> s = -135 clamped to -127: 2^-127 / 2^-127 = 1.0 -> 0x38
    assert kept.scales[0] == 0x00 and kept.codes[0] == 0x38
    assert flushed.scales[0] == 0x00 and flushed.codes[0] == 0x00


def test_amax_2k_minus_1ulp_not_fooled_by_float_log2():
    # float32 log2(16777215) rounds to 24.0 (conformance_anchors A8); exact floor is 23.
    r = q(block(16777215.0), "mxfp4", "ocp")
    assert r.scales[0] == 127 + 21 and r.codes[0] == 0x7   # 2^21, 7.99.. saturates to 6


def test_torchao_018_inf_block_reads_inf_as_2_128():
    r = q(block(np.inf, 1.0), "mxfp8_e4m3", "torchao_floor")
    assert r.scales[0] == 0xF7 and r.codes[0] == 0x7E and r.codes[1] == 0   # 128 - 8 + 127
    assert q(block(np.inf, 1.0), "mxfp4", "torchao_floor").scales[0] == 253    # 128 - 2 + 127
    assert q(block(np.inf, 1.0), "mxfp8_e4m3", "torchao_rceil").scales[0] == 0xFE


def test_torchao_018_zero_scale_element_divisor():
    tiny = np.float32(2.0**-130)          # block amax 2^-130 -> scale byte 0x00 in every rule
    assert q(block(tiny), "mxfp8_e4m3", "ocp").codes[0] == 0x20          # / 2^-127 = 2^-3
    assert q(block(tiny), "mxfp8_e4m3", "torchao_floor").codes[0] == 0x18  # / 2^-126 = 2^-4
    assert q(block(tiny), "mxfp8_e4m3", "torchao_rceil").codes[0] == 0x00  # unscaled: 2^-130


def test_torchao_018_rceil_float32_log2():
    x = block(np.uint32(0x3FE00001).view(np.float32))   # 1.75 + 1 ulp: exact rceil is 2^-7
    assert q(x, "mxfp8_e4m3", "rceil").scales[0] == 120
    assert q(x, "mxfp8_e4m3", "torchao_rceil").scales[0] == 119       # log2 rounds to -8.0
