"""triton_train_nvfp4.qdq (NVFP4 fake quantization per orientation: tensor amax of the
(rotated) orientation, E4M3 block scales, E2M1 codes by RNE or SR) against mxref: mxref.rotate,
mxref.quantize(..., "nvfp4", profile, seed=...) and the e2m1 x e4m3 values of its codes.
Runs through the Triton interpreter on CPU (and compiled on a GPU when there is one); the data
covers NaN and Inf elements, -0, fp32 subnormals (whole blocks, and in normal blocks, where
the element products fall below 2^-126 or underflow to 0), all-zero and tiny blocks, the
all-zero tensor (T = 1), E2M1 ties, and a tensor whose amax is Inf."""
import zlib

import numpy as np
import pytest
import torch

import mxref
from mxref.rotate import sign_vector

_DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(scope="module", params=_DEVICES)
def dev(request):
    return torch.device(request.param)


@pytest.fixture(scope="module")
def tn(dev):
    from mxkernels.ops import kernels
    return kernels(dev).modules["triton_train_nvfp4"]


def _edge(C: int, rng, with_inf=False) -> np.ndarray:
    """16 hand-made rows, C wide, then 48 random rows over three magnitudes (fp32)."""
    b = rng.standard_normal((16, C)).astype(np.float32)
    b[0, 3] = np.nan                                        # NaN element
    b[1, :] = 0.0
    b[1, 5] = -0.0                                          # all-zero blocks with -0
    b[2, :] = np.float32(2.0 ** -140) * np.sign(b[2, :])    # fp32 subnormals
    b[3, :] *= np.float32(2.0 ** -100)                      # tiny blocks: E4M3 scale 0 / sub
    b[4, :16] = 6.0
    b[4, 1:16:2] = 5.0                                      # E2M1 ties at scale 1 (amax 6)
    b[5, ::3] = -0.0
    b[6, :] = np.float32(np.nextafter(np.float32(8.0), np.float32(0)))
    b[7, :] *= np.float32(1e4)
    b[10, :] *= np.float32(2.0 ** -135)                     # subnormal x in normal blocks:
    b[10, ::8] = 1.0                                        # products below 2^-126, some 0
    b[11, :] *= np.float32(2.0 ** -149)                     # and on the smallest subnormals
    b[11, ::16] = np.float32(2.0 ** -20)
    if with_inf:
        b[8, 40] = np.inf
        b[9, 7] = -np.inf
    rest = (rng.standard_normal((48, C)) * rng.choice([1e-3, 1.0, 50.0], (48, 1)))
    return np.concatenate([b, rest.astype(np.float32)])


def _host_signs(spec, n):
    if spec is None:
        return "none"
    if spec[0] == "mask":
        return np.array([-1 if (spec[1] >> j) & 1 else 1 for j in range(n)], dtype=np.int8)
    return sign_vector("random", n, seed=spec[1], step=spec[2], tensor_id=spec[3])


def _ref(x: np.ndarray, profile: str, n: int, signs, seed, words: int = 1):
    """mxref along the last axis: (scales, codes, T, e2m1 x e4m3 values in fp32); SR with
    the seed's stream of ``words`` words per Philox counter."""
    if n:
        x = mxref.rotate(x, n, axis=-1, signs=signs)
    prof = mxref.get_profile(profile)
    if seed is not None:
        prof = prof.replace(name=f"{profile}+sr", rounding="stochastic")
    q = mxref.quantize(x, "nvfp4", prof, axis=-1, seed=seed,
                       **({"rng_words": words} if seed is not None else {}))
    unit = mxref.dequantize(codes=q.codes, scales=q.scales, fmt="nvfp4", axis=-1,
                            tensor_scale=np.float32(1.0))
    return q.scales, q.codes, np.float32(q.tensor_scale), np.asarray(unit, dtype=np.float32)


