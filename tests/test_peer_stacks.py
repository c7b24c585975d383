"""Peer stacks run through their own code: gfloat, fouroversix (PyTorch reference, CPU) and
NVIDIA's cuda_fp4/6/8.h conversions compiled as host code (nv-host).

Each stack is skipped when it is not installed here. The hand-worked vectors take their
expected bits from the spec or the peer's source (derivations in the comments), never from
mxref; the verify runs check that each bundled expectations file accounts for every deviation
with no stale entry (--strict-xpass exits 0).
"""
import numpy as np
import pytest
from click.testing import CliRunner

from mxref.backends import registry
from mxref.backends.base import BackendUnavailable, Unsupported
from mxref.cli import main


def f32(*vals):
    return np.array([vals], np.float32).view(np.uint32)


def strict_verify(*args):
    """`mxref verify ... --strict-xpass`, in-process (shares the imports of the other tests)."""
    r = CliRunner().invoke(main, ["verify", "--no-progress", "--in-process", "--strict-xpass",
                                  *args])
    return r.exit_code, r.output


# ---- gfloat ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gfloat():
    pytest.importorskip("gfloat")
    return registry.get_backend("gfloat")


def test_gfloat_mxint8_reaches_minus_two(gfloat):
    # amax 127.5/64: floor(log2 1.99) - emax(int8 = 0) = 0 -> scale 2^0 (0x7f); -127.5/64 * 64 =
    # -127.5 rounds (ties to even) to -128, which gfloat's two's-complement int8 keeps: code
    # 0x80 (-2.0); 1.0 -> 64 = 0x40.
    s, c = gfloat.quantize_mx(f32(-127.5 / 64, 1.0), src_dtype="float32", fmt="mxint8", axis=1)
    assert s.tolist() == [[0x7F]] and c.tolist() == [[0x80, 0x40]]


def test_gfloat_inf_block_saturates(gfloat):
    # compute_scale_amax: floor(log2 Inf) - 2 clipped to 127 -> 2^127 = E8M0 0xfe; Inf / 2^127
    # saturates to 6.0 (E2M1 0x7); 1.0 / 2^127 rounds to +0.
    s, c = gfloat.quantize_mx(f32(np.inf, 1.0), src_dtype="float32", fmt="mxfp4", axis=1)
    assert s.tolist() == [[0xFE]] and c.tolist() == [[0x7, 0x0]]


def test_gfloat_nan_refusal_is_reported_not_invented(gfloat):
    nan = np.array([[0x7FC00000, 0x3F800000]], np.uint32)
    # FP4: round_float raises 'No NaN in format'; the adapter writes 0xff (no 4-bit code is it)
    assert gfloat.convert(nan, src_dtype="float32", fmt="mxfp4").tolist() == [[0xFF, 0x2]]
    with pytest.raises(Unsupported, match="No NaN in format ocp_int8"):
        gfloat.convert(nan, src_dtype="float32", fmt="mxint8")   # every INT8 byte is a code


def test_gfloat_block_ties_to_even(gfloat):
    # amax 5.0: floor(log2 5) - 2 = 0 -> scale 0x7f; E2M1 ties: 0.25 -> 0, 2.5 -> 2 (0x4),
    # 5.0 -> 4 (0x6), -0.75 -> -1 (0xa)
    s, c = gfloat.quantize_mx(f32(0.25, 2.5, 5.0, -0.75), src_dtype="float32", fmt="mxfp4",
                              axis=1)
    assert s.tolist() == [[0x7F]] and c.tolist() == [[0x0, 0x4, 0x6, 0xA]]


