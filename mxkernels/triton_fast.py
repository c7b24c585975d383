"""Fast, bit-exact MX quantizers for the training / benchmark hot path (Triton).

``triton_quant.mx_quantize_kernel`` is bit-exact for every profile but decides each element with
the generic ``_normalize`` + ``_round_sig`` (variable shifts, ~60 integer ops per element). The
kernels here implement a subset of the knobs (see :func:`supports`) with a short integer-domain
encoder, and write packed FP4 and swizzled scale layouts directly:

* :func:`quantize_fast` -> (scales, codes): one orientation, blocks along the rows (``axis=-1``)
  or down the columns (``axis=0``, reduced inside the loaded tile: no transpose copy).
* :func:`quantize_dual` -> (row_scales, row_codes, col_scales, col_codes): one read of each
  [BR, BC] tile, both orientations written (Fprop and Wgrad operands).

Formats: mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, mxfp8_e5m2. Profiles: every profile whose
knobs are scale rule (any of floor / rceil / ceil / even / round_down), rounding ``rne``,
overflow ``saturate``, NaN and Inf ``poison``, signed zero ``preserve``, no fp32-subnormal flush,
block 32, ragged ``zero_pad``, ``rceil_subnormal='exact'``, ``zero_scale_elem_exp=-127``, no
float32-log2 rceil, and scale overflow ``clamp`` or ``nan`` (equivalent for these formats, see
P1): among the named profiles ``ocp``, ``rceil`` and ``triton_kernels_round_down``. Anything else
raises ``KernelUnsupported`` naming the missing knob (the generic kernel is the fallback).
Sources: torch bfloat16 (hot path), float16, float32, 2-D.

Memory layouts (the conventions of mxref.layouts / MXTensor):

* codes, unpacked: uint8 [R, C], one code per element, for both axes.
* codes, ``packed=True`` (FP4 only; FP8 is returned unchanged, FP6 packing is refused): two codes
  per byte *along the block axis*, element 2i in the low nibble, exactly ``MXTensor.packed()``:
  ``axis=-1``: [R, ceil(C/2)], byte (r, i) = code(r, 2i) | code(r, 2i+1) << 4;
  ``axis=0``:  [ceil(R/2), C], byte (i, c) = code(2i, c) | code(2i+1, c) << 4
  (a ragged odd count gets a zero high nibble).
* scales, ``row_major``: [R, ceil(C/32)] (axis -1) or [ceil(R/32), C] (axis 0).
  ``cublas`` / ``amd``: 1-D uint8, the [rows, blocks] view of the scales (block axis last, i.e.
  the transpose [C, ceil(R/32)] for axis 0, as ``MXTensor.scales_layout``) in cuBLAS 128x4 tiles
  (offset (r%32)*16 + (r//32)*4 + c in each 512-byte tile, zero padded) or AITER
  ``e8m0_shuffle`` order, equal to ``triton_quant.scale_layout(row-major [rows, blocks])``.

The encoder (per element; proofs P1-P6 below)
--------------------------------------------
Per block (32 elements, cost / 32): ``amax`` = integer max of the magnitude bits ``a`` INCLUDING
NaN/Inf (one reduction: the block is poisoned iff amax >= 0x7F800000, since both NaN and Inf
poison in every supported profile); ``byte = max(ea - EMAX + adj, 0)`` from the exponent field
``ea`` and mantissa of amax; ``S = (byte - 127) << 23``.

Per element, with ``a = b & 0x7FFFFFFF`` the fp32 magnitude bits:

1. ``y = bits(fl32(|x| * 2^-s))``: one fp32 multiply by the block's power of two
   ``2^-s = bits((254 - byte) << 23)`` (P2; exact for subnormal x too, P6).
2. ``m = max(y & 0x7F800000, bits(2^EMIN)) + ((23 - MBITS) << 23)``: the fp32 power of two whose
   ulp is the element quantum of y's binade (2^(max(e, EMIN) - MBITS)).
3. ``f = fl32(float(y) + float(m))``: ONE fp32 add; its IEEE round-to-nearest-even onto the ulp
   grid of m IS the element rounding (P3).
4. ``code = bits(f) - m + (m >> (23 - MBITS)) - F0 << MBITS``: quanta + binade offset (P4).
5. ``min(code, MAXCODE)`` (saturation; only for scale rules that can exceed max normal, P5),
   ``| sign``, poisoned block -> fill code.

Ops per element (bf16 -> MXFP4, axis -1, SASS for sm_90 counted by bench/sass_report.py,
bench/results/sass_sm90.md): widen 1, abs 1, amax ~1 (3-input max tree), scale multiply 1
(FMUL), m 3 (and, max, add), fadd 1 (FFMA: contracted with the multiply, which P2/P6 show is
the same value), code 2 (shift-subtract LEA, 3-input add), saturate 1, sign 2, pack 0.5, poison
0.5: 22.9 SASS thread-instructions per element in all (28.5 with the earlier exponent-field
scaling and its 5-op branchless subnormal fix), of which 16.5 on the ALU pipe, which is what
binds on Hopper (an ALU warp-instruction takes 2 issue cycles; see docs/kernels.md "What limits
each kernel"). With rceil / ceil the saturate is dropped. FP8: no packing.
``tiny_branch=True`` keeps the older exponent-field scaling with a per-tile test and a branch
taken only by tiles holding a nonzero block of amax < ~2^-105 (P6); it is slower and kept only
as a cross-check.

Measured (compiled, H200, bf16 8192x8192, triton 3.6, median of do_bench; bytes read + written
over the time, as a fraction of a torch device copy of the same tensor, 3.94 TB/s): MXFP4
packed axis -1 86 us = 50%; MXFP8 E4M3 axis -1 83 us = 62%; MXFP4 packed axis 0 125 us = 35%;
dual MXFP4 packed 194 us = 27%, dual MXFP8 191 us = 36% (the generic triton_quant kernel:
266 us for MXFP4). The targets (90% / 85% of copy) are NOT met: see the report; the encode is
already short, so the remaining gap is in the layout conversions of the reshapes / reductions
and the packed stores, which need profiling on the GPU. Bit-exactness was checked on that GPU
against mxref for every claimed combination, both axes, packing, layouts and dual.

Proofs
------
P1 (scale byte). For finite amax with exponent field ea >= 1, E = ea - 127 and the rules give
s = E - EMAX + adj (adj: floor 0, rceil [sig > M], ceil [sig > 1], even [sig >= 2-2^-(mb+1)],
round_down -[sig < M], decided on the 23 mantissa bits), byte = s + 127 = ea - EMAX + adj. A
subnormal or zero amax (ea = 0) has E <= -127, so s < -127 clamps to byte 0; the formula gives
0 - EMAX + adj <= -1 (EMAX >= 2 for every supported format), clamped to 0 by the max. The upper
side: ea <= 254 gives byte <= 253 < 255, so neither clamp to 127 nor ``scale_overflow='nan'``
can ever trigger (both knobs are equivalent here).
P2 (exact scaling). byte <= 253 (P1), so 2^-s = 2^(127 - byte) is a normal fp32 in
[2^-126, 2^127] and its bits are (254 - byte) << 23. The product |x| * 2^-s is exact whenever it
is an fp32 normal (no overflow: |x| <= amax, and amax / 2^s < 2^(EMAX + 2) by P1), for any x,
subnormal x included. If |x| / 2^s < 2^-126 the product is rounded to a value <= 2^-126: both
it and the exact value round to code 0 in step 3 (P6), since the smallest element threshold
(half the smallest subnormal) is >= 2^-18 for every format. An all-zero block (byte 0)
multiplies zeros by 2^127. (``tiny_branch=True`` instead subtracts s from the exponent field,
y = max(a - S, 0), exact for normal x only, and fixes subnormal x in a branch.)
P3 (rounding). Let v = float(y) (normal, or tiny per P6), e its binade (or EMIN below it) and
m = 2^(e + 23 - MBITS). v < 2^(e+1) <= m / 2^(22 - MBITS), so v + m lies in [m, 2m) and the
correctly rounded fp32 sum is m + RNE(v / q) * q with q = ulp(m) = 2^(e - MBITS), the element
quantum. Ties go to the even fp32 significand; m's significand is even, so to even
n = RNE(v / q): exactly the element RNE. A carry to 2^(e+1) stays inside [m, 2m].
P4 (code). n = bits(f) - bits(m). For e >= EMIN (binade k = e - EMIN), the element code is
((k + 1) << MBITS) + (n - 2^MBITS) = n + (k << MBITS); below EMIN (subnormal element) it is n
(same m as the first binade, k = 0). m's field is F0 + k with F0 = EMIN + 150 - MBITS, and
m >> (23 - MBITS) = (F0 + k) << MBITS (m has no mantissa bits). Parity of n and code agree.
P5 (saturation). rceil / ceil give |x| / 2^s <= max normal (the rule picks the smallest s with
amax / 2^s <= M 2^EMAX, resp. <= 2^EMAX; a clamped byte 0 only shrinks the values), so the
rounded code never exceeds MAXCODE; floor / even / round_down can exceed it and take the min
(overflow = saturate: the max-normal code).
P6 (fp32 subnormal inputs). The multiply of P2 scales them exactly. For the exponent-field
path of ``tiny_branch=True``: a subnormal x (field 0) gives y = max(a - S, 0) = a + (|s| << 23)
for s < 0: a garbage *normal* number below 2^(-s - 126). The exact value a * 2^(-149 - s) is
below the same bound. If that bound is <= h = 2^(EMIN - MBITS - 1) (half the smallest element
subnormal, which rounds to 0 under RNE), both give code 0: that holds iff
byte >= SAFE_BYTE = 2 - EMIN + MBITS (3 for FP4, 11 for E4M3, 18 for E5M2, 5 / 6 for FP6). A
zero x is such a field-0 input too: an all-zero block (byte 0) is scaled by 2^0 instead. A
tile that holds any nonzero, unpoisoned block with byte < SAFE_BYTE (amax below ~2^-105: never
in real data) takes a branch that computes y exactly for subnormal x (integer normalize). In
step 3, a subnormal v (including one an FTZ unit flushes to 0) is below q / 2 and rounds to m:
code 0, so the GPU's denormal mode cannot change a bit (the kernels are compiled without FTZ,
which the multiply of P2 needs for subnormal x). The only float operations are the multiply of
step 1 and the add of step 3; contracting them into one fma gives the same bits: the product is
exact when normal, and a product below 2^-126 is below q / 2, so m + p rounds to m either way.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from mxkernels._memo import memo, memo_dict

from mxkernels.triton_common import (KernelUnsupported, _max_along, _normalize,
                                     _shared_exponent_normal, _widen_to_f32)
from mxref.errors import MXRefError
from mxref.formats import get_format
from mxref.profiles import PROFILES, SCALE_RULES, get_profile

__all__ = ["quantize_fast", "quantize_dual", "quantize_dequantize", "supports", "check_supported", "FAST_COMBOS",
           "FAST_FORMATS", "fast_constexprs", "KERNELS", "ARG_TYPES", "aot_specs",
           "KernelUnsupported"]

FAST_FORMATS = ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2")
_SRC = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_SRC_NAMES = {"float32": 0, "bfloat16": 1, "float16": 2}
_LAYOUTS = {"row_major": 0, "cublas": 1, "amd": 2}


# =========================================================================================
# kernels
# =========================================================================================
@triton.jit
def _scale_offsets(row, blk, n_pad_blk, LAYOUT: tl.constexpr, ROW_STRIDE, BLK_STRIDE):
    """Byte offsets (int64) of scale (row, blk) of the [rows, blocks] scale view: row-major
    with the given strides, cuBLAS 128x4 tiles, or AITER e8m0_shuffle (n_pad_blk: the padded
    block count, a multiple of 4 resp. 8)."""
    r = row.to(tl.int64)
    c = blk.to(tl.int64)
    if LAYOUT == 0:
        off = r * ROW_STRIDE + c * BLK_STRIDE
    elif LAYOUT == 1:
        tile = (r // 128) * (n_pad_blk // 4) + c // 4
        off = tile * 512 + (r % 32) * 16 + ((r // 32) % 4) * 4 + c % 4
    else:
        off = (((((r // 32) * (n_pad_blk // 8) + c // 8) * 4 + c % 4) * 16 + r % 16) * 2
               + (c // 4) % 2) * 2 + (r // 16) % 2
    return off


@triton.jit
def _encode_mag(y, EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr, EL_MAXCODE: tl.constexpr,
                SATURATE: tl.constexpr):
    """Magnitude code of the scaled fp32 bits y >= 0 (steps 2-5 of the module docstring)."""
    MINB: tl.constexpr = (EL_EMIN + 127) << 23
    MOFF: tl.constexpr = (23 - EL_MBITS) << 23
    K0: tl.constexpr = (EL_EMIN + 150 - EL_MBITS) << EL_MBITS
    # t + MOFF has no carry into the low 23 bits, so (m >> (23 - MBITS)) - m folds into
    # (t >> (23 - MBITS)) - t plus one constant: one shift and one 3-input add per element
    KC: tl.constexpr = (MOFF >> (23 - EL_MBITS)) - MOFF - K0
    t = tl.maximum(y & 0x7F800000, MINB)
    m = t + MOFF
    f = y.to(tl.float32, bitcast=True) + m.to(tl.float32, bitcast=True)
    code = (f.to(tl.int32, bitcast=True) - t) + ((t >> (23 - EL_MBITS)) + KC)
    if SATURATE:
        code = tl.minimum(code, EL_MAXCODE)
    return code


@triton.jit
def _exact_scaled(a, s):
    """fp32 bits of a * 2^-s for an fp32 subnormal or zero magnitude a (0 when below 2^-126)."""
    sig, e = _normalize(a)
    fld = e + 127 - s
    return tl.where((fld >= 1) & (a != 0), (fld << 23) | (sig & 0x7FFFFF), 0)


@triton.jit
def _orient(a, b, blk_ok, AXIS: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
            EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr, EL_EMAX: tl.constexpr,
            EL_MAXCODE: tl.constexpr, EL_SIGNBIT: tl.constexpr, FILL: tl.constexpr,
            EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr, SCALE_RULE: tl.constexpr,
            SATURATE: tl.constexpr, TINY_BRANCH: tl.constexpr):
    """Scale bytes and element codes of a [BR, BC] tile (magnitude bits a, fp32 bits b) with
    blocks of 32 along axis 1 (AXIS == 1: bytes [BR, BC // 32]) or axis 0 (bytes
    [BR // 32, BC]); blk_ok masks the blocks that exist. Codes come back as [BR, BC] int32."""
    SAFE_BYTE: tl.constexpr = 2 - EL_EMIN + EL_MBITS
    if AXIS == 1:
        a3 = tl.reshape(a, (BR, BC // 32, 32))
        b3 = tl.reshape(b, (BR, BC // 32, 32))
        amax = _max_along(a3, 2)
    else:
        a3 = tl.reshape(a, (BR // 32, 32, BC))
        b3 = tl.reshape(b, (BR // 32, 32, BC))
        amax = _max_along(a3, 1)
    poison = amax >= 0x7F800000                   # NaN or Inf in the block
    byte = _shared_exponent_normal(amax, EL_EMAX, EL_MAXSIG, EL_EVENTHR, SCALE_RULE)
    # an all-zero block (byte 0x00) is scaled by 2^0: its +-0 elements give code 0 under any
    # scale, and 2^127 would turn a = 0 into y = 1.0 (P6: field-0 inputs need byte >= SAFE_BYTE)
    s = tl.where(amax == 0, 0, byte - 127)
    # P6: a tiny nonzero block (byte < SAFE_BYTE) needs exact subnormal scaling
    if AXIS == 1:
        s3 = s[:, :, None]
        p3 = poison[:, :, None]
    else:
        s3 = s[:, None, :]
        p3 = poison[:, None, :]
    if TINY_BRANCH:
        y = tl.maximum(a3 - (s3 << 23), 0)
        tiny = blk_ok & (poison == 0) & (amax != 0) & (byte < SAFE_BYTE)
        need_exact = _max_along(_max_along(tl.where(tiny, 1, 0), 1), 0) > 0
        if need_exact:
            y = tl.where(a3 < 0x800000, _exact_scaled(a3, s3), y)
    else:
        # P2'/P6': y = fl32(|x| * 2^-s), one fp32 multiply per element by the block's power of
        # two 2^-s = bits((254 - byte) << 23) (byte <= 253 by P1, so 2^-s is a normal fp32 in
        # [2^-126, 2^127]; an all-zero block multiplies 0 by 2^127). The product is exact
        # whenever it is an fp32 normal, for subnormal x too (no exponent-field tricks, no
        # subnormal branch); a product below 2^-126 is rounded to a value <= 2^-126, which is
        # code 0 like the exact value (P2). Contraction into the add of step 3 cannot change a
        # bit: an exact product gives the same fma, and a sub-2^-126 product rounds to m in
        # both. Poisoned blocks (byte >= 255) compute garbage that the fill replaces.
        inv = ((254 - byte) << 23).to(tl.float32, bitcast=True)
        if AXIS == 1:
            inv3 = inv[:, :, None]
        else:
            inv3 = inv[:, None, :]
        y = (a3.to(tl.float32, bitcast=True) * inv3).to(tl.int32, bitcast=True)
    code = _encode_mag(y, EL_MBITS, EL_EMIN, EL_MAXCODE, SATURATE)
    code = code | ((b3 >> (31 - EL_SIGNBIT)) & (1 << EL_SIGNBIT))
    code = tl.where(p3, FILL, code)
    byte = tl.where(poison, 255, byte)
    return byte, tl.reshape(code, (BR, BC))


@triton.jit
def _load_tile(x_ptr, r0, c0, n_rows, n_cols, BR: tl.constexpr, BC: tl.constexpr,
               SRC: tl.constexpr):
    """fp32 bits (int32) and magnitudes of the [BR, BC] tile at (r0, c0); masked lanes +0.
    The tile origin is int64; offsets inside the tile are int32 (the launcher keeps
    BR * n_cols < 2^31)."""
    lr = tl.arange(0, BR)
    lc = tl.arange(0, BC)
    m = ((r0 + lr) < n_rows)[:, None] & ((c0 + lc) < n_cols)[None, :]
    base = x_ptr + (r0.to(tl.int64) * n_cols + c0)
    raw = tl.load(base + (lr[:, None] * n_cols + lc[None, :]), mask=m, other=0)
    if SRC == 1:
        b = raw.to(tl.uint16, bitcast=True).to(tl.int32) << 16     # zero-extend: one op
    elif SRC == 0:
        b = raw
    else:
        b = _widen_to_f32(raw, 2)
    return b, b & 0x7FFFFFFF


@triton.jit
def _store_codes(code_ptr, code, rows, cols, n_rows, n_cols, AXIS: tl.constexpr,
                 BR: tl.constexpr, BC: tl.constexpr, PACKED: tl.constexpr, r0, c0):
    """Codes [BR, BC] at (rows, cols) of [n_rows, n_cols] uint8, or FP4 packed along AXIS."""
    if PACKED:
        if AXIS == 1:
            lo, hi = tl.split(tl.reshape(code, (BR, BC // 2, 2)))
            pc = c0 // 2 + tl.arange(0, BC // 2)
            n_pc = (n_cols + 1) // 2
            m = (rows < n_rows)[:, None] & (pc < n_pc)[None, :]
            offs = rows.to(tl.int64)[:, None] * n_pc + pc[None, :]
        else:
            lo, hi = tl.split(tl.permute(tl.reshape(code, (BR // 2, 2, BC)), (0, 2, 1)))
            pr = r0 // 2 + tl.arange(0, BR // 2)
            m = (pr < (n_rows + 1) // 2)[:, None] & (cols < n_cols)[None, :]
            offs = pr.to(tl.int64)[:, None] * n_cols + cols[None, :]
        # codes are 0..15 (magnitude <= 7 | sign 8; the fill is 0): no masking, and the two
        # nibbles do not overlap, so the pack is one shift-add
        tl.store(code_ptr + offs, (lo + (hi << 4)).to(tl.uint8), mask=m)
    else:
        m = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
        base = code_ptr + (r0.to(tl.int64) * n_cols + c0)
        offs = (rows - r0)[:, None] * n_cols + (cols - c0)[None, :]
        tl.store(base + offs, code.to(tl.uint8), mask=m)


@triton.jit
def _store_scales(scale_ptr, byte, r0, c0, n_rows, n_cols, n_pad_blk, AXIS: tl.constexpr,
                  BR: tl.constexpr, BC: tl.constexpr, LAYOUT: tl.constexpr):
    """Scale bytes of the tile's blocks; the [rows, blocks] view has the block axis last."""
    if AXIS == 1:
        row = r0 + tl.arange(0, BR)
        blk = c0 // 32 + tl.arange(0, BC // 32)
        n_blk = (n_cols + 31) // 32
        ok = (row < n_rows)[:, None] & (blk < n_blk)[None, :]
        offs = _scale_offsets(row[:, None], blk[None, :], n_pad_blk, LAYOUT, n_blk, 1)
    else:
        blk = r0 // 32 + tl.arange(0, BR // 32)
        row = c0 + tl.arange(0, BC)            # the scale view's rows are the columns
        n_blk = (n_rows + 31) // 32
        ok = (blk < n_blk)[:, None] & (row < n_cols)[None, :]
        offs = _scale_offsets(row[None, :], blk[:, None], n_pad_blk, LAYOUT, 1, n_cols)
    tl.store(scale_ptr + offs, byte.to(tl.uint8), mask=ok)


@triton.jit
def _tile_ids(n_rows, n_cols, BR: tl.constexpr, BC: tl.constexpr):
    n_ct = (n_cols + BC - 1) // BC
    pid = tl.program_id(0)
    pr = pid // n_ct
    r0 = pr * BR
    c0 = (pid - pr * n_ct) * BC
    return r0, c0


@triton.jit
def mx_fast_kernel(
        x_ptr, scale_ptr, code_ptr, n_rows, n_cols, n_pad_blk,
        SRC: tl.constexpr, AXIS: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
        PACKED: tl.constexpr, LAYOUT: tl.constexpr,
        EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr, EL_EMAX: tl.constexpr,
        EL_MAXCODE: tl.constexpr, EL_SIGNBIT: tl.constexpr, FILL: tl.constexpr,
        EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr, SCALE_RULE: tl.constexpr,
        SATURATE: tl.constexpr, TINY_BRANCH: tl.constexpr):
    """One orientation of a contiguous [n_rows, n_cols] tensor; program = one [BR, BC] tile
    (1-D grid, column tiles fastest)."""
    r0, c0 = _tile_ids(n_rows, n_cols, BR, BC)
    rows = r0 + tl.arange(0, BR)
    cols = c0 + tl.arange(0, BC)
    b, a = _load_tile(x_ptr, r0, c0, n_rows, n_cols, BR, BC, SRC)
    if AXIS == 1:
        blk_ok = (rows < n_rows)[:, None] & ((c0 + 32 * tl.arange(0, BC // 32)) < n_cols)[None, :]
    else:
        blk_ok = ((r0 + 32 * tl.arange(0, BR // 32)) < n_rows)[:, None] & (cols < n_cols)[None, :]
    byte, code = _orient(a, b, blk_ok, AXIS, BR, BC, EL_MBITS, EL_EMIN, EL_EMAX, EL_MAXCODE,
                         EL_SIGNBIT, FILL, EL_MAXSIG, EL_EVENTHR, SCALE_RULE, SATURATE,
                         TINY_BRANCH)
    _store_scales(scale_ptr, byte, r0, c0, n_rows, n_cols, n_pad_blk, AXIS, BR, BC, LAYOUT)
    _store_codes(code_ptr, code, rows, cols, n_rows, n_cols, AXIS, BR, BC, PACKED, r0, c0)


@triton.jit
def mx_dual_kernel(
        x_ptr, row_scale_ptr, row_code_ptr, col_scale_ptr, col_code_ptr, n_rows, n_cols,
        row_pad_blk, col_pad_blk,
        SRC: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
        PACKED: tl.constexpr, LAYOUT: tl.constexpr,
        EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr, EL_EMAX: tl.constexpr,
        EL_MAXCODE: tl.constexpr, EL_SIGNBIT: tl.constexpr, FILL: tl.constexpr,
        EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr, SCALE_RULE: tl.constexpr,
        SATURATE: tl.constexpr, TINY_BRANCH: tl.constexpr):
    """Both orientations from one read of each [BR, BC] tile (BR, BC multiples of 32)."""
    r0, c0 = _tile_ids(n_rows, n_cols, BR, BC)
    rows = r0 + tl.arange(0, BR)
    cols = c0 + tl.arange(0, BC)
    b, a = _load_tile(x_ptr, r0, c0, n_rows, n_cols, BR, BC, SRC)
    ok_r = (rows < n_rows)[:, None] & ((c0 + 32 * tl.arange(0, BC // 32)) < n_cols)[None, :]
    byte, code = _orient(a, b, ok_r, 1, BR, BC, EL_MBITS, EL_EMIN, EL_EMAX, EL_MAXCODE,
                         EL_SIGNBIT, FILL, EL_MAXSIG, EL_EVENTHR, SCALE_RULE, SATURATE,
                         TINY_BRANCH)
    _store_scales(row_scale_ptr, byte, r0, c0, n_rows, n_cols, row_pad_blk, 1, BR, BC, LAYOUT)
    _store_codes(row_code_ptr, code, rows, cols, n_rows, n_cols, 1, BR, BC, PACKED, r0, c0)
    ok_c = ((r0 + 32 * tl.arange(0, BR // 32)) < n_rows)[:, None] & (cols < n_cols)[None, :]
    byte, code = _orient(a, b, ok_c, 0, BR, BC, EL_MBITS, EL_EMIN, EL_EMAX, EL_MAXCODE,
                         EL_SIGNBIT, FILL, EL_MAXSIG, EL_EVENTHR, SCALE_RULE, SATURATE,
                         TINY_BRANCH)
    _store_scales(col_scale_ptr, byte, r0, c0, n_rows, n_cols, col_pad_blk, 0, BR, BC, LAYOUT)
    _store_codes(col_code_ptr, code, rows, cols, n_rows, n_cols, 0, BR, BC, PACKED, r0, c0)


@triton.jit
def _qdq_orient(a, b, AXIS: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
                EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr, EL_EMAX: tl.constexpr,
                EL_MAXCODE: tl.constexpr, EL_SIGNBIT: tl.constexpr, FILL: tl.constexpr,
                EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr, EL_MAXF32: tl.constexpr,
                SCALE_RULE: tl.constexpr, SATURATE: tl.constexpr, OUT_BF16: tl.constexpr,
                WRITE_Q: tl.constexpr, SR: tl.constexpr, rb):
    """Dequantized values [BR, BC] (blocks of 32 along AXIS as in _orient) straight from the
    rounding add of _encode_mag, without forming codes: with m the binade's power of two and
    f = fl32(y + m) (step 3 of the module docstring), f - m is the rounded scaled magnitude
    n * q EXACTLY (f and m lie in [m, 2m] on the grid of q, so the difference is representable),
    min(., max normal) is the saturation of step 5 (monotone in the code), and times
    2^(byte - 127) it is the MX value (at most 4 significant bits times a power of two: exact
    in fp32, 2^-127 for byte 0 as a subnormal). The sign is OR-ed in as a bit (+-0 kept; a
    float negation compiles to 0 - x on the GPU, which loses -0); a poisoned block is the quiet
    NaN 0x7FC00000 (bf16 0x7FC0).
    bf16 output: RNE of the fp32 value (exact above 2^-133). WRITE_Q: also (byte, codes) from
    the same f, as _orient computes them.

    SR: stochastic rounding with the uint32 words rb ([BR, BC], element for element), mxref's
    rule: with y = n * q + rest (q the element quantum of y's binade, 0 <= rest < q), round up
    iff floor(rest / q * 2^32) + word >= 2^32. y is the exact scaled value whenever it is an
    fp32 normal (P2); below 2^-126 rest / q < 2^-32 for every format here (q >= 2^-16), so it
    rounds to 0 either way. With e the exponent field of y, the quantum sits r = 23 - MBITS +
    max(EMIN + 127 - e, 0) >= 20 bits up y's 24-bit significand sig: n = sig >> r and
    floor(rest / q * 2^32) = sig << (32 - r) mod 2^32 (r <= 32) or sig >> (r - 32) (r > 32),
    the high and low words of the 64-bit sig * 2^32 >> r.
    The value is n * 2^(max(e, EMIN + 127) - 127 - MBITS) (n <= 2^(MBITS + 1): exact) and the
    code n + ((max(e, EMIN + 127) - EMIN - 127) << MBITS) (a carry of n into the next binade
    gives that binade's first code)."""
    if AXIS == 1:
        a3 = tl.reshape(a, (BR, BC // 32, 32))
        b3 = tl.reshape(b, (BR, BC // 32, 32))
        amax = _max_along(a3, 2)
    else:
        a3 = tl.reshape(a, (BR // 32, 32, BC))
        b3 = tl.reshape(b, (BR // 32, 32, BC))
        amax = _max_along(a3, 1)
    poison = amax >= 0x7F800000
    byte = _shared_exponent_normal(amax, EL_EMAX, EL_MAXSIG, EL_EVENTHR, SCALE_RULE)
    inv = ((254 << 23) - (byte << 23)).to(tl.float32, bitcast=True)   # 2^-s (P2)
    sc = tl.where(byte == 0, 0x400000, byte << 23).to(tl.float32, bitcast=True)   # 2^s
    if AXIS == 1:
        inv3 = inv[:, :, None]
        sc3 = sc[:, :, None]
        p3 = poison[:, :, None]
    else:
        inv3 = inv[:, None, :]
        sc3 = sc[:, None, :]
        p3 = poison[:, None, :]
    yf = a3.to(tl.float32, bitcast=True) * inv3
    y = yf.to(tl.int32, bitcast=True)
    MINB: tl.constexpr = (EL_EMIN + 127) << 23
    MOFF: tl.constexpr = (23 - EL_MBITS) << 23
    if SR:
        EB: tl.constexpr = EL_EMIN + 127
        if AXIS == 1:
            w3 = tl.reshape(rb, (BR, BC // 32, 32))
        else:
            w3 = tl.reshape(rb, (BR // 32, 32, BC))
        e = y >> 23
        ebq = tl.maximum(e, EB)
        r = tl.minimum((23 - EL_MBITS) + (ebq - e), 63)
        # sig * 2^32 >> r in 64 bits: n in the high word, floor(rest / q * 2^32) in the low
        # (r >= 56 leaves both 0: y below 2^-126 and y = 0, whose e is 0, round to 0)
        sig = ((y & 0x7FFFFF) | 0x800000).to(tl.uint32, bitcast=True).to(tl.uint64)
        t = (sig << 32) >> r.to(tl.uint64)
        fr = t.to(tl.uint32)
        up = (fr + w3) < fr                                  # uint32 carry out of the add
        nq = (t >> 32).to(tl.int32) + up.to(tl.int32)
        mag = nq.to(tl.float32) * ((ebq - EL_MBITS) << 23).to(tl.float32, bitcast=True)
    else:
        t = tl.maximum(y & 0x7F800000, MINB)
        m = t + MOFF
        mf = m.to(tl.float32, bitcast=True)
        f = y.to(tl.float32, bitcast=True) + mf
        mag = f - mf
    if SATURATE:        # on the bits: nonnegative floats order as their bit patterns
        mag = tl.minimum(mag.to(tl.int32, bitcast=True), EL_MAXF32).to(tl.float32, bitcast=True)
    v = mag * sc3
    # a poisoned block is the quiet NaN 0x7FC00000 by construction: the GPU's NaN out of
    # arithmetic is 0x7FFFFFFF, whose +0x7FFF rounding below would carry into the sign
    vb = tl.where(p3, 0x7FC00000, v.to(tl.int32, bitcast=True) | (b3 & -2147483648))
    vb = tl.reshape(vb, (BR, BC))
    if OUT_BF16:
        # RNE to bf16 with integer ops (the interpreter's float cast truncates and mishandles
        # fp32 subnormals); every vb here is finite or 0x7FC00000
        hb = ((vb + 0x7FFF + ((vb >> 16) & 1)) >> 16) & 0xFFFF
        v = hb.to(tl.int16).to(tl.bfloat16, bitcast=True)
    else:
        v = vb.to(tl.float32, bitcast=True)
    if WRITE_Q:
        if SR:
            code = nq + ((ebq - EB) << EL_MBITS)
        else:
            K0: tl.constexpr = (EL_EMIN + 150 - EL_MBITS) << EL_MBITS
            KC: tl.constexpr = (MOFF >> (23 - EL_MBITS)) - MOFF - K0
            code = (f.to(tl.int32, bitcast=True) - t) + ((t >> (23 - EL_MBITS)) + KC)
        if SATURATE:
            code = tl.minimum(EL_MAXCODE, code)
        code = code | ((b3 >> (31 - EL_SIGNBIT)) & (1 << EL_SIGNBIT))
        code = tl.reshape(tl.where(p3, FILL, code), (BR, BC))
        byte = tl.where(poison, 255, byte)
    else:
        code = v
    return v, byte, code


@triton.jit
def _qdq_write(a, b, out_ptr, scale_ptr, code_ptr, out_offs, mask, rows, cols, r0, c0, n_rows,
               n_cols, AXIS: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
               EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr, EL_EMAX: tl.constexpr,
               EL_MAXCODE: tl.constexpr, EL_SIGNBIT: tl.constexpr, FILL: tl.constexpr,
               EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr, EL_MAXF32: tl.constexpr,
               SCALE_RULE: tl.constexpr, SATURATE: tl.constexpr, OUT_BF16: tl.constexpr,
               WRITE_Q: tl.constexpr, SR: tl.constexpr, rb):
    """One orientation of mx_qdq_kernel: values, and with WRITE_Q row-major scales and codes
    (SR, rb: stochastic rounding with the words rb, see _qdq_orient)."""
    v, byte, code = _qdq_orient(a, b, AXIS, BR, BC, EL_MBITS, EL_EMIN, EL_EMAX, EL_MAXCODE,
                                EL_SIGNBIT, FILL, EL_MAXSIG, EL_EVENTHR, EL_MAXF32, SCALE_RULE,
                                SATURATE, OUT_BF16, WRITE_Q, SR, rb)
    tl.store(out_ptr + out_offs, v, mask=mask)
    if WRITE_Q:
        _store_scales(scale_ptr, byte, r0, c0, n_rows, n_cols, 0, AXIS, BR, BC, 0)
        _store_codes(code_ptr, code, rows, cols, n_rows, n_cols, AXIS, BR, BC, False, r0, c0)


@triton.jit
def _qdq_tile(n_rows, n_cols, BR: tl.constexpr, BC: tl.constexpr):
    """A qdq program's tile: origin (r0, c0), its rows and columns, the in-bounds mask and the
    int64 element offsets into a contiguous [n_rows, n_cols] array (the tile origin int64, the
    in-tile part int32: the launchers keep BR * n_cols < 2^31)."""
    r0, c0 = _tile_ids(n_rows, n_cols, BR, BC)
    rows = r0 + tl.arange(0, BR)
    cols = c0 + tl.arange(0, BC)
    m = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    offs = (r0.to(tl.int64) * n_cols + c0) + \
        ((rows - r0)[:, None] * n_cols + (cols - c0)[None, :])
    return r0, c0, rows, cols, m, offs


@triton.jit
def mx_qdq_kernel(
        x_ptr, row_out_ptr, col_out_ptr, row_scale_ptr, row_code_ptr, col_scale_ptr,
        col_code_ptr, n_rows, n_cols,
        SRC: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr, WRITE_Q: tl.constexpr,
        OUT_BF16: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
        EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr, EL_EMAX: tl.constexpr,
        EL_MAXCODE: tl.constexpr, EL_SIGNBIT: tl.constexpr, FILL: tl.constexpr,
        EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr, EL_MAXF32: tl.constexpr,
        SCALE_RULE: tl.constexpr, SATURATE: tl.constexpr):
    """Quantize-dequantize ("fake quantization") of each [BR, BC] tile from one read: the
    dequantized values of the blocks along the rows (ROWS) and / or down the columns (COLS),
    written as [n_rows, n_cols] bf16 or fp32 (what a GEMM on dequantized tiles multiplies),
    plus, with WRITE_Q, the unpacked codes and row-major scales that quantize_dual writes."""
    r0, c0, rows, cols, m, offs = _qdq_tile(n_rows, n_cols, BR, BC)
    b, a = _load_tile(x_ptr, r0, c0, n_rows, n_cols, BR, BC, SRC)
    if ROWS:
        _qdq_write(a, b, row_out_ptr, row_scale_ptr, row_code_ptr, offs, m, rows, cols,
                   r0, c0, n_rows, n_cols, 1, BR, BC, EL_MBITS, EL_EMIN, EL_EMAX, EL_MAXCODE,
                   EL_SIGNBIT, FILL, EL_MAXSIG, EL_EVENTHR, EL_MAXF32, SCALE_RULE, SATURATE,
                   OUT_BF16, WRITE_Q, False, 0)
    if COLS:
        _qdq_write(a, b, col_out_ptr, col_scale_ptr, col_code_ptr, offs, m, rows, cols,
                   r0, c0, n_rows, n_cols, 0, BR, BC, EL_MBITS, EL_EMIN, EL_EMAX, EL_MAXCODE,
                   EL_SIGNBIT, FILL, EL_MAXSIG, EL_EVENTHR, EL_MAXF32, SCALE_RULE, SATURATE,
                   OUT_BF16, WRITE_Q, False, 0)

KERNELS = {"mx_fast": mx_fast_kernel, "mx_dual": mx_dual_kernel, "mx_qdq": mx_qdq_kernel}

# runtime arguments as Triton signature types ("SRC": *i32 for float32, *i16 for bf16/fp16)
ARG_TYPES = {
    "mx_fast": {"x_ptr": "SRC", "scale_ptr": "*u8", "code_ptr": "*u8", "n_rows": "i32",
                "n_cols": "i32", "n_pad_blk": "i32"},
    "mx_dual": {"x_ptr": "SRC", "row_scale_ptr": "*u8", "row_code_ptr": "*u8",
                "col_scale_ptr": "*u8", "col_code_ptr": "*u8", "n_rows": "i32",
                "n_cols": "i32", "row_pad_blk": "i32", "col_pad_blk": "i32"},
    "mx_qdq": {"x_ptr": "SRC", "row_out_ptr": "OUT", "col_out_ptr": "OUT",
               "row_scale_ptr": "*u8", "row_code_ptr": "*u8", "col_scale_ptr": "*u8",
               "col_code_ptr": "*u8", "n_rows": "i32", "n_cols": "i32"},
}


# =========================================================================================
# what the fast kernels implement
# =========================================================================================
def check_supported(fmt, profile="ocp", src_dtype="bfloat16", axis=-1) -> None:
    """Raise KernelUnsupported naming the first knob the fast kernels do not implement."""
    try:
        f = get_format(fmt)
        pr = get_profile(profile)
    except (MXRefError, KeyError, ValueError) as e:
        raise KernelUnsupported(f"{type(e).__name__}: {e}") from None
    if f.name not in FAST_FORMATS:
        raise KernelUnsupported(f"format {f.name}: the fast kernels take {', '.join(FAST_FORMATS)}"
                                " (use triton_quant.mx_quantize)")
    try:
        pr.check_format(f)
    except MXRefError as e:
        raise KernelUnsupported(f"{type(e).__name__}: {e}") from None
    need = [("rounding", "rne"), ("overflow", "saturate"), ("nan_in_block", "poison"),
            ("inf_in_block", "poison"), ("signed_zero", "preserve"),
            ("flush_fp32_subnormals", False), ("ragged", "zero_pad"),
            ("rceil_subnormal", "exact"), ("zero_scale_elem_exp", -127),
            ("rceil_f32_log2", False)]
    need.append(("amax_floor", 0))         # dsv4 amax floor: triton_quant.mx_quantize only
    need.append(("nan_element", "nan"))    # amd_gfx950: triton_quant.mx_quantize only
    need += [("scale_log2_f32", False), ("element_round_f32", False),   # microxcaling_torch:
             ("zero_block_amax", "zero")]                # triton_quant.mx_quantize only
    for knob, want in need:
        if getattr(pr, knob) != want:
            raise KernelUnsupported(
                f"profile {pr.name!r}: {knob}={getattr(pr, knob)!r} is not implemented by the "
                f"fast kernels (they need {knob}={want!r}); use triton_quant.mx_quantize")
    if pr.block_size not in (None, 32) or f.block_size != 32:
        raise KernelUnsupported(f"profile {pr.name!r}: block size {pr.block_size} (fast kernels: 32)")
    if pr.scale_rule not in SCALE_RULES:
        raise KernelUnsupported(f"scale rule {pr.scale_rule!r}")
    name = src_dtype if isinstance(src_dtype, str) else \
        {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(
            src_dtype, str(src_dtype))
    if name not in _SRC_NAMES:
        raise KernelUnsupported(f"source dtype {src_dtype!r}: the fast kernels take torch "
                                "float32, bfloat16 or float16 tensors")
    if axis not in (-1, 0, 1):
        raise KernelUnsupported(f"axis {axis!r}: the fast kernels take 2-D inputs, axis -1/1 "
                                "(blocks along rows) or 0 (blocks down columns)")


@memo
def supports(fmt, profile="ocp", src_dtype="bfloat16", axis=-1) -> bool:
    """Whether quantize_fast implements (fmt, profile, src_dtype, axis) bit-exactly."""
    try:
        check_supported(fmt, profile, src_dtype, axis)
    except KernelUnsupported:
        return False
    return True


# (format, named profile) pairs the fast kernels claim (every source dtype, both axes)
FAST_COMBOS = tuple((f, p) for p in PROFILES for f in FAST_FORMATS if supports(f, p))


@memo_dict
def fast_constexprs(fmt, profile="ocp", src_dtype="bfloat16", axis=-1, *, packed=False,
                    scale_layout="row_major", block_rows=32, block_cols=128, dual=False, tiny_branch=False) -> dict:
    """Every constexpr of ``mx_fast_kernel`` (or ``mx_dual_kernel`` with dual=True)."""
    check_supported(fmt, profile, src_dtype, axis)
    f = get_format(fmt)
    pr = get_profile(profile)
    el = f.element
    from mxkernels.triton_quant import element_constexprs
    ec = element_constexprs(f)
    if scale_layout not in _LAYOUTS:
        raise KernelUnsupported(f"scale_layout {scale_layout!r}: use one of {tuple(_LAYOUTS)}")
    if packed and el.bits == 6:
        raise KernelUnsupported("packed=True for FP6: the fast kernels write unpacked FP6 codes "
                                "(pack with triton_quant.pack_codes)")
    for v, what in ((block_rows, "block_rows"), (block_cols, "block_cols")):
        if not isinstance(v, int) or v < 2 or v & (v - 1):
            raise KernelUnsupported(f"{what}={v!r} is not a power of two >= 2")
    ax = 1 if axis in (-1, 1) else 0
    if dual or ax == 1:
        if block_cols < 32:
            raise KernelUnsupported(f"block_cols={block_cols}: blocks along rows need >= 32")
    if dual or ax == 0:
        if block_rows < 32:
            raise KernelUnsupported(f"block_rows={block_rows}: blocks down columns need >= 32")
    rule = SCALE_RULES.index(pr.scale_rule)
    ce = {"SRC": _SRC_NAMES[src_dtype if isinstance(src_dtype, str) else
                            {torch.float32: "float32", torch.bfloat16: "bfloat16",
                             torch.float16: "float16"}[src_dtype]]}
    if not dual:
        ce["AXIS"] = ax
    ce.update({
        "BR": block_rows, "BC": block_cols,
        "PACKED": bool(packed and el.bits == 4), "LAYOUT": _LAYOUTS[scale_layout],
        "EL_MBITS": ec["EL_MBITS"], "EL_EMIN": ec["EL_EMIN"], "EL_EMAX": ec["EL_EMAX"],
        "EL_MAXCODE": ec["EL_MAXCODE"], "EL_SIGNBIT": ec["EL_SIGNBIT"],
        "FILL": max(ec["EL_NAN"], 0), "EL_MAXSIG": ec["EL_MAXSIG"],
        "EL_EVENTHR": ec["EL_EVENTHR"], "SCALE_RULE": rule,
        "SATURATE": pr.scale_rule not in ("rceil", "ceil"),
        "TINY_BRANCH": bool(tiny_branch),
    })
    return ce


# =========================================================================================
# launchers
# =========================================================================================
INTERPRETED = type(mx_fast_kernel).__name__ == "InterpretedFunction"


def _prep(x):
    if not isinstance(x, torch.Tensor):
        raise KernelUnsupported(f"expected a torch tensor, got {type(x).__name__}")
    if x.dtype not in _SRC:
        raise KernelUnsupported(f"dtype {x.dtype}: the fast kernels take float32, bfloat16 or "
                                "float16 tensors")
    if x.ndim != 2:
        raise KernelUnsupported(f"the fast kernels take 2-D [rows, cols] tensors, got shape "
                                f"{tuple(x.shape)} (reshape first)")
    if x.shape[0] >= 2**31 - 2**16 or x.shape[1] >= 2**31 - 2**16:
        raise KernelUnsupported(f"shape {tuple(x.shape)}: each dimension must be < 2^31")
    x = x.contiguous()
    bits = x.view(torch.int32 if x.dtype == torch.float32 else torch.int16)
    return x, bits


def _check_local_offsets(br, C):
    if br * max(C, 1) >= 2**31:
        raise KernelUnsupported(f"block_rows={br} x {C} columns >= 2^31: in-tile offsets are "
                                "int32; use fewer block_rows or split the columns")


def _scale_buffer(rows, nblk, layout, device):
    """(buffer, n_pad_blk) for the [rows, nblk] scale view in ``layout``."""
    if layout == "row_major":
        return torch.empty((rows, nblk), dtype=torch.uint8, device=device), nblk
    if layout == "cublas":
        pr, pc = -(-rows // 128) * 128, -(-nblk // 4) * 4
    else:
        pr, pc = -(-rows // 256) * 256, -(-nblk // 8) * 8
    return torch.zeros(pr * pc, dtype=torch.uint8, device=device), pc


def _pow2_at_least(n, lo, hi):
    return max(lo, min(hi, triton.next_power_of_2(max(int(n), 1))))


def _tiles(R, C, ax, block_rows, block_cols, dual):
    """Default tile sizes: big tiles on the GPU; under the interpreter (cost per program) one
    tile as large as the tensor allows."""
    if INTERPRETED:
        br = block_rows or _pow2_at_least(R, 32 if (dual or ax == 0) else 2, 512)
        bc = block_cols or _pow2_at_least(C, 32 if (dual or ax == 1) else 2, 512)
        return br, bc
    # measured on an H200 (bf16 8192^2, see the module docstring)
    if dual:
        return block_rows or 32, block_cols or 128
    if ax == 1:
        return block_rows or 8, block_cols or 512
    return block_rows or 32, block_cols or 128


def quantize_fast(x: torch.Tensor, fmt: str, profile="ocp", axis: int = -1, *,
                  packed: bool = False, scale_layout: str = "row_major",
                  block_rows: int | None = None, block_cols: int | None = None,
                  num_warps: int | None = None, num_stages: int | None = None,
                  tiny_branch: bool = False):
    """MX-quantize a 2-D float32/bfloat16/float16 tensor with blocks of 32 along ``axis``.

    Returns ``(scales, codes)`` on x's device, bit-identical to ``mxref.quantize(x, fmt,
    profile, axis)`` (``.scales_layout(scale_layout)`` and, with ``packed=True``, ``.packed()``):

    * axis -1 (or 1): scales [R, ceil(C/32)]; axis 0: scales [ceil(R/32), C] (row_major), or
      the 1-D cuBLAS / AMD swizzle of the [rows, blocks] view (block axis last);
    * codes uint8 [R, C]; packed FP4: [R, ceil(C/2)] (axis -1) or [ceil(R/2), C] (axis 0),
      two codes per byte along the block axis, element 2i in the low nibble.

    Launch knobs: ``block_rows`` / ``block_cols`` (tile, powers of two; the block axis side
    >= 32), ``num_warps``, ``num_stages``. Unsupported combinations raise KernelUnsupported.
    """
    x, bits = _prep(x)
    ce = fast_constexprs(fmt, profile, {0: "float32", 1: "bfloat16", 2: "float16"}[_SRC[x.dtype]],
                         axis, packed=packed, scale_layout=scale_layout)
    R, C = x.shape
    ax = ce["AXIS"]
    br, bc = _tiles(R, C, ax, block_rows, block_cols, False)
    ce = fast_constexprs(fmt, profile, {0: "float32", 1: "bfloat16", 2: "float16"}[_SRC[x.dtype]],
                         axis, packed=packed, scale_layout=scale_layout, block_rows=br,
                         block_cols=bc, tiny_branch=tiny_branch)
    _check_local_offsets(br, C)
    dev = x.device
    if ax == 1:
        sv_rows, nblk = R, -(-C // 32)
    else:
        sv_rows, nblk = C, -(-R // 32)
    scales, n_pad = _scale_buffer(sv_rows, nblk, scale_layout, dev)
    if scale_layout == "row_major" and ax == 0:
        scales = scales.view(nblk, sv_rows) if scales.numel() else \
            torch.empty((nblk, sv_rows), dtype=torch.uint8, device=dev)
    if ce["PACKED"]:
        shape = (R, (C + 1) // 2) if ax == 1 else ((R + 1) // 2, C)
    else:
        shape = (R, C)
    codes = torch.empty(shape, dtype=torch.uint8, device=dev)
    if R and C:
        grid = (triton.cdiv(R, br) * triton.cdiv(C, bc),)
        kw = {}
        if num_warps is not None:
            kw["num_warps"] = num_warps
        elif not INTERPRETED:
            kw["num_warps"] = 4
        if num_stages is not None:
            kw["num_stages"] = num_stages
        mx_fast_kernel[grid](bits, scales, codes, R, C, n_pad, **ce, **kw)
    return scales, codes


def quantize_dual(x: torch.Tensor, fmt: str, profile="ocp", *, packed: bool = False,
                  scale_layout: str = "row_major", block_rows: int | None = None,
                  block_cols: int | None = None, num_warps: int | None = None,
                  num_stages: int | None = None, tiny_branch: bool = False):
    """Both orientations from one read of x: ``(row_scales, row_codes, col_scales, col_codes)``,
    equal to ``quantize_fast(x, fmt, profile, -1, ...)`` and ``quantize_fast(x, fmt, profile,
    0, ...)`` (same layouts; packed FP4 row codes [R, ceil(C/2)], col codes [ceil(R/2), C])."""
    x, bits = _prep(x)
    src = {0: "float32", 1: "bfloat16", 2: "float16"}[_SRC[x.dtype]]
    R, C = x.shape
    br, bc = _tiles(R, C, None, block_rows, block_cols, True)
    ce = fast_constexprs(fmt, profile, src, -1, packed=packed, scale_layout=scale_layout,
                         block_rows=br, block_cols=bc, dual=True, tiny_branch=tiny_branch)
    _check_local_offsets(br, C)
    dev = x.device
    rs, rpad = _scale_buffer(R, -(-C // 32), scale_layout, dev)
    cs, cpad = _scale_buffer(C, -(-R // 32), scale_layout, dev)
    if scale_layout == "row_major":
        cs = cs.reshape(-(-R // 32), C)
    if ce["PACKED"]:
        rc = torch.empty((R, (C + 1) // 2), dtype=torch.uint8, device=dev)
        cc = torch.empty(((R + 1) // 2, C), dtype=torch.uint8, device=dev)
    else:
        rc = torch.empty((R, C), dtype=torch.uint8, device=dev)
        cc = torch.empty((R, C), dtype=torch.uint8, device=dev)
    if R and C:
        grid = (triton.cdiv(R, br) * triton.cdiv(C, bc),)
        kw = {}
        if num_warps is not None:
            kw["num_warps"] = num_warps
        elif not INTERPRETED:
            kw["num_warps"] = 4
        if num_stages is not None:
            kw["num_stages"] = num_stages
        mx_dual_kernel[grid](bits, rs, rc, cs, cc, R, C, rpad, cpad, **ce, **kw)
    return rs, rc, cs, cc


@memo_dict
def qdq_constexprs(fmt, profile="ocp", src_dtype="bfloat16", *, rows=True, cols=False,
                   with_codes=False, out_dtype="bfloat16", block_rows=32,
                   block_cols=128) -> dict:
    """Every constexpr of ``mx_qdq_kernel``."""
    if not (rows or cols):
        raise KernelUnsupported("quantize_dequantize: ask for rows, cols or both")
    if out_dtype not in ("bfloat16", "float32"):
        raise KernelUnsupported(f"out_dtype {out_dtype!r}: quantize_dequantize writes "
                                "bfloat16 or float32")
    ce = fast_constexprs(fmt, profile, src_dtype, -1, block_rows=block_rows,
                         block_cols=block_cols, dual=True)
    for k in ("PACKED", "LAYOUT", "TINY_BRANCH"):
        ce.pop(k)
    from mxkernels.triton_quant import element_constexprs
    ce.update(ROWS=bool(rows), COLS=bool(cols), WRITE_Q=bool(with_codes),
              OUT_BF16=out_dtype == "bfloat16",
              EL_MAXF32=element_constexprs(fmt)["EL_MAXF32"])
    return ce


_OUT = {torch.bfloat16: "bfloat16", torch.float32: "float32"}


def quantize_dequantize(x: torch.Tensor, fmt: str, profile="ocp", *, rows: bool = True,
                        cols: bool = False, out_dtype: torch.dtype = torch.bfloat16,
                        with_codes: bool = False, block_rows: int | None = None,
                        block_cols: int | None = None, num_warps: int | None = None):
    """Fake quantization from one read of x: ``(row_values, col_values, q)``.

    ``row_values`` (``rows=True``, else None) is ``dequantize(quantize_fast(x, fmt, profile,
    -1))`` and ``col_values`` (``cols=True``) the same with blocks down the columns (axis 0),
    both ``[R, C]`` in ``out_dtype`` (bfloat16 or float32). Every MX value is exact in fp32; in
    bfloat16 too unless it lies below 2^-133 (a block amax below ~2^-120), which is rounded to
    nearest even. NaN / Inf blocks give NaN. ``q`` is None, or with ``with_codes=True`` the
    ``(row_scales, row_codes, col_scales, col_codes)`` of quantize_dual (row-major, unpacked;
    None for an orientation not asked for), for checking against mxref. This is what a GEMM on
    dequantized tiles multiplies (the training fast path: one launch per tensor instead of a
    quantize, a dequantize and two casts per orientation). On the GPU a repeated call launches
    the compiled kernel directly (see :func:`_launch_qdq`)."""
    if isinstance(x, torch.Tensor) and x.dtype in _SRC and x.ndim == 2 and x.is_contiguous() \
            and x.shape[0] < 2**31 - 2**16 and x.shape[1] < 2**31 - 2**16:
        bits = x.view(torch.int32 if x.dtype == torch.float32 else torch.int16)   # hot path
    else:
        x, bits = _prep(x)
    if out_dtype not in _OUT:
        raise KernelUnsupported(f"out_dtype {out_dtype}: quantize_dequantize writes bfloat16 "
                                "or float32")
    R, C = x.shape
    br, bc = _tiles(R, C, None, block_rows, block_cols, True)
    _check_local_offsets(br, C)
    nw = num_warps if num_warps is not None else (None if INTERPRETED else 4)
    ce = _qdq_ce(x.dtype, fmt, profile, rows, cols, with_codes, out_dtype, br, bc)
    rv, cv, q, outs = qdq_buffers(R, C, rows, cols, out_dtype, with_codes, x.device)
    if R and C:
        _launch_qdq(triton.cdiv(R, br) * triton.cdiv(C, bc), ce, nw, (bits, *outs, R, C))
    return rv, cv, q


def qdq_buffers(R: int, C: int, rows: bool, cols: bool, out_dtype, with_codes: bool, dev):
    """(row values, col values, q, the six output pointers in launch order) of a qdq launch:
    [R, C] values per orientation asked for; with codes, q = (row scales [R, ceil(C/32)], row
    codes [R, C], col scales [ceil(R/32), C], col codes [R, C]), None where not asked. A
    pointer the kernel never writes is a placeholder (another output)."""
    rv = torch.empty((R, C), dtype=out_dtype, device=dev) if rows else None
    cv = torch.empty((R, C), dtype=out_dtype, device=dev) if cols else None
    dummy = rv if rv is not None else cv
    q = None
    ptrs = (dummy,) * 4
    if with_codes:
        q = (torch.empty((R, -(-C // 32)), dtype=torch.uint8, device=dev) if rows else None,
             torch.empty((R, C), dtype=torch.uint8, device=dev) if rows else None,
             torch.empty((-(-R // 32), C), dtype=torch.uint8, device=dev) if cols else None,
             torch.empty((R, C), dtype=torch.uint8, device=dev) if cols else None)
        ptrs = tuple(t if t is not None else dummy for t in q)
    return rv, cv, q, (rv if rv is not None else dummy, cv if cv is not None else dummy, *ptrs)


@memo
def _qdq_ce(dtype, fmt, profile, rows, cols, with_codes, out_dtype, br, bc):
    """(constexpr dict, their values in mx_qdq_kernel's parameter order) of one configuration."""
    src = {0: "float32", 1: "bfloat16", 2: "float16"}[_SRC[dtype]]
    ce = qdq_constexprs(fmt, profile, src, rows=rows, cols=cols, with_codes=with_codes,
                        out_dtype=_OUT[out_dtype], block_rows=br, block_cols=bc)
    names = mx_qdq_kernel.arg_names
    if set(names[9:]) != set(ce):
        raise KeyError(f"mx_qdq_kernel's constexprs {names[9:]} are not qdq_constexprs' {sorted(ce)}")
    return ce, tuple(ce[n] for n in names[9:])


# A launch through ``jitfn[grid](...)`` costs tens of microseconds of Python (argument binding,
# the specialization key, the kernel-cache lookup); the training step makes three per linear
# layer. After the first launch of a configuration its CompiledKernel is kept here, keyed by
# everything Triton specializes on for these arguments (dtypes and constexprs via the config,
# the alignment of each pointer and the value classes of the two ints), and later launches call
# its launcher with the same arguments JITFunction.run passes. Only on a GPU, only while no
# launch hook is installed (a profiler's), on CUDA (ROCm specializes on more, e.g. buffer-op
# pointer ranges); MXK_LAUNCH_CACHE=0 turns it off.
_LAUNCHED: dict = {}
_LAUNCH_CACHE = [os.environ.get("MXK_LAUNCH_CACHE", "1") != "0" and torch.version.hip is None]


def _int_class(n: int) -> int:
    return 1 if n == 1 else (16 if n % 16 == 0 else 0)


def _launch_qdq(grid: int, ce, nw, args) -> None:
    launch_cached(mx_qdq_kernel, grid, ce, nw, args, 7)


def launch_cached(kernel, grid: int, ce, nw, args, n_ptr: int, **opts) -> None:
    """Launch ``kernel`` on a 1-D grid with ``args`` (its first n_ptr are tensors, the next two
    the specialized ints n_rows, n_cols; any further int is ``do_not_specialize``) and the
    constexprs ``ce`` = (dict, values in parameter order); opts: compile options."""
    ce_kw, ce_vals = ce
    if INTERPRETED or not _LAUNCH_CACHE[0]:
        kernel[(grid,)](*args, **ce_kw, **({} if nw is None else {"num_warps": nw}), **opts)
        return
    drv = _active_driver()
    dev = drv.get_current_device()          # what JITFunction.run launches on
    key = (id(kernel), id(ce_kw), nw, dev, _int_class(args[n_ptr]), _int_class(args[n_ptr + 1]),
           *(t.data_ptr() % 16 == 0 for t in args[:n_ptr]))
    hit = _LAUNCHED.get(key)
    if hit is not None and hit[0] is ce_kw and _no_hooks():
        k = hit[1]
        k.run(grid, 1, 1, drv.get_current_stream(dev), k.function, k.packed_metadata, None,
              None, None, *args, *ce_vals)
        return
    k = kernel[(grid,)](*args, **ce_kw, num_warps=nw, **opts)
    if hasattr(k, "packed_metadata") and hasattr(k, "function"):
        _LAUNCHED[key] = (ce_kw, k)     # the dict held: its id cannot be reused while keyed


def _no_hooks() -> bool:
    """No launch hook installed: triton 3.x keeps them in knobs.runtime as None or as an empty
    HookChain (``.calls``); any other value sends launches through the JIT, which calls it."""
    rt = getattr(getattr(triton, "knobs", None), "runtime", None)
    return rt is not None and all(h is None or getattr(h, "calls", True) == []
                                  for h in (rt.launch_enter_hook, rt.launch_exit_hook))


def _active_driver():
    return triton.runtime.driver.active


# =========================================================================================
# ahead-of-time compilation specs
# =========================================================================================
def kernel_signature(kernel: str, src_dtype: str, constexprs: dict) -> dict:
    """Every argument of KERNELS[kernel] in order: runtime ones typed, the rest constexpr."""
    src = "*i32" if src_dtype == "float32" else "*i16"
    out = "*bf16" if constexprs.get("OUT_BF16") else "*fp32"
    types = {k: {"SRC": src, "OUT": out}.get(v, v) for k, v in ARG_TYPES[kernel].items()}
    types.update({k: "constexpr" for k in constexprs})
    names = KERNELS[kernel].arg_names
    if set(names) != set(types):
        raise KeyError(f"{kernel}: arguments {sorted(set(names) ^ set(types))} are not "
                       "described by ARG_TYPES / the constexprs")
    return {k: types[k] for k in names}


def aot_specs():
    """[(id, jitfn, signature, constexprs)] covering every kernel with representative
    constexprs: each format, source dtype, both axes, packing, each scale layout, the
    saturating and non-saturating rules and the production tile sizes."""
    combos = [
        ("mx_fast", "mxfp4", "ocp", "bfloat16", -1, True, "row_major", 16, 256),
        ("mx_fast", "mxfp4", "rceil", "bfloat16", 0, True, "cublas", 64, 64),
        ("mx_fast", "mxfp8_e4m3", "ocp", "bfloat16", -1, False, "amd", 16, 256),
        ("mx_fast", "mxfp8_e5m2", "triton_kernels_round_down", "float32", 0, False,
         "row_major", 64, 64),
        ("mx_fast", "mxfp6_e3m2", "rceil", "float16", -1, False, "row_major", 16, 256),
        ("mx_fast", "mxfp6_e2m3", "ocp", "float32", 0, False, "cublas", 64, 64),
        ("mx_dual", "mxfp4", "ocp", "bfloat16", -1, True, "row_major", 64, 64),
        ("mx_dual", "mxfp8_e4m3", "rceil", "bfloat16", -1, False, "cublas", 64, 64),
        ("mx_dual", "mxfp8_e5m2", "ocp", "float16", -1, False, "amd", 64, 64),
    ]
    out = []
    for fmt, prof, sd, r, c, wq, od in (("mxfp4", "ocp", "float32", True, True, False,
                                         "bfloat16"),
                                        ("mxfp8_e4m3", "rceil", "bfloat16", True, False, True,
                                         "float32")):
        ce = qdq_constexprs(fmt, prof, sd, rows=r, cols=c, with_codes=wq, out_dtype=od,
                            block_rows=32, block_cols=128)
        out.append((f"mx_qdq-{fmt}-{prof}-{sd}-{'rows' if r else ''}{'cols' if c else ''}-{od}"
                    f"{'-codes' if wq else ''}", KERNELS["mx_qdq"],
                    kernel_signature("mx_qdq", sd, ce), ce))
    for kern, fmt, prof, sd, ax, pk, lay, br, bc in combos:
        ce = fast_constexprs(fmt, prof, sd, ax, packed=pk, scale_layout=lay, block_rows=br,
                             block_cols=bc, dual=kern == "mx_dual")
        sig = kernel_signature(kern, sd, ce)
        out.append((f"{kern}-{fmt}-{prof}-{sd}-ax{ax}-{lay}{'-packed' if pk else ''}",
                    KERNELS[kern], sig, ce))
    return out
