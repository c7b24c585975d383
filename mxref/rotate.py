"""Block Hadamard rotations (the random Hadamard transform, RHT) and rotated quantization.

The contract (docs/rotations.md has the equations, the error bounds and the kernel notes):

* ``H_n`` is Sylvester's Hadamard matrix, ``H_1 = [1]``, ``H_2k = [[H_k, H_k], [H_k, -H_k]]``,
  so ``H_ij = (-1)^popcount(i & j)``; it is symmetric and ``H H = n I``.
* A rotation works on blocks of ``n`` consecutive elements along one axis:
  ``y = (x * d) @ H_n / sqrt(n)`` (row vector ``x``, signs ``d`` multiply the *input*), i.e.
  ``y_i = sum_j x_j d_j H_ji / sqrt(n)``. TransformerEngine builds ``diag(d) @ H16 / 4`` and
  multiplies ``x @ that`` (the same side); Quartet has both sides (see the docs).
* ``method='butterfly'`` is the kernel contract: sign flips (exact), the in-place iterative
  fast Walsh-Hadamard transform in fp32 in one fixed order, then one multiplication by the
  fp32 constant ``fl32(1/sqrt(n))``. Every operation is one IEEE binary32 RNE operation,
  emulated here on integers (no host FPU, no FTZ/DAZ, no FMA question).
* ``method='exact'`` is the correctly rounded result: the exact real value, rounded once.
  For n = 32 and 128 it has a factor ``1/sqrt(2)``; the rounding is decided by comparing
  integer squares, never by a float approximation.
* ``round_to='bfloat16'`` rounds to bf16 (RNE) at the end: the butterfly's fp32 result is
  rounded again (TE rotates in bf16 with an fp32-accumulating GEMM); the exact method rounds
  the exact value once, directly to bf16.
"""
from __future__ import annotations

import dataclasses
import math

import numba as nb
import numpy as np

from . import _kernels as K
from .errors import MXRefError
from .formats import BF16, FP32, P_BITS, P_EMIN, P_INF, P_MBITS, P_SIGNBIT
from .inputs import _is_torch, _torch_data, as_f32_bits, check_int
from .quantize import MXTensor, _from_rows, _normalize_axis, _to_rows, quantize

__all__ = [
    "hadamard", "sign_vector", "rotate", "quantize_rotated", "inv_sqrt_n_bits",
    "ROTATION_SIZES", "SIGN_KINDS", "METHODS", "ROUND_TO", "TE16_SIGNS",
    "RotationError", "RotationSizeError", "RotationShapeError", "SignVectorError",
    "RotationOptionError",
]

ROTATION_SIZES = (16, 32, 64, 128, 256)
SIGN_KINDS = ("none", "te16", "random")
METHODS = ("butterfly", "exact")
ROUND_TO = ("float32", "bfloat16")
# TransformerEngine's fixed wgrad sign vector (pytorch/tensor/nvfp4_tensor.py
# get_wgrad_sign_vector), used with H16 only.
TE16_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


# ---- typed errors ----------------------------------------------------------------------------
class RotationError(MXRefError, ValueError):
    """Base class of the rotation errors."""


class RotationSizeError(RotationError):
    """A rotation size n that is not one of ROTATION_SIZES."""


class RotationShapeError(RotationError):
    """A block axis whose length is not a multiple of the rotation size."""


class SignVectorError(RotationError):
    """A sign vector kind, length or value that cannot be used."""


class RotationOptionError(RotationError):
    """An unknown method / round_to name, or a seed/step/tensor_id that is not an integer."""


# ---- H_n, signs, constants -------------------------------------------------------------------
def _check_size(n) -> int:
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) \
            or int(n) not in ROTATION_SIZES:
        raise RotationSizeError(
            f"rotation size n={n!r} is not supported; allowed sizes: {ROTATION_SIZES}")
    return int(n)


def hadamard(n: int) -> np.ndarray:
    """Sylvester's unnormalized Hadamard matrix H_n as int8 +-1:
    ``H_1 = [1]``, ``H_2k = [[H_k, H_k], [H_k, -H_k]]`` (so ``H_ij = (-1)^popcount(i & j)``)."""
    n = _check_size(n)
    h = np.ones((1, 1), dtype=np.int8)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]]).astype(np.int8)
    return h


