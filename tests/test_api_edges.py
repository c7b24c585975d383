"""Typed errors at the public-API edges (issue 27 item 8): every bad argument below used to
decode garbage, give a silent wrong answer or raise a plain Python error. Each must now raise an
MXRefError subclass whose message names the argument and the problem; the valid neighbours of
each bad value keep working, with expected values that do not come from mxref."""
import os
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import mxref
from mxref.cli import main
from mxref.decompose import synthetic
from mxref.errors import (
    CodeRangeError,
    GeneratorArgumentError,
    MXRefError,
    ScaleValueError,
    ShapeError,
    UnsupportedDtypeError,
)
from mxref.profiles import get_profile, sr_profile
from mxref.rotate import RotationOptionError, sign_vector

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle as O  # noqa: E402

X = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)
ONES_E8M0 = np.full((2, 1), 127, np.uint8)       # scale 2^0 for one 32-block per row
ONES_E4M3 = np.full((2, 2), 0x38, np.uint8)      # E4M3 1.0 for two 16-blocks per row


# ---- dequantize: element codes and scale arrays ----------------------------------------------
@pytest.mark.parametrize("fmt,scales,bad,msg", [
    ("mxfp4", ONES_E8M0, 0xFF, r"codes\[1, 3\] = 0xff is above 0x0f"),
    ("mxfp4", ONES_E8M0, 0x10, r"codes\[1, 3\] = 0x10 is above 0x0f"),
    ("nvfp4", ONES_E4M3, 0x10, r"codes\[1, 3\] = 0x10 is above 0x0f"),
    ("mxfp6_e2m3", ONES_E8M0, 0x40, r"codes\[1, 3\] = 0x40 is above 0x3f"),
    ("mxfp6_e3m2", ONES_E8M0, 0xC0, r"codes\[1, 3\] = 0xc0 is above 0x3f"),
])
def test_dequantize_refuses_codes_above_the_format_range(fmt, scales, bad, msg):
    codes = np.zeros((2, 32), np.uint8)
    codes[1, 3] = bad                           # the first bad one in C order is named
    codes[1, 7] = bad
    with pytest.raises(CodeRangeError, match=msg):
        mxref.dequantize(codes=codes, scales=scales, fmt=fmt)
    mx = mxref.MXTensor(codes=codes, scales=scales, fmt=mxref.get_format(fmt),
                        profile=get_profile("ocp"), axis=1, block_size=codes.shape[1] //
                        scales.shape[1])
    with pytest.raises(CodeRangeError, match=msg):
        mx.packed()                              # packing would drop the high bits silently
    codes[1, 3] = codes[1, 7] = bad & ((1 << mxref.get_format(fmt).element.bits) - 1)
    out = mxref.dequantize(codes=codes, scales=scales, fmt=fmt)  # the top code is fine
    assert out.shape == codes.shape


def test_dequantize_takes_every_byte_of_8_bit_formats():
    """FP8 / INT8 use the whole byte: 0xFF is E4M3 -NaN and INT8 -1/64, not out of range."""
    codes = np.full((1, 32), 0xFF, np.uint8)
    s = np.full((1, 1), 127, np.uint8)
    assert np.isnan(mxref.dequantize(codes=codes, scales=s, fmt="mxfp8_e4m3")).all()
    assert (mxref.dequantize(codes=codes, scales=s, fmt="mxint8") == -1 / 64).all()


