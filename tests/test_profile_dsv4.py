"""Profiles dsv4 / dsv4_vllm (issue 28 item 4): the amax_floor knob, DeepSeek-V4 MXFP4.

Expected bytes are worked by hand from the sources (not from the code under test):

* dsv4: DeepSeek-V4 inference/kernel.py::fp4_quant_kernel (deepseek-ai DeepSeek-V4-Pro; read
  in the mirror Anshler/deepseek-v4-with-attention-residuals@082a891c): ``amax =
  T.max(amax, 6 * (2**-126))``; scale ``fast_round_scale(amax, 1/6)`` = 2^(exponent field of
  fl32(amax * fl32(1/6)) - 127 + [mantissa != 0]); elements ``T.Cast(FP4, T.clamp(x / s, -6,
  6))`` (E2M1 RNE satfinite). ceil(log2 fl32(amax * fl32(1/6))) equals the exact
  ceil(log2(amax / 6)) for every fp32 amax >= 6*2^-126 (test_fast_round_scale_is_exact_rceil
  checks all significands), so the profile is rceil with the floor 0x01C00000.
* dsv4_vllm: vLLM fused_indexer_q.py::_quantize_mxfp4_pair before PR #41015: ``amax =
  tl.maximum(amax, 1e-4)``, ``ceil(log2(amax / 6.0))``; elements ``_e2m1_nibble``: bucketize
  |x/s| (clamped to 6) on [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] with each boundary in the
  lower bucket (ties toward zero), sign bit only on a nonzero code (no -0).

Every vector runs through the Numba reference, the Fraction oracle, torch_emu and the Triton
mx_quantize kernel (interpreted); the other Triton kernels whose inputs reach these profiles
(rotate_mx_quantize, fp8_to_mxfp4, reblock) are compared with the reference on tiny-amax data.
Plants that make these tests fail (each tried, then reverted): the floor removed from
semantics.shared_exponent (Numba), oracle.block_scale, torch_emu._quantize_blocks,
triton_quant.mx_quantize_kernel, triton_rotate._mx_blocks, triton_convert fp8_to_mxfp4_kernel
and reblock_kernel; fp8fp4.fp8_to_mxfp4_rows's all-zero block short cut (s = -127) restored;
dsv4_vllm with rounding='rne' / signed_zero='preserve'.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import mxref
from mxref.errors import ProfileConflictError
from mxref.profiles import get_profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle as O  # noqa: E402

F_DSV4 = 0x01C00000          # fp32 6 * 2^-126 (DeepSeek-V4 reference floor)
F_VLLM = 0x38D1B717          # fp32(1e-4) (vLLM Triton floor before PR #41015)
SIX_M126 = 0x01C00000
E1M6 = 0x358637BD            # fp32(1e-6) = 1.048576 * 2^-20
E1M3 = 0x3A83126F            # fp32(1e-3) = 1.024 * 2^-10
NEG0 = 0x80000000


def f32(v: float) -> int:
    return int(np.float32(v).view(np.uint32))


# (name, leading element bits (the rest of the 32-block is +0),
#  {profile: (scale byte, codes of the leading elements)}), worked by hand:
#  rceil scale = 127 + ceil(log2(max(amax, floor) / 6)), clamped at 0.
CASES = [
    # all-zero block: the floor decides the scale (dsv4 0x01: "all-zero group takes byte 1")
    ("zero", [0], {"ocp": (0x00, [0]), "rceil": (0x00, [0]),
                   "dsv4": (0x01, [0]), "dsv4_vllm": (0x70, [0])}),
    # amax 2^-126: rceil ceil(-126 - log2 6) = -128 -> clamp 0x00, 2^-126/2^-127 = 2 -> 0x4;
    # dsv4 reads 6*2^-126: 2^-126, element 1.0 -> 0x2; vllm 2^-15, element -> 0
    ("2^-126", [0x00800000], {"ocp": (0x00, [0x4]), "rceil": (0x00, [0x4]),
                              "dsv4": (0x01, [0x2]), "dsv4_vllm": (0x70, [0x0])}),
    # 6*2^-126 - 1 ulp = (6 - 2^-21) 2^-126: below the floor, same scale 2^-126, element -> 6
    ("6*2^-126-ulp", [SIX_M126 - 1], {"rceil": (0x01, [0x7]), "dsv4": (0x01, [0x7]),
                                      "dsv4_vllm": (0x70, [0x0])}),
    ("6*2^-126", [SIX_M126], {"ocp": (0x01, [0x7]), "rceil": (0x01, [0x7]),
                              "dsv4": (0x01, [0x7]), "dsv4_vllm": (0x70, [0x0])}),
    # + 1 ulp: 2^-125, (6 + 2^-21) / 2 = 3 + 2^-22 -> 3.0 (0x5); ocp floor keeps 2^-126 -> 6
    ("6*2^-126+ulp", [SIX_M126 + 1], {"ocp": (0x01, [0x7]), "rceil": (0x02, [0x5]),
                                      "dsv4": (0x02, [0x5]), "dsv4_vllm": (0x70, [0x0])}),
    # 1e-4 and its neighbours: 1e-4/6 = 2^-15.87 -> 2^-15 (0x70), 1e-4 * 2^15 = 3.2768 -> 3
    ("1e-4-ulp", [F_VLLM - 1], {"rceil": (0x70, [0x5]), "dsv4": (0x70, [0x5]),
                                "dsv4_vllm": (0x70, [0x5])}),
    ("1e-4", [F_VLLM], {"ocp": (0x6F, [0x7]), "rceil": (0x70, [0x5]), "dsv4": (0x70, [0x5]),
                        "dsv4_vllm": (0x70, [0x5])}),
    ("1e-4+ulp", [F_VLLM + 1], {"rceil": (0x70, [0x5]), "dsv4": (0x70, [0x5]),
                                "dsv4_vllm": (0x70, [0x5])}),
    # 6*2^-16 = 9.155e-5 < 1e-4: the vllm floor lifts the scale 2^-16 -> 2^-15, element 6 -> 3
    ("6*2^-16", [0x38C00000], {"rceil": (0x6F, [0x7]), "dsv4": (0x6F, [0x7]),
                               "dsv4_vllm": (0x70, [0x5])}),
    # 1e-3: 1e-3/6 = 2^-12.55 -> 2^-12 (0x73), 1e-3 * 4096 = 4.096 -> 4.0 (0x6); no floor effect
    ("1e-3", [E1M3], {"ocp": (0x73, [0x6]), "rceil": (0x73, [0x6]), "dsv4": (0x73, [0x6]),
                      "dsv4_vllm": (0x73, [0x6])}),
    # power-of-two boundaries amax = 6*2^k (scale 2^k) and + 1 ulp (2^(k+1), element 3 -> 0x5)
    ("6", [f32(6.0)], {"rceil": (0x7F, [0x7]), "dsv4": (0x7F, [0x7]),
                       "dsv4_vllm": (0x7F, [0x7])}),
    ("6+ulp", [f32(6.0) + 1], {"rceil": (0x80, [0x5]), "dsv4": (0x80, [0x5]),
                               "dsv4_vllm": (0x80, [0x5])}),
    ("6*2^-100", [f32(6.0) - (100 << 23)], {"dsv4": (0x1B, [0x7]), "dsv4_vllm": (0x70, [0x0])}),
    ("6*2^-100+ulp", [f32(6.0) - (100 << 23) + 1], {"dsv4": (0x1C, [0x5]),
                                                      "dsv4_vllm": (0x70, [0x0])}),
    # a tiny block: vllm flushes it to zeros (the PR #41015 bug), dsv4 keeps it:
    # 1e-6/6 = 2^-22.52 -> 2^-22 (0x69), 1e-6 * 2^22 = 4.19 -> 4.0 (0x6), -1e-6 -> 0xE
    ("1e-6", [E1M6, E1M6 | 0x80000000], {"rceil": (0x69, [0x6, 0xE]),
                                         "dsv4": (0x69, [0x6, 0xE]),
                                         "dsv4_vllm": (0x70, [0x0, 0x0])}),
    # element ties at scale 2^0: RNE (dsv4) vs ties toward zero (vllm _e2m1_nibble)
    ("ties", [f32(0.75), f32(1.75), f32(3.5), f32(0.25), f32(6.0)],
     {"dsv4": (0x7F, [0x2, 0x4, 0x6, 0x0, 0x7]), "dsv4_vllm": (0x7F, [0x1, 0x3, 0x5, 0x0, 0x7])}),
    # signed zero: -0.0 kept by dsv4 (0x8), never negative in vllm
    ("-0", [NEG0, f32(6.0)], {"dsv4": (0x7F, [0x8, 0x7]), "dsv4_vllm": (0x7F, [0x0, 0x7])}),
]

PROFILES = ("ocp", "rceil", "dsv4", "dsv4_vllm")


def _block_bits():
    rows = []
    for _, lead, _ in CASES:
        rows.append(list(lead) + [0] * (32 - len(lead)))
    return np.array(rows, dtype=np.uint32)


def _check(impl: str, prof: str, scales, codes):
    bad = []
    for i, (name, lead, exp) in enumerate(CASES):
        if prof not in exp:
            continue
        es, ec = exp[prof]
        got_c = [int(c) for c in codes[i][:len(ec)]]
        tail = [int(c) for c in codes[i][len(ec):]]
        if int(scales[i]) != es or got_c != ec or any(tail):
            bad.append(f"{name}: got scale {int(scales[i]):#04x} codes {got_c} (tail "
                       f"{sorted(set(tail))}), want {es:#04x} {ec}")
    assert not bad, f"{impl} / {prof}:\n" + "\n".join(bad)


@pytest.mark.parametrize("prof", PROFILES)
def test_numba_reference(prof):
    bits = _block_bits()
    r = mxref.quantize(bits.view(np.float32), "mxfp4", prof)
    _check("numba", prof, r.scales[:, 0], r.codes)


@pytest.mark.parametrize("prof", PROFILES)
def test_oracle(prof):
    knobs = get_profile(prof).knobs()
    out = [O.quantize_block([int(b) for b in row], "e2m1", knobs) for row in _block_bits()]
    _check("oracle", prof, [s for s, _ in out], [c for _, c in out])


@pytest.mark.parametrize("prof", PROFILES)
def test_torch_emu(prof):
    torch = pytest.importorskip("torch")
    from mxkernels import torch_emu
    x = torch.from_numpy(_block_bits().view(np.float32).copy())
    s, c = torch_emu.quantize_mx(x, fmt="mxfp4", profile=prof)
    _check("torch_emu", prof, s[:, 0].numpy(), c.numpy())


@pytest.mark.parametrize("prof", PROFILES)
def test_triton_interpreted(prof):
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from mxkernels.loader import load_kernels
    tq = load_kernels(True).modules["triton_quant"]
    x = torch.from_numpy(_block_bits().view(np.float32).copy())
    s, c = tq.mx_quantize(x, "mxfp4", prof)
    _check("triton", prof, s[:, 0].cpu().numpy(), c.cpu().numpy())


def test_fast_round_scale_is_exact_rceil():
    """DeepSeek-V4's fast_round_scale, fp32 bits of fl32(amax * fl32(1/6)) (exponent + [mantissa
    != 0]), is the exact ceil(log2(amax / 6)) (what rceil computes) for every fp32 amax >= the
    floor: all 2^23 significands of one binade (the rule is scale invariant on normal numbers)
    and the bottom binade above 6*2^-126. Exact side decided on integers: a = m 2^(e-23),
    a / 6 <= 2^k iff m 2^(e-23) <= 6 2^k."""
    c = np.float32(1.0) / np.float32(6.0)            # fp4_max_inv as the fp32 kernel holds it
    assert int(c.view(np.uint32)) == 0x3E2AAAAB
    for e in (0, -124):
        sig = np.arange(1 << 23, dtype=np.int64)
        bits = ((e + 127) << 23) | sig
        if e == -124:
            bits = bits[bits >= F_DSV4]
        a = bits.astype(np.uint32).view(np.float32)
        p = (a * c).view(np.uint32).astype(np.int64)
        got = ((p >> 23) & 0xFF) - 127 + ((p & 0x7FFFFF) != 0)
        m = (bits & 0x7FFFFF) | 0x800000             # a = m * 2^(e - 23), 2^23 <= m < 2^24
        # smallest k with m 2^(e-23) <= 6 2^k: m / 6 lies in (2^20, 2^22), so k - e + 23 is
        # 21 when m <= 6 * 2^21, else 22
        want = e - 23 + np.where(m <= (6 << 21), 21, 22)
        assert np.array_equal(got, want), np.nonzero(got != want)[0][:5]


def test_fast_paths_refuse():
    from mxref import _kernels as K
    for name in ("dsv4", "dsv4_vllm"):
        pp = get_profile(name).kernel_params()
        assert not K.thresholds_exact(pp) and not K.flat_ok(pp)
    torch = pytest.importorskip("torch")  # noqa: F841
    from mxkernels import torch_fast
    assert not torch_fast.supports("mxfp4", get_profile("dsv4").replace(rounding="rne"))
    pytest.importorskip("triton")
    from mxkernels import triton_fast
    assert not triton_fast.supports("mxfp4", "dsv4", "bfloat16")


def test_profile_validation():
    ocp = get_profile("ocp")
    for bad in (-1, 0x7F800000, 0x5F800000, True, 1.5e-4):
        with pytest.raises(ProfileConflictError):
            ocp.replace(name="x", amax_floor=bad)
    with pytest.raises(ProfileConflictError):
        ocp.replace(name="x", amax_floor=F_DSV4, zero_block_amax="min_normal")
    with pytest.raises(ProfileConflictError):
        ocp.replace(name="x", amax_floor=F_DSV4).check_format(mxref.get_format("nvfp4"))
    for name in ("dsv4", "dsv4_vllm"):
        with pytest.raises(ProfileConflictError):
            get_profile(name).check_format(mxref.get_format("mxfp8_e4m3"))


def test_distinguishing_vectors_documented():
    """Each profile's ``distinguishing`` prose names vectors checked above."""
    d = " ".join(get_profile("dsv4").distinguishing)
    assert "all-zero block: scale 0x01" in d and "2^-126 (0x00800000): scale 0x01" in d
    v = " ".join(get_profile("dsv4_vllm").distinguishing)
    assert "1e-6 (0x358637BD): scale 0x70" in v and "0.75" in v and "-0.0 -> 0x0" in v