def test_gfloat_dequantize_e8m0_zero(gfloat):
    # E8M0 0x00 = 2^-127; E2M1 0x1 = 0.5 -> 2^-128 = fp32 subnormal 2^21 * 2^-149 = 0x00200000
    scales = np.array([[0x00]], np.uint8)
    codes = np.zeros((1, 32), np.uint8)
    codes[0, :2] = [0x1, 0x7]
    out = gfloat.dequantize(scales, codes, fmt="mxfp4")
    # 6 * 2^-127 = 1.5 * 2^-125, a normal fp32: biased exponent 2, fraction .5 -> 0x01400000
    assert out[0, :3].tolist() == [0x00200000, 0x01400000, 0]


def test_gfloat_expectations_strict(gfloat):
    code, out = strict_verify("-b", "gfloat", "--level", "1", "-f", "mxint8,mxfp4",
                              "--expectations", "gfloat")
    assert code == 0, out
    assert "xfail" in out and " 0 xpass" in out


# ---- fouroversix ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fouroversix():
    pytest.importorskip("fouroversix.quantize.pytorch.reference")
    return registry.get_backend("fouroversix")


def bf16(vals, n):
    a = np.zeros(n, np.float32)
    a[:len(vals)] = vals
    return (a.view(np.uint32) >> 16).astype(np.uint16)


def test_fouroversix_scale_op_order(fouroversix):
    # its order E4M3(fl(fl(11.0625 / 6) * fl(2688 / 29.5))) = E4M3(1.84375 * 91.118645f) and the
    # fp32 product is exactly 168.0, the midpoint of E4M3 160 (0x72) and 176 (0x73): ties to
    # even -> 0x72. (TE's fl(b * fl(S_enc * fl(1/6))) = 168.00002 -> 0x73.)
    x = bf16([29.5] + [0] * 15 + [11.0625], 32)[None, None]
    s, _, _ = fouroversix.quantize_nvfp4(x, src_dtype="bfloat16")
    assert s.ravel().tolist() == [0x7E, 0x72]


def test_fouroversix_unclamped_e2m1_encodes_eight_as_minus_zero(fouroversix):
    import torch
    from fouroversix.quantize.pytorch import reference as ref
    # fake_quantize_to_e2m1: |x| >= 4 -> 2 * round(x / 2); 7.0 -> 2 * round(3.5) = 8 (no clamp
    # outside the stochastic branch); the bit packer maps bf16 8.0 (exponent 130) to E = 4,
    # code (4 << 1) = 0x8, which is E2M1 -0.
    q = ref.fake_quantize_to_e2m1(torch.tensor([7.0]))
    assert q.tolist() == [8.0]
    assert ref.quantize_bf16_to_unpacked_fp4(q.bfloat16()).tolist() == [0x8]
    # through the adapter: a coarse block scale (E4M3 0x01 = 2^-9) leaves x/s near 7 -> 0x8
    x = bf16([3.3363623e38] + [0] * 15 + [2.0992294e33, 1.9471113e33], 32)[None, None]
    s, c, _ = fouroversix.quantize_nvfp4(x, src_dtype="bfloat16")
    assert s.ravel().tolist() == [0x7E, 0x01] and c.ravel()[16:18].tolist() == [0x8, 0x8]


def test_fouroversix_zero_tensor_scale(fouroversix):
    # amax 0: decode_scale = 1 / (fl(6 * 448) / 0) = 1 / Inf = +0
    _, c, t = fouroversix.quantize_nvfp4(np.zeros((1, 1, 16), np.uint32), src_dtype="float32")
    assert t.tolist() == [0] and not c.any()


def test_fouroversix_expectations_strict(fouroversix):
    code, out = strict_verify("-b", "fouroversix", "--level", "1",
                              "--expectations", "fouroversix")
    assert code == 0, out
    assert " 0 xpass" in out


# ---- nv-host --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nv():
    from mxref.backends import nv_host
    b = registry.get_backend("nv-host")
    try:
        b.check_available()
    except BackendUnavailable as e:
        pytest.skip(str(e))
    return nv_host


