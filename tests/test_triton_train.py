"""triton_train.qdq (rotate + RNE/SR quantize + dequantize, both orientations from one read)
against mxref: mxref.rotate, mxref.quantize with mxref.random_bits words, MXTensor.dequantize.
Runs through the Triton interpreter on CPU; the data covers what random draws miss (NaN and Inf
blocks, -0, fp32 subnormals, all-zero and tiny blocks, RNE ties and tie +- 1 ulp, amax at
2^k - 1 ulp, values that overflow the rotation)."""
import zlib

import numpy as np
import pytest
import torch

import mxref
from mxref.quantize import random_bits
from mxref.rotate import sign_vector


_DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(scope="module", params=_DEVICES)
def dev(request):
    return torch.device(request.param)


@pytest.fixture(scope="module")
def tt(dev):
    """The module compiled for the GPU (when there is one) or interpreted for the CPU; the
    tests move their inputs to ``dev`` through :func:`_on`."""
    from mxkernels.ops import kernels
    return kernels(dev).modules["triton_train"]


def _cpu(t):
    return None if t is None else t.cpu()


def _edge_rows(C: int, rng) -> np.ndarray:
    """16 rows of hand-made cases, each C wide (fp32)."""
    rows = []
    base = rng.standard_normal((16, C)).astype(np.float32)
    base[0, 3] = np.nan                                   # NaN block
    base[1, 40] = np.inf                                  # Inf block
    base[2, :] = 0.0
    base[2, 5] = -0.0                                     # all-zero block with -0
    base[3, :] = np.float32(2.0 ** -140) * np.sign(base[3, :])   # fp32 subnormals
    base[4, :] = base[4, :] * np.float32(2.0 ** -120)     # tiny block: scale byte near 0
    base[5, :32] = 6.0                                    # amax on the top code
    base[5, 1::2] = np.float32(5.0)                       # FP4 tie (5 between 4 and 6)
    t = np.float32(5.0)
    base[6, :] = np.array([np.nextafter(t, np.float32(0)), t, np.nextafter(t, np.float32(9))]
                          * (C // 3 + 1), dtype=np.float32)[:C]   # tie +- 1 ulp
    base[7, :] = np.float32(np.nextafter(np.float32(8.0), np.float32(0)))  # amax 2^k - 1 ulp
    base[7, ::5] *= -1
    base[8, :] = np.float32(3.0e38)                       # the rotation overflows to Inf
    base[9, :] = -base[9, :]
    base[10, :] *= np.float32(1e30)
    base[11, ::3] = -0.0
    return base


def _ref(x: np.ndarray, fmt: str, n: int, signs, seed):
    """mxref: rotate along the last axis (when n), quantize along it (SR with the words of
    random_bits(shape, seed) when seed is set); (scales, codes, fp32 values)."""
    if n:
        x = mxref.rotate(x, n, axis=-1, signs=signs)
    prof = mxref.get_profile("ocp")
    rb = None
    if seed is not None:
        prof = prof.replace(name="ocp+sr", rounding="stochastic")
        rb = random_bits(x.shape, seed, 0)
    q = mxref.quantize(x, fmt, prof, axis=-1, rbits=rb)
    return q.scales, q.codes, q.dequantize().astype(np.float32)


def _host_signs(spec, n):
    if spec is None:
        return "none"
    if spec[0] == "mask":
        return np.array([-1 if (spec[1] >> j) & 1 else 1 for j in range(n)], dtype=np.int8)
    return sign_vector("random", n, seed=spec[1], step=spec[2], tensor_id=spec[3])


def _same_values(got: torch.Tensor, want: np.ndarray) -> bool:
    """Bit equality of bf16 / fp32 values with every NaN counted equal."""
    w = torch.from_numpy(want)
    if got.dtype == torch.bfloat16:
        w = w.to(torch.bfloat16)
    g = got.float().numpy()
    wn = w.float().numpy()
    nan = np.isnan(g)
    if not np.array_equal(nan, np.isnan(wn)):
        return False
    return np.array_equal(got[~torch.from_numpy(nan)].view(torch.int16 if got.dtype ==
                                                            torch.bfloat16 else torch.int32),
                          w[~torch.from_numpy(nan)].view(torch.int16 if w.dtype ==
                                                         torch.bfloat16 else torch.int32))


CASES = [
    (0, None, None), (0, None, 77), (16, None, None), (16, ("mask", 0b1011000011110101), None),
    (16, ("random", 12345, 7, 9), 2**40 + 3), (32, ("random", 2**63 + 5, 2**32 - 1, 3), None),
    (32, ("mask", 0x80000001), 11)]


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3"])
@pytest.mark.parametrize("n,signs,seed", CASES)
@pytest.mark.parametrize("src", [torch.float32, torch.bfloat16])
def test_qdq_matches_mxref_both_orientations(tt, dev, fmt, n, signs, seed, src):
    rng = np.random.default_rng(zlib.crc32(repr((fmt, n, seed)).encode()))
    C = 96
    top = _edge_rows(C, rng)
    x = np.concatenate([top, (rng.standard_normal((48, C)) *
                              rng.choice([1e-3, 1.0, 50.0], (48, 1))).astype(np.float32)])
    xt = torch.from_numpy(x).to(src)
    xf = xt.float().numpy()
    col_seed = None if seed is None else seed + 1
    rv, cv, q = tt.qdq(xt.to(dev), fmt, "ocp", rows=True, cols=True, with_codes=True,
                       rot_n=n, row_signs=signs, col_signs=signs, row_sr=seed, col_sr=col_seed,
                       out_dtype=torch.float32 if src == torch.float32 else torch.bfloat16)
    rv, cv, q = _cpu(rv), _cpu(cv), [_cpu(t) for t in q]
    s = _host_signs(signs, n)
    rs, rc, rvals = _ref(xf, fmt, n, s, seed)
    cs, cc, cvals = _ref(np.ascontiguousarray(xf.T), fmt, n, s, col_seed)
    assert np.array_equal(q[0].numpy(), rs) and np.array_equal(q[1].numpy(), rc)
    assert np.array_equal(q[2].numpy().T, cs) and np.array_equal(q[3].numpy().T, cc)
    assert _same_values(rv, rvals) and _same_values(cv, np.ascontiguousarray(cvals.T))


def test_each_orientation_can_rotate_alone_and_round_alone(tt, dev):
    """row_rot / col_rot and per-orientation SR: rows rotated (RNE), columns SR (unrotated)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    _, _, q = tt.qdq(torch.from_numpy(x).to(dev), "mxfp4", rows=True, cols=True,
                     with_codes=True, rot_n=16, row_rot=True, col_rot=False, col_sr=3,
                     out_dtype=torch.float32)
    q = [_cpu(t) for t in q]
    rs, rc, _ = _ref(x, "mxfp4", 16, "none", None)
    cs, cc, _ = _ref(np.ascontiguousarray(x.T), "mxfp4", 0, None, 3)
    assert np.array_equal(q[1].numpy(), rc) and np.array_equal(q[0].numpy(), rs)
    assert np.array_equal(q[3].numpy().T, cc) and np.array_equal(q[2].numpy().T, cs)


def test_sr_words_are_the_operand_streams_not_a_copy_of_each_other(tt, dev):
    """Planted-bug guard: the column orientation's words are those of x^T (word c * R + r);
    indexing them like the rows (r * C + c) must change the codes, so the test above can
    tell the two apart."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    _, _, q = tt.qdq(torch.from_numpy(x).to(dev), "mxfp4", rows=False, cols=True,
                     with_codes=True, col_sr=9)
    q = [_cpu(t) for t in q]
    _, right, _ = _ref(np.ascontiguousarray(x.T), "mxfp4", 0, None, 9)
    assert np.array_equal(q[3].numpy().T, right)
    prof = mxref.get_profile("ocp").replace(name="sr", rounding="stochastic")
    # the rows' stream read down the columns
    mis = mxref.quantize(np.ascontiguousarray(x.T), "mxfp4", prof, axis=-1,
                         rbits=np.ascontiguousarray(random_bits(x.shape, 9, 0).T)).codes
    assert not np.array_equal(mis, right)


@pytest.mark.parametrize("kw,says", [
    ({"rot_n": 64}, "rot_n=64"),
    ({"rot_n": 16, "rows": True}, "not a multiple"),
    ({"rot_n": 16, "rows": False, "cols": True}, "not a multiple"),
    ({"rot_n": 16, "row_signs": ("mask", 1 << 20)}, "signs="),
    ({"rot_n": 16, "row_signs": ("other", 1)}, "signs="),
    ({"row_sr": 1.5}, "SR seed"),
    ({"rows": False, "cols": False}, "rows, cols or both"),
    ({"out_dtype": torch.float16}, "out_dtype")])
def test_bad_arguments_are_typed_errors(tt, kw, says):
    x = torch.zeros(40, 40) if "rot_n" in kw and kw.get("rot_n") == 16 and \
        "row_signs" not in kw else torch.zeros(64, 64)
    with pytest.raises(tt.KernelUnsupported, match=says):
        tt.qdq(x, "mxfp4", **kw)


def test_unsupported_profile_is_a_typed_error(tt):
    with pytest.raises(tt.KernelUnsupported, match="not implemented by the fast kernels"):
        tt.qdq(torch.zeros(64, 64), "mxfp4", "dsv4")


def test_empty_tensor_gives_empty_outputs(tt):
    rv, cv, q = tt.qdq(torch.zeros(0, 64), "mxfp4", rows=True, cols=True, with_codes=True,
                       rot_n=16)
    assert rv.shape == (0, 64) and cv.shape == (0, 64) and q[1].shape == (0, 64)


def test_device_step_mode_equals_host_seeds_and_signs(tt, dev):
    """step=tensor: ('random', seed, None, tid) signs and ('mix', state, gemm, side) SR keys,
    finished with the device step in the kernel, give the launch with host-computed values."""
    from mxkernels.training.quant import mix_seed, mix_state
    rng = np.random.default_rng(8)
    x = torch.from_numpy(rng.standard_normal((64, 96)).astype(np.float32)).to(dev)
    seed, layer, step = 2**62 + 11, 5, 2**33 + 9
    host = tt.qdq(x, "mxfp4", rows=True, cols=True, with_codes=True, rot_n=16,
                  row_signs=("random", seed, step % 2**32, 21),
                  col_signs=("random", seed, step % 2**32, 23),
                  row_sr=mix_seed(seed, layer, step, 1, 0), col_sr=mix_seed(seed, layer, step, 2, 0))
    st = torch.tensor([step], dtype=torch.int64, device=dev)
    devq = tt.qdq(x, "mxfp4", rows=True, cols=True, with_codes=True, rot_n=16,
                  row_signs=("random", seed, None, 21), col_signs=("random", seed, None, 23),
                  row_sr=("mix", mix_state(seed, layer), 1, 0),
                  col_sr=("mix", mix_state(seed, layer), 2, 0), step=st)
    for a, b in zip(host[2], devq[2]):
        assert torch.equal(a.cpu(), b.cpu())
    st.fill_(step + 1)                        # another step: other signs and words
    other = tt.qdq(x, "mxfp4", rows=True, cols=True, with_codes=True, rot_n=16,
                   row_signs=("random", seed, None, 21), col_signs=("random", seed, None, 23),
                   row_sr=("mix", mix_state(seed, layer), 1, 0),
                   col_sr=("mix", mix_state(seed, layer), 2, 0), step=st)
    assert not torch.equal(other[2][1].cpu(), host[2][1].cpu())


@pytest.mark.parametrize("kw,says", [
    ({"row_sr": 5}, "'mix', state"),
    ({"row_sr": ("mix", 1, 3, 0)}, "'mix', state"),
    ({"rot_n": 16, "row_signs": ("random", 1, 2, 3)}, "signs="),
    ({"step": "7"}, "int64 tensor")])
def test_device_step_bad_arguments_are_typed_errors(tt, kw, says):
    kw = {"step": torch.zeros(1, dtype=torch.int64), **kw}
    with pytest.raises(tt.KernelUnsupported, match=says):
        tt.qdq(torch.zeros(64, 64), "mxfp4", **kw)


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp4"])
def test_fp4_stored_qdq_matches_mxref(tt, dev, fmt):
    """From the packed MXFP4 copy of x along the rows to x's fake quantization down the
    columns, against mxref's dequantize -> quantize(axis 0); NaN block, -0, subnormal and
    tiny blocks, a ragged last block (C = 96 + 16)."""
    from mxkernels.ops import kernels
    tf = kernels(dev).modules["triton_fast"]
    rng = np.random.default_rng(9)
    C = 112
    x = (rng.standard_normal((80, C)) * rng.choice([1e-3, 1.0, 40.0], (80, 1))).astype(
        np.float32)
    x[0, :32] = np.nan
    x[1, 5] = -0.0
    x[2, :] = 0.0
    x[2, 7] = -0.0
    x[3, :] = 2.0 ** -140
    x[4, :32] = 2.0 ** -130
    st = mxref.quantize(x, "mxfp4", "ocp", axis=-1)
    s, c = tf.quantize_fast(torch.from_numpy(x).to(dev), "mxfp4", "ocp", -1, packed=True)
    v, q = tt.qdq_fp4_stored(c, s, C, fmt, with_codes=True, out_dtype=torch.float32)
    ref = mxref.quantize(np.ascontiguousarray(st.dequantize().astype(np.float32).T), fmt,
                         "ocp", axis=-1)
    assert np.array_equal(q[0].cpu().numpy().T, ref.scales)
    assert np.array_equal(q[1].cpu().numpy().T, ref.codes)
    assert _same_values(v.cpu(), np.ascontiguousarray(ref.dequantize().astype(np.float32).T))


@pytest.mark.parametrize("args,says", [
    ((torch.zeros(8, 4, dtype=torch.uint8), torch.zeros(8, 1, dtype=torch.uint8), 7), "even"),
    ((torch.zeros(8, 4, dtype=torch.uint8), torch.zeros(8, 2, dtype=torch.uint8), 8), "needs codes"),
    ((torch.zeros(8, 4), torch.zeros(8, 1, dtype=torch.uint8), 8), "uint8")])
def test_fp4_stored_bad_arguments_are_typed_errors(tt, args, says):
    with pytest.raises(tt.KernelUnsupported, match=says):
        tt.qdq_fp4_stored(*args, "mxfp8_e4m3")


def _ref_words(x: np.ndarray, fmt: str, seed, words: int):
    """mxref.quantize with the seed's stream of ``words`` words per Philox counter."""
    prof = mxref.get_profile("ocp").replace(name="ocp+sr", rounding="stochastic")
    q = mxref.quantize(x, fmt, prof, axis=-1, seed=seed, rng_words=words)
    return q.scales, q.codes, q.dequantize().astype(np.float32)


# (R, C): both axes multiples of 4 (grouped words); C not (rows per element, columns grouped);
# R not (columns per element); a tile taller / wider than the tensor
@pytest.mark.parametrize("shape", [(64, 96), (48, 70), (50, 64), (6, 36)])
@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e4m3"])
def test_four_word_stream_matches_mxref_both_orientations(tt, dev, shape, fmt):
    """sr_words=4: element i of each operand (x for the rows, x^T for the columns) takes word
    i mod 4 of counter i div 4 (mxref.random_bits(..., words=4)), whichever way the kernel
    draws them (grouped or per element)."""
    rng = np.random.default_rng(hash(shape) % 2**32)
    R, C = shape
    x = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 50.0], (R, 1))).astype(np.float32)
    x[0, :min(C, 32)] = 5.0                                 # ties: the words decide
    _, _, q = tt.qdq(torch.from_numpy(x).to(dev), fmt, rows=True, cols=True, with_codes=True,
                     row_sr=2**40 + 3, col_sr=17, sr_words=4, out_dtype=torch.float32)
    q = [_cpu(t) for t in q]
    rs, rc, _ = _ref_words(x, fmt, 2**40 + 3, 4)
    cs, cc, _ = _ref_words(np.ascontiguousarray(x.T), fmt, 17, 4)
    assert np.array_equal(q[1].numpy(), rc) and np.array_equal(q[0].numpy(), rs)
    assert np.array_equal(q[3].numpy().T, cc) and np.array_equal(q[2].numpy().T, cs)
    # planted: the one-word stream gives other codes, so the check above can fail
    _, rc1, _ = _ref_words(x, fmt, 2**40 + 3, 1)
    assert not np.array_equal(rc1, rc)


