"""NVFP4 variants (issue 28 item 4): profiles ``triton_kernels_nvfp4``, ``te_nvfp4_row``,
``te_nvfp4_2d`` and their knobs (nvfp4_order='triton_kernels', nvfp4_amax_scope,
nvfp4_tile_2d), against every implementation: the Numba reference (mxref.quantize), the
Fraction oracle (tests/oracle.py), the torch emulator and the Triton kernels (interpreter).

Expected values never come from the code under test:

* hand-worked vectors, each derived from the stack's source:
  - triton_kernels: triton-lang/triton PR #11668,
    python/triton_kernels/triton_kernels/numerics_details/mxfp.py::downcast_to_mxfp_torch
    (@018a674f6d6d2b2ecedbb6225dc71721677b4cec): ``dequant_scale = max_val / 6``;
    ROUND_NEAREST ``dequant_scale.clamp(max=448.0)`` then ``.to(float8_e4m3fn)``;
    ``quant_scale = where(dequant_scale_rounded == 0, 0, 1.0 / dequant_scale_rounded)``;
    ``quant_tensor = src * quant_scale`` then the RTNE E2M1 bit cast saturating at code 7;
    no tensor scale (``downcast_to_mxfp`` returns values and block scales only).
  - TransformerEngine: transformer_engine/pytorch/custom_recipes/quantization_nvfp4.py::
    NVFP4QuantizerRef._quantize / _quantize_blockwise_reference (@1a4d3b0da24039197519537286
    a3edc6d316c954): row-scaled ``global_amax_row = max(|row|, dim=1)``,
    ``global_amax.view(m, 1, 1)`` (PR #2931); 2D ``quant_tile_shape=(16, 16)``: block amax
    over each 16x16 tile, ``repeat_interleave(tile_len_y, dim=0)``, input zero-padded by
    ``_pad_tensor`` (PR #3027).
* independent numpy-float32 / ml_dtypes transcriptions of those op sequences (IEEE fp32 ops,
  ml_dtypes' RNE casts), run on random data.

Planted bugs (each made a test below fail; reverted): see the report of issue 28 item 4 and
``test_plants_are_caught`` (in-process monkeypatch plants of the API-level helpers).
"""
from __future__ import annotations

import os

import numpy as np
import oracle as O
import pytest

from mxref import dequantize, quantize
from mxref.errors import ProfileConflictError, ScaleValueError, ShapeError, Unsupported
from mxref.profiles import PROFILES, Profile, get_profile

ml_dtypes = pytest.importorskip("ml_dtypes")
F32 = np.float32
FLT_MAX = F32(np.finfo(np.float32).max)
NEW = ("triton_kernels_nvfp4", "te_nvfp4_row", "te_nvfp4_2d")


def bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def f32(b):
    return np.uint32(b).view(np.float32)


