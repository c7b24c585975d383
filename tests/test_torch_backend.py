"""The ``torch`` backend (mxkernels.torch_emu) against the committed golden corpus.

Every L0 and L1 file of every profile the backend claims must match bit for bit, under the
file's check modes (``scale_only``: codes of a 0xFF-scale block are don't-care;
``nan_any_payload``: any NaN matches a NaN). Also: typed errors on bad input, empty tensors,
and a planted bug that the comparison must catch.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mxref.backends.registry import get_backend  # noqa: E402
from mxkernels.backends import TorchBackend  # noqa: E402
from mxref.errors import (AmbiguousInputError, AxisError, BlockSizeError,  # noqa: E402
                          ProfileConflictError, UnknownFormatError, UnknownProfileError,
                          UnsupportedDtypeError)
from mxref.golden.store import column_numpy, read_golden, schema_meta  # noqa: E402
from mxref.verify.compare import logical_shape  # noqa: E402
from mxref.profiles import PROFILES  # noqa: E402

from mxkernels import torch_emu as E  # noqa: E402

ROOT = Path(__file__).resolve().parents[1] / "golden"


def _manifest_files():
    doc = json.loads((ROOT / "MANIFEST.json").read_text())
    return sorted(rel for rel, e in doc["files"].items() if e["level"] in (0, 1))


FILES = _manifest_files() if (ROOT / "MANIFEST.json").exists() else []


def _fp32_equal(got: np.ndarray, exp: np.ndarray, nan_any: bool) -> np.ndarray:
    """Element-wise bit equality of fp32 bit arrays; with nan_any, NaN matches any NaN."""
    got = got.astype(np.uint32)
    exp = exp.astype(np.uint32)
    eq = got == exp
    if nan_any:
        is_nan = lambda b: (b & 0x7FFFFFFF) > 0x7F800000  # noqa: E731
        eq |= is_nan(got) & is_nan(exp)
    return eq


def _rows_bad(mask: np.ndarray) -> list[int]:
    return np.nonzero(~mask.reshape(mask.shape[0], -1).all(axis=1))[0].tolist()


def check_file(backend, path: Path, *, mutate=None) -> list[str]:
    """Run ``backend`` over one golden file; return a list of mismatch descriptions.

    ``mutate(name, array) -> array`` may alter a backend result before comparison (used by
    the planted-bug test to prove the comparison can fail).
    """
    t = read_golden(path)
    meta = schema_meta(t)
    op, fmt, profile, sd = meta["op"], meta["format"], meta["profile"], meta["src_dtype"]
    mutate = mutate or (lambda name, a: a)
    check = column_numpy(t, "check")
    problems: list[str] = []

    def report(what, rows):
        if rows:
            problems.append(f"{path.name}: {what}: {len(rows)} rows differ, first {rows[:5]}")

    if op == "quantize_mx":
        src = column_numpy(t, "src_bits")
        n_valid = column_numpy(t, "n_valid").astype(int)
        exp_s = column_numpy(t, "exp_scale")
        exp_c = column_numpy(t, "exp_codes")
        s, c = backend.quantize_mx(src, src_dtype=sd, fmt=fmt, profile=profile, axis=-1)
        s, c = mutate("scales", s), mutate("codes", c)
        report("scale", _rows_bad(s[:, 0] == exp_s))
        care = (check == "bitexact") & (exp_s != 0xFF)
        valid = np.arange(32)[None, :] < n_valid[:, None]
        report("codes", _rows_bad(((c == exp_c) | ~valid) | ~care[:, None]))
        # ragged rows again as genuinely short inputs (the backend pads them itself)
        for n in sorted(set(n_valid.tolist()) - {32}):
            idx = np.nonzero(n_valid == n)[0]
            s2, c2 = backend.quantize_mx(np.ascontiguousarray(src[idx, :n]), src_dtype=sd,
                                         fmt=fmt, profile=profile, axis=-1)
            report(f"ragged n={n} scale", _rows_bad(s2[:, 0] == exp_s[idx]))
            report(f"ragged n={n} codes",
                   _rows_bad((c2 == exp_c[idx, :n]) | ~care[idx, None]))
        # the file's other expected columns, through this backend's own pack / dequantize
        if "exp_dequant" in t.column_names and fmt != "nvfp4":
            d = backend.dequantize(exp_s[:, None].copy(), exp_c, fmt=fmt, profile=profile)
            report("dequant", _rows_bad(_fp32_equal(d, column_numpy(t, "exp_dequant"), True)
                                        | ~care[:, None]))
        if "exp_packed" in t.column_names and len(exp_c):   # all rows at once (2-D pack)
            pk = E.pack(torch.from_numpy(exp_c.astype(np.int64)), fmt).numpy()
            report("packed", _rows_bad(pk == column_numpy(t, "exp_packed")))
    elif op == "quantize_mx_tensor":
        src = column_numpy(t, "src_bits")
        for ax in (0, 1):
            exp_s = column_numpy(t, f"exp_scales_axis{ax}")
            exp_c = column_numpy(t, f"exp_codes_axis{ax}")
            s, c = backend.quantize_mx(src, src_dtype=sd, fmt=fmt, profile=profile, axis=ax + 1)
            s, c = mutate("scales", s), mutate("codes", c)
            report(f"axis{ax} scales", _rows_bad(s == exp_s))
            poisoned = np.repeat(exp_s == 0xFF, 32, axis=ax + 1)
            poisoned = poisoned[:, :40, :] if ax == 0 else poisoned[:, :, :40]
            care = (check != "scale_only")[:, None, None] & ~poisoned
            report(f"axis{ax} codes", _rows_bad((c == exp_c) | ~care))
    elif op == "quantize_nvfp4":
        src = column_numpy(t, "src_bits")
        rows = src.shape[0]
        m, n = logical_shape(t, "src_bits")     # 4x16; 32x32 for the 2D-tile profile
        src = src.reshape(rows, m, n)
        exp_s = column_numpy(t, "exp_scales").reshape(rows, m * n // 16)
        exp_c = column_numpy(t, "exp_codes").reshape(rows, m, n)
        exp_t = column_numpy(t, "exp_tensor_scale")        # [rows] or [rows, m] (row scope)
        s, c, ts = backend.quantize_nvfp4(src, src_dtype=sd, profile=profile)
        s = s.reshape(rows, m * n // 16)
        ts = ts.reshape(exp_t.shape)
        s, c, ts = mutate("scales", s), mutate("codes", c), mutate("tensor_scale", ts)
        report("tensor_scale", _rows_bad(ts == exp_t))
        report("scales", _rows_bad(s == exp_s))
        # scale_only rows: codes of a poisoned block (E4M3 NaN scale 0x7F) are don't-care
        care = (check != "scale_only")[:, None, None] | \
            (exp_s != 0x7F).reshape(rows, m, n // 16).repeat(16, axis=2)
        report("codes", _rows_bad((c == exp_c) | ~care))
        if "exp_dequant" in t.column_names and rows:
            d = E.dequantize_nvfp4(torch.from_numpy(exp_s.astype(np.int64).reshape(rows, m, n // 16)),
                                   torch.from_numpy(exp_c.astype(np.int64)),
                                   torch.from_numpy(exp_t.astype(np.int64)), batch_dims=1)
            d = d.numpy().view(np.uint32).reshape(rows, -1)
            report("dequant", _rows_bad(_fp32_equal(d, column_numpy(t, "exp_dequant"), True)))
    elif op == "convert":
        src = column_numpy(t, "src_bits")
        c = mutate("codes", backend.convert(src, src_dtype=sd, fmt=fmt, profile=profile))
        report("codes", _rows_bad(c == column_numpy(t, "exp_codes")))
    elif op == "dequantize":
        sc = column_numpy(t, "scale")
        codes = column_numpy(t, "codes")
        d = mutate("bits", backend.dequantize(sc[:, None].copy(), codes, fmt=fmt,
                                              profile=profile))
        exp = column_numpy(t, "exp_dequant")
        nan_any = (check == "nan_any_payload")[:, None]
        report("dequant", _rows_bad(np.where(nan_any, _fp32_equal(d, exp, True),
                                             _fp32_equal(d, exp, False))))
    elif op == "pack":
        kinds = column_numpy(t, "kind")
        inputs = t.column("input").to_pylist()
        shapes = t.column("shape").to_pylist()
        bad = []
        for i, kind in enumerate(kinds):
            inp = np.asarray(inputs[i], dtype=np.uint8)
            if kind == "pack":
                got = [mutate("packed", backend.pack(inp, fmt=fmt))]
                want = [t.column("exp_packed")[i].as_py()]
            else:
                sc = inp.reshape(shapes[i])
                got = [mutate("packed", backend.scale_layout(sc, layout="cublas")),
                       backend.scale_layout(sc, layout="amd")]
                want = [t.column("exp_cublas")[i].as_py(), t.column("exp_amd")[i].as_py()]
            if any(list(np.asarray(g).reshape(-1)) != list(w) for g, w in zip(got, want)):
                bad.append(i)
        report("pack", bad)
    else:
        problems.append(f"{path.name}: unknown op {op!r}")
    return problems


@pytest.fixture(scope="module")
def backend():
    b = TorchBackend()
    b.check_available()
    return b


def _profile_of(rel: str) -> str:
    return Path(rel).name.split("__")[1]


@pytest.mark.parametrize("op", ["quantize_mx", "quantize_mx_tensor", "quantize_nvfp4", "convert",
                                "dequantize", "pack"])
def test_golden_files_bitexact(backend, op):
    """Every L0/L1 file of every claimed profile, bit for bit (one test per op keeps the
    collection small; the failure message lists every differing file)."""
    rels = [r for r in FILES if r.split("/")[1] == op and backend.claims(_profile_of(r))]
    assert rels, f"no golden files for {op}"
    problems = []
    for rel in rels:
        problems += check_file(backend, ROOT / rel)
    assert not problems, "\n".join(problems[:30])


def test_claims_cover_every_profile_with_goldens(backend):
    """The backend claims only known profiles, and every claimed profile has goldens."""
    assert set(backend.profiles) <= set(PROFILES)
    with_files = {_profile_of(r) for r in FILES}
    assert set(backend.profiles) <= with_files
    assert set(backend.ops) == {"quantize_mx", "quantize_mx_tensor", "quantize_nvfp4",
                                "convert", "dequantize", "pack", "quantize_nvfp4_sr"}


def test_planted_bug_is_caught(backend):
    """Flip one code / one scale bit / one fp32 bit: the comparison must report it."""
    qfile = ROOT / "L0/quantize_mx/mxfp4__ocp__float32.arrow"
    assert check_file(backend, qfile) == []

    def flip_code(name, a):
        if name == "codes":
            a = a.copy()
            a[0, 0] ^= 0x1
        return a

    def flip_scale(name, a):
        if name == "scales":
            a = a.copy()
            a.reshape(-1)[3] ^= 0x1
        return a

    assert any("codes" in p for p in check_file(backend, qfile, mutate=flip_code))
    assert any("scale" in p for p in check_file(backend, qfile, mutate=flip_scale))
    nfile = ROOT / "L0/quantize_nvfp4/nvfp4__te_nvfp4__float32.arrow"

    def flip_ts(name, a):
        if name == "tensor_scale":
            a = a.copy()
            a[0] ^= 0x1
        return a

    assert any("tensor_scale" in p for p in check_file(backend, nfile, mutate=flip_ts))
    dfile = ROOT / "L0/dequantize/mxfp8_e4m3__ocp__float32.arrow"

    def flip_bits(name, a):
        if name == "bits":
            a = a.copy()
            a[1, 2] ^= 0x1
        return a

    assert any("dequant" in p for p in check_file(backend, dfile, mutate=flip_bits))


def test_registry_finds_torch_backend():
    b = get_backend("torch")
    assert b.name == "torch" and b.device == "cpu"
    assert b.version == torch.__version__
    d = b.describe()
    assert d["name"] == "torch" and d["device"] == "cpu" and "runtime" in d


def test_our_backends_register_through_the_entry_point_group():
    """torch, triton and rocm are found as a third party's backend would be: by entry point."""
    from mxref.backends.registry import BUILTIN, _entry_points, list_backends
    eps = _entry_points()
    for name in ("torch", "triton", "rocm"):
        assert name not in BUILTIN and name in list_backends()
        assert eps[name].value.startswith("mxkernels.backends:")


