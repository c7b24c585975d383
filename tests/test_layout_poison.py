"""Layout poison tests for the padded scale layouts (issue 28 item 6).

The cuBLAS 1D block-scaling layout (128x4 tiles) and AITER ``e8m0_shuffle`` (256x8) pad ragged
scale arrays. Field bugs: a producer switched ``torch.zeros`` to ``torch.empty`` for the swizzled
buffer and a consumer read the stale padding (vLLM #45741, FlashInfer #2861), and a swizzle
padded only K, so every M % 32 != 0 shape broke (rocm-libraries #12232). So, for ragged rows
*and* ragged columns (exact multiples as controls):

* the real bytes sit where the documented layout puts them and nowhere else; the padding is
  0x00 (mxref, the torch emulator, triton_quant and the Triton fast quantizer);
* every consumer returns exactly the same result when every padding byte is overwritten with
  0xFF (E8M0 NaN) or random bytes.

The expected placement comes from the layouts' index formulas written out here, not from mxref:
cuBLAS (cuBLAS docs "1D Block Scaling Factors Layout", TE ``nvte_swizzle_scaling_factors``: pad
to 128x4): tile ``(r // 128, c // 4)`` in row-major tile order, 512 bytes each, byte
``(r % 32) * 16 + (r % 128 // 32) * 4 + c % 4``; AITER (``e8m0_shuffle``: pad to 256x8, view
``(sm//32, 2, 16, sn//8, 2, 4)``, permute ``(0, 3, 5, 2, 4, 1)``) written out by index.

Consumers: no CPU code in this repo reads a padded layout except the inverses
``from_cublas_blocked`` / ``from_amd_shuffle`` (``mxref.gemm`` and ``mxkernels.triton_gemm.mx_gemm``
take row-major [rows, blocks] scales). The one GPU consumer reachable from here is cuBLAS itself
through ``torch._scaled_mm`` with E8M0 blocked scales (sm_100+): ``test_cublas_scaled_mm_*``,
marked ``gpu`` and skipped elsewhere. Each check is also run against a planted fault
(``test_planted_*``), so none of them can pass vacuously.
"""
from __future__ import annotations

import numpy as np
import pytest

import mxref
from mxref.layouts import from_amd_shuffle, from_cublas_blocked, to_amd_shuffle, to_cublas_blocked

try:
    import torch
except ImportError:          # the mxref-only tests still run
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

# (rows, cols) of the scale array: 1x1, ragged rows and columns, exact multiples as controls
SHAPES = [(1, 1), (31, 3), (129, 5), (300, 9), (128, 4), (256, 8), (384, 16)]
POISONS = ["nan", "random"]


