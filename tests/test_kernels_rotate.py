"""mxkernels/triton_rotate.py against the CPU reference mxref.rotate, bit for bit.

Expected values come only from mxref (rotate / quantize_rotated / sign_vector, themselves
checked against a Fraction oracle and a host-FPU loop in tests/test_rotate.py) and from the
golden corpus; never from the kernels under test. The kernels run in the Triton interpreter
(private interpreted copies from ``load_kernels(True)``, so no other test's environment is
touched) and, where torch sees a GPU, compiled on ``cuda`` as well.

Covered: n in {16, 32, 64, 128, 256}; fp32 / bf16 / fp16 inputs and raw bit patterns; signs
none / te16 / random / explicit (int8 and float); round_to float32 and bfloat16; edge blocks
(NaN, +-Inf, Inf - Inf, -0 and mixed zeros, fp32 subnormal inputs and results, partial sums
overflowing to Inf, fp32 and bf16 rounding ties after the rotation, bf16 rounding to Inf);
rotated quantization for every MX format under every profile that applies and NVFP4 under its
three op orders, packed FP4; multi-program tiles and ragged quant blocks (n = 16); the golden
files of ops "rotate" and "quantize_rotated"; planted bugs (stage order, float64 rounding,
bf16 truncation) that the checks catch; bad inputs; ahead-of-time compilation of every kernel
spec for sm_90, gfx942 and gfx950.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

import mxref
import mxref.rotate
from mxref.golden.store import column_numpy, read_golden
from mxref.profiles import PROFILES

R = sys.modules["mxref.rotate"]  # the module (mxref.rotate is also the function)
ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "golden"
SIZES = (16, 32, 64, 128, 256)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# numpy (the interpreter's fp32 arithmetic) warns where the butterfly overflows or makes NaN
pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]


# ---------------------------------------------------------------------------------------------
# kernels: interpreted copies on cpu, compiled ones on cuda
# ---------------------------------------------------------------------------------------------
_MODS = {}


def kmod(device):
    if device not in _MODS:
        from mxkernels.loader import load_kernels
        _MODS[device] = load_kernels(device == "cpu")["triton_rotate"]
    return _MODS[device]


@pytest.fixture(params=DEVICES)
def dev(request):
    return request.param


def KU(device):
    return kmod(device).KernelUnsupported


# ---------------------------------------------------------------------------------------------
# independent input builders (bit patterns; nothing here calls the kernels)
# ---------------------------------------------------------------------------------------------
def f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bits_of(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def edge_blocks(n: int, rng) -> np.ndarray:
    """[k, n] fp32 bit patterns of blocks random data never produces."""
    rows = []

    def blk(**at):
        b = np.zeros(n, np.float32)
        for j, v in at.items():
            b[int(j[1:])] = v
        return b

    inf, nan = np.float32(np.inf), np.float32(np.nan)
    M = np.float32(3e38)
    gauss = rng.standard_normal(n).astype(np.float32)
    b = gauss.copy(); b[3] = nan; rows.append(b)                    # NaN in a block
    b = gauss.copy(); b[n - 1] = inf; rows.append(b)                # Inf
    b = gauss.copy(); b[0] = inf; b[n // 2] = -inf; rows.append(b)  # Inf - Inf -> NaN
    b = gauss.copy(); b[1] = -inf; b[5] = nan; rows.append(b)
    rows.append(blk(j0=M, j1=M, j2=-M, j3=-M))                      # stage-1 overflow
    rows.append(np.full(n, M, np.float32))                          # every sum overflows
    rows.append(np.where(np.arange(n) % 3 == 0, np.float32(-3.4028235e38),
                         np.float32(3.4028235e38)).astype(np.float32))
    rows.append(np.full(n, -0.0, np.float32))                       # all -0
    z = np.zeros(n, np.float32); z[:2] = -0.0; rows.append(z)       # mixed zeros
    z = np.zeros(n, np.float32); z[1::2] = -0.0; rows.append(z)
    rows.append(np.zeros(n, np.float32))
    sub = f32(rng.integers(1, 0x800000, n, dtype=np.uint32)
              | (rng.integers(0, 2, n, dtype=np.uint32) << 31))     # fp32 subnormal inputs
    rows.append(sub)
    rows.append(f32(np.full(n, 1, np.uint32)))                      # 2^-149 everywhere
    b = np.zeros(n, np.float32); b[0] = f32(3); b[1] = f32(1); rows.append(b)   # subnormal ties
    b = np.zeros(n, np.float32); b[0] = np.float32(2.0 ** -126); b[2] = f32(0x80000001)
    rows.append(b)
    rows.append((rng.standard_normal(n) * 2.0 ** -140).astype(np.float32))  # results underflow
    # fp32 ties and near-ties after the rotation (1 + 2^-24 and friends)
    for tail in ([2.0 ** -24], [3 * 2.0 ** -24], [2.0 ** -24, 2.0 ** -60], [-(2.0 ** -24)]):
        b = np.zeros(n, np.float32); b[0] = 1.0
        for j, t in enumerate(tail):
            b[j + 1] = t
        rows.append(b)
    # bf16 ties after the rotation: y_0 = (1 + 2^-8) * 2^k exactly (n = 16, 64, 256)
    b = np.zeros(n, np.float32); b[0] = np.float32(1 + 2.0 ** -8) * np.sqrt(n); rows.append(b)
    b = np.zeros(n, np.float32); b[0] = np.float32(1 + 3 * 2.0 ** -8) * np.sqrt(n)
    rows.append(b)
    b = np.zeros(n, np.float32); b[0] = np.float32(1 + 3 * 2.0 ** -8); b[1] = -(2.0 ** -40)
    rows.append(b)
    # the largest finite inputs: sums overflow, bf16 rounding near the top of the range
    b = np.zeros(n, np.float32); b[0] = f32(0x7F7FFFFF); rows.append(b)
    b = np.zeros(n, np.float32); b[0] = f32(0x7F7FFFFF); b[1] = f32(0x7F7F8000); rows.append(b)
    # amax 2^k - 1 ulp, wide dynamic range, heavy tails
    b = gauss.copy(); b[7] = f32(0x40BFFFFF); rows.append(b)
    rows.append((gauss * np.float32(2.0) ** rng.integers(-60, 60, n)).astype(np.float32))
    rows.append((rng.standard_t(1.5, n) * 100).astype(np.float32))
    rows.append(f32(rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)))  # any bits
    return bits_of(np.stack(rows))


def random_rows(rng, k, n_cols, scales=(1e-30, 1e-3, 1.0, 1e4, 1e30)):
    out = []
    for i in range(k):
        s = scales[i % len(scales)]
        out.append((rng.standard_normal(n_cols) * s).astype(np.float32))
    return bits_of(np.stack(out))


def data_for(n, rng, n_cols=256, k_random=10):
    """[rows, n_cols] fp32 bits: edge blocks laid along the rows, then random rows."""
    e = edge_blocks(n, rng).reshape(-1)
    pad = (-e.size) % n_cols
    e = np.concatenate([e, bits_of(rng.standard_normal(pad).astype(np.float32))])
    return np.concatenate([e.reshape(-1, n_cols), random_rows(rng, k_random, n_cols)])


def as_src(bits, src):
    """(torch tensor, its fp32 widening as numpy float32) for a source dtype."""
    t = torch.from_numpy(f32(bits).copy())
    if src == "bfloat16":
        t = t.to(torch.bfloat16)
    elif src == "float16":
        t = t.to(torch.float16)
    return t, t.float().numpy()


def eq_bits(got, want):
    got = np.asarray(got).view(np.uint32)
    want = np.asarray(want).view(np.uint32)
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"{len(bad)} differ, first {[(tuple(map(int, i)), hex(int(want[tuple(i)])), hex(int(got[tuple(i)]))) for i in bad[:5]]}"


def to_np(t):
    return t.cpu().numpy()


def mx_profiles(fmt):
    f = mxref.formats.get_format(fmt)
    out = []
    for name, p in PROFILES.items():
        try:
            p.check_format(f)
        except Exception:  # noqa: BLE001 - a profile that does not apply to this format
            continue
        if p.rounding != "stochastic":
            out.append(name)
    return out


# ---------------------------------------------------------------------------------------------
# rotate
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("src", ["float32", "bfloat16", "float16"])
def test_rotate_matches_reference(dev, n, src):
    rng = np.random.default_rng(1000 + n)
    x, xw = as_src(data_for(n, rng), src)
    kinds = ["none", "random", "explicit_int8", "explicit_float"] + (["te16"] if n == 16 else [])
    mod = kmod(dev)
    for kind in kinds:
        for rt in ("float32", "bfloat16"):
            if kind == "random":
                signs, d = "random", R.sign_vector("random", n, seed=n + 7, step=3, tensor_id=1)
                kw = dict(seed=n + 7, step=3, tensor_id=1)
            elif kind.startswith("explicit"):
                d = np.where(rng.integers(0, 2, n) == 1, -1, 1).astype(np.int8)
                signs = torch.from_numpy(d) if kind == "explicit_int8" else \
                    torch.from_numpy(d.astype(np.float32))
                kw = {}
            else:
                signs, d, kw = kind, R.sign_vector(kind, n), {}
            want = R.rotate(xw, n, signs=d, round_to=rt)
            got = mod.rotate(x.to(dev), n, signs=signs, round_to=rt, **kw)
            assert got.dtype == torch.float32 and got.shape == x.shape
            assert got.device.type == dev
            eq_bits(to_np(got), want)


@pytest.mark.parametrize("n", [16, 32])
def test_rotate_to_bf16_in_one_pass(dev, n):
    """out_dtype=torch.bfloat16: the bf16 tensor of the RNE-rounded rotation, bit for bit the
    high halves of mxref's round_to='bfloat16' result (what the fp32 output's .to(bfloat16)
    gave: edge data with NaN, Inf, overflow and subnormals), NaN as 0x7FC0; bf16 output needs
    round_to='bfloat16'."""
    rng = np.random.default_rng(2000 + n)
    x, xw = as_src(data_for(n, rng), "float32")
    mod = kmod(dev)
    want = R.rotate(xw, n, signs="random", seed=3, round_to="bfloat16")
    got = mod.rotate(x.to(dev), n, signs="random", seed=3, round_to="bfloat16",
                     out_dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16 and got.shape == x.shape
    hi = (np.asarray(want, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(want, np.float32))
    g = got.cpu().view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(g[~nan], hi[~nan]) and (g[nan] == 0x7FC0).all()
    # the two-pass path it replaces, NaN payloads aside (torch's cast keeps its own)
    two = mod.rotate(x.to(dev), n, signs="random", seed=3).to(torch.bfloat16).cpu()
    assert torch.equal(two.isnan(), got.cpu().isnan())
    keep = ~two.isnan()
    assert torch.equal(two.view(torch.int16)[keep], got.cpu().view(torch.int16)[keep])
    with pytest.raises(KU(dev), match="out_dtype"):
        mod.rotate(x.to(dev), n, out_dtype=torch.bfloat16)
    with pytest.raises(KU(dev), match="out_dtype"):
        mod.rotate(x.to(dev), n, round_to="bfloat16", out_dtype=torch.float16)


@pytest.mark.parametrize("src", ["float32", "bfloat16", "float16"])
def test_rotate_raw_bits_and_shapes(dev, src):
    """Bit-pattern inputs with src_dtype (int and uint views), 3-d inputs, non-contiguous
    inputs (copied), several programs with ragged tiles (rows=2 over 7 blocks)."""
    rng = np.random.default_rng(5)
    mod = kmod(dev)
    x, xw = as_src(random_rows(rng, 6, 64), src)
    raw = x.view(torch.int32 if src == "float32" else torch.int16)
    want = R.rotate(xw, 32, signs="random", seed=11)
    eq_bits(to_np(mod.rotate(raw.to(dev), 32, signs="random", seed=11, src_dtype=src)), want)
    if src == "float32":
        u = torch.from_numpy(raw.numpy().view(np.uint32).copy())   # uint32 patterns
        eq_bits(to_np(mod.rotate(u.to(dev), 32, signs="random", seed=11, src_dtype=src)),
                want)
    x3 = x.reshape(2, 3, 64)
    eq_bits(to_np(mod.rotate(x3.to(dev), 16)), R.rotate(xw.reshape(2, 3, 64), 16))
    xs = x.to(dev)[:, ::2]                                          # [6, 32], non-contiguous
    assert not xs.is_contiguous()
    eq_bits(to_np(mod.rotate(xs, 16)), R.rotate(np.ascontiguousarray(xw[:, ::2]), 16))
    x7 = x.reshape(-1)[:7 * 32].reshape(7, 32)
    eq_bits(to_np(mod.rotate(x7.to(dev), 32, rows=2, num_warps=1)),
            R.rotate(xw.reshape(-1)[:7 * 32].reshape(7, 32), 32))


def test_rotate_empty(dev):
    mod = kmod(dev)
    for shape in [(0, 32), (3, 0), (2, 0, 64)]:
        y = mod.rotate(torch.empty(shape, dtype=torch.float32, device=dev), 32)
        assert tuple(y.shape) == shape and y.dtype == torch.float32
        s, c = mod.quantize_rotated(torch.empty(shape, dtype=torch.bfloat16, device=dev),
                                    "mxfp4", n=32, packed=True)
        assert tuple(c.shape) == shape[:-1] + (shape[-1] // 2,)
        assert tuple(s.shape) == shape[:-1] + (shape[-1] // 32,)


@pytest.mark.parametrize("n", SIZES)
def test_random_signs_match_sign_vector(dev, n):
    mod = kmod(dev)
    for seed, step, tid in [(0, 0, 0), (1, 1, 1), (2 ** 40 + 3, 7, 9), (2 ** 64 - 1, 2 ** 31 + 5,
                                                                         2 ** 32 - 1)]:
        got = mod.random_signs(n, seed=seed, step=step, tensor_id=tid, device=dev)
        assert got.dtype == torch.int8 and got.device.type == dev
        want = R.sign_vector("random", n, seed=seed, step=step, tensor_id=tid)
        assert (to_np(got) == want).all(), (seed, step, tid)


# ---------------------------------------------------------------------------------------------
# quantize_rotated
# ---------------------------------------------------------------------------------------------
def _check_mx(mod, dev, x, xw, fmt, prof, n, signs, d, rt, packed=False, **kw):
    ref = R.quantize_rotated(xw, fmt, prof, n, signs=d, round_to=rt)
    s, c = mod.quantize_rotated(x.to(dev), fmt, prof, n, signs=signs, round_to=rt,
                                packed=packed, **kw)
    assert s.dtype == torch.uint8 and c.dtype == torch.uint8 and s.device.type == dev
    assert (to_np(s) == ref.scales).all(), (fmt, prof, n, rt, np.argwhere(to_np(s) != ref.scales)[:4])
    want_c = ref.packed() if packed else ref.codes
    assert (to_np(c) == want_c).all(), (fmt, prof, n, rt, np.argwhere(to_np(c) != want_c)[:4])


MX_FORMATS = ["mxfp4", "mxfp8_e4m3", "mxfp6_e2m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxint8"]


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_quantize_rotated_mx_every_profile(dev, fmt):
    """Every profile that applies to the format (ocp and rceil among them), each at two
    rotation sizes (all of 16..256 covered), fp32 and bf16 sources, both round_to, edge blocks
    included."""
    rng = np.random.default_rng(hash(fmt) % 2 ** 32)
    mod = kmod(dev)
    profs = mx_profiles(fmt)
    assert "ocp" in profs and "rceil" in profs
    data = {}
    for i, n in enumerate(SIZES):
        src = ("float32", "bfloat16")[i % 2]
        data[n] = as_src(data_for(n, rng, k_random=6), src) + (R.sign_vector("random", n,
                                                                            seed=i),)
    for j, prof in enumerate(profs):       # each profile at two sizes, all sizes covered
        for k in (j, j + 2):
            n = SIZES[k % len(SIZES)]
            x, xw, d = data[n]
            rt = ("float32", "bfloat16")[(j + k // 2) % 2]
            _check_mx(mod, dev, x, xw, fmt, prof, n, torch.from_numpy(d), d, rt)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e4m3", "mxfp6_e2m3"])
@pytest.mark.parametrize("prof", ["ocp", "rceil"])
def test_quantize_rotated_mx_ocp_rceil(dev, n, fmt, prof):
    rng = np.random.default_rng(n * 7 + len(fmt))
    mod = kmod(dev)
    for src in ("float32", "bfloat16", "float16"):
        x, xw = as_src(data_for(n, rng, k_random=4), src)
        for rt in ("float32", "bfloat16"):
            _check_mx(mod, dev, x, xw, fmt, prof, n, "none", "none", rt,
                      packed=(fmt != "mxfp8_e4m3"))
    if n == 16:
        x, xw = as_src(data_for(n, rng, k_random=2), "bfloat16")
        _check_mx(mod, dev, x, xw, fmt, prof, n, "te16", "te16", "float32")


def test_quantize_rotated_ragged_and_tiles(dev):
    """n = 16 with a length that is an odd multiple of 16: the last MX block is ragged (zero
    padded, as mxref); several programs (rows=1/2) with a partial last tile; 3-d input."""
    rng = np.random.default_rng(77)
    mod = kmod(dev)
    for cols in (16, 48, 80):
        x, xw = as_src(random_rows(rng, 5, cols), "bfloat16")
        for rows in (None, 1, 2):
            _check_mx(mod, dev, x, xw, "mxfp4", "ocp", 16, "te16", "te16", "float32",
                      packed=True, rows=rows)
            _check_mx(mod, dev, x, xw, "mxfp8_e4m3", "rceil", 16, "none", "none", "bfloat16",
                      rows=rows, num_warps=2)
    x, xw = as_src(random_rows(rng, 6, 128), "float32")
    _check_mx(mod, dev, x.reshape(2, 3, 128), xw.reshape(2, 3, 128), "mxfp6_e3m2", "ocp", 64,
              "none", "none", "float32", packed=True, rows=2)


def _check_nvfp4(mod, dev, x3, xw3, prof, n, signs, d, rt, packed=False, **kw):
    s, c, ts = mod.quantize_rotated(x3.to(dev), "nvfp4", prof, n, signs=signs, round_to=rt,
                                    packed=packed, **kw)
    assert ts.dtype == torch.float32 and tuple(ts.shape) == (x3.shape[0],)
    for t in range(x3.shape[0]):
        ref = R.quantize_rotated(xw3[t], "nvfp4", prof, n, signs=d, round_to=rt)
        assert (to_np(s[t]) == ref.scales).all(), (prof, n, rt, t)
        want_c = ref.packed() if packed else ref.codes
        assert (to_np(c[t]) == want_c).all(), (prof, n, rt, t)
        assert np.float32(ref.tensor_scale).view(np.uint32) == \
            to_np(ts[t:t + 1]).view(np.uint32)[0], (prof, n, rt, t)


@pytest.mark.parametrize("prof", ["ocp"])
def test_quantize_rotated_nvfp4(dev, prof):
    """[T, R, C] inputs, each t its own tensor (own global amax of the rotated values); edge
    tensors: NaN / Inf blocks, all zeros, subnormal-only, overflow-prone. (The te_nvfp4 and
    torchao_nvfp4 op orders are checked on their golden files below: the reference's own
    Numba compilation for each order would dominate this file's run time.)"""
    rng = np.random.default_rng(len(prof))
    mod = kmod(dev)
    for i, n in enumerate(SIZES):
        c = 256
        e = edge_blocks(n, rng).reshape(-1)
        e = np.concatenate([e, np.zeros((-e.size) % (4 * c), np.uint32)]).reshape(-1, 4, c)
        x3b = np.concatenate([random_rows(rng, 4, c)[None], e[:4],
                              np.zeros((1, 4, c), np.uint32),                 # all zero
                              bits_of(np.full((1, 4, c), np.float32(2.0 ** -140)))])
        src = ("float32", "bfloat16")[i % 2]
        x3, xw3 = as_src(x3b, src)
        d = R.sign_vector("random", n, seed=3 * i)
        rt = ("float32", "bfloat16")[(i // 2) % 2]
        _check_nvfp4(mod, dev, x3, xw3, prof, n, torch.from_numpy(d), d, rt,
                     packed=(i % 2 == 0))
        if n in (16, 128):     # the (chunks, T) grid: one tensor per program column
            _check_nvfp4(mod, dev, x3[:3], xw3[:3], prof, n, "none", "none",
                         ("float32", "bfloat16")[n == 16], pack_tensors=False, rows=2)
    x, xw = as_src(random_rows(rng, 6, 32), "float16")          # 2-d: one tensor per row
    _check_nvfp4(mod, dev, x, xw, prof, 16, "te16", "te16", "float32", rows=2)
    _check_nvfp4(mod, dev, x, xw, prof, 16, "te16", "te16", "bfloat16", rows=1,
                 pack_tensors=False)


# ---------------------------------------------------------------------------------------------
# the golden corpus (ops rotate and quantize_rotated), fed as mxref verify feeds a backend
# ---------------------------------------------------------------------------------------------
def _golden_files(op, levels):
    m = json.loads((GOLDEN / "MANIFEST.json").read_text())["files"]
    return sorted(k for k, v in m.items() if v["op"] == op and v["level"] in levels)


def _groups(keys):
    out = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return [(k, np.array(v)) for k, v in out.items()]


def _torch_bits(a, src):
    if src == "float32":
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int32).copy())
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int16).copy())