def test_unavailable_device():
    from mxref.errors import BackendUnavailable
    with pytest.raises(BackendUnavailable):
        TorchBackend(device="cuda:99").check_available()
    with pytest.raises(BackendUnavailable):
        TorchBackend(device="no-such-device").check_available()


def test_bad_input_typed_errors(backend):
    src = np.zeros((2, 32), np.uint32)
    with pytest.raises(UnknownFormatError):
        backend.quantize_mx(src, src_dtype="float32", fmt="mxfp5", profile="ocp", axis=-1)
    with pytest.raises(UnknownProfileError):
        backend.quantize_mx(src, src_dtype="float32", fmt="mxfp4", profile="nope", axis=-1)
    with pytest.raises(UnknownProfileError):
        backend.quantize_nvfp4(src.reshape(1, 4, 16), src_dtype="float32", profile="nope")
    with pytest.raises(UnknownFormatError):
        backend.convert(src, src_dtype="float32", fmt="fp7", profile="ocp")
    with pytest.raises(ProfileConflictError):   # te_mxfp8 is defined for MXFP8 only
        backend.quantize_mx(src, src_dtype="float32", fmt="mxfp4", profile="te_mxfp8", axis=-1)
    with pytest.raises(AxisError):
        backend.quantize_mx(src, src_dtype="float32", fmt="mxfp4", profile="ocp", axis=2)
    with pytest.raises(AmbiguousInputError):
        E.quantize_mx(torch.zeros(32, dtype=torch.int32), None, "mxfp4")
    with pytest.raises(UnsupportedDtypeError):
        E.quantize_mx(torch.zeros(32, dtype=torch.float64), None, "mxfp4")
    with pytest.raises(UnsupportedDtypeError):
        E.quantize_mx(torch.zeros(32, dtype=torch.int32), "float8", "mxfp4")
    strict = PROFILES["ocp"].replace(name="strict", ragged="error")
    with pytest.raises(BlockSizeError):
        E.quantize_mx(torch.zeros(33), None, "mxfp4", strict)