def test_four_word_stream_kinds():
    """Which launches draw one evaluation per four elements (kind 4) and which fall back to
    one per element (5): the orientation's axis and the tile's side must be multiples of 4."""
    from mxkernels.triton_common import KernelUnsupported
    from mxkernels.triton_train import sr_kinds
    assert sr_kinds(64, 96, 32, 128, 1, 2, 4) == (4, 4)
    assert sr_kinds(64, 70, 32, 128, 1, 2, 4) == (5, 4)
    assert sr_kinds(50, 64, 32, 128, 1, 2, 4) == (4, 5)
    assert sr_kinds(64, 64, 2, 128, 1, 2, 4) == (4, 5)
    assert sr_kinds(64, 64, 32, 128, None, 2, 1) == (0, 1)
    with pytest.raises(KernelUnsupported, match="sr_words=2"):
        sr_kinds(64, 64, 32, 128, 1, 2, 2)


def test_sr_rounding_at_chosen_words(monkeypatch):
    """The SR rounding of the fused launch against mxref with every element given the same
    chosen word (the interpreted kernel's word source replaced): 0, 2^31 and 2^32 - 2^k (-1)
    put the carry threshold at each position of floor(rest / q 2^32), including the positions
    reached only by elements 2^-8 .. 2^-30 below their block's amax (quantum 33 .. 55 bits up
    the significand). A word source that is not the one compared with gives other codes (the
    check can fail)."""
    from mxkernels.ops import kernels
    import triton.language as tl
    tt = kernels("cpu").modules["triton_train"]
    word = [0]

    def fixed(rows, cols, r0, c0, n_rows, n_cols, k0, k1, AXIS, BR, BC, SR):
        return tl.full((BR, BC), word[0], tl.uint32)

    monkeypatch.setattr(tt, "_sr_words", fixed)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((64, 64)) * np.exp2(rng.integers(-30, 5, (64, 64)))) \
        .astype(np.float32)
    prof = mxref.get_profile("ocp").replace(name="ocp+sr", rounding="stochastic")
    words = [0, 2**31] + [2**32 - 2**k - d for k in (0, 8, 16, 20, 24, 28) for d in (0, 1)]
    seen = set()
    for w in words:
        word[0] = w
        for fmt in ("mxfp4", "mxfp8_e4m3"):
            _, _, q = tt.qdq(torch.from_numpy(x), fmt, rows=True, cols=True, with_codes=True,
                             row_sr=1, col_sr=2, out_dtype=torch.float32)
            rb = np.full(x.shape, w, np.uint32)
            r = mxref.quantize(x, fmt, prof, rbits=rb).codes
            c = mxref.quantize(np.ascontiguousarray(x.T), fmt, prof, rbits=rb).codes
            assert np.array_equal(q[1].numpy(), r), (hex(w), fmt)
            assert np.array_equal(q[3].numpy().T, c), (hex(w), fmt)
            seen.add((fmt, r.tobytes()))
    assert len(seen) >= 10          # the words change the codes: a wrong word source shows
