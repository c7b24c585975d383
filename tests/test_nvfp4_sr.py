"""NVFP4 stochastic rounding end to end: the golden op ``quantize_nvfp4_sr``, its backends, and
the Triton kernel (mxkernels/triton_sr.py ``nvfp4_quantize_sr_kernel``).

Expected values are checked against tests/oracle.py (Fractions; the te / torchao op orders
written out there as their fp32 operation sequences), never against mxref alone: every row of
every new golden file, and the SR1 words against the oracle's own Philox. The torch backend
(mxkernels.torch_emu, written independently of the reference) passes the files too; the
planted ``>`` for ``>=`` bug fails exactly the f + r = 2^32 class (tests/test_ext_verify.py).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle as O  # noqa: E402

from mxref.golden.store import column_numpy, read_golden, schema_meta  # noqa: E402
from mxref.golden.suites_ext import NVFP4_SR_PROFILES, sr_profile  # noqa: E402
from mxref.verify import verify  # noqa: E402
from mxref.verify.engine import default_golden_root, select_files  # noqa: E402

ROOT = default_golden_root()
FILES = [gf.relpath for gf in select_files(ROOT, levels=(0, 1), ops=["quantize_nvfp4_sr"])[1]]


def _table(rel):
    t = read_golden(ROOT / rel)
    m = schema_meta(t)
    src = column_numpy(t, "src_bits").astype(np.uint32)
    if m["src_dtype"] == "bfloat16":
        src = src << 16                   # bf16 widens exactly: the high half of fp32
    return t, m, src


def _rows(a, r):
    return [[int(b) for b in a[r, i * 16:(i + 1) * 16]] for i in range(4)]


# =============================================================================================
# the golden files against the Fraction oracle
# =============================================================================================
def test_corpus_has_every_profile_dtype_and_level():
    got = {(Path(r).name, r.split("/")[0]) for r in FILES}
    want = {(f"nvfp4__{p}__{s}.arrow", f"L{lv}") for p in NVFP4_SR_PROFILES
            for s in ("float32", "bfloat16") for lv in (0, 1)}
    assert got == want


@pytest.mark.parametrize("rel", FILES)
def test_golden_rows_equal_the_oracle(rel):
    """Every row: tensor scale, E4M3 block scales and E2M1 codes from tests/oracle.py with the
    row's words; SR1 words are the oracle's Philox4x32-10 of (offset + i, 0, 0, 0) under key
    (seed_lo, seed_hi)."""
    t, m, src = _table(rel)
    knobs = sr_profile(m["profile"]).knobs()
    assert knobs["rounding"] == "stochastic"
    rb = column_numpy(t, "rbits")
    cls = column_numpy(t, "class")
    seed, off = column_numpy(t, "seed"), column_numpy(t, "offset")
    es, ec = column_numpy(t, "exp_scales"), column_numpy(t, "exp_codes")
    ets = column_numpy(t, "exp_tensor_scale")
    for r in range(src.shape[0]):
        tb, s, c = O.quantize_nvfp4_order(_rows(src, r), knobs, rbits=_rows(rb, r))
        assert tb == int(ets[r]), (rel, r)
        assert np.ravel(s).tolist() == es[r].tolist(), (rel, r)
        assert np.ravel(c).tolist() == ec[r].tolist(), (rel, r)
        if cls[r] == "SR1":
            key = (int(seed[r]) & 0xFFFFFFFF, int(seed[r]) >> 32)
            words = [O.philox4x32_10(((int(off[r]) + i) & 0xFFFFFFFF, 0, 0, 0), key)[0]
                     for i in range(64)]
            assert words == rb[r].tolist(), (rel, r)


def test_files_cover_the_nvfp4_edges():
    """The edge classes of the MX SR files (ties, r = 0 / 2^32 - 1 / f + r = 2^32, NaN/Inf
    blocks, -0) and NVFP4's own: E4M3 block scales subnormal, zero and saturated (448), and
    tensor scales subnormal, 2^-149 and near FLT_MAX / 2688."""
    seen = {}
    for rel in FILES:
        if not rel.startswith("L1/"):
            continue
        t, m, src = _table(rel)
        tags = {tg for row in column_numpy(t, "tags") for tg in row}
        es = column_numpy(t, "exp_scales")
        ts = column_numpy(t, "exp_tensor_scale")
        rb = column_numpy(t, "rbits")
        prof = m["profile"]
        seen.setdefault(prof, set()).update(
            {c for c in ("E2", "S5", "S6", "S7", "R1", "tensor_scale_extreme",
                         "one_block_dominates", "T_rounded_down") if c in tags})
        assert set(column_numpy(t, "class")) == {"SR1", "SR2", "SR3", "SR4"}
        assert (rb == 0).all(axis=1).any() and (rb == 0xFFFFFFFF).all(axis=1).any()
        assert ((src & 0x7FFFFFFF) > 0x7F800000).any() and ((src & 0x7FFFFFFF) == 0x7F800000).any()
        assert (src == 0x80000000).any()
        assert ((es > 0) & (es < 0x08)).any() or prof == "torchao_nvfp4"   # torchao clamps
        if prof == "ocp":              # T = 2^-149: amax / 2688 underflowed (fp32 sources)
            assert (es == 0).any() and (ts < 0x00800000).any()
            assert (ts == 1).any() or m["src_dtype"] == "bfloat16"
            assert (ts > 0x70000000).any() and (es == 0x7E).any()
        if prof == "te_nvfp4":           # an Inf block: S = satfinite(FLT_MAX) = 448
            assert (es == 0x7E).any()
    for prof, got in seen.items():
        assert got == {"E2", "S5", "S6", "S7", "R1", "tensor_scale_extreme",
                       "one_block_dominates", "T_rounded_down"}, prof


# =============================================================================================
# backends through mxref verify
# =============================================================================================
@pytest.mark.parametrize("name", ["numba", "torch"])
def test_backends_pass_the_files(name):
    if name == "torch":
        pytest.importorskip("torch")
    from mxref.backends.registry import get_backend
    rep = verify(get_backend(name), ops=["quantize_nvfp4_sr"], levels=(0, 1))
    s = rep.doc["summary"]
    assert rep.exit_code == 0, (rep.doc["mismatches"][:2], rep.doc["errors"][:2])
    assert s["files"] == 12 and s["cases"] == s["passed_cases"] > 1500
