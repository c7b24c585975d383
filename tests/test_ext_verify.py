"""`mxref verify` on the ops built on the core: rotations, rotated quantization, GEMMs (bit-exact
and bound contracts), stochastic rounding, FP8 <-> MXFP4, re-blocking, decomposition.

The reference passes its own corpus; a planted bug in each op family is caught and named; a
GEMM backend with another fp32 order passes under the bound contract and fails bit-exactly.
"""
from __future__ import annotations

import numpy as np
import pytest

from mxref.ops import OP_NAMES, family_ops
from mxref.backends.numba_backend import NumbaBackend
from mxref.backends.planted import GemmZeroScale, RotateFloat64, SRStrict
from mxref.golden.store import column_numpy, read_golden
from mxref.quantize import dequantize
from mxref.verify import verify
from mxref.verify.compare import gemm_within
from mxref.verify.select import default_golden_root, select_files

EXT_OPS = tuple(op for op in OP_NAMES if op not in family_ops("quantize"))

ROOT = default_golden_root()


def _bad_classes(rep) -> dict:
    return {c: v["mismatched"] for c, v in rep.doc["summary"]["by_class"].items() if v["mismatched"]}


@pytest.mark.parametrize("op", EXT_OPS)
def test_numba_passes_every_new_op_at_level1(op):
    rep = verify(NumbaBackend(), ops=[op], levels=(1,))
    s = rep.doc["summary"]
    assert rep.exit_code == 0, rep.doc["mismatches"][:2] or rep.doc["errors"][:2]
    assert s["cases"] > 0 and s["passed_cases"] == s["cases"]
    assert {f["op"] for f in rep.doc["files"]} == {op}


def test_corpus_has_every_new_op():
    _, files = select_files(ROOT, levels=(0, 1), ops=list(EXT_OPS))
    assert {gf.op for gf in files} == set(EXT_OPS)
    gemm = {gf.fmt for gf in files if gf.op == "gemm" and gf.level == 1}
    assert "mxfp8_e4m3+mxfp4" in gemm and "nvfp4+nvfp4" in gemm and len(gemm) == 37


# ---- planted bugs --------------------------------------------------------------------------
@pytest.mark.parametrize("backend, op, must_name", [
    (GemmZeroScale, "gemm", {"G3"}),
    (RotateFloat64, "rotate", {"H2"}),
    (SRStrict, "quantize_mx_sr", {"SR4"}),
    (SRStrict, "quantize_nvfp4_sr", {"SR4"}),
])
def test_planted_bug_in_new_op_is_caught(backend, op, must_name):
    rep = verify(backend(), ops=[op], profiles=["ocp"], max_errors=3)
    bad = _bad_classes(rep)
    assert rep.exit_code == 1, rep.doc["summary"]
    assert must_name <= set(bad), bad
    assert rep.doc["summary"]["passed_cases"] > 0


@pytest.mark.parametrize("op", ["quantize_mx_sr", "quantize_nvfp4_sr"])
def test_sr_strict_only_fails_where_f_plus_r_is_exactly_2_32(op):
    rep = verify(SRStrict(), ops=[op], profiles=["ocp"])
    bad = _bad_classes(rep)
    assert set(bad) == {"SR4"}, bad       # Philox words, r = 0, r = 2^32 - 1 all agree