@pytest.mark.parametrize("kw,err,msg", [
    (dict(scales=ONES_E8M0.astype(np.int64)), ShapeError, "scales must be a uint8 array.*int64"),
    (dict(scales=ONES_E8M0.astype(np.float32)), ShapeError, "scales must be a uint8.*float32"),
    (dict(codes=np.zeros((2, 32), np.int8)), ShapeError, "codes must be a uint8 array.*int8"),
    (dict(scales=[[127], [127, 127]]), ShapeError, "scales is not an array"),
    (dict(scales=np.full((2, 2), 127, np.uint8)), ShapeError, r"expected \(2, 1\)"),
    (dict(block_size=0), mxref.BlockSizeError, "block_size=0 must be >= 1"),
    (dict(block_size=1.5), mxref.BlockSizeError, "block_size=1.5"),
    (dict(codes=torch.zeros((2, 32), dtype=torch.uint8, device="meta")), UnsupportedDtypeError,
     "codes is a meta tensor"),
    (dict(scales=torch.zeros((2, 1), dtype=torch.uint8).to_sparse()), UnsupportedDtypeError,
     "scales is a torch.sparse_coo tensor"),
])
def test_dequantize_refuses_bad_code_and_scale_arrays(kw, err, msg):
    args = dict(codes=np.zeros((2, 32), np.uint8), scales=ONES_E8M0, fmt="mxfp4") | kw
    with pytest.raises(err, match=msg):
        mxref.dequantize(**args)


@pytest.mark.parametrize("bs", [0, 1.5, -32])
def test_quantize_block_size_zero_is_not_the_default(bs):
    """block_size=0 used to mean "the default" (``block_size or ...``) and quantized silently."""
    with pytest.raises(mxref.BlockSizeError, match=f"block size {bs!r} is not allowed"):
        mxref.quantize(X, "mxfp4", block_size=bs)


def test_dequantize_refuses_what_is_not_an_mxtensor():
    with pytest.raises(UnsupportedDtypeError, match="MXTensor or codes=.*got ndarray"):
        mxref.dequantize(np.zeros((2, 32), np.uint8))


# ---- NVFP4 tensor scale and global amax ------------------------------------------------------
@pytest.mark.parametrize("ts,msg", [(-1.0, r"tensor_scale=-1.0 is negative"),
                                    (np.float32(-2.5), "is negative"),
                                    (np.nan, "tensor_scale is NaN"),
                                    (np.inf, "tensor_scale is infinite"),
                                    (-np.inf, "negative"),
                                    ("1", "not a number"),
                                    (np.array([1.0, 2.0, 3.0], np.float32),
                                     r"per-row tensor_scale must be float32 of shape \(2,\)"),
                                    (np.array([1.0, 2.0]), r"per-row tensor_scale must be float32"),
                                    (np.array([1.0, np.nan], np.float32), "NaN row")])
def test_nvfp4_tensor_scale_must_be_finite_and_not_negative(ts, msg):
    codes = np.full((2, 32), 0x2, np.uint8)     # e2m1 1.0
    with pytest.raises((ScaleValueError, ShapeError), match=msg):
        mxref.dequantize(codes=codes, scales=ONES_E4M3, fmt="nvfp4", tensor_scale=ts)


def test_nvfp4_per_row_tensor_scale_decodes_each_row():
    """An array tensor scale is one per row (te_nvfp4_row): rows of e2m1 1.0 x E4M3 1.0 decode
    to 1.0 and 2.0 under T = [1, 2]."""
    codes = np.full((2, 32), 0x2, np.uint8)
    d = mxref.dequantize(codes=codes, scales=ONES_E4M3, fmt="nvfp4",
                         tensor_scale=np.array([1.0, 2.0], np.float32))
    assert (d[0] == 1.0).all() and (d[1] == 2.0).all()


def test_nvfp4_tensor_scale_zero_decodes_to_zero_and_others_scale():
    """T = 0 is what torchao's order gives an all-zero tensor: e2m1 * e4m3 * 0 = +0 (a -0
    tensor scale reads as +0, no sign flip); T = 2 doubles e2m1 1.0 * E4M3 1.0."""
    codes = np.full((2, 32), 0x2, np.uint8)
    for ts in (0.0, -0.0):
        out = mxref.dequantize(codes=codes, scales=ONES_E4M3, fmt="nvfp4", tensor_scale=ts)
        assert (out.view(np.uint32) == 0).all()
    out = mxref.dequantize(codes=codes, scales=ONES_E4M3, fmt="nvfp4", tensor_scale=2.0)
    assert (out.view(np.uint32) == O.dequantize_nvfp4_value(0x2, 0x38, 0x40000000)).all()
    with pytest.raises(ScaleValueError, match="mxfp4 has no tensor scale"):
        mxref.dequantize(codes=np.zeros((2, 32), np.uint8), scales=ONES_E8M0, fmt="mxfp4",
                         tensor_scale=1.0)


