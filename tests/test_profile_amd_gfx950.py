"""Profile ``amd_gfx950``: AMD's host model of the gfx950 scaled conversions
(``amd_hip_ocp_host.hpp``, namespace ``fcbx``, as vendored in triton-lang/triton
third_party/amd/backend/include/hip/amd_detail/ @d2214407) with the block scale of AITER's
``_mxfp4_scale_op`` (ROCm/aiter aiter/ops/triton/_triton_kernels/quant/quant.py @04bbef5c).

Every expected code below is worked by hand from the header's code paths, quoted:

* ``fcbx::from_float<float, E, true>(f, scale_exp)``: ``if (isnan<srcE, sat>(srcU32) || ...)
  return nan<E, sat>(signBit);`` with ``nan<E2M1>(sign) = (sign << 3) | 0b0111`` and
  ``nan<E2M3/E3M2>(sign) = (sign << 5) | 0b011111``: a NaN keeps its sign and becomes +-max.
* ``if (isinf<srcE, sat>(srcU32)) return inf<E, sat>(signBit);`` with ``inf<E2M1/E2M3/E3M2>
  = nan<E, sat>``: +-Inf -> +-max.
* ``if (exp > enc.MaxExp) return inf<E, sat>(signBit);`` before and after rounding: overflow
  -> +-max.
* ``srcExp -= scale_exp`` (exact), then round to nearest even: ``roundBit`` the first dropped
  bit, ``stickyBits`` every bit below it (in the subnormal branch also the bits shifted out by
  ``diff``), ``if ((roundBit && stickyBits != 0) || (roundBit && odd)) ++man``.
* ``if (iszero<srcE, sat>(srcU32)) return zero<E, sat>(signBit);``: -0 stays -0.

Block scale (AITER): amax = ``tl.max(tl.abs(x))`` (maxnum: a NaN is ignored), ``(bits +
0x200000) & 0xFF800000`` (amax rounded to FP4's one mantissa bit, ties up), ``floor(log2) -
2``, ``clamp(-127, 127)``: amax 1.0 -> 0x7D, 7.0 -> 0x80, Inf -> 0xFE.

The same vectors run through the Numba reference, the Fraction oracle, the torch emulator, the
Triton kernels (TRITON_INTERPRET=1) and, where g++ and AMD's header are present, the
``amd-host`` backend (AMD's functions themselves).
"""
from __future__ import annotations

import collections

import numpy as np
import pytest

import oracle as O
import mxref
from mxref import get_profile
from mxref.backends.numba_backend import NumbaBackend
from mxref.errors import ProfileConflictError

PROF = get_profile("amd_gfx950")
NAN, NNAN, INF, NINF = 0x7FC00000, 0xFFC00000, 0x7F800000, 0xFF800000
ONE, NZERO = 0x3F800000, 0x80000000
ELEM = {"mxfp4": "e2m1", "mxfp6_e2m3": "e2m3", "mxfp6_e3m2": "e3m2"}


def _f(x):
    return int(np.float32(x).view(np.uint32))


def _block(*bits):
    b = np.zeros(32, np.uint32)
    b[:len(bits)] = bits
    return b


