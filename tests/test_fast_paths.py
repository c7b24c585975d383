"""The kernel picks one of three encoders per block (normal-range bit increment, FP4 midpoint
thresholds, general); each is forced here with blocks built for it and checked against the
Fraction oracle, ties and exponent edges included."""
import zlib

import numpy as np
import pytest

import mxref
from mxref import _kernels as K

from test_oracle_diff import check_mx, knob_profile

FMTS = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8"]
PROFILES = ["ocp", "rceil", "microxcaling", "torchao_even", "triton_kernels_round_down"]
EMAX = {"mxfp8_e4m3": 8, "mxfp8_e5m2": 15, "mxfp6_e3m2": 4, "mxfp6_e2m3": 2, "mxfp4": 2,
        "mxint8": 0}
EMIN = {"mxfp8_e4m3": -6, "mxfp8_e5m2": -14, "mxfp6_e3m2": -2, "mxfp6_e2m3": 0, "mxfp4": 0,
        "mxint8": 0}
MBITS = {"mxfp8_e4m3": 3, "mxfp8_e5m2": 2, "mxfp6_e3m2": 2, "mxfp6_e2m3": 3, "mxfp4": 1,
         "mxint8": 6}


def blocks(fmt, top_exps, rng, rows=48, n=32):
    """Rows of blocks whose elements lie in the normal range of fmt below a per-row top
    exponent, with mantissas that hit ties, tie +- 1 ulp and random patterns."""
    m = MBITS[fmt]
    span = EMAX[fmt] - EMIN[fmt]
    out = np.zeros((rows, n), np.uint32)
    for r in range(rows):
        top = int(rng.choice(top_exps))
        e = top - rng.integers(0, span + 1, n)
        e = np.clip(e, 1, 254)
        tie = 1 << (22 - m)
        mant = rng.choice([0, tie, tie - 1, tie + 1, 0x7FFFFF, 3 * tie,
                           int(rng.integers(0, 1 << 23))], n)
        mant = np.where(rng.random(n) < 0.3, rng.integers(0, 1 << 23, n), mant)
        sign = rng.integers(0, 2, n).astype(np.uint32) << 31
        out[r] = sign | (e.astype(np.uint32) << 23) | mant.astype(np.uint32)
    return out


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("profile", PROFILES)
def test_normal_range_blocks(fmt, profile):
    prof = mxref.get_profile(profile)
    if prof.formats is not None and fmt not in prof.formats:
        prof = prof.replace(name=profile + "~", formats=None)   # same knobs, any format
    rng = np.random.default_rng(zlib.crc32(repr((fmt, profile)).encode()))
    check_mx(blocks(fmt, [127, 100, 140, 20, 250], rng), fmt, prof)


@pytest.mark.parametrize("fmt", FMTS)
def test_exponent_edges_of_fast_paths(fmt):
    """Block maxima where s sits at the limits: s = -126 - emin, thresholds at the fp32
    normal boundary, huge scales near 2^127."""
    rng = np.random.default_rng(7)
    tops = [1 + EMAX[fmt] - 126 + k for k in range(-3, 4)] + [2, 3, 4, 5, 6, 250, 253, 254]
    tops = [t + 127 for t in tops if 1 <= t + 127 <= 254]
    check_mx(blocks(fmt, tops, rng, rows=64), fmt, "ocp")


@pytest.mark.parametrize("profile", ["ocp", "microxcaling", "triton_kernels_ties_up"])
def test_fp4_midpoints_at_every_scale(profile):
    """Every FP4 midpoint (and +-1 ulp) scaled by 2^s for s over the whole E8M0 range."""
    mids = np.float32([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]).view(np.uint32).astype(np.int64)
    rows = []
    for s in range(-127, 128, 3):
        v = np.concatenate([mids, mids + 1, mids - 1, [0x40C00000]])   # 6.0 pins the scale
        v = v + (s << 23)
        v = v[(v > 0) & (v < 0x7F800000)]
        row = np.zeros(32, np.int64)
        row[: v.size] = v
        rows.append(row)
    check_mx(np.array(rows, dtype=np.uint32), "mxfp4", profile)


