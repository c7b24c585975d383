"""Null kernels: the memory traffic of each production quantizer, with no encoding.

A null kernel of a quantizer reads the same input with the same tiles (tile shape, grid,
num_warps, launch options and, where the quantizer has them, the same extra passes: NVFP4's
amax read pass and tensor-scale step) and writes outputs of the same shapes, dtypes and
layouts (row scales [R, C/32], column scales blocks down each column, FP4 packed two codes per
byte along the block axis, bf16 values per orientation), through the production load and store
helpers of ``mxkernels`` themselves (``triton_fast._load_tile`` / ``_store_codes`` /
``_store_scales``, ``triton_quant._tile``, ``triton_rotate._chunk_tile`` / ``_store_codes``).
What it writes is a cheap function of what it read, so the compiler can drop neither the loads
nor the stores:

* a code is bits 16.. of the element's fp32 bit pattern, masked to 4 bits (FP4) or 8 bits; for
  a bf16 source that is the low nibble / byte of its bits;
* the scale byte of block j of line l (a row for blocks along the rows, a column for blocks
  down the columns) is (31 l + j) mod 256, plus (T & 1) | (S & 2) of the tensor constants where
  the NVFP4 kernels read them per block; a scale is a function of the block's position, not of
  its elements: the block amax is part of the encoding;
* a dequantized value (the training qdq kernels) is the element's own bits, its two low bits
  XOR-ed with (T & 1) | (S & 2) where the NVFP4 kernel reads the tensor constants;
* an amax read pass folds every element's fp32 bits with XOR into its slot (a tree reduction
  per tile and one atomic per program and orientation, where the real pass takes the max: the
  same reductions and atomics, and a result that depends on every element); the tensor-scale
  step (a kernel, or the last program of the NVFP4 qdq amax pass) copies the slot into T,
  S_enc and S_enc / 6 (and the NVFP4 launchers' tensor-scale output).

Why: a quantizer's ratio to device copy mixes two costs, the encoding (the instructions per
element) and the access pattern (the tile shape, the strided and narrow stores of column scales
and packed codes, a second read pass). The null kernel has only the second, so the quantizer's
time over its null kernel's isolates the encoding cost, and the null kernel's ratio to copy is
the ceiling that quantizer's access pattern allows (issue #31: a null packed-MXFP4 quantizer
reaches 0.898 of copy, so a target of 0.90 of copy sat at that ceiling).

Null kernels are baselines, not kernels under test: they compute nothing and are not checked
against mxref. tests/test_null_kernels.py checks, in the interpreter, that each plan writes
every output element with the function above (so it also read every input element) and that
its launches are the real launcher's (kernel, grid, tile, num_warps, options; recorded from the
real launchers with the kernels replaced), and compiles each one for sm_90.

A :class:`Plan` describes one real launcher call (its output buffers and its launches); the
builders below (``fast_plan``, ``dual_plan``, ``generic_plan``, ``sr_plan``, ``nvfp4_plan``,
``rotated_plan``, ``qdq_plan``, ``qdq_nvfp4_plan``) take the real launcher's GPU tile choices
(mxkernels at the time of writing; the tests fail when they drift), :func:`run` launches a plan
and returns what the real launcher returns. Four kernels serve every plan, one per tile family:
``null_tile_kernel`` ([BR, BC] tiles of triton_fast / triton_train / triton_train_nvfp4),
``null_blocks_kernel`` (BLOCK_ROWS blocks of triton_quant / triton_sr), ``null_chunks_kernel``
(ROWS chunks of W of triton_rotate) and ``null_consts_kernel`` (the NVFP4 tensor-scale step).
:func:`load` gives this module with its kernels decorated for the interpreter or the compiler,
as ``mxkernels.loader.load_kernels`` does for the kernel modules::

    import null_kernels as nk                       # bench/ on sys.path
    plan = nk.fast_plan(tuple(x.shape), "mxfp4", -1, packed=True)
    scales, codes = nk.run(plan, x)                 # as quantize_fast(x, "mxfp4", ...) returns
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mxkernels.triton_common import _widen_to_f32  # noqa: E402
from mxkernels.triton_fast import _load_tile, _qdq_tile, _store_codes, _store_scales  # noqa: E402
from mxkernels.triton_quant import _tile as _blocks_tile  # noqa: E402
from mxkernels.triton_rotate import _chunk_tile  # noqa: E402
from mxkernels.triton_rotate import _store_codes as _store_chunk_codes  # noqa: E402

__all__ = ["Buf", "Launch", "Plan", "KERNELS", "load", "run", "alloc", "signature",
           "launch_elems", "fast_plan", "dual_plan", "generic_plan", "sr_plan", "nvfp4_plan",
           "rotated_plan", "qdq_plan", "qdq_nvfp4_plan"]


# =========================================================================================
# kernels
# =========================================================================================
@triton.jit
def _xor_combine(a, b):
    return a ^ b


@triton.jit
def _xor_along(x, AXIS: tl.constexpr):
    """XOR reduction along AXIS (integers): the amax passes' tree reduction, order-free."""
    return tl.reduce(x, AXIS, _xor_combine)