@pytest.mark.parametrize("profile", ["ocp", "torchao_nvfp4", "te_nvfp4"])
@pytest.mark.parametrize("g,msg", [(np.nan, "global_amax is NaN"),
                                   (-2.0, r"global_amax=-2.0 is negative"),
                                   (np.inf, "global_amax is infinite")])
def test_nvfp4_global_amax_nan_inf_negative_refused(profile, g, msg):
    if profile == "te_nvfp4" and g == np.inf:
        # TE defines it: S_enc = min(2688 / amax, FLT_MAX) = 0 falls back to 1, so T = 1
        mx = mxref.quantize(X, "nvfp4", profile, global_amax=np.float32(g))
        assert mx.tensor_scale.view(np.uint32) == 0x3F800000
        return
    with pytest.raises(ScaleValueError, match=msg):
        mxref.quantize(X, "nvfp4", profile, global_amax=np.float32(g))


# ---- source arrays that hold no plain dense data ---------------------------------------------
@pytest.mark.parametrize("make,msg", [
    (lambda: torch.empty((2, 32), device="meta"), "x is a meta tensor"),
    (lambda: torch.eye(32).to_sparse(), "x is a torch.sparse_coo tensor"),
    (lambda: torch.eye(32).to_sparse_csr(), "x is a torch.sparse_csr tensor"),
    (lambda: np.ma.masked_less(X, 0), "x is a numpy masked array; its mask would be ignored"),
    (lambda: np.array([object()] * 32), "dtype object"),
    (lambda: np.zeros(32, np.complex64), "dtype complex64"),
    (lambda: torch.zeros(32, dtype=torch.complex64), "torch dtype torch.complex64"),
    (lambda: [object()] * 32, "Python lists"),
])
@pytest.mark.parametrize("api", ["quantize", "rotate", "decompose"])
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_inputs_without_dense_float_data_are_typed(make, msg, api):
    call = {"quantize": lambda x: mxref.quantize(x, "mxfp4"),
            "rotate": lambda x: mxref.rotate(x, 32),
            "decompose": lambda x: mxref.decompose(x, "mxfp4")}[api]
    with pytest.raises(UnsupportedDtypeError, match=msg):
        call(make())


def test_explicit_sign_vector_as_meta_tensor_is_typed():
    with pytest.raises(UnsupportedDtypeError, match="signs is a meta tensor"):
        sign_vector(torch.ones(16, dtype=torch.int8, device="meta"), 16)


# ---- generator integers: seed, offset, step, tensor_id ---------------------------------------
@pytest.mark.parametrize("call,err,msg", [
    (lambda: mxref.random_bits((4,), 1.5), GeneratorArgumentError, r"seed=1.5 must be an integer"),
    (lambda: mxref.random_bits((4,), True), GeneratorArgumentError, "seed=True .* not bool"),
    (lambda: mxref.random_bits((4,), 1, 2.7), GeneratorArgumentError, "offset=2.7"),
    (lambda: mxref.random_bits((4,), 1, "3"), GeneratorArgumentError, "offset='3'"),
    (lambda: mxref.random_bits(-1, 1), ShapeError, "shape must be"),
    (lambda: mxref.quantize(X, "mxfp4", sr_profile("ocp"), seed=1.5), GeneratorArgumentError,
     "seed=1.5"),
    (lambda: mxref.quantize(X, "mxfp4", sr_profile("ocp"), seed=1, rng_offset=0.5),
     GeneratorArgumentError, "rng_offset=0.5"),
    (lambda: mxref.quantize(X, "mxfp4", sr_profile("ocp"), seed=1,
                            rbits=np.zeros(X.shape, np.uint32)),
     mxref.ProfileConflictError, "rbits or seed, not both"),
    (lambda: mxref.quantize_rotated(X, "mxfp4", sr_profile("ocp"), sr_seed=2.0),
     GeneratorArgumentError, "sr_seed=2.0"),
    (lambda: sign_vector("random", 16, seed=1.5), RotationOptionError, "seed=1.5"),
    (lambda: synthetic("gaussian", (4,), 1.5), GeneratorArgumentError, "seed=1.5"),
    (lambda: synthetic("gaussian", (4,), -1), GeneratorArgumentError, "seed=-1 must be >= 0"),
])
def test_generator_arguments_must_be_integers(call, err, msg):
    with pytest.raises(err, match=msg):
        call()
    assert issubclass(err, MXRefError)