# ---- the flat kernel (whole blocks end to end) -------------------------------------------
# quantize routes inputs whose block axis is a multiple of the block size, under profiles
# with flat_ok, to _kernels.quantize_mx_flat: one pass per block, with a per-block scalar
# path for the blocks the fast encoders refuse. These rows interleave both kinds, so a block
# on either side of an exceptional one (and of a parallel task boundary) is checked too.
_OCP = mxref.get_profile("ocp")
FLAT_PROFILES = ["ocp", "rceil", "torchao_even", "te_mxfp8", "rocm_te_mxfp4",
                 _OCP.replace(name="x_nonsat", overflow="nonsaturating"),
                 _OCP.replace(name="x_zexp0", zero_scale_elem_exp=0),
                 _OCP.replace(name="x_ties_zero_ceil", rounding="ties_zero", scale_rule="ceil")]
KINDS = ("fast", "fast", "nan", "inf", "zero", "subnormal", "tiny", "huge")


def mixed_blocks(fmt, rng, nblk):
    """nblk 32-element blocks of random kinds, laid end to end: fast-path blocks, a NaN or an
    Inf among normal elements, all (signed) zeros, fp32-subnormal amax, normal amax whose
    exponent is below -126 - emin, and amax at the top of fp32."""
    out = []
    for kind in rng.choice(KINDS, nblk):
        if kind == "zero":
            b = rng.integers(0, 2, 32).astype(np.uint32) << 31
        elif kind == "subnormal":
            b = rng.integers(0, 1 << 23, 32).astype(np.uint32) | \
                (rng.integers(0, 2, 32).astype(np.uint32) << 31)
        else:
            top = {"tiny": [1, 2, 3, 5], "huge": [253, 254]}.get(kind, [127, 90, 150])
            b = blocks(fmt, top, rng, rows=1)[0]
            if kind == "nan":
                b[rng.integers(0, 32)] = 0x7FC00000 | int(rng.integers(0, 1 << 22))
            elif kind == "inf":
                b[rng.integers(0, 32)] = 0x7F800000 | (int(rng.integers(0, 2)) << 31)
        out.append(b)
    return np.concatenate(out)


FLAT_CASES = [(f, knob_profile(f, p)) for p in FLAT_PROFILES for f in FMTS
              if knob_profile(f, p) is not None]     # nonsaturating: formats with Inf/NaN


@pytest.mark.parametrize("fmt,prof", FLAT_CASES, ids=[f"{p.name}-{f}" for f, p in FLAT_CASES])
def test_flat_kernel_mixed_blocks(fmt, prof):
    assert K.flat_ok(prof.kernel_params())
    rng = np.random.default_rng(zlib.crc32(f"{fmt}/{prof.name}".encode()))
    check_mx(mixed_blocks(fmt, rng, 96).reshape(2, -1), fmt, prof)


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e4m3"])
def test_flat_kernel_across_parallel_tasks(fmt):
    """More blocks than one parallel task takes (CHUNK_BLOCKS), exceptional ones included."""
    rng = np.random.default_rng(11)
    nblk = K.CHUNK_BLOCKS + 64
    check_mx(mixed_blocks(fmt, rng, nblk).reshape(2, -1), fmt, "ocp")


def test_quantize_routes_whole_blocks_to_the_flat_kernel(monkeypatch):
    """Which kernel runs: the flat one for whole blocks under a flat_ok profile, the row kernel
    for a ragged length or a profile the flat kernel does not take (so both stay tested)."""
    calls = []
    for name in ("quantize_mx", "quantize_mx_flat"):
        real = getattr(K, name)
        monkeypatch.setattr(K, name, lambda *a, _r=real, _n=name: (calls.append(_n), _r(*a))[1])
    x = np.ones((2, 64), np.float32)
    mxref.quantize(x, "mxfp4")
    mxref.quantize(x[:, :40], "mxfp4")                       # ragged: the row kernel
    mxref.quantize(x, "mxfp4", _OCP.replace(name="x_flush", flush_fp32_subnormals=True))
    mxref.quantize(x, "mxfp8_e4m3", _OCP.replace(name="x_sr", rounding="stochastic"), seed=1)
    assert calls == ["quantize_mx_flat", "quantize_mx", "quantize_mx", "quantize_mx"]