def _same(got: torch.Tensor, want: np.ndarray) -> bool:
    """Bit equality (bf16 or fp32), every NaN equal to every NaN."""
    w = torch.from_numpy(want)
    if got.dtype == torch.bfloat16:
        w = w.to(torch.bfloat16)
    nan = torch.isnan(got.float())
    if not torch.equal(nan, torch.isnan(w.float())):
        return False
    iv = torch.int16 if got.dtype == torch.bfloat16 else torch.int32
    return torch.equal(got[~nan].view(iv), w[~nan].view(iv))


CASES = [(0, None, None), (0, None, 77), (16, ("mask", 0b1011000011110101), None),
         (16, ("random", 12345, 7, 9), 2**40 + 3), (32, None, 11)]


@pytest.mark.parametrize("profile,src", [("te_nvfp4", torch.float32),
                                         ("te_nvfp4", torch.bfloat16),
                                         ("ocp", torch.float32),
                                         ("torchao_nvfp4", torch.float32),
                                         ("triton_kernels_nvfp4", torch.float32)])
@pytest.mark.parametrize("n,signs,seed", CASES)
def test_qdq_matches_mxref_both_orientations(tn, dev, profile, src, n, signs, seed):
    """Rows unrotated, columns rotated (the Wgrad operand of nvfp4-te), each its own amax and
    tensor scale; SR on both with different seeds."""
    rng = np.random.default_rng(zlib.crc32(repr((profile, n, seed)).encode()))
    x = _edge(96, rng)
    xt = torch.from_numpy(x).to(src)
    xf = xt.float().numpy()
    cseed = None if seed is None else seed + 1
    rv, cv, q, ts = tn.qdq(xt.to(dev), profile, rows=True, cols=True, with_codes=True,
                           rot_n=n, row_rot=False, col_rot=n > 0, col_signs=signs,
                           row_sr=seed, col_sr=cseed,
                           out_dtype=torch.float32 if src == torch.float32 else torch.bfloat16)
    q = [t.cpu() for t in q]
    rs, rc, rt, rvals = _ref(xf, profile, 0, None, seed)
    cs, cc, ct, cvals = _ref(np.ascontiguousarray(xf.T), profile, n, _host_signs(signs, n),
                             cseed)
    assert np.array_equal(q[0].numpy(), rs) and np.array_equal(q[1].numpy(), rc)
    assert np.array_equal(q[2].numpy().T, cs) and np.array_equal(q[3].numpy().T, cc)
    assert ts.cpu().numpy().view(np.uint32).tolist() == [np.float32(rt).view(np.uint32),
                                                         np.float32(ct).view(np.uint32)]
    assert _same(rv.cpu(), rvals) and _same(cv.cpu(), np.ascontiguousarray(cvals.T))
    # without codes (the training launch) the values are the same
    rv2, cv2, q2, ts2 = tn.qdq(xt.to(dev), profile, rows=True, cols=True, rot_n=n,
                               row_rot=False, col_rot=n > 0, col_signs=signs, row_sr=seed,
                               col_sr=cseed, out_dtype=rv.dtype)
    assert q2 is None and torch.equal(ts2, ts)
    assert _same(rv2.cpu(), rvals) and _same(cv2.cpu(), np.ascontiguousarray(cvals.T))


@pytest.fixture(params=[None, (16, 128, 4)], ids=["tile-default", "tile-16x128"])
def tile(tn, request):
    """The launcher's tile, then the GPU's 16-row tile (te: columns blocked in place)."""
    tn.TILE[0] = request.param
    yield request.param
    tn.TILE[0] = None


