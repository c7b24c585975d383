"""Each Numba fast path against the spec function it is the twin of (mxref/_kernels/semantics.py).

``shared_exponent_thresholds`` (two significand thresholds from ``scale_thresholds``) is the
branch-free twin of ``shared_exponent``: on every profile with ``thresholds_exact`` they agree
on every zero or normal amax. Checked on every significand of the binades around each scale
byte's boundaries, and on every E8M0 byte boundary and midpoint +-1 ulp of amax in every binade.
(The element encoders' twins are checked in tests/test_fast_paths.py.)
"""
import numba as nb
import numpy as np
import pytest

from mxref import get_format, get_profile
from mxref import _kernels as K
from mxref.formats import P_EMAX, P_EVENTHR, P_MAXSIG
from mxref.profiles import SCALE_RULES

MX_FORMATS = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8"]


@nb.njit
def _mismatches(amaxes, fp, pp):
    up, down, e_off = K.scale_thresholds(fp, pp)
    bad = 0
    first = -1
    for i in range(amaxes.size):
        a = amaxes[i]
        want = K.shared_exponent(np.int64(a), fp, pp)
        got = K.shared_exponent_thresholds(np.int32(a), up, down, e_off)
        if want != got:
            bad += 1
            if first < 0:
                first = i
    return bad, first


def _boundary_amaxes(fp):
    """Every normal binade x significands at the rules' edges (power of two, max significand,
    EVEN threshold, their midpoints) +-1 ulp; plus zero and every significand of the binades
    where the shared exponent crosses a clamp (byte 0x00 / 0xFE)."""
    sigs = {0, 1, 0x7FFFFF, 0x7FFFFE, 0x400000}
    for edge in (fp[P_MAXSIG] - (1 << 23), fp[P_EVENTHR] - (1 << 23)):
        for d in (-2, -1, 0, 1, 2):
            if 0 <= edge + d < (1 << 23):
                sigs.add(edge + d)
    for half in range(1, 8):                      # midpoints between E2M1/E3M2-like grid points
        for d in (-1, 0, 1):
            sigs.add((half << 20) + d)
    sig = np.array(sorted(sigs), dtype=np.int64)
    ef = np.arange(1, 255, dtype=np.int64)
    grid = ((ef[:, None] << 23) | sig[None, :]).reshape(-1)
    emax = int(fp[P_EMAX])                        # s = -127 at binade field emax
    clamp_binades = sorted({e for e in (1, 2, emax, emax + 1, 253, 254) if 1 <= e <= 254})
    full = [(np.int64(e) << 23) + np.arange(1 << 23, dtype=np.int64) for e in clamp_binades]
    return np.concatenate([np.zeros(1, np.int64), grid, *full]).astype(np.int64)


@pytest.mark.parametrize("fmt", MX_FORMATS)
@pytest.mark.parametrize("rule", SCALE_RULES)
def test_shared_exponent_thresholds_is_shared_exponent(fmt, rule):
    prof = get_profile("ocp").replace(name="t", scale_rule=rule)
    pp = prof.kernel_params()
    assert K.thresholds_exact(pp)
    fp = get_format(fmt).element.kernel_params()
    amaxes = _boundary_amaxes(fp)
    bad, first = _mismatches(amaxes, fp, pp)
    assert bad == 0, f"{bad} mismatches, first amax bits 0x{int(amaxes[first]):08x}"


@pytest.mark.parametrize("name", ["ocp", "microxcaling", "torchao_rceil", "torchao_floor"])
def test_thresholds_exact_names_the_profiles_the_twin_serves(name):
    """The twin's domain: every knob it cannot express sends the profile to shared_exponent."""
    prof = get_profile(name)
    pp = prof.kernel_params()
    expect = (not prof.flush_fp32_subnormals and prof.rceil_subnormal == "exact"
              and prof.scale_overflow == "clamp" and not prof.rceil_f32_log2)
    assert bool(K.thresholds_exact(pp)) == expect