@pytest.mark.parametrize("path", _golden_files("rotate", (0, 1)))
def test_golden_rotate(dev, path):
    mod = kmod(dev)
    t = read_golden(GOLDEN / path)
    src = path.rsplit("__", 1)[1].split(".")[0]
    xb = column_numpy(t, "src_bits")
    n = column_numpy(t, "n").astype(int)
    signs = column_numpy(t, "signs")
    kinds = column_numpy(t, "sign_kind")
    seed, step, tid = (column_numpy(t, c) for c in ("seed", "step", "tensor_id"))
    keys = [(int(n[r]), signs[r, :n[r]].tobytes()) for r in range(len(n))]
    for (nn, _), rr in _groups(keys):
        sv = torch.from_numpy(signs[rr[0], :nn].copy())
        x = _torch_bits(xb[rr], src).to(dev)
        for rt, col in (("float32", "exp_butterfly"), ("bfloat16", "exp_butterfly_bf16")):
            got = to_np(mod.rotate(x, nn, signs=sv, round_to=rt, src_dtype=src))
            eq_bits(got, column_numpy(t, col)[rr])
    for r in np.flatnonzero(kinds == "random"):
        got = mod.random_signs(int(n[r]), seed=int(seed[r]), step=int(step[r]),
                               tensor_id=int(tid[r]), device=dev)
        assert (to_np(got) == signs[r, :n[r]]).all()