# ---- independent transcriptions of the stacks' op sequences --------------------------------
def _e4m3(v):
    return np.asarray(v, np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def _e4m3_val(code):
    return np.asarray(code, np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def _e2m1(y):
    """RNE to E2M1, saturating at +-6 (triton_kernels' min(code, 7)); sign kept (-0 -> 0x8)."""
    return np.clip(y, F32(-6), F32(6)).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)


def tk_ref(x):
    """triton_kernels downcast_to_mxfp_torch, ROUND_NEAREST, E4M3 scales: x [R, n], n % 16 == 0
    -> (scales [R, n/16], codes [R, n])."""
    R, n = x.shape
    b = x.reshape(R, n // 16, 16)
    with np.errstate(all="ignore"):
        amax = np.abs(b).max(-1, keepdims=True)
        ds = np.minimum(amax / F32(6), F32(448))
        sc = _e4m3(ds)
        dsr = _e4m3_val(sc)
        qs = np.where(dsr == 0, F32(0), F32(1) / dsr).astype(np.float32)
        q = (b * qs).astype(np.float32)
    return sc.reshape(R, -1), _e2m1(q).reshape(R, n)


def _te_fp4(x):
    """TE cast_to_fp4x2 (quantization_nvfp4.py), unpacked: its threshold table."""
    r = np.zeros(x.shape, np.uint8)
    table = [((x >= 0.0) & (x <= 0.25), 0), ((x > 0.25) & (x < 0.75), 1),
             ((x >= 0.75) & (x <= 1.25), 2), ((x > 1.25) & (x < 1.75), 3),
             ((x >= 1.75) & (x <= 2.5), 4), ((x > 2.5) & (x < 3.5), 5),
             ((x >= 3.5) & (x <= 5.0), 6), (x > 5.0, 7),
             ((x >= -0.25) & (x < -0.0), 8), ((x < -0.25) & (x > -0.75), 9),
             ((x <= -0.75) & (x >= -1.25), 10), ((x < -1.25) & (x > -1.75), 11),
             ((x <= -1.75) & (x >= -2.5), 12), ((x < -2.5) & (x > -3.5), 13),
             ((x <= -3.5) & (x >= -5.0), 14), (x < -5.0, 15)]
    for m, c in table:
        r[m] = c
    return r


def te_ref(x, *, row_scaled=False, tile_2d=False):
    """TE NVFP4QuantizerRef (rowwise) of a finite x [M, N]: (scales [M, ceil(N/16)], codes,
    decode-side T per row [M] or scalar). The S_enc of an all-zero amax is min(2688/0,
    FLT_MAX) = FLT_MAX here (the Python reference); TE's kernels (core_nvfp4.cuh) and mxref
    use 1 -- callers compare T only where the amax is nonzero."""
    M, N = x.shape
    M16 = -(-M // 16) * 16 if tile_2d else M
    N16 = -(-N // 16) * 16
    xp = np.zeros((M16, N16), np.float32)
    xp[:M, :N] = x
    if row_scaled:
        gamax = np.abs(x).max(1).astype(np.float32).reshape(M, 1, 1)
        gamax = np.concatenate([gamax, np.zeros((M16 - M, 1, 1), np.float32)])
    else:
        gamax = F32(np.abs(x).max())
    if tile_2d:
        t = np.abs(xp).reshape(M16 // 16, 16, N16 // 16, 16).max(axis=(1, 3))
        vec_max = np.repeat(t, 16, axis=0)[..., None]
    else:
        vec_max = np.abs(xp).reshape(M16, N16 // 16, 16).max(-1, keepdims=True)
    with np.errstate(all="ignore"):
        senc = np.minimum(F32(448) * F32(6) / gamax, FLT_MAX).astype(np.float32)
        senc = np.where(senc == 0, F32(1), senc).astype(np.float32)
        gds = (F32(1) / senc).astype(np.float32)
        mult = (senc * (F32(1) / F32(6))).astype(np.float32)
        ds = np.minimum((vec_max * mult).astype(np.float32), FLT_MAX)
        ds = np.clip(ds, F32(-448), F32(448))
        sc = _e4m3(ds)
        enc = np.minimum((F32(1) / (_e4m3_val(sc) * gds).astype(np.float32)), FLT_MAX)
        scaled = (xp.reshape(M16, N16 // 16, 16) * enc.astype(np.float32)).astype(np.float32)
    codes = _te_fp4(np.clip(scaled, F32(-6), F32(6)).reshape(M16, N16))
    return sc.reshape(M16, -1)[:M], codes[:M, :N], gds.reshape(-1)[:M] if row_scaled else gds


def rand_tensor(rng, shape, zeros=True):
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-24, 14, shape))).astype(np.float32)
    if zeros:
        x[rng.random(shape) < 0.05] = 0.0
        x[rng.random(shape) < 0.03] = -0.0
    return x


# ---- the implementations under test ------------------------------------------------------
def impl_api(x, prof):
    m = quantize(x, "nvfp4", prof)
    return m.scales, m.codes, np.asarray(m.tensor_scale, np.float32).view(np.uint32)


def impl_oracle(x, prof):
    knobs = get_profile(prof).knobs()
    rows = [list(map(int, r)) for r in bits(x).reshape(-1, x.shape[-1])]
    p = get_profile(prof)
    if p.nvfp4_amax_scope == "row":
        t, s, c = O.quantize_nvfp4_row_scope(rows, knobs)
    elif p.nvfp4_tile_2d:
        t, s, c = O.quantize_nvfp4_tile_2d(rows, knobs)
    else:
        t, s, c = O.quantize_nvfp4_order(rows, knobs)
    return (np.array(s, np.uint8).reshape(x.shape[:-1] + (-1,)),
            np.array(c, np.uint8).reshape(x.shape), np.array(t, np.uint32))


def impl_torch(x, prof):
    torch = pytest.importorskip("torch")
    from mxkernels import torch_emu as E
    s, c, t = E.quantize_nvfp4(torch.from_numpy(np.ascontiguousarray(x)[None]), "float32",
                               prof, batch_dims=1)
    return s[0].numpy(), c[0].numpy(), t[0].numpy().view(np.uint32)


@pytest.fixture(scope="module")
def ks():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from mxkernels.loader import load_kernels
    prev = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield load_kernels(True)
    finally:
        if prev is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = prev


def impl_triton(ks, x, prof):
    import torch
    s, c, t = ks.nvfp4_quantize(torch.from_numpy(np.ascontiguousarray(x)[None]), prof)
    return s[0].numpy(), c[0].numpy(), t.numpy().view(np.uint32)[0]


IMPLS = {"api": impl_api, "oracle": impl_oracle, "torch": impl_torch}


# ---- A. triton_kernels_nvfp4 -----------------------------------------------------------------
def _blk(vals):
    x = np.zeros((1, 16), np.float32)
    x[0, :len(vals)] = vals
    return x


# (block head, expected scale code, expected codes of the head), hand-worked from
# downcast_to_mxfp_torch's ROUND_NEAREST sequence:
TK_VECTORS = [
    # amax 3: fl(3/6) = 0.5 -> E4M3 0x30; 1/0.5 = 2: 3 -> 6 (0x7), 1 -> 2 (0x4), -0.5 -> -1
    ([3.0, 1.0, -0.5, 0.0], 0x30, [0x7, 0x4, 0xA, 0x0]),
    # amax 11.0625: 11.0625/6 = 1.84375 exactly -> RNE on the 0.125 grid: 1.875 (0x3F);
    # 11.0625 * fl(1/1.875) = 5.9 -> 6 (0x7); 2.0 * 0.5333 = 1.0667 -> 1.0 (0x2)
    ([11.0625, 2.0], 0x3F, [0x7, 0x2]),
    # amax 3000: 500 clamped to 448 (0x7E) before the cast (ml_dtypes would give NaN);
    # 3000/448 = 6.7 -> saturates 6 (0x7); 1000/448 = 2.23 -> 2 (0x4)
    ([3000.0, 1000.0], 0x7E, [0x7, 0x4]),
    # amax 0.01: fl(0.01/6) = 0.0016667 -> E4M3 subnormal 2^-9 (0x01), no 2^-6 floor;
    # 0.01 * 512 = 5.12 -> 6 (0x7)
    ([0.01], 0x01, [0x7]),
    # amax 0.005: 0.00083 < 2^-10 (half the smallest subnormal) -> scale 0x00, quant_scale 0:
    # x * 0 = +-0 -> 0x0, 0x8 (the sign of -0.004 * 0 is kept)
    ([0.005, -0.004], 0x00, [0x0, 0x8]),
    # +Inf (inf_in_block scale_max): Inf/6 = Inf -> clamp 448 (0x7E); Inf * (1/448) = Inf ->
    # saturates to 6 (0x7); 1.0/448 = 0.0022 -> 0 (0x0)
    ([np.inf, 1.0], 0x7E, [0x7, 0x0]),
    # -0.0 alone: amax 0 -> scale 0x00, -0 * 0 = -0 -> 0x8 (sign kept, signed_zero preserve)
    ([-0.0], 0x00, [0x8]),
]


@pytest.mark.parametrize("impl", sorted(IMPLS))
@pytest.mark.parametrize("vec", range(len(TK_VECTORS)))
def test_triton_kernels_nvfp4_hand_vectors(impl, vec):
    head, sc, cs = TK_VECTORS[vec]
    x = _blk(head)
    if impl == "oracle" and not np.isfinite(x).all():
        pass       # the oracle covers scale_max Inf blocks (classify + Inf amax)
    s, c, t = IMPLS[impl](x, "triton_kernels_nvfp4")
    assert int(s.reshape(-1)[0]) == sc
    assert [int(v) for v in c.reshape(-1)[:len(cs)]] == cs
    assert int(np.asarray(t).reshape(-1)[0]) == 0x3F800000      # no tensor scale: T = 1


def test_triton_kernels_nvfp4_hand_vectors_triton(ks):
    for head, sc, cs in TK_VECTORS:
        s, c, t = impl_triton(ks, _blk(head), "triton_kernels_nvfp4")
        assert int(s.reshape(-1)[0]) == sc, head
        assert [int(v) for v in c.reshape(-1)[:len(cs)]] == cs, head
        assert int(t) == 0x3F800000


def test_triton_kernels_nvfp4_nan_block_poisoned():
    # torch.max propagates NaN: NaN / 6 -> clamp keeps NaN -> E4M3 NaN (0x7F); the block's
    # elements are don't-care (mxref writes 0)
    for impl in ("api", "oracle", "torch"):
        s, _c, _ = IMPLS[impl](_blk([np.nan, 1.0]), "triton_kernels_nvfp4")
        assert int(s.reshape(-1)[0]) == 0x7F


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_triton_kernels_nvfp4_random_vs_transcription(impl):
    rng = np.random.default_rng(11)
    x = rand_tensor(rng, (24, 64))
    x[3, 5] = np.inf
    x[7, 40] = -np.inf
    es, ec = tk_ref(x)
    s, c, _t = IMPLS[impl](x, "triton_kernels_nvfp4")
    np.testing.assert_array_equal(s, es)
    np.testing.assert_array_equal(c, ec)


def test_triton_kernels_nvfp4_random_triton(ks):
    rng = np.random.default_rng(12)
    x = rand_tensor(rng, (16, 48))
    es, ec = tk_ref(x)
    s, c, _t = impl_triton(ks, x, "triton_kernels_nvfp4")
    np.testing.assert_array_equal(s, es)
    np.testing.assert_array_equal(c, ec)


def test_triton_kernels_order_differs_from_existing_knobs():
    """No existing knob combination reproduces it: torchao single-level floors the scale at
    2^-6 (0x08) and the exact/te orders carry a tensor scale."""
    x = _blk([0.01])
    alt = PROFILES["torchao_nvfp4"].replace(name="tao1", nvfp4_tensor_scale=False,
                                            nvfp4_scale_min="subnormal")
    assert int(quantize(x, "nvfp4", alt).scales[0, 0]) == 0x08
    assert int(quantize(x, "nvfp4", "triton_kernels_nvfp4").scales[0, 0]) == 0x01


# ---- B. te_nvfp4_row -------------------------------------------------------------------------
def _two_rows():
    x = np.zeros((2, 16), np.float32)
    x[0, :2] = [1.0, 0.5]
    x[1, 0] = 100.0
    return x


def test_te_nvfp4_row_hand_vector():
    """Row 0 amax 1: S_enc = 2688, sc6 = fl(2688 * fl(1/6)) = 448.0 (448.0000134 rounds
    down), block scale fl(1 * 448) -> 0x7E; inv = fl(1 / fl(448 * fl(1/2688))) ~ 6: 1.0 -> 6
    (0x7), 0.5 -> 3 (0x5); T_0 = fl(1 / 2688). Under te_nvfp4 (tensor amax 100, S_enc =
    26.88) row 0's scale is E4M3(4.48) = 4.5 (0x49)."""
    x = _two_rows()
    t0 = bits(F32(1) / F32(2688.0))
    t1 = bits(F32(1) / (F32(2688.0) / F32(100.0)))
    for impl in sorted(IMPLS):
        s, c, t = IMPLS[impl](x, "te_nvfp4_row")
        assert [int(v) for v in s[:, 0]] == [0x7E, 0x7E], impl
        assert [int(v) for v in c[0, :2]] == [0x7, 0x5], impl
        assert [int(v) for v in np.asarray(t).reshape(-1)] == [int(t0), int(t1)], impl
    s, _, _ = impl_api(x, "te_nvfp4")
    assert int(s[0, 0]) == 0x49


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_te_nvfp4_row_random_vs_te_reference(impl):
    rng = np.random.default_rng(21)
    x = rand_tensor(rng, (20, 48))
    x[4] = 0.0                                     # an all-zero row
    es, ec, et = te_ref(x, row_scaled=True)
    s, c, t = IMPLS[impl](x, "te_nvfp4_row")
    np.testing.assert_array_equal(s, es)
    np.testing.assert_array_equal(c, ec)
    t = np.asarray(t).reshape(-1)
    nz = np.abs(x).max(1) > 0
    np.testing.assert_array_equal(t[nz], bits(et)[nz])
    assert int(t[4]) == 0x3F800000                 # zero row: S_enc = 1 (core_nvfp4.cuh)


def test_te_nvfp4_row_dequantize_per_row():
    x = _two_rows()
    m = quantize(x, "nvfp4", "te_nvfp4_row")
    assert m.tensor_scale.shape == (2,)
    d = dequantize(m)
    # row 0: e2m1 6 * e4m3 448 * T_0 = 2688 * fl(1/2688), one rounding of the exact product
    # (exact in float64: 24 + 12 bits); row 1 decodes with its own T_1
    t0 = float(F32(1) / F32(2688))
    assert d[0, 0] == F32(2688 * t0) and d[0, 1] == F32(1344 * t0)
    t1 = float(F32(1) / (F32(2688) / F32(100)))
    assert d[1, 0] == F32(2688 * t1)
    # explicit per-row decode: shape must be the codes without the block axis
    d2 = dequantize(codes=m.codes, scales=m.scales, fmt="nvfp4", tensor_scale=m.tensor_scale)
    np.testing.assert_array_equal(d2.view(np.uint32), d.view(np.uint32))
    with pytest.raises(ShapeError):
        dequantize(codes=m.codes, scales=m.scales, fmt="nvfp4",
                   tensor_scale=np.ones(3, np.float32))
    with pytest.raises(ScaleValueError):
        dequantize(codes=m.codes, scales=m.scales, fmt="nvfp4",
                   tensor_scale=np.array([1.0, np.nan], np.float32))


def test_te_nvfp4_row_axis0_and_3d():
    rng = np.random.default_rng(22)
    x = rand_tensor(rng, (32, 5))
    m = quantize(x, "nvfp4", "te_nvfp4_row", axis=0)          # rows = the 5 columns
    ref = quantize(np.ascontiguousarray(x.T), "nvfp4", "te_nvfp4_row")
    np.testing.assert_array_equal(m.codes.T, ref.codes)
    np.testing.assert_array_equal(m.tensor_scale, ref.tensor_scale)
    x3 = rand_tensor(rng, (2, 3, 32))
    m3 = quantize(x3, "nvfp4", "te_nvfp4_row")
    assert m3.tensor_scale.shape == (2, 3)
    m2 = quantize(x3.reshape(6, 32), "nvfp4", "te_nvfp4_row")
    np.testing.assert_array_equal(m3.tensor_scale.reshape(-1), m2.tensor_scale)


def test_te_nvfp4_row_refuses_global_amax():
    with pytest.raises(ProfileConflictError):
        quantize(_two_rows(), "nvfp4", "te_nvfp4_row", global_amax=np.float32(1.0))


# ---- C. te_nvfp4_2d --------------------------------------------------------------------------
def test_te_nvfp4_2d_hand_vector():
    """32x32, x[0,0] = 6, x[5,3] = 1: global amax 6, S_enc = 448, sc6 = fl(448 * fl(1/6)) =
    74.66667; tile (0,0) amax 6 -> fl(6 * 74.66667) = 448.00003 -> E4M3 448 (0x7E) for rows
    0..15 of block 0; x[5,3]: inv = fl(1/fl(448 * fl(1/448))) = 1 -> 1.0 (0x2). te_nvfp4 (1x16):
    row 5's block amax 1 -> 74.67 -> E4M3 72 (0x69), 1 * 448/72 = 6.2 -> 6 (0x7)."""
    x = np.zeros((32, 32), np.float32)
    x[0, 0], x[5, 3] = 6.0, 1.0
    for impl in sorted(IMPLS):
        s, c, _t = IMPLS[impl](x, "te_nvfp4_2d")
        assert s.shape == (32, 2)
        assert all(int(v) == 0x7E for v in s[:16, 0]), impl
        assert int(c[5, 3]) == 0x2 and int(c[0, 0]) == 0x7, impl
        assert (s[16:, :] == 0).all() and (s[:, 1] == 0).all(), impl
    s, c, _ = impl_api(x, "te_nvfp4")
    assert (int(s[5, 0]), int(c[5, 3])) == (0x69, 0x7)


@pytest.mark.parametrize("impl", sorted(IMPLS))
@pytest.mark.parametrize("shape", [(32, 32), (20, 24), (16, 48), (3, 16)])
def test_te_nvfp4_2d_random_vs_te_reference(impl, shape):
    rng = np.random.default_rng(31 + shape[0])
    x = rand_tensor(rng, shape)
    es, ec, et = te_ref(x, tile_2d=True)
    s, c, t = IMPLS[impl](x, "te_nvfp4_2d")
    np.testing.assert_array_equal(s, es)
    np.testing.assert_array_equal(c, ec)
    assert int(np.asarray(t).reshape(-1)[0]) == int(bits(et))


def test_te_nvfp4_1d_transcription_agrees():
    """The transcription itself reproduces te_nvfp4 (1x16) on the same data."""
    rng = np.random.default_rng(41)
    x = rand_tensor(rng, (8, 64))
    es, ec, _ = te_ref(x)
    s, c, _ = impl_api(x, "te_nvfp4")
    np.testing.assert_array_equal(s, es)
    np.testing.assert_array_equal(c, ec)


# ---- typed refusals --------------------------------------------------------------------------
def test_profile_validation():
    base = PROFILES["te_nvfp4"]
    with pytest.raises(ProfileConflictError):
        base.replace(name="x", nvfp4_amax_scope="row", nvfp4_tile_2d=True)
    with pytest.raises(ProfileConflictError):
        base.replace(name="x", nvfp4_amax_scope="row", nvfp4_tensor_scale=False)
    with pytest.raises(ProfileConflictError):
        base.replace(name="x", nvfp4_order="triton_kernels")          # needs single-level
    with pytest.raises(ProfileConflictError):
        base.replace(name="x", nvfp4_tile_2d=1)
    with pytest.raises(ProfileConflictError):
        base.replace(name="x", nvfp4_amax_scope="col")
    with pytest.raises(ProfileConflictError):
        quantize(np.ones(32, np.float32), "mxfp8_e4m3",
                 Profile("y", nvfp4_amax_scope="row"))
    with pytest.raises(ProfileConflictError):
        quantize(np.ones(32, np.float32), "mxfp4", Profile("y", nvfp4_tile_2d=True))


def test_four_over_six_refuses_variants():
    from mxref.corrections import quantize_nvfp4_4over6
    for p in ("te_nvfp4_row", "te_nvfp4_2d", "triton_kernels_nvfp4"):
        with pytest.raises(ProfileConflictError):
            quantize_nvfp4_4over6(np.ones((2, 16), np.float32), p)


@pytest.mark.parametrize("prof", ["te_nvfp4_row", "te_nvfp4_2d"])
def test_triton_raises_unsupported(ks, prof, monkeypatch):
    import torch
    with pytest.raises(ks.KernelUnsupported):
        ks.nvfp4_quantize(torch.zeros(1, 16, 16), prof)
    from mxkernels.backends import TRITON_PROFILES, TritonBackend
    assert prof not in TRITON_PROFILES
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    be = TritonBackend()
    with pytest.raises(Unsupported):
        be.quantize_nvfp4(np.zeros((1, 16, 16), np.uint32), src_dtype="float32", profile=prof)


def test_backend_protocol_shapes():
    """numba and torch backends: tensor_scale [T, R] under the row scope, [T] otherwise."""
    from mxref.backends.numba_backend import NumbaBackend
    pytest.importorskip("torch")
    from mxkernels.backends import TorchBackend
    rng = np.random.default_rng(51)
    src = bits(rand_tensor(rng, (3, 32, 32)))
    for be in (NumbaBackend(), TorchBackend()):
        _, _, ts = be.quantize_nvfp4(src, src_dtype="float32", profile="te_nvfp4_row")
        assert ts.shape == (3, 32)
        s2, c2, ts2 = be.quantize_nvfp4(src, src_dtype="float32", profile="te_nvfp4_2d")
        assert ts2.shape == (3,)
        for i in range(3):
            es, ec, _ = te_ref(src[i].view(np.float32), tile_2d=True)
            np.testing.assert_array_equal(s2[i], es)
            np.testing.assert_array_equal(c2[i], ec)


def test_plants_are_caught(monkeypatch):
    """In-process plants of the API-level helpers make the transcription tests fail."""
    import sys
    Q = sys.modules["mxref.quantize"]
    rng = np.random.default_rng(61)
    x = rand_tensor(rng, (20, 48))
    # plant 1: row scope computed with the tensor amax (every row the global max)
    real = Q._row_amax_bits
    monkeypatch.setattr(Q, "_row_amax_bits",
                        lambda b, p: np.full(b.shape[0], real(b, p).max(), np.uint32))
    es, ec, _ = te_ref(x, row_scaled=True)
    s, c, _ = impl_api(x, "te_nvfp4_row")
    assert not (np.array_equal(s, es) and np.array_equal(c, ec))
    monkeypatch.setattr(Q, "_row_amax_bits", real)
    # plant 2: 2D tiles scattered back without the row repeat (tile scale only on row 0)
    real_t = Q._quantize_nvfp4_tiles

    def bad_tiles(bits2, *a):
        real_t(bits2, *a)
        scales2 = a[-1]
        scales2[1:] = 0
    monkeypatch.setattr(Q, "_quantize_nvfp4_tiles", bad_tiles)
    x2 = rand_tensor(rng, (32, 32))
    es, ec, _ = te_ref(x2, tile_2d=True)
    s, c, _ = impl_api(x2, "te_nvfp4_2d")
    assert not np.array_equal(s, es)