@triton.jit
def _scale_bytes(r0, c0, AXIS: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    """(31 line + block) & 0xFF of the [BR, BC] tile's blocks of 32: [BR, BC / 32] along the
    rows (AXIS 1; line = row), [BR / 32, BC] down the columns (AXIS 0; line = column)."""
    if AXIS == 1:
        line = r0 + tl.arange(0, BR)[:, None]
        blk = c0 // 32 + tl.arange(0, BC // 32)[None, :]
    else:
        blk = r0 // 32 + tl.arange(0, BR // 32)[:, None]
        line = c0 + tl.arange(0, BC)[None, :]
    return (line * 31 + blk) & 0xFF


@triton.jit
def _tile_codes(b, scale_ptr, code_ptr, rows, cols, r0, c0, n_rows, n_cols, AXIS: tl.constexpr,
                BR: tl.constexpr, BC: tl.constexpr, PACKED: tl.constexpr,
                CODE_MASK: tl.constexpr):
    """One orientation's scales and codes, stored as mx_fast_kernel stores them (row-major
    scales; codes unpacked or FP4 packed along AXIS)."""
    _store_scales(scale_ptr, _scale_bytes(r0, c0, AXIS, BR, BC), r0, c0, n_rows, n_cols, 0,
                  AXIS, BR, BC, 0)
    _store_codes(code_ptr, (b >> 16) & CODE_MASK, rows, cols, n_rows, n_cols, AXIS, BR, BC,
                 PACKED, r0, c0)


@triton.jit
def _tile_values(b, out_ptr, offs, m, amax_ptr, K: tl.constexpr, AMAX: tl.constexpr,
                 OUT_BF16: tl.constexpr):
    """One orientation's dequantized-value stand-in [BR, BC] (bf16 or fp32), stored as
    mx_qdq_kernel stores it; AMAX 2: every program reads orientation K's tensor constants T
    and S_enc / 6 (buffer words 4 + K, 6 + K) as the NVFP4 qdq pass does."""
    if OUT_BF16:
        v = b >> 16
    else:
        v = b
    if AMAX == 2:
        t = tl.load(amax_ptr + 4 + K + tl.arange(0, 1))
        sc6 = tl.load(amax_ptr + 6 + K + tl.arange(0, 1))
        v = v ^ ((t & 1) | (sc6 & 2))
    if OUT_BF16:
        val = v.to(tl.int16).to(tl.bfloat16, bitcast=True)
    else:
        val = v.to(tl.float32, bitcast=True)
    tl.store(out_ptr + offs, val, mask=m)


@triton.jit
def _tile_consts(amax_ptr, ts_ptr, K: tl.constexpr):
    """The last program of the NVFP4 qdq amax pass: slot K's final fold (read by an atomic)
    copied to the tensor-constant words 4 + K (T) and 6 + K (S_enc / 6), and to ts[K]."""
    one = tl.arange(0, 1)
    am = tl.atomic_xor(amax_ptr + K + one, tl.full([1], 0, tl.int32), sem="acquire")
    tl.store(amax_ptr + 4 + K + one, am)
    tl.store(amax_ptr + 6 + K + one, am)
    tl.store(ts_ptr + K + one, am.to(tl.float32, bitcast=True))


@triton.jit
def null_tile_kernel(
        x_ptr, row_scale_ptr, row_code_ptr, col_scale_ptr, col_code_ptr, row_out_ptr,
        col_out_ptr, amax_ptr, ts_ptr, n_rows, n_cols,
        SRC: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, ROWS: tl.constexpr,
        COLS: tl.constexpr, OUT: tl.constexpr, AMAX: tl.constexpr, PACKED: tl.constexpr,
        CODE_MASK: tl.constexpr, OUT_BF16: tl.constexpr):
    """The [BR, BC] tile family (1-D grid, column tiles fastest): per orientation asked for
    (ROWS: blocks along the rows; COLS: down the columns) OUT 1 scales + codes (mx_fast_kernel,
    mx_dual_kernel), OUT 2 values (mx_qdq_kernel, mx_qdq_train_kernel, nvfp4_qdq_train_kernel
    with AMAX 2), OUT 3 NVFP4 row codes and scales, no values (nvfp4_qdq_train_kernel as
    nvfp4_quantize_rows launches it). AMAX 1 (OUT 0): the read pass of nvfp4_train_amax_kernel, each program
    looping over tiles pid, pid + grid, ... (the grid may be smaller than the tile count), one
    atomic per orientation and program into words 0 / 1 of the int32 [8] buffer, a count of
    the finished programs in word 2, and the last one writing the tensor constants."""
    if AMAX == 1:
        n_ct = (n_cols + BC - 1) // BC
        n_tiles = ((n_rows + BR - 1) // BR) * n_ct
        fold = tl.program_id(0) * 0
        for tid in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
            pr = tid // n_ct
            b, _ = _load_tile(x_ptr, pr * BR, (tid - pr * n_ct) * BC, n_rows, n_cols, BR, BC,
                              SRC)
            fold = fold ^ _xor_along(_xor_along(b, 1), 0)      # masked lanes load +0
        if ROWS:
            tl.atomic_xor(amax_ptr, fold)
        if COLS:
            tl.atomic_xor(amax_ptr + 1, fold)
        tl.debug_barrier()
        done = tl.atomic_add(amax_ptr + 2, 1, sem="acq_rel")
        if done == tl.num_programs(0) - 1:
            if ROWS:
                _tile_consts(amax_ptr, ts_ptr, 0)
            if COLS:
                _tile_consts(amax_ptr, ts_ptr, 1)
    r0, c0, rows, cols, m, offs = _qdq_tile(n_rows, n_cols, BR, BC)
    if OUT != 0:
        b, _ = _load_tile(x_ptr, r0, c0, n_rows, n_cols, BR, BC, SRC)
    if OUT == 1:
        if ROWS:
            _tile_codes(b, row_scale_ptr, row_code_ptr, rows, cols, r0, c0, n_rows, n_cols, 1,
                        BR, BC, PACKED, CODE_MASK)
        if COLS:
            _tile_codes(b, col_scale_ptr, col_code_ptr, rows, cols, r0, c0, n_rows, n_cols, 0,
                        BR, BC, PACKED, CODE_MASK)
    if OUT == 2:
        if ROWS:
            _tile_values(b, row_out_ptr, offs, m, amax_ptr, 0, AMAX, OUT_BF16)
        if COLS:
            _tile_values(b, col_out_ptr, offs, m, amax_ptr, 1, AMAX, OUT_BF16)
    if OUT == 3:     # NVFP4 rows, codes without values: byte codes and scales [R, C / 16]
        add = (tl.load(amax_ptr + 4) & 1) | (tl.load(amax_ptr + 6) & 2)
        tl.store(row_code_ptr + offs, ((b >> 16) & 0xFF).to(tl.uint8), mask=m)
        j = c0 // 16 + tl.arange(0, BC // 16)
        so = rows.to(tl.int64)[:, None] * (n_cols // 16) + j[None, :]
        sm = (rows < n_rows)[:, None] & (j < n_cols // 16)[None, :]
        byte = rows[:, None] * 31 + j[None, :] + add
        tl.store(row_scale_ptr + so, (byte & 0xFF).to(tl.uint8), mask=sm)


@triton.jit
def null_blocks_kernel(
        x_ptr, scale_ptr, code_ptr, amax_ptr, consts_ptr, n_rows, n_cols, n_blk,
        rows_per_tensor,
        SRC: tl.constexpr, BLOCK: tl.constexpr, BLOCK_ROWS: tl.constexpr, PASS: tl.constexpr,
        CONSTS: tl.constexpr, CODE_MASK: tl.constexpr):
    """The BLOCK_ROWS-blocks family of triton_quant._tile (blocks of BLOCK along the rows of a
    contiguous [n_rows, n_cols] array, in (row, block) order): PASS 0 scales [n_rows, n_blk] and
    unpacked codes (mx_quantize_kernel, mx_quantize_sr_kernel; CONSTS: reading the per-tensor
    constants per block, nvfp4_quantize_kernel / nvfp4_quantize_sr_kernel); PASS 1 the amax
    read pass of nvfp4_amax_kernel (the input viewed as [tensors, elements per tensor],
    BLOCK_ROWS 1 and BLOCK = its BLOCK_N: one chunk per program, its XOR into slot row)."""
    g, g_ok, r, offs, m = _blocks_tile(n_rows, n_cols, n_blk, BLOCK, BLOCK_ROWS)
    b = _widen_to_f32(tl.load(x_ptr + offs, mask=m, other=0), SRC)
    if PASS == 1:
        tl.atomic_xor(amax_ptr + r, _xor_along(b, 1), mask=g_ok)
    else:
        byte = r * 31 + (g - r * n_blk)
        if CONSTS:
            tix = r // rows_per_tensor
            t = tl.load(consts_ptr + tix * 3, mask=g_ok, other=0)
            sc6 = tl.load(consts_ptr + tix * 3 + 2, mask=g_ok, other=0)
            byte = byte + ((t & 1) | (sc6 & 2))
        tl.store(scale_ptr + g, (byte & 0xFF).to(tl.uint8), mask=g_ok)
        tl.store(code_ptr + offs, ((b >> 16) & CODE_MASK).to(tl.uint8), mask=m)


@triton.jit
def null_chunks_kernel(
        x_ptr, sign_ptr, amax_ptr, consts_ptr, scale_ptr, code_ptr, rows_per_t, n_t, n_cols,
        n_chunk, n_blk,
        SRC: tl.constexpr, N: tl.constexpr, W: tl.constexpr, ROWS: tl.constexpr,
        BLOCK: tl.constexpr, TPACK: tl.constexpr, HAS_SIGNS: tl.constexpr, PASS: tl.constexpr,
        CONSTS: tl.constexpr, PACK4: tl.constexpr, CODE_MASK: tl.constexpr):
    """The chunk family of triton_rotate (ROWS chunks of W columns per program; grid (chunks,
    tensors), or 1-D with TPACK), signs loaded and applied as _rotate_tile does (HAS_SIGNS):
    PASS 0 scales [rows, n_blk] (blocks of BLOCK; CONSTS: the per-tensor constants read per
    block) and codes, FP4 packed with PACK4 (rotate_mx_quantize_kernel,
    rotate_nvfp4_quantize_kernel); PASS 1 the amax read pass (rotate_nvfp4_amax_kernel)."""
    tv, g_ok, r, c, cols, offs, m = _chunk_tile(rows_per_t, n_t, n_cols, n_chunk, W, ROWS,
                                                TPACK)
    b = _widen_to_f32(tl.load(x_ptr + offs, mask=m, other=0), SRC)
    if HAS_SIGNS:
        sm = tl.load(sign_ptr + (tl.arange(0, W) & (N - 1)))
        b = b ^ sm[None, :]
    if PASS == 1:
        row = _xor_along(tl.where(m, b, 0), 1)
        if TPACK:
            tl.atomic_xor(amax_ptr + tv, row, mask=g_ok)
        else:
            tl.atomic_xor(amax_ptr + tl.program_id(1), _xor_along(row, 0))
    else:
        NQ: tl.constexpr = W // BLOCK
        qb = (c * NQ)[:, None] + tl.arange(0, NQ)[None, :]              # [ROWS, NQ]
        byte = tl.reshape(r[:, None] * 31 + qb, (ROWS * NQ,))
        if CONSTS:
            tq = tl.reshape(tv[:, None] + qb * 0, (ROWS * NQ,))
            qok = tl.reshape(g_ok[:, None] & (qb >= 0), (ROWS * NQ,))
            t = tl.load(consts_ptr + tq * 3, mask=qok, other=0)
            sc6 = tl.load(consts_ptr + tq * 3 + 2, mask=qok, other=0)
            byte = byte + ((t & 1) | (sc6 & 2))
        sm2 = g_ok[:, None] & (qb < n_blk)
        soffs = r[:, None] * n_blk + qb
        tl.store(scale_ptr + tl.reshape(soffs, (ROWS * NQ,)), (byte & 0xFF).to(tl.uint8),
                 mask=tl.reshape(sm2, (ROWS * NQ,)))
        _store_chunk_codes(code_ptr, (b >> 16) & CODE_MASK, r, cols, offs, m, n_cols, ROWS, W,
                           PACK4)


@triton.jit
def null_consts_kernel(amax_ptr, consts_ptr, n_t, BLOCK_T: tl.constexpr):
    """The tensor-scale step (nvfp4_tensor_scale_kernel): consts[t] = (amax[t],) * 3."""
    offs = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    m = offs < n_t
    am = tl.load(amax_ptr + offs, mask=m, other=0)
    tl.store(consts_ptr + offs * 3, am, mask=m)
    tl.store(consts_ptr + offs * 3 + 1, am, mask=m)
    tl.store(consts_ptr + offs * 3 + 2, am, mask=m)


KERNELS = {"tile": null_tile_kernel, "blocks": null_blocks_kernel,
           "chunks": null_chunks_kernel, "consts": null_consts_kernel}


# =========================================================================================
# interpreter or compiler
# =========================================================================================
_COPIES: dict = {}


def _interpreted(mod):
    """Whether the module's kernels and the mxkernels helpers they call are all interpreted
    (True) or all compiled (False); None when mixed (mxkernels was imported the other way)."""
    kinds = {type(f).__name__ == "InterpretedFunction"
             for f in (*mod.KERNELS.values(), mod._load_tile, mod._blocks_tile, mod._chunk_tile,
                       mod._widen_to_f32)}
    return kinds.pop() if len(kinds) == 1 else None


def load(interpret: bool):
    """This module with its kernels decorated for the Triton interpreter (True) or the compiler
    (False). Triton decides when a kernel is decorated; when this module was imported the
    other way, a private copy is executed with TRITON_INTERPRET set and the ``mxkernels``
    modules it imports pointed at ``load_kernels(interpret)``'s copies (whose helpers it
    calls); the environment and sys.modules are restored after."""
    here = sys.modules[__name__]
    if _interpreted(here) == interpret:
        return here
    if interpret in _COPIES:
        return _COPIES[interpret]
    from mxkernels.loader import exec_copy, interpret_env, load_kernels
    ks = load_kernels(interpret)
    names = {f"mxkernels.{short}": mod for short, mod in ks.modules.items()}
    with interpret_env(interpret, swap=names):
        mod = exec_copy(f"{__name__}__{'interpreted' if interpret else 'compiled'}", __file__)
    if _interpreted(mod) != interpret:
        raise RuntimeError("this triton does not read TRITON_INTERPRET when kernels are "
                           "decorated")
    _COPIES[interpret] = mod
    return mod


# =========================================================================================
# plans
# =========================================================================================
@dataclass(frozen=True)
class Buf:
    """A buffer of a plan: a real output (``out``: returned by the real launcher) or an
    internal one (the amax slots, the NVFP4 tensor constants, the sign masks). init: 'empty',
    'zeros', 'ones' (as the real launcher allocates it) or 'te16' (TransformerEngine's sign
    masks, kept on the device as the real launcher keeps them)."""
    name: str
    shape: tuple
    dtype: torch.dtype
    init: str = "empty"
    out: bool = True


@dataclass(frozen=True)
class Launch:
    """One kernel launch: ``kernel`` (a key of KERNELS), its grid, its runtime arguments in
    order ('x': the input bits, another str: a buffer, an int: itself), its constexprs and
    options (None: not passed, Triton's default: 4 warps, 3 stages, fp fusion on), and
    ``mirrors``: the real kernel's name and the real constexprs that fix its tile."""
    kernel: str
    grid: tuple
    args: tuple
    constexprs: dict
    mirrors: str
    tile: dict
    num_warps: int | None = None
    num_stages: int | None = None
    fp_fusion: bool | None = None


@dataclass(frozen=True)
class Plan:
    """The null counterpart of one real launcher call: ``returns`` lists the real launcher's
    outputs in order (a buffer name, None where the real one returns None, or
    'tensor_scale': ``consts[:, 0]`` as float32, the NVFP4 launchers' last output)."""
    name: str
    mirrors: str
    kind: str
    x_shape: tuple
    bufs: tuple
    launches: tuple
    returns: tuple
    params: dict = field(default_factory=dict)

    def buf(self, name: str) -> Buf:
        return next(b for b in self.bufs if b.name == name)


_SRC = {"float32": 0, "bfloat16": 1, "float16": 2}
_U8, _I32 = torch.uint8, torch.int32


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _code_mask(packed: bool) -> int:
    return 0xF if packed else 0xFF


def _fp4(fmt: str) -> bool:
    from mxref.formats import get_format
    return get_format(fmt).element.bits == 4


def _tile_ce(src, br, bc, rows, cols, out, amax=0, packed=False, out_bf16=True) -> dict:
    return {"SRC": _SRC[src], "BR": br, "BC": bc, "ROWS": bool(rows), "COLS": bool(cols),
            "OUT": out, "AMAX": amax, "PACKED": bool(packed), "CODE_MASK": _code_mask(packed),
            "OUT_BF16": bool(out_bf16)}


def fast_plan(shape, fmt: str, axis: int, packed: bool, src: str = "bfloat16") -> Plan:
    """triton_fast.quantize_fast(x, fmt, profile, axis, packed=packed) (row-major scales):
    mx_fast_kernel, GPU tiles 8 x 512 (axis -1) / 32 x 128 (axis 0), 4 warps (_tiles)."""
    R, C = shape
    rows = axis in (-1, 1)
    pk = bool(packed) and _fp4(fmt)
    br, bc = (8, 512) if rows else (32, 128)
    if rows:
        bufs = (Buf("scales", (R, _cdiv(C, 32)), _U8),
                Buf("codes", (R, (C + 1) // 2) if pk else (R, C), _U8))
        ptrs = ("scales", "codes", "x", "x")
    else:
        bufs = (Buf("scales", (_cdiv(R, 32), C), _U8),
                Buf("codes", ((R + 1) // 2, C) if pk else (R, C), _U8))
        ptrs = ("x", "x", "scales", "codes")
    launches = () if not (R and C) else (Launch(
        "tile", (_cdiv(R, br) * _cdiv(C, bc),), ("x", *ptrs, "x", "x", "x", "x", R, C),
        _tile_ce(src, br, bc, rows, not rows, 1, packed=pk), "mx_fast_kernel",
        {"BR": br, "BC": bc}, num_warps=4),)
    what = "rows" if rows else "cols"
    return Plan(f"null tile {br}x{bc} {what}, {'packed FP4' if pk else 'byte'} codes",
                f"triton_fast.quantize_fast({fmt}, axis={axis}, packed={packed})", "fast",
                tuple(shape), bufs, launches, ("scales", "codes"),
                {"axis": 1 if rows else 0, "packed": pk, "src": src})


def dual_plan(shape, fmt: str, packed: bool, src: str = "bfloat16") -> Plan:
    """triton_fast.quantize_dual(x, fmt, profile, packed=packed): mx_dual_kernel, GPU tile
    32 x 128, 4 warps, both orientations from one read."""
    R, C = shape
    pk = bool(packed) and _fp4(fmt)
    bufs = (Buf("row_scales", (R, _cdiv(C, 32)), _U8),
            Buf("row_codes", (R, (C + 1) // 2) if pk else (R, C), _U8),
            Buf("col_scales", (_cdiv(R, 32), C), _U8),
            Buf("col_codes", ((R + 1) // 2, C) if pk else (R, C), _U8))
    launches = () if not (R and C) else (Launch(
        "tile", (_cdiv(R, 32) * _cdiv(C, 128),),
        ("x", "row_scales", "row_codes", "col_scales", "col_codes", "x", "x", "x", "x", R, C),
        _tile_ce(src, 32, 128, True, True, 1, packed=pk), "mx_dual_kernel",
        {"BR": 32, "BC": 128}, num_warps=4),)
    return Plan(f"null tile 32x128 rows+cols, {'packed FP4' if pk else 'byte'} codes",
                f"triton_fast.quantize_dual({fmt}, packed={packed})", "dual", tuple(shape),
                bufs, launches, ("row_scales", "row_codes", "col_scales", "col_codes"),
                {"packed": pk, "src": src})


def _blocks_plan(shape, src, mirrors, kernel, num_warps, kind) -> Plan:
    R, C = shape
    nblk = _cdiv(C, 32)
    bufs = (Buf("scales", (R, nblk), _U8), Buf("codes", (R, C), _U8))
    launches = () if not (R and nblk) else (Launch(
        "blocks", (_cdiv(R * nblk, 64),), ("x", "scales", "codes", "x", "x", R, C, nblk, 1),
        {"SRC": _SRC[src], "BLOCK": 32, "BLOCK_ROWS": 64, "PASS": 0, "CONSTS": False,
         "CODE_MASK": 0xFF}, kernel, {"BLOCK": 32, "BLOCK_ROWS": 64}, num_warps=num_warps),)
    return Plan("null blocks 64x32, byte codes", mirrors, kind, tuple(shape), bufs, launches,
                ("scales", "codes"), {"axis": 1, "packed": False, "src": src})


def generic_plan(shape, src: str = "bfloat16") -> Plan:
    """triton_quant.mx_quantize(x, fmt, profile, axis=-1), a 2-D x: mx_quantize_kernel, 64
    blocks of 32 per program on a GPU (GPU_BLOCK_ROWS), the default 4 warps."""
    return _blocks_plan(shape, src, "triton_quant.mx_quantize(axis=-1)", "mx_quantize_kernel",
                        None, "generic")


def sr_plan(shape, src: str = "bfloat16") -> Plan:
    """triton_sr.quantize_sr(x, fmt, profile, axis=-1, seed=...), a 2-D x:
    mx_quantize_sr_kernel with generated words (no word tensor read), 64 blocks of 32, 4
    warps: the generic kernel's traffic."""
    return _blocks_plan(shape, src, "triton_sr.quantize_sr(axis=-1, seed=...)",
                        "mx_quantize_sr_kernel", 4, "sr")


def _nvfp4_head(T: int, per_tensor: int, src: str):
    """The launches every NVFP4 launcher starts with: the zeroed amax and constants, the
    amax read pass (nvfp4_amax_kernel: BLOCK_N 1024 chunks of each tensor, as [T, per_tensor]
    rows of BLOCK_ROWS 1) and the tensor-scale step (nvfp4_tensor_scale_kernel, BLOCK_T 64)."""
    bufs = (Buf("amax", (T,), _I32, "zeros", False), Buf("consts", (T, 3), _I32, "zeros", False))
    nch = _cdiv(per_tensor, 1024)
    amax = Launch("blocks", (T * nch,), ("x", "x", "x", "amax", "x", T, per_tensor, nch, 1),
                  {"SRC": _SRC[src], "BLOCK": 1024, "BLOCK_ROWS": 1, "PASS": 1, "CONSTS": False,
                   "CODE_MASK": 0xFF}, "nvfp4_amax_kernel", {"BLOCK_N": 1024})
    consts = Launch("consts", (_cdiv(T, 64),), ("amax", "consts", T), {"BLOCK_T": 64},
                    "nvfp4_tensor_scale_kernel", {"BLOCK_T": 64})
    return bufs, amax, consts


def nvfp4_plan(shape, sr: bool = False, src: str = "bfloat16", device="cuda") -> Plan:
    """triton_quant.nvfp4_quantize(x, profile) (sr: triton_sr.quantize_nvfp4_sr(x, profile,
    seed=...)) of x [T, ..., C]: the amax pass, the tensor-scale step, then
    nvfp4_quantize_kernel (nvfp4_quantize_sr_kernel) on 64 blocks of 16 per program (4 warps;
    the default for RNE), the constants read per block; tensor_scale = consts[:, 0]. One
    tensor (T = 1) with C a multiple of 16, RNE: triton_train_nvfp4.nvfp4_quantize_rows, the
    training launch's amax pass (32 x 256 tiles, 4 warps, x on ``device``) and its rows with
    codes and no values (16 x 64 tiles, one warp); tensor_scale = ts[:1]."""
    T, C = shape[0], shape[-1]
    rows = 1
    for d in shape[:-1]:
        rows *= d
    if not sr and T == 1 and rows and C % 16 == 0:
        abr, abc = 32, 256
        bufs = (Buf("amax", (8,), _I32, "zeros", False), Buf("ts", (2,), torch.float32, "ones",
                                                             False),
                Buf("scales", tuple(shape[:-1]) + (C // 16,), _U8),
                Buf("codes", tuple(shape), _U8))
        launches = (
            Launch("tile", (min(_cdiv(rows, abr) * _cdiv(C, abc), _amax_programs(device)),),
                   ("x", "x", "x", "x", "x", "x", "x", "amax", "ts", rows, C),
                   _tile_ce(src, abr, abc, True, False, 0, amax=1),
                   "nvfp4_train_amax_kernel", {"BR": abr, "BC": abc}, num_warps=4,
                   fp_fusion=False),
            Launch("tile", (_cdiv(rows, 16) * _cdiv(C, 64),),
                   ("x", "scales", "codes", "x", "x", "x", "x", "amax", "x", rows, C),
                   _tile_ce(src, 16, 64, True, False, 3, amax=2),
                   "nvfp4_qdq_train_kernel", {"BR": 16, "BC": 64}, num_warps=1,
                   fp_fusion=False))
        return Plan("null NVFP4 one tensor: amax pass, tile 16x64 rows, byte codes",
                    "triton_quant.nvfp4_quantize (one tensor: nvfp4_quantize_rows)", "nvfp4",
                    tuple(shape), bufs, launches, ("scales", "codes", "tensor_scale"),
                    {"block": 16, "src": src})
    per_tensor = rows * C // T if T else 0
    if per_tensor >= 2**31 - 1024:
        raise ValueError(f"{per_tensor} elements per tensor: the null amax pass indexes a "
                         "tensor with int32 (below 2^31)")
    nblk = _cdiv(C, 16)
    head, amax, consts = _nvfp4_head(T, per_tensor, src)
    bufs = head + (Buf("scales", tuple(shape[:-1]) + (nblk,), _U8),
                   Buf("codes", tuple(shape), _U8))
    quant = Launch("blocks", (_cdiv(rows * nblk, 64),),
                   ("x", "scales", "codes", "x", "consts", rows, C, nblk, rows // T if T else 0),
                   {"SRC": _SRC[src], "BLOCK": 16, "BLOCK_ROWS": 64, "PASS": 0, "CONSTS": True,
                    "CODE_MASK": 0xFF},
                   "nvfp4_quantize_sr_kernel" if sr else "nvfp4_quantize_kernel",
                   {"BLOCK": 16, "BLOCK_ROWS": 64}, num_warps=4 if sr else None)
    launches = ()
    if T and per_tensor:
        launches = (amax, consts) + ((quant,) if rows * nblk else ())
    mirrors = "triton_sr.quantize_nvfp4_sr(seed=...)" if sr else "triton_quant.nvfp4_quantize"
    return Plan("null NVFP4: amax pass, tensor scale, blocks 64x16, byte codes", mirrors,
                "nvfp4_sr" if sr else "nvfp4", tuple(shape), bufs, launches,
                ("scales", "codes", "tensor_scale"), {"block": 16, "src": src})


_TE16: dict = {}


def _te16_masks(device) -> torch.Tensor:
    """TE16_SIGNS as int32 sign masks (0 / 0x80000000) on ``device``, made once."""
    key = str(device)
    if key not in _TE16:
        from mxref.rotate import TE16_SIGNS
        m = torch.tensor([(-2**31 if s < 0 else 0) for s in TE16_SIGNS], dtype=torch.int32)
        _TE16[key] = m.to(device)
    return _TE16[key]


def rotated_plan(shape, fmt: str, n: int, packed: bool = False, signs: str = "none",
                 src: str = "bfloat16") -> Plan:
    """triton_rotate.quantize_rotated(x, fmt, profile, n, signs=signs, packed=packed) with the
    default rows (GPU_TILE_ELEMS 4096 elements per program, 8 warps at that size, no fp fusion):
    MX, a 2-D x: rotate_mx_quantize_kernel; nvfp4, x [T, ..., C]: the rotated amax pass, the
    tensor-scale step, rotate_nvfp4_quantize_kernel (grid (chunks, T) unless a tensor is
    smaller than a tile)."""
    if signs not in ("none", "te16"):
        raise ValueError("null plans take signs 'none' or 'te16'")
    nv = fmt == "nvfp4"
    block = 16 if nv else 32
    w = max(n, block)
    rows_ = max(1, 4096 // w)
    nw = 8 if rows_ * w >= 4096 else 4
    C = shape[-1]
    nrows = 1
    for d in shape[:-1]:
        nrows *= d
    pk = bool(packed) and _fp4(fmt)
    has = signs == "te16"
    bufs = (Buf("signs", (n,), _I32, "te16", False),) if has else ()
    lead = tuple(shape[:-1])
    bufs += (Buf("scales", lead + (_cdiv(C, block),), _U8),
             Buf("codes", lead + ((C // 2) if pk else C,), _U8))
    ce = {"SRC": _SRC[src], "N": n, "W": w, "ROWS": rows_, "BLOCK": block, "TPACK": False,
          "HAS_SIGNS": has, "PASS": 0, "CONSTS": nv, "PACK4": pk,
          "CODE_MASK": _code_mask(pk)}
    sg = "signs" if has else "x"
    name = f"null chunks {rows_}x{w}{' te16 signs' if has else ''}"
    if not nv:
        n_chunk = _cdiv(C, w)
        nblk = _cdiv(C, 32)
        launches = () if not (nrows and n_chunk) else (Launch(
            "chunks", (_cdiv(nrows * n_chunk, rows_), 1),
            ("x", sg, "x", "x", "scales", "codes", nrows, 1, C, n_chunk, nblk), ce,
            "rotate_mx_quantize_kernel", {"W": w, "ROWS": rows_}, num_warps=nw,
            fp_fusion=False),)
        return Plan(name + f", {'packed FP4' if pk else 'byte'} codes",
                    f"triton_rotate.quantize_rotated({fmt}, n={n}, signs={signs}, "
                    f"packed={packed})", "rotated", tuple(shape), bufs, launches,
                    ("scales", "codes"),
                    {"block": 32, "packed": pk, "n": n, "signs": signs, "src": src})
    T = shape[0]
    rpt = nrows // T if T else 0
    n_chunk = C // w
    per_t = rpt * n_chunk
    tpack = per_t < rows_
    grid = (_cdiv(nrows * n_chunk, rows_), 1) if tpack else (_cdiv(per_t, rows_), T)
    bufs = (Buf("amax", (T,), _I32, "zeros", False),
            Buf("consts", (T, 3), _I32, "zeros", False)) + bufs
    ce["TPACK"] = tpack
    tile = {"W": w, "ROWS": rows_, "TPACK": tpack}
    launches = ()
    if T:
        amax = Launch("chunks", grid, ("x", sg, "amax", "x", "x", "x", rpt, T, C, n_chunk, 0),
                      {**ce, "PASS": 1, "CONSTS": False}, "rotate_nvfp4_amax_kernel", tile,
                      num_warps=nw, fp_fusion=False)
        consts = Launch("consts", (_cdiv(T, 64),), ("amax", "consts", T), {"BLOCK_T": 64},
                        "nvfp4_tensor_scale_kernel", {"BLOCK_T": 64})
        quant = Launch("chunks", grid, ("x", sg, "x", "consts", "scales", "codes", rpt, T, C,
                                        n_chunk, C // 16), ce, "rotate_nvfp4_quantize_kernel",
                       tile, num_warps=nw, fp_fusion=False)
        launches = (amax, consts, quant) if per_t else (consts,)
    return Plan(name + ", NVFP4: amax pass, tensor scale, byte codes",
                f"triton_rotate.quantize_rotated(nvfp4, n={n}, signs={signs})",
                "rotated_nvfp4", tuple(shape), bufs, launches,
                ("scales", "codes", "tensor_scale"),
                {"block": 16, "packed": pk, "n": n, "signs": signs, "src": src})


def _value_bufs(R, C, rows, cols, out_dtype):
    return tuple(Buf(f"{k}_values", (R, C), out_dtype) for k, on in (("row", rows),
                                                                      ("col", cols)) if on)


def qdq_plan(shape, rows: bool = True, cols: bool = True, out_dtype=torch.bfloat16,
             src: str = "bfloat16") -> Plan:
    """triton_train.qdq(x, fmt, profile, rows=rows, cols=cols) without codes (RNE or SR, no
    rotation: the same traffic): mx_qdq_train_kernel, GPU tile 32 x 128 (_tiles, dual), 4
    warps, no fp fusion; returns (row values, col values, None)."""
    R, C = shape
    bufs = _value_bufs(R, C, rows, cols, out_dtype)
    rv = "row_values" if rows else None
    cv = "col_values" if cols else None
    dummy = rv or cv
    launches = () if not (R and C) else (Launch(
        "tile", (_cdiv(R, 32) * _cdiv(C, 128),),
        ("x", "x", "x", "x", "x", rv or dummy, cv or dummy, "x", "x", R, C),
        _tile_ce(src, 32, 128, rows, cols, 2, out_bf16=out_dtype == torch.bfloat16),
        "mx_qdq_train_kernel", {"BR": 32, "BC": 128}, num_warps=4, fp_fusion=False),)
    what = "+".join(k for k, on in (("rows", rows), ("cols", cols)) if on)
    return Plan(f"null tile 32x128 {what}, values", f"triton_train.qdq(rows={rows}, "
                f"cols={cols})", "qdq", tuple(shape), bufs, launches, (rv, cv, None),
                {"rows": rows, "cols": cols, "src": src})


def _amax_programs(device) -> int:
    """triton_train_nvfp4._amax_programs: the NVFP4 qdq amax pass's grid at most, 8 programs
    per SM on a CUDA device, 3 on any other (the interpreter)."""
    device = torch.device(device)
    if device.type != "cuda":
        return 3
    idx = device.index if device.index is not None else torch.cuda.current_device()
    return 8 * torch.cuda.get_device_properties(idx).multi_processor_count


def qdq_nvfp4_plan(shape, rows: bool = True, cols: bool = True, sr: bool = False,
                   out_dtype=torch.bfloat16, src: str = "bfloat16", device="cuda") -> Plan:
    """triton_train_nvfp4.qdq(x, profile, rows=rows, cols=cols, row_sr / col_sr set iff sr)
    without codes, x on ``device``: a zeroed int32 [8] buffer (amax slots, a program count,
    the tensor constants), nvfp4_train_amax_kernel on min(tiles, _amax_programs(device))
    programs (a grid-stride loop; the last program writes the constants and ts), then
    nvfp4_qdq_train_kernel on every tile; GPU tile 16 x 64 with one warp (RNE) or 16 x 128
    with 4 warps (SR), the amax pass on 32 x 256 tiles with 4 warps, no fp fusion; ts float32
    [2] starts at 1.0; returns (row values, col values, None, ts)."""
    R, C = shape
    (br, bc), nw = ((16, 128), 4) if sr else ((16, 64), 1)
    abr, abc = max(32, br), max(256, bc)
    bufs = (Buf("amax", (8,), _I32, "zeros", False), Buf("ts", (2,), torch.float32, "ones")) + \
        _value_bufs(R, C, rows, cols, out_dtype)
    rv = "row_values" if rows else None
    cv = "col_values" if cols else None
    dummy = rv or cv
    grid = (_cdiv(R, br) * _cdiv(C, bc),)
    bf = out_dtype == torch.bfloat16
    launches = () if not (R and C) else (
        Launch("tile", (min(_cdiv(R, abr) * _cdiv(C, abc), _amax_programs(device)),),
               ("x", "x", "x", "x", "x", "x", "x", "amax", "ts", R, C),
               _tile_ce(src, abr, abc, rows, cols, 0, amax=1, out_bf16=bf),
               "nvfp4_train_amax_kernel", {"BR": abr, "BC": abc}, num_warps=4,
               fp_fusion=False),
        Launch("tile", grid, ("x", "x", "x", "x", "x", rv or dummy, cv or dummy, "amax", "x",
                              R, C),
               _tile_ce(src, br, bc, rows, cols, 2, amax=2, out_bf16=bf),
               "nvfp4_qdq_train_kernel", {"BR": br, "BC": bc}, num_warps=nw, fp_fusion=False))
    what = "+".join(k for k, on in (("rows", rows), ("cols", cols)) if on)
    return Plan(f"null tile {br}x{bc} {what}, NVFP4: amax pass, values",
                f"triton_train_nvfp4.qdq(rows={rows}, cols={cols}{', SR' if sr else ''})",
                "qdq_nvfp4", tuple(shape), bufs, launches, (rv, cv, None, "ts"),
                {"rows": rows, "cols": cols, "sr": sr, "src": src})


# =========================================================================================
# running and compiling
# =========================================================================================
def _bits(x: torch.Tensor) -> torch.Tensor:
    if x.dtype in (torch.bfloat16, torch.float16, torch.int16):
        return x.contiguous().view(torch.int16)
    if x.dtype in (torch.float32, torch.int32):
        return x.contiguous().view(torch.int32)
    raise TypeError(f"null kernels read float32 / bfloat16 / float16 tensors, not {x.dtype}")


def alloc(plan: Plan, device, fill: int | None = None) -> dict:
    """The plan's buffers on ``device`` as the real launcher allocates them; with ``fill``,
    every byte of each 'empty' output is set to it (a sentinel for the tests)."""
    out = {}
    for b in plan.bufs:
        if b.init == "te16":
            out[b.name] = _te16_masks(device)
            continue
        t = {"zeros": torch.zeros, "ones": torch.ones, "empty": torch.empty}[b.init](
            b.shape, dtype=b.dtype, device=device)
        if fill is not None and b.init == "empty" and b.out:
            t.view(torch.uint8).fill_(fill)
        out[b.name] = t
    return out


def run(plan: Plan, x: torch.Tensor, bufs: dict | None = None):
    """Launch the plan on x (compiled kernels for a GPU tensor, interpreted for a CPU one);
    returns what the real launcher returns. bufs: from :func:`alloc` (default: a fresh
    allocation, as the real launchers allocate per call)."""
    if tuple(x.shape) != tuple(plan.x_shape):
        raise ValueError(f"plan for {plan.x_shape}, input {tuple(x.shape)}")
    mod = load(x.device.type == "cpu")
    env = dict(alloc(plan, x.device) if bufs is None else bufs)
    env["x"] = _bits(x)
    for ln in plan.launches:
        kw = dict(ln.constexprs)
        if ln.num_warps is not None:
            kw["num_warps"] = ln.num_warps
        if ln.num_stages is not None:
            kw["num_stages"] = ln.num_stages
        if ln.fp_fusion is not None:
            kw["enable_fp_fusion"] = ln.fp_fusion
        args = [env[a] if isinstance(a, str) else a for a in ln.args]
        mod.KERNELS[ln.kernel][ln.grid](*args, **kw)
    out = []
    for r in plan.returns:
        if r is None:
            out.append(None)
        elif r == "tensor_scale":     # the block kernels' consts, or the one-tensor ts
            out.append(env["consts"][:, 0].contiguous().view(torch.float32) if "consts" in env
                       else env["ts"][:1])
        else:
            out.append(env[r])
    return tuple(out)


_PTR = {torch.uint8: "*u8", torch.int32: "*i32", torch.int16: "*i16", torch.bfloat16: "*bf16",
        torch.float32: "*fp32"}


def signature(plan: Plan, launch: Launch) -> dict:
    """Every argument of the launch's kernel -> its Triton type ('constexpr' for the
    constexprs), for ``triton.compile(ASTSource(...))``."""
    src = plan.params.get("src", "bfloat16")
    fn = KERNELS[launch.kernel]
    names = fn.arg_names
    nrt = len(names) - len(launch.constexprs)
    if set(names[nrt:]) != set(launch.constexprs) or nrt != len(launch.args):
        raise KeyError(f"{launch.kernel}: arguments {names} do not fit {launch.args} + "
                       f"{sorted(launch.constexprs)}")
    sig = {}
    for name, a in zip(names[:nrt], launch.args):
        if isinstance(a, int):
            sig[name] = "i32"
        elif a == "x":
            sig[name] = "*i32" if src == "float32" else "*i16"
        else:
            sig[name] = _PTR[plan.buf(a).dtype]
    sig.update({k: "constexpr" for k in names[nrt:]})
    return sig


def launch_elems(launch: Launch) -> int:
    """Elements one program of the launch reads."""
    ce = launch.constexprs
    if launch.kernel == "tile":
        return ce["BR"] * ce["BC"]
    if launch.kernel == "blocks":
        return ce["BLOCK"] * ce["BLOCK_ROWS"]
    if launch.kernel == "chunks":
        return ce["W"] * ce["ROWS"]
    return ce["BLOCK_T"]
