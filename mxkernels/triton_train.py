"""Fused fake quantization for training recipes: rotate, round (RNE or stochastic), dequantize.

``mx_qdq_train_kernel`` extends ``triton_fast.mx_qdq_kernel`` (one read of each [BR, BC] tile,
the dequantized values of the blocks along the rows and / or down the columns) with what the
MXFP4 training recipes add to a plain MX operand, each orientation on its own:

* a block Hadamard rotation of size n (16 or 32) along the orientation's block axis before
  quantizing: the butterfly of ``triton_rotate._fwht`` (mxref's stage order) on the sign-flipped
  fp32 values, then one multiply by fl32(1 / sqrt(n)), bit for bit ``mxref.rotate(...,
  method='butterfly')``. The signs are none, a bit mask (bit j: position j negated; n <= 32) or
  ``mxref.sign_vector('random', n, seed, step, tensor_id)``, whose Philox words each program
  draws for its n positions (no host work, no transfer per step);
* stochastic rounding with the words of ``mxref.random_bits(operand shape, seed, 0)`` drawn in
  the kernel: the rows orientation is the operand ``x`` itself (element (r, c) takes word
  r * C + c), the columns orientation the operand ``x^T`` (element (r, c) of x takes word
  c * R + r), the streams ``triton_sr.quantize_sr`` uses (see ``triton_fast._qdq_orient``).

The values are what ``dequantize(quantize(rotate(x)))`` gives along each orientation, as bf16
(exact: MX values of a block amax above ~2^-120) or fp32; ``with_codes=True`` also returns the
row-major scales and unpacked codes, for in-run validation against mxref.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from mxkernels.triton_common import KernelUnsupported
from mxkernels.triton_fast import (INTERPRETED, _OUT, _SRC, _check_local_offsets, _load_tile,
                                   _prep, _qdq_tile, _qdq_write, _tiles, launch_cached,
                                   qdq_buffers, qdq_constexprs)
from mxkernels.triton_rotate import _fwht
from mxkernels.triton_sr import _join4, _philox4, _philox4x, _pick4, _u32
from mxref.rotate import inv_sqrt_n_bits

__all__ = ["qdq", "qdq_fp4_stored", "launch_args", "ROT_SIZES", "SIGN_MODES", "train_constexprs",
           "KERNELS", "ARG_TYPES",
           "aot_specs", "KernelUnsupported"]

ROT_SIZES = (16, 32)
SIGN_MODES = {"none": 0, "mask": 1, "random": 2}


@triton.jit
def _sign_masks(N: tl.constexpr, MODE: tl.constexpr, lo, hi, step, tid):
    """int32 [N]: 0 or 0x80000000 per rotation position. MODE 1: bit j of lo; MODE 2: bit 0 of
    Philox4x32-10 word 0 of counter (j, step, tid, 0) under key (lo, hi), i.e.
    mxref.sign_vector('random', N, seed=(hi << 32) | lo, step=step, tensor_id=tid)."""
    j = tl.arange(0, N)
    if MODE == 1:
        neg = (lo >> j) & 1
    else:
        w = _philox4(j.to(tl.uint32, bitcast=True), _u32(step), _u32(tid), 0, _u32(lo),
                     _u32(hi))
        neg = (w & 1).to(tl.int32, bitcast=True)
    return neg << 31


@triton.jit
def _mix64(z, p):
    """One splitmix64 absorption of mxkernels.training.quant.mix_seed (uint64 z, p)."""
    z = z + p + 0x9E3779B97F4A7C15
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    return z ^ (z >> 31)


@triton.jit
def _sr_key(lo, hi, gemm, side, step, STEP_DEV: tl.constexpr):
    """The Philox key (lo, hi) of an SR stream: (lo, hi) itself, or with STEP_DEV the
    mix_seed(recipe seed, layer, step, gemm, side) whose state after (recipe seed, layer) is
    (hi << 32) | lo, finished here with the device step."""
    if STEP_DEV:
        z = (hi.to(tl.uint32, bitcast=True).to(tl.uint64) << 32) | \
            lo.to(tl.uint32, bitcast=True).to(tl.uint64)
        z = _mix64(z, step.to(tl.uint64, bitcast=True))
        z = _mix64(z, gemm.to(tl.uint64))
        z = _mix64(z, side.to(tl.uint64))
        z = z & 0x7FFFFFFFFFFFFFFF
        return z.to(tl.uint32), (z >> 32).to(tl.uint32)
    return _u32(lo), _u32(hi)


@triton.jit
def _rotate_axis(b, AXIS: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, N: tl.constexpr,
                 LOG2N: tl.constexpr, C_BITS: tl.constexpr, SIGNS: tl.constexpr, lo, hi, step,
                 tid):
    """fp32 bits [BR, BC] of the tile b rotated in blocks of N along AXIS (1: along each row;
    0: down each column), signs per SIGNS (see _sign_masks; 0 none)."""
    if AXIS == 1:
        v = tl.reshape(b, (BR * BC // N, N))
    else:
        v = tl.reshape(tl.permute(tl.reshape(b, (BR // N, N, BC)), (0, 2, 1)),
                       (BR // N * BC, N))
    if SIGNS != 0:
        v = v ^ _sign_masks(N, SIGNS, lo, hi, step, tid)[None, :]
    v = _fwht(v.to(tl.float32, bitcast=True), BR * BC // N, N, LOG2N)
    c = tl.full((1, 1), C_BITS, tl.int32).to(tl.float32, bitcast=True)
    y = (v * c).to(tl.int32, bitcast=True)
    if AXIS == 1:
        y = tl.reshape(y, (BR, BC))
    else:
        y = tl.reshape(tl.permute(tl.reshape(y, (BR // N, BC, N)), (0, 2, 1)), (BR, BC))
    return y


@triton.jit
def _sr_words(rows, cols, r0, c0, n_rows, n_cols, k0, k1, AXIS: tl.constexpr,
              BR: tl.constexpr, BC: tl.constexpr, SR: tl.constexpr):
    """uint32 [BR, BC]: the SR words of one orientation of the tile. Element
    (r, c) of x is word i = r * C + c of the operand x (AXIS 1) or i = c * R + r of x^T (AXIS
    0). SR 1: word 0 of counter i; SR 4: word i mod 4 of counter i div 4, one Philox
    evaluation per four elements (the orientation's axis a multiple of 4: each group of four
    lies in one tile); SR 5: the same words, one evaluation per element (any shape)."""
    if AXIS == 1:       # the operand x: element (r, c) is word r * C + c
        idx = rows[:, None] * n_cols + cols[None, :]
    else:               # the operand x^T: element (r, c) of x is word c * R + r
        idx = cols[None, :] * n_rows + rows[:, None]
    if SR == 1:
        rb = _philox4(idx.to(tl.uint32, bitcast=True), 0, 0, 0, k0, k1)
    elif SR == 4:
        if AXIS == 1:   # groups of four along each row: counters [BR, BC / 4]
            g = rows[:, None] * (n_cols // 4) + (c0 // 4 + tl.arange(0, BC // 4))[None, :]
            w0, w1, w2, w3 = _philox4x(g.to(tl.uint32, bitcast=True), k0, k1)
            rb = tl.reshape(_join4(w0, w1, w2, w3), (BR, BC))
        else:           # groups of four down each column: counters [BR / 4, BC]
            g = cols[None, :] * (n_rows // 4) + (r0 // 4 + tl.arange(0, BR // 4))[:, None]
            w0, w1, w2, w3 = _philox4x(g.to(tl.uint32, bitcast=True), k0, k1)
            j = tl.reshape(_join4(w0, w1, w2, w3), (BR // 4, BC, 4))
            rb = tl.reshape(tl.permute(j, (0, 2, 1)), (BR, BC))
    else:
        u = idx.to(tl.uint32, bitcast=True)
        w0, w1, w2, w3 = _philox4x(u >> 2, k0, k1)
        rb = _pick4(w0, w1, w2, w3, u & 3)
    return rb


@triton.jit
def _orientation(b, a, rows, cols, r0, c0, n_rows, n_cols, AXIS: tl.constexpr,
                 BR: tl.constexpr, BC: tl.constexpr, ROT_N: tl.constexpr, LOG2N: tl.constexpr,
                 C_BITS: tl.constexpr, SIGNS: tl.constexpr, SR: tl.constexpr, sr_lo, sr_hi,
                 sr_gs, sg_lo, sg_hi, sg_step, sg_tid, step, STEP_DEV: tl.constexpr):
    """(fp32 bits, magnitudes, SR words or 0) of one orientation of the tile. SR: 0 (RNE) or
    the stream's kind (_sr_words). STEP_DEV: the sign stream's step is the device step, and
    the SR key is finished with it (_sr_key; sr_gs = 2 * gemm + side)."""
    if ROT_N > 0:
        if STEP_DEV:
            sg_step = step.to(tl.int32)        # the low 32 bits: step mod 2^32
        b = _rotate_axis(b, AXIS, BR, BC, ROT_N, LOG2N, C_BITS, SIGNS, sg_lo, sg_hi, sg_step,
                         sg_tid)
        a = b & 0x7FFFFFFF
    if SR:
        k0, k1 = _sr_key(sr_lo, sr_hi, sr_gs >> 1, sr_gs & 1, step, STEP_DEV)
        rb = _sr_words(rows, cols, r0, c0, n_rows, n_cols, k0, k1, AXIS, BR, BC, SR)
    else:
        rb = 0
    return b, a, rb


@triton.jit(do_not_specialize=["row_sr_lo", "row_sr_hi", "row_sr_gs", "col_sr_lo",
                               "col_sr_hi", "col_sr_gs", "row_sg_lo", "row_sg_hi",
                               "row_sg_step", "row_sg_tid", "col_sg_lo", "col_sg_hi",
                               "col_sg_step", "col_sg_tid"])
def mx_qdq_train_kernel(
        x_ptr, row_out_ptr, col_out_ptr, row_scale_ptr, row_code_ptr, col_scale_ptr,
        col_code_ptr, step_ptr, n_rows, n_cols,
        row_sr_lo, row_sr_hi, row_sr_gs, col_sr_lo, col_sr_hi, col_sr_gs,
        row_sg_lo, row_sg_hi, row_sg_step, row_sg_tid,
        col_sg_lo, col_sg_hi, col_sg_step, col_sg_tid,
        SRC: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr, WRITE_Q: tl.constexpr,
        OUT_BF16: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
        EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr, EL_EMAX: tl.constexpr,
        EL_MAXCODE: tl.constexpr, EL_SIGNBIT: tl.constexpr, FILL: tl.constexpr,
        EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr, EL_MAXF32: tl.constexpr,
        SCALE_RULE: tl.constexpr, SATURATE: tl.constexpr,
        ROT_N: tl.constexpr, LOG2N: tl.constexpr, C_BITS: tl.constexpr,
        ROW_ROT: tl.constexpr, COL_ROT: tl.constexpr, ROW_SIGNS: tl.constexpr,
        COL_SIGNS: tl.constexpr, ROW_SR: tl.constexpr, COL_SR: tl.constexpr,
        STEP_DEV: tl.constexpr):
    """mx_qdq_kernel plus, per orientation, a rotation (ROW_ROT / COL_ROT: blocks of ROT_N
    along the orientation's block axis, signs ROW_SIGNS / COL_SIGNS) and stochastic rounding
    (ROW_SR / COL_SR, Philox key (sr_lo, sr_hi)). STEP_DEV: the training step is read from
    step_ptr (int64), for the random signs and to finish the SR keys (see _orientation), so a
    CUDA graph that replays the launch follows the step. The launcher keeps
    (n_rows + BR) * n_cols below 2^31 when an orientation rounds stochastically."""
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
        _qdq_write(ao, bo, row_out_ptr, row_scale_ptr, row_code_ptr, offs, m, rows, cols,
                   r0, c0, n_rows, n_cols, 1, BR, BC, EL_MBITS, EL_EMIN, EL_EMAX, EL_MAXCODE,
                   EL_SIGNBIT, FILL, EL_MAXSIG, EL_EVENTHR, EL_MAXF32, SCALE_RULE, SATURATE,
                   OUT_BF16, WRITE_Q, ROW_SR, rb)
    if COLS:
        cn: tl.constexpr = ROT_N if COL_ROT else 0
        bo, ao, rb = _orientation(b, a, rows, cols, r0, c0, n_rows, n_cols, 0, BR, BC, cn, LOG2N,
                                  C_BITS, COL_SIGNS, COL_SR, col_sr_lo, col_sr_hi, col_sr_gs,
                                  col_sg_lo, col_sg_hi, col_sg_step, col_sg_tid, step,
                                  STEP_DEV)
        _qdq_write(ao, bo, col_out_ptr, col_scale_ptr, col_code_ptr, offs, m, rows, cols,
                   r0, c0, n_rows, n_cols, 0, BR, BC, EL_MBITS, EL_EMIN, EL_EMAX, EL_MAXCODE,
                   EL_SIGNBIT, FILL, EL_MAXSIG, EL_EVENTHR, EL_MAXF32, SCALE_RULE, SATURATE,
                   OUT_BF16, WRITE_Q, COL_SR, rb)


@triton.jit
def _fp4_stored_tile(code_ptr, scale_ptr, r0, c0, n_rows, n_cols, BR: tl.constexpr,
                     BC: tl.constexpr):
    """fp32 bits [BR, BC] of the MXFP4 values stored as packed codes [n_rows, n_cols / 2]
    (element 2i in the low nibble) and E8M0 scales [n_rows, ceil(n_cols / 32)] (blocks along
    the rows), masked lanes +0. Each value is e2m1 x 2^(byte - 127), exact in fp32 (2^-127 for
    byte 0 as a subnormal; the products are multiples of 2^-128); byte 0xFF is NaN; code 8 is
    -0 (the sign is OR-ed in as a bit)."""
    lr = tl.arange(0, BR)
    lp = tl.arange(0, BC // 2)
    rows = r0 + lr
    n_pc = n_cols // 2
    m = (rows < n_rows)[:, None] & ((c0 // 2 + lp) < n_pc)[None, :]
    byte = tl.load(code_ptr + (rows.to(tl.int64)[:, None] * n_pc + (c0 // 2 + lp)[None, :]),
                   mask=m, other=0).to(tl.int32)
    code = tl.reshape(tl.join(byte & 0xF, byte >> 4), (BR, BC))
    n_blk = (n_cols + 31) // 32
    lb = tl.arange(0, BC // 32)
    ms = (rows < n_rows)[:, None] & ((c0 // 32 + lb) < n_blk)[None, :]
    sb = tl.load(scale_ptr + (rows.to(tl.int64)[:, None] * n_blk + (c0 // 32 + lb)[None, :]),
                 mask=ms, other=127).to(tl.int32)
    pw = tl.where(sb == 0, 0x400000, tl.where(sb == 255, 0x7FC00000, sb << 23))
    pw = pw.to(tl.float32, bitcast=True)
    mag = code & 7
    e = mag >> 1
    # e2m1 magnitude: 0, 0.5 (e 0) or (1 + m / 2) * 2^(e - 1) (e 1..3), as fp32 bits
    el = tl.where(e == 0, (mag & 1) * 0x3F000000, ((e + 126) << 23) | ((mag & 1) << 22))
    v = tl.reshape(el.to(tl.float32, bitcast=True), (BR, BC // 32, 32)) * pw[:, :, None]
    b = tl.reshape(v.to(tl.int32, bitcast=True), (BR, BC)) | ((code & 8) << 28)
    return b


@triton.jit
def mx_fp4_stored_qdq_kernel(
        code_ptr, scale_ptr, out_ptr, col_scale_ptr, col_code_ptr, n_rows, n_cols,
        WRITE_Q: tl.constexpr, OUT_BF16: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
        EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr, EL_EMAX: tl.constexpr,
        EL_MAXCODE: tl.constexpr, EL_SIGNBIT: tl.constexpr, FILL: tl.constexpr,
        EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr, EL_MAXF32: tl.constexpr,
        SCALE_RULE: tl.constexpr, SATURATE: tl.constexpr):
    """Fake quantization, blocks down the columns, of an activation stored as MXFP4 along the
    rows (_fp4_stored_tile): the Wgrad operand of a recipe that keeps x as FP4 for the
    backward, from the stored bytes, in one pass."""
    r0, c0, rows, cols, m, offs = _qdq_tile(n_rows, n_cols, BR, BC)
    b = _fp4_stored_tile(code_ptr, scale_ptr, r0, c0, n_rows, n_cols, BR, BC)
    _qdq_write(b & 0x7FFFFFFF, b, out_ptr, col_scale_ptr, col_code_ptr, offs, m, rows,
               cols, r0, c0, n_rows, n_cols, 0, BR, BC, EL_MBITS, EL_EMIN, EL_EMAX, EL_MAXCODE,
               EL_SIGNBIT, FILL, EL_MAXSIG, EL_EVENTHR, EL_MAXF32, SCALE_RULE, SATURATE,
               OUT_BF16, WRITE_Q, False, 0)


KERNELS = {"mx_qdq_train": mx_qdq_train_kernel, "mx_fp4_stored_qdq": mx_fp4_stored_qdq_kernel}
_N_CE = 24          # runtime arguments before the constexprs
_INTS = ("row_sr_lo", "row_sr_hi", "row_sr_gs", "col_sr_lo", "col_sr_hi", "col_sr_gs",
         "row_sg_lo", "row_sg_hi", "row_sg_step", "row_sg_tid", "col_sg_lo", "col_sg_hi",
         "col_sg_step", "col_sg_tid")
ARG_TYPES = {"mx_qdq_train": {
    "x_ptr": "SRC", "row_out_ptr": "OUT", "col_out_ptr": "OUT", "row_scale_ptr": "*u8",
    "row_code_ptr": "*u8", "col_scale_ptr": "*u8", "col_code_ptr": "*u8", "step_ptr": "*i64",
    "n_rows": "i32",
    "n_cols": "i32", **{k: "i32" for k in _INTS}}}


def aot_specs():
    """[(id, jitfn, signature, constexprs)]: rotation 16 / 32 with each sign mode, SR on one
    or both orientations, fp32 and bf16 sources and outputs, with and without codes."""
    out = []
    for fmt, src, odt, wq, rn, rs, cs, rsr, csr, sd in (
            ("mxfp4", "bfloat16", "bfloat16", False, 16, 0, 0, False, False, False),
            ("mxfp4", "float32", "bfloat16", True, 16, 1, 2, False, True, False),
            ("mxfp8_e4m3", "bfloat16", "float32", False, 32, 2, 2, True, True, False),
            ("mxfp4", "bfloat16", "bfloat16", True, 0, 0, 0, True, True, False),
            ("mxfp4", "bfloat16", "bfloat16", False, 16, 2, 2, True, True, True)):
        ce = train_constexprs(fmt, "ocp", src, rows=True, cols=True, with_codes=wq,
                              out_dtype=odt, br=32, bc=128, rot_n=rn, row_rot=rn > 0,
                              col_rot=rn > 0, row_signs=rs, col_signs=cs, row_sr=rsr,
                              col_sr=csr, step_dev=sd)
        sig = {k: {"SRC": "*i32" if src == "float32" else "*i16",
                   "OUT": "*bf16" if odt == "bfloat16" else "*fp32"}.get(v, v)
               for k, v in ARG_TYPES["mx_qdq_train"].items()}
        sig.update({k: "constexpr" for k in ce})
        names = mx_qdq_train_kernel.arg_names
        if set(names) != set(sig):
            raise KeyError(f"mx_qdq_train: arguments {sorted(set(names) ^ set(sig))} are not "
                           "described by ARG_TYPES / the constexprs")
        out.append((f"mx_qdq_train-{fmt}-{src}-h{rn}-s{rs}{cs}-sr{int(rsr)}{int(csr)}"
                    f"{'-codes' if wq else ''}{'-stepdev' if sd else ''}", mx_qdq_train_kernel,
                    {k: sig[k] for k in names}, ce))
    for fmt, odt, wq in (("mxfp8_e4m3", "bfloat16", False), ("mxfp8_e5m2", "float32", True)):
        ce = _stored_constexprs(fmt, "ocp", with_codes=wq, out_dtype=odt, br=32, bc=128)
        sig = {"code_ptr": "*u8", "scale_ptr": "*u8",
               "out_ptr": "*bf16" if odt == "bfloat16" else "*fp32", "col_scale_ptr": "*u8",
               "col_code_ptr": "*u8", "n_rows": "i32", "n_cols": "i32",
               **{k: "constexpr" for k in ce}}
        names = mx_fp4_stored_qdq_kernel.arg_names
        if set(names) != set(sig):
            raise KeyError(f"mx_fp4_stored_qdq: arguments {sorted(set(names) ^ set(sig))}")
        out.append((f"mx_fp4_stored_qdq-{fmt}-{odt}{'-codes' if wq else ''}",
                    mx_fp4_stored_qdq_kernel, {k: sig[k] for k in names}, ce))
    return out


def _stored_constexprs(fmt, profile, *, with_codes, out_dtype, br, bc) -> dict:
    ce = dict(qdq_constexprs(fmt, profile, "float32", rows=False, cols=True,
                             with_codes=with_codes, out_dtype=out_dtype, block_rows=br,
                             block_cols=bc))
    for k in ("SRC", "ROWS", "COLS"):
        ce.pop(k)
    return ce


_STORED_CE: dict = {}


def qdq_fp4_stored(codes: torch.Tensor, scales: torch.Tensor, n_cols: int, fmt: str,
                   profile="ocp", *, out_dtype: torch.dtype = torch.bfloat16,
                   with_codes: bool = False):
    """``(col_values, q)``: the fake quantization along the columns (blocks down each column,
    ``fmt`` / ``profile``) of the [R, n_cols] tensor stored as MXFP4 (OCP) along its rows:
    packed codes uint8 [R, n_cols / 2] (element 2i in the low nibble, as
    ``triton_fast.quantize_fast(..., packed=True)``) and scales uint8 [R, ceil(n_cols / 32)].
    Equals ``quantize_dequantize(dequantize(stored), fmt, profile, rows=False, cols=True)``;
    q is None or (col_scales [ceil(R / 32), n_cols], col_codes [R, n_cols]) with
    ``with_codes``. n_cols must be even (the packing of an odd count is not read here)."""
    for t, what in ((codes, "codes"), (scales, "scales")):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8 or t.ndim != 2 or \
                not t.is_contiguous():
            raise KernelUnsupported(f"{what} must be a contiguous 2-D uint8 tensor")
    R = codes.shape[0]
    if isinstance(n_cols, bool) or not isinstance(n_cols, int) or n_cols < 0 or n_cols % 2:
        raise KernelUnsupported(f"n_cols={n_cols!r}: a non-negative even count")
    if tuple(codes.shape) != (R, n_cols // 2) or tuple(scales.shape) != (R, -(-n_cols // 32)):
        raise KernelUnsupported(f"stored MXFP4 of [{R}, {n_cols}] needs codes [{R}, "
                                f"{n_cols // 2}] and scales [{R}, {-(-n_cols // 32)}], got "
                                f"{tuple(codes.shape)} and {tuple(scales.shape)}")
    if out_dtype not in _OUT:
        raise KernelUnsupported(f"out_dtype {out_dtype}: bfloat16 or float32")
    br, bc = _tiles(R, n_cols, None, None, None, True)
    _check_local_offsets(br, n_cols)
    key = (fmt, profile, bool(with_codes), out_dtype, br, bc)
    hit = _STORED_CE.get(key)
    if hit is None:
        ce = _stored_constexprs(fmt, profile, with_codes=with_codes, out_dtype=_OUT[out_dtype],
                                br=br, bc=bc)
        names = mx_fp4_stored_qdq_kernel.arg_names
        hit = _STORED_CE[key] = (ce, tuple(ce[n] for n in names[7:]))
    dev = codes.device
    out = torch.empty((R, n_cols), dtype=out_dtype, device=dev)
    q = None
    cs = cc = out
    if with_codes:
        cs = torch.empty((-(-R // 32), n_cols), dtype=torch.uint8, device=dev)
        cc = torch.empty((R, n_cols), dtype=torch.uint8, device=dev)
        q = (cs, cc)
    if R and n_cols:
        launch_cached(mx_fp4_stored_qdq_kernel, triton.cdiv(R, br) * triton.cdiv(n_cols, bc),
                      hit, None if INTERPRETED else 4, (codes, scales, out, cs, cc, R, n_cols),
                      5, enable_fp_fusion=False)
    return out, q


def _i32(v: int) -> int:
    v = int(v) & 0xFFFFFFFF
    return v - (1 << 32) if v >= (1 << 31) else v


def _sign_args(signs, n: int, step_dev: bool):
    """(mode, lo, hi, step, tid) of a sign spec: None / 'none'; ('mask', bits) with bit j the
    sign of position j; ('random', seed, step, tensor_id), step None when the launch reads the
    device step (and an int otherwise)."""
    if signs is None or signs == "none":
        return 0, 0, 0, 0, 0
    kind = signs[0] if isinstance(signs, tuple) and signs else None
    if kind == "mask" and len(signs) == 2 and isinstance(signs[1], int) and n <= 32 \
            and 0 <= signs[1] < 2**n:
        return 1, _i32(signs[1]), 0, 0, 0
    if kind == "random" and len(signs) == 4 and isinstance(signs[1], int) and \
            isinstance(signs[3], int) and (signs[2] is None if step_dev else
                                           isinstance(signs[2], int)):
        seed = signs[1] % 2**64
        return 2, _i32(seed), _i32(seed >> 32), _i32(signs[2] or 0), _i32(signs[3])
    raise KernelUnsupported(f"signs={signs!r}: use None, ('mask', bits < 2^n) with n <= 32, or "
                            "('random', seed, step, tensor_id) (step None with a device step "
                            "tensor, an int without)")


def _seed_args(seed, step_dev: bool):
    """(lo, hi, 2 * gemm + side) of an SR seed: None (RNE); an int (the stream's seed); or with
    a device step, ('mix', state, gemm, side): the mix_seed state after (recipe seed, layer),
    finished in the kernel with (step, gemm, side)."""
    if seed is None:
        return 0, 0, 0
    if step_dev:
        if isinstance(seed, tuple) and len(seed) == 4 and seed[0] == "mix" and \
                all(isinstance(v, int) for v in seed[1:]) and seed[2] in (0, 1, 2) and \
                seed[3] in (0, 1):
            z = seed[1] % 2**64
            return _i32(z), _i32(z >> 32), 2 * seed[2] + seed[3]
        raise KernelUnsupported(f"SR seed {seed!r}: with a device step tensor, pass "
                                "('mix', state, gemm, side)")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise KernelUnsupported(f"SR seed must be an int or None, got {seed!r}")
    s = seed % 2**64
    return _i32(s), _i32(s >> 32), 0


def train_constexprs(fmt, profile, src, *, rows, cols, with_codes, out_dtype, br, bc, rot_n,
                     row_rot, col_rot, row_signs, col_signs, row_sr, col_sr,
                     step_dev=False) -> dict:
    """Every constexpr of mx_qdq_train_kernel."""
    ce = dict(qdq_constexprs(fmt, profile, src, rows=rows, cols=cols, with_codes=with_codes,
                             out_dtype=out_dtype, block_rows=br, block_cols=bc))
    ce.update(ROT_N=rot_n, LOG2N=rot_n.bit_length() - 1 if rot_n else 0,
              C_BITS=inv_sqrt_n_bits(rot_n) if rot_n else 0, ROW_ROT=bool(row_rot),
              COL_ROT=bool(col_rot), ROW_SIGNS=row_signs, COL_SIGNS=col_signs,
              ROW_SR=int(row_sr), COL_SR=int(col_sr), STEP_DEV=bool(step_dev))
    return ce


_CE: dict = {}


def _ce(key):
    hit = _CE.get(key)
    if hit is None:
        dtype, fmt, profile, rows, cols, wq, odt, br, bc, rn, rr, cr, rs, cs, rsr, csr, sd = key
        src = {0: "float32", 1: "bfloat16", 2: "float16"}[_SRC[dtype]]
        ce = train_constexprs(fmt, profile, src, rows=rows, cols=cols, with_codes=wq,
                              out_dtype=_OUT[odt], br=br, bc=bc, rot_n=rn, row_rot=rr,
                              col_rot=cr, row_signs=rs, col_signs=cs, row_sr=rsr, col_sr=csr,
                              step_dev=sd)
        names = mx_qdq_train_kernel.arg_names
        if set(names[_N_CE:]) != set(ce):
            raise KeyError(f"mx_qdq_train_kernel's constexprs {names[_N_CE:]} are not "
                           f"train_constexprs' {sorted(ce)}")
        hit = _CE[key] = (ce, tuple(ce[n] for n in names[_N_CE:]))
    return hit


def sr_kinds(R: int, C: int, br: int, bc: int, row_sr, col_sr, sr_words: int):
    """The kernels' ROW_SR / COL_SR of a launch (see _sr_words): 0 without SR; 1 for the
    one-word stream; for the four-word stream 4 where the orientation's axis (C for the rows,
    R for the columns) and the tile's side along it are multiples of 4, else 5."""
    if isinstance(sr_words, bool) or sr_words not in (1, 4):
        raise KernelUnsupported(f"sr_words={sr_words!r}: 1 or 4 words per Philox counter")
    rk = 0 if row_sr is None else 1 if sr_words == 1 else 4 if C % 4 == 0 and bc % 4 == 0 \
        else 5
    ck = 0 if col_sr is None else 1 if sr_words == 1 else 4 if R % 4 == 0 and br % 4 == 0 \
        else 5
    return rk, ck


def launch_args(x, out_dtype, rows, cols, rot_n, row_rot, col_rot, row_signs, col_signs,
                row_sr, col_sr, step, *, block: int = 0, tile=None, sr_words: int = 1):
    """The checks and launch arguments the fused qdq launchers share (this module's and
    triton_train_nvfp4's): (R, C, row_rot, col_rot, device step?, row sign args, col sign
    args, row SR args, col SR args, BR, BC); KernelUnsupported naming the first problem.
    ``block``: the orientations' block size when each axis must be a multiple of it (NVFP4:
    16; 0 for MX, whose ragged blocks the kernel pads); ``tile``: (BR, BC) instead of the
    default tile; ``sr_words``: the SR stream's words per Philox counter (1 or 4; the last
    two items are the orientations' SR kinds, :func:`sr_kinds`)."""
    if out_dtype not in _OUT:
        raise KernelUnsupported(f"out_dtype {out_dtype}: qdq writes bfloat16 or float32")
    if not (rows or cols):
        raise KernelUnsupported("qdq: ask for rows, cols or both")
    if rot_n not in (0,) + ROT_SIZES:
        raise KernelUnsupported(f"rot_n={rot_n!r}: 0 or one of {ROT_SIZES}")
    row_rot = bool(rot_n) if row_rot is None else bool(row_rot) and bool(rot_n)
    col_rot = bool(rot_n) if col_rot is None else bool(col_rot) and bool(rot_n)
    R, C = x.shape
    if block and rows and C % block:
        raise KernelUnsupported(f"blocks of {block} along the rows: {C} columns is not a "
                                f"multiple of {block}")
    if block and cols and R % block:
        raise KernelUnsupported(f"blocks of {block} down the columns: {R} rows is not a "
                                f"multiple of {block}")
    if rows and row_rot and C % rot_n:
        raise KernelUnsupported(f"rows rotated in blocks of {rot_n}: {C} columns is not a "
                                "multiple")
    if cols and col_rot and R % rot_n:
        raise KernelUnsupported(f"columns rotated in blocks of {rot_n}: {R} rows is not a "
                                "multiple")
    sd = step is not None
    if sd and not (isinstance(step, torch.Tensor) and step.dtype == torch.int64 and
                   step.numel() >= 1 and step.device == x.device):
        raise KernelUnsupported(f"step must be an int64 tensor on {x.device} holding the step, "
                                f"got {step!r}")
    rs = _sign_args(row_signs if rows and row_rot else None, rot_n, sd)
    cs = _sign_args(col_signs if cols and col_rot else None, rot_n, sd)
    rsr = _seed_args(row_sr if rows else None, sd)
    csr = _seed_args(col_sr if cols else None, sd)
    br, bc = _tiles(R, C, None, None, None, True) if tile is None else tile
    br, bc = max(br, block, rot_n), max(bc, block, rot_n)
    _check_local_offsets(br, C)
    if ((rows and row_sr is not None) or (cols and col_sr is not None)) and \
            (R + br) * max(C, 1) >= 2**31:
        raise KernelUnsupported(f"stochastic rounding of {R} x {C}: the word index is int32 "
                                "(R * C < 2^31)")
    rk, ck = sr_kinds(R, C, br, bc, row_sr if rows else None, col_sr if cols else None,
                      sr_words)
    return R, C, row_rot, col_rot, sd, rs, cs, rsr, csr, br, bc, rk, ck


def qdq(x: torch.Tensor, fmt: str, profile="ocp", *, rows: bool = True, cols: bool = False,
        out_dtype: torch.dtype = torch.bfloat16, with_codes: bool = False, rot_n: int = 0,
        row_signs=None, col_signs=None, row_sr: int | None = None, col_sr: int | None = None,
        row_rot: bool | None = None, col_rot: bool | None = None,
        step: torch.Tensor | None = None, sr_words: int = 1):
    """Fake quantization of a 2-D tensor x [R, C] from one read: ``(row_values, col_values,
    q)`` as ``triton_fast.quantize_dequantize``, with per orientation an optional rotation and
    stochastic rounding.

    rot_n: 0 (no rotation) or the Hadamard size (16, 32); row_rot / col_rot (default: rot_n
    > 0) pick the orientations it applies to, along C for the rows and along R for the
    columns, each a multiple of rot_n. row_signs / col_signs: None, ('mask', bits) or
    ('random', seed, step, tensor_id) (see :func:`_sign_args`). row_sr / col_sr: None (RNE) or
    the seed of the orientation's mxref.random_bits stream (rows: the operand x, columns: x^T),
    with ``sr_words`` (1 or 4) words per Philox counter.
    The values equal ``dequantize(quantize(rotate(x, n, signs), fmt, profile, axis=-1,
    rand_bits=...))`` per orientation (x^T for the columns, transposed back); ``q`` as in
    quantize_dequantize, the codes and scales of the rotated operand.

    step: None, or an int64 tensor on x's device whose first element is the training step:
    the random signs then take it as their step (pass ('random', seed, None, tensor_id)) and
    an SR seed is ('mix', state, gemm, side), finished in the kernel as
    ``mix_seed(recipe seed, layer, step, gemm, side)`` from the state after (recipe seed,
    layer) (see mxkernels.training.mxlinear): a CUDA graph replaying the launch follows the
    step written into the tensor."""
    if isinstance(x, torch.Tensor) and x.dtype in _SRC and x.ndim == 2 and x.is_contiguous() \
            and x.shape[0] < 2**31 - 2**16 and x.shape[1] < 2**31 - 2**16:
        bits = x.view(torch.int32 if x.dtype == torch.float32 else torch.int16)
    else:
        x, bits = _prep(x)
    L = launch_args(x, out_dtype, rows, cols, rot_n, row_rot, col_rot, row_signs, col_signs,
                    row_sr, col_sr, step, sr_words=sr_words)
    R, C, row_rot, col_rot, sd, rs, cs, rsr, csr, br, bc, rk, ck = L
    ce = _ce((x.dtype, fmt, profile, bool(rows), bool(cols), bool(with_codes), out_dtype, br, bc,
              rot_n, row_rot, col_rot, rs[0], cs[0], rk, ck, sd))
    rv, cv, q, outs = qdq_buffers(R, C, rows, cols, out_dtype, with_codes, x.device)
    if R and C:
        nw = None if INTERPRETED else 4
        launch_cached(mx_qdq_train_kernel, triton.cdiv(R, br) * triton.cdiv(C, bc), ce, nw,
                      (bits, *outs, step if sd else bits, R, C, *rsr, *csr, *rs[1:], *cs[1:]), 8,
                      enable_fp_fusion=False)
    return rv, cv, q
