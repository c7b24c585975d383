"""mxref.rotate: Hadamard rotations, the butterfly contract, the exact variant, rotated
quantization.

Expected values come from implementations written here, independent of mxref.rotate:

* ``py_butterfly``: the canonical butterfly as a plain Python loop on np.float32 scalars (the
  host FPU's IEEE fp32 add/mul), against mxref's integer-domain emulation;
* ``oracle_exact``: the exact sum in fractions.Fraction, rounded once by a binary search over
  fp32 (or bf16) bit patterns comparing squares, so 1/sqrt(n) never becomes a float;
* ``philox4x32_10``: a pure-Python Philox (Random123 known answers) and, where triton is
  installed, Triton's own ``tl.random.philox`` in the interpreter.
"""
import functools
import math
import os
import subprocess
import sys
from fractions import Fraction

import ml_dtypes
import numba as nb
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle as O  # noqa: E402

import mxref  # noqa: E402
import mxref.rotate  # noqa: E402
R = sys.modules["mxref.rotate"]  # the module (mxref.rotate is also the function)
from mxref.errors import AxisError, MXRefError, UnsupportedDtypeError  # noqa: E402

SIZES = [16, 32, 64, 128, 256]
U = 2.0 ** -24
TE16 = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]


# ---------------------------------------------------------------------------------------------
# independent helpers
# ---------------------------------------------------------------------------------------------
def f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bits_of(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def value(b):
    """fp32 bits -> Fraction, or 'nan' / '+inf' / '-inf' (sign of zero dropped)."""
    v = O.fp32_bits_to_value(int(b))
    if isinstance(v, str):
        return v
    return -v[1] if v[0] else v[1]


def sylvester(n):
    """H_ij = (-1)^popcount(i & j), written from the closed form, not the recursion."""
    return [[-1 if bin(i & j).count("1") % 2 else 1 for j in range(n)] for i in range(n)]


def nan_aware_equal(a, b):
    a = np.asarray(a, np.uint32)
    b = np.asarray(b, np.uint32)
    an = (a & 0x7FFFFFFF) > 0x7F800000
    bn = (b & 0x7FFFFFFF) > 0x7F800000
    return np.where(an | bn, an & bn, a == b)


def pattern_parts(p, target):
    """(M, E) with value = M 2^E of a non-negative magnitude pattern of fp32 (or bf16, p << 16);
    the Inf pattern reads as 2^128, so rounding past the largest finite value lands on it."""
    b = p if target == "float32" else p << 16
    if b == 0x7F800000:
        return 1, 128
    e = b >> 23
    return (b & 0x7FFFFF, -149) if e == 0 else ((b & 0x7FFFFF) | 1 << 23, e - 150)


def cmp_scaled_square(mant, e, n, num, den):
    """Sign of (mant 2^e)^2 n - (num/den)^2, on integers."""
    lhs = mant * mant * n * den * den
    rhs = num * num
    if e >= 0:
        lhs <<= 2 * e
    else:
        rhs <<= -2 * e
    return (lhs > rhs) - (lhs < rhs)


def round_sqrt_scaled(t, n, target="float32"):
    """Bits of RNE(t / sqrt(n)) in fp32 or bf16 (as fp32 bits), t a Fraction != 0.

    The largest pattern p with value(p) <= |t|/sqrt(n) is found by bisection on
    value(p)^2 n <= t^2 (integers); then p or p+1 by comparing with the midpoint's square; a
    tie (only possible when sqrt(n) is rational) goes to the even pattern."""
    top = 0x7F800000 if target == "float32" else 0x7F80
    num, den = abs(t.numerator), t.denominator

    def le(p):
        return cmp_scaled_square(*pattern_parts(p, target), n, num, den) <= 0

    if le(top):
        p = top
    else:
        lo, hi = 0, top
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if le(mid) else (lo, mid)
        p = lo
        (m0, e0), (m1, e1) = pattern_parts(p, target), pattern_parts(p + 1, target)
        base = min(e0, e1) - 1
        mid_mant = ((m0 << (e0 - base)) + (m1 << (e1 - base))) >> 1
        c = cmp_scaled_square(mid_mant, base, n, num, den)
        if c < 0 or (c == 0 and p % 2 == 1):
            p += 1
    sign = 0x80000000 if t < 0 else 0
    return (p if target == "float32" else p << 16) | sign


@functools.lru_cache(maxsize=None)
def sylvester_signs(n):
    return [[int(v < 0) for v in row] for row in sylvester(n)]


def oracle_exact(xbits, d, target="float32"):
    """Exact rotation of one block (fp32 bits) with signs d, rounded once: the documented
    rules (NaN in the block -> NaN; Inf terms: one sign -> that Inf, both -> NaN; a zero sum is
    -0 iff every term is -0)."""
    n = len(xbits)
    h = sylvester_signs(n)
    vals = [value(b) for b in xbits]
    if "nan" in vals:
        return [0x7FC00000] * n
    xs = [(int(b) >> 31) ^ int(dj < 0) for b, dj in zip(xbits, d)]
    live = [j for j, v in enumerate(vals) if v != 0]
    out = []
    for i in range(n):
        signs = [xs[j] ^ h[i][j] for j in range(n)]
        infs = {signs[j] for j in live if isinstance(vals[j], str)}
        if infs:
            out.append(0x7FC00000 if len(infs) == 2 else (0xFF800000 if 1 in infs else 0x7F800000))
            continue
        t = sum((-abs(vals[j]) if signs[j] else abs(vals[j]) for j in live), Fraction(0))
        if t == 0:
            out.append(0x80000000 if not live and all(signs) else 0)
        else:
            out.append(round_sqrt_scaled(t, n, target))
    return out


def oracle_inv_sqrt_bits(n):
    return round_sqrt_scaled(Fraction(1), n)


def py_butterfly(xbits, d, n):
    """The documented order, on np.float32 scalars (IEEE fp32 RNE per operation)."""
    c = np.uint32(oracle_inv_sqrt_bits(n)).view(np.float32)
    with np.errstate(all="ignore"):
        v = [np.uint32(b).view(np.float32) * np.float32(s) for b, s in zip(xbits, d)]
        h = 1
        while h < n:
            for j in range(n):
                if j & h == 0:
                    a, b = v[j], v[j + h]
                    v[j], v[j + h] = a + b, a - b
            h *= 2
        return [int(np.float32(x * c).view(np.uint32)) for x in v]


def random_blocks(rng, count, n, spread=12):
    """Gaussian-like blocks with per-block magnitude 2^k and per-element exponent spread."""
    k = rng.integers(-40, 40, (count, 1))
    x = rng.standard_normal((count, n)) * np.exp2(k - rng.integers(0, spread, (count, n)))
    return x.astype(np.float32)


def ulp_key(b):
    """Monotone integer key of fp32 bits: consecutive floats differ by 1 (both zeros = 0)."""
    b = np.asarray(b, np.int64)
    mag = b & 0x7FFFFFFF
    return np.where(b >> 31, -mag, mag)


# ---------------------------------------------------------------------------------------------
# H_n, constants, sign vectors
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", SIZES)
def test_hadamard_is_sylvester(n):
    h = R.hadamard(n)
    assert h.dtype == np.int8 and h.shape == (n, n)
    np.testing.assert_array_equal(h, np.array(sylvester(n), np.int8))
    h64 = h.astype(np.int64)
    np.testing.assert_array_equal(h64 @ h64, n * np.eye(n, dtype=np.int64))
    np.testing.assert_array_equal(h, h.T)
    half = R.hadamard(n // 2) if n > 16 else np.array(sylvester(n // 2), np.int8)
    np.testing.assert_array_equal(h, np.block([[half, half], [half, -half]]))


@pytest.mark.parametrize("bad", [0, 1, 8, 48, 512, 32.0, True, "32", None])
def test_bad_rotation_size(bad):
    with pytest.raises(R.RotationSizeError, match=r"n=.*(16, 32, 64, 128, 256)"):
        R.hadamard(bad)
    with pytest.raises(R.RotationSizeError):
        R.rotate(np.zeros(256, np.float32), bad)


@pytest.mark.parametrize("n", SIZES)
def test_inv_sqrt_constant(n):
    """fl32(1/sqrt n) from the Fraction oracle; 0x3F3504F3 = fl32(1/sqrt 2) scaled for n=32,128."""
    want = oracle_inv_sqrt_bits(n)
    assert R.inv_sqrt_n_bits(n) == want
    m = n.bit_length() - 1
    assert want == ((127 - m // 2) << 23 if m % 2 == 0 else 0x3F3504F3 - ((m - 1) // 2 << 23))


def test_sign_vector_kinds():
    for n in SIZES:
        np.testing.assert_array_equal(R.sign_vector("none", n), np.ones(n, np.int8))
    te = R.sign_vector("te16", 16)
    assert te.dtype == np.int8 and te.tolist() == TE16
    with pytest.raises(R.SignVectorError, match="n=16 only, not n=32"):
        R.sign_vector("te16", 32)
    with pytest.raises(R.SignVectorError, match="not a known kind"):
        R.sign_vector("rademacher", 32)
    explicit = np.array(TE16 * 2, np.int64)
    assert R.sign_vector(explicit, 32).tolist() == TE16 * 2
    assert R.sign_vector(TE16, 16).dtype == np.int8          # a list of ints is fine


@pytest.mark.parametrize("signs,msg", [
    (np.ones(16, np.float32), "integer dtype"),
    (np.ones(16, bool), "integer dtype"),
    (np.ones(15, np.int8), r"shape \(16,\)"),
    (np.ones((2, 8), np.int8), r"shape \(16,\)"),
    (np.array([1] * 15 + [0], np.int8), "entry 15 is 0"),
    (np.array([2] + [1] * 15), "entry 0 is 2"),
])
def test_bad_sign_arrays(signs, msg):
    with pytest.raises(R.SignVectorError, match=msg):
        R.rotate(np.zeros(16, np.float32), 16, signs=signs)


@pytest.mark.parametrize("seed,step,tid", [
    (0, 0, 0), (1234567, 3, 9), (2 ** 40 + 5, 2 ** 32 + 7, 2 ** 33 - 1),
    (2 ** 64 - 1, 2 ** 32 - 1, 0), (-1, -1, -2)])
def test_random_signs_are_philox(seed, step, tid):
    """d_i = -1 iff bit 0 of word 0 of Philox4x32-10((i, step, tensor_id, 0), seed) is set
    (all three reduced mod 2^64 / 2^32), vs a pure-Python Philox."""
    assert O.philox4x32_10((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    s = seed % 2 ** 64
    for n in (16, 256):
        want = [-1 if O.philox4x32_10((i, step % 2 ** 32, tid % 2 ** 32, 0),
                                     (s & 0xFFFFFFFF, s >> 32))[0] & 1 else 1 for i in range(n)]
        got = R.sign_vector("random", n, seed=seed, step=step, tensor_id=tid)
        assert got.dtype == np.int8 and got.tolist() == want
    # with step = tensor_id = 0 the words are the SR stream's, i.e. tl.randint(seed, i)
    words = np.empty(64, np.uint32)
    R._philox_words(np.uint64(s), np.uint64(0), np.uint64(0), words)
    np.testing.assert_array_equal(words, mxref.random_bits((64,), seed=s))


def test_random_signs_depend_on_every_parameter():
    base = R.sign_vector("random", 256, seed=7, step=1, tensor_id=2)
    assert 64 < (base < 0).sum() < 192
    for kw in (dict(seed=8, step=1, tensor_id=2), dict(seed=7, step=2, tensor_id=2),
               dict(seed=7, step=1, tensor_id=3), dict(seed=7 + 2 ** 32, step=1, tensor_id=2)):
        assert (R.sign_vector("random", 256, **kw) != base).any(), kw


@pytest.mark.parametrize("kw", [dict(seed=1.5), dict(step="1"), dict(tensor_id=True),
                                dict(seed=None)])
def test_non_integer_generator_parameters(kw):
    with pytest.raises(R.RotationOptionError, match=list(kw)[0]):
        R.sign_vector("random", 32, **kw)


TRITON_PHILOX = """
import numpy as np, torch, triton, triton.language as tl
@triton.jit
def k(out, rnd, seed, step, tid, N: tl.constexpr):
    i = tl.arange(0, N)
    c0 = i.to(tl.uint32)
    c1 = (i * 0 + step).to(tl.uint32)
    c2 = (i * 0 + tid).to(tl.uint32)
    w, _, _, _ = tl.random.philox(seed, c0, c1, c2, c0 * 0)
    tl.store(out + i, w.to(tl.int32, bitcast=True))
    tl.store(rnd + i, tl.randint(seed, i))
for seed, step, tid in ((1234567, 0, 0), (2**40 + 5, 3, 11), (99, 2**31 + 5, 2**32 - 1)):
    out = torch.empty(256, dtype=torch.int32)
    rnd = torch.empty(256, dtype=torch.int32)
    k[(1,)](out, rnd, seed, step, tid, N=256)
    print(seed, step, tid, " ".join(str(int(v)) for v in out.numpy().view(np.uint32)),
          "|", " ".join(str(int(v)) for v in rnd.numpy().view(np.uint32)))
"""


def test_random_signs_match_triton_philox():
    """A Triton kernel reproduces the sign stream with tl.random.philox (interpreter, no GPU);
    with step = tensor_id = 0 it is tl.randint(seed, i)."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    res = subprocess.run([sys.executable, "-c", TRITON_PHILOX], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 3
    for line in lines:
        head, rnd = line.split("|")
        seed, step, tid, *words = head.split()
        seed, step, tid = int(seed), int(step), int(tid)
        words = np.array([int(w) for w in words], np.uint32)
        d = R.sign_vector("random", 256, seed=seed, step=step, tensor_id=tid)
        np.testing.assert_array_equal(np.where(words & 1, -1, 1), d)
        ours = np.empty(256, np.uint32)
        R._philox_words(np.uint64(seed), np.uint64(step), np.uint64(tid), ours)
        np.testing.assert_array_equal(ours, words)
        if step == tid == 0:
            np.testing.assert_array_equal(np.array([int(w) for w in rnd.split()], np.uint32), words)


# ---------------------------------------------------------------------------------------------
# the integer-domain fp32 adder and the butterfly vs the host FPU
# ---------------------------------------------------------------------------------------------
@nb.njit
def _add_many(a, b, out):
    for i in range(a.size):
        out[i] = R.f32_add(np.int64(a[i]), np.int64(b[i]))


def _adder_cases(rng):
    n = 40000
    a = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    # b: random, or a's exponent shifted by 0..40 binades (cancellation, the sticky-proxy edge
    # at 36/37), or subnormal, or special
    e = ((a >> 23) & 0xFF).astype(np.int64) - rng.integers(-2, 41, n)
    e = np.clip(e, 0, 254)
    b = (rng.integers(0, 2, n).astype(np.uint32) << 31) | (e.astype(np.uint32) << 23) | \
        rng.integers(0, 1 << 23, n).astype(np.uint32)
    pick = rng.integers(0, 8, n)
    b = np.where(pick == 0, rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32), b)
    b = np.where(pick == 1, a ^ np.uint32(0x80000000), b)               # exact cancellation
    b = np.where(pick == 2, (a ^ np.uint32(0x80000000)) + np.uint32(1), b)
    b = np.where(pick == 3, rng.integers(0, 1 << 24, n).astype(np.uint32)
                 | (rng.integers(0, 2, n).astype(np.uint32) << 31), b)   # subnormal / tiny
    special = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFF800001, 1,
                        0x80000001, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x007FFFFF], np.uint32)
    a = np.concatenate([a, np.repeat(special, special.size)])
    b = np.concatenate([b, np.tile(special, special.size)])
    return a, b


def test_f32_add_matches_host_fpu():
    rng = np.random.default_rng(11)
    a, b = _adder_cases(rng)
    got = np.empty(a.size, np.uint32)
    _add_many(a, b, got)
    with np.errstate(all="ignore"):
        want = (f32(a) + f32(b)).view(np.uint32)
    ok = nan_aware_equal(got, want)
    assert ok.all(), [(hex(int(a[i])), hex(int(b[i])), hex(int(want[i])), hex(int(got[i])))
                      for i in np.flatnonzero(~ok)[:5]]
    assert (got[(got & 0x7FFFFFFF) > 0x7F800000] == 0x7FC00000).all()   # canonical NaN


def _special_blocks(rng, n):
    x = bits_of(random_blocks(rng, 24, n, spread=30))
    x[0, 3] = 0x7FC00000                          # NaN
    x[1, 5] = 0x7F800000                          # +Inf
    x[2, :2] = [0x7F800000, 0xFF800000]           # +Inf, -Inf
    x[3] = 0x80000000                             # all -0
    x[4] = rng.integers(0, 1 << 23, n)            # subnormal inputs
    x[5] = 0x7F000000 | rng.integers(0, 1 << 23, n)  # huge: the butterfly overflows
    x[6] = 0
    x[6, 0] = 1                                   # 2^-149 alone: the result underflows
    x[7, :4] = bits_of([3e38, 3e38, -3e38, -3e38])   # intermediate overflow, finite exact
    x[7, 4:] = 0
    return x


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("signs", ["none", "random"])
def test_butterfly_matches_plain_python_float32(n, signs):
    rng = np.random.default_rng(n)
    x = np.concatenate([_special_blocks(rng, n), bits_of(random_blocks(rng, 16, n))])
    d = R.sign_vector(signs, n, seed=n)
    got = R.rotate(f32(x), n, signs=signs, seed=n).view(np.uint32)
    want = np.array([py_butterfly(row, d, n) for row in x], np.uint32)
    ok = nan_aware_equal(got, want)
    assert ok.all(), [(int(i), int(j), hex(int(want[i, j])), hex(int(got[i, j])))
                      for i, j in np.argwhere(~ok)[:5]]


def test_butterfly_checks_can_fail():
    """Planted bugs the comparisons above catch: the stages in reverse order (h = n/2 first,
    a different summation tree), and a 1-ulp / NaN-vs-Inf difference in the comparator."""
    n = 32
    rng = np.random.default_rng(5)
    x = bits_of(random_blocks(rng, 20, n))
    got = R.rotate(f32(x), n).view(np.uint32)
    c = np.uint32(oracle_inv_sqrt_bits(n)).view(np.float32)

    def reversed_stages(row):
        v = [np.uint32(b).view(np.float32) for b in row]
        h = n // 2
        while h >= 1:
            for j in range(n):
                if j & h == 0:
                    v[j], v[j + h] = v[j] + v[j + h], v[j] - v[j + h]
            h //= 2
        return [int(np.float32(a * c).view(np.uint32)) for a in v]

    assert not nan_aware_equal(got, np.array([reversed_stages(r) for r in x], np.uint32)).all()
    assert not nan_aware_equal([0x3F800000], [0x3F800001]).all()
    assert not nan_aware_equal([0x7F800000], [0x7FC00000]).all()
    assert nan_aware_equal([0x7FC00000], [0xFFC00001]).all()


def test_butterfly_special_values():
    n = 16
    x = np.zeros((8, n), np.uint32)
    x[0, 3] = 0x7FC00000
    x[1, 5] = 0xFF800000
    x[2, :2] = [0x7F800000, 0x7F800000]
    x[3] = 0x80000000
    x[4, :2] = 0x80000000                          # -0 and +0 mixed: order decides the sign
    x[5, 0] = 1                                    # 2^-149 / 4 underflows to +0
    x[6, :4] = bits_of([3e38, 3e38, -3e38, -3e38])
    x[7, :] = 0x00000004                           # subnormal in, subnormal out, no flush
    y = R.rotate(f32(x), n).view(np.uint32)
    assert ((y[0] & 0x7FFFFFFF) > 0x7F800000).all()                      # NaN everywhere
    h = np.array(sylvester(n))
    np.testing.assert_array_equal(y[1], np.where(h[:, 5] > 0, 0xFF800000, 0x7F800000))
    np.testing.assert_array_equal(y[2], np.where(h[:, 1] > 0, 0x7F800000, 0x7FC00000))  # Inf-Inf
    np.testing.assert_array_equal(y[3], [0x80000000] + [0] * 15)          # only row 0 sums -0s
    # -(+0 + -0) = -0 but (-0) + (+0) = +0: the butterfly's zero signs depend on its order
    # (output 14 is -0: stage 3 subtracts the +0 sum of elements 2-3 from the -0 of 0-1, ...);
    # the exact method's zero is -0 only when every term is -0, so all +0 here
    np.testing.assert_array_equal(y[4], py_butterfly(x[4], [1] * n, n))
    np.testing.assert_array_equal(y[4], [0] * 14 + [0x80000000, 0])
    np.testing.assert_array_equal(R.rotate(f32(x[4]), n, method="exact").view(np.uint32), 0)
    np.testing.assert_array_equal(y[5], np.zeros(n))                      # 2^-151: RNE to +0
    # [M, M, -M, -M]: M + M overflows in stage 1, so output 0 is Inf - Inf = NaN and output 2
    # is Inf, where the exact rotation gives 0 and fl(4M / 4) = M
    assert (y[6, 0] & 0x7FFFFFFF) > 0x7F800000 and y[6, 2] == 0x7F800000
    e = R.rotate(f32(x[6:7]), n, method="exact").view(np.uint32)[0]
    assert e[0] == 0 and e[2] == bits_of(3e38)
    np.testing.assert_array_equal(y[7], [0x10] + [0] * 15)                # 16 * 4 * 2^-149 / 4


TRITON_FWHT = """
import sys, numpy as np, torch, triton, triton.language as tl

@triton.jit
def fwht_kernel(x_ptr, y_ptr, sign_ptr, c, N: tl.constexpr, LOG2N: tl.constexpr,
                BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :])
    x = x * tl.load(sign_ptr + cols)[None, :]          # +-1: exact
    for s in tl.static_range(LOG2N):                    # h = 2^s: pairs (j, j + h)
        x = tl.reshape(x, (BLOCK_M, N // (2 << s), 2, 1 << s))
        a, b = tl.split(tl.permute(x, (0, 1, 3, 2)))
        x = tl.reshape(tl.permute(tl.join(a + b, a - b), (0, 1, 3, 2)), (BLOCK_M, N))
    tl.store(y_ptr + rows[:, None] * N + cols[None, :], x * c)

folder = sys.argv[1]
for n in (16, 32, 256):
    x = torch.from_numpy(np.load(f"{folder}/x{n}.npy"))
    d = torch.from_numpy(np.load(f"{folder}/d{n}.npy"))
    c = float(np.load(f"{folder}/c{n}.npy"))
    y = torch.empty_like(x)
    fwht_kernel[(x.shape[0] // 4,)](x, y, d, c, N=n, LOG2N=n.bit_length() - 1, BLOCK_M=4)
    np.save(f"{folder}/y{n}.npy", y.numpy())
"""


def test_triton_butterfly_sketch_meets_the_contract(tmp_path):
    """The Triton FWHT in docs/rotations.md (reshape/permute/split/join per stage, fp32) gives
    rotate(..., method='butterfly') bit for bit in the Triton interpreter (CPU, no GPU). This
    checks the kernel's operation order; GPU arithmetic is IEEE fp32 add/sub/mul as well."""
    pytest.importorskip("triton")
    rng = np.random.default_rng(17)
    want = {}
    for n in (16, 32, 256):
        x = np.concatenate([_special_blocks(rng, n)[:8], bits_of(random_blocks(rng, 8, n))])
        d = R.sign_vector("random", n, seed=n)
        np.save(tmp_path / f"x{n}.npy", f32(x))
        np.save(tmp_path / f"d{n}.npy", d.astype(np.float32))
        np.save(tmp_path / f"c{n}.npy", np.uint32(R.inv_sqrt_n_bits(n)).view(np.float32))
        want[n] = R.rotate(f32(x), n, signs=d).view(np.uint32)
    env = dict(os.environ, TRITON_INTERPRET="1")
    res = subprocess.run([sys.executable, "-c", TRITON_FWHT, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    for n, w in want.items():
        got = np.load(tmp_path / f"y{n}.npy").view(np.uint32)
        assert nan_aware_equal(got, w).all(), n


# ---------------------------------------------------------------------------------------------
# the exact method vs the Fraction oracle
# ---------------------------------------------------------------------------------------------
def _check_exact(x, n, signs="random", target="float32", seed=3):
    d = R.sign_vector(signs, n, seed=seed)
    got = R.rotate(f32(x), n, signs=d, method="exact", round_to=target).view(np.uint32)
    want = np.array([oracle_exact(row, d, target) for row in x], np.uint32)
    ok = nan_aware_equal(got, want)
    assert ok.all(), [(int(i), int(j), hex(int(want[i, j])), hex(int(got[i, j])))
                      for i, j in np.argwhere(~ok)[:5]]
    return got


@pytest.mark.parametrize("n", SIZES)
def test_exact_matches_fraction_oracle(n):
    rng = np.random.default_rng(100 + n)
    x = np.concatenate([_special_blocks(rng, n)[:8], bits_of(random_blocks(rng, 6, n))])
    _check_exact(x, n)


def test_exact_oracle_can_fail():
    """The oracle tells the butterfly (several roundings) apart from the exact method."""
    n = 64
    x = bits_of(random_blocks(np.random.default_rng(9), 4, n))
    d = R.sign_vector("none", n)
    want = np.array([oracle_exact(row, d) for row in x], np.uint32)
    assert not nan_aware_equal(R.rotate(f32(x), n).view(np.uint32), want).all()


@pytest.mark.parametrize("n", [16, 32, 128])
def test_exact_bfloat16_is_one_rounding(n):
    rng = np.random.default_rng(7 + n)
    x = np.concatenate([_special_blocks(rng, n)[:8], bits_of(random_blocks(rng, 4, n))])
    got = _check_exact(x, n, target="bfloat16")
    assert (got & 0xFFFF == 0).all()


def test_exact_bfloat16_is_not_a_double_rounding():
    """y = (1 + 3 2^-8 - 2^-40) / 4 sits just below the bf16 midpoint between 1 + 2^-7 (odd)
    and 1 + 2^-6 (even): rounded once it goes down; through fp32 it first lands on the
    midpoint, whose tie goes to even, up. The exact method rounds once; the butterfly's
    bf16 variant rounds its fp32 result (double rounding, as TE's bf16 output)."""
    x = np.zeros(16, np.float32)
    x[0], x[1] = 1 + 3 * 2.0 ** -8, -(2.0 ** -40)
    once = R.rotate(x, 16, method="exact", round_to="bfloat16")[0]
    twice = R.rotate(x, 16, round_to="bfloat16")[0]
    assert once == np.float32((1 + 2.0 ** -7) / 4) and twice == np.float32((1 + 2.0 ** -6) / 4)
    assert R.rotate(x, 16, method="exact")[0] == np.float32((1 + 3 * 2.0 ** -8) / 4)


def _tie_blocks(n):
    """Exact results on (or one ulp off) an fp32 tie: 1 + 2^-24 (tie, rounds to even 1),
    1 + 3 2^-24 (tie, rounds up), 1 + 2^-24 + 2^-60 (just above the tie), subnormal ties."""
    rows = []
    for tail in ([2.0 ** -24], [3 * 2.0 ** -24], [2.0 ** -24, 2.0 ** -60], [-(2.0 ** -24)],
                 [2.0 ** -24, -(2.0 ** -70)]):
        x = np.zeros(n, np.float32)
        x[0] = 1.0
        x[1:1 + len(tail)] = tail
        rows.append(bits_of(x))
    sub = np.zeros(n, np.uint32)
    sub[0] = 3                                    # 3 2^-149 / sqrt(n)
    sub[1] = 1
    rows.append(sub)
    return np.array(rows, np.uint32)


@pytest.mark.parametrize("n", SIZES)
def test_exact_ties_and_near_ties(n):
    _check_exact(_tie_blocks(n), n, signs="none")
    _check_exact(_tie_blocks(n), n, signs="none", target="bfloat16")


@pytest.mark.parametrize("n", [16, 32, 64, 128, 256])
def test_exact_wide_range_blocks_use_big_integers(n):
    """Blocks whose exact sums need more than 62 bits go through the Python-integer path;
    both paths are checked against the oracle, and against each other on narrow blocks."""
    rng = np.random.default_rng(5 * n)
    x = bits_of(random_blocks(rng, 6, n))
    x[:, 0] = bits_of(np.float32(2.0 ** 100))
    x[1, 1] = bits_of(np.float32(-(2.0 ** 100)))   # cancels: the tiny terms decide
    x[2, :] = 1
    x[2, 0] = 0x7F7FFFFF                            # 2^128 - 2^104 next to 2^-149
    x[3, 0] = 0x00000001
    x[3, 1] = 0x7F000000
    # +-2^100 cancel in the even outputs, which are then a small value over sqrt(n): a short
    # exact sum on the big-integer path (different rounding branches than long sums)
    small = np.zeros((8, n), np.float32)
    small[:, 0], small[:, 1] = 2.0 ** 100, -(2.0 ** 100)
    small[:, 2] = [1.0, 3.0, 5.0, 7.0, 1.5, 0.75, 2.0 ** -130, 11.0]
    _check_exact(bits_of(small), n, signs="none")
    _check_exact(bits_of(small), n, signs="none", target="bfloat16")
    need = np.zeros(x.shape[0], np.uint8)
    out = np.zeros(x.shape, np.uint32)
    smask = (R.sign_vector("random", n, seed=3) < 0).astype(np.int64)
    R.exact_blocks(x, smask, R._F32P, out, need)
    assert need.all()
    _check_exact(x, n)
    _check_exact(x, n, target="bfloat16")
    narrow = bits_of(random_blocks(rng, 8, n))
    fast = np.zeros(narrow.shape, np.uint32)
    need = np.zeros(narrow.shape[0], np.uint8)
    R.exact_blocks(narrow, smask, R._F32P, fast, need)
    assert not need.any()
    slow = np.array([R._exact_block_python(row.tolist(), smask, R._F32P) for row in narrow])
    np.testing.assert_array_equal(fast, slow)


def test_exact_overflow_and_underflow():
    n = 32
    x = np.zeros((4, n), np.float32)
    x[0, :] = 3.0e38                  # y_0 = sqrt(32) 3e38: Inf; the others 0
    x[1, :2] = [3.0e38, 3.0e38]       # y = 6e38 / sqrt(32) = 1.06e38: finite
    x[2, 0] = np.float32(2.0 ** -149)  # 2^-149 / sqrt 32 < 2^-150: rounds to +-0
    x[3, :4] = np.float32(2.0 ** -149)  # 4 2^-149 / sqrt 32 = 0.707 2^-149: rounds up
    got = _check_exact(bits_of(x), n, signs="none")
    assert got[0, 0] == 0x7F800000 and (got[0, 1:] == 0).all()
    assert (got[1, :] & 0x7FFFFFFF < 0x7F800000).all()
    assert set(got[2]) <= {0, 0x80000000}
    assert got[3, 0] == 1


def test_square_comparison_helpers_against_python_ints():
    """_cmp_square_scaled (124-bit arithmetic on int64 limbs) vs Python integers."""
    rng = np.random.default_rng(1)
    cases = [(1, 0, 1), (2 ** 62 - 1, -61, 2 ** 31 - 1), (2 ** 62 - 1, -62, 2 ** 30), (3, 5, 17),
             (2 ** 61 + 1, -100, 1), (5, 200, 2 ** 30), (2 ** 40 + 3, -27, 2 ** 26 + 1)]
    for _ in range(3000):
        s = int(rng.integers(1, 2 ** 62))
        sh = int(rng.integers(-130, 60))
        t = int(rng.integers(0, 2 ** 31))
        cases.append((s, sh, t))
        # t next to sqrt(s^2 2^sh), where the comparison is hard
        if sh < 0:
            root = math.isqrt((s * s) >> -sh) if s * s >> -sh else 0
        else:
            root = math.isqrt(s * s << sh)
        for dt in (-1, 0, 1):
            if 0 <= root + dt < 2 ** 31:
                cases.append((s, sh, root + dt))
    for s, sh, t in cases:
        lhs = Fraction(s * s) * Fraction(2) ** sh
        want = (lhs > t * t) - (lhs < t * t)
        assert R._cmp_square_scaled(s, sh, t) == want, (s, sh, t)
    for x in [0, 1, 2, 3, 4, 2 ** 62, 2 ** 63 - 1, 10 ** 18] + [int(v) for v in
                                                               rng.integers(0, 2 ** 63, 500)]:
        assert R._isqrt64(x) == math.isqrt(x)


# ---------------------------------------------------------------------------------------------
# bf16 output, orthogonality, round trips
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [16, 32, 256])
def test_butterfly_bfloat16_is_fp32_then_rne(n):
    rng = np.random.default_rng(n + 1)
    x = np.concatenate([_special_blocks(rng, n), bits_of(random_blocks(rng, 8, n))])
    y32 = R.rotate(f32(x), n, signs="random")
    y16 = R.rotate(f32(x), n, signs="random", round_to="bfloat16").view(np.uint32)
    with np.errstate(all="ignore"):
        want = y32.astype(ml_dtypes.bfloat16).astype(np.float32).view(np.uint32)
    assert nan_aware_equal(y16, want).all()
    assert (y16 & 0xFFFF == 0).all()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("method", ["butterfly", "exact"])
def test_rotating_rows_of_h_gives_sqrt_n_identity(n, method):
    """H H / sqrt(n) = sqrt(n) I: diagonal fl32(sqrt n), off-diagonal +0 (exact cancellation)."""
    h = R.hadamard(n).astype(np.float32)
    y = R.rotate(h, n, method=method).view(np.uint32)
    diag = round_sqrt_scaled(Fraction(n), n)
    np.testing.assert_array_equal(y, np.where(np.eye(n, dtype=bool), diag, 0))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("method", ["butterfly", "exact"])
def test_basis_vectors_give_rounded_inv_sqrt(n, method):
    e = np.eye(n, dtype=np.float32)
    y = R.rotate(e, n, method=method).view(np.uint32)
    c = oracle_inv_sqrt_bits(n)
    np.testing.assert_array_equal(y, np.where(np.array(sylvester(n)) > 0, c, c | 0x80000000))


def butterfly_bound(xbits, n):
    """The documented forward bound per block, in float64 (an inequality, not a result):
    |yhat_i - y_i| <= |theta_n| |y_i| (1+u) + u |yhat_i| + ((1+u)^m - 1)(1+|theta_n|)(1+u)
    sum_j |x_j| / sqrt(n) + 2^-150, with |y_i| <= sum_j |x_j| / sqrt(n)."""
    m = n.bit_length() - 1
    theta = abs(float(np.uint32(R.inv_sqrt_n_bits(n)).view(np.float32)) * math.sqrt(n) - 1)
    l1 = np.abs(f32(xbits).astype(np.float64)).sum(axis=-1, keepdims=True) / math.sqrt(n)
    g = (1 + U) ** m - 1
    return (theta * (1 + U) + (1 + theta) * (1 + U) * g) * l1 * (1 + 1e-9) + 2.0 ** -150


def bound_violations(xb, yb, ye, n):
    """Outputs where |butterfly - exact| exceeds the bound plus the exact rounding's half ulp."""
    yb64 = f32(yb).astype(np.float64)
    ye64 = f32(ye).astype(np.float64)
    half_ulp = np.abs(ye64) * U * 1.0000001 + 2.0 ** -150
    lim = butterfly_bound(xb, n) + U * np.abs(yb64) + half_ulp
    return np.argwhere(np.abs(yb64 - ye64) > lim)


@pytest.mark.parametrize("n", SIZES)
def test_butterfly_within_proven_bound_of_exact(n):
    rng = np.random.default_rng(1000 + n)
    x = bits_of(random_blocks(rng, 2000, n, spread=20))
    yb = R.rotate(f32(x), n, signs="random").view(np.uint32)
    ye = R.rotate(f32(x), n, signs="random", method="exact").view(np.uint32)
    assert not len(bound_violations(x, yb, ye, n))
    # the checker can fail: signs applied on the output side instead of the input side
    d = R.sign_vector("random", n)
    wrong = (R.rotate(f32(x), n).view(np.uint32) ^ ((d < 0).astype(np.uint32) << 31))
    assert len(bound_violations(x, wrong, ye, n)) > 1000
    # ... and a single output 64 ulps off on a well-conditioned block
    ok = bits_of(np.ones((1, n), np.float32))
    yb1 = R.rotate(f32(ok), n).view(np.uint32).copy()
    ye1 = R.rotate(f32(ok), n, method="exact").view(np.uint32)
    yb1[0, 0] += 64
    assert len(bound_violations(ok, yb1, ye1, n)) == 1


@pytest.mark.parametrize("n", SIZES)
def test_rotate_twice_is_identity_within_bound(n):
    """H/sqrt(n) is symmetric and orthonormal: x -> rotate(rotate(x, d), none) * d recovers x,
    within bound(z) + ||yhat - y||_2 (the second rotation is orthonormal, so the first error
    keeps its 2-norm); checked with exact Fractions against the bound."""
    rng = np.random.default_rng(n + 77)
    x = bits_of(random_blocks(rng, 30, n, spread=6))
    d = R.sign_vector("random", n, seed=11)
    y = R.rotate(f32(x), n, signs=d).view(np.uint32)
    z = R.rotate(f32(y), n).view(np.uint32) ^ ((d < 0).astype(np.uint32) << 31)
    m = n.bit_length() - 1
    theta = abs(float(np.uint32(R.inv_sqrt_n_bits(n)).view(np.float32)) * math.sqrt(n) - 1)
    per = (theta + U) * (1 + U) + (1 + theta) * (1 + U) * ((1 + U) ** m - 1)
    slack = 1 + 1e-6
    for xb, yb, zb in zip(x, y, z):
        l2 = math.sqrt(sum(float(f32(b)) ** 2 for b in xb))
        # ||yhat - y||_2 <= sqrt(n) per ||x||_1/sqrt(n) <= sqrt(n) per ||x||_2 (Cauchy-Schwarz)
        first = math.sqrt(n) * per * l2
        l1y = sum(abs(float(f32(b))) for b in yb) / math.sqrt(n)
        second = per * l1y + U * max(abs(float(f32(b))) for b in zb)
        for xi, zi in zip(xb, zb):
            err = abs(value(zi) - value(xi))
            lim = (first + second) * slack + 2.0 ** -149
            assert float(err) <= lim, (n, hex(int(xi)), hex(int(zi)))


# ---------------------------------------------------------------------------------------------
# inputs, axes, shapes
# ---------------------------------------------------------------------------------------------
def test_axis_and_dtypes():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 64, 5)).astype(np.float32)
    a = R.rotate(x, 32, axis=1, signs="random", seed=9)
    b = np.moveaxis(R.rotate(np.ascontiguousarray(np.moveaxis(x, 1, -1)), 32, signs="random",
                             seed=9), -1, 1)
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    assert a.dtype == np.float32 and a.shape == x.shape
    xb = x.astype(ml_dtypes.bfloat16)
    wide = xb.astype(np.float32)
    np.testing.assert_array_equal(R.rotate(xb, 32, axis=1).view(np.uint32),
                                  R.rotate(wide, 32, axis=1).view(np.uint32))
    np.testing.assert_array_equal(
        R.rotate(xb.view(np.uint16), 32, axis=1, source_dtype="bfloat16").view(np.uint32),
        R.rotate(wide, 32, axis=1).view(np.uint32))
    xh = x.astype(np.float16)
    np.testing.assert_array_equal(R.rotate(xh, 16, axis=-2).view(np.uint32),
                                  R.rotate(xh.astype(np.float32), 16, axis=1).view(np.uint32))
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x).to(torch.bfloat16)
    np.testing.assert_array_equal(R.rotate(t, 64, axis=1, method="exact").view(np.uint32),
                                  R.rotate(wide, 64, axis=1, method="exact").view(np.uint32))
    with pytest.raises(UnsupportedDtypeError, match="float64"):
        R.rotate(x.astype(np.float64), 32, axis=1)
    np.testing.assert_array_equal(R.rotate(x.astype(np.float64), 32, axis=1, from_float64="rne"),
                                  R.rotate(x, 32, axis=1))


def test_empty_and_degenerate_shapes():
    assert R.rotate(np.zeros((0, 32), np.float32), 32).shape == (0, 32)
    assert R.rotate(np.zeros((4, 0), np.float32), 32).shape == (4, 0)
    assert R.rotate(np.zeros((2, 0, 3), np.float32), 16, axis=1, method="exact").shape == (2, 0, 3)
    with pytest.raises(AxisError):
        R.rotate(np.float32(1.0), 16)


@pytest.mark.parametrize("length", [31, 48, 16])
def test_length_not_a_multiple(length):
    with pytest.raises(R.RotationShapeError, match=f"length {length} along axis 1 .* n=32"):
        R.rotate(np.zeros((2, length), np.float32), 32, axis=1)


@pytest.mark.parametrize("kw,name", [(dict(method="fwht"), "method"), (dict(method=None), "method"),
                                     (dict(round_to="float16"), "round_to"),
                                     (dict(round_to="bf16"), "round_to")])
def test_bad_option_names(kw, name):
    with pytest.raises(R.RotationOptionError, match=f"{name}="):
        R.rotate(np.zeros(32, np.float32), 32, **kw)


def test_errors_are_typed():
    for cls in (R.RotationSizeError, R.RotationShapeError, R.SignVectorError,
                R.RotationOptionError):
        assert issubclass(cls, MXRefError) and issubclass(cls, ValueError)


# ---------------------------------------------------------------------------------------------
# rotated quantization
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", list(mxref.FORMATS))
@pytest.mark.parametrize("n,method,round_to,signs", [
    (32, "butterfly", "float32", "random"), (16, "exact", "bfloat16", "te16"),
    (128, "butterfly", "bfloat16", "none"), (64, "exact", "float32", "random")])
def test_quantize_rotated_equals_quantize_of_rotate(fmt, n, method, round_to, signs):
    rng = np.random.default_rng(3)
    x = random_blocks(rng, 6, 256).reshape(3, 2, 256).transpose(0, 2, 1).copy()
    kw = dict(axis=1, signs=signs, seed=5, step=2, tensor_id=1, method=method, round_to=round_to)
    mx = R.quantize_rotated(x, fmt, "ocp", n, **kw)
    y = R.rotate(x, n, **kw)
    ref = mxref.quantize(y, fmt, "ocp", axis=1)
    np.testing.assert_array_equal(mx.codes, ref.codes)
    np.testing.assert_array_equal(mx.scales, ref.scales)
    assert mx.tensor_scale == ref.tensor_scale
    assert mx.meta["rotation"] == {"n": n, "signs": signs,
                                   "sign_vector": R.sign_vector(signs, n, seed=5, step=2,
                                                                tensor_id=1).tolist(),
                                   "seed": 5, "step": 2, "tensor_id": 1, "method": method,
                                   "round_to": round_to}
    np.testing.assert_array_equal(mxref.dequantize(mx), mxref.dequantize(ref))


def test_quantize_rotated_against_fraction_oracle():
    """Oracle quantization of rotated values computed by the plain-Python butterfly."""
    rng = np.random.default_rng(8)
    knobs = mxref.get_profile("ocp").knobs()
    x = bits_of(random_blocks(rng, 4, 64, spread=8))
    d = R.sign_vector("random", 32, seed=21)
    rot = np.array([py_butterfly(blk, d, 32) for blk in x.reshape(-1, 32)],
                   np.uint32).reshape(4, 64)
    for fmt, elem in (("mxfp4", "e2m1"), ("mxfp8_e4m3", "e4m3"), ("mxint8", "int8")):
        mx = R.quantize_rotated(f32(x), fmt, n=32, signs="random", seed=21)
        for i in range(4):
            for j in range(2):
                s, c = O.quantize_block([int(b) for b in rot[i, 32 * j:32 * j + 32]], elem, knobs)
                assert mx.scales[i, j] == s and mx.codes[i, 32 * j:32 * j + 32].tolist() == c
    mx = R.quantize_rotated(f32(x), "nvfp4", n=16, signs="te16")
    rot16 = np.array([py_butterfly(blk, TE16, 16) for blk in x.reshape(-1, 16)],
                     np.uint32).reshape(4, 64)
    t, s, c = O.quantize_nvfp4_exact([[int(b) for b in row] for row in rot16], knobs)
    assert int(np.float32(mx.tensor_scale).view(np.uint32)) == t
    np.testing.assert_array_equal(mx.scales, np.array(s, np.uint8))
    np.testing.assert_array_equal(mx.codes, np.array(c, np.uint8))


def test_quantize_rotated_stochastic_and_source_dtype():
    rng = np.random.default_rng(2)
    x = random_blocks(rng, 4, 64).astype(ml_dtypes.bfloat16)
    sr = mxref.get_profile("ocp").replace(name="sr", rounding="stochastic")
    mx = R.quantize_rotated(x, "mxfp4", sr, 32, signs="random", seed=1, sr_seed=99, rng_offset=5)
    ref = mxref.quantize(R.rotate(x, 32, signs="random", seed=1), "mxfp4", sr, seed=99,
                         rng_offset=5)
    np.testing.assert_array_equal(mx.codes, ref.codes)
    assert mx.source_dtype == "bfloat16"
    with pytest.raises(R.RotationShapeError):
        R.quantize_rotated(np.zeros((2, 48), np.float32), "mxfp4", n=32)


# ---------------------------------------------------------------------------------------------
# measurement for docs/rotations.md (slow): butterfly vs exact over 10^5 blocks per n
# ---------------------------------------------------------------------------------------------
def measure(n, blocks, seed=0):
    """Butterfly vs exact on Gaussian fp32 blocks with random signs: ulp distances (monotone
    bit keys), by condition number kappa_i = sum_j |x_j| / (sqrt(n) |y_i|), and the normwise
    ratio |yhat - yexact| / (u sum_j |x_j| / sqrt(n)) next to its proven limit."""
    rng = np.random.default_rng(seed)
    x = bits_of(rng.standard_normal((blocks, n)).astype(np.float32))
    yb = R.rotate(f32(x), n, signs="random", seed=seed).view(np.uint32)
    ye = R.rotate(f32(x), n, signs="random", seed=seed, method="exact").view(np.uint32)
    dist = np.abs(ulp_key(yb) - ulp_key(ye))
    ye64 = np.abs(f32(ye).astype(np.float64))
    l1 = np.abs(f32(x).astype(np.float64)).sum(axis=1, keepdims=True) / math.sqrt(n)
    l1 = np.broadcast_to(l1, ye64.shape)
    normwise = (np.abs(f32(yb).astype(np.float64) - f32(ye).astype(np.float64)) / (U * l1)).max()
    m = n.bit_length() - 1
    theta = abs(float(np.uint32(R.inv_sqrt_n_bits(n)).view(np.float32)) * math.sqrt(n) - 1)
    limit = (theta + (1 + theta) * ((1 + U) ** m - 1)) / U + 2
    q = np.quantile(dist, [0.5, 0.99, 0.999])
    return dict(n=n, blocks=blocks, equal=round(float((dist == 0).mean()), 4),
                within1=round(float((dist <= 1).mean()), 4), p50=int(q[0]), p99=int(q[1]),
                p999=int(q[2]), max=int(dist.max()),
                max_kappa4=int(dist[ye64 >= l1 / 4].max()),
                max_kappa64=int(dist[ye64 >= l1 / 64].max()),
                normwise=round(float(normwise), 3), normwise_limit=round(limit, 3),
                violations=len(bound_violations(x, yb, ye, n)))


@pytest.mark.slow
def test_measure_butterfly_vs_exact(capsys):
    for n in SIZES:
        r = measure(n, 100_000)
        assert r["violations"] == 0
        with capsys.disabled():
            print(r)