@pytest.mark.parametrize("seed,offset", [(7, 2**70 + 5), (2**64 + 9, -3), (-1, 2**63)])
def test_random_bits_takes_any_integer_modulo_the_word(seed, offset):
    """The contract reduces seed mod 2^64 and offset + i mod 2^32; offsets beyond int64 used to
    raise OverflowError. Expected words from the pure-Python Philox of tests/oracle.py."""
    s = seed % 2**64
    want = [O.philox4x32_10(((offset + i) % 2**32, 0, 0, 0), (s & 0xFFFFFFFF, s >> 32))[0]
            for i in range(5)]
    assert mxref.random_bits((5,), seed, offset).tolist() == want


# ---- CLI outputs: checked before the work, written atomically to exactly the named path -------
def _forbid(monkeypatch, module: str, name: str):
    """Make ``mxref.<module>.<name>`` fail the test if the command reaches the work."""
    def boom(*a, **k):
        raise AssertionError(f"{name} ran although the output path was unusable")
    import importlib
    importlib.import_module(f"mxref.{module}")
    monkeypatch.setattr(sys.modules[f"mxref.{module}"], name, boom)


def test_quantize_out_into_missing_directory(tmp_path):
    out = tmp_path / "a" / "b" / "codes"        # no .npz suffix: written as named, not codes.npz
    r = CliRunner().invoke(main, ["quantize", "-f", "mxfp4", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.parent.iterdir()) == ["codes"]
    assert set(np.load(out, allow_pickle=False)) == {"codes", "scales", "packed"}


def test_quantize_out_unwritable_exits_2_before_the_work(tmp_path, monkeypatch):
    _forbid(monkeypatch, "quantize", "quantize")
    (tmp_path / "file").write_text("x")
    r = CliRunner().invoke(main, ["quantize", "-f", "mxfp4", "-o", str(tmp_path / "file" / "o.npz")])
    assert r.exit_code == 2 and "--out" in r.output and "cannot create directory" in r.output


def test_decompose_outputs_into_missing_directories(tmp_path):
    png, csv_path = tmp_path / "p" / "x.png", tmp_path / "q" / "r" / "b.csv"
    r = CliRunner().invoke(main, ["decompose", "--synthetic", "gaussian", "--shape", "4x64",
                                  "-f", "mxfp4", "--plot", str(png), "--per-block", str(csv_path)])
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert csv_path.read_text().startswith("input,rule,block,s,")
    assert [p.name for p in png.parent.iterdir()] == ["x.png"]     # no temporary left behind


@pytest.mark.parametrize("option,name", [("--plot", "x.png"), ("--per-block", "b.csv"),
                                         ("--plot", "x.notanimage")])
def test_decompose_unusable_output_exits_2_before_the_work(tmp_path, monkeypatch, option, name):
    _forbid(monkeypatch, "decompose", "decompose")
    (tmp_path / "file").write_text("x")
    target = tmp_path / name if name.endswith("notanimage") else tmp_path / "file" / name
    r = CliRunner().invoke(main, ["decompose", "--synthetic", "gaussian", "--shape", "4x64",
                                  "-f", "mxfp4", option, str(target)])
    assert r.exit_code == 2 and option in r.output, r.output
    assert "AssertionError" not in r.output