def test_empty_tensors(backend):
    for shape, axis in (((0,), -1), ((0, 32), -1), ((3, 0), -1), ((0, 40), 0)):
        src = np.zeros(shape, np.uint32)
        s, c = backend.quantize_mx(src, src_dtype="float32", fmt="mxfp8_e4m3", profile="ocp",
                                   axis=axis)
        assert c.shape == shape and c.dtype == np.uint8 and s.dtype == np.uint8
        exp_s = list(shape)
        exp_s[axis] = -(-shape[axis] // 32)
        assert s.shape == tuple(exp_s)
    s, c, ts = backend.quantize_nvfp4(np.zeros((0, 4, 16), np.uint32), src_dtype="float32",
                                      profile="ocp")
    assert s.shape == (0, 4, 1) and c.shape == (0, 4, 16) and ts.shape == (0,)
    assert backend.convert(np.zeros(0, np.uint16), src_dtype="bfloat16", fmt="mxfp4",
                           profile="ocp").shape == (0,)
    assert backend.pack(np.zeros(0, np.uint8), fmt="mxfp4").shape == (0,)
    d = backend.dequantize(np.zeros((0, 1), np.uint8), np.zeros((0, 32), np.uint8),
                           fmt="mxfp4", profile="ocp")
    assert d.shape == (0, 32) and d.dtype == np.uint32


def test_float_tensor_api_matches_bits_api():
    """GPU users pass float tensors; the result equals the bit-pattern path."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 64, generator=g) * 3
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        xd = x.to(dt)
        bits = xd.view(torch.int32 if dt == torch.float32 else torch.int16)
        name = {torch.float32: "float32", torch.bfloat16: "bfloat16",
                torch.float16: "float16"}[dt]
        s1, c1 = E.quantize_mx(xd, None, "mxfp6_e3m2", "ocp", axis=-1)
        s2, c2 = E.quantize_mx(bits, name, "mxfp6_e3m2", "ocp", axis=-1)
        assert torch.equal(s1, s2) and torch.equal(c1, c2)
        w = E.to_f32_bits(xd)
        assert torch.equal(E.bits_to_float(w), xd.to(torch.float32))


def test_float64_rne_and_roundtrips():
    x = torch.tensor([1.0 + 2.0 ** -24, 1.0 + 3 * 2.0 ** -24, 1e-46, 3.5e38, float("nan"),
                      -float("inf"), -0.0], dtype=torch.float64)
    bits = E.to_f32_bits(x, from_float64="rne")
    assert torch.equal(E.bits_to_float(bits), x.to(torch.float32)) or \
        torch.equal(E.bits_to_float(bits)[:4], x[:4].to(torch.float32))
    codes = torch.randint(0, 256, (5, 64), generator=torch.Generator().manual_seed(1))
    for fmt in ("mxfp4", "mxfp6_e2m3", "mxfp8_e5m2"):
        mask = (1 << E._element_bits(fmt)) - 1
        c = codes & mask
        assert torch.equal(E.unpack(E.pack(c, fmt), fmt, 64), c.to(torch.uint8))


def test_stochastic_rounding_bounds():
    """Stochastic rounding picks one of the two neighbours, and r = 0 / r = 2^32-1 are the
    floor / ceiling (for a value strictly between grid points)."""
    p = PROFILES["ocp"].replace(name="sr", rounding="stochastic")
    x = torch.full((32,), 1.3)
    lo = E.convert(x, None, "mxfp4", p, rand_bits=torch.zeros(32, dtype=torch.int64))
    hi = E.convert(x, None, "mxfp4", p, rand_bits=torch.full((32,), 2 ** 32 - 1))
    assert (lo == 2).all() and (hi == 3).all()    # 1.0 and 1.5
    mid = E.quantize_mx(x, None, "mxfp4", p, generator=torch.Generator().manual_seed(0))[1]
    assert set(mid.tolist()) <= {6, 7}             # scale 2^-2: 5.2 -> 4 or 6


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm device")
def test_cuda_matches_goldens():
    b = TorchBackend(device="cuda")
    b.check_available()
    assert "gpu" in b.describe()
    problems = []
    for rel in FILES:
        if b.claims(_profile_of(rel)):
            problems += check_file(b, ROOT / rel)
    assert not problems, "\n".join(problems[:30])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm device")
def test_cuda_matches_cpu_on_random_bits():
    """Random fp32/bf16/fp16 bit patterns (every exponent, specials, subnormals): the device
    result equals the CPU result for every profile and format."""
    from mxref.errors import ProfileConflictError
    from mxref.formats import FORMATS
    g = torch.Generator().manual_seed(5)
    src32 = torch.randint(0, 2 ** 32, (512, 64), generator=g, dtype=torch.int64)
    src16 = torch.randint(0, 2 ** 16, (512, 64), generator=g, dtype=torch.int64)
    for pname, prof in PROFILES.items():
        for fname, f in FORMATS.items():
            try:
                prof.check_format(f)
            except ProfileConflictError:
                continue
            for sd, src in (("float32", src32), ("bfloat16", src16), ("float16", src16)):
                if f.is_nvfp4:
                    a = E.quantize_nvfp4(src.reshape(64, 8, 64), sd, prof, batch_dims=1)
                    b = E.quantize_nvfp4(src.reshape(64, 8, 64).cuda(), sd, prof, batch_dims=1)
                else:
                    a = E.quantize_mx(src, sd, fname, prof, axis=-1) + \
                        (E.convert(src, sd, fname, prof),)
                    b = E.quantize_mx(src.cuda(), sd, fname, prof, axis=-1) + \
                        (E.convert(src.cuda(), sd, fname, prof),)
                for x, y in zip(a, b):
                    assert torch.equal(x, y.cpu()), (pname, fname, sd)
    codes = torch.randint(0, 256, (256, 64), generator=g)
    scales = torch.randint(0, 256, (256, 2), generator=g)
    for fname in ("mxfp8_e4m3", "mxfp8_e5m2", "mxint8"):
        assert torch.equal(E.dequantize(scales, codes, fname),
                           E.dequantize(scales.cuda(), codes.cuda(), fname).cpu())


if __name__ == "__main__":   # python tests/test_torch_backend.py [profile...]: per-file report
    import sys
    import time
    devs = [a for a in sys.argv[1:] if a not in PROFILES]
    b = TorchBackend(devs[0] if devs else None)
    want = [a for a in sys.argv[1:] if a in PROFILES]
    t0 = time.time()
    n_bad = 0
    for rel in FILES:
        if want and _profile_of(rel) not in want:
            continue
        try:
            pr = check_file(b, ROOT / rel)
        except Exception as e:  # report and continue
            pr = [f"{rel}: {type(e).__name__}: {e}"]
        for line in pr:
            print(line)
        n_bad += bool(pr)
    print(f"{len(FILES)} files, {n_bad} with problems, {time.time() - t0:.1f}s")