@pytest.mark.parametrize("profile", ["te_nvfp4", "ocp"])
def test_an_infinite_amax_and_the_zero_tensor(tn, dev, profile, tile):
    """An Inf element: te keeps Inf in the amax (S_enc = 2688 / Inf = 0 -> 1), the exact order
    drops it; an all-zero tensor has T = 1 and zero values (an input -0 as the profile
    says)."""
    rng = np.random.default_rng(3)
    x = _edge(64, rng, with_inf=True)
    rv, cv, q, ts = tn.qdq(torch.from_numpy(x).to(dev), profile, rows=True, cols=True,
                           with_codes=True, out_dtype=torch.float32)
    rs, rc, rt, rvals = _ref(x, profile, 0, None, None)
    cs, cc, ct, cvals = _ref(np.ascontiguousarray(x.T), profile, 0, None, None)
    assert np.array_equal(q[1].cpu().numpy(), rc) and np.array_equal(q[0].cpu().numpy(), rs)
    assert np.array_equal(q[3].cpu().numpy().T, cc) and np.array_equal(q[2].cpu().numpy().T, cs)
    assert float(ts[0]) == float(rt) and _same(rv.cpu(), rvals)
    assert float(ts[1]) == float(ct) and _same(cv.cpu(), np.ascontiguousarray(cvals.T))
    z = np.zeros((32, 32), np.float32)
    z[0, 0] = -0.0
    rv, cv, q, ts = tn.qdq(torch.from_numpy(z).to(dev), profile, rows=True, cols=True,
                           out_dtype=torch.float32)
    assert ts.cpu().tolist() == [1.0, 1.0]
    zs, zc, zt, zvals = _ref(z, profile, 0, None, None)
    assert zt == 1.0 and _same(rv.cpu(), zvals) and (rv.cpu()[1:] == 0).all()
    # te turns an input -0 into +0, the exact order (ocp) keeps it
    assert int(rv.cpu().view(torch.int32)[0, 0]) == (0 if profile == "te_nvfp4" else -2**31)
    # a tiny tensor (amax ~ 2^-125: T below 2^-117, te's blocks take the integer branch)
    t = (_edge(64, rng) * np.float32(2.0 ** -140)).astype(np.float32)
    t[np.isnan(t)] = 0
    rv, cv, q, ts = tn.qdq(torch.from_numpy(t).to(dev), profile, rows=True, cols=True,
                           rot_n=16, row_rot=False, with_codes=True, out_dtype=torch.float32)
    rs, rc, rt, rvals = _ref(t, profile, 0, None, None)
    cs, cc, ct, cvals = _ref(np.ascontiguousarray(t.T), profile, 16, "none", None)
    assert np.array_equal(q[1].cpu().numpy(), rc) and np.array_equal(q[0].cpu().numpy(), rs)
    assert np.array_equal(q[3].cpu().numpy().T, cc) and np.array_equal(q[2].cpu().numpy().T, cs)
    assert float(ts[0]) == float(rt) and _same(rv.cpu(), rvals)
    assert float(ts[1]) == float(ct) and _same(cv.cpu(), np.ascontiguousarray(cvals.T))
    if profile == "te_nvfp4":
        assert float(rt) < 2.0 ** -117


