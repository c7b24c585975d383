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

from mxref.backends.base import Unsupported  # noqa: E402
from mxref.golden.store import column_numpy, read_golden, schema_meta  # noqa: E402
from mxref.golden.suites.sr import NVFP4_SR_PROFILES, sr_profile  # noqa: E402
from mxref.verify import verify  # noqa: E402
from mxref.verify.select import default_golden_root, select_files  # noqa: E402

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


# =============================================================================================
# the Triton kernel (interpreter on CPU; compiled too where a CUDA device exists)
# =============================================================================================
def _triton_env(request):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from mxkernels.loader import load_kernels
    dev = request.param
    return load_kernels(dev == "cpu")["triton_sr"], dev


def _devices():
    try:
        import torch
        return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    except ImportError:
        return ["cpu"]


@pytest.fixture(scope="module", params=_devices())
def env(request):
    return _triton_env(request)


def _t(a, dev):
    import torch
    a = np.ascontiguousarray(a)
    a = a.view(np.int32) if a.dtype == np.uint32 else a.view(np.int16) if a.dtype == np.uint16 \
        else a
    return torch.from_numpy(a.copy()).to(dev)


def _check(mod, dev, x, prof, *, rbits=None, seed=None, offset=0, src_dtype=None):
    """The kernel on x [T, ..., C] equals mxref.quantize tensor by tensor (tensor t taking
    words offset + t * x[t].size of the stream, or rbits[t])."""
    import mxref
    kw = {"rbits": _t(rbits, dev)} if rbits is not None else {"seed": seed, "offset": offset}
    s, c, ts = mod.quantize_nvfp4_sr(_t(x, dev), prof, src_dtype=src_dtype, **kw)
    s, c, ts = s.cpu().numpy(), c.cpu().numpy(), ts.cpu().numpy()
    assert s.shape == x.shape[:-1] + (-(-x.shape[-1] // 16),) and c.shape == x.shape
    per = int(np.prod(x.shape[1:]))
    for t in range(x.shape[0]):
        ref = mxref.quantize(x[t], "nvfp4", sr_profile(prof), source_dtype=src_dtype,
                             rbits=None if rbits is None else rbits[t],
                             seed=seed, rng_offset=offset + t * per)
        np.testing.assert_array_equal(s[t], ref.scales)
        np.testing.assert_array_equal(c[t], ref.codes)
        assert ts[t].view(np.uint32) == np.float32(ref.tensor_scale).view(np.uint32)
    return s, c, ts


def _random_batch(rng, shape):
    """Tensors whose rows span many binades (E4M3 block scales from subnormal to 448, long
    significands of S T), with NaN, Inf, -0, fp32 subnormals and an all-zero tensor."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-12, 12, shape[:-1] + (1,)))
    x = x.astype(np.float32)
    x.reshape(-1, shape[-1])[1, 3] = np.nan
    x.reshape(-1, shape[-1])[2, 5] = -np.inf
    x.reshape(-1, shape[-1])[3, :16] = -0.0
    x.reshape(-1, shape[-1])[4, :7] = np.array([1, 2, 3, 0x7FFFFF, 5, 6, 7], np.uint32) \
        .view(np.float32)
    x[-1] = 0.0
    return x


@pytest.mark.parametrize("prof", NVFP4_SR_PROFILES)
def test_kernel_random_data_both_word_sources(env, prof):
    mod, dev = env
    rng = np.random.default_rng(sum(prof.encode()))
    x = _random_batch(rng, (3, 2, 5, 48))
    rb = rng.integers(0, 2**32, x.shape, dtype=np.uint64).astype(np.uint32)
    rb.reshape(-1)[::7] = 0
    rb.reshape(-1)[3::7] = 0xFFFFFFFF
    _check(mod, dev, x, prof, rbits=rb)
    s1, c1, _ = _check(mod, dev, x, prof, seed=2**40 + 99, offset=2**32 - 100)   # wraps 2^32
    # the seeded stream is exactly rbits = random_bits over x in C order
    import mxref
    words = mxref.random_bits(x.shape, 2**40 + 99, 2**32 - 100)
    s2, c2, _ = mod.quantize_nvfp4_sr(_t(x, dev), prof, rbits=_t(words, dev))
    np.testing.assert_array_equal(c1, c2.cpu().numpy())
    np.testing.assert_array_equal(s1, s2.cpu().numpy())


def test_kernel_bf16_source_ragged_and_empty(env):
    mod, dev = env
    rng = np.random.default_rng(5)
    x = _random_batch(rng, (2, 4, 40))                       # 40 = 16 + 16 + 8: ragged
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    rb = rng.integers(0, 2**32, x.shape, dtype=np.uint64).astype(np.uint32)
    _check(mod, dev, bits, "ocp", rbits=rb, src_dtype="bfloat16")
    _check(mod, dev, x, "te_nvfp4", seed=7)
    for shape in ((0, 4, 32), (2, 0, 32), (2, 3, 0)):
        e = np.zeros(shape, np.float32)
        _check(mod, dev, e, "ocp", seed=1)
        _check(mod, dev, e, "torchao_nvfp4", rbits=np.zeros(shape, np.uint32))


def test_kernel_grid_values_and_word_extremes(env):
    """Hand-computed codes (ocp, T = fl(2688 / 2688) = 1): grid values never move whatever the
    word; exact ties (f = 2^31) round up from r = 2^31 and down at 2^31 - 1; r = 0 is the
    floor and r = 2^32 - 1 rounds every off-grid value up."""
    mod, dev = env
    grid = [6, 0, .5, 1, 1.5, 2, 3, 4, -.5, -1, -1.5, -2, -3, -4, -6, -0.0]   # S = 1 (0x38)
    ties = [2688, 560, 112, 1120, -560] + [0] * 11                # S = 448 (0x7E): 1.25, ...
    x = np.array([[grid, ties]], np.float32)                      # [1, 2, 16]
    grid_codes = [7, 0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 13, 14, 15, 8]
    down, up = [7, 2, 0, 4, 10] + [0] * 11, [7, 3, 1, 5, 11] + [0] * 11
    for r, want in ((0, down), (0xFFFFFFFF, up), (2**31, up), (2**31 - 1, down)):
        s, c, ts = _check(mod, dev, x, "ocp", rbits=np.full(x.shape, r, np.uint32))
        assert ts[0] == 1.0 and s[0, :, 0].tolist() == [0x38, 0x7E]
        assert c[0, 0].tolist() == grid_codes and c[0, 1].tolist() == want, (r, c[0].tolist())


def test_kernel_bad_input_is_typed(env):
    import torch
    from mxref.errors import ProfileConflictError, ShapeError
    mod, dev = env
    x = torch.zeros(2, 4, 32, device=dev)
    with pytest.raises(mod.SRWordsError, match="exactly one") as e:
        mod.quantize_nvfp4_sr(x, "ocp")
    assert isinstance(e.value, ShapeError) and isinstance(e.value, mod.KernelUnsupported)
    with pytest.raises(mod.SRWordsError, match="exactly one"):
        mod.quantize_nvfp4_sr(x, seed=1, rbits=torch.zeros(2, 4, 32, dtype=torch.int32,
                                                               device=dev))
    with pytest.raises(mod.SRWordsError, match="shape"):
        mod.quantize_nvfp4_sr(x, rbits=torch.zeros(2, 4, 31, dtype=torch.int32, device=dev))
    with pytest.raises(mod.SRWordsError, match="uint32"):
        mod.quantize_nvfp4_sr(x, rbits=torch.zeros(2, 4, 32, dtype=torch.int64, device=dev))
    with pytest.raises(mod.SRWordsError, match="torch tensor"):
        mod.quantize_nvfp4_sr(x, rbits=np.zeros((2, 4, 32), np.uint32))
    for prof in ("rceil", "te_mxfp8", "microxcaling"):       # MX profiles: not for nvfp4
        with pytest.raises(mod.SRProfileError) as e:
            mod.quantize_nvfp4_sr(x, prof, seed=1)
        assert isinstance(e.value, ProfileConflictError)
    with pytest.raises(mod.SRProfileError, match="quantize_nvfp4_sr"):
        mod.quantize_sr(x, "nvfp4", seed=1)
    with pytest.raises(mod.KernelUnsupported, match="T, ..., C"):
        mod.quantize_nvfp4_sr(torch.zeros(32, device=dev), seed=1)
    with pytest.raises(mod.KernelUnsupported, match="float32"):
        mod.quantize_nvfp4_sr(x.double(), seed=1)


def test_triton_backend_runs_the_golden_files(monkeypatch):
    """What `TRITON_INTERPRET=1 mxref verify --backend triton --ops quantize_nvfp4_sr` runs,
    L0 (every profile and dtype) and the L1 ocp float32 file; SR1 rows also check the
    kernel's Philox stream against the stored words."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from mxkernels.backends import TritonBackend
    if "cuda" in _devices():
        b = TritonBackend()
    else:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        b = TritonBackend()
        monkeypatch.delenv("TRITON_INTERPRET")
    assert "quantize_nvfp4_sr" in b.ops
    with pytest.raises(Unsupported, match="multiple of 16"):
        b.quantize_nvfp4_sr(np.zeros((1, 2, 8), np.uint32), np.zeros((1, 2, 8), np.uint32),
                            src_dtype="float32", profile="ocp")
    for levels, kw in (((0,), {}), ((1,), {"profiles": ["ocp"], "src_dtypes": ["float32"]})):
        rep = verify(b, ops=["quantize_nvfp4_sr"], levels=levels, **kw)
        s = rep.doc["summary"]
        assert rep.exit_code == 0, (rep.doc["mismatches"][:2], rep.doc["errors"][:2])
        assert s["cases"] == s["passed_cases"] > 0


def test_planted_strict_compare_fails_only_sr4(tmp_path):
    """The planted `>` for `>=` in triton_sr's SR compare (tests/test_kernels_sr.py) also
    breaks the NVFP4 kernel, and only on the f + r = 2^32 rows."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from test_kernels_sr import _planted_copy

    from mxref.backends.base import Backend
    bad = _planted_copy(tmp_path, ">= _TWO32", "> _TWO32")

    class Planted(Backend):
        name, version, device = "planted-nvfp4-sr", "0", "cpu"
        ops = frozenset({"quantize_nvfp4_sr"})
        profiles = NVFP4_SR_PROFILES

        def quantize_nvfp4_sr(self, src, rbits, *, src_dtype, profile):
            s, c, ts = bad.quantize_nvfp4_sr(_t(src, "cpu"), profile, rbits=_t(rbits, "cpu"),
                                             src_dtype=src_dtype)
            return s.numpy(), c.numpy(), ts.numpy().view(np.uint32)

    rep = verify(Planted(), ops=["quantize_nvfp4_sr"], levels=(0,), src_dtypes=["float32"])
    assert rep.exit_code == 1
    bad_cls = {c for c, v in rep.doc["summary"]["by_class"].items() if v["mismatched"]}
    assert bad_cls == {"SR4"}, bad_cls


def test_torch_op_and_fake():
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    import mxkernels.ops as mk
    import mxref
    rng = np.random.default_rng(9)
    x = torch.from_numpy(_random_batch(rng, (2, 3, 32))).to(torch.bfloat16)
    s, c, ts = torch.ops.mxkernels.quantize_nvfp4_sr(x, "te_nvfp4", 11, 3)
    for t in range(2):
        ref = mxref.quantize(x[t], "nvfp4", sr_profile("te_nvfp4"), seed=11,
                             rng_offset=3 + t * 96)
        np.testing.assert_array_equal(s[t].numpy(), ref.scales)
        np.testing.assert_array_equal(c[t].numpy(), ref.codes)
        assert ts[t].item() == np.float32(ref.tensor_scale)
    assert mk.quantize_nvfp4_sr is not None
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        v = torch.empty(3, 8, 40, dtype=torch.bfloat16)
        s, c, ts = torch.ops.mxkernels.quantize_nvfp4_sr(v, "ocp", 1, 0)
        assert tuple(s.shape) == (3, 8, 3) and tuple(c.shape) == (3, 8, 40)
        assert tuple(ts.shape) == (3,) and ts.dtype == torch.float32