def sign_vector(kind, n: int, *, seed: int = 0, step: int = 0, tensor_id: int = 0) -> np.ndarray:
    """The sign vector d (int8, +-1, length n) that multiplies each input block.

    * ``"none"``: all +1;
    * ``"te16"``: TransformerEngine's fixed vector TE16_SIGNS (n = 16 only);
    * ``"random"``: ``d_i = -1`` iff bit 0 of word 0 of Philox4x32-10 with counter
      ``(i, step mod 2^32, tensor_id mod 2^32, 0)`` and key ``(seed mod 2^32, seed >> 32 mod
      2^32)`` is 1, i.e. ``triton.language.random.philox(seed, i, step, tensor_id, 0)[0] & 1``
      (with step = tensor_id = 0 the word is ``tl.randint(seed, i)``);
    * an integer array (or sequence) of +-1 of length n, used as given.
    seed/step/tensor_id only matter for ``"random"``.
    """
    n = _check_size(n)
    seed = check_int("seed", seed, error=RotationOptionError)
    step = check_int("step", step, error=RotationOptionError)
    tensor_id = check_int("tensor_id", tensor_id, error=RotationOptionError)
    if isinstance(kind, str):
        if kind == "none":
            return np.ones(n, dtype=np.int8)
        if kind == "te16":
            if n != 16:
                raise SignVectorError(
                    f"signs='te16' is TransformerEngine's 16-entry vector, defined for n=16 "
                    f"only, not n={n}")
            return np.array(TE16_SIGNS, dtype=np.int8)
        if kind == "random":
            words = np.empty(n, dtype=np.uint32)
            _philox_words(np.uint64(seed % 2**64), np.uint64(step % 2**32),
                          np.uint64(tensor_id % 2**32), words)
            return np.where(words & np.uint32(1), np.int8(-1), np.int8(1)).astype(np.int8)
        raise SignVectorError(
            f"signs={kind!r} is not a known kind; use one of {SIGN_KINDS} or an int array of +-1")
    return _explicit_signs(kind, n)


def _explicit_signs(signs, n: int) -> np.ndarray:
    if _is_torch(signs):
        signs = _torch_data(signs, "signs").cpu().numpy()
    arr = np.asarray(signs)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise SignVectorError(
            f"signs array must have an integer dtype (int8 +-1), got {arr.dtype}")
    if arr.shape != (n,):
        raise SignVectorError(f"signs array must have shape ({n},) for n={n}, got {arr.shape}")
    bad = np.flatnonzero((arr != 1) & (arr != -1))
    if bad.size:
        raise SignVectorError(
            f"signs array entries must be +1 or -1; entry {int(bad[0])} is {int(arr[bad[0]])}")
    return arr.astype(np.int8)


def _signs_kind(signs) -> str:
    return signs if isinstance(signs, str) else "explicit"