_QR_FILES = _golden_files("quantize_rotated", (0, 1))


FULL = os.environ.get("MXREF_ROTATE_FULL", "0") == "1"


def _qr_selected(path):
    """L0 and L1 files of the ocp and rceil profiles (every format; NVFP4 ocp) and the L0
    files of the NVFP4 op orders te_nvfp4 / torchao_nvfp4. The other profiles' files hold the
    same inputs under other knobs, which test_quantize_rotated_mx_every_profile checks against
    mxref; MXREF_ROTATE_FULL=1 runs every L0 and L1 file (several minutes)."""
    lvl, _, name = path.split("/")
    fmt, prof = name.split("__")[:2]
    return FULL or prof in ("ocp", "rceil") or (fmt == "nvfp4" and lvl == "L0")


@pytest.mark.corpus_twin
@pytest.mark.parametrize("path", [p for p in _QR_FILES if _qr_selected(p)])
def test_golden_quantize_rotated(dev, path):
    mod = kmod(dev)
    t = read_golden(GOLDEN / path)
    fmt, prof, src = path.split("/")[-1][:-len(".arrow")].split("__")
    bs = mxref.formats.get_format(fmt).block_size
    xb = column_numpy(t, "src_bits")
    n = column_numpy(t, "n").astype(int)
    signs = column_numpy(t, "signs")
    rts = column_numpy(t, "round_to")
    es, ec = column_numpy(t, "exp_scales"), column_numpy(t, "exp_codes")
    keys = [(int(n[r]), signs[r, :n[r]].tobytes(), str(rts[r])) for r in range(len(n))]
    for (nn, _, rt), rr in _groups(keys):
        sv = torch.from_numpy(signs[rr[0], :nn].copy())
        x = _torch_bits(xb[rr], src).to(dev)
        out = mod.quantize_rotated(x, fmt, prof, nn, signs=sv, round_to=rt, src_dtype=src)
        s, c = to_np(out[0]), to_np(out[1])
        assert (s == es[rr]).all(), (path, nn, rt)
        if fmt == "nvfp4":
            assert (c == ec[rr]).all(), (path, nn, rt)
            ts = to_np(out[2]).view(np.uint32)
            assert (ts == column_numpy(t, "exp_tensor_scale")[rr]).all(), (path, nn, rt)
        else:
            care = ~np.repeat(es[rr] == 0xFF, bs, axis=1)[:, :ec.shape[1]]
            assert (c[care] == ec[rr][care]).all(), (path, nn, rt)