# ---- GEMM under the bound contract ---------------------------------------------------------
class _Float32Gemm(NumbaBackend):
    """Dequantize to fp32 and multiply with numpy float32 (BLAS order, not ours)."""

    name = "f32-gemm"
    profiles = ("ocp",)
    gemm_contract = "bound"
    drop_last_block = False

    def gemm(self, a_scales, a_codes, b_scales, b_codes, *, fmt_a, fmt_b, a_tensor_scale=None,
             b_tensor_scale=None):
        def deq(s, c, fmt, ts):
            if c.shape[1] == 0:
                return np.zeros(c.shape, np.float32)
            x = dequantize(codes=c, scales=s, fmt=fmt, axis=1,
                           tensor_scale=None if ts is None else np.uint32(ts).view(np.float32))
            if self.drop_last_block and c.shape[1] > 32:
                x = x.copy()
                x[:, (c.shape[1] - 1) // 32 * 32:] = 0
            return x
        a = deq(a_scales, a_codes, fmt_a, a_tensor_scale)
        b = deq(b_scales, b_codes, fmt_b, b_tensor_scale)
        with np.errstate(all="ignore"):
            y = (a[:, None, :] * b[None, :, :])[..., ::-1].cumsum(axis=-1, dtype=np.float32)
        y = y[..., -1] if a.shape[1] else np.zeros((a.shape[0], b.shape[0]), np.float32)
        return np.ascontiguousarray(y, np.float32).view(np.uint32)


def test_reversed_fp32_order_passes_the_bound_and_is_reported_as_bound():
    rep = verify(_Float32Gemm(), ops=["gemm"], formats=["mxfp4", "mxfp8_e4m3"])
    s = rep.doc["summary"]
    assert rep.exit_code == 0, rep.doc["mismatches"][:2]
    assert set(s["by_check"]) == {"bound"} and s["by_check"]["bound"]["passed"] == s["cases"]
    assert s["by_check"]["bound"]["ulp"]["max_ulp"] >= 0


def test_reversed_fp32_order_is_not_bit_exact():
    b = _Float32Gemm()
    b.gemm_contract = "block_sequential"
    rep = verify(b, ops=["gemm"], formats=["mxfp4", "mxfp8_e4m3"])
    assert rep.exit_code == 1 and set(rep.doc["summary"]["by_check"]) == {"bitexact"}


def test_dropping_the_ragged_last_block_fails_the_bound():
    b = _Float32Gemm()
    b.drop_last_block = True
    rep = verify(b, ops=["gemm"], formats=["mxfp4"], classes=["G8", "G1"])
    assert rep.exit_code == 1 and "G8" in _bad_classes(rep)


def test_gemm_within_decides_nan_inf_and_boundaries():
    f = lambda v: np.array(v, np.float32).view(np.uint32)  # noqa: E731
    exp = f([1.0, np.nan, 2.0, 4.0, 1.0, 3.0, np.nan])
    act = f([1.0 + 2 ** -23, np.nan, np.nan, 4.0 + 2 ** -21, 1.0 + 2 ** -22, np.nan, 3.0])
    bound = np.array([2.0 ** -23, 0.0, np.inf, 2.0 ** -22, 2.0 ** -23, 1.0, np.inf])
    ok, ulp = gemm_within(act, exp, bound)
    # exactly at the bound passes; an infinite bound (possible overflow) accepts anything,
    # NaN included; NaN where the exact result is finite fails; beyond the bound fails;
    # a finite result where the exact result is NaN fails whatever the bound
    assert ok.tolist() == [True, True, True, False, False, False, False]
    assert ulp[0] == 1.0


def test_gemm_golden_bounds_are_consistent():
    """exp_block_sequential lies within exp_bound of exp_exact on every row (the bound covers
    the block-sequential order too), on every file of level 1."""
    _, files = select_files(ROOT, levels=(1,), ops=["gemm"])
    for gf in files:
        t = read_golden(ROOT / gf.relpath)
        for r in range(t.num_rows):
            ex = np.array(t.column("exp_exact")[r].as_py(), np.uint32)
            bs = np.array(t.column("exp_block_sequential")[r].as_py(), np.uint32)
            bd = np.array(t.column("exp_bound")[r].as_py(), np.uint64).view(np.float64)
            ok, _ = gemm_within(bs, ex, bd)
            assert ok.all(), (gf.relpath, r, column_numpy(t, "class")[r])


def test_decomposition_identity_holds_bit_exactly_on_every_golden():
    """Every decompose row of L0 and L1: exp_scale + (exp_dead + exp_grid) == exp_total in
    float64 bits, and exp_total == denominator * (Q(x) - x) in exact rational arithmetic,
    with Q(x) from the core quantizer (itself held to the Fraction oracle)."""
    from fractions import Fraction

    import mxref
    from mxref.golden.suites.decompose import FLAG_BITS
    _, files = select_files(ROOT, levels=(0, 1), ops=["decompose"])
    assert len(files) >= 38
    checked = 0
    for gf in files:
        t = read_golden(ROOT / gf.relpath)
        comps = [column_numpy(t, c).view(np.float64) for c in ("exp_scale", "exp_dead",
                                                                "exp_grid", "exp_total")]
        s, d, g, tot = comps
        assert np.array_equal((s + (d + g)).view(np.uint64), tot.view(np.uint64)), gf.relpath
        src = column_numpy(t, "src_bits")
        den = column_numpy(t, "denominator")
        special = (column_numpy(t, "exp_flags") & FLAG_BITS["special"]) != 0
        for r in range(0, len(src), 7):                 # a sample of rows, every class
            x = (src[r].view(np.float32) if gf.src_dtype == "float32" else
                 (src[r].astype(np.uint32) << np.uint32(16)).view(np.float32))
            shape = (4, 16) if gf.fmt == "nvfp4" else (1, 32)
            mx = mxref.quantize(x.reshape(shape), gf.fmt, gf.profile)
            if gf.fmt == "nvfp4":      # exact value: e2m1 x e4m3 x tensor scale (no rounding)
                el, sf = mx.fmt.element, mx.fmt.scale
                sc = np.repeat(mx.scales, 16, axis=1).reshape(-1)
                codes = mx.codes.reshape(-1)

                def q(i, el=el, sf=sf, sc=sc, codes=codes, ts=Fraction(float(mx.tensor_scale))):
                    return Fraction(el.decode(int(codes[i]))) * Fraction(sf.decode(int(sc[i]))) * ts
            else:                      # power-of-two scales: the fp32 dequantization is exact
                deq = mx.dequantize().reshape(-1)

                def q(i, deq=deq):
                    return Fraction(float(deq[i]))
            for i in np.nonzero(~special[r])[0]:
                want = int(den[r]) * (q(i) - Fraction(float(x[i])))
                assert Fraction(float(tot[r, i])) == want, (gf.relpath, r, i)
                checked += 1
    assert checked > 10_000


# ---- every new runner can fail: one flipped bit in the backend's first output ----------------
def _corrupting(op):
    """The reference with the lowest bit of the first element of op's first output flipped."""
    method = op                       # the protocol method is named after the golden op

    def flip(a):
        a = np.array(a, copy=True)
        if a.size:
            a.reshape(-1)[0] ^= a.dtype.type(1)
        return a

    def wrapped(self, *args, **kw):
        out = getattr(NumbaBackend, method)(self, *args, **kw)
        return (flip(out[0]),) + tuple(out[1:]) if isinstance(out, tuple) else flip(out)
    return type(f"Corrupt_{op}", (NumbaBackend,), {"name": f"corrupt-{op}", method: wrapped})


@pytest.mark.parametrize("op", EXT_OPS)
def test_each_new_runner_catches_a_single_flipped_bit(op):
    assert set(EXT_OPS) == {"rotate", "quantize_rotated", "gemm", "rotated_gemm",
                            "quantize_mx_sr", "quantize_nvfp4_sr", "mxfp4_to_fp8",
                            "fp8_to_mxfp4", "reblock",
                            "decompose", "macroblock", "outlier_fallback", "quantize_4over6"}
    rep = verify(_corrupting(op)(), ops=[op], levels=(0,))
    s = rep.doc["summary"]
    assert rep.exit_code == 1 and s["mismatched_cases"] > 0, s


def test_a_format_the_corpus_names_can_be_selected():
    # the rotate op's files are format "hadamard", which is no MX format: `verify -f hadamard`
    # selects them (leaderboard run gpu needs it); a name neither mxref nor the corpus knows is
    # still refused
    from mxref.verify.select import SelectionError
    _, files = select_files(ROOT, levels=(0, 1), ops=["rotate", "quantize_mx"],
                            formats=["hadamard"])
    assert files and {(gf.op, gf.fmt) for gf in files} == {("rotate", "hadamard")}
    with pytest.raises(SelectionError, match="unknown format"):
        select_files(ROOT, levels=(0,), formats=["hadamard5"])