def test_a_column_stream_read_like_the_rows_changes_the_codes(tn, dev):
    """Planted-bug guard for the SR word order: the columns take the words of x^T; the rows'
    stream read down the columns gives other codes, so the test above can tell them apart."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    _, _, q, _ = tn.qdq(torch.from_numpy(x).to(dev), "te_nvfp4", rows=False, cols=True,
                        with_codes=True, col_sr=9)
    _, right, _, _ = _ref(np.ascontiguousarray(x.T), "te_nvfp4", 0, None, 9)
    assert np.array_equal(q[3].cpu().numpy().T, right)
    from mxref.quantize import random_bits
    prof = mxref.get_profile("te_nvfp4").replace(name="sr", rounding="stochastic")
    mis = mxref.quantize(np.ascontiguousarray(x.T), "nvfp4", prof, axis=-1,
                         rbits=np.ascontiguousarray(random_bits(x.shape, 9, 0).T)).codes
    assert not np.array_equal(mis, right)


def test_device_step_mode_equals_host_seeds_and_signs(tn, dev):
    from mxkernels.training.quant import mix_seed, mix_state
    rng = np.random.default_rng(8)
    x = torch.from_numpy(rng.standard_normal((64, 96)).astype(np.float32)).to(dev)
    seed, layer, step = 2**62 + 11, 5, 2**33 + 9
    host = tn.qdq(x, "te_nvfp4", rows=True, cols=True, with_codes=True, rot_n=16,
                  row_rot=False, col_signs=("random", seed, step % 2**32, 23),
                  row_sr=mix_seed(seed, layer, step, 1, 0),
                  col_sr=mix_seed(seed, layer, step, 2, 0))
    st = torch.tensor([step], dtype=torch.int64, device=dev)
    devq = tn.qdq(x, "te_nvfp4", rows=True, cols=True, with_codes=True, rot_n=16,
                  row_rot=False, col_signs=("random", seed, None, 23),
                  row_sr=("mix", mix_state(seed, layer), 1, 0),
                  col_sr=("mix", mix_state(seed, layer), 2, 0), step=st)
    for a, b in zip(host[2], devq[2]):
        assert torch.equal(a.cpu(), b.cpu())
    assert torch.equal(host[3].cpu(), devq[3].cpu())
    st.fill_(step + 1)
    other = tn.qdq(x, "te_nvfp4", rows=True, cols=True, with_codes=True, rot_n=16,
                   row_rot=False, col_signs=("random", seed, None, 23),
                   row_sr=("mix", mix_state(seed, layer), 1, 0),
                   col_sr=("mix", mix_state(seed, layer), 2, 0), step=st)
    assert not torch.equal(other[2][3].cpu(), host[2][3].cpu())


@pytest.mark.parametrize("shape,kw,says", [
    ((40, 48), {"rows": True}, "40 rows|multiple of 16"),
    ((48, 40), {"rows": True}, "40 columns is not a multiple of 16"),
    ((48, 40), {"rows": False, "cols": True}, None),
    ((64, 64), {"rot_n": 64}, "rot_n=64"),
    ((64, 48), {"rot_n": 32}, "not a multiple"),
    ((64, 64), {"rows": False, "cols": False}, "rows, cols or both"),
    ((64, 64), {"row_sr": 1.5}, "SR seed"),
    ((64, 64), {"out_dtype": torch.float16}, "out_dtype")])
def test_bad_arguments_are_typed_errors(tn, shape, kw, says):
    x = torch.zeros(shape)
    if says is None:                      # 40 columns are fine when only the columns block
        tn.qdq(x, "te_nvfp4", **kw)
        return
    if shape == (40, 48):
        kw = {"rows": False, "cols": True}
        says = "40 rows is not a multiple of 16"
    with pytest.raises(tn.KernelUnsupported, match=says):
        tn.qdq(x, "te_nvfp4", **kw)


@pytest.mark.parametrize("profile", ["te_nvfp4_row", "te_nvfp4_2d", "dsv4"])
def test_unsupported_profiles_are_refused(tn, profile):
    assert not tn.supports(profile)
    with pytest.raises(Exception, match="profile|nvfp4|format"):
        tn.qdq(torch.zeros(64, 64), profile)


def test_empty_tensor_gives_empty_outputs_and_unit_scales(tn):
    rv, cv, q, ts = tn.qdq(torch.zeros(0, 64), "te_nvfp4", rows=True, cols=True,
                           with_codes=True)
    assert rv.shape == (0, 64) and q[1].shape == (0, 64) and ts.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scale_cast_is_the_mul_then_the_cast(tn, dev, dtype):
    """The NVFP4 GEMM epilogue in one pass equals (x * alpha).to(dtype) bit for bit (NaN as
    NaN), with values that overflow, round to bf16 ties, -0 and Inf."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(33, 517, generator=g) * 1e3
    x[0, :6] = torch.tensor([float("nan"), float("inf"), -0.0, 3e38, -3e38, 1.0 + 2**-8])
    a = torch.tensor([1.7e-3 if dtype == torch.float32 else 2.0])
    got = tn.scale_cast(x.to(dev), a.to(dev), dtype).cpu()
    want = (x * a[0]).to(dtype)
    nan = torch.isnan(want)
    iv = torch.int16 if dtype == torch.bfloat16 else torch.int32
    assert torch.equal(torch.isnan(got), nan)
    assert torch.equal(got[~nan].view(iv), want[~nan].view(iv))
    with pytest.raises(tn.KernelUnsupported, match="alpha"):
        tn.scale_cast(x.to(dev), torch.ones(2, device=dev), dtype)