# ---- the layouts, written out from their documented definitions -----------------------------
def _padded(layout, rows, cols):
    t_r, t_c = (128, 4) if layout == "cublas" else (256, 8)
    return -(-rows // t_r) * t_r, -(-cols // t_c) * t_c


def doc_offsets(layout, rows, cols):
    """Flat byte offset of scale (r, c), [rows, cols] int64, from the documented layout."""
    r, c = np.meshgrid(np.arange(rows, dtype=np.int64), np.arange(cols, dtype=np.int64),
                       indexing="ij")
    _, pc = _padded(layout, rows, cols)
    if layout == "cublas":
        tile = (r // 128) * (pc // 4) + c // 4
        return tile * 512 + (r % 32) * 16 + (r % 128 // 32) * 4 + c % 4
    i0, i1, i2 = r // 32, (r // 16) % 2, r % 16
    j0, j1, j2 = c // 8, (c // 4) % 2, c % 4
    return ((((i0 * (pc // 8) + j0) * 4 + j2) * 16 + i2) * 2 + j1) * 2 + i1


def pad_mask(layout, rows, cols):
    """Boolean mask over the flat buffer: True where no scale lives (the padding)."""
    pr, pc = _padded(layout, rows, cols)
    mask = np.ones(pr * pc, dtype=bool)
    mask[doc_offsets(layout, rows, cols).reshape(-1)] = False
    return mask


MXREF = {"cublas": (lambda s: to_cublas_blocked(s).reshape(-1), from_cublas_blocked),
         "amd": (lambda s: to_amd_shuffle(s).reshape(-1),
                 lambda b, rows, cols: from_amd_shuffle(b.reshape(_padded("amd", rows, cols)),
                                                        rows, cols))}


def e8m0_scales(rows, cols, seed):
    """Random valid (non-NaN) E8M0 bytes, both ends of the range included."""
    s = np.random.default_rng(seed).integers(0, 255, (rows, cols), dtype=np.uint8)
    s.flat[0] = 254
    s.flat[-1] = 0 if s.size > 1 else 254
    return s


def poisoned(buf, mask, poison, seed=0):
    """A copy of ``buf`` with every padding byte overwritten (0xFF or random bytes)."""
    out = np.array(buf, dtype=np.uint8, copy=True)
    n = int(mask.sum())
    out[mask] = 0xFF if poison == "nan" else \
        np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
    return out


# ---- the checks (shared by the tests and the planted-fault tests) ---------------------------
def check_placement(layout, scales, produce):
    """``produce(scales)`` (flat bytes) has every scale at its documented offset, is exactly as
    long as the padded layout, and holds 0x00 in every padding byte."""
    rows, cols = scales.shape
    pr, pc = _padded(layout, rows, cols)
    buf = np.asarray(produce(scales), dtype=np.uint8).reshape(-1)
    assert buf.size == pr * pc, f"{layout} {rows}x{cols}: {buf.size} bytes, expected {pr * pc}"
    np.testing.assert_array_equal(buf[doc_offsets(layout, rows, cols)], scales)
    pad = buf[pad_mask(layout, rows, cols)]
    assert not pad.any(), f"{layout} {rows}x{cols}: padding bytes not 0x00: {np.unique(pad)}"


def check_poison_ignored(layout, scales, consume, poison):
    """``consume(flat_bytes, rows, cols)`` gives the original scales with clean padding and
    with every padding byte poisoned; the poison really changed the buffer where it has
    padding (so the comparison is not vacuous)."""
    rows, cols = scales.shape
    to_fn, _ = MXREF[layout]
    clean = to_fn(scales)
    mask = pad_mask(layout, rows, cols)
    dirty = poisoned(clean, mask, poison, seed=rows * 131 + cols)
    assert (dirty != clean).any() == mask.any()
    np.testing.assert_array_equal(consume(clean, rows, cols), scales)
    np.testing.assert_array_equal(consume(dirty, rows, cols), scales)


# ---- mxref.layouts ---------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["cublas", "amd"])
@pytest.mark.parametrize("rows,cols", SHAPES)
def test_padding_is_where_the_documented_layout_says(layout, rows, cols):
    pr, pc = _padded(layout, rows, cols)
    mask = pad_mask(layout, rows, cols)
    assert int(mask.sum()) == pr * pc - rows * cols      # the formula is a bijection
    marked = MXREF[layout][0](np.ones((rows, cols), dtype=np.uint8))
    np.testing.assert_array_equal(marked == 0, mask)     # 0x01-marked reals vs the formula
    check_placement(layout, e8m0_scales(rows, cols, rows + cols), MXREF[layout][0])


@pytest.mark.parametrize("poison", POISONS)
@pytest.mark.parametrize("layout", ["cublas", "amd"])
@pytest.mark.parametrize("rows,cols", SHAPES)
def test_inverse_ignores_poisoned_padding(layout, rows, cols, poison):
    check_poison_ignored(layout, e8m0_scales(rows, cols, 7 * rows + cols), MXREF[layout][1],
                         poison)


@pytest.mark.parametrize("layout", ["cublas", "amd"])
def test_mxtensor_scales_layout_of_ragged_quantization(layout):
    """``MXTensor.scales_layout`` of a quantization with ragged M and ragged K blocks."""
    x = np.random.default_rng(1).standard_normal((130, 9 * 32 - 5)).astype(np.float32)
    q = mxref.quantize(x, "mxfp8_e4m3")
    assert q.scales.shape == (130, 9)
    check_placement(layout, q.scales, lambda s: q.scales_layout(layout))
    for poison in POISONS:
        check_poison_ignored(layout, q.scales, MXREF[layout][1], poison)


# ---- the kernel-side producers ---------------------------------------------------------------


@needs_torch
@pytest.mark.parametrize("layout", ["cublas", "amd"])
@pytest.mark.parametrize("rows,cols", SHAPES)
def test_torch_emulator_scale_layout(layout, rows, cols):
    from mxkernels import torch_emu
    check_placement(layout, e8m0_scales(rows, cols, rows ^ cols),
                    lambda s: torch_emu.scale_layout(torch.from_numpy(s), layout).numpy())


@pytest.fixture(scope="module")
def ks():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from mxkernels.loader import load_kernels
    return load_kernels(True)


@pytest.mark.parametrize("layout", ["cublas", "amd"])
@pytest.mark.parametrize("rows,cols", SHAPES)
def test_triton_quant_scale_layout(ks, layout, rows, cols):
    tq = ks["triton_quant"]
    check_placement(layout, e8m0_scales(rows, cols, rows * cols),
                    lambda s: tq.scale_layout(torch.from_numpy(s), layout).numpy())


def _fast_quantize(fast, layout, axis, device="cpu"):
    """(scales, swizzled bytes) of the Triton fast quantizer on a tensor ragged in both
    dimensions: axis -1 gives a [129, 5] scale view, axis 0 a [153, 5] one."""
    x = torch.from_numpy(np.random.default_rng(5).standard_normal((129, 153)).astype(np.float32))
    ref = mxref.quantize(x.numpy(), "mxfp4", "ocp", axis=axis)
    view = ref.scales if axis == -1 else np.ascontiguousarray(ref.scales.T)
    sw, _ = fast.quantize_fast(x.to(device), "mxfp4", "ocp", axis, scale_layout=layout)
    return view, sw.cpu().numpy()


def _cuda():
    return torch is not None and torch.cuda.is_available()


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
        not _cuda(), reason="no GPU: the compiled kernels need one")])])
@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("layout", ["cublas", "amd"])
def test_triton_fast_quantizer_writes_zero_padding(ks, layout, axis, device):
    """The fast quantizer writes the swizzled layout itself (``_scale_buffer``): the scales
    land at the documented offsets and the padding it hands out is 0x00 (vLLM #45741). On a
    GPU (compiled kernels) a stale-memory allocator would show here, not in the interpreter."""
    if device == "cuda":
        from mxkernels.loader import load_kernels
        fast = load_kernels(False)["triton_fast"]
    else:
        fast = ks["triton_fast"]
    view, sw = _fast_quantize(fast, layout, axis, device)
    check_placement(layout, view, lambda s: sw)


# ---- planted faults: every check above must fail on the bug it is there for ------------------
def _reads_one_padding_byte(inverse, layout):
    """An inverse that ORs one padding byte into the last scale: right with 0x00 padding,
    wrong with garbage (the field bug's shape)."""
    def bad(buf, rows, cols):
        out = inverse(buf, rows, cols).copy()
        out[-1, -1] |= buf[np.flatnonzero(pad_mask(layout, rows, cols))[0]]
        return out
    return bad


@pytest.mark.parametrize("layout", ["cublas", "amd"])
def test_planted_inverse_reading_padding_is_caught(layout):
    s = e8m0_scales(129, 5, 3)
    bad = _reads_one_padding_byte(MXREF[layout][1], layout)
    np.testing.assert_array_equal(bad(MXREF[layout][0](s), 129, 5), s)   # clean: invisible
    for poison in POISONS:
        with pytest.raises(AssertionError):
            check_poison_ignored(layout, s, bad, poison)


def _no_padding(s):
    return np.ascontiguousarray(s).reshape(-1)


def _ff_padding(layout):
    to_fn = MXREF[layout][0]

    def bad(s):
        buf = to_fn(s).copy()
        buf[pad_mask(layout, *s.shape)] = 0xFF
        return buf
    return bad


def _cublas_column_major_tiles(s):
    pr, pc = _padded("cublas", *s.shape)
    p = np.zeros((pr, pc), np.uint8)
    p[: s.shape[0], : s.shape[1]] = s
    return np.ascontiguousarray(p.reshape(pr // 128, 4, 32, pc // 4, 4)
                                .transpose(3, 0, 2, 1, 4)).reshape(-1)


def _amd_k_only_padding(s):
    """rocm-libraries #12232: pad K to 8 but not M to 256."""
    rows, cols = s.shape
    pc = -(-cols // 8) * 8
    p = np.zeros((-(-rows // 32) * 32, pc), np.uint8)
    p[:rows, :cols] = s
    return np.ascontiguousarray(p.reshape(-1, 2, 16, pc // 8, 2, 4)
                                .transpose(0, 3, 5, 2, 4, 1)).reshape(-1)


@pytest.mark.parametrize("layout,bad", [
    ("cublas", _no_padding), ("amd", _no_padding), ("cublas", _ff_padding("cublas")),
    ("amd", _ff_padding("amd")), ("cublas", _cublas_column_major_tiles),
    ("amd", _amd_k_only_padding)],
    ids=["cublas-unpadded", "amd-unpadded", "cublas-ff-pad", "amd-ff-pad",
         "cublas-col-major-tiles", "amd-k-only-pad"])
def test_planted_bad_producer_is_caught(layout, bad):
    with pytest.raises(AssertionError):
        check_placement(layout, e8m0_scales(300, 9, 11), bad)


def test_planted_dirty_fast_buffer_is_caught(ks, monkeypatch):
    """``_scale_buffer`` handing out stale bytes (``torch.empty`` on a reused allocation) is
    caught by the fast-quantizer test's check."""
    fast = ks["triton_fast"]
    real = fast._scale_buffer

    def dirty(rows, nblk, layout, device):
        buf, n_pad = real(rows, nblk, layout, device)
        return buf.fill_(0xFF) if layout != "row_major" else buf, n_pad
    monkeypatch.setattr(fast, "_scale_buffer", dirty)
    view, sw = _fast_quantize(fast, "cublas", -1)
    with pytest.raises(AssertionError, match="padding bytes not 0x00"):
        check_placement("cublas", view, lambda s: sw)


# ---- GPU: cuBLAS itself as the consumer ----------------------------------------------------
def _blackwell():
    return _cuda() and torch.version.hip is None \
        and torch.cuda.get_device_capability() >= (10, 0)


@pytest.mark.gpu
@pytest.mark.skipif(not _blackwell(), reason="cuBLAS MX block scaling needs an sm_100+ GPU")
@pytest.mark.parametrize("poison", POISONS)
@pytest.mark.parametrize("m,n,k", [(16, 48, 96), (32, 16, 160), (144, 208, 96)])
def test_cublas_scaled_mm_ignores_poisoned_padding(m, n, k, poison):
    """MXFP8 x MXFP8 through ``torch._scaled_mm`` (cuBLAS, 128x4 blocked E8M0 scales): the
    output is bit-identical with clean and poisoned padding; M, N ragged against 128 and the
    scale columns (K/32) ragged against 4. m <= 32 is the vLLM #45741 path."""
    rng = np.random.default_rng(m * n + k)
    qa = mxref.quantize(rng.standard_normal((m, k)).astype(np.float32), "mxfp8_e4m3")
    qb = mxref.quantize(rng.standard_normal((n, k)).astype(np.float32), "mxfp8_e4m3")
    dev = torch.device("cuda")
    a = torch.from_numpy(qa.codes).to(dev).view(torch.float8_e4m3fn)
    b = torch.from_numpy(qb.codes).to(dev).view(torch.float8_e4m3fn)

    def run(sa, sb):
        as_e8 = [torch.from_numpy(s).to(dev).view(torch.float8_e8m0fnu) for s in (sa, sb)]
        y = torch._scaled_mm(a, b.t(), scale_a=as_e8[0], scale_b=as_e8[1],
                             out_dtype=torch.bfloat16)
        return y.view(torch.int16).cpu().numpy()
    sa, sb = (to_cublas_blocked(q.scales) for q in (qa, qb))
    clean = run(sa, sb)
    dirty = run(poisoned(sa, pad_mask("cublas", m, k // 32), poison, 1),
                poisoned(sb, pad_mask("cublas", n, k // 32), poison, 2))
    np.testing.assert_array_equal(dirty, clean)