@pytest.mark.parametrize("has_nan,has_inf", [(False, False), (True, False), (False, True),
                                             (True, True)])
@pytest.mark.parametrize("name", ["ocp", "torchao_floor", "torchao_rceil", "microxcaling"])
def test_block_policy_follows_the_profile(name, has_nan, has_inf):
    """block_policy is the nan_in_block / inf_in_block ladder of docs/semantics.md step 2."""
    prof = get_profile(name)
    pp = prof.kernel_params()
    fp = get_format("mxfp8_e4m3").element.kernel_params()
    amax = 0x43E00000                                    # 448
    got = K.block_policy(has_nan, has_inf, amax, fp, pp)
    if (has_nan and prof.nan_in_block == "poison") or (has_inf and prof.inf_in_block == "poison"):
        assert got == K.NAN_SCALE
    elif has_inf and prof.inf_in_block == "scale_max":
        assert got == 127
    elif has_inf:
        assert got == K.shared_exponent(K.F32_INF, fp, pp)
    else:
        assert got == K.shared_exponent(amax, fp, pp) == 0


@nb.njit
def _spec_codes(bits, scales, block, fp, pp, out):
    """encode_f32 (the spec) of every element at the scale byte its block got."""
    for k in range(scales.size):
        s = K.element_exponent(np.int64(scales[k]) - 127, pp)
        for i in range(block):
            out[k * block + i] = K.encode_f32(np.int64(bits[k * block + i]), s, fp, pp, 0)


def _int8_edge_blocks():
    """MXINT8 blocks, amax 2^e (scale byte 127 + e), the other elements x/X = +-k/64 and the
    midpoints +-(k + 1/2)/64 for k in 118..127, each +-1 ulp: the codes 0x81 / 0x80 edge of
    int8_min, both signs, at scales 2^-120 .. 2^120."""
    ks = np.arange(118, 128, dtype=np.float64)
    rel = np.concatenate([ks, ks + 0.5]) / 64
    rel = np.concatenate([rel, -rel]).astype(np.float32).view(np.uint32).astype(np.int64)
    rel = np.concatenate([rel - 1, rel, rel + 1]).astype(np.uint32).view(np.float32)
    rel = rel[np.abs(rel) < 2]
    rows = []
    for e in (-120, -60, -1, 0, 1, 60, 120):
        for lo in range(0, rel.size, 31):
            blk = np.zeros(32, np.float32)
            blk[0] = 1.0
            part = rel[lo:lo + 31]
            blk[1:1 + part.size] = part
            rows.append(blk * np.float32(2.0 ** e))
    return np.stack(rows).view(np.uint32).reshape(-1)


@pytest.mark.parametrize("int8_min", ["symmetric", "full"])
def test_int8_fast_encoder_is_encode_f32(int8_min):
    """encode_block_fast (quantize_mx_flat's element loop, ``int_full``) against encode_f32
    (``finish_element``) on MXINT8 at the -127/64 .. -2 edge, under both int8_min values."""
    prof = get_profile("ocp").replace(name="t", int8_min=int8_min)
    pp = prof.kernel_params()
    assert K.flat_ok(pp)
    el = get_format("mxint8").element
    fp = el.kernel_params()
    bits = _int8_edge_blocks()
    nblk = bits.size // 32
    codes = np.empty(bits.size, np.uint8)
    scales = np.empty(nblk, np.uint8)
    K.quantize_mx_flat(bits, 32, fp, pp, el.midpoint_bits, el.tie_goes_up(prof.rounding), codes,
                       scales)
    want = np.empty(bits.size, np.int64)
    _spec_codes(bits, scales, 32, fp, pp, want)
    bad = np.flatnonzero(codes != want)
    assert bad.size == 0, \
        f"{bad.size} differ, first x bits 0x{int(bits[bad[0]]):08x}: fast 0x{int(codes[bad[0]]):02x}" \
        f" spec 0x{int(want[bad[0]]):02x}"
    n80 = int((want == 0x80).sum())
    assert (n80 > 0) == (int8_min == "full")      # the edge is exercised, on the right side