# ---------------------------------------------------------------------------------------------
# planted bugs: the same checks fail on a mutated copy of the module
# ---------------------------------------------------------------------------------------------
MUTATIONS = {
    # stages in the wrong order (h = n/2 first)
    "stage_order": ("v = tl.reshape(v, (R * N // (2 << s), 2, 1 << s))",
                    "v = tl.reshape(v, (R * N // (2 << (LOG2N - 1 - s)), 2, "
                    "1 << (LOG2N - 1 - s)))"),
    # the butterfly rounded once at the end through float64 instead of per operation in fp32
    "float64": ("v = b.to(tl.float32, bitcast=True)\n",
                "v = b.to(tl.float32, bitcast=True).to(tl.float64)\n"),
    # bf16 by truncation instead of RNE
    "bf16_trunc": ("y = (y + (0x7FFF + ((y >> 16) & 1))) & -65536", "y = y & -65536"),
}
# planted bugs in the fast-encoder path of rotate_mx_quantize_kernel (the rotation is right)
ENCODER_MUTATIONS = {
    # the sign of the rotated value dropped on the way into the fast encoder
    "fast_sign": ("_fast_orient(y & 0x7FFFFFFF, y, g_ok", "_fast_orient(y & 0x7FFFFFFF, "
                  "y & 0x7FFFFFFF, g_ok"),
    # no saturation under a floor scale rule (ocp): codes above max normal
    "fast_saturate": ('"SATURATE": get_profile(profile).scale_rule not in ("rceil", "ceil")',
                      '"SATURATE": False'),
    # the dispatch guard gone: profiles / formats the fast encoder does not implement use it
    "fast_everywhere": ('ok = _fast_supports(fmt, profile, "float32") and q["BLOCK"] == 32',
                        'ok = q["BLOCK"] == 32'),
}