def inv_sqrt_n_bits(n: int) -> int:
    """fp32 bits of fl32(1/sqrt(n)), decided on integers.

    n = 4^k: exactly 2^-k. n = 2 * 4^k: c * 2^-k with c = fl32(1/sqrt(2)) = s * 2^-24, where s
    is the integer nearest to sqrt(2^47) (ties impossible: 2^47 is not a square), found from
    isqrt(2^47) by comparing (2 s0 + 1)^2 with 2^49. The result is 0x3F3504F3 for n = 2.
    """
    n = _check_size(n)
    m = n.bit_length() - 1
    if m % 2 == 0:
        return (127 - m // 2) << 23
    s0 = math.isqrt(1 << 47)
    s = s0 + 1 if (2 * s0 + 1) ** 2 < (1 << 49) else s0
    return ((126 - (m - 1) // 2) << 23) | (s - (1 << 23))


# ---- integer-domain kernels ------------------------------------------------------------------
_JIT = K._JIT
njit = nb.njit
_F32P = FP32.kernel_params()
_BF16P = BF16.kernel_params()
_U = np.uint64
_M32 = _U(0xFFFFFFFF)
F32_QNAN = K.F32_QNAN
F32_INF = K.F32_INF
SIGN = 0x80000000
MASK31 = (1 << 31) - 1
MASK62 = (1 << 62) - 1
EXACT_BUDGET = 62          # bits an int64 exact block sum may use


@njit(**_JIT)
def _philox_words(seed, step, tensor_id, out):
    """out[i] = word 0 of Philox4x32-10((i, step, tensor_id, 0), key=(seed_lo, seed_hi))."""
    k0 = seed & _M32
    k1 = (seed >> _U(32)) & _M32
    for i in range(out.size):
        c0, _, _, _ = K.philox4x32(_U(i) & _M32, step, tensor_id, _U(0), k0, k1, 10)
        out[i] = c0


@njit(**_JIT)
def f32_add(a, b):
    """IEEE binary32 a + b (bits in, bits out), round to nearest even, no flush to zero.

    Any NaN operand or Inf - Inf gives the canonical quiet NaN 0x7FC00000; an exact zero sum
    of nonzero operands is +0; (-0) + (-0) = -0. Operands whose exponents differ by at most 36
    are added exactly in an int64 (< 2^61); otherwise the smaller one is replaced by a sticky
    unit three bits below the larger one's last bit, which lies strictly between the same two
    multiples of 2^(e-2) as the true sum and so rounds the same way (the result can lose at
    most one binade, whose rounding grid is 2^(e-1))."""
    aa = a & 0x7FFFFFFF
    bb = b & 0x7FFFFFFF
    if aa > F32_INF or bb > F32_INF:
        return F32_QNAN
    sa = (a >> 31) & 1
    sb = (b >> 31) & 1
    if aa == F32_INF:
        if bb == F32_INF and sa != sb:
            return F32_QNAN
        return a
    if bb == F32_INF:
        return b
    if aa == 0:
        if bb == 0:
            return (sa & sb) << 31
        return b
    if bb == 0:
        return a
    siga, ea = K.f32_parts(aa)
    sigb, eb = K.f32_parts(bb)
    if ea < eb:
        siga, ea, sa, sigb, eb, sb = sigb, eb, sb, siga, ea, sa
    d = ea - eb
    if d <= 36:
        big = siga << d
        small = sigb
        e = eb
    else:
        big = siga << 3
        small = np.int64(1)
        e = ea - 3
    total = (-big if sa else big) + (-small if sb else small)
    if total == 0:
        return np.int64(0)
    neg = np.int64(1) if total < 0 else np.int64(0)
    return _pack_f32(neg, abs(total), e)


@njit(**_JIT)
def _pack_f32(neg, mag, e):
    """fp32 bits of (-1)^neg mag 2^e (0 < mag < 2^62), RNE: inline for a normal result, else
    (subnormal or overflowing) the general integer rounding of _kernels."""
    top = K.bit_length(mag) - 1             # mag 2^e lies in [2^(e+top), 2^(e+top+1))
    ex = e + top
    if ex < -126 or ex > 127:
        return K.to_f32_bits(neg, mag, e, False, _F32P)
    k = top - 23                            # bits below the 24-bit significand
    if k <= 0:
        sig = mag << (-k)
    else:
        sig = mag >> k
        rem = mag & ((np.int64(1) << k) - 1)
        half = np.int64(1) << (k - 1)
        if rem > half or (rem == half and (sig & 1) == 1):
            sig += 1
            if sig == (1 << 24):            # carry into the next binade
                sig >>= 1
                ex += 1
                if ex > 127:
                    return F32_INF | (neg << 31)
    return (neg << 31) | ((ex + 127) << 23) | (sig & 0x7FFFFF)


@njit(**_JIT)
def butterfly_blocks(bits, smask, cbits, out):
    """The canonical butterfly on each row of ``bits`` (fp32 patterns, one block per row).

    v = x with the sign bit flipped where d = -1; for h = 1, 2, ..., n/2 and every j with
    (j & h) == 0: (v[j], v[j+h]) <- (v[j] + v[j+h], v[j] - v[j+h]), each one fp32 RNE
    operation; then y = v * fl32(1/sqrt(n)) (bits ``cbits``), one fp32 RNE multiplication."""
    nb_, n = bits.shape
    v = np.empty(n, dtype=np.int64)
    for r in range(nb_):
        for j in range(n):
            v[j] = np.int64(bits[r, j]) ^ (smask[j] << 31)
        h = 1
        while h < n:
            for j in range(n):
                if (j & h) == 0:
                    a = v[j]
                    b = v[j + h]
                    v[j] = f32_add(a, b)
                    v[j + h] = f32_add(a, b ^ SIGN)
            h *= 2
        for j in range(n):
            out[r, j] = K.f32_mul(v[j], cbits, _F32P)


@njit(**_JIT)
def _encode(neg, sig, exp2, fp):
    """fp32 bits holding the format-``fp`` (fp32 or bf16) RNE rounding of (-1)^neg sig 2^exp2;
    overflow gives Inf (IEEE), a result below half the smallest subnormal gives a signed zero."""
    code = np.int64(0)
    if sig != 0:
        code, ovf = K.round_magnitude(sig, K.bit_length(sig) - 1, exp2, False, fp, K.RNE, 0)
        if ovf:
            code = fp[P_INF]
    code |= neg << fp[P_SIGNBIT]
    return code << (32 - fp[P_BITS])


@njit(**_JIT)
def _square_wide(s):
    """s*s for 0 <= s < 2^62 as (hi, lo): s*s = hi * 2^62 + lo, 0 <= lo < 2^62."""
    s1 = s >> 31
    s0 = s & MASK31
    mid = 2 * s1 * s0                       # < 2^63
    lo = ((mid & MASK31) << 31) + s0 * s0   # < 2^63
    hi = s1 * s1 + (mid >> 31) + (lo >> 62)
    return hi, lo & MASK62


@njit(**_JIT)
def _shl_wide(hi, lo, k):
    """(hi, lo) * 2^k for k >= 0; returns (hi, lo, overflowed) with overflow meaning >= 2^124."""
    if k == 0 or (hi == 0 and lo == 0):
        return hi, lo, False
    if k >= 62:
        k2 = k - 62
        if hi != 0 or K.bit_length(lo) + k2 > 62:
            return hi, lo, True
        return lo << k2, np.int64(0), False
    if K.bit_length(hi) + k > 62:
        return hi, lo, True
    return (hi << k) | (lo >> (62 - k)), (lo << k) & MASK62, False


@njit(**_JIT)
def _cmp_wide(h1, l1, h2, l2):
    if h1 != h2:
        return 1 if h1 > h2 else -1
    if l1 != l2:
        return 1 if l1 > l2 else -1
    return 0


@njit(**_JIT)
def _cmp_square_scaled(s, sh, t):
    """Sign of s^2 * 2^sh - t^2 (0 < s < 2^62, 0 <= t < 2^31, sh any integer)."""
    hi, lo = _square_wide(s)
    t2 = t * t
    if sh >= 0:
        hi, lo, ovf = _shl_wide(hi, lo, sh)
        if ovf:
            return 1
        return _cmp_wide(hi, lo, np.int64(0), t2)
    th, tl, ovf = _shl_wide(np.int64(0), t2, -sh)
    if ovf:
        return -1
    return _cmp_wide(hi, lo, th, tl)


@njit(**_JIT)
def _isqrt64(x):
    """floor(sqrt(x)) for 0 <= x < 2^63, integer Newton iteration from above."""
    if x < 2:
        return x
    r = np.int64(1) << ((K.bit_length(x) + 1) // 2)
    while True:
        y = (r + x // r) >> 1
        if y >= r:
            return r
        r = y


@njit(**_JIT)
def _encode_over_sqrt2(neg, s, e, fp):
    """Bits of the RNE rounding (to fp32 or bf16, ``fp``) of v = s * 2^e / sqrt(2), s >= 1.

    v is irrational, so it is never a tie and never exact. With b = bitlen(s) - 1,
    floor(log2 v) = e + b - 1 + [s^2 >= 2^(2b+1)]; the quantum is 2^Q with
    Q = max(floor(log2 v), emin) - mbits, and the rounded multiple r of 2^Q is the integer with
    (2r - 1)^2 < Z < (2r + 1)^2, Z = (2 v / 2^Q)^2 = s^2 2^(2(e - Q) + 1). r is found from a
    30-bit integer square-root estimate and corrected by exact 124-bit comparisons."""
    m = fp[P_MBITS]
    b = K.bit_length(s) - 1
    hi, lo = _square_wide(s)
    ph, pl, _ = _shl_wide(np.int64(0), np.int64(1), 2 * b + 1)
    lg = e + b - 1 + (1 if _cmp_wide(hi, lo, ph, pl) >= 0 else 0)
    if lg > 127:
        return ((fp[P_INF] | (neg << fp[P_SIGNBIT])) << (32 - fp[P_BITS]))
    q = max(lg, fp[P_EMIN]) - m
    sh = 2 * (e - q) + 1
    # estimate r = s sqrt(2) 2^(e-q-1) from the top 30 bits of s
    u = b + 1 - 30
    st = s >> u if u >= 0 else s << (-u)
    w = _isqrt64(2 * st * st)               # floor(st sqrt 2), st in [2^29, 2^30)
    # shift <= mbits - 29 < 0, since q >= e + b - 1 - mbits; |r - round(w 2^shift)| <= 1
    shift = u + e - q - 1
    r = (w + (np.int64(1) << (-shift - 1))) >> (-shift) if shift > -63 else np.int64(0)
    while r > 0 and _cmp_square_scaled(s, sh, 2 * r - 1) < 0:
        r -= 1
    while _cmp_square_scaled(s, sh, 2 * r + 1) > 0:
        r += 1
    return _encode(neg, r, q, fp)


@njit(**_JIT)
def _popcount_parity(x):
    p = 0
    while x:
        p ^= 1
        x &= x - 1
    return p


@njit(**_JIT)
def exact_blocks(bits, smask, fp, out, need_python):
    """The correctly rounded rotation of each row (one block) of ``bits``.

    NaN anywhere in the block: every output NaN. Otherwise an Inf: output i is the sum of the
    Infinite terms t_j = x_j d_j H_ij (+Inf, -Inf, or NaN when both signs occur). Otherwise the
    exact integer sums S_i = sum_j t_j / 2^emin (emin: the block's lowest exponent) are formed
    by an int64 FWHT when they fit in 62 bits (else ``need_python`` is set for the row), and
    y_i = S_i 2^emin / sqrt(n) is rounded once. A zero sum is -0 iff every term is -0."""
    nb_, n = bits.shape
    m = K.bit_length(n) - 1
    half = m // 2
    odd = m & 1
    sig = np.zeros(n, dtype=np.int64)
    ex = np.zeros(n, dtype=np.int64)
    sg = np.zeros(n, dtype=np.int64)
    v = np.zeros(n, dtype=np.int64)
    fnan = F32_QNAN
    for r in range(nb_):
        has_nan = False
        has_inf = False
        nonzero = False
        lo_e = np.int64(1 << 20)
        top = np.int64(-(1 << 20))
        for j in range(n):
            b = np.int64(bits[r, j])
            a = b & 0x7FFFFFFF
            sg[j] = ((b >> 31) & 1) ^ smask[j]
            if a > F32_INF:
                has_nan = True
            elif a == F32_INF:
                has_inf = True
                sig[j] = -1
            elif a == 0:
                sig[j] = 0
            else:
                nonzero = True
                s_, e_ = K.f32_parts(a)
                sig[j] = s_
                ex[j] = e_
                lo_e = min(lo_e, e_)
                top = max(top, e_ + K.bit_length(s_))
        if has_nan:
            for i in range(n):
                out[r, i] = fnan
            continue
        if has_inf:
            for i in range(n):
                plus = False
                minus = False
                for j in range(n):
                    if sig[j] == -1:
                        if sg[j] ^ _popcount_parity(i & j):
                            minus = True
                        else:
                            plus = True
                out[r, i] = fnan if (plus and minus) else (F32_INF | (np.int64(minus) << 31))
            continue
        if not nonzero:
            # all terms are zeros: output i is -0 iff sg[j] ^ parity(i & j) == 1 for every j,
            # which pins i down from j = 1, 2, 4, ...; at most one output can be -0.
            for i in range(n):
                out[r, i] = 0
            if sg[0] == 1:
                cand = 0
                for k in range(m):
                    if sg[1 << k] == 0:
                        cand |= 1 << k
                ok = True
                for j in range(n):
                    if (sg[j] ^ _popcount_parity(cand & j)) != 1:
                        ok = False
                        break
                if ok:
                    out[r, cand] = SIGN
            continue
        if top - lo_e + m > EXACT_BUDGET:
            need_python[r] = 1
            continue
        for j in range(n):
            t = sig[j] << (ex[j] - lo_e) if sig[j] != 0 else np.int64(0)
            v[j] = -t if sg[j] else t
        h = 1
        while h < n:
            for j in range(n):
                if (j & h) == 0:
                    a_ = v[j]
                    b_ = v[j + h]
                    v[j] = a_ + b_
                    v[j + h] = a_ - b_
            h *= 2
        e = lo_e - half
        for i in range(n):
            s = v[i]
            if s == 0:
                out[r, i] = 0
                continue
            neg = np.int64(1) if s < 0 else np.int64(0)
            s = abs(s)
            if odd:
                out[r, i] = _encode_over_sqrt2(neg, s, e, fp)
            else:
                out[r, i] = _encode(neg, s, e, fp)


# ---- the wide-range fallback (Python integers) --------------------------------------------
def _exact_block_python(row_bits, smask, fp) -> list:
    """exact_blocks for one finite block whose exact sums need more than 62 bits: the same
    math on Python integers (the FWHT on big ints, the 1/sqrt(2) rounding by math.isqrt)."""
    n = len(row_bits)
    m = n.bit_length() - 1
    terms = []
    for j, b in enumerate(row_bits):
        b = int(b)
        a = b & 0x7FFFFFFF
        if a == 0:
            terms.append((0, 0, 0))
            continue
        s_, e_ = (a, -149) if a < 0x800000 else ((a & 0x7FFFFF) | 0x800000, (a >> 23) - 150)
        terms.append(((b >> 31) ^ int(smask[j]), s_, e_))
    lo_e = min(e for _, s, e in terms if s)
    v = [(-s if neg else s) << (e - lo_e) if s else 0 for neg, s, e in terms]
    h = 1
    while h < n:
        for j in range(n):
            if not j & h:
                v[j], v[j + h] = v[j] + v[j + h], v[j] - v[j + h]
        h *= 2
    e = lo_e - m // 2
    mbits, emin = int(fp[P_MBITS]), int(fp[P_EMIN])
    out = []
    for s in v:
        if s == 0:
            out.append(0)
            continue
        neg, s = int(s < 0), abs(s)
        if m % 2 == 0:
            lg = e + s.bit_length() - 1
            q = max(lg, emin) - mbits
            if q <= e:
                r = s << (e - q)
            else:
                k = q - e
                r, rem = s >> k, s & ((1 << k) - 1)
                half_ = 1 << (k - 1)
                r += rem > half_ or (rem == half_ and r & 1)
        else:
            b = s.bit_length() - 1
            lg = e + b - 1 + (s * s >= 1 << (2 * b + 1))
            q = max(lg, emin) - mbits
            sh = 2 * (e - q) + 1
            t = 0 if sh >= 0 else (1 - sh) // 2       # s^2 2^(sh + 2t) is an integer
            root = math.isqrt(s * s << (sh + 2 * t))  # floor(sqrt(Z) 2^t), Z irrational root
            r = (root + (1 << t)) >> (t + 1)          # nearest integer to sqrt(Z) / 2
        if lg > 127:
            out.append(int(_encode(neg, 1, 200, fp)))  # overflow: Inf with the sign
        else:
            out.append(int(_encode(neg, r, q, fp)))
    return out


# ---- public API ------------------------------------------------------------------------------
def _check_option(name: str, value, allowed) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise RotationOptionError(f"{name}={value!r} is not one of {allowed}")
    return value


def _round_f32_to_bf16(bits: np.ndarray) -> np.ndarray:
    """fp32 bits -> bits of the RNE bf16 value (low half zero); NaN -> 0x7FC00000, overflow to
    Inf, subnormals kept (no flush)."""
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(F32_INF)
    r = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return np.where(nan, np.uint32(F32_QNAN), r << np.uint32(16)).astype(np.uint32)


def rotate(x, n: int, *, axis: int = -1, signs="none", seed: int = 0, step: int = 0,
           tensor_id: int = 0, method: str = "butterfly", round_to: str = "float32",
           source_dtype: str | None = None, from_float64: str | None = None) -> np.ndarray:
    """Block rotation ``y = (x * d) @ H_n / sqrt(n)`` along ``axis`` (blocks of n consecutive
    elements), returned as float32 of x's shape.

    x: anything :func:`mxref.inputs.as_f32_bits` accepts (fp32/bf16/fp16 numpy, torch, raw
    bits with ``source_dtype``, float64 with ``from_float64='rne'``); widened exactly to fp32.
    signs: ``"none"``, ``"te16"``, ``"random"`` (Philox with seed/step/tensor_id, see
    :func:`sign_vector`) or an int array of +-1 of length n.
    method: ``"butterfly"`` (the fixed-order fp32 kernel contract) or ``"exact"`` (the exact
    value rounded once). round_to: ``"float32"`` or ``"bfloat16"`` (a bf16 value held in fp32).
    """
    n = _check_size(n)
    _check_option("method", method, METHODS)
    _check_option("round_to", round_to, ROUND_TO)
    d = sign_vector(signs, n, seed=seed, step=step, tensor_id=tensor_id)
    bits, _ = as_f32_bits(x, source_dtype=source_dtype, from_float64=from_float64)
    ax = _normalize_axis(axis, bits.ndim)
    length = bits.shape[ax]
    if length % n:
        raise RotationShapeError(
            f"length {length} along axis {ax} is not a multiple of the rotation size n={n}")
    moved_shape = np.moveaxis(bits, ax, -1).shape
    blocks = _to_rows(bits, ax).reshape(-1, n)
    out = np.empty(blocks.shape, dtype=np.uint32)
    smask = (d < 0).astype(np.int64)
    if blocks.size:
        if method == "butterfly":
            butterfly_blocks(blocks, smask, np.int64(inv_sqrt_n_bits(n)), out)
            if round_to == "bfloat16":
                out = _round_f32_to_bf16(out)
        else:
            fp = _F32P if round_to == "float32" else _BF16P
            need = np.zeros(blocks.shape[0], dtype=np.uint8)
            exact_blocks(blocks, smask, fp, out, need)
            for r in np.flatnonzero(need):
                out[r] = _exact_block_python(blocks[r].tolist(), smask, fp)
    rows = int(np.prod(moved_shape[:-1], dtype=np.int64))
    return _from_rows(out.reshape(rows, length), moved_shape, ax).view(np.float32)


def quantize_rotated(x, fmt, profile="ocp", n: int = 32, *, axis: int = -1, signs="none",
                     seed: int = 0, step: int = 0, tensor_id: int = 0, method: str = "butterfly",
                     round_to: str = "float32", source_dtype: str | None = None,
                     from_float64: str | None = None, sr_seed: int | None = None,
                     **quantize_kwargs) -> MXTensor:
    """``quantize(rotate(x, n, ...), fmt, profile, axis=axis, ...)``: rotate blocks of n along
    ``axis``, then quantize along the same axis (any format, NVFP4 included).

    ``seed`` is the sign generator's seed; the stochastic-rounding stream takes ``sr_seed``
    (quantize's ``seed``) or ``rbits``/``rng_offset`` in ``quantize_kwargs``. The rotation
    parameters are recorded in ``meta["rotation"]``: n, signs (kind, or "explicit"),
    sign_vector, seed, step, tensor_id, method, round_to.
    """
    d = sign_vector(signs, _check_size(n), seed=seed, step=step, tensor_id=tensor_id)
    if sr_seed is not None:
        check_int("sr_seed", sr_seed)
    bits, src = as_f32_bits(x, source_dtype=source_dtype, from_float64=from_float64)
    y = rotate(bits.view(np.float32), n, axis=axis, signs=d, method=method, round_to=round_to)
    mx = quantize(y, fmt, profile, axis=axis, seed=sr_seed, **quantize_kwargs)
    meta = dict(mx.meta)
    meta["rotation"] = {"n": int(n), "signs": _signs_kind(signs), "sign_vector": d.tolist(),
                        "seed": int(seed), "step": int(step), "tensor_id": int(tensor_id),
                        "method": method, "round_to": round_to}
    return dataclasses.replace(mx, source_dtype=src, meta=meta)
