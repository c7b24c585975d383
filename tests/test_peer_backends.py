"""Third-party verify backends (mxref/backends/peers.py) against the committed golden corpus.

What is asserted is what is TRUE of the stacks installed here (torchao 0.18.0, ml_dtypes 0.6.0):
torchao's to_mx matches its own torchao_* goldens bit for bit and differs from ``ocp`` only in
the two documented places (Inf blocks, 0x00-scale blocks); its NVFP4 path differs from the
``torchao_nvfp4`` goldens only in known, explained places; ml_dtypes casts match ``ocp`` on
in-range values and differ on FP8 overflow and NaN encodings. TransformerEngine cannot run here.
"""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mxref.backends import BackendUnavailable, Unsupported, get_backend
from mxref.golden.store import column_numpy, read_golden

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "L1"
MX_FMTS = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4"]
TORCHAO = {"torchao": "torchao_floor", "torchao-rceil": "torchao_rceil",
           "torchao-ceil": "torchao_ceil", "torchao-even": "torchao_even"}
F32_MAX_FINITE = {"mxfp8_e4m3": 448.0, "mxfp8_e5m2": 57344.0, "mxfp6_e2m3": 7.5,
                  "mxfp6_e3m2": 28.0, "mxfp4": 6.0}


def load(op, fmt, profile, sd):
    t = read_golden(GOLDEN / op / f"{fmt}__{profile}__{sd}.arrow")
    return {n: column_numpy(t, n) for n in t.column_names}


def as_f32(bits, sd):
    if sd == "float32":
        return bits.view(np.float32)
    if sd == "float16":
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_bits(v):
    return int(np.float32(v).view(np.uint32))


@pytest.fixture(scope="module")
def torchao_backends():
    pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    out = {name: get_backend(name) for name in TORCHAO}
    for b in out.values():
        b.check_available()
    return out


@pytest.fixture(scope="module")
def mld():
    pytest.importorskip("ml_dtypes")
    b = get_backend("ml_dtypes")
    b.check_available()
    return b


def quantize_golden(backend, g, fmt, sd):
    """Run a quantize_mx file; return (scale mismatch, live-code mismatch) per row."""
    s, c = backend.quantize_mx(g["src_bits"], src_dtype=sd, fmt=fmt, profile=None, axis=-1)
    assert s.dtype == np.uint8 and s.shape == (len(g["src_bits"]), 1)
    assert c.dtype == np.uint8 and c.shape == g["src_bits"].shape
    valid = np.arange(32)[None, :] < g["n_valid"][:, None]
    live = (g["check"] != "scale_only")[:, None]
    return s[:, 0] != g["exp_scale"], np.any((c != g["exp_codes"]) & valid & live, axis=1), s, c


# ---- torchao: native profiles ----------------------------------------------------------------

@pytest.mark.parametrize("sd", ["float32", "bfloat16"])
@pytest.mark.parametrize("fmt", MX_FMTS)
@pytest.mark.parametrize("name", list(TORCHAO))
def test_torchao_matches_its_profile_goldens(torchao_backends, name, fmt, sd):
    g = load("quantize_mx", fmt, TORCHAO[name], sd)
    sbad, cbad, _, _ = quantize_golden(torchao_backends[name], g, fmt, sd)
    assert not sbad.any() and not cbad.any(), (
        f"{name} vs {TORCHAO[name]} {fmt} {sd}: rows {np.flatnonzero(sbad | cbad)[:10]}")


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp6_e3m2", "mxfp8_e4m3"])
@pytest.mark.parametrize("name", ["torchao", "torchao-rceil"])
def test_torchao_tensor_both_axes_ragged(torchao_backends, name, fmt):
    """40x40 tensors, blocks along either axis, 32 + 8 ragged: the adapter zero-pads."""
    g = load("quantize_mx_tensor", fmt, TORCHAO[name], "bfloat16")
    for ax in (0, 1):
        s, c = torchao_backends[name].quantize_mx(g["src_bits"], src_dtype="bfloat16", fmt=fmt,
                                                  profile=None, axis=ax + 1)
        es, ec = g[f"exp_scales_axis{ax}"], g[f"exp_codes_axis{ax}"]
        np.testing.assert_array_equal(s, es)
        live = np.repeat(es != 0xFF, 32, axis=ax + 1)
        live = live[:, :40, :] if ax == 0 else live[:, :, :40]
        np.testing.assert_array_equal(np.where(live, c, 0), np.where(live, ec, 0))


