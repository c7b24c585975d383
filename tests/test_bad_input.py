"""Bad input gets a typed error naming the problem; never a crash or silent garbage."""
import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

import mxref
from mxref.cli import main

X = np.ones(32, np.float32)


@pytest.mark.parametrize("call,err,msg", [
    (lambda: mxref.quantize(X, "mxfp5"), mxref.UnknownFormatError, "unknown format 'mxfp5'"),
    (lambda: mxref.quantize(X, "mxfp4", "nvidia"), mxref.UnknownProfileError, "unknown profile"),
    (lambda: mxref.quantize(X.astype(np.int8), "mxfp4"), mxref.UnsupportedDtypeError, "int8"),
    (lambda: mxref.quantize(X.astype(ml_dtypes.bfloat16).view(np.uint16), "mxfp4"),
     mxref.AmbiguousInputError, "source_dtype"),
    (lambda: mxref.quantize(X.view(np.uint32), "mxfp4", source_dtype="bfloat16"),
     mxref.AmbiguousInputError, "float32"),
    (lambda: mxref.quantize(X, "mxfp4", source_dtype="float16"), mxref.AmbiguousInputError,
     "only for raw"),
    (lambda: mxref.quantize(X, "mxfp4", axis=1), mxref.AxisError, "out of range"),
    (lambda: mxref.quantize(np.float32(1.0).reshape(()), "mxfp4"), mxref.AxisError, "0-d"),
    (lambda: mxref.quantize(X, "mxfp4", block_size=24), mxref.BlockSizeError, "block size 24"),
    (lambda: mxref.quantize(X, "nvfp4", block_size=32), mxref.BlockSizeError, "must be 16"),
    (lambda: mxref.quantize(X.astype(np.float64), "mxfp4"), mxref.UnsupportedDtypeError,
     "double-rounding"),
    (lambda: mxref.quantize(X.astype(np.float64), "mxfp4", from_float64="rtz"),
     mxref.UnsupportedDtypeError, "from_float64"),
    (lambda: mxref.quantize([1.0, 2.0], "mxfp4"), mxref.UnsupportedDtypeError, "lists"),
    (lambda: mxref.quantize(X, "mxfp4", "te_mxfp8"), mxref.ProfileConflictError, "only for"),
    (lambda: mxref.quantize(X, "nvfp4", "rceil"), mxref.ProfileConflictError, "E8M0 rule"),
    (lambda: mxref.quantize(X, "mxfp4", mxref.get_profile("ocp").replace(
        name="x", overflow="nonsaturating")), mxref.ProfileConflictError, "neither"),
    (lambda: mxref.get_profile("ocp").replace(rounding="nearest"), mxref.ProfileConflictError,
     "rounding='nearest'"),
    (lambda: mxref.get_profile("ocp").replace(rceil_subnormal="any_up"),
     mxref.ProfileConflictError, "only applies"),
    (lambda: mxref.get_profile("ocp").replace(nan_in_block="ignore"),
     mxref.ProfileConflictError, "contradictory"),
    (lambda: mxref.quantize(X, "mxfp4", seed=1), mxref.ProfileConflictError, "rbits/seed"),
    (lambda: mxref.quantize(X, "mxfp4", mxref.get_profile("ocp").replace(
        name="sr", rounding="stochastic")), mxref.ProfileConflictError, "needs rbits"),
    (lambda: mxref.quantize(X, "mxfp4", mxref.get_profile("ocp").replace(
        name="sr", rounding="stochastic"), rbits=np.zeros(31, np.uint32)),
     mxref.ShapeError, "rbits"),
    (lambda: mxref.dequantize(codes=np.zeros(32, np.uint8), scales=np.zeros(2, np.uint8),
                              fmt="mxfp4"), mxref.ShapeError, "does not match"),
])
def test_typed_errors(call, err, msg):
    with pytest.raises(err, match=msg):
        call()
    assert issubclass(err, mxref.MXRefError)


def test_cli_usage_errors_exit_2(tmp_path):
    r = CliRunner().invoke(main, ["quantize", "-f", "mxfp4", "-p", "nope", "-o", str(tmp_path / "o.npz")])
    assert r.exit_code == 2 and "unknown profile" in r.output
    r = CliRunner().invoke(main, ["quantize", "-f", "mxfp9", "-o", "x.npz"])
    assert r.exit_code == 2
    bad = tmp_path / "x.pkl"
    bad.write_bytes(b"\x80\x04junk")
    r = CliRunner().invoke(main, ["quantize", str(bad), "-f", "mxfp4", "-o", str(tmp_path / "o.npz")])
    assert r.exit_code == 2 and "only .npy" in r.output


def test_cli_refuses_object_npy_and_keeps_existing_output(tmp_path):
    obj = tmp_path / "obj.npy"
    np.save(obj, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    r = CliRunner().invoke(main, ["quantize", str(obj), "-f", "mxfp4", "-o", str(tmp_path / "o.npz")])
    assert r.exit_code == 2 and "cannot read" in r.output
    out = tmp_path / "keep.npz"
    out.write_bytes(b"user data")
    good = tmp_path / "x.npy"
    np.save(good, X)
    r = CliRunner().invoke(main, ["quantize", str(good), "-f", "mxfp4", "-o", str(out)])
    assert r.exit_code == 2 and out.read_bytes() == b"user data"