# (name, fmt, block bits, expected scale byte, expected first codes (rest 0x00))
BLOCKS = [
    # NaN elements in an unpoisoned block: +NaN -> 0x7, -NaN -> 0xF (fcbx::nan keeps the sign);
    # amax 1.0 -> 0x7D; 1.0 / 2^-2 = 4.0 -> 0x6; -0.0 -> 0x8 (fcbx::zero(sign))
    ("fp4_nan", "mxfp4", _block(NAN, NNAN, ONE, NZERO), 0x7D, [0x7, 0xF, 0x6, 0x8]),
    # Inf: scale 0xFE (AITER clamp of floor(log2(inf)) - 2); +-Inf -> inf<E2M1> = nan = +-6;
    # 1.0 at 2^127: srcExp -127, diff 127 >= 32 -> man 0 -> +0
    ("fp4_inf", "mxfp4", _block(INF, NINF, ONE), 0xFE, [0x7, 0xF, 0x0]),
    # ties and sticky bits at scale 2^0 (amax 5.0 -> floor 2 - 2 = 0 -> 0x7F):
    # 4.0 -> 0x6; 0.25 (tie 0 / 0.5) -> 0x0; 0.75 (tie 0.5 / 1.0) -> 0x2; 2.5 (tie 2 / 3) ->
    # 0x4; 5.0 (tie 4 / 6) -> 0x6; 0x3E800001 (sticky bit shifted out by diff) -> 0x1 (0.5);
    # 0x40200001 (sticky below the round bit) -> 0x5 (3.0); -1.25 (tie 1 / 1.5) -> 0xA
    ("fp4_ties_sticky", "mxfp4",
     _block(_f(4.0), _f(0.25), _f(0.75), _f(2.5), _f(5.0), 0x3E800001, 0x40200001, _f(-1.25)),
     0x7F, [0x6, 0x0, 0x2, 0x4, 0x6, 0x1, 0x5, 0xA]),
    # EVEN scale: amax 7.0 (1.11b x 2^2) + 0x200000 -> 8.0 -> 3 - 2 = 1 -> 0x80; 7 / 2 = 3.5
    # ties to even 4.0 -> 0x6
    ("fp4_even_scale", "mxfp4", _block(_f(7.0)), 0x80, [0x6]),
    # all-NaN block under the profile: no finite amax -> 0x00; every NaN -> +-max
    ("fp4_all_nan", "mxfp4", np.array([NAN, NNAN] * 16, np.uint32), 0x00, [0x7, 0xF] * 16),
    # FP6: NaN -> (sign << 5) | 0b011111; amax 1.0 -> E2M3 0x7D, 4.0 -> 0b01_1000;
    # E3M2 emax 4 -> 0x7B, 16.0 -> 0b111_00
    ("e2m3_nan", "mxfp6_e2m3", _block(NAN, NNAN, ONE), 0x7D, [0x1F, 0x3F, 0x18]),
    ("e3m2_nan", "mxfp6_e3m2", _block(NAN, NNAN, ONE), 0x7B, [0x1F, 0x3F, 0x1C]),
    ("e2m3_inf", "mxfp6_e2m3", _block(NINF, _f(3.0)), 0xFE, [0x3F, 0x00]),
]

# (fmt, fp32 bits, expected code) for the element conversion alone (scale 2^0)
CONVERT = [
    ("mxfp4", _f(7.0), 0x7),        # 1.11b x 2^2 rounds up to 2^3: exp > MaxExp -> inf = +6
    ("mxfp4", 0xF149F2CA, 0xF),     # -1e30: exp > MaxExp before rounding -> -6
    ("mxfp4", INF, 0x7), ("mxfp4", NINF, 0xF), ("mxfp4", NAN, 0x7), ("mxfp4", NNAN, 0xF),
    ("mxfp4", _f(0.25), 0x0), ("mxfp4", NZERO, 0x8), ("mxfp4", 0x3E800001, 0x1),
    ("mxfp6_e2m3", _f(8.0), 0x1F),  # above max 7.5 -> +7.5
    ("mxfp6_e2m3", _f(7.75), 0x1F),  # tie 7.5 / 8: odd 1.111 rounds up, exp 3 > 2 -> +7.5
    ("mxfp6_e2m3", NINF, 0x3F), ("mxfp6_e2m3", NAN, 0x1F), ("mxfp6_e2m3", NNAN, 0x3F),
    ("mxfp6_e3m2", _f(100.0), 0x1F), ("mxfp6_e3m2", NNAN, 0x3F), ("mxfp6_e3m2", NINF, 0x3F),
]


def _expected(codes):
    out = np.zeros(32, np.uint8)
    out[:len(codes)] = codes
    return out