@pytest.mark.parametrize("profile", ["te_nvfp4"])
def test_te_products_on_the_underflow_tie(tn, dev, profile):
    """TE's element product fl(x * inv) exactly at 2^-150 (a tie: IEEE gives 0, so -x gives
    an exact -0, which te turns into +0) and just above it (2^-149: a signed zero code that
    keeps its sign): tensor amax 2688 (T = 1), a block of amax 12 (S = 2, inv = 0.5), subnormal
    elements 2^-149 and 3 2^-149 of both signs."""
    x = np.zeros((16, 32), np.float32)
    x[0, 0] = 2688.0
    tiny = np.float32(2.0 ** -149)
    x[1, :16] = [12.0, tiny, -tiny, 3 * tiny, -3 * tiny, 2 * tiny, -2 * tiny, 5 * tiny,
                 -5 * tiny, 0.0, -0.0, 1.0, -1.0, 6.0, -6.0, 2.5]
    rv, cv, q, ts = tn.qdq(torch.from_numpy(x).to(dev), profile, rows=True, cols=True,
                           with_codes=True, out_dtype=torch.float32)
    rs, rc, rt, rvals = _ref(x, profile, 0, None, None)
    assert float(rt) == 1.0 and rs[1, 0] == 0x40           # E4M3 2.0: inv = 0.5
    assert np.array_equal(q[1].cpu().numpy(), rc) and np.array_equal(q[0].cpu().numpy(), rs)
    assert _same(rv.cpu(), rvals)
    # the tie gives +0 for -2^-149; -3 2^-149 keeps its sign as code 8 (-0)
    assert rc[1, 2] == 0 and rc[1, 4] == 8


@pytest.mark.parametrize("words", [1, 4])
@pytest.mark.parametrize("tile", [None, (16, 128, 4), (16, 64, 1)])
def test_the_gpu_default_tiles_give_the_same_bits(tn, dev, tile, words):
    """The launcher's tile and its GPU tiles (16 x 128 with SR, 16 x 64 without: one block row
    of 16 per program down the columns) against mxref, SR with one or four words per Philox
    evaluation (words=4: word i mod 4 of counter i div 4, per operand) and the RHT16 columns
    included; the two streams give different codes (the check can fail)."""
    rng = np.random.default_rng(9)
    x = _edge(96, rng)
    tn.TILE[0] = tile
    try:
        rv, cv, q, ts = tn.qdq(torch.from_numpy(x).to(dev), "te_nvfp4", rows=True, cols=True,
                               with_codes=True, rot_n=16, row_rot=False,
                               col_signs=("mask", 0xA5F0), row_sr=3, col_sr=4,
                               sr_words=words, out_dtype=torch.float32)
    finally:
        tn.TILE[0] = None
    rs, rc, rt, rvals = _ref(x, "te_nvfp4", 0, None, 3, words)
    cs, cc, ct, cvals = _ref(np.ascontiguousarray(x.T), "te_nvfp4", 16,
                             _host_signs(("mask", 0xA5F0), 16), 4, words)
    assert np.array_equal(q[1].cpu().numpy(), rc) and np.array_equal(q[0].cpu().numpy(), rs)
    assert np.array_equal(q[3].cpu().numpy().T, cc) and np.array_equal(q[2].cpu().numpy().T, cs)
    assert _same(rv.cpu(), rvals) and _same(cv.cpu(), np.ascontiguousarray(cvals.T))
    _, other, _, _ = _ref(x, "te_nvfp4", 0, None, 3, 5 - words)
    assert not np.array_equal(other, rc)


