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