@pytest.mark.parametrize("name,fmt,bits,scale,codes", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_numba_blocks(name, fmt, bits, scale, codes):
    t = mxref.quantize(bits.view(np.float32), fmt, PROF)
    assert int(np.asarray(t.scales)[0]) == scale
    np.testing.assert_array_equal(np.asarray(t.codes), _expected(codes))


@pytest.mark.parametrize("name,fmt,bits,scale,codes", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_oracle_blocks(name, fmt, bits, scale, codes):
    s, c = O.quantize_block([int(b) for b in bits], ELEM[fmt], PROF.knobs())
    assert s == scale
    assert list(c) == list(_expected(codes))


@pytest.mark.parametrize("fmt,bits,code", CONVERT)
def test_convert_numba_and_oracle(fmt, bits, code):
    got = NumbaBackend().convert(np.array([bits], np.uint32), src_dtype="float32", fmt=fmt,
                                 profile=PROF)
    assert int(got[0]) == code
    assert O.element_code(bits, 0, ELEM[fmt], PROF.knobs()) == code


def test_profile_knobs_and_formats():
    assert (PROF.scale_rule, PROF.nan_in_block, PROF.inf_in_block, PROF.nan_element) == \
        ("even", "ignore", "scale_max", "signed_max")
    assert PROF.formats == ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2")
    # FP8: the host model's scaled FP8 path ignores the scale (E4M3/E5M2 MxScale = false)
    with pytest.raises(ProfileConflictError):
        mxref.quantize(np.ones(32, np.float32), "mxfp8_e4m3", PROF)
    # signed_max is for formats without NaN; a NaN format refuses it
    with pytest.raises(ProfileConflictError):
        mxref.quantize(np.ones(32, np.float32), "mxfp8_e4m3",
                       get_profile("ocp").replace(name="x", nan_element="signed_max"))
    with pytest.raises(ProfileConflictError):
        get_profile("ocp").replace(name="x", nan_element="max")


def test_default_nan_element_unchanged():
    """nan_element='nan' (every other profile): a NaN element of an unpoisoned block is still
    the format's NaN code or 0 (TE-style ignore profile)."""
    p = PROF.replace(name="x", nan_element="nan")
    t = mxref.quantize(_block(NAN, NNAN, ONE).view(np.float32), "mxfp4", p)
    assert list(np.asarray(t.codes)[:3]) == [0x0, 0x0, 0x6]


# ---- torch emulator and Triton ------------------------------------------------------------
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name,fmt,bits,scale,codes", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_torch_emu_blocks(name, fmt, bits, scale, codes):
    from mxkernels import torch_emu
    s, c = torch_emu.quantize_mx(torch.from_numpy(bits.view(np.float32).copy()), fmt=fmt,
                                 profile=PROF)
    assert int(s[0]) == scale
    np.testing.assert_array_equal(c.numpy(), _expected(codes))


@pytest.mark.parametrize("fmt,bits,code", CONVERT)
def test_torch_emu_convert(fmt, bits, code):
    from mxkernels import torch_emu
    got = torch_emu.convert(torch.from_numpy(np.array([bits], np.uint32).view(np.float32)),
                            fmt=fmt, profile=PROF)
    assert int(got[0]) == code


def _ks():
    pytest.importorskip("triton")
    from mxkernels.loader import load_kernels
    return load_kernels(True)


def test_triton_blocks_and_convert():
    ks = _ks()
    for name, fmt, bits, scale, codes in BLOCKS:
        s, c = ks.mx_quantize(torch.from_numpy(bits.view(np.float32).copy()), fmt, PROF)
        assert int(s[0]) == scale, name
        np.testing.assert_array_equal(c.cpu().numpy(), _expected(codes), err_msg=name)
    for fmt, bits, code in CONVERT:
        got = ks.mx_convert(torch.from_numpy(np.array([bits], np.uint32).view(np.float32)),
                            fmt, PROF)
        assert int(got[0]) == code, (fmt, hex(bits))


def test_fast_paths_refuse():
    from mxkernels import torch_fast
    assert not torch_fast.supports(mxref.get_format("mxfp4"), PROF.replace(
        name="x", scale_rule="floor"))
    pytest.importorskip("triton")
    from mxkernels.triton_common import KernelUnsupported, profile_constexprs
    with pytest.raises(KernelUnsupported):
        profile_constexprs(PROF)             # kernels that do not implement nan_element


# ---- AMD's own functions (amd-host backend) -------------------------------------------------
def _amd():
    from mxref.backends.amd_host import AmdHostBackend
    from mxref.backends.base import BackendUnavailable
    be = AmdHostBackend()
    try:
        be.check_available()
    except BackendUnavailable as e:
        pytest.skip(f"amd-host unavailable here: {e}")
    return be


def test_amd_host_hand_vectors():
    be = _amd()
    for name, fmt, bits, scale, codes in BLOCKS:
        s, c = be.quantize_mx(bits, src_dtype="float32", fmt=fmt, profile=PROF)
        if name != "fp4_all_nan":         # AITER's maxnum over NaNs only is NaN -> 0xFE
            assert int(s[0]) == scale, name
        else:
            assert int(s[0]) == 0xFE
        np.testing.assert_array_equal(c, _expected(codes), err_msg=name)
    for fmt, bits, code in CONVERT:
        got = be.convert(np.array([bits], np.uint32), src_dtype="float32", fmt=fmt, profile=PROF)
        assert int(got[0]) == code, (fmt, hex(bits))


@pytest.mark.parametrize("fmt", sorted(ELEM))
def test_amd_host_vs_profile_l1(fmt):
    """AMD's functions over the L1 block cases against the Numba reference: the element
    conversion agrees everywhere; the block scale differs only where AITER's float trick
    overflows, amax >= (2 - 2^-(m+1)) 2^127 (rounded amax = Inf, scale 0xFE; exact EVEN
    rule 0xFD / 0xFB)."""
    from mxref.golden.cases.mx import block_cases
    be = _amd()
    m = mxref.get_format(fmt).element.mbits
    for src in ("float32", "bfloat16", "float16"):
        cs = block_cases(ELEM[fmt], src, 1)
        X = np.stack([np.asarray(c.src) for c in cs])
        t = mxref.quantize(X, fmt, PROF, source_dtype=src)
        ns, nc = np.asarray(t.scales), np.asarray(t.codes)
        bs, bc = be.quantize_mx(X, src_dtype=src, fmt=fmt, profile=PROF)
        same = bs[:, 0] == ns[:, 0]
        np.testing.assert_array_equal(bc[same], nc[same])
        np.testing.assert_array_equal(be.convert(X, src_dtype=src, fmt=fmt, profile=PROF),
                                      NumbaBackend().convert(X, src_dtype=src, fmt=fmt,
                                                             profile=PROF))
        causes = collections.Counter()
        for i in np.nonzero(bs[:, 0] != ns[:, 0])[0]:
            x = X[i].astype(np.uint32) << (16 if src == "bfloat16" else 0)
            if src == "float16":
                x = X[i].view(np.float16).astype(np.float32).view(np.uint32)
            a = x & np.uint32(0x7FFFFFFF)
            am = int(a[a < 0x7F800000].max(initial=0))
            top = ((am + (1 << (22 - m))) & 0xFF800000) == 0x7F800000
            causes["top" if top and bs[i, 0] == 0xFE else "other"] += 1
        assert causes["other"] == 0, causes


def test_fp8_to_mxfp4_nan_elements():
    """fp8_to_mxfp4 under amd_gfx950 (Numba and Triton): E4M3 +NaN (0x7F) / -NaN (0xFF) in a
    block with 1.0 (0x38) -> scale 0x7D, codes 0x7 / 0xF / 0x6 (fcbx::nan keeps the sign);
    a NaN group byte (0xFF) makes its elements NaN, i.e. +-6 by their sign bits."""
    from mxref.fp8fp4 import FP8Tensor, fp8_to_mxfp4
    codes = np.zeros((2, 32), np.uint8)
    codes[0, :3] = [0x7F, 0xFF, 0x38]
    codes[1, :3] = [0x38, 0xB8, 0x00]
    gs = np.array([[0x7F], [0xFF]], np.uint8)
    want_s = [0x7D, 0x00]            # row 1: every element NaN, no finite amax -> 0x00
    want_c = np.zeros((2, 32), np.uint8)
    want_c[0, :3] = [0x7, 0xF, 0x6]
    want_c[1, :] = 0x7
    want_c[1, 1] = 0xF
    got = fp8_to_mxfp4(FP8Tensor(codes=codes, scales=gs, group="row", axis=1, fp8="e4m3"),
                       profile=PROF)
    assert list(got.scales[:, 0]) == want_s
    np.testing.assert_array_equal(got.codes, want_c)
    ks = _ks()
    s, c = ks.fp8_to_mxfp4(torch.from_numpy(gs), torch.from_numpy(codes), group="row",
                           profile=PROF, fp8="e4m3")
    assert list(s.cpu().numpy()[:, 0]) == want_s
    np.testing.assert_array_equal(c.cpu().numpy(), want_c)