def _mutant(name):
    """An interpreted copy of triton_rotate with one planted bug (its triton_quant and
    triton_sr imports bound to the interpreted copies, as the loader does)."""
    from mxkernels.loader import load_kernels
    ks = load_kernels(True)
    old, new = {**MUTATIONS, **ENCODER_MUTATIONS}[name]
    src = Path(importlib.util.find_spec("mxkernels.triton_rotate").origin).read_text()
    assert src.count(old) == 1, name
    src = src.replace(old, new)
    if name == "float64":
        src = src.replace("y = (v * c).to(tl.int32, bitcast=True)",
                          "y = (v * c.to(tl.float64)).to(tl.float32).to(tl.int32, bitcast=True)")
    prev = os.environ.get("TRITON_INTERPRET")
    deps = ("mxkernels.triton_common", "mxkernels.triton_quant", "mxkernels.triton_fast",
            "mxkernels.triton_sr")                             # what triton_rotate imports
    saved = {d: sys.modules.get(d) for d in deps}
    os.environ["TRITON_INTERPRET"] = "1"
    for d in deps:
        sys.modules[d] = ks[d.rsplit(".", 1)[1]]
    try:
        mod = type(sys)(f"triton_rotate_mutant_{name}")
        mod.__file__ = f"<mutant {name}>"
        exec(compile(src, f"<triton_rotate mutant {name}>", "exec"), mod.__dict__)
    finally:
        if prev is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = prev
        for d, m in saved.items():
            if m is None:
                sys.modules.pop(d, None)
            else:
                sys.modules[d] = m
    return mod


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_planted_bug_is_caught(name):
    mod = _mutant(name)
    assert type(mod.rotate_kernel).__name__ == "InterpretedFunction"
    rng = np.random.default_rng(3)
    caught = []
    for n in (32, 128):
        x, xw = as_src(data_for(n, rng, k_random=4), "float32")
        rt = "bfloat16" if name == "bf16_trunc" else "float32"
        got = to_np(mod.rotate(x, n, signs="random", seed=1, round_to=rt)).view(np.uint32)
        want = R.rotate(xw, n, signs="random", seed=1, round_to=rt).view(np.uint32)
        caught.append(bool((got != want).any()))
        s, c = mod.quantize_rotated(x, "mxfp8_e4m3", "ocp", n, signs="random", seed=1,
                                    round_to=rt)
        ref = R.quantize_rotated(xw, "mxfp8_e4m3", "ocp", n, signs="random", seed=1,
                                 round_to=rt)
        caught.append(bool((to_np(c) != ref.codes).any() or (to_np(s) != ref.scales).any()))
    assert all(caught), caught
    # the unmutated module passes the very same checks
    good = kmod("cpu")
    x, xw = as_src(data_for(32, rng, k_random=4), "float32")
    eq_bits(to_np(good.rotate(x, 32, signs="random", seed=1)),
            R.rotate(xw, 32, signs="random", seed=1))