def test_nv_e2m1_round_nearest_even_satfinite(nv):
    # E2M1 grid 0 .5 1 1.5 2 3 4 6: ties go to the even code: 0.25 -> 0, 0.75 -> 1 (0x2),
    # 1.25 -> 1 (0x2), 1.75 -> 2 (0x4), 2.5 -> 2 (0x4), 3.5 -> 4 (0x6), 5 -> 4 (0x6),
    # -0.25 -> -0 (0x8); 7 and 1e30 saturate to 6 (0x7).
    x = f32(0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, 7.0, 1e30)
    got = nv.nv_convert(x, "mxfp4", "float32")
    assert got.tolist() == [[0x0, 0x2, 0x2, 0x4, 0x4, 0x6, 0x6, 0x8, 0x7, 0x7]]
    # cuda_fp4.h: "NaN input values result in positive MAXNORM" (+6 = 0x7), either sign
    assert nv.nv_convert(np.array([0x7FC00000, 0xFFC00000], np.uint32), "mxfp4",
                         "float32").tolist() == [0x7, 0x7]


def test_nv_e4m3_satfinite(nv):
    # E4M3 max 448 (0x7e); 464 is the midpoint of 448 and 480 (beyond max): satfinite -> 0x7e;
    # NaN stays NaN (0x7f); 0.5 * 2^-9 (half the smallest subnormal) ties to +0.
    got = nv.nv_convert(f32(464.0, np.inf, np.nan, 2.0 ** -10), "mxfp8_e4m3", "float32")
    assert got.tolist() == [[0x7E, 0x7E, 0x7F, 0x00]]


def test_nv_e8m0_rounding_modes(nv):
    # cudaRoundZero: 3 -> 2^1 (0x80); cudaRoundPosInf: 3 -> 2^2 (0x81); 1 -> 0x7f either way;
    # below 2^-127 clips to 2^-127 (0x00); Inf satfinite -> 2^127 (0xfe); NaN -> 0xff.
    x = np.array([3.0, 1.0, 2.0 ** -130, np.inf, np.nan])
    assert nv.nv_e8m0(x, nv.ROUND_ZERO).tolist() == [0x80, 0x7F, 0x00, 0xFE, 0xFF]
    assert nv.nv_e8m0(x, nv.ROUND_POS_INF).tolist() == [0x81, 0x7F, 0x00, 0xFE, 0xFF]
    assert nv.nv_e8m0(x, nv.ROUND_ZERO, f32=True).tolist() == [0x80, 0x7F, 0x00, 0xFE, 0xFF]


@pytest.mark.parametrize("backend", ["nv-host", "nv-host-rceil"])
def test_nv_expectations_strict(nv, backend):
    code, out = strict_verify("-b", backend, "--level", "1", "-f", "mxfp4",
                              "--expectations", "nv_host")
    assert code == 0, out
    assert " 0 xpass" in out


def test_nv_missing_compiler_exits_4(nv, monkeypatch):
    monkeypatch.setattr(nv, "_LIB", None)
    monkeypatch.setenv("CXX", "mxref-no-such-compiler")
    r = CliRunner().invoke(main, ["verify", "-b", "nv-host", "--level", "0", "--no-progress"])
    assert r.exit_code == 4, r.output
    assert "mxref-no-such-compiler" in r.output


def test_nv_missing_nv_target_is_named(nv, monkeypatch, tmp_path):
    # (the CLI runs backends in a child process, so this monkeypatched search is checked here;
    # the exit code 4 path is the compiler test's)
    monkeypatch.setattr(nv, "_LIB", None)
    real = nv.importlib.util.find_spec
    monkeypatch.setattr(nv.importlib.util, "find_spec",
                        lambda name, *a: None if name == "nvidia" else real(name, *a))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setattr(nv, "TOOLKIT", tmp_path)
    with pytest.raises(BackendUnavailable, match=r"<nv/target>.*nvidia-cuda-cccl-cu12"):
        registry.get_backend("nv-host").check_available()
