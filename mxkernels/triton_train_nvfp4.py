"""Fused NVFP4 fake quantization for training recipes (two-level scaling: an fp32 tensor scale
from the tensor's amax, E4M3 scales per 16-element block).

``triton_train.qdq`` does one read per tile for MX formats, whose scales are local to a block.
NVFP4's tensor scale needs the whole tensor's amax first, and each orientation has its own:
the rows and the columns of an unrotated tensor share it, a rotated orientation takes the amax
of the rotated values along its axis. So one :func:`qdq` is three launches:

1. a memset of an int32 buffer: two amax slots (rows, columns), a program count, the tensor
   constants;
2. ``nvfp4_train_amax_kernel``: each [BR, BC] tile, rotated per orientation as the qdq kernel
   will rotate it (``triton_train._orientation``: Hadamard 16 / 32, signs none / mask /
   Philox), reduced to the finite amax (Inf too where the profile keeps it) by atomic max;
   the last program to finish turns each amax into its tensor constants
   (``triton_quant._nvfp4_tensor_consts``, in integers, once per launch) and writes T;
3. ``nvfp4_qdq_train_kernel``: per orientation, with those tensor constants, the block scales (``triton_common._nvfp4_block_scales``), the E2M1 codes by the profile's op
   order, rounded to nearest or stochastically with the words of ``mxref.random_bits`` (rows:
   element (r, c) takes word r * C + c; columns, the operand x^T: word c * R + r), the same
   helpers as ``triton_quant.nvfp4_quantize_kernel`` / ``triton_sr.nvfp4_quantize_sr_kernel``.

The values written are e2m1 x e4m3 of each element (the tensor scale T left out: the GEMM
multiplies its fp32 result by T_a T_b, as mxkernels.training.mxlinear's generic path and
hardware do); every such product has at most 6 significant bits, so the bf16 output is exact.
``with_codes`` also returns the E4M3 scale bytes and unpacked E2M1 codes: rows [R, C / 16] and
[R, C], columns (blocks down each column) [R / 16, C] and [R, C]. R and C must be multiples of
16 along a quantized orientation's block axis (ragged NVFP4 blocks are left to the generic
path).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mxkernels.triton_common import (KernelUnsupported, _f32_div, _f32_min_pos, _f32_mul,
                                     _max_along, _nvfp4_block_scales, _F32_INF, _F32_MAX,
                                     _F32_ONE, _F32_QNAN, sm_count)
from mxkernels.triton_fast import (INTERPRETED, _OUT, _SRC, _check_local_offsets, _load_tile,
                                   _prep, _qdq_tile, launch_cached)
from mxkernels.triton_quant import (NVFP4_ROWS, _element_value, _nvfp4_amax_lanes,
                                    _nvfp4_codes, _nvfp4_tensor_consts, _to_f32, mx_constexprs)
from mxkernels.triton_sr import _nvfp4_codes_sr
from mxkernels.triton_train import _orientation, launch_args
from mxref.errors import MXRefError
from mxref.formats import FORMATS
from mxref.profiles import get_profile
from mxref.rotate import inv_sqrt_n_bits

__all__ = ["qdq", "scale_cast", "supports", "nvfp4_train_constexprs", "KERNELS", "ARG_TYPES",
           "aot_specs", "KernelUnsupported"]


@triton.jit
def _blocks(v, AXIS: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    """[BR, BC] -> [BR * BC / 16, 16]: the 16-element blocks along AXIS (1: each row's, block
    (r, j) at r * BC / 16 + j; 0: each column's, block (i, c) at i * BC + c) as rows."""
    if AXIS == 1:
        return tl.reshape(v, (BR * BC // 16, 16))
    return tl.reshape(tl.permute(tl.reshape(v, (BR // 16, 16, BC)), (0, 2, 1)),
                      (BR // 16 * BC, 16))


@triton.jit
def _unblocks(v, AXIS: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    """The inverse of _blocks."""
    if AXIS == 1:
        return tl.reshape(v, (BR, BC))
    return tl.reshape(tl.permute(tl.reshape(v, (BR // 16, BC, 16)), (0, 2, 1)), (BR, BC))


@triton.jit
def _bc(v, RA: tl.constexpr):
    """A per-block vector v [M] against its blocks' elements: blocks along axis RA of an
    [M, 16] (RA 1: one block per row) or a [16, M] (RA 0: one block per column) tensor."""
    if RA == 1:
        out = v[:, None]
    else:
        out = v[None, :]
    return out


@triton.jit
def _amax_of(a, WITH_INF: tl.constexpr, FLUSH: tl.constexpr):
    """The amax (fp32 bits) of the magnitudes ``a`` [BR, BC] as triton_quant.nvfp4_amax_kernel
    takes it (triton_quant._nvfp4_amax_lanes)."""
    return _max_along(_max_along(_nvfp4_amax_lanes(a, WITH_INF, FLUSH), 1), 0)


@triton.jit
def _tensor_consts(amax_ptr, ts_ptr, k, ORDER: tl.constexpr, TWO_LEVEL: tl.constexpr):
    """The last amax program: orientation k's final amax (read by an atomic, from L2) -> T,
    S_enc / 6 (fp32 bits) in the buffer, T in ts[k]."""
    one = tl.arange(0, 1)
    am = tl.atomic_max(amax_ptr + k + one, tl.full([1], 0, tl.int32), sem="acquire")
    t, _, sc6 = _nvfp4_tensor_consts(am, ORDER, TWO_LEVEL)
    tl.store(amax_ptr + 4 + k + one, t)
    tl.store(amax_ptr + 6 + k + one, sc6)
    tl.store(ts_ptr + k + one, t)


@triton.jit(do_not_specialize=["row_sg_lo", "row_sg_hi", "row_sg_step", "row_sg_tid",
                               "col_sg_lo", "col_sg_hi", "col_sg_step", "col_sg_tid"])
def nvfp4_train_amax_kernel(
        x_ptr, amax_ptr, ts_ptr, step_ptr, n_rows, n_cols,
        row_sg_lo, row_sg_hi, row_sg_step, row_sg_tid,
        col_sg_lo, col_sg_hi, col_sg_step, col_sg_tid,
        SRC: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr, BR: tl.constexpr,
        BC: tl.constexpr, ROT_N: tl.constexpr, LOG2N: tl.constexpr, C_BITS: tl.constexpr,
        ROW_ROT: tl.constexpr, COL_ROT: tl.constexpr, ROW_SIGNS: tl.constexpr,
        COL_SIGNS: tl.constexpr, STEP_DEV: tl.constexpr, WITH_INF: tl.constexpr,
        FLUSH: tl.constexpr, ORDER: tl.constexpr, TWO_LEVEL: tl.constexpr):
    """amax[0] (rows) and amax[1] (columns), zeroed by the launcher with the rest of the int32
    [8] buffer: the atomic max over the programs of each orientation's (rotated) magnitudes,
    each program looping over tiles pid, pid + grid, ... (the grid may be smaller than the
    number of tiles). The
    last program to finish (amax[2] counts the finished ones) turns each amax into its tensor
    constants once for the whole launch (triton_quant._nvfp4_tensor_consts, in integers):
    T into amax[4 + k] and ts[k], S_enc / 6 into amax[6 + k]."""
    if STEP_DEV:
        step = tl.load(step_ptr)
    else:
        step = 0
    # a grid-stride loop over the tiles: one atomic per orientation and program, not per tile
    # (same-address atomics serialize in L2)
    n_ct = (n_cols + BC - 1) // BC
    n_tiles = ((n_rows + BR - 1) // BR) * n_ct
    m_r = tl.program_id(0) * 0
    m_c = tl.program_id(0) * 0
    for tid in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        pr = tid // n_ct
        b, a = _load_tile(x_ptr, pr * BR, (tid - pr * n_ct) * BC, n_rows, n_cols, BR, BC, SRC)
        if ROWS:
            rn: tl.constexpr = ROT_N if ROW_ROT else 0
            _, ao, _ = _orientation(b, a, 0, 0, 0, 0, n_rows, n_cols, 1, BR, BC, rn, LOG2N, C_BITS,
                                    ROW_SIGNS, 0, 0, 0, 0, row_sg_lo, row_sg_hi,
                                    row_sg_step, row_sg_tid, step, STEP_DEV)
            m_r = tl.maximum(m_r, _amax_of(ao, WITH_INF, FLUSH))
        if COLS:
            cn: tl.constexpr = ROT_N if COL_ROT else 0
            _, ao, _ = _orientation(b, a, 0, 0, 0, 0, n_rows, n_cols, 0, BR, BC, cn, LOG2N, C_BITS,
                                    COL_SIGNS, 0, 0, 0, 0, col_sg_lo, col_sg_hi,
                                    col_sg_step, col_sg_tid, step, STEP_DEV)
            m_c = tl.maximum(m_c, _amax_of(ao, WITH_INF, FLUSH))
    if ROWS:
        tl.atomic_max(amax_ptr, m_r)
    if COLS:
        tl.atomic_max(amax_ptr + 1, m_c)
    tl.debug_barrier()            # every thread's atomics above come before the count
    done = tl.atomic_add(amax_ptr + 2, 1, sem="acq_rel")
    if done == tl.num_programs(0) - 1:
        if ROWS:
            _tensor_consts(amax_ptr, ts_ptr, 0, ORDER, TWO_LEVEL)
        if COLS:
            _tensor_consts(amax_ptr, ts_ptr, 1, ORDER, TWO_LEVEL)


@triton.jit
def _te_blocks(a2, t, sc6, NAN_POISON: tl.constexpr, INF_POISON: tl.constexpr,
               RA: tl.constexpr):
    """te order, per block of the magnitudes a2 (blocks along axis RA: _bc) (T = t and
    S_enc / 6 = sc6 as [1]
    fp32 bits, T >= 2^-117: the caller checks): (E4M3 scale codes, their values, inv =
    min(fl(1 / fl(S T)), FLT_MAX), poisoned) as fp32 bits, what _nvfp4_block_scales and
    _nvfp4_cast_input compute in integers, here on the FPU without meeting a subnormal:
    fl(amax S_enc/6) with a subnormal amax entering as amax 2^24 (a result below 2^-126, or
    one the FPU flushes, has E4M3 code 0 either way: the E4M3 quantum is 2^-9); then clamped
    at 448 (satfinite) and RNE to the E4M3 grid by fl(y + m) - m with m = 2^(max(e, -6) + 20);
    S T >= 2^-9 T >= 2^-126 is normal and at most 448 T < 2^126, so fl(1 / (S T)) is an
    IEEE division (div_rn) of normal numbers to a normal result."""
    amax = _max_along(tl.where(a2 < _F32_INF, a2, 0), RA)
    has_nan = _max_along(tl.where(a2 > _F32_INF, 1, 0), RA) > 0
    has_inf = _max_along(tl.where(a2 == _F32_INF, 1, 0), RA) > 0
    poison = amax < 0
    if NAN_POISON:
        poison = poison | has_nan
    if INF_POISON:
        poison = poison | has_inf
    sub = amax < 0x800000
    A = tl.where(sub, amax.to(tl.float32) * 2.350988701644575e-38,
                 amax.to(tl.float32, bitcast=True))
    P = A * sc6.to(tl.float32, bitcast=True)
    P = tl.where(sub, P * 5.960464477539063e-08, P).to(tl.int32, bitcast=True)
    P = tl.where(has_inf, _F32_INF, P)
    pc = tl.minimum(P, 0x43E00000)                          # satfinite: 448
    tb = tl.maximum(pc & 0x7F800000, 121 << 23)             # the E4M3 binade, >= 2^-6
    mf = (tb + (20 << 23)).to(tl.float32, bitcast=True)
    r = ((pc.to(tl.float32, bitcast=True) + mf) - mf).to(tl.int32, bitcast=True)
    sc = tl.where(r < (121 << 23), (r.to(tl.float32, bitcast=True) * 512.0).to(tl.int32),
                  (((r >> 23) - 120) << 3) | ((r >> 20) & 7))
    sval = tl.where(sc < 8, (sc.to(tl.float32) * 0.001953125).to(tl.int32, bitcast=True),
                    (((sc >> 3) + 120) << 23) | ((sc & 7) << 20))
    z = sval.to(tl.float32, bitcast=True) * t.to(tl.float32, bitcast=True)
    inv = tl.math.div_rn(tl.full(z.shape, 1.0, tl.float32), z).to(tl.int32, bitcast=True)
    return sc, sval, tl.minimum(inv, _F32_MAX), poison


@triton.jit
def _te_y(b2, inv, INV_NORMAL: tl.constexpr, RA: tl.constexpr):
    """y = fl(|x| * inv) of the te order (fp32 bits; Inf / NaN inputs kept as they are) for
    the fp32 bits b2 of blocks along axis RA (_bc) with inv = min(fl(1 / fl(S T)), FLT_MAX)
    [M] (fp32 bits), where only "zero or not" matters below 2^-126 (_te_exact).

    INV_NORMAL (every inv normal, as _te_blocks gives): the FPU product of the magnitudes is
    taken as it is; it is exact IEEE wherever x is 0, Inf or NaN, or normal with a product of
    at least 2^-125 (normal operands, a normal result: nothing a flushing FPU touches). A tile
    with any other element (a subnormal x, a product below 2^-125: rare in real tensors) takes
    _te_exact for the whole tile, a uniform branch."""
    ax = b2 & 0x7FFFFFFF
    if INV_NORMAL:
        z = (ax.to(tl.float32, bitcast=True) *
             _bc(inv.to(tl.float32, bitcast=True), RA)).to(tl.int32, bitcast=True)
        slow = (ax != 0) & (ax < _F32_INF) & ((ax < 0x800000) | (z < 0x01000000))
        if _max_along(_max_along(slow.to(tl.int32), 1), 0) > 0:
            ay = _te_exact(ax, inv, RA)
        else:
            ay = tl.where(ax >= _F32_INF, ax, z)
    else:
        ay = _te_exact(ax, inv, RA)
    return ay


@triton.jit
def _te_exact(ax, inv, RA: tl.constexpr):
    """_te_y for any inv (normal or not) and any |x| bits ax (blocks along RA), on the FPU.

    No subnormal ever meets the FPU (which may flush them): per block inv' = inv 2^48 when
    inv < 2^64 (a subnormal inv from its integer significand), else inv' = inv; a subnormal x
    enters as |x| 2^24 (its integer significand times 2^-125). Then Z = fl(X inv') =
    fl(p 2^F), p = |x| inv exact, F in {0, 24, 48, 72}: every Z here is normal or bounded
    away from the subnormals, so Z is p 2^F rounded once, and y = Z 2^-F exactly when
    p >= 2^-126. Below that, y is a signed zero in E2M1 (quantum 0.5; SR: floor(rest / q 2^32)
    = 0 below 2^-33), and all that matters is whether fl(p) is 0 (p <= 2^-150, the tie going
    to even 0): p 2^F > 2^(F-150) (F >= 48 there: F < 48 cannot give p < 2^-126), Z equal to
    it being decided by the integer product of the significands."""
    big = inv >= 0x5F800000                                  # inv >= 2^64: used as it is
    inv2 = tl.where(big, inv, tl.where(
        inv < 0x800000, (inv.to(tl.float32) * 3.944304526105059e-31).to(tl.int32, bitcast=True),
        inv + (48 << 23)))                                   # subnormal m 2^-149 -> m 2^-101
    fb = tl.where(big, 0, 48)
    sub = ax < 0x800000                                      # subnormal or zero input
    X = tl.where(sub, ax.to(tl.float32) * 2.350988701644575e-38,      # |x| 2^24 (2^-125)
                 ax.to(tl.float32, bitcast=True))
    F = _bc(fb, RA) + tl.where(sub, 24, 0)
    i2 = _bc(inv2.to(tl.float32, bitcast=True), RA)
    Z = X * i2
    zb = Z.to(tl.int32, bitcast=True)
    normal = zb >= ((F - 126 + 127) << 23)                   # p >= 2^-126
    yv = (Z * ((127 - F) << 23).to(tl.float32, bitcast=True)).to(tl.int32, bitcast=True)
    thr = (F - 150 + 127) << 23
    # at Z == thr (a rounding onto the power of two), the exact product decides: sX sI 2^(eX +
    # eI) > thr, from the 24-bit significands (one 32 x 32 -> 64-bit multiply)
    xb = X.to(tl.int32, bitcast=True)
    ib = _bc(inv2, RA)
    sxi = ((xb & 0x7FFFFF) | 0x800000).to(tl.int64) * ((ib & 0x7FFFFF) | 0x800000).to(tl.int64)
    kk = (F - 150) - ((xb >> 23) - 150) - ((ib >> 23) - 150)
    above = sxi > (tl.full(sxi.shape, 1, tl.int64) << tl.minimum(tl.maximum(kk, 0), 62).to(
        tl.int64))
    nz = (zb > thr) | ((zb == thr) & above)
    ay = tl.where(ax >= _F32_INF, ax, tl.where(normal, yv, nz.to(tl.int32)))   # Inf, NaN
    return ay


@triton.jit
def _te_round(b2, ay, sval, SR: tl.constexpr, rb2, SIGNED_ZERO: tl.constexpr,
              WRITE_Q: tl.constexpr, RA: tl.constexpr):
    """(signed value bits, E2M1 codes or 0) of the te order for the fp32 bits b2 (blocks along
    axis RA: _bc) with y = ay (_te_y) and E4M3 scale values sval [M]: RNE or SR of y to E2M1, satfinite; the
    codes and values triton_common._encode / triton_sr._encode_sr and e2m1 x e4m3 give, on the
    FPU. RNE: f = fl(y + m) - m with m = 2^(max(e_y, 0) + 22), y clamped at 6.0 first (all
    above saturates there); SR: the integer rule of triton_fast._qdq_orient's SR branch (MBITS
    1, EMIN 0). The value is the rounded magnitude times the E4M3 scale (exact), the sign
    OR-ed in as _finish signs the code; NaN gives +0 (code 0)."""
    neg = (b2 >> 31) & 1
    if SR:
        e = ay >> 23
        ebq = tl.maximum(e, 127)
        r = tl.minimum(22 + (ebq - e), 63)
        # n and floor(rest / q 2^32) as the two words of sig * 2^32 >> r (r >= 56: both 0)
        sig = ((ay & 0x7FFFFF) | 0x800000).to(tl.uint32, bitcast=True).to(tl.uint64)
        t = (sig << 32) >> r.to(tl.uint64)
        fr = t.to(tl.uint32)
        up = (fr + rb2) < fr                                  # uint32 carry out of the add
        nq = (t >> 32).to(tl.int32) + up.to(tl.int32)
        code = tl.minimum(nq + ((ebq - 127) << 1), 7)
        # the E2M1 magnitude of the code: 0.5 n (code < 2), else (1 + m / 2) 2^(e - 1)
        ce = code >> 1
        mag = tl.where(ce == 0, (code & 1) * 0x3F000000,
                       ((ce + 126) << 23) | ((code & 1) << 22))
    else:
        ac = tl.minimum(ay, 0x40C00000)       # 6.0 and above (Inf too) saturate to 6
        tb = tl.maximum(ac & 0x7F800000, 127 << 23)
        mf = (tb + (22 << 23)).to(tl.float32, bitcast=True)
        mag = ((ac.to(tl.float32, bitcast=True) + mf) - mf).to(tl.int32, bitcast=True)
        if WRITE_Q:   # 0 -> 0, 0.5 -> 1, (1 + m/2) 2^e -> 2 + 2e + m (e = 0, 1, 2)
            code = tl.where(mag == 0, 0, tl.where(
                mag < 0x3F800000, 1, 2 + 2 * ((mag >> 23) - 127) + ((mag >> 22) & 1)))
        else:
            code = 0
    if SIGNED_ZERO == 0:          # preserve
        sgn = neg
    elif SIGNED_ZERO == 1:        # an exact -0.0 product -> +0, an underflow keeps -0
        sgn = tl.where((mag == 0) & (ay == 0), 0, neg)
    else:                         # never negative
        sgn = tl.where(mag == 0, 0, neg)
    nan = ay > _F32_INF
    v = mag.to(tl.float32, bitcast=True) * _bc(sval.to(tl.float32, bitcast=True), RA)
    vb = tl.where(nan, 0, v.to(tl.int32, bitcast=True) | (sgn << 31))
    if WRITE_Q:
        code = tl.where(nan, 0, code | (sgn << 3))
    return vb, code


@triton.jit
def _nvfp4_write(b, a, rb, k, amax_ptr, out_ptr, scale_ptr, code_ptr, offs, m, rows,
                 cols, r0, c0, n_rows, n_cols, AXIS: tl.constexpr, BR: tl.constexpr,
                 BC: tl.constexpr, OUT_BF16: tl.constexpr, WRITE_Q: tl.constexpr,
                 WRITE_V: tl.constexpr, SR: tl.constexpr, ORDER: tl.constexpr,
                 TWO_LEVEL: tl.constexpr,
                 SCALE_MIN_TINY: tl.constexpr, ROUNDING: tl.constexpr, OVERFLOW: tl.constexpr,
                 NAN_POISON: tl.constexpr, INF_POISON: tl.constexpr,
                 SIGNED_ZERO: tl.constexpr, FLUSH: tl.constexpr):
    """One orientation (amax slot k) of the tile: the NVFP4 block scales and codes of the
    (rotated) fp32 bits b, as nvfp4_quantize_kernel / nvfp4_quantize_sr_kernel compute them,
    then e2m1 x e4m3 per element written to out_ptr (bf16 or fp32)."""
    t = tl.load(amax_ptr + 4 + k + tl.arange(0, 1))        # from nvfp4_train_amax_kernel
    sc6 = tl.load(amax_ptr + 6 + k + tl.arange(0, 1))
    FAST: tl.constexpr = ORDER == 1 and TWO_LEVEL and OVERFLOW == 0 and \
        (SR or ROUNDING == 0) and not FLUSH and not SCALE_MIN_TINY
    # the te order on a 16-row tile's columns works on the tile as it is (each column one
    # block, reduced along axis 0): no transposition through shared memory
    COLVIEW: tl.constexpr = FAST and AXIS == 0 and BR == 16
    RA: tl.constexpr = 0 if COLVIEW else 1
    if COLVIEW:
        b2 = b
        a2 = a
    else:
        b2 = _blocks(b, AXIS, BR, BC)
        a2 = _blocks(a, AXIS, BR, BC)
    if FLUSH:                        # amax and the exact order see flushed inputs
        a2 = tl.where(a2 < 0x800000, 0, a2)
    if FAST:
        if _max_along(t, 0) >= 0x05000000:        # T >= 2^-117: the blocks on the FPU
            sc, sval, inv, poison = _te_blocks(a2, t, sc6, NAN_POISON, INF_POISON, RA)
            ay = _te_y(b2, inv, True, RA)
        else:                                      # a tiny tensor: in integers
            # (block (0, c) of a 16-row tile is row c of _blocks: the per-block vectors
            # index the same in both views)
            sc, poison = _nvfp4_block_scales(_blocks(a, AXIS, BR, BC), t, sc6, NAN_POISON,
                                             INF_POISON, ORDER, TWO_LEVEL, SCALE_MIN_TINY)
            s_neg, ss, es, s_nan, s_inf = _element_value(sc, False, 3, -6, 7, 7, 0x7F, -1)
            sval = tl.where(s_nan, _F32_QNAN, _to_f32(s_neg, ss, es))
            inv = _f32_min_pos(_f32_div(tl.full(sval.shape, _F32_ONE, tl.int32),
                                        _f32_mul(sval, t)),
                               tl.full(sval.shape, _F32_MAX, tl.int32))
            ay = _te_y(b2, inv, False, RA)
        if COLVIEW:
            rb2 = rb
        else:
            rb2 = _blocks(rb, AXIS, BR, BC) if SR else 0
        vb, code = _te_round(b2, ay, sval, SR, rb2, SIGNED_ZERO, WRITE_Q, RA)
    else:              # the other op orders: triton_quant's / triton_sr's integer encoders
        sc, poison = _nvfp4_block_scales(a2, t, sc6, NAN_POISON, INF_POISON, ORDER,
                                         TWO_LEVEL, SCALE_MIN_TINY)
        if SR:
            code = _nvfp4_codes_sr(b2, a2, sc, t, _blocks(rb, AXIS, BR, BC), ORDER, TWO_LEVEL,
                                   OVERFLOW, SIGNED_ZERO, FLUSH)
        else:
            code = _nvfp4_codes(b2, a2, sc, t, ORDER, TWO_LEVEL, ROUNDING, OVERFLOW,
                                SIGNED_ZERO, FLUSH)
    byte = tl.where(poison, 0x7F, sc)
    if not FAST:
        code = tl.where(poison[:, None], 0, code)
        # e2m1 x e4m3 as fp32 (exact): the E2M1 magnitude 0, 0.5 or (1 + m / 2) 2^(e - 1);
        # the E4M3 scale (8 + m) 2^(e - 10), or m 2^-9 for e = 0, NaN for 0x7F
        mag = code & 7
        ee = mag >> 1
        el = tl.where(ee == 0, (mag & 1) * 0x3F000000, ((ee + 126) << 23) | ((mag & 1) << 22))
        se = (byte >> 3) & 0xF
        sm = byte & 7
        sub = (sm.to(tl.float32) * 0.001953125).to(tl.int32, bitcast=True)       # m * 2^-9
        sv = tl.where(se == 0, sub, ((se + 120) << 23) | (sm << 20))
        v = el.to(tl.float32, bitcast=True) * sv.to(tl.float32, bitcast=True)[:, None]
        vb = v.to(tl.int32, bitcast=True) | ((code & 8) << 28)
    else:
        code = tl.where(_bc(poison, RA), 0, code)
    vb = tl.where(_bc(byte == 0x7F, RA), 0x7FC00000, vb)
    if not COLVIEW:
        vb = _unblocks(vb, AXIS, BR, BC)
        if WRITE_Q:
            code = _unblocks(code, AXIS, BR, BC)
    if not WRITE_V:  # codes and scales only (nvfp4_quantize_rows)
        pass
    elif OUT_BF16:   # every value has <= 6 significant bits (2 of E2M1 x 4 of E4M3) in the
        hb = (vb >> 16) & 0xFFFF       # bf16 range, or is the NaN: its top half is exact
        tl.store(out_ptr + offs, hb.to(tl.int16).to(tl.bfloat16, bitcast=True), mask=m)
    else:
        tl.store(out_ptr + offs, vb.to(tl.float32, bitcast=True), mask=m)
    if WRITE_Q:
        tl.store(code_ptr + offs, code.to(tl.uint8), mask=m)
        if AXIS == 1:       # scales [n_rows, n_cols / 16]
            j = c0 // 16 + tl.arange(0, BC // 16)
            so = rows.to(tl.int64)[:, None] * (n_cols // 16) + j[None, :]
            sm_ = (rows < n_rows)[:, None] & (j < n_cols // 16)[None, :]
            tl.store(scale_ptr + so, tl.reshape(byte, (BR, BC // 16)).to(tl.uint8), mask=sm_)
        else:               # scales [n_rows / 16, n_cols]
            i = r0 // 16 + tl.arange(0, BR // 16)
            so = i.to(tl.int64)[:, None] * n_cols + cols[None, :]
            sm_ = (i < n_rows // 16)[:, None] & (cols < n_cols)[None, :]
            tl.store(scale_ptr + so, tl.reshape(byte, (BR // 16, BC)).to(tl.uint8), mask=sm_)


@triton.jit(do_not_specialize=["row_sr_lo", "row_sr_hi", "row_sr_gs", "col_sr_lo",
                               "col_sr_hi", "col_sr_gs", "row_sg_lo", "row_sg_hi",
                               "row_sg_step", "row_sg_tid", "col_sg_lo", "col_sg_hi",
                               "col_sg_step", "col_sg_tid"])
def nvfp4_qdq_train_kernel(
        x_ptr, amax_ptr, row_out_ptr, col_out_ptr, row_scale_ptr, row_code_ptr,
        col_scale_ptr, col_code_ptr, step_ptr, n_rows, n_cols,
        row_sr_lo, row_sr_hi, row_sr_gs, col_sr_lo, col_sr_hi, col_sr_gs,
        row_sg_lo, row_sg_hi, row_sg_step, row_sg_tid,
        col_sg_lo, col_sg_hi, col_sg_step, col_sg_tid,
        SRC: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr, WRITE_Q: tl.constexpr,
        WRITE_V: tl.constexpr, OUT_BF16: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
        ROT_N: tl.constexpr, LOG2N: tl.constexpr, C_BITS: tl.constexpr,
        ROW_ROT: tl.constexpr, COL_ROT: tl.constexpr, ROW_SIGNS: tl.constexpr,
        COL_SIGNS: tl.constexpr, ROW_SR: tl.constexpr, COL_SR: tl.constexpr,
        STEP_DEV: tl.constexpr, ORDER: tl.constexpr, TWO_LEVEL: tl.constexpr,
        SCALE_MIN_TINY: tl.constexpr, ROUNDING: tl.constexpr, OVERFLOW: tl.constexpr,
        NAN_POISON: tl.constexpr, INF_POISON: tl.constexpr, SIGNED_ZERO: tl.constexpr,
        FLUSH: tl.constexpr):
    """NVFP4 fake quantization of each tile per orientation (rotation and SR as
    triton_train.mx_qdq_train_kernel; each orientation's tensor constants T and S_enc / 6 from
    nvfp4_train_amax_kernel)."""
    if STEP_DEV:
        step = tl.load(step_ptr)
    else:
        step = 0
    r0, c0, rows, cols, m, offs = _qdq_tile(n_rows, n_cols, BR, BC)
    b, a = _load_tile(x_ptr, r0, c0, n_rows, n_cols, BR, BC, SRC)
    if ROWS:
        rn: tl.constexpr = ROT_N if ROW_ROT else 0
        bo, ao, rb = _orientation(b, a, rows, cols, r0, c0, n_rows, n_cols, 1, BR, BC, rn, LOG2N,
                                  C_BITS, ROW_SIGNS, ROW_SR, row_sr_lo, row_sr_hi, row_sr_gs,
                                  row_sg_lo, row_sg_hi, row_sg_step, row_sg_tid, step,
                                  STEP_DEV)
        _nvfp4_write(bo, ao, rb, 0, amax_ptr, row_out_ptr, row_scale_ptr, row_code_ptr,
                     offs, m, rows, cols, r0, c0, n_rows, n_cols, 1, BR, BC, OUT_BF16, WRITE_Q,
                     WRITE_V, ROW_SR, ORDER, TWO_LEVEL, SCALE_MIN_TINY, ROUNDING, OVERFLOW,
                     NAN_POISON, INF_POISON, SIGNED_ZERO, FLUSH)
    if COLS:
        cn: tl.constexpr = ROT_N if COL_ROT else 0
        bo, ao, rb = _orientation(b, a, rows, cols, r0, c0, n_rows, n_cols, 0, BR, BC, cn, LOG2N,
                                  C_BITS, COL_SIGNS, COL_SR, col_sr_lo, col_sr_hi, col_sr_gs,
                                  col_sg_lo, col_sg_hi, col_sg_step, col_sg_tid, step,
                                  STEP_DEV)
        _nvfp4_write(bo, ao, rb, 1, amax_ptr, col_out_ptr, col_scale_ptr, col_code_ptr,
                     offs, m, rows, cols, r0, c0, n_rows, n_cols, 0, BR, BC, OUT_BF16, WRITE_Q,
                     WRITE_V, COL_SR, ORDER, TWO_LEVEL, SCALE_MIN_TINY, ROUNDING, OVERFLOW,
                     NAN_POISON, INF_POISON, SIGNED_ZERO, FLUSH)


@triton.jit
def nvfp4_scale_cast_kernel(x_ptr, alpha_ptr, out_ptr, n, OUT_BF16: tl.constexpr,
                            BLOCK: tl.constexpr):
    """out = fl32(x * alpha) (alpha: one fp32 on the device, the GEMM's T_a T_b), written as
    fp32 or as bf16 (RNE, integer ops): the NVFP4 GEMM epilogue in one pass."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(alpha_ptr)
    v = tl.load(x_ptr + offs, mask=m, other=0.0) * a
    if OUT_BF16:
        vb = v.to(tl.int32, bitcast=True)
        vb = tl.where((vb & 0x7FFFFFFF) > 0x7F800000, 0x7FC00000, vb)
        hb = ((vb + 0x7FFF + ((vb >> 16) & 1)) >> 16) & 0xFFFF
        tl.store(out_ptr + offs, hb.to(tl.int16).to(tl.bfloat16, bitcast=True), mask=m)
    else:
        tl.store(out_ptr + offs, v, mask=m)


KERNELS = {"nvfp4_train_amax": nvfp4_train_amax_kernel,
           "nvfp4_qdq_train": nvfp4_qdq_train_kernel,
           "nvfp4_scale_cast": nvfp4_scale_cast_kernel}
_INTS = ("row_sr_lo", "row_sr_hi", "row_sr_gs", "col_sr_lo", "col_sr_hi", "col_sr_gs",
         "row_sg_lo", "row_sg_hi", "row_sg_step", "row_sg_tid", "col_sg_lo", "col_sg_hi",
         "col_sg_step", "col_sg_tid")
ARG_TYPES = {
    "nvfp4_train_amax": {"x_ptr": "SRC", "amax_ptr": "*i32", "ts_ptr": "*i32",
                         "step_ptr": "*i64",
                         "n_rows": "i32", "n_cols": "i32",
                         **{k: "i32" for k in _INTS if "_sg_" in k}},
    "nvfp4_qdq_train": {"x_ptr": "SRC", "amax_ptr": "*i32", "row_out_ptr": "OUT", "col_out_ptr": "OUT", "row_scale_ptr": "*u8",
                        "row_code_ptr": "*u8", "col_scale_ptr": "*u8", "col_code_ptr": "*u8",
                        "step_ptr": "*i64", "n_rows": "i32", "n_cols": "i32",
                        **{k: "i32" for k in _INTS}}}
_SRC_KIND = {"float32": 0, "bfloat16": 1, "float16": 2}
TILE: list = [None]     # (BR, BC, num_warps) instead of the default tile (GPU benchmarks)
AMAX_TILE: list = [None]     # (BR, BC) of the amax pass instead of its default (tests)


def supports(profile) -> bool:
    """Whether :func:`qdq` implements the NVFP4 profile: one tensor scale per tensor and 1 x 16
    blocks (not te_nvfp4_row / te_nvfp4_2d), a deterministic rounding (SR is asked for per
    orientation)."""
    try:
        _profile_ce(profile)
    except (KernelUnsupported, MXRefError, KeyError, ValueError):
        return False
    return True


def _profile_ce(profile) -> dict:
    pr = get_profile(profile)
    pr.check_format(FORMATS["nvfp4"])
    if pr.nvfp4_amax_scope != "tensor" or pr.nvfp4_tile_2d:
        raise KernelUnsupported(f"profile {pr.name!r}: qdq implements one tensor scale per "
                                "tensor and 1 x 16 blocks")
    if pr.rounding == "stochastic":
        raise KernelUnsupported(f"profile {pr.name!r} rounds stochastically: pass a "
                                "deterministic profile and row_sr / col_sr")
    if pr.ragged != "zero_pad" and pr.ragged != "error":
        raise KernelUnsupported(f"profile {pr.name!r}: ragged={pr.ragged!r}")
    ce = mx_constexprs("nvfp4_quantize", "nvfp4", pr, "float32")
    ca = mx_constexprs("nvfp4_amax", "nvfp4", pr, "float32")
    return {"ORDER": ce["ORDER"], "TWO_LEVEL": ce["TWO_LEVEL"],
            "SCALE_MIN_TINY": ce["SCALE_MIN_TINY"], "ROUNDING": ce["ROUNDING"],
            "OVERFLOW": ce["OVERFLOW"], "NAN_POISON": ce["NAN_POISON"],
            "INF_POISON": ce["INF_POISON"], "SIGNED_ZERO": ce["SIGNED_ZERO"],
            "FLUSH": ce["FLUSH"], "WITH_INF": ca["WITH_INF"]}


def nvfp4_train_constexprs(profile, src, *, rows, cols, with_codes, out_dtype, br, bc, rot_n,
                           row_rot, col_rot, row_signs, col_signs, row_sr, col_sr,
                           step_dev=False, amax_tile=None,
                           values=True) -> tuple[dict, dict]:
    """(constexprs of nvfp4_train_amax_kernel, of nvfp4_qdq_train_kernel); amax_tile: the
    amax pass's (BR, BC) when it differs from the qdq tile (br, bc)."""
    p = _profile_ce(profile)
    rot = dict(ROT_N=rot_n, LOG2N=rot_n.bit_length() - 1 if rot_n else 0,
               C_BITS=inv_sqrt_n_bits(rot_n) if rot_n else 0, ROW_ROT=bool(row_rot),
               COL_ROT=bool(col_rot), ROW_SIGNS=row_signs, COL_SIGNS=col_signs,
               STEP_DEV=bool(step_dev))
    base = dict(SRC=_SRC_KIND[src], ROWS=bool(rows), COLS=bool(cols), BR=br, BC=bc, **rot)
    amax = dict(base, WITH_INF=p["WITH_INF"], FLUSH=p["FLUSH"], ORDER=p["ORDER"],
                TWO_LEVEL=p["TWO_LEVEL"])
    if amax_tile is not None:
        amax.update(BR=amax_tile[0], BC=amax_tile[1])
    q = dict(base, WRITE_Q=bool(with_codes), WRITE_V=bool(values),
             OUT_BF16=out_dtype == "bfloat16",
             ROW_SR=int(row_sr), COL_SR=int(col_sr),
             **{k: v for k, v in p.items() if k != "WITH_INF"})
    return amax, q


_CE: dict = {}


def _ce(key):
    hit = _CE.get(key)
    if hit is None:
        (dtype, profile, rows, cols, wq, odt, br, bc, rn, rr, cr, rs, cs, rsr, csr, sd, at,
         wv) = key
        src = {0: "float32", 1: "bfloat16", 2: "float16"}[_SRC[dtype]]
        ca, cq = nvfp4_train_constexprs(profile, src, rows=rows, cols=cols, with_codes=wq,
                                        out_dtype=_OUT[odt], br=br, bc=bc, rot_n=rn,
                                        row_rot=rr, col_rot=cr, row_signs=rs, col_signs=cs,
                                        row_sr=rsr, col_sr=csr, step_dev=sd, amax_tile=at,
                                        values=wv)
        out = []
        for kern, ce in ((nvfp4_train_amax_kernel, ca), (nvfp4_qdq_train_kernel, cq)):
            names = kern.arg_names
            nrt = len(names) - len(ce)
            if set(names[nrt:]) != set(ce):
                raise KeyError(f"{kern.fn.__name__}'s constexprs {names[nrt:]} are not "
                               f"nvfp4_train_constexprs' {sorted(ce)}")
            out.append((ce, tuple(ce[n] for n in names[nrt:])))
        hit = _CE[key] = tuple(out)
    return hit


def qdq(x: torch.Tensor, profile="te_nvfp4", *, rows: bool = True, cols: bool = False,
        out_dtype: torch.dtype = torch.bfloat16, with_codes: bool = False, rot_n: int = 0,
        row_signs=None, col_signs=None, row_sr=None, col_sr=None,
        row_rot: bool | None = None, col_rot: bool | None = None,
        step: torch.Tensor | None = None, values: bool = True, sr_words: int = 1):
    """NVFP4 fake quantization of a 2-D tensor x [R, C]: ``(row_values, col_values, q, ts)``.

    Per orientation asked for (rows: blocks of 16 along C, the operand x; cols: blocks of 16
    down each column, the operand x^T), with the rotation, signs, SR seeds and device step of
    ``triton_train.qdq`` (``sr_words`` included): the values e2m1 x e4m3 (bf16 or fp32) of ``mxref.quantize(rotate(x),
    'nvfp4', profile, rand_bits=...)`` along that orientation, its own tensor scale from the
    (rotated) orientation's amax. ts: float32 [2], the decode-side tensor scales T of the rows
    and of the columns (dequantized = values x T; a slot not asked for is left unwritten). q:
    None, or with ``with_codes`` (row scales [R, C / 16], row codes [R, C], col scales
    [R / 16, C], col codes [R, C]) as uint8 (E4M3 bytes, E2M1 codes), None where not asked.
    ``values=False`` (with codes): the values are not written (both None)."""
    x, bits = _prep(x)
    nw = None if INTERPRETED else 4
    tile = None
    if not INTERPRETED:
        # measured on an H200 (bench/results/train_step/h200_nvfp4_v4_tiles.md): one warp on
        # 16 x 64 for RNE (each column block inside the warp), 16 x 128 with four warps when an
        # orientation rounds stochastically
        sr = (rows and row_sr is not None) or (cols and col_sr is not None)
        tile, nw = ((16, 128), 4) if sr else ((16, 64), 1)
    if TILE[0] is not None:          # (BR, BC, num_warps): benchmark sweeps and tests
        tile, nw = TILE[0][:2], (None if INTERPRETED else TILE[0][2])
    R, C, row_rot, col_rot, sd, rs, cs, rsr, csr, br, bc, rk, ck = launch_args(
        x, out_dtype, rows, cols, rot_n, row_rot, col_rot, row_signs, col_signs, row_sr, col_sr,
        step, block=16, tile=tile, sr_words=sr_words)
    # the amax pass only reads: on a GPU its own larger tile and four warps (any tile whose
    # sides are multiples of the rotation gives the same amax); the interpreter keeps the qdq
    # tile, so that the tests loop over several tiles per program
    at, anw = (None, nw) if INTERPRETED else ((max(32, br), max(256, bc)), 4)
    if AMAX_TILE[0] is not None:
        at = (max(AMAX_TILE[0][0], br), max(AMAX_TILE[0][1], bc))
    if at is not None:
        _check_local_offsets(at[0], C)
    (ca, cq) = _ce((x.dtype, profile if isinstance(profile, str) else get_profile(profile).name,
                    bool(rows), bool(cols), bool(with_codes), out_dtype, br, bc, rot_n, row_rot,
                    col_rot, rs[0], cs[0], rk, ck, sd, at, bool(values)))
    if not (values or with_codes):
        raise KernelUnsupported("qdq: values=False writes only the codes: pass with_codes")
    dev = x.device
    rv = torch.empty((R, C), dtype=out_dtype, device=dev) if rows and values else None
    cv = torch.empty((R, C), dtype=out_dtype, device=dev) if cols and values else None
    ts = torch.ones(2, dtype=torch.float32, device=dev)      # T = 1 for an empty tensor
    # amax (rows, columns), finished programs, unused, T (rows, columns), S_enc / 6 (rows,
    # columns): nvfp4_train_amax_kernel's docstring
    amax = torch.zeros(8, dtype=torch.int32, device=dev)
    q = None
    if with_codes:
        q = (torch.empty((R, C // 16), dtype=torch.uint8, device=dev) if rows else None,
             torch.empty((R, C), dtype=torch.uint8, device=dev) if rows else None,
             torch.empty((R // 16, C), dtype=torch.uint8, device=dev) if cols else None,
             torch.empty((R, C), dtype=torch.uint8, device=dev) if cols else None)
    # a pointer for the arguments nothing is written through
    dummy = next(t for t in (rv, cv, *(q or ())) if t is not None)
    ptrs = (dummy,) * 4 if q is None else tuple(t if t is not None else dummy for t in q)
    if R and C:
        grid = triton.cdiv(R, br) * triton.cdiv(C, bc)
        ag = grid if at is None else triton.cdiv(R, at[0]) * triton.cdiv(C, at[1])
        stp = step if sd else bits
        launch_cached(nvfp4_train_amax_kernel, min(ag, _amax_programs(dev)), ca, anw,
                      (bits, amax, ts.view(torch.int32), stp, R, C, *rs[1:], *cs[1:]), 4,
                      enable_fp_fusion=False)
        launch_cached(nvfp4_qdq_train_kernel, grid, cq, nw,
                      (bits, amax, dummy if rv is None else rv,
                       dummy if cv is None else cv, *ptrs, stp, R, C, *rsr, *csr, *rs[1:],
                       *cs[1:]), 9, enable_fp_fusion=False)
    return rv, cv, q, ts


_FLOAT = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def nvfp4_quantize_rows(bits: torch.Tensor, src: str, profile):
    """``triton_quant.nvfp4_quantize`` of one tensor: bits [1, ..., C] (the int16 / int32
    patterns of a ``src`` tensor, C a multiple of 16) -> (scales [1, ..., C / 16], codes like
    bits, tensor_scale float32 [1]) by :func:`qdq`'s launch (the amax pass, then the rows with
    codes and without values); None where qdq does not take the profile or the shape (the
    caller then takes its block kernels)."""
    if not supports(profile):
        return None
    C = bits.shape[-1]
    try:
        _, _, q, ts = _qdq(bits.reshape(-1, C).view(_FLOAT[src]), profile, rows=True,
                           cols=False, with_codes=True, values=False)
    except KernelUnsupported:
        return None
    return q[0].reshape(*bits.shape[:-1], C // 16), q[1].reshape(bits.shape), ts[:1]


# the launcher itself, not the module attribute: a test that wraps qdq to count the training
# launches does not see this op's
_qdq = qdq

# triton_quant.nvfp4_quantize takes one tensor through nvfp4_quantize_rows (this binds the
# triton_quant of this module's kind: the loader's private copies import each other)
NVFP4_ROWS[0] = nvfp4_quantize_rows


def _amax_programs(dev: torch.device) -> int:
    """The amax pass's grid at most: 8 programs per SM on a GPU (each loops over its tiles);
    3 under the interpreter, so that the tests run programs with several tiles."""
    if INTERPRETED or dev.type != "cuda":
        return 3
    return 8 * sm_count(dev)


def scale_cast(x: torch.Tensor, alpha: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(x * alpha).to(dtype)`` for a contiguous fp32 x and a one-element fp32 alpha on x's
    device, in one pass (bit for bit: one fp32 multiply, then RNE to bf16 or nothing)."""
    if x.dtype != torch.float32 or not x.is_contiguous():
        raise KernelUnsupported("scale_cast takes a contiguous float32 tensor")
    if not (isinstance(alpha, torch.Tensor) and alpha.dtype == torch.float32 and
            alpha.numel() == 1 and alpha.device == x.device):
        raise KernelUnsupported(f"alpha must be one float32 on {x.device}")
    if dtype not in _OUT:
        raise KernelUnsupported(f"scale_cast writes bfloat16 or float32, not {dtype}")
    out = torch.empty_like(x, dtype=dtype)
    n = x.numel()
    if n:
        nvfp4_scale_cast_kernel[(triton.cdiv(n, 1024),)](
            x, alpha.reshape(1), out, n, OUT_BF16=dtype == torch.bfloat16, BLOCK=1024,
            **({} if INTERPRETED else {"num_warps": 4}), enable_fp_fusion=False)
    return out


def aot_specs():
    """[(id, jitfn, signature, constexprs)]: te_nvfp4 rows + columns with the Wgrad RHT16
    (mask signs) and SR on both, ocp (exact order) with Philox signs and a device step."""
    out = []
    for prof, src, odt, wq, rn, rs, cs, rsr, csr, sd in (
            ("te_nvfp4", "bfloat16", "bfloat16", False, 16, 0, 1, True, True, False),
            ("te_nvfp4", "float32", "float32", True, 0, 0, 0, False, False, False),
            ("ocp", "bfloat16", "bfloat16", True, 32, 2, 2, True, True, True)):
        ca, cq = nvfp4_train_constexprs(prof, src, rows=True, cols=True, with_codes=wq,
                                        out_dtype=odt, br=32, bc=128, rot_n=rn,
                                        row_rot=False, col_rot=rn > 0, row_signs=rs,
                                        col_signs=cs, row_sr=rsr, col_sr=csr, step_dev=sd)
        for name, kern, ce in (("nvfp4_train_amax", nvfp4_train_amax_kernel, ca),
                               ("nvfp4_qdq_train", nvfp4_qdq_train_kernel, cq)):
            sig = {k: {"SRC": "*i32" if src == "float32" else "*i16",
                       "OUT": "*bf16" if odt == "bfloat16" else "*fp32"}.get(v, v)
                   for k, v in ARG_TYPES[name].items()}
            sig.update({k: "constexpr" for k in ce})
            names = kern.arg_names
            if set(names) != set(sig):
                raise KeyError(f"{name}: arguments {sorted(set(names) ^ set(sig))} are not "
                               "described by ARG_TYPES / the constexprs")
            out.append((f"{name}-{prof}-{src}-h{rn}-s{rs}{cs}-sr{int(rsr)}{int(csr)}"
                        f"{'-codes' if wq else ''}{'-stepdev' if sd else ''}", kern,
                        {k: sig[k] for k in names}, ce))
    for odt in ("bfloat16", "float32"):
        ce = {"OUT_BF16": odt == "bfloat16", "BLOCK": 1024}
        sig = {"x_ptr": "*fp32", "alpha_ptr": "*fp32",
               "out_ptr": "*bf16" if odt == "bfloat16" else "*fp32", "n": "i32",
               "OUT_BF16": "constexpr", "BLOCK": "constexpr"}
        out.append((f"nvfp4_scale_cast-{odt}", nvfp4_scale_cast_kernel, sig, ce))
    return out