@pytest.mark.parametrize("name", list(ENCODER_MUTATIONS))
def test_planted_encoder_bug_is_caught(name):
    """The quantize_rotated checks catch a planted bug in the fast-encoder path (and the
    dispatch to it); the unmutated module passes them."""
    mod = _mutant(name)
    rng = np.random.default_rng(4)
    x, xw = as_src(data_for(32, rng, k_random=4), "bfloat16")
    cases = [("mxint8", "ocp"), ("mxfp8_e4m3", "te_mxfp8")] if name == "fast_everywhere" \
        else [("mxfp4", "ocp"), ("mxfp8_e4m3", "ocp")]
    for fmt, prof in cases:
        ref = R.quantize_rotated(xw, fmt, prof, 32, signs="random", seed=2)
        s, c = mod.quantize_rotated(x, fmt, prof, 32, signs="random", seed=2)
        assert (to_np(c) != ref.codes).any() or (to_np(s) != ref.scales).any(), (fmt, prof)
        s, c = kmod("cpu").quantize_rotated(x, fmt, prof, 32, signs="random", seed=2)
        assert (to_np(c) == ref.codes).all() and (to_np(s) == ref.scales).all(), (fmt, prof)


def test_quantize_rotated_encoder_dispatch():
    """The fast encoder is used exactly where triton_fast supports the (format, profile) with
    fp32 input; encoder='generic' gives the same bits on edge blocks; encoder='fast' refuses
    what it does not implement."""
    mod = kmod("cpu")
    from mxkernels import triton_fast as tf
    for fmt in MX_FORMATS:
        for prof in mx_profiles(fmt):
            ce = mod.rotate_constexprs("rotate_mx_quantize", 32, fmt=fmt, profile=prof)
            assert ce["FAST"] == tf.supports(fmt, prof, "float32"), (fmt, prof)
            assert not mod.rotate_constexprs("rotate_mx_quantize", 32, fmt=fmt, profile=prof,
                                             encoder="generic")["FAST"]
    assert {p for p in mx_profiles("mxfp4") if mod.rotate_constexprs(
        "rotate_mx_quantize", 32, fmt="mxfp4", profile=p)["FAST"]} == \
        {"ocp", "rceil", "triton_kernels_round_down"}
    with pytest.raises(mod.KernelUnsupported, match="encoder='fast'"):
        mod.rotate_constexprs("rotate_mx_quantize", 32, fmt="mxint8", encoder="fast")
    with pytest.raises(mod.KernelUnsupported, match="encoder="):
        mod.rotate_constexprs("rotate_mx_quantize", 32, fmt="mxfp4", encoder="bogus")
    rng = np.random.default_rng(9)
    x, _ = as_src(data_for(16, rng, n_cols=96, k_random=2), "float32")   # ragged last block
    for fmt, prof in (("mxfp4", "ocp"), ("mxfp8_e5m2", "rceil")):
        a = mod.quantize_rotated(x, fmt, prof, 16, signs="te16", encoder="fast", packed=True)
        b = mod.quantize_rotated(x, fmt, prof, 16, signs="te16", encoder="generic",
                                 packed=True)
        assert all((to_np(u) == to_np(v)).all() for u, v in zip(a, b)), (fmt, prof)


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------
def test_bad_input_raises_kernel_unsupported():
    mod = kmod("cpu")
    ku = mod.KernelUnsupported
    x = torch.zeros(2, 64)
    cases = [
        (lambda: mod.rotate(x, 8), "rotation size"),
        (lambda: mod.rotate(x, 512), "rotation size"),
        (lambda: mod.rotate(x, 32.0), "rotation size"),
        (lambda: mod.rotate(torch.zeros(2, 48), 32), "multiple of the rotation size"),
        (lambda: mod.rotate(torch.zeros(()), 16), "0-d"),
        (lambda: mod.rotate(torch.zeros(2, 64, dtype=torch.float64), 16), "bit patterns"),
        (lambda: mod.rotate(torch.zeros(2, 64, dtype=torch.int64), 16), "bit patterns"),
        (lambda: mod.rotate(torch.zeros(2, 64, dtype=torch.int16), 16, src_dtype="float32"),
         "32-bit pattern"),
        (lambda: mod.rotate(x, 16, src_dtype="bfloat16"), "src_dtype"),
        (lambda: mod.rotate(x, 32, signs="te16"), "n=16 only"),
        (lambda: mod.rotate(x, 16, signs="bogus"), "signs="),
        (lambda: mod.rotate(x, 16, signs=torch.ones(8)), "shape (16,)"),
        (lambda: mod.rotate(x, 16, signs=torch.zeros(16)), "+1 or -1"),
        (lambda: mod.rotate(x, 16, signs=torch.ones(16, dtype=torch.bool)), "integer or float"),
        (lambda: mod.rotate(x, 16, round_to="float16"), "round_to"),
        (lambda: mod.rotate(x, 16, rows=3), "power of two"),
        (lambda: mod.rotate(x.numpy(), 16), "torch tensor"),
        (lambda: mod.random_signs(16, seed=1.5), "integer"),
        (lambda: mod.quantize_rotated(torch.zeros(64), "nvfp4", n=16), "T tensors"),
        (lambda: mod.quantize_rotated(x, "mxfp4", "sr_none_such", n=16), None),
    ]
    for fn, msg in cases:
        with pytest.raises(Exception) as ei:
            fn()
        if msg is not None:
            assert isinstance(ei.value, ku), (msg, ei.value)
            assert msg in str(ei.value), (msg, str(ei.value))
    # stochastic rounding profiles are refused by the shared constexpr builder
    sr = mxref.profiles.get_profile("ocp")
    import dataclasses
    sr = dataclasses.replace(sr, name="ocp_sr", rounding="stochastic")
    with pytest.raises(ku, match="stochastic"):
        mod.quantize_rotated(x, "mxfp4", sr, n=32)
    rag = dataclasses.replace(mxref.profiles.get_profile("ocp"), name="ocp_rag", ragged="error")
    with pytest.raises(ku, match="ragged"):
        mod.quantize_rotated(torch.zeros(2, 48), "mxfp4", rag, n=16)