@pytest.mark.parametrize("where", ["last", "middle"])
def test_the_tensor_scale_waits_for_every_tile(tn, dev, where):
    """The tensor constants come from the last amax program to finish: a tensor of 8 tiles
    whose amax (rows: plain; columns: after the RHT16) sits in the last or a middle tile
    gives mxref's T for both orientations, and the values that follow from it."""
    rng = np.random.default_rng(21)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    r, c = (63, 250) if where == "last" else (37, 130)
    x[r, c] = np.float32(3.0e4)
    tn.TILE[0] = (16, 128, 4)
    try:
        rv, cv, q, ts = tn.qdq(torch.from_numpy(x).to(dev), "te_nvfp4", rows=True, cols=True,
                               rot_n=16, row_rot=False, col_signs=("mask", 0x0F0F),
                               out_dtype=torch.float32)
    finally:
        tn.TILE[0] = None
    _, _, rt, rvals = _ref(x, "te_nvfp4", 0, None, None)
    _, _, ct, cvals = _ref(np.ascontiguousarray(x.T), "te_nvfp4", 16,
                           _host_signs(("mask", 0x0F0F), 16), None)
    assert ts.cpu().numpy().view(np.uint32).tolist() == [np.float32(rt).view(np.uint32),
                                                         np.float32(ct).view(np.uint32)]
    assert _same(rv.cpu(), rvals) and _same(cv.cpu(), np.ascontiguousarray(cvals.T))


def test_the_amax_pass_on_its_own_tile(tn, dev):
    """On a GPU the amax pass reads with a larger tile than the qdq kernel (32 x 256 against
    16 x 64): the rotated orientations' amaxes, hence T and the values, are mxref's
    (random-sign RHT16 on the columns, SR on both)."""
    rng = np.random.default_rng(5)
    x = _edge(512, rng)[:, :320]
    signs = ("random", 4321, 3, 1)
    tn.TILE[0], tn.AMAX_TILE[0] = (16, 64, 1), (32, 256)
    try:
        rv, cv, q, ts = tn.qdq(torch.from_numpy(x).to(dev), "te_nvfp4", rows=True, cols=True,
                               rot_n=16, row_rot=False, col_signs=signs, row_sr=8, col_sr=9,
                               with_codes=True, out_dtype=torch.float32)
    finally:
        tn.TILE[0], tn.AMAX_TILE[0] = None, None
    rs, rc, rt, rvals = _ref(x, "te_nvfp4", 0, None, 8)
    cs, cc, ct, cvals = _ref(np.ascontiguousarray(x.T), "te_nvfp4", 16, _host_signs(signs, 16),
                             9)
    assert ts.cpu().numpy().view(np.uint32).tolist() == [np.float32(rt).view(np.uint32),
                                                         np.float32(ct).view(np.uint32)]
    assert np.array_equal(q[3].cpu().numpy().T, cc) and np.array_equal(q[2].cpu().numpy().T, cs)
    assert _same(rv.cpu(), rvals) and _same(cv.cpu(), np.ascontiguousarray(cvals.T))


@pytest.mark.parametrize("profile", ["te_nvfp4", "ocp", "torchao_nvfp4",
                                     "triton_kernels_nvfp4"])
