"""mxkernels/triton_convert.py: FP8 <-> MXFP4 conversion and MX re-blocking, bit-exact against
the CPU reference (mxref.fp8fp4.mxfp4_to_fp8 / fp8_to_mxfp4 / reblock) and its golden files.

Expected values come from mxref only. The kernels run in the Triton interpreter (private copies
from load_kernels(True)); with a CUDA device the same checks also run compiled. Edges: scale
bytes 0x00 / 0xFE / 0xFF, all-NaN and all-zero groups, non-canonical zero blocks with large
bytes, non-exact groups (wide scale spreads), -0 codes, FP8 NaN/Inf codes, group bytes that
push values to or past 2^128, ragged lengths, every MX format in reblock along both axes,
decoded values >= 2^128 (refused), codes wider than the format (refused). A planted bug is
shown to be caught.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import mxref  # noqa: E402
from mxref.backends.base import Backend  # noqa: E402
from mxkernels.loader import load_kernels  # noqa: E402
from test_kernels_fast import _exec_interpreted  # noqa: E402
from mxref.formats import FORMATS  # noqa: E402
from mxref.fp8fp4 import (DecodedOverflowError, FP8Tensor, ScaleRangeError,  # noqa: E402
                          fp8_to_mxfp4, mxfp4_to_fp8, reblock)
from mxref.profiles import PROFILES, get_profile  # noqa: E402
from mxref.quantize import MXTensor  # noqa: E402
from mxref.verify import verify  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION is unset")

MX_FORMATS = ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8")
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
SRC = Path(__file__).resolve().parents[1] / "mxkernels" / "triton_convert.py"


@pytest.fixture(scope="module", params=DEVICES)
def env(request):
    dev = request.param
    return load_kernels(dev == "cpu")["triton_convert"], dev


def _t(a, dev):
    return torch.from_numpy(np.array(a, copy=True)).to(dev)


def _np(t):
    return t.cpu().numpy()


def _mx(codes, scales, fmt="mxfp4", profile="ocp"):
    return MXTensor(codes=codes, scales=scales, fmt=FORMATS[fmt], profile=get_profile(profile),
                    axis=1, block_size=32)


# =============================================================================================
# MXFP4 -> FP8
# =============================================================================================
def _mxfp4_rows(n=256, seed=0):
    """[rows, n] E2M1 codes and [rows, ceil(n/32)] bytes with the edge classes."""
    rng = np.random.default_rng(seed)
    nb = -(-n // 32)
    rows_c, rows_s = [], []

    def add(c, s):
        rows_c.append(np.asarray(c, np.uint8))
        rows_s.append(np.clip(np.asarray(s), 0, 255).astype(np.uint8))
    for spread in (0, 6, 14, 15, 16, 17, 24, 40):                     # exactness by spread
        base = 127 + int(rng.integers(-10, 10))
        add(rng.integers(0, 16, n), base - rng.integers(0, spread + 1, nb))
    s = np.full(nb, 130)
    s[1] = 0xFF
    add(rng.integers(0, 16, n), s)                                     # one NaN block
    add(rng.integers(0, 16, n), np.full(nb, 0xFF))                     # all-NaN row
    add(np.zeros(n), np.full(nb, 140))                                 # all-zero row
    c = rng.integers(0, 16, n)
    c[:32] = 0
    s = np.full(nb, 120)
    s[0] = 0xFE                                                        # zero block, huge byte
    add(c, s)
    c = rng.integers(0, 16, n)
    c[32:96] = 8                                                       # -0 codes
    add(c, np.full(nb, 127))
    add(rng.integers(0, 16, n), np.resize([0x00, 0x01, 0xFE, 0xFD, 0x7F, 0x00, 0xFE, 0x80], nb))
    add(rng.integers(0, 16, n), np.resize([0xFE, 0xF0], nb))
    add(rng.integers(0, 16, n), np.resize([0x00, 0x03, 0x06, 0x07], nb))   # G clamps to 0
    c = np.resize([1, 9, 3, 11], n)                                    # finest bit -1 codes
    add(c, 140 - np.resize([0, 15, 14, 16], nb))
    return np.stack(rows_c), np.stack(rows_s)


@pytest.mark.parametrize("n", [256, 200])
@pytest.mark.parametrize("fp8", ["e4m3", "e5m2"])
def test_mxfp4_to_fp8_equals_reference(env, n, fp8):
    mod, dev = env
    codes, scales = _mxfp4_rows(n, seed=n)
    for group in (32, 64, 128, 256, "row"):
        ref = mxfp4_to_fp8(_mx(codes, scales), group=group, fp8=fp8)
        gs, c8, ex = mod.mxfp4_to_fp8(_t(scales, dev), _t(codes, dev), group=group, fp8=fp8)
        np.testing.assert_array_equal(_np(gs), ref.scales, err_msg=f"group {group}")
        np.testing.assert_array_equal(_np(c8), ref.codes, err_msg=f"group {group}")
        np.testing.assert_array_equal(_np(ex), ref.exact, err_msg=f"group {group}")
        assert _np(ex).dtype == np.bool_
    if fp8 == "e4m3":       # the edges really produce inexact groups and 0xFF / 0x00 bytes
        ref = mxfp4_to_fp8(_mx(codes, scales), group=128)
        assert not ref.exact.all() and ref.exact.any()
        assert {0x00, 0xFF} <= set(ref.scales.reshape(-1).tolist())


def test_mxfp4_to_fp8_long_rows_and_empty(env):
    mod, dev = env
    rng = np.random.default_rng(2)
    n = 2100                                     # 66 blocks: several chunks per "row" group
    codes = rng.integers(0, 16, (3, n)).astype(np.uint8)
    scales = (127 - rng.integers(0, 20, (3, 66))).astype(np.uint8)
    scales[1, 40] = 0xFF
    for group, tile in (("row", None), ("row", (4, 2)), (1024, (8, 1))):
        ref = mxfp4_to_fp8(_mx(codes, scales), group=group)
        gs, c8, ex = mod.mxfp4_to_fp8(_t(scales, dev), _t(codes, dev), group=group, tile=tile)
        np.testing.assert_array_equal(_np(gs), ref.scales)
        np.testing.assert_array_equal(_np(c8), ref.codes)
        np.testing.assert_array_equal(_np(ex), ref.exact)
    for shape in ((0, 64), (2, 0)):
        c = np.zeros(shape, np.uint8)
        s = np.zeros((shape[0], -(-shape[1] // 32)), np.uint8)
        ref = mxfp4_to_fp8(_mx(c, s), group="row")
        gs, c8, ex = mod.mxfp4_to_fp8(_t(s, dev), _t(c, dev), group="row")
        assert _np(gs).shape == ref.scales.shape and _np(c8).shape == ref.codes.shape
        assert _np(ex).shape == ref.exact.shape


# =============================================================================================
# FP8 -> MXFP4
# =============================================================================================
def _fp8_rows(fp8, n, ng, seed):
    rng = np.random.default_rng(seed)
    rows = 12
    codes = rng.integers(0, 256, (rows, n)).astype(np.uint8)
    if fp8 == "e4m3":
        codes[(codes & 0x7F) == 0x7F] ^= 1          # NaN codes only where planted
    else:
        codes[(codes & 0x7F) >= 0x7C] &= 0x7B       # no Inf/NaN codes except where planted
    codes[0, 5] = 0x7F                              # NaN code (e4m3; e5m2 NaN too)
    codes[1, :40] = 0x80                            # -0
    codes[1, 40:70] = 0x00
    codes[2] = np.resize(np.arange(256, dtype=np.uint8), n)        # every code
    if fp8 == "e5m2":
        codes[3, 7] = 0x7C                          # +Inf
        codes[4, 9] = 0xFC                          # -Inf
    gs = (127 + rng.integers(-30, 30, (rows, ng))).astype(np.uint8)
    gs[5, 0] = 0xFE
    gs[6, 0] = 0x00
    gs[7, 0] = 0xFF
    gs[8, :] = 0xF8
    gs[9, 0] = 0x01
    gs[10, :] = 0xFD
    return codes, gs


def _fp8_profiles():
    out = []
    for name, pr in PROFILES.items():
        if pr.rounding == "stochastic":
            continue
        if pr.scale_log2_f32 or pr.element_round_f32 or pr.zero_block_amax != "zero":
            continue        # microxcaling_torch: fp8_to_mxfp4 refuses (ProfileConflictError)
        try:
            pr.check_format(FORMATS["mxfp4"])
        except mxref.MXRefError:
            continue
        out.append(name)
    return out


@pytest.mark.parametrize("fp8", ["e4m3", "e5m2"])
@pytest.mark.parametrize("group", [128, 16, 48, "row"])
def test_fp8_to_mxfp4_equals_reference(env, fp8, group):
    mod, dev = env
    n = 200
    ng = 1 if group == "row" else -(-n // group)
    codes, gs = _fp8_rows(fp8, n, ng, seed=ng)
    profs = _fp8_profiles()
    assert {"ocp", "rceil", "torchao_rceil", "microxcaling", "triton_kernels_round_up"} <= \
        set(profs)
    for prof in profs:
        f8 = FP8Tensor(codes=codes, scales=gs, group=group, axis=1, fp8=fp8)
        try:
            ref = fp8_to_mxfp4(f8, profile=prof)
        except ScaleRangeError:
            with pytest.raises(ScaleRangeError):
                mod.fp8_to_mxfp4(_t(gs, dev), _t(codes, dev), group=group, profile=prof,
                                 fp8=fp8)
            # the kernel agrees everywhere else: drop the offending rows and compare
            ok = []
            for r in range(codes.shape[0]):
                try:
                    fp8_to_mxfp4(FP8Tensor(codes=codes[r:r + 1], scales=gs[r:r + 1],
                                           group=group, axis=1, fp8=fp8), profile=prof)
                    ok.append(r)
                except ScaleRangeError:
                    pass
            assert len(ok) < codes.shape[0]
            f8 = FP8Tensor(codes=codes[ok], scales=gs[ok], group=group, axis=1, fp8=fp8)
            ref = fp8_to_mxfp4(f8, profile=prof)
            s, c = mod.fp8_to_mxfp4(_t(gs[ok], dev), _t(codes[ok], dev), group=group,
                                    profile=prof, fp8=fp8)
        else:
            s, c = mod.fp8_to_mxfp4(_t(gs, dev), _t(codes, dev), group=group, profile=prof,
                                    fp8=fp8)
        np.testing.assert_array_equal(_np(s), ref.scales, err_msg=prof)
        np.testing.assert_array_equal(_np(c), ref.codes, err_msg=prof)


# =============================================================================================
# re-blocking
# =============================================================================================
def _random_mx(fmt, shape, seed, scale_lo=100, scale_hi=140):
    """Random codes and bytes (NaN/Inf codes included where the format has them)."""
    rng = np.random.default_rng(seed)
    bits = FORMATS[fmt].element.bits
    codes = rng.integers(0, 1 << bits, shape).astype(np.uint8)
    scales = rng.integers(scale_lo, scale_hi, (shape[0], -(-shape[1] // 32))).astype(np.uint8)
    scales[1, 0] = 0xFF
    scales[2, :] = 0x00
    codes[3, :] = 0
    codes[4, :20] = 1 << (bits - 1) if bits < 8 else 0x80    # -0 (int8: code 0x80)
    return codes, scales


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_reblock_equals_reference(env, fmt):
    mod, dev = env
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((70, 90)) * 2.0 ** rng.integers(-12, 12, (70, 1))).astype(np.float32)
    x[3, 4] = np.nan
    x[10] = 0
    x[11, :40] = -0.0
    x[12] *= np.float32(2.0 ** -130)
    x[13, 7] = np.inf
    for prof in ("ocp", "rceil"):
        src = mxref.quantize(x, fmt, prof, axis=1)
        for ax in (0, 1, -2):
            ref = reblock(src, axis=ax, profile=prof)
            s, c = mod.reblock(_t(src.scales, dev), _t(src.codes, dev), fmt=fmt, profile=prof,
                               axis=ax)
            np.testing.assert_array_equal(_np(s), ref.scales, err_msg=f"{prof} axis {ax}")
            np.testing.assert_array_equal(_np(c), ref.codes, err_msg=f"{prof} axis {ax}")
    # raw codes and bytes: NaN/Inf codes, 0xFF / 0x00 bytes, other profiles
    codes, scales = _random_mx(fmt, (64, 96), seed=7)
    for prof in ("torchao_floor", "microxcaling", "te_mxfp8", "triton_kernels_round_up"):
        try:
            get_profile(prof).check_format(FORMATS[fmt])
        except mxref.MXRefError:
            continue
        ref = reblock(_mx(codes, scales, fmt, prof), axis=0, profile=prof)
        s, c = mod.reblock(_t(scales, dev), _t(codes, dev), fmt=fmt, profile=prof, axis=0)
        np.testing.assert_array_equal(_np(s), ref.scales, err_msg=prof)
        np.testing.assert_array_equal(_np(c), ref.codes, err_msg=prof)


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e5m2"])
def test_reblock_decoded_overflow_is_refused(env, fmt):
    mod, dev = env
    codes, scales = _random_mx(fmt, (32, 64), seed=9)
    scales[5, 1] = 0xFE
    codes[5, 40] = 0x7 if fmt == "mxfp4" else 0x7B          # max normal at byte 0xFE
    with pytest.raises(DecodedOverflowError):
        reblock(_mx(codes, scales, fmt), axis=0)
    with pytest.raises(DecodedOverflowError):
        mod.reblock(_t(scales, dev), _t(codes, dev), fmt=fmt, axis=0)
    with pytest.raises(mod.KernelUnsupported):
        mod.reblock(_t(scales, dev), _t(codes, dev), fmt=fmt, axis=0)
    scales[5, 1] = {"mxfp4": 0xFC, "mxfp8_e5m2": 0xEF}[fmt]  # largest byte below: both agree
    ref = reblock(_mx(codes, scales, fmt), axis=0)
    s, c = mod.reblock(_t(scales, dev), _t(codes, dev), fmt=fmt, axis=0)
    np.testing.assert_array_equal(_np(s), ref.scales)
    np.testing.assert_array_equal(_np(c), ref.codes)


def test_bad_input_raises(env):
    mod, dev = env
    KU = mod.KernelUnsupported
    c = torch.zeros(4, 64, dtype=torch.uint8, device=dev)
    s = torch.zeros(4, 2, dtype=torch.uint8, device=dev)
    with pytest.raises(KU, match="multiple of the MX block size"):
        mod.mxfp4_to_fp8(s, c, group=48)
    with pytest.raises(KU, match="uint8"):
        mod.mxfp4_to_fp8(s.int(), c, group=64)
    with pytest.raises(KU, match="do not fit"):
        mod.mxfp4_to_fp8(s[:, :1], c, group=64)
    with pytest.raises(KU, match="fp8"):
        mod.mxfp4_to_fp8(s, c, group=64, fp8="e3m4")
    bad = c.clone()
    bad[1, 3] = 16                                           # not an E2M1 code
    with pytest.raises(KU, match="4 bits"):
        mod.mxfp4_to_fp8(s, bad, group=64)
    with pytest.raises(KU, match="do not fit"):
        mod.fp8_to_mxfp4(s, c, group=128)
    with pytest.raises(KU, match="stochastic"):
        mod.fp8_to_mxfp4(s, c, group=32, profile=get_profile("ocp").replace(
            name="sr", rounding="stochastic"))
    with pytest.raises(KU, match="2-D"):
        mod.reblock(s, c.reshape(2, 2, 64), fmt="mxfp4")
    with pytest.raises(KU, match="fit"):
        mod.reblock(s, bad, fmt="mxfp4")
    with pytest.raises(KU, match="axis"):
        mod.reblock(s, c, fmt="mxfp4", axis=2)
    with pytest.raises(KU, match="nvfp4"):
        mod.reblock(s, c, fmt="nvfp4")
    # non-contiguous inputs are copied, not misread
    big = torch.randint(0, 16, (64, 4), dtype=torch.uint8, device=dev)
    cs = torch.full((4, 2), 127, dtype=torch.uint8, device=dev)
    a = mod.mxfp4_to_fp8(cs, big.t(), group=64)
    b = mod.mxfp4_to_fp8(cs, big.t().contiguous(), group=64)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


# =============================================================================================
# golden files (mxfp4_to_fp8, fp8_to_mxfp4, reblock) through the verify engine
# =============================================================================================
class _ConvertBackend(Backend):
    name = "triton-convert-test"
    version = "0"
    ops = frozenset({"mxfp4_to_fp8", "fp8_to_mxfp4", "reblock"})
    profiles = ("ocp", "rceil")

    def __init__(self, mod, dev):
        self.mod, self.dev, self.device = mod, dev, dev

    def mxfp4_to_fp8(self, scales, codes, *, group):
        gs, c, ex = self.mod.mxfp4_to_fp8(_t(scales, self.dev), _t(codes, self.dev), group=group)
        return _np(gs), _np(c), _np(ex)

    def fp8_to_mxfp4(self, group_scales, codes, *, group, profile):
        s, c = self.mod.fp8_to_mxfp4(_t(group_scales, self.dev), _t(codes, self.dev),
                                     group=group, profile=profile)
        return _np(s), _np(c)

    def reblock(self, scales, codes, *, fmt, profile, axis):
        s, c = self.mod.reblock(_t(scales, self.dev), _t(codes, self.dev), fmt=fmt,
                                profile=profile, axis=axis)
        return _np(s), _np(c)


@pytest.mark.corpus_twin
@pytest.mark.parametrize("ops, level", [(("mxfp4_to_fp8", "fp8_to_mxfp4"), 0),
                                        (("mxfp4_to_fp8", "fp8_to_mxfp4"), 1),
                                        (("reblock",), 0), (("reblock",), 1)])
def test_golden(env, ops, level):
    mod, dev = env
    rep = verify(_ConvertBackend(mod, dev), ops=list(ops), levels=(level,))
    s = rep.doc["summary"]
    assert rep.exit_code == 0, (rep.doc["mismatches"][:2], rep.doc["errors"][:2])
    assert s["cases"] > 0 and s["passed_cases"] == s["cases"]
    assert {f["op"] for f in rep.doc["files"]} == set(ops)


# =============================================================================================
# planted bugs
# =============================================================================================
def _planted_copy(tmp_path, old: str, new: str):
    """An interpreted copy of triton_convert.py with one line changed."""
    text = SRC.read_text()
    assert text.count(old) == 1, f"planting site {old!r} not found exactly once"
    path = tmp_path / "triton_convert_planted.py"
    path.write_text(text.replace(old, new))
    ks = load_kernels(True)
    deps = ("mxkernels.triton_common", "mxkernels.triton_quant")   # what the module imports
    return _exec_interpreted(path, {d: ks[d.rsplit(".", 1)[1]] for d in deps})


def test_planted_liveness_bug_is_caught(tmp_path):
    """Group byte from every non-NaN block, all-zero ones included (the rule counts only live
    blocks): the zero-block-with-a-huge-byte edge row catches it."""
    bad = _planted_copy(tmp_path, "live = b_ok & (sb != 255) & nz", "live = b_ok & (sb != 255)")
    with pytest.raises(AssertionError):
        test_mxfp4_to_fp8_equals_reference((bad, "cpu"), 256, "e4m3")


def test_planted_reblock_zero_scale_bug_is_caught(tmp_path):
    """Elements of a 0x00 destination block encoded at exponent -127 whatever the profile's
    zero_scale_elem_exp: invisible for ocp, caught on torchao_floor (-126) by the reference."""
    bad = _planted_copy(tmp_path, "    se = tl.where(s == -127, ZEXP, s)\n    code = _encode(",
                        "    se = s\n    code = _encode(")
    fmt = "mxfp8_e4m3"
    x = np.zeros((64, 32), np.float32)
    x[:, 0] = np.float32(2.0 ** -120)                 # floor: s = -128 -> byte 0x00
    src = mxref.quantize(x, fmt, "torchao_floor", axis=1)
    ref = reblock(src, axis=0, profile="torchao_floor")
    assert (ref.scales == 0).any() and ref.codes.any()
    s, c = bad.reblock(_t(src.scales, "cpu"), _t(src.codes, "cpu"), fmt=fmt,
                       profile="torchao_floor", axis=0)
    np.testing.assert_array_equal(_np(s), ref.scales)
    assert not np.array_equal(_np(c), ref.codes)


# =============================================================================================
# ahead-of-time compilation for sm_90, gfx942, gfx950 (no GPU needed)
# =============================================================================================

