"""Triton block-Hadamard rotation (the butterfly contract of ``mxref.rotate``) and rotated MX /
NVFP4 quantization fused into one pass, bit-exact against ``mxref.rotate``.

The contract (docs/rotations.md section 2, ``method="butterfly"``): per block of ``n``
consecutive elements along the last axis (n in 16..256),

1. signs: the sign bit of x_j flipped where d_j = -1 (an integer XOR on the fp32 bits: exact);
2. the in-place FWHT in registers, stages h = 1, 2, ..., n/2, pairs (j, j + h) with
   (v_j, v_j+h) <- (fl(v_j + v_j+h), fl(v_j - v_j+h)): each stage is a reshape / permute /
   split / join of the fp32 tile, no ``tl.dot`` (a tensor core's sum order is unspecified);
3. one fp32 RNE multiplication by fl32(1/sqrt n) (``mxref.rotate.inv_sqrt_n_bits``);
4. optionally RNE to bfloat16 (done on the integer bits: (b + 0x7FFF + lsb) & ~0xFFFF).

NaN outputs are written as the canonical 0x7FC00000 (as mxref), so results are bit-identical,
not only equal as a NaN class.

Why the float arithmetic is exact on every target: the only float operations are fp32 add/sub
(IEEE RNE on NVIDIA ``add.f32`` / AMD ``v_add_f32``) and one fp32 multiply whose result feeds no
add (the sign step is an integer XOR), so FMA contraction has nothing to contract; launchers pass
``enable_fp_fusion=False`` anyway. Subnormals: Triton's NVIDIA backend emits plain ``add.f32`` /
``mul.f32`` without ``.ftz`` (its ``enable_reflect_ftz`` option only affects libdevice calls,
which these kernels do not make), and the AMD backend compiles with
``denormal-fp-math-f32 = ieee`` unless ``allow_flush_denorm`` is set (default False); so fp32
subnormal inputs, partial sums and results are kept, as the reference requires. The Triton
interpreter computes with numpy float32 (IEEE, no flush).

After the rotation, the fused kernels quantize the rotated values (a register tile, never
written to memory). MX formats and profiles that ``triton_fast.supports(fmt, profile,
'float32')`` (``ocp``, ``rceil``, ``triton_kernels_round_down``; MXFP4/6/8) go through
triton_fast's encoder (``_orient``: block amax of the magnitude bits, the E8M0 byte from the
exponent field, one fp32 multiply by 2^-s, the element rounding as one fp32 add, integer code
arithmetic; proofs P1-P6 in triton_fast's docstring, whose input there may be any fp32 value,
as the rotated tile is here). Every other MX profile / format (MXINT8, other knobs) and NVFP4
quantize exactly as ``triton_quant.mx_quantize_kernel`` / ``nvfp4_quantize_kernel`` do, with
the same integer helpers and constexpr knobs (``mx_constexprs``), so every format and profile
the generic kernels support works here. A program's tile is [ROWS, W] with
W = max(n, quant block): whole rotation blocks and whole quant blocks (n = 16 with MX: two
rotation blocks per scale block).

Kernels: ``rotate_kernel``, ``rotate_mx_quantize_kernel``, ``rotate_nvfp4_amax_kernel`` +
``rotate_nvfp4_quantize_kernel`` (NVFP4 needs the rotated tensor's global amax first: the amax
kernel rotates and reduces without writing, ``triton_quant.nvfp4_tensor_scale_kernel`` makes the
tensor constants, the quantize kernel rotates again and quantizes: two reads of the input, one
write of the codes), ``random_signs_kernel`` (own Philox4x32-10).

Launchers: :func:`rotate`, :func:`quantize_rotated`, :func:`random_signs`.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl
from mxkernels._memo import DeviceConsts, memo_dict

from mxkernels.triton_sr import _philox4 as _philox_word0  # Philox4x32-10, word 0
from mxkernels.triton_fast import _orient as _fast_orient   # the fast MX encoder (@jit)
from mxkernels.triton_fast import supports as _fast_supports
from mxkernels.triton_common import (_encode, _f32_div, _f32_min_pos, _f32_mul, _f32_parts,
                                     _finish, KernelUnsupported, _max_along, _mx_scale_byte,
                                     _normalize, _nvfp4_block_scales, _round_sig, _widen_to_f32,
                                     _mxt_amax, _mxt_element)
from mxkernels.triton_quant import (_as_bits, _element_value, mx_constexprs,
                                    nvfp4_tensor_scale_kernel, pack_codes, _to_f32)
from mxref.formats import get_format
from mxref.profiles import get_profile
from mxref.rotate import ROTATION_SIZES, TE16_SIGNS, inv_sqrt_n_bits

__all__ = [
    "ARG_TYPES",
    "KERNELS",
    "KernelUnsupported",
    "aot_specs",
    "quantize_rotated",
    "random_signs",
    "rotate",
    "rotate_constexprs",
]

_F32_INF: tl.constexpr = tl.constexpr(0x7F800000)
_F32_QNAN: tl.constexpr = tl.constexpr(0x7FC00000)
_F32_ONE: tl.constexpr = tl.constexpr(0x3F800000)
_F32_SIX: tl.constexpr = tl.constexpr(0x40C00000)
_F32_MAX: tl.constexpr = tl.constexpr(0x7F7FFFFF)
_F32_E4M3_TINY: tl.constexpr = tl.constexpr(0x3C800000)    # 2^-6
_F32_448: tl.constexpr = tl.constexpr(0x43E00000)

# =========================================================================================
# device helpers
# =========================================================================================
@triton.jit
def _chunk_tile(rows_per_t, n_t, n_cols, n_chunk, W: tl.constexpr, ROWS: tl.constexpr,
                TPACK: tl.constexpr):
    """This program's ROWS chunks of W columns of a contiguous [n_t * rows_per_t, n_cols]
    array made of n_t tensors of rows_per_t rows. TPACK: a 1-D grid over every chunk of every
    tensor (a tile may span tensors; for many small tensors); else tensor t = program_id(1)
    and a 1-D range of its chunks. Returns the tensor index of each chunk (int32 [ROWS]),
    validity, global rows r (int64), chunk column index c, element columns, offsets (int64)
    and the element mask. The launchers keep the chunk counts below 2^31."""
    g = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    if TPACK:
        g_ok = g < n_t * rows_per_t * n_chunk
        rg = g // n_chunk
        c = g - rg * n_chunk
        r = rg.to(tl.int64)
        tv = rg // rows_per_t
    else:
        t = tl.program_id(1)
        g_ok = g < rows_per_t * n_chunk
        rl = g // n_chunk
        c = g - rl * n_chunk
        r = t.to(tl.int64) * rows_per_t + rl
        tv = rl * 0 + t
    cols = (c * W)[:, None] + tl.arange(0, W)[None, :]
    m = g_ok[:, None] & (cols < n_cols)
    offs = r[:, None] * n_cols + cols
    return tv, g_ok, r, c, cols, offs, m


@triton.jit
def _fwht(v, R: tl.constexpr, N: tl.constexpr, LOG2N: tl.constexpr):
    """In-place FWHT of each row of the fp32 tile v [R, N]: stages h = 1, 2, ..., N/2, pairs
    (j, j + h) -> (fl(v_j + v_j+h), fl(v_j - v_j+h)); pure reshape/permute/split/join."""
    for s in tl.static_range(LOG2N):                # stage s: h = 2^s
        v = tl.reshape(v, (R * N // (2 << s), 2, 1 << s))
        a, b = tl.split(tl.permute(v, (0, 2, 1)))          # a = v_j, b = v_j+h
        v = tl.permute(tl.join(a + b, a - b), (0, 2, 1))
    return tl.reshape(v, (R, N))


@triton.jit
def _rotate_tile(raw, sign_ptr, SRC: tl.constexpr, N: tl.constexpr, LOG2N: tl.constexpr,
                 W: tl.constexpr, ROWS: tl.constexpr, HAS_SIGNS: tl.constexpr,
                 C_BITS: tl.constexpr, BF16: tl.constexpr):
    """fp32 bits (int32 [ROWS, W]) of the butterfly rotation of the loaded source bit
    patterns ``raw`` (W / N rotation blocks per row); NaN canonical, optional bf16 RNE."""
    b = _widen_to_f32(raw, SRC)
    if HAS_SIGNS:                      # sign masks (0 or 0x80000000) of the N block positions
        sm = tl.load(sign_ptr + (tl.arange(0, W) & (N - 1)))
        b = b ^ sm[None, :]
    v = b.to(tl.float32, bitcast=True)
    v = tl.reshape(v, (ROWS * W // N, N))
    v = _fwht(v, ROWS * W // N, N, LOG2N)
    c = tl.full((1, 1), C_BITS, tl.int32).to(tl.float32, bitcast=True)
    y = (v * c).to(tl.int32, bitcast=True)          # the one normalising multiply
    y = tl.reshape(y, (ROWS, W))
    nan = (y & 0x7FFFFFFF) > _F32_INF
    if BF16:                           # RNE to bf16 (NaN excluded; overflow carries to Inf)
        y = (y + (0x7FFF + ((y >> 16) & 1))) & -65536
    return tl.where(nan, _F32_QNAN, y)


@triton.jit
def _mx_blocks(b, EL_IS_INT: tl.constexpr, EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr,
               EL_BIAS: tl.constexpr, EL_EMAX: tl.constexpr, EL_MAXCODE: tl.constexpr,
               EL_SIGNBIT: tl.constexpr, EL_NAN: tl.constexpr, EL_INF: tl.constexpr,
               EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr, EL_MAXF32: tl.constexpr,
               SCALE_RULE: tl.constexpr, ROUNDING: tl.constexpr, OVERFLOW: tl.constexpr,
               NAN_POISON: tl.constexpr, INF_MODE: tl.constexpr, SIGNED_ZERO: tl.constexpr,
               FLUSH: tl.constexpr, RCEIL_ANY_UP: tl.constexpr, SCALE_OVF_NAN: tl.constexpr,
               ZEXP: tl.constexpr, RCEIL_LOG2: tl.constexpr, INT8_FULL: tl.constexpr,
               AMAX_FLOOR: tl.constexpr, NAN_ELEM_MAX: tl.constexpr,
               LOG2_F32: tl.constexpr, ELEM_F32: tl.constexpr, ZERO_AMAX_MIN: tl.constexpr):
    """MX quantization of fp32 bits b [nb, QB] (one block per row), exactly the body of
    triton_quant.mx_quantize_kernel: (scale bytes int32 [nb], codes int32 [nb, QB])."""
    a = b & 0x7FFFFFFF
    if FLUSH:
        a = tl.where(a < 0x800000, 0, a)
    fin = a < _F32_INF
    amax = _max_along(tl.where(fin, a, 0), 1)
    if AMAX_FLOOR != 0:                           # amax_floor (DeepSeek-V4): max(amax, floor)
        amax = tl.maximum(amax, AMAX_FLOOR)
    has_nan = _max_along(tl.where(a > _F32_INF, 1, 0), 1) > 0
    has_inf = _max_along(tl.where(a == _F32_INF, 1, 0), 1) > 0
    if LOG2_F32 or ZERO_AMAX_MIN:                 # microxcaling torch: floor(fl32(log2 amax))
        amax = _mxt_amax(amax, LOG2_F32, ZERO_AMAX_MIN)
    byte, s, nan_scale = _mx_scale_byte(amax, has_nan, has_inf, EL_EMAX, EL_MAXSIG, EL_EVENTHR,
                                        EL_MAXF32, SCALE_RULE, RCEIL_ANY_UP, RCEIL_LOG2,
                                        NAN_POISON, INF_MODE, SCALE_OVF_NAN)
    se = tl.where(s == -127, ZEXP, s)
    code = _encode(b, se[:, None], EL_IS_INT, EL_MBITS, EL_EMIN, EL_BIAS, EL_MAXCODE,
                   EL_SIGNBIT, EL_NAN, EL_INF, ROUNDING, OVERFLOW, SIGNED_ZERO, FLUSH,
                   INT8_FULL)
    if ELEM_F32:                # microxcaling torch: floor(fl32(|A| * 2^k + 0.5)) on fl32(x / 2^s)
        code = _mxt_element(code, b, se[:, None], EL_IS_INT, EL_MBITS, EL_EMIN, EL_SIGNBIT)
    if NAN_ELEM_MAX:            # nan_element='signed_max' (AMD gfx950): +-max normal, sign kept
        code = tl.where((b & 0x7FFFFFFF) > _F32_INF,
                        EL_MAXCODE | (((b >> 31) & 1) << EL_SIGNBIT), code)
    if EL_NAN >= 0:
        fill = EL_NAN
    else:
        fill = 0
    code = tl.where(nan_scale[:, None], fill, code)
    return byte, code


@triton.jit
def _store_codes(code_ptr, code, r, cols, offs, m, n_cols, ROWS: tl.constexpr,
                 W: tl.constexpr, PACK4: tl.constexpr):
    """Store int32 codes [ROWS, W]: one byte per code, or (PACK4) two FP4 codes per byte,
    element 0 in the low nibble (rows of n_cols // 2 bytes; n_cols is even)."""
    if PACK4:
        lo, hi = tl.split(tl.reshape(code, (ROWS, W // 2, 2)))
        byte = (lo & 0xF) | ((hi & 0xF) << 4)
        pcols = tl.reshape(cols, (ROWS, W // 2, 2))
        pc, _ = tl.split(pcols)
        pm, _ = tl.split(tl.reshape(m, (ROWS, W // 2, 2)))
        tl.store(code_ptr + (r[:, None] * (n_cols // 2) + (pc >> 1)), byte.to(tl.uint8),
                 mask=pm)
    else:
        tl.store(code_ptr + offs, code.to(tl.uint8), mask=m)


# =========================================================================================
# kernels
# =========================================================================================
@triton.jit
def rotate_kernel(x_ptr, sign_ptr, y_ptr, rows_per_t, n_cols, n_chunk,
                  SRC: tl.constexpr, N: tl.constexpr, LOG2N: tl.constexpr, W: tl.constexpr,
                  ROWS: tl.constexpr, HAS_SIGNS: tl.constexpr, C_BITS: tl.constexpr,
                  BF16: tl.constexpr, OUT16: tl.constexpr):
    """Butterfly rotation of a contiguous [rows, n_cols] bit-pattern array (n_cols a multiple
    of N) -> fp32 bits y [rows, n_cols], or with OUT16 (and BF16) the bf16 bits (int16) of the
    RNE-rounded result."""
    _, _, _, _, _, offs, m = _chunk_tile(rows_per_t, 1, n_cols, n_chunk, W, ROWS, False)
    raw = tl.load(x_ptr + offs, mask=m, other=0)
    y = _rotate_tile(raw, sign_ptr, SRC, N, LOG2N, W, ROWS, HAS_SIGNS, C_BITS, BF16)
    if OUT16:
        tl.store(y_ptr + offs, (y >> 16).to(tl.int16), mask=m)
    else:
        tl.store(y_ptr + offs, y, mask=m)


@triton.jit
def rotate_mx_quantize_kernel(
        x_ptr, sign_ptr, scale_ptr, code_ptr, rows_per_t, n_cols, n_chunk, n_blk,
        SRC: tl.constexpr, N: tl.constexpr, LOG2N: tl.constexpr, W: tl.constexpr,
        ROWS: tl.constexpr, HAS_SIGNS: tl.constexpr, C_BITS: tl.constexpr, BF16: tl.constexpr,
        PACK4: tl.constexpr, BLOCK: tl.constexpr,
        EL_IS_INT: tl.constexpr, EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr,
        EL_BIAS: tl.constexpr, EL_EMAX: tl.constexpr, EL_MAXCODE: tl.constexpr,
        EL_SIGNBIT: tl.constexpr, EL_NAN: tl.constexpr, EL_INF: tl.constexpr,
        EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr, EL_MAXF32: tl.constexpr,
        SCALE_RULE: tl.constexpr, ROUNDING: tl.constexpr, OVERFLOW: tl.constexpr,
        NAN_POISON: tl.constexpr, INF_MODE: tl.constexpr, SIGNED_ZERO: tl.constexpr,
        FLUSH: tl.constexpr, RCEIL_ANY_UP: tl.constexpr, SCALE_OVF_NAN: tl.constexpr,
        ZEXP: tl.constexpr, RCEIL_LOG2: tl.constexpr, INT8_FULL: tl.constexpr,
        FAST: tl.constexpr, FILL: tl.constexpr, SATURATE: tl.constexpr,
        AMAX_FLOOR: tl.constexpr, NAN_ELEM_MAX: tl.constexpr,
        LOG2_F32: tl.constexpr, ELEM_F32: tl.constexpr, ZERO_AMAX_MIN: tl.constexpr):
    """Rotation then MX quantization along the rows of a contiguous [rows, n_cols] array:
    E8M0 bytes [rows, n_blk] (n_blk = ceil(n_cols / BLOCK), a ragged last block zero padded)
    and codes [rows, n_cols] (or [rows, n_cols / 2] with PACK4). W = max(N, BLOCK).
    FAST: the rotated fp32 tile is encoded by triton_fast's encoder (``_orient``: one fp32
    multiply by 2^-s, integer code arithmetic; the profiles / formats of
    ``triton_fast.supports``, BLOCK = 32, FILL / SATURATE as ``fast_constexprs``); else by
    the generic ``_mx_blocks`` (every profile)."""
    _, g_ok, r, c, cols, offs, m = _chunk_tile(rows_per_t, 1, n_cols, n_chunk, W, ROWS,
                                                False)
    raw = tl.load(x_ptr + offs, mask=m, other=0)
    y = _rotate_tile(raw, sign_ptr, SRC, N, LOG2N, W, ROWS, HAS_SIGNS, C_BITS, BF16)
    NQ: tl.constexpr = W // BLOCK                 # quant blocks per chunk
    if FAST:
        # y is the rotation contract's fp32 result (NaN canonical 0x7FC00000, so the fast
        # encoder's "amax >= 0x7F800000 poisons" sees NaN and Inf alike); masked lanes are
        # rotations of +0 (= +0), the zero padding of a ragged block. blk_ok only feeds the
        # tiny-block branch, which is off here.
        byte, code = _fast_orient(y & 0x7FFFFFFF, y, g_ok[:, None], 1, ROWS, W, EL_MBITS,
                                  EL_EMIN, EL_EMAX, EL_MAXCODE, EL_SIGNBIT, FILL, EL_MAXSIG,
                                  EL_EVENTHR, SCALE_RULE, SATURATE, False)
    else:
        byte, code = _mx_blocks(tl.reshape(y, (ROWS * NQ, BLOCK)), EL_IS_INT, EL_MBITS,
                                EL_EMIN, EL_BIAS, EL_EMAX, EL_MAXCODE, EL_SIGNBIT, EL_NAN,
                                EL_INF, EL_MAXSIG, EL_EVENTHR, EL_MAXF32, SCALE_RULE, ROUNDING,
                                OVERFLOW, NAN_POISON, INF_MODE, SIGNED_ZERO, FLUSH,
                                RCEIL_ANY_UP, SCALE_OVF_NAN, ZEXP, RCEIL_LOG2, INT8_FULL,
                                AMAX_FLOOR, NAN_ELEM_MAX, LOG2_F32, ELEM_F32, ZERO_AMAX_MIN)
    qb = (c * NQ)[:, None] + tl.arange(0, NQ)[None, :]              # [ROWS, NQ]
    sm = g_ok[:, None] & (qb < n_blk)
    soffs = r[:, None] * n_blk + qb
    tl.store(scale_ptr + tl.reshape(soffs, (ROWS * NQ,)),
             tl.reshape(byte, (ROWS * NQ,)).to(tl.uint8), mask=tl.reshape(sm, (ROWS * NQ,)))
    _store_codes(code_ptr, tl.reshape(code, (ROWS, W)), r, cols, offs, m, n_cols, ROWS, W,
                 PACK4)


@triton.jit
def rotate_nvfp4_amax_kernel(x_ptr, sign_ptr, amax_ptr, rows_per_t, n_t, n_cols, n_chunk,
                             SRC: tl.constexpr, N: tl.constexpr, LOG2N: tl.constexpr,
                             W: tl.constexpr, ROWS: tl.constexpr, HAS_SIGNS: tl.constexpr,
                             C_BITS: tl.constexpr, BF16: tl.constexpr, TPACK: tl.constexpr,
                             WITH_INF: tl.constexpr, FLUSH: tl.constexpr):
    """Per-tensor amax (fp32 bits; finite values, Inf too when WITH_INF) of the rotated
    values, by atomic max into amax_ptr[t] (zeroed): one atomic per program (grid (chunks,
    n_t)), or with TPACK one per chunk row (1-D grid, tiles spanning small tensors)."""
    tv, g_ok, _, _, _, offs, m = _chunk_tile(rows_per_t, n_t, n_cols, n_chunk, W, ROWS, TPACK)
    raw = tl.load(x_ptr + offs, mask=m, other=0)
    y = _rotate_tile(raw, sign_ptr, SRC, N, LOG2N, W, ROWS, HAS_SIGNS, C_BITS, BF16)
    a = y & 0x7FFFFFFF
    if FLUSH:
        a = tl.where(a < 0x800000, 0, a)
    if WITH_INF:
        keep = (a <= _F32_INF) & m
    else:
        keep = (a < _F32_INF) & m
    row_amax = _max_along(tl.where(keep, a, 0), 1)
    if TPACK:
        tl.atomic_max(amax_ptr + tv, row_amax, mask=g_ok)
    else:
        tl.atomic_max(amax_ptr + tl.program_id(1), _max_along(row_amax, 0))


@triton.jit
def rotate_nvfp4_quantize_kernel(
        x_ptr, sign_ptr, consts_ptr, scale_ptr, code_ptr, rows_per_t, n_t, n_cols, n_chunk,
        n_blk, SRC: tl.constexpr, N: tl.constexpr, LOG2N: tl.constexpr, W: tl.constexpr,
        ROWS: tl.constexpr, HAS_SIGNS: tl.constexpr, C_BITS: tl.constexpr, BF16: tl.constexpr,
        TPACK: tl.constexpr, PACK4: tl.constexpr, BLOCK: tl.constexpr,
        ORDER: tl.constexpr, TWO_LEVEL: tl.constexpr, SCALE_MIN_TINY: tl.constexpr,
        ROUNDING: tl.constexpr, OVERFLOW: tl.constexpr, NAN_POISON: tl.constexpr,
        INF_POISON: tl.constexpr, SIGNED_ZERO: tl.constexpr, FLUSH: tl.constexpr):
    """Rotation then NVFP4 (E2M1, blocks of BLOCK = 16, E4M3 block scale, fp32 tensor scale
    consts[t] from nvfp4_tensor_scale_kernel): the body of triton_quant.nvfp4_quantize_kernel
    on the rotated tile. Grid (chunks, T)."""
    tix, g_ok, r, c, cols, offs, m = _chunk_tile(rows_per_t, n_t, n_cols, n_chunk, W, ROWS,
                                                 TPACK)
    raw = tl.load(x_ptr + offs, mask=m, other=0)
    y = _rotate_tile(raw, sign_ptr, SRC, N, LOG2N, W, ROWS, HAS_SIGNS, C_BITS, BF16)
    NQ: tl.constexpr = W // BLOCK
    b = tl.reshape(y, (ROWS * NQ, BLOCK))
    a = b & 0x7FFFFFFF
    if FLUSH:
        a = tl.where(a < 0x800000, 0, a)
    qb = (c * NQ)[:, None] + tl.arange(0, NQ)[None, :]              # [ROWS, NQ]
    tq = tl.reshape(tix[:, None] + qb * 0, (ROWS * NQ,))            # tensor of each block
    qok = tl.reshape(g_ok[:, None] & (qb >= 0), (ROWS * NQ,))
    tv = tl.load(consts_ptr + tq * 3, mask=qok, other=_F32_ONE)     # the tensor constants
    sc6v = tl.load(consts_ptr + tq * 3 + 2, mask=qok, other=0)

    sc, poison = _nvfp4_block_scales(a, tv, sc6v, NAN_POISON, INF_POISON, ORDER, TWO_LEVEL,
                                     SCALE_MIN_TINY)
    sm = g_ok[:, None] & (qb < n_blk)
    soffs = r[:, None] * n_blk + qb
    tl.store(scale_ptr + tl.reshape(soffs, (ROWS * NQ,)),
             tl.where(poison, 0x7F, sc).to(tl.uint8), mask=tl.reshape(sm, (ROWS * NQ,)))

    s_neg, ss, es, s_nan, _ = _element_value(sc, False, 3, -6, 7, 7, 0x7F, -1)
    if ORDER == 0:     # E2M1_round(x / (S T)), one rounding
        sx, ex = _normalize(a)
        st, et = _f32_parts(tv)
        den = (ss * st).to(tl.int64)[:, None]
        num = sx.to(tl.int64) << 36
        q = num // tl.where(den == 0, 1, den)
        sticky = (num - q * den) != 0
        code, huge = _round_sig(tl.where(a == 0, 1, q), ex - 23 - 36 - (es + et)[:, None],
                                sticky, 1, 0, 1, False, ROUNDING, False)
        code = tl.where((a == 0) | (sc[:, None] == 0), 0, code)
        code = _finish(code, huge, (b >> 31) & 1, a, False, 7, 3, -1, -1, OVERFLOW,
                       SIGNED_ZERO, False)
    else:
        sval = tl.where(s_nan, _F32_QNAN, _to_f32(s_neg, ss, es))
        if ORDER == 1:
            inv = _f32_min_pos(_f32_div(tl.full(sval.shape, _F32_ONE, tl.int32),
                                        _f32_mul(sval, tv)),
                               tl.full(sval.shape, _F32_MAX, tl.int32))
            yy = _f32_mul(b, inv[:, None])
        else:
            one = tl.full(sval.shape, _F32_ONE, tl.int32)
            if TWO_LEVEL:
                recip = _f32_div(_f32_div(one, tv), sval)
            else:
                recip = _f32_div(one, sval)
            if ORDER == 3:     # triton_kernels: quant_scale = where(S == 0, 0, fl(1 / S))
                recip = tl.where(sc == 0, 0, recip)
            yy = _f32_mul(b, recip[:, None])
            ay = yy & 0x7FFFFFFF
            yy = tl.where((ay <= _F32_INF) & (ay > _F32_SIX), (yy & -2147483648) | _F32_SIX,
                          yy)
        code = _encode(yy, 0, False, 1, 0, 1, 7, 3, -1, -1, ROUNDING, OVERFLOW, SIGNED_ZERO,
                       FLUSH, False)
    code = tl.where(poison[:, None], 0, code)
    _store_codes(code_ptr, tl.reshape(code, (ROWS, W)), r, cols, offs, m, n_cols, ROWS, W,
                 PACK4)


@triton.jit
def random_signs_kernel(out_ptr, seed_lo, seed_hi, step, tensor_id, N: tl.constexpr):
    """out[i] = -1 if bit 0 of Philox4x32-10 word 0 with counter (i, step, tensor_id, 0) and
    key (seed_lo, seed_hi) is 1, else +1 (int8); the 32-bit arguments arrive as int32 bit
    patterns."""
    i = tl.arange(0, N)
    z = i * 0
    c0 = i.to(tl.uint32, bitcast=True)
    c1 = (z + step).to(tl.uint32, bitcast=True)
    c2 = (z + tensor_id).to(tl.uint32, bitcast=True)
    c3 = z.to(tl.uint32, bitcast=True)
    k0 = (z + seed_lo).to(tl.uint32, bitcast=True)
    k1 = (z + seed_hi).to(tl.uint32, bitcast=True)
    w = _philox_word0(c0, c1, c2, c3, k0, k1)
    neg = (w & 1) == 1
    tl.store(out_ptr + i, tl.where(neg, -1, 1).to(tl.int8))


# =========================================================================================
# constexprs, signatures, AOT specs
# =========================================================================================
_ROT_ARGS = {"x_ptr": "SRC", "sign_ptr": "*i32"}
ARG_TYPES = {
    "rotate": {**_ROT_ARGS, "y_ptr": "*i32", "rows_per_t": "i32", "n_cols": "i32",
               "n_chunk": "i32"},
    "rotate_mx_quantize": {**_ROT_ARGS, "scale_ptr": "*u8", "code_ptr": "*u8",
                           "rows_per_t": "i32", "n_cols": "i32", "n_chunk": "i32",
                           "n_blk": "i32"},
    "rotate_nvfp4_amax": {**_ROT_ARGS, "amax_ptr": "*i32", "rows_per_t": "i32", "n_t": "i32",
                          "n_cols": "i32", "n_chunk": "i32"},
    "rotate_nvfp4_quantize": {**_ROT_ARGS, "consts_ptr": "*i32", "scale_ptr": "*u8",
                              "code_ptr": "*u8", "rows_per_t": "i32", "n_t": "i32",
                              "n_cols": "i32",
                              "n_chunk": "i32", "n_blk": "i32"},
    "random_signs": {"out_ptr": "*i8", "seed_lo": "i32", "seed_hi": "i32", "step": "i32",
                     "tensor_id": "i32"},
}

KERNELS = {
    "rotate": rotate_kernel,
    "rotate_mx_quantize": rotate_mx_quantize_kernel,
    "rotate_nvfp4_amax": rotate_nvfp4_amax_kernel,
    "rotate_nvfp4_quantize": rotate_nvfp4_quantize_kernel,
    "random_signs": random_signs_kernel,
}

INTERPRETED = type(rotate_kernel).__name__ == "InterpretedFunction"
ROUND_TO = ("float32", "bfloat16")
_SRC_NAMES = ("float32", "bfloat16", "float16")


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or int(n) not in ROTATION_SIZES:
        raise KernelUnsupported(f"rotation size n={n!r} is not supported; allowed: "
                                f"{ROTATION_SIZES}")
    return int(n)


def _check_round_to(round_to) -> bool:
    if round_to not in ROUND_TO:
        raise KernelUnsupported(f"round_to={round_to!r} is not one of {ROUND_TO}")
    return round_to == "bfloat16"


@memo_dict
def rotate_constexprs(kernel: str, n: int, *, src_dtype="float32", round_to="float32",
                      has_signs=True, rows=None, fmt=None, profile="ocp",
                      packed=False, tpack=False, encoder="auto") -> dict:
    """Every constexpr of ``KERNELS[kernel]`` for rotation size n (and, for the quantizing
    kernels, format / profile: the knobs of ``triton_quant.mx_constexprs``). encoder (MX):
    'auto' (triton_fast's encoder where ``triton_fast.supports(fmt, profile, 'float32')``,
    else the generic one), 'generic', or 'fast' (KernelUnsupported where not supported)."""
    n = _check_n(n)
    if kernel == "random_signs":
        return {"N": n}
    bf16 = _check_round_to(round_to)
    if src_dtype not in _SRC_NAMES:
        raise KernelUnsupported(f"source dtype {src_dtype!r} is not one of {_SRC_NAMES}")
    base = {"SRC": _SRC_NAMES.index(src_dtype), "N": n, "LOG2N": n.bit_length() - 1,
            "W": n, "ROWS": 1, "HAS_SIGNS": bool(has_signs), "C_BITS": inv_sqrt_n_bits(n),
            "BF16": bf16}
    if kernel == "rotate":
        ce = {**base, "OUT16": False}
    elif kernel == "rotate_mx_quantize":
        q = mx_constexprs("mx_quantize", fmt, profile, "float32")
        q.pop("SRC")
        q.pop("BLOCK_ROWS")
        ce = {**base, "PACK4": False, "BLOCK": q["BLOCK"], **q}
        ce["W"] = max(n, q["BLOCK"])
        ce["PACK4"] = bool(packed) and get_format(fmt).element.bits == 4
        ce.update(_encoder_constexprs(fmt, profile, q, encoder))
    elif kernel == "rotate_nvfp4_amax":
        q = mx_constexprs("nvfp4_amax", "nvfp4", profile, "float32")
        ce = {**base, "TPACK": bool(tpack), "WITH_INF": q["WITH_INF"], "FLUSH": q["FLUSH"]}
        ce["W"] = max(n, 16)
    elif kernel == "rotate_nvfp4_quantize":
        q = mx_constexprs("nvfp4_quantize", "nvfp4", profile, "float32")
        q.pop("SRC")
        q.pop("BLOCK_ROWS")
        ce = {**base, "TPACK": bool(tpack), "PACK4": bool(packed), **q}
        ce["W"] = max(n, q["BLOCK"])
    else:
        raise KeyError(f"unknown kernel {kernel!r}; known: {', '.join(KERNELS)}")
    ce["ROWS"] = rows if rows is not None else _default_rows(ce["W"])
    return ce


ENCODERS = ("auto", "generic", "fast")


def _encoder_constexprs(fmt, profile, q: dict, encoder: str) -> dict:
    """FAST / FILL / SATURATE of rotate_mx_quantize_kernel. The fast encoder's input is the
    rotated fp32 tile, hence ``supports(..., 'float32')``; its other constexprs (EL_*,
    SCALE_RULE) are the generic ones (same element_constexprs, same SCALE_RULES index)."""
    if encoder not in ENCODERS:
        raise KernelUnsupported(f"encoder={encoder!r} is not one of {ENCODERS}")
    ok = _fast_supports(fmt, profile, "float32") and q["BLOCK"] == 32
    if encoder == "fast" and not ok:
        raise KernelUnsupported(f"encoder='fast': triton_fast does not implement "
                                f"{get_format(fmt).name} under profile "
                                f"{get_profile(profile).name!r}")
    fast = ok and encoder != "generic"
    return {"FAST": fast, "FILL": max(q["EL_NAN"], 0),
            "SATURATE": get_profile(profile).scale_rule not in ("rceil", "ceil")}


def kernel_signature(kernel: str, src_dtype: str, constexprs: dict):
    """(signature, constexprs) for ``triton.compiler.ASTSource`` (every argument in order)."""
    src = "*i32" if src_dtype == "float32" else "*i16"
    types = {k: (src if v == "SRC" else v) for k, v in ARG_TYPES[kernel].items()}
    if constexprs.get("OUT16"):
        types["y_ptr"] = "*i16"
    types.update({k: "constexpr" for k in constexprs})
    names = KERNELS[kernel].arg_names
    if set(names) != set(types):
        raise KeyError(f"{kernel}: arguments {sorted(set(names) ^ set(types))} are not "
                       "described by ARG_TYPES / the constexprs")
    return {k: types[k] for k in names}, constexprs


def aot_specs():
    """[(id, jitfn, signature, constexprs)] covering representative constexpr combinations of
    every kernel (each n's stage count, signs on/off, bf16 output, each source dtype, packed
    FP4, the MX profiles with int64 paths, the three NVFP4 op orders)."""
    combos = [
        ("rotate", 16, "float32", "float32", False, None, "ocp", False),
        ("rotate", 256, "float16", "bfloat16", True, None, "ocp", False),
        ("rotate_mx_quantize", 32, "bfloat16", "float32", True, "mxfp4", "ocp", True),
        ("rotate_mx_quantize", 16, "float32", "bfloat16", True, "mxfp8_e4m3", "rceil", False),
        ("rotate_mx_quantize", 64, "float16", "float32", False, "mxint8", "torchao_rceil",
         False),
        ("rotate_nvfp4_amax", 128, "bfloat16", "float32", True, "nvfp4", "tpack", False),
        ("rotate_nvfp4_quantize", 16, "bfloat16", "float32", True, "nvfp4", "ocp", True),
        ("rotate_nvfp4_quantize", 32, "float32", "bfloat16", True, "nvfp4", "tpack_te_nvfp4",
         False),
        ("random_signs", 256, "float32", "float32", False, None, "ocp", False),
    ]
    specs = []
    for kernel, n, sd, rt, signs, fmt, prof, packed in combos:
        tpack = prof.startswith("tpack")
        prof = prof[len("tpack_"):] if prof.startswith("tpack_") else \
            ("ocp" if tpack else prof)
        ce = rotate_constexprs(kernel, n, src_dtype=sd, round_to=rt, has_signs=signs,
                               fmt=fmt, profile=prof, packed=packed, tpack=tpack)
        sig, ce = kernel_signature(kernel, sd if kernel != "random_signs" else "float32", ce)
        sid = f"{kernel}-n{n}-{sd}-{rt}-{fmt or 'none'}-{prof}" + ("-packed" if packed else "") \
            + ("-tpack" if tpack else "")
        specs.append((sid, KERNELS[kernel], sig, ce))
    return specs


# =========================================================================================
# torch launchers
# =========================================================================================
GPU_TILE_ELEMS = 4096          # elements per program on a GPU: ROWS = GPU_TILE_ELEMS // W
INTERP_TILE_ELEMS = 1 << 15    # interpreted programs cost per instance: few, large ones


def _default_rows(w: int) -> int:
    return max(1, (INTERP_TILE_ELEMS if INTERPRETED else GPU_TILE_ELEMS) // w)


def _rows_for(w: int, n_chunks: int, rows: int | None) -> int:
    if rows is not None:
        if not isinstance(rows, int) or rows < 1 or rows & (rows - 1):
            raise KernelUnsupported(f"rows={rows!r} must be a power of two >= 1")
        return rows
    r = _default_rows(w)
    if INTERPRETED:      # do not pad a small problem up to a huge tile
        r = min(r, triton.next_power_of_2(max(n_chunks, 1)))
    return r


def _num_warps(num_warps, rows, w):
    if num_warps is not None:
        return num_warps
    return 8 if rows * w >= 4096 else 4


_DEVICE_MASKS = DeviceConsts()
_TE16_HOST = torch.tensor(TE16_SIGNS, dtype=torch.int32)


def _sign_mask(signs, n: int, device, seed=0, step=0, tensor_id=0):
    """(int32 tensor [n] of 0 / 0x80000000 sign masks, has_signs) for signs= in the launchers."""
    if isinstance(signs, str):
        if signs == "none":
            return torch.zeros(1, dtype=torch.int32, device=device), False
        if signs == "te16":
            if n != 16:
                raise KernelUnsupported(f"signs='te16' is TransformerEngine's 16-entry vector, "
                                        f"defined for n=16 only, not n={n}")
            d = _DEVICE_MASKS.get(_TE16_HOST, device)
        elif signs == "random":
            d = random_signs(n, seed=seed, step=step, tensor_id=tensor_id,
                             device=device).to(torch.int32)
        else:
            raise KernelUnsupported(f"signs={signs!r}: use 'none', 'te16', 'random' or a "
                                    f"+-1 tensor of length n")
    else:
        d = signs if isinstance(signs, torch.Tensor) else torch.as_tensor(np.asarray(signs))
        if d.dtype == torch.bool or d.is_complex():
            raise KernelUnsupported(f"signs must be an integer or float tensor of +-1, got "
                                    f"{d.dtype}")
        if tuple(d.shape) != (n,):
            raise KernelUnsupported(f"signs must have shape ({n},) for n={n}, got "
                                    f"{tuple(d.shape)}")
        bad = (d != 1) & (d != -1)
        if bool(bad.any()):
            i = int(torch.nonzero(bad)[0, 0])
            raise KernelUnsupported(f"signs entries must be +1 or -1; entry {i} is "
                                    f"{d[i].item()!r}")
        mask = ((d < 0).to(torch.int32) << 31).contiguous()
        if mask.device.type == "cpu":
            return _DEVICE_MASKS.get(mask, device), True    # no host sync on a repeat
        return mask.to(device), True
    return ((d < 0).to(torch.int32) << 31).contiguous(), True


def _prepare(x, n, src_dtype):
    """(contiguous bit tensor [.., C], src name, rows, C) for the launchers."""
    n = _check_n(n)
    if not isinstance(x, torch.Tensor):
        raise KernelUnsupported(f"x must be a torch tensor, got {type(x).__name__}")
    bits, src = _as_bits(x, src_dtype)
    if bits.ndim == 0:
        raise KernelUnsupported("cannot rotate a 0-d tensor: blocks run along the last axis")
    c = bits.shape[-1]
    if c % n:
        raise KernelUnsupported(f"the last dimension ({c}) must be a multiple of the rotation "
                                f"size n={n}")
    bits = bits.contiguous()
    rows = bits.numel() // c if c else 0
    return bits, src, rows, c


def _grid_check(rows_per_t, n_chunk, t):
    if rows_per_t * n_chunk >= 2**31 - 2**20:
        raise KernelUnsupported(f"{rows_per_t * n_chunk} tiles per tensor: split the input "
                                "below 2^31 chunks")
    if t > 65535:
        raise KernelUnsupported(f"{t} tensors in one call: at most 65535 (grid axis 1)")


def random_signs(n: int, *, seed: int, step: int = 0, tensor_id: int = 0,
                 device="cpu") -> torch.Tensor:
    """int8 +-1 tensor [n]: -1 iff bit 0 of Philox4x32-10 word 0 with counter
    (i, step mod 2^32, tensor_id mod 2^32, 0) and key (seed mod 2^32, seed >> 32 mod 2^32)
    is 1, computed on ``device`` (equal to mxref.rotate.sign_vector('random', ...))."""
    n = _check_n(n)
    for name, v in (("seed", seed), ("step", step), ("tensor_id", tensor_id)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise KernelUnsupported(f"{name}={v!r} must be an integer")

    def i32(v):
        v = int(v) % 2**32
        return v - 2**32 if v >= 2**31 else v

    seed = int(seed) % 2**64
    out = torch.empty(n, dtype=torch.int8, device=device)
    random_signs_kernel[(1,)](out, i32(seed), i32(seed >> 32), i32(step), i32(tensor_id), N=n)
    return out


def rotate(x: torch.Tensor, n: int, *, signs="none", round_to: str = "float32",
           src_dtype: str | None = None, seed: int = 0, step: int = 0, tensor_id: int = 0,
           rows: int | None = None, num_warps: int | None = None,
           out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Butterfly block rotation ``y = (x * d) @ H_n / sqrt(n)`` along the last axis, bit-exact
    with ``mxref.rotate.rotate(..., method='butterfly')``; float32 tensor of x's shape on x's
    device (with round_to='bfloat16' a bf16 value held in fp32, low 16 bits zero).

    x: float32/bfloat16/float16, or bit patterns with ``src_dtype``; the last dimension must
    be a multiple of n. signs: 'none', 'te16' (n = 16), 'random' (seed/step/tensor_id, see
    :func:`random_signs`) or a +-1 tensor of length n (int or float). rows: rotation blocks per
    program (power of two); num_warps: the launch's warps. out_dtype: torch.float32, or
    torch.bfloat16 with round_to='bfloat16': the same values as a bf16 tensor (what
    ``.to(torch.bfloat16)`` of the fp32 result gives, without its second pass).
    """
    bits, src, _, _ = _prepare(x, n, src_dtype)
    n = int(n)
    if out_dtype not in (torch.float32, torch.bfloat16) or \
            (out_dtype == torch.bfloat16 and round_to != "bfloat16"):
        raise KernelUnsupported(f"out_dtype={out_dtype}: torch.float32, or torch.bfloat16 "
                                "with round_to='bfloat16'")
    sm, has = _sign_mask(signs, n, bits.device, seed, step, tensor_id)
    ce = dict(rotate_constexprs("rotate", n, src_dtype=src, round_to=round_to, has_signs=has))
    ce["OUT16"] = out_dtype == torch.bfloat16
    out = torch.empty(bits.shape, dtype=torch.int16 if ce["OUT16"] else torch.int32,
                      device=bits.device)
    nblocks = bits.numel() // n
    if nblocks:
        ce["ROWS"] = _rows_for(n, nblocks, rows)
        _grid_check(nblocks, 1, 1)
        grid = (triton.cdiv(nblocks, ce["ROWS"]), 1)
        rotate_kernel[grid](bits, sm, out, nblocks, n, 1, **ce,
                            num_warps=_num_warps(num_warps, ce["ROWS"], n),
                            enable_fp_fusion=False)
    return out.view(out_dtype)


def quantize_rotated(x: torch.Tensor, fmt: str, profile="ocp", n: int = 32, *, signs="none",
                     round_to: str = "float32", src_dtype: str | None = None,
                     packed: bool = False, seed: int = 0, step: int = 0, tensor_id: int = 0,
                     rows: int | None = None, num_warps: int | None = None,
                     pack_tensors: bool | None = None, encoder: str = "auto"):
    """Rotate blocks of n along the last axis (butterfly, as :func:`rotate`), then quantize
    the rotated values along the same axis in the same kernel; bit-exact with
    ``mxref.rotate.quantize_rotated(x, fmt, profile, n, signs=..., round_to=...)``.

    MX formats -> (scales uint8 [..., ceil(C / 32)], codes uint8 [..., C]);
    nvfp4 -> (scales uint8 E4M3 [T, ..., C / 16], codes, tensor_scale float32 [T]) for a
    [T, ..., C] input whose leading index is its own tensor (own global amax; a 2-D input is
    one tensor per row), as ``triton_quant.nvfp4_quantize``.
    packed=True: FP4 codes two per byte, element 0 in the low nibble ([..., C / 2]), written
    by the kernel; FP6 codes are packed four per three bytes afterwards (torch); FP8 / INT8
    codes are returned as they are.
    rows: chunks of max(n, block) elements per program (power of two); num_warps: the
    launch's warps; pack_tensors (NVFP4): tiles span tensors on a 1-D grid (True) or grid
    (chunks, T) (False); None picks by size (packed when a tensor is smaller than a tile, and
    always in the interpreter). encoder (MX formats): 'auto' (the fast encoder of
    ``triton_fast`` where it supports the format / profile, else the generic one),
    'generic' or 'fast' (same bits; a cross-check and benchmark knob).
    """
    f = get_format(fmt)
    pr = get_profile(profile)
    bits, src, nrows, c = _prepare(x, n, src_dtype)
    n = int(n)
    sm, has = _sign_mask(signs, n, bits.device, seed, step, tensor_id)
    dev = bits.device
    ebits = f.element.bits
    pack4 = bool(packed) and ebits == 4
    code_cols = c // 2 if pack4 else c
    lead = tuple(bits.shape[:-1])
    if f.is_nvfp4:
        pr.check_format(f)
        if bits.ndim < 2:
            raise KernelUnsupported("nvfp4 takes [T, ..., C]: T tensors, blocks along C")
        ce_a = rotate_constexprs("rotate_nvfp4_amax", n, src_dtype=src, round_to=round_to,
                                 has_signs=has, profile=pr)
        ce_q = rotate_constexprs("rotate_nvfp4_quantize", n, src_dtype=src, round_to=round_to,
                                 has_signs=has, profile=pr, packed=packed)
        ce_ts = mx_constexprs("nvfp4_tensor_scale", "nvfp4", pr)
        n_t = bits.shape[0]
        bs = ce_q["BLOCK"]
        w = ce_q["W"]
        nblk = c // bs
        scales = torch.empty(lead + (nblk,), dtype=torch.uint8, device=dev)
        codes = torch.empty(lead + (code_cols,), dtype=torch.uint8, device=dev)
        amax = torch.zeros(n_t, dtype=torch.int32, device=dev)
        consts = torch.zeros((n_t, 3), dtype=torch.int32, device=dev)
        if n_t:
            rpt = nrows // n_t
            n_chunk = c // w
            per_t = rpt * n_chunk
            if per_t:
                _grid_check(per_t, 1, 1)
                r = _rows_for(w, nrows * n_chunk if INTERPRETED else per_t, rows)
                # many small tensors (or the interpreter, whose cost is per program): tiles
                # span tensors on a 1-D grid; else grid (chunks of one tensor, T)
                tpack = (INTERPRETED or per_t < r) if pack_tensors is None \
                    else bool(pack_tensors)
                if tpack:
                    _grid_check(nrows * n_chunk, 1, 1)
                    grid = (triton.cdiv(nrows * n_chunk, r), 1)
                else:
                    _grid_check(per_t, 1, n_t)
                    grid = (triton.cdiv(per_t, r), n_t)
                ce_a["ROWS"] = ce_q["ROWS"] = r
                ce_a["TPACK"] = ce_q["TPACK"] = tpack
                nw = _num_warps(num_warps, r, w)
                rotate_nvfp4_amax_kernel[grid](bits, sm, amax, rpt, n_t, c, n_chunk, **ce_a,
                                               num_warps=nw, enable_fp_fusion=False)
            nvfp4_tensor_scale_kernel[(triton.cdiv(n_t, ce_ts["BLOCK_T"]),)](
                amax, consts, n_t, **ce_ts)
            if per_t:
                rotate_nvfp4_quantize_kernel[grid](bits, sm, consts, scales, codes, rpt, n_t, c,
                                                   n_chunk, nblk, **ce_q, num_warps=nw,
                                                   enable_fp_fusion=False)
        return scales, codes, consts[:, 0].contiguous().view(torch.float32)

    ce = rotate_constexprs("rotate_mx_quantize", n, src_dtype=src, round_to=round_to,
                           has_signs=has, fmt=f, profile=pr, packed=packed, encoder=encoder)
    bs = ce["BLOCK"]
    w = ce["W"]
    if c % bs and pr.ragged == "error":
        raise KernelUnsupported(f"length {c} is not a multiple of block size {bs} and profile "
                                f"{pr.name!r} refuses ragged blocks")
    nblk = -(-c // bs)
    n_chunk = -(-c // w)
    scales = torch.empty(lead + (nblk,), dtype=torch.uint8, device=dev)
    codes = torch.empty(lead + (code_cols,), dtype=torch.uint8, device=dev)
    if nrows * n_chunk:
        _grid_check(nrows, n_chunk, 1)
        ce["ROWS"] = _rows_for(w, nrows * n_chunk, rows)
        grid = (triton.cdiv(nrows * n_chunk, ce["ROWS"]), 1)
        rotate_mx_quantize_kernel[grid](bits, sm, scales, codes, nrows, c, n_chunk, nblk,
                                        **ce, num_warps=_num_warps(num_warps, ce["ROWS"], w),
                                        enable_fp_fusion=False)
    if packed and ebits == 6:
        codes = pack_codes(codes, f.name)
    return scales, codes
