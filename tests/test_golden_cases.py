"""Tests of the golden-corpus case generators (mxref/golden/cases.py)."""
from __future__ import annotations

import collections
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import mxref
from mxref.golden import cases as C

# NaN bit patterns cast between float types raise numpy's "invalid value" warning
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in cast")

ELEMENTS = C.ELEMENTS
DTYPES = C.SRC_DTYPES
MX_FORMAT = {"e2m1": "mxfp4", "e2m3": "mxfp6_e2m3", "e3m2": "mxfp6_e3m2",
             "e4m3": "mxfp8_e4m3", "e5m2": "mxfp8_e5m2", "int8": "mxint8"}
COMBOS = [(e, d) for e in ELEMENTS for d in DTYPES]


@pytest.fixture(scope="module")
def level1():
    return {(e, d): C.block_cases(e, d, 1) for e, d in COMBOS}


@pytest.fixture(scope="module")
def nv1():
    return {d: C.nvfp4_cases(d, 1) for d in DTYPES}


def as_f64(src: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float32":
        return src.view(np.float32).astype(np.float64)
    if dtype == "float16":
        return src.view(np.float16).astype(np.float64)
    return src.view(ml_dtypes.bfloat16).astype(np.float64)


def fr(x: float) -> Fraction:
    return Fraction(float(x))


def scale_of(vals) -> Fraction:
    """Floor-rule scale X from the finite amax of a block (exact)."""
    finite = [abs(v) for v in vals if np.isfinite(v)]
    a = fr(max(finite))
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    return a, e


# ---- interface, determinism, shapes -----------------------------------------------------------
def test_interface_constants():
    assert C.SRC_DTYPES == ("float32", "bfloat16", "float16")
    assert isinstance(C.GENERATOR_VERSION, str)
    for cls in C.CLASS_IDS:
        d = C.class_description(cls)
        assert isinstance(d, str) and d and "\n" not in d
    with pytest.raises(ValueError):
        C.class_description("Z9")
    with pytest.raises(ValueError):
        C.block_cases("e9m9", "float32", 1)
    with pytest.raises(ValueError):
        C.block_cases("e2m1", "float64", 1)
    with pytest.raises(ValueError):
        C.nvfp4_cases("float32", 4)


@pytest.mark.parametrize("level", [0, 1])
def test_deterministic(level):
    for e, d in [("e4m3", "float32"), ("int8", "float16")][:2 - level]:
        a, b = C.block_cases(e, d, level), C.block_cases(e, d, level)
        assert [(c.cls, c.tags, c.n_valid, c.src.tobytes()) for c in a] == \
               [(c.cls, c.tags, c.n_valid, c.src.tobytes()) for c in b]
    for d in DTYPES:
        a, b = C.nvfp4_cases(d, level), C.nvfp4_cases(d, level)
        assert [c.src.tobytes() for c in a] == [c.src.tobytes() for c in b]


def test_dtypes_shapes(level1, nv1):
    for (e, d), cs in level1.items():
        want = np.uint32 if d == "float32" else np.uint16
        assert cs
        for c in cs:
            assert isinstance(c, C.Case)
            assert c.src.dtype == want and c.src.shape == (32,), (e, d, c.cls)
            assert 1 <= c.n_valid <= 32
            assert isinstance(c.tags, tuple) and all(isinstance(t, str) for t in c.tags)
            assert c.cls in C.CLASS_IDS
            if c.cls != "L1":
                assert c.n_valid == 32
    for d, cs in nv1.items():
        want = np.uint32 if d == "float32" else np.uint16
        for c in cs:
            assert c.src.dtype == want and c.src.shape == (64,) and c.n_valid == 64


def test_other_block_sizes():
    for B in (16, 64):
        cs = C.block_cases("e4m3", "bfloat16", 1, block=B)
        assert all(c.src.shape == (B,) for c in cs)
        assert all(c.n_valid < B for c in cs if c.cls == "L1")


# ---- representability ---------------------------------------------------------------------------
def test_values_exactly_representable(level1, nv1):
    """Decode with the source dtype and re-encode: the same bits (NaNs stay NaN)."""
    allc = [((d,), c) for (e, d), cs in level1.items() for c in cs] + \
        [((d,), c) for d, cs in nv1.items() for c in cs]
    for (d,), c in allc:
        s = c.src
        if d == "float32":
            v = s.view(np.float32)
            back = v.copy().view(np.uint32)
        elif d == "float16":
            v = s.view(np.float16).astype(np.float32)
            back = v.astype(np.float16).view(np.uint16)
        else:
            v = s.view(ml_dtypes.bfloat16).astype(np.float32)
            back = v.astype(ml_dtypes.bfloat16).view(np.uint16)
        nan = np.isnan(v)
        assert np.array_equal(back[~nan], s[~nan]), (d, c.cls, c.tags)
        assert np.all(np.isnan(as_f64(back[nan], d)))


# ---- class coverage per level -------------------------------------------------------------------
def test_level0_one_case_per_class():
    for e, d in COMBOS:
        cs = C.block_cases(e, d, 0)
        cnt = collections.Counter(c.cls for c in cs)
        assert set(cnt.values()) == {1}, (e, d, cnt)
        assert tuple(cnt) == C.classes_for(e, d, 0)
        assert ("E4" in cnt) == (d == "float32")
        assert ("E5" in cnt) == (e != "int8")
        assert "E11" not in cnt
    for d in DTYPES:
        cnt = collections.Counter(c.cls for c in C.nvfp4_cases(d, 0))
        assert set(cnt.values()) == {1}
        assert {"E1", "E2", "S3", "S5", "S6", "S7", "R1", "R2"} <= set(cnt)


def test_level1_classes_and_sizes(level1):
    base = {"E1", "E2", "E3", "E6", "E7", "E8", "E9", "E10", "S1", "S2", "S3", "S4", "S5",
            "S6", "S7", "S8", "S9", "L1", "R1", "R2"}
    for (e, d), cs in level1.items():
        cnt = collections.Counter(c.cls for c in cs)
        want = set(base)
        if d == "float32":
            want.add("E4")
        if e != "int8":
            want.add("E5")
        assert set(cnt) == want, (e, d, set(cnt) ^ want)
        assert "E11" not in cnt
        assert len(cs) < 600, (e, d, len(cs))
        assert cnt["R1"] == 64 and cnt["R2"] == 32
        assert all(n <= 64 for n in cnt.values()), (e, d, cnt)


def test_levels_nest():
    """level 0 is in level 1, level 1 in level 2; level 2 adds R1/R2 and cross products."""
    for e, d in [("e2m1", "float16"), ("int8", "bfloat16")]:
        l0, l1, l2 = (C.block_cases(e, d, lv) for lv in (0, 1, 2))
        s1, s2 = set(l1), set(l2)
        assert all(c in s1 for c in l0)
        assert all(c in s2 for c in l1)
        c2 = collections.Counter(c.cls for c in l2)
        assert c2["R1"] == 640 and c2["R2"] == 320
        assert any("cross" in c.tags for c in l2)
    n1, n2 = set(C.nvfp4_cases("bfloat16", 1)), set(C.nvfp4_cases("bfloat16", 2))
    assert n1 <= n2


def test_e11_exhaustive_level3_only():
    assert not [c for c in C.block_cases("e2m1", "float32", 3) if c.cls == "E11"]
    assert "E11" in C.classes_for("e2m1", "bfloat16", 3)
    assert "E11" not in C.classes_for("e2m1", "bfloat16", 2)
    for d in ("bfloat16", "float16"):
        cs = C._Ctx("e2m1", d, 3, 32).gen_E11()   # what block_cases(..., 3) adds
        seen = np.zeros(65536, bool)
        for c in cs:
            seen[c.src] = True
        assert seen.all()


# ---- semantics of the element classes -----------------------------------------------------------
def test_anchor_fixes_scale(level1):
    """E1-E8 (and S4) blocks quantize with the scale byte 127 + k of their tag (floor rule)."""
    for (e, d), cs in level1.items():
        sel = [c for c in cs if c.cls in ("E1", "E2", "E3", "E4", "E5", "E6", "E7", "E8", "S4")]
        ks = [int(next(t for t in c.tags if t.startswith("k="))[2:]) for c in sel]
        r = mxref.quantize(np.stack([c.src for c in sel]), MX_FORMAT[e], source_dtype=d)
        assert list(r.scales[:, 0]) == [127 + k for k in ks], (e, d)


def test_e2_are_exact_midpoints(level1):
    for (e, d), cs in level1.items():
        el = mxref.ELEMENT_FORMATS[e]
        mags = [el.decode(c) for c in range(el.max_code + 1)]
        mids = {(a + b) / 2 for a, b in zip(mags, mags[1:])}
        for c in (c for c in cs if c.cls == "E2"):
            v = as_f64(c.src, d)
            amax, E = scale_of(v)
            X = Fraction(2) ** (E - el.emax)
            assert amax == el.max_normal * X
            for x in v:
                if fr(abs(x)) != amax:
                    assert fr(abs(x)) / X in mids, (e, d, x)


def test_e3_neighbours_and_e4_traps(level1):
    for (e, d), cs in level1.items():
        el = mxref.ELEMENT_FORMATS[e]
        mags = [el.decode(c) for c in range(el.max_code + 1)]
        mids = sorted({(a + b) / 2 for a, b in zip(mags, mags[1:])})
        for c in (c for c in cs if c.cls in ("E3", "E4")):
            v = as_f64(c.src, d)
            amax, E = scale_of(v)
            X = Fraction(2) ** (E - el.emax)
            for x in v:
                q = fr(abs(x))
                if q == amax:
                    continue
                assert q / X not in mids
                if c.cls == "E4":   # an fp16 or bf16 intermediate rounds it onto a tie
                    x32 = np.float32(x)
                    hits = []
                    for dt in (ml_dtypes.bfloat16, np.float16):
                        with np.errstate(over="ignore"):
                            y = float(abs(x32.astype(dt)))
                        hits.append(np.isfinite(y) and Fraction(y) / X in mids)
                    assert any(hits), (e, x)


def test_e8_block_max_in_overflow_band(level1):
    for (e, d), cs in level1.items():
        el = mxref.ELEMENT_FORMATS[e]
        for c in (c for c in cs if c.cls in ("E8", "S4")):
            amax, E = scale_of(as_f64(c.src, d))
            X = Fraction(2) ** (E - el.emax)
            assert el.max_normal <= amax / X < 2 ** (el.emax + 1)


def test_e9_s7_have_specials(level1):
    for (e, d), cs in level1.items():
        for c in (c for c in cs if c.cls in ("E9", "S7")):
            v = as_f64(c.src, d)
            assert (~np.isfinite(v)).any() and np.isfinite(v).any()


def test_l1_padding_is_pos_zero(level1):
    for (e, d), cs in level1.items():
        l1 = [c for c in cs if c.cls == "L1"]
        assert sorted({c.n_valid for c in l1}) == [1, 7, 16, 31]
        for c in l1:
            assert not c.src[c.n_valid:].any()
            assert c.src[:c.n_valid].any()


def test_s1_s2_amax(level1):
    for (e, d), cs in level1.items():
        for c in (c for c in cs if c.cls in ("S1", "S2")):
            sign = np.uint32(0x80000000) if d == "float32" else np.uint16(0x8000)
            mag = (c.src & ~sign).max()          # the amax, as source bits
            p = mag if c.cls == "S1" else mag + 1  # S2: amax + 1 ulp is a power of two (or Inf)
            v = as_f64(np.array([p], c.src.dtype), d)[0]
            a = fr(v) if np.isfinite(v) else Fraction(1)
            assert a.numerator & (a.numerator - 1) == 0 and a.denominator & (a.denominator - 1) == 0
    s2 = [c for c in level1[("e4m3", "float32")] if c.cls == "S2"]
    assert any(np.abs(c.src.view(np.float32)).max() == np.float32(16777215.0) for c in s2)


# ---- mxref accepts every case -------------------------------------------------------------
def test_quantize_accepts_every_case(level1, nv1):
    for (e, d), cs in level1.items():
        x = np.stack([c.src for c in cs])
        r = mxref.quantize(x, MX_FORMAT[e], source_dtype=d)
        assert r.codes.shape == x.shape
        if d == "float32":
            mxref.quantize(x.view(np.float32), MX_FORMAT[e])
        for c in cs:
            if c.cls == "L1":
                mxref.quantize(c.src[:c.n_valid], MX_FORMAT[e], source_dtype=d)
    for d, cs in nv1.items():
        for c in cs:
            r = mxref.quantize(c.src.reshape(4, 16), "nvfp4", source_dtype=d)
            assert r.scales.shape == (4, 1)


def test_nvfp4_code_tensors_roundtrip(nv1):
    """E1 tensors hold code * S * T exactly, so the exact-order NVFP4 round trip is lossless,
    and the canonical op-order vector separates the TE order (0x73) from exact (0x72)."""
    for d, cs in nv1.items():
        for c in (c for c in cs if c.cls == "E1"):
            x = as_f64(c.src, d).astype(np.float32).reshape(4, 16)
            r = mxref.quantize(c.src.reshape(4, 16), "nvfp4", source_dtype=d)
            assert np.array_equal(mxref.dequantize(r), x)
            assert r.scales[0, 0] == 0x7E
        op = next(c for c in cs if c.cls == "S3")
        ocp = mxref.quantize(op.src, "nvfp4", source_dtype=d)
        te = mxref.quantize(op.src, "nvfp4", "te_nvfp4", source_dtype=d)
        assert ocp.scales[1] == 0x72 and te.scales[1] == 0x73