def test_torchao_shapes_and_axes(torchao_backends):
    """Any rank and block axis, ragged lengths and empty shapes: the protocol's shapes, and the
    same bytes as the block axis moved last by hand (golden-checked above)."""
    b = torchao_backends["torchao"]
    rng = np.random.default_rng(1)
    for shape, axis in [((70,), 0), ((3, 70), 1), ((70, 3), 0), ((2, 37, 5), 1), ((0, 40), 1),
                        ((4, 0), 1), ((2, 3, 64), -1)]:
        x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-8, 8, shape)).astype(np.float32)
        for f in ("mxfp4", "mxfp8_e5m2"):
            s, c = b.quantize_mx(x.view(np.uint32), src_dtype="float32", fmt=f, profile=None,
                                 axis=axis)
            n = shape[axis]
            exp_s = list(shape)
            exp_s[axis] = -(-n // 32)
            assert s.shape == tuple(exp_s) and c.shape == shape
            assert s.flags.c_contiguous and c.flags.c_contiguous
            last = np.ascontiguousarray(np.moveaxis(x, axis, -1))
            s2, c2 = b.quantize_mx(last.view(np.uint32), src_dtype="float32", fmt=f,
                                   profile=None, axis=-1)
            np.testing.assert_array_equal(np.moveaxis(s, axis, -1), s2)
            np.testing.assert_array_equal(np.moveaxis(c, axis, -1), c2)


# ---- torchao: where it differs from ocp ---------------------------------------------------------

# torchao FLOOR reads an Inf as 2^128: scale byte 127 + 128 - emax(elem) where ocp poisons (0xFF)
MAX_CODE = {"mxfp8_e4m3": 0x7E, "mxfp8_e5m2": 0x7B, "mxfp6_e2m3": 0x1F, "mxfp6_e3m2": 0x1F,
            "mxfp4": 0x7}
INF_SCALE = {"mxfp8_e4m3": 0xF7, "mxfp8_e5m2": 0xF0, "mxfp6_e2m3": 0xFD, "mxfp6_e3m2": 0xFB,
             "mxfp4": 0xFD}


@pytest.mark.parametrize("sd", ["float32", "bfloat16"])
@pytest.mark.parametrize("fmt", MX_FMTS)
def test_torchao_floor_vs_ocp_only_inf_and_zero_scale_blocks(torchao_backends, fmt, sd):
    g = load("quantize_mx", fmt, "ocp", sd)
    sbad, cbad, s, c = quantize_golden(torchao_backends["torchao"], g, fmt, sd)
    v = as_f32(g["src_bits"], sd)
    has_nan, has_inf = np.isnan(v).any(1), np.isinf(v).any(1)
    inf_only = has_inf & ~has_nan
    zero_scale = g["exp_scale"] == 0
    # 1. Inf (no NaN) blocks: a finite scale byte instead of 0xFF; Inf -> max-normal code
    assert inf_only.any()
    assert (s[inf_only, 0] == INF_SCALE[fmt]).all() and (g["exp_scale"][inf_only] == 0xFF).all()
    pos_inf = (v == np.inf) & inf_only[:, None]
    assert pos_inf.any() and (c[pos_inf] == MAX_CODE[fmt]).all()
    # 2. scale-0x00 blocks: same byte, but elements divided by 2^-126, not 2^-127 (halved)
    assert cbad[zero_scale].any() and not sbad[zero_scale].any()
    # 3. nothing else: NaN blocks agree (scale 0xFF, codes don't-care), every other block exact
    assert not (sbad | cbad)[~inf_only & ~zero_scale].any()


def test_torchao_floor_zero_scale_example(torchao_backends):
    """fp32 2^-136 in a block of scale 0x00: ocp 2^-136/2^-127 = 2^-9 -> E4M3 code 0x01;
    torchao divides by 2^-126 -> 2^-10, a tie between 0 and 2^-9 -> code 0x00."""
    x = np.zeros((1, 32), np.uint32)
    x[0, 0] = 0x2000
    s, c = torchao_backends["torchao"].quantize_mx(x, src_dtype="float32", fmt="mxfp8_e4m3",
                                                   profile=None, axis=-1)
    assert s[0, 0] == 0x00 and c[0, 0] == 0x00
    # RCEIL leaves 0x00 blocks unscaled (multiplier 1.0): 2^-136 -> 0
    _, c3 = torchao_backends["torchao-rceil"].quantize_mx(x, src_dtype="float32",
                                                          fmt="mxfp8_e4m3", profile=None, axis=-1)
    assert c3[0, 0] == 0x00


def test_torchao_inf_block_example(torchao_backends):
    x = np.zeros((2, 32), np.float32)
    x[:, 1] = 448.0
    x[0, 0], x[1, 0] = np.inf, -np.inf
    for name, scale in (("torchao", 0xF7), ("torchao-rceil", 0xFE), ("torchao-ceil", 0xF7),
                        ("torchao-even", 0xF7)):
        s, c = torchao_backends[name].quantize_mx(x.view(np.uint32), src_dtype="float32",
                                                  fmt="mxfp8_e4m3", profile=None, axis=-1)
        assert list(s[:, 0]) == [scale, scale], name
        assert list(c[:, 0]) == [0x7E, 0xFE] and list(c[:, 1]) == [0, 0], name


def test_torchao_dequantize_matches_ocp_and_decodes_scale_edges(torchao_backends):
    b = torchao_backends["torchao"]
    for fmt in MX_FMTS:
        g = load("dequantize", fmt, "ocp", "float32")
        out = b.dequantize(g["scale"][:, None], g["codes"], fmt=fmt, profile=None)
        exp = g["exp_dequant"]
        assert out.dtype == np.uint32 and out.shape == exp.shape
        nan = lambda a: (a & 0x7FFFFFFF) > 0x7F800000
        assert (g["check"] == "nan_any_payload").all()
        assert ((out == exp) | (nan(out) & nan(exp))).all(), fmt
    codes = np.zeros((3, 32), np.uint8)
    codes[:, 0] = 0x38                       # E4M3 1.0
    codes[:, 1] = 0x7F                       # E4M3 NaN
    out = b.dequantize(np.array([[0x00], [0xFE], [0xFF]], np.uint8), codes, fmt="mxfp8_e4m3",
                       profile=None)
    assert out[0, 0] == 0x00400000           # 0x00 -> 2^-127 (fp32 subnormal), not zero
    assert out[1, 0] == 0x7F000000           # 0xFE -> 2^127
    assert (out[2] & 0x7FFFFFFF > 0x7F800000).all()   # 0xFF -> NaN, even for code 0
    assert out[0, 1] == 0x7FF00000           # NaN payload: E4M3 mantissa bits shifted in


def _nvfp4_run(b, sd):
    g = load("quantize_nvfp4", "nvfp4", "torchao_nvfp4", sd)
    src = g["src_bits"].reshape(-1, 4, 16)
    s, c, t = b.quantize_nvfp4(src, src_dtype=sd, profile=None)
    assert s.shape == (len(src), 4, 1) and c.shape == src.shape and t.shape == (len(src),)
    assert s.dtype == np.uint8 and c.dtype == np.uint8 and t.dtype == np.uint32
    return g, src, s.reshape(len(src), 4), c.reshape(len(src), 64), t


@pytest.mark.parametrize("sd", ["float32", "bfloat16"])
def test_torchao_nvfp4_vs_torchao_nvfp4_goldens(torchao_backends, sd):
    """torchao 0.18 nvfp4_quantize matches the torchao_nvfp4 goldens (elements x * fl(fl(1/T)/S))
    except in two explained ways:
    (a) a NaN/Inf/all-zero tensor: per_tensor_scale = max|x|/2688 is NaN/Inf/0, so torchao
        poisons every block scale and code (the goldens poison only the NaN/Inf block; for a zero
        tensor x86's 0/0 is -NaN, scale byte 0xFF, and NaN casts to E2M1 code 0xC);
    (b) a tiny (subnormal) T where fp32 fl(fl(1/T)/S) overflows: the goldens follow the same fp32
        ops (x * Inf -> +-6, code 0x7) but 0 * Inf = NaN casts to a nonzero code in torchao
        where mxref writes 0."""
    g, _, s, c, t = _nvfp4_run(torchao_backends["torchao"], sd)
    v = as_f32(g["src_bits"], sd)
    bad = ((s != g["exp_scales"]).any(1) | (c != g["exp_codes"]).any(1)
           | (t != g["exp_tensor_scale"]))
    poisoned = ~np.isfinite(v).all(1) | (np.abs(v).max(1) == 0)
    assert bad[poisoned].all()
    import ml_dtypes
    tf = t.view(np.float32)
    sv32 = s.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    with np.errstate(all="ignore"):       # torchao's fp32 fl(fl(1/T) / S) per block
        recip_overflow = ~poisoned & np.isinf((np.float32(1) / tf)[:, None] / sv32).any(1)
    if sd == "float32":   # the R1 rows with subnormal T (0x00618618 and 0x0000185b)
        assert recip_overflow.sum() == 2 and bad[recip_overflow].all()
        for i in np.flatnonzero(recip_overflow):   # only the 0 * Inf elements differ
            diff = c[i] != g["exp_codes"][i]
            assert (v[i][diff] == 0).all() and (g["exp_codes"][i][diff] & 7 == 0).all()
    assert not bad[~poisoned & ~recip_overflow].any()


def test_torchao_nvfp4_tie_example(torchao_backends):
    """T = 2688/2688 = 1; second block amax 1440 -> block scale 240 (0x77); 300/240 = 1.25 is
    an E2M1 tie: torchao 0.18's 300 * fl(1/240) = 1.2500001 rounds up (1.5, code 0x3), and so
    does the torchao_nvfp4 profile (the exact order, ocp, rounds the tie to even: 0x2)."""
    import mxref
    x = np.zeros((1, 2, 16), np.float32)
    x[0, 0, 0] = 2688.0
    x[0, 1, :2] = [1440.0, 300.0]
    s, c, t = torchao_backends["torchao"].quantize_nvfp4(x.view(np.uint32), src_dtype="float32",
                                                         profile=None)
    assert t[0] == f32_bits(1.0) and s[0, 1, 0] == 0x77
    assert c[0, 1, 1] == 0x3
    assert mxref.quantize(x[0], "nvfp4", "torchao_nvfp4").codes[1, 1] == 0x3
    assert mxref.quantize(x[0], "nvfp4", "ocp").codes[1, 1] == 0x2


# ---- ml_dtypes -----------------------------------------------------------------------------------

# (kind of input, ml_dtypes code, ocp code) for every difference seen on the ocp convert goldens
ML_DIFFS = {
    "mxfp8_e4m3": {("over", 0x7F, 0x7E), ("over", 0xFF, 0xFE), ("inf", 0x7F, 0x7E),
                   ("inf", 0xFF, 0xFE), ("nan", 0xFF, 0x7F)},
    "mxfp8_e5m2": {("over", 0x7C, 0x7B), ("over", 0xFC, 0xFB), ("inf", 0x7C, 0x7B),
                   ("inf", 0xFC, 0xFB), ("nan", 0x7E, 0x7F), ("nan", 0xFE, 0x7F)},
    "mxfp6_e2m3": {("nan", 0x20, 0x00)},
    "mxfp6_e3m2": {("nan", 0x20, 0x00)},
    "mxfp4": {("nan", 0x08, 0x00)},
}


@pytest.mark.parametrize("sd", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("fmt", MX_FMTS)
def test_ml_dtypes_convert_vs_ocp(mld, fmt, sd):
    g = load("convert", fmt, "ocp", sd)
    c = mld.convert(g["src_bits"], src_dtype=sd, fmt=fmt, profile="ocp")
    assert c.dtype == np.uint8 and c.shape == g["src_bits"].shape
    ec, v = g["exp_codes"], as_f32(g["src_bits"], sd)
    in_range = np.isfinite(v) & (np.abs(v) <= F32_MAX_FINITE[fmt])
    np.testing.assert_array_equal(c[in_range], ec[in_range])
    kind = np.where(np.isnan(v), "nan", np.where(np.isinf(v), "inf", "over"))
    seen = {(k, int(a), int(b)) for k, a, b in zip(kind[c != ec], c[c != ec], ec[c != ec])}
    assert seen <= ML_DIFFS[fmt], seen - ML_DIFFS[fmt]
    assert {d for d in seen if d[0] == "nan"}, "NaN inputs present in every convert file"


def test_ml_dtypes_fp8_overflow_boundaries(mld):
    """E4M3: 464 (the 448/480 midpoint) rounds to 448, one fp32 ulp above -> NaN (ocp: 448).
    E5M2: 61440 (57344/65536 midpoint, ties to the even Inf) -> Inf (ocp: 57344)."""
    x = np.array([464.0, np.nextafter(np.float32(464), np.float32(1e3)), -1e9, np.inf],
                 np.float32).view(np.uint32)
    assert list(mld.convert(x, src_dtype="float32", fmt="mxfp8_e4m3", profile=None)) == \
        [0x7E, 0x7F, 0xFF, 0x7F]
    y = np.array([np.nextafter(np.float32(61440), np.float32(0)), 61440.0, -np.inf],
                 np.float32).view(np.uint32)
    assert list(mld.convert(y, src_dtype="float32", fmt="mxfp8_e5m2", profile=None)) == \
        [0x7B, 0x7C, 0xFC]
    # FP6/FP4 casts saturate like ocp
    z = np.array([1e9, -np.inf], np.float32).view(np.uint32)
    assert list(mld.convert(z, src_dtype="float32", fmt="mxfp4", profile=None)) == [0x7, 0xF]


@pytest.mark.parametrize("fmt", MX_FMTS)
def test_ml_dtypes_dequantize_matches_ocp(mld, fmt):
    g = load("dequantize", fmt, "ocp", "float32")
    out = mld.dequantize(g["scale"][:, None], g["codes"], fmt=fmt, profile="ocp")
    exp = g["exp_dequant"]
    assert out.dtype == np.uint32 and out.shape == exp.shape
    nan = lambda a: (a & 0x7FFFFFFF) > 0x7F800000
    assert ((out == exp) | (nan(out) & nan(exp))).all()


# ---- refusals, availability, lazy imports ----------------------------------------------------

def test_unsupported_calls(mld, torchao_backends):
    x = np.zeros((2, 32), np.uint32)
    h = np.zeros((2, 32), np.uint16)
    ta = torchao_backends["torchao"]
    with pytest.raises(Unsupported):
        mld.convert(x, src_dtype="float32", fmt="mxint8", profile="ocp")
    with pytest.raises(Unsupported):
        mld.convert(x, src_dtype="float32", fmt="no_such_format", profile="ocp")
    with pytest.raises(Unsupported):
        mld.convert(h, src_dtype="float32", fmt="mxfp4", profile="ocp")   # wrong bit dtype
    with pytest.raises(Unsupported):
        ta.quantize_mx(h, src_dtype="float16", fmt="mxfp4", profile=None, axis=-1)
    with pytest.raises(Unsupported):
        ta.quantize_mx(x, src_dtype="float32", fmt="mxint8", profile=None, axis=-1)
    with pytest.raises(Unsupported):
        ta.dequantize(np.zeros((2, 1), np.uint8), np.zeros((2, 32), np.uint8), fmt="mxint8",
                      profile=None)
    with pytest.raises(Unsupported):
        ta.quantize_nvfp4(np.zeros((1, 2, 16), np.uint16), src_dtype="float16", profile=None)


def test_transformer_engine_unavailable_here():
    te = get_backend("transformer_engine")
    assert te.profiles == ("te_mxfp8",) and "quantize_mx" in te.ops
    try:
        import transformer_engine  # noqa: F401
    except Exception:  # noqa: BLE001 - whatever stops the import here
        with pytest.raises(BackendUnavailable, match="transformer_engine is not importable"):
            te.check_available()
    else:   # pragma: no cover - only where TE exists
        import torch
        if not torch.cuda.is_available():
            with pytest.raises(BackendUnavailable, match="needs a CUDA device"):
                te.check_available()


def test_declared_profiles():
    assert get_backend("ml_dtypes").profiles == ("ocp",)
    assert get_backend("torchao").profiles == ("torchao_floor", "torchao_nvfp4")
    assert get_backend("torchao-rceil").native_profile == "torchao_rceil"
    assert get_backend("torchao-ceil").native_profile == "torchao_ceil"
    assert get_backend("torchao-even").native_profile == "torchao_even"


def test_import_is_lazy():
    code = ("import sys, mxref.backends.peers as p; "
            "print(int(any(m.split('.')[0] in ('torch', 'torchao', 'transformer_engine') "
            "for m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("0")