@pytest.mark.parametrize("prof", ("dsv4", "dsv4_vllm"))
def test_triton_rotated_matches_reference(prof):
    """quantize_rotated (the other Triton kernel whose golden files hold these profiles):
    Triton rotate_mx_quantize_kernel against mxref.rotate.quantize_rotated on blocks whose
    rotated amax straddles both floors (zero rows, 1e-7 .. 1e-2 magnitudes)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from mxkernels.loader import load_kernels
    from mxref.rotate import quantize_rotated
    rot = load_kernels(True).modules["triton_rotate"]
    rng = np.random.default_rng(28)
    mags = np.array([0.0, 1e-7, 1e-6, 2e-5, 9e-5, 1e-4, 1e-3, 1e-2], np.float32)
    x = (rng.standard_normal((8, 64)).astype(np.float32) * mags[:, None]).astype(np.float32)
    ref = quantize_rotated(x, "mxfp4", prof, 32)
    s, c = rot.quantize_rotated(torch.from_numpy(x), "mxfp4", prof, 32)
    assert np.array_equal(s.cpu().numpy(), ref.scales)
    assert np.array_equal(c.cpu().numpy(), ref.codes)
    assert (ref.scales[0] == (0x01 if prof == "dsv4" else 0x70)).all()   # zero row: the floor


@pytest.mark.parametrize("prof", ("dsv4", "dsv4_vllm"))
def test_triton_convert_kernels_match_reference(prof):
    """fp8_to_mxfp4 and reblock (the conversion kernels, triton_convert) under the floors,
    against mxref.fp8fp4 on blocks whose amax straddles both floors."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from mxkernels.loader import load_kernels
    from mxref.fp8fp4 import FP8Tensor, fp8_to_mxfp4, reblock
    conv = load_kernels(True).modules["triton_convert"]
    rng = np.random.default_rng(41015)
    # FP8 E4M3 codes x group scales 2^(G - 127): amax from 0 to ~1e-2 by group byte
    codes = rng.integers(0, 0x7F, (8, 64)).astype(np.uint8)
    codes[0] = 0
    codes[1, ::2] |= 0x80
    gs = np.array([[127], [100], [90], [80], [110], [106], [103], [115]], np.uint8)
    ref = fp8_to_mxfp4(FP8Tensor(codes=codes, scales=gs, group="row", axis=1, fp8="e4m3"),
                       profile=prof)
    s, c = conv.fp8_to_mxfp4(torch.from_numpy(gs), torch.from_numpy(codes), group="row",
                             profile=prof, fp8="e4m3")
    assert np.array_equal(s.cpu().numpy(), ref.scales)
    assert np.array_equal(c.cpu().numpy(), ref.codes)
    mags = np.array([0.0, 1e-7, 1e-6, 2e-5, 9e-5, 1e-4, 1e-3, 1e-2] * 8, np.float32)
    x = (rng.standard_normal((64, 64)).astype(np.float32) * mags[:, None]).astype(np.float32)
    src = mxref.quantize(x, "mxfp4", prof, axis=1)
    for ax in (0, 1):
        want = reblock(src, axis=ax, profile=prof)
        s, c = conv.reblock(torch.from_numpy(src.scales), torch.from_numpy(src.codes),
                            fmt="mxfp4", profile=prof, axis=ax)
        assert np.array_equal(s.cpu().numpy(), want.scales), ax
        assert np.array_equal(c.cpu().numpy(), want.codes), ax
    assert (want.scales == (0x01 if prof == "dsv4" else 0x70)).any()