@pytest.mark.parametrize("src", [torch.float32, torch.bfloat16])
def test_one_tensor_nvfp4_quantize_takes_the_training_launch(tn, dev, profile, src):
    """triton_quant.nvfp4_quantize of one [1, R, C] tensor (C a multiple of 16) goes through
    nvfp4_quantize_rows (the launch is seen) and gives mxref's scales, codes and T; from bit
    patterns with src_dtype too. Two tensors, or a ragged C, keep the block kernels."""
    from mxkernels.ops import kernels
    ks = kernels(dev)
    tq = ks.modules["triton_quant"]
    rng = np.random.default_rng(31)
    x = torch.from_numpy(_edge(96, rng)).to(src)
    want = mxref.quantize(x.float().numpy(), "nvfp4", profile, axis=-1)
    seen = []
    real = tq.NVFP4_ROWS[0]
    assert real is tn.nvfp4_quantize_rows
    tq.NVFP4_ROWS[0] = lambda *a: seen.append(a[0].shape) or real(*a)
    try:
        name = "float32" if src == torch.float32 else "bfloat16"
        bits = x.view(torch.int32 if src == torch.float32 else torch.int16)
        for arg, sd in ((x, None), (bits, name)):
            s, c, ts = ks.nvfp4_quantize(arg[None].to(dev), profile, src_dtype=sd)
            assert s.shape == (1, 64, 6) and c.shape == (1, 64, 96) and ts.shape == (1,)
            assert np.array_equal(s[0].cpu().numpy(), want.scales)
            assert np.array_equal(c[0].cpu().numpy(), want.codes)
            assert np.float32(ts.cpu()[0]) == np.float32(want.tensor_scale)
        assert len(seen) == 2
        ks.nvfp4_quantize(torch.stack([x, x]).to(dev), profile)              # T = 2
        ks.nvfp4_quantize(x[None, :, :88].contiguous().to(dev), profile)     # C = 88
        assert len(seen) == 2
    finally:
        tq.NVFP4_ROWS[0] = real


@pytest.mark.parametrize("profile", ["te_nvfp4", "ocp"])
def test_sr_rounding_at_chosen_words(monkeypatch, profile):
    """NVFP4 SR (te: the FPU product's integer rounding; ocp: the exact quotient's) against
    mxref with every element given the same chosen word (the interpreted word source
    replaced): the carry threshold at each position of floor(rest / q 2^32), elements far
    below their block's amax included; the words change the codes (the check can fail)."""
    import triton.language as tl
    from mxkernels.ops import kernels
    ks = kernels("cpu").modules
    tn = ks["triton_train_nvfp4"]
    word = [0]

    def fixed(rows, cols, r0, c0, n_rows, n_cols, k0, k1, AXIS, BR, BC, SR):
        return tl.full((BR, BC), word[0], tl.uint32)

    monkeypatch.setattr(ks["triton_train"], "_sr_words", fixed)
    rng = np.random.default_rng(3)
    x = np.concatenate([_edge(64, rng)[:16],
                        (rng.standard_normal((16, 64)) *
                         np.exp2(rng.integers(-30, 3, (16, 64)))).astype(np.float32)])
    prof = mxref.get_profile(profile).replace(name=f"{profile}+sr", rounding="stochastic")
    seen = set()
    for w in [0, 2**31] + [2**32 - 2**k - d for k in (0, 8, 16, 24, 28) for d in (0, 1)]:
        word[0] = w
        _, _, q, _ = tn.qdq(torch.from_numpy(x), profile, rows=True, cols=True,
                            with_codes=True, row_sr=1, col_sr=2, out_dtype=torch.float32)
        rb = np.full(x.shape, w, np.uint32)
        r = mxref.quantize(x, "nvfp4", prof, rbits=rb).codes
        c = mxref.quantize(np.ascontiguousarray(x.T), "nvfp4", prof, rbits=rb.T.copy()).codes
        assert np.array_equal(q[1].numpy(), r), hex(w)
        assert np.array_equal(q[3].numpy().T, c), hex(w)
        seen.add(r.tobytes())
    assert len(seen) >= 5
