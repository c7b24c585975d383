"""The FP8 carrier: exact MXFP4 values re-encoded as E4M3 with one power-of-two scale per 128
elements along the contraction axis, for FP8 tensor-core GEMMs with 1x128 block-wise scales
(``torch._scaled_mm``). Contract: :func:`mxref.fp8fp4.mxfp4_to_fp8` with ``group=128`` and
``fp8="e4m3"`` (docs/fp8fp4.md section 1), byte for byte, for every tensor whose live blocks
reach |q| = 4 or 6 (every OCP-floor MXFP4 block, RNE or SR: the block amax scaled by 2^-s lies
in [4, 8), which rounds to 4 or 6).

Input: the values a training fast path multiplies, ``V = q * 2^(s_b - 127)`` (bf16 or fp32,
exact), not codes and scales: the fast path's fused launches write values. The group byte is
read off the values' exponent fields: for such a block, ``s_b = E(block amax) - 2`` (E the
biased exponent, 127 in both fp32 and E8M0), so ``G = max(s_max - 6, 0) = max(E(group amax) -
8, 0)`` over the non-NaN elements (an all-zero group: E = 0, G = 0; every element NaN: 0xFF).
Element: ``RNE_e4m3(V * 2^(127 - G))``; the power of two is applied as two fp32 multiplies by
normal powers of two (2^(127 - G) can be 2^-127, an fp32 subnormal), each exact unless the
result falls below 2^-126, where the E4M3 result is +-0 either way; the code is then built from
the bits (:func:`_e4m3_code`), not by a float8 cast (the Triton interpreter's cast does not
round E4M3 subnormals to nearest). NaN -> 0x7F (the reference
writes the positive NaN code), -0 -> 0x80.

Output for a GEMM operand ``[M, K]`` (M rows, K the contraction axis): codes uint8 [M, Kp]
(Kp = K rounded up to 128, the tail zero: zero codes are not live and do not change the last
group's byte) and fp32 scales 2^(G - 127) stored group-major, [Kp / 128, M] contiguous, which
read as ``[M, Kp / 128]`` with strides (1, M) are the "outer-dim-major" 1x128 scales
``torch._scaled_mm`` takes (``scales_t``). ``axis=0`` reads a values tensor [R, C] blocked along
R and writes the operand of its transpose, [C, Rp]: the Dgrad W and both Wgrad operands, whose
contraction axis is the values' row axis, come out K-contiguous as FP8 GEMMs need (no separate
transpose pass).
"""
from __future__ import annotations

import json
import os

import torch
import triton
import triton.language as tl

from mxkernels.triton_common import _max_along
from mxkernels.triton_fast import (_SRC, _load_tile, _prep, _qdq_orient, _qdq_tile, INTERPRETED,
                                   launch_cached, qdq_constexprs)

__all__ = ["carrier", "Carrier", "carrier_kernel", "qdq_carrier", "qdq_carrier_kernel",
           "GROUP", "KERNELS", "aot_specs"]

GROUP = 128


@triton.jit
def _e4m3_code(c):
    """E4M3 code (int32, sign in bit 7) of fp32 values c with |c| <= 384 whose significand has
    at most 2 bits (q * 2^d): exact from 2^-6 up (exponent and top mantissa bits moved over);
    below, RNE to the subnormal grid 2^-9 as n = rne(|c| * 2^9) (exact scaling, then one fp32
    add of 2^23, which rounds to an integer with ties to even), n = 8 being the code of 2^-6."""
    cb = c.to(tl.int32, bitcast=True)
    sign = (cb >> 24) & 0x80
    ec = (cb >> 23) & 0xFF
    normal = ((ec - 120) << 3) | ((cb >> 20) & 7)
    t = tl.where(ec == 255, 0.0, tl.abs(c) * 512.0)      # NaN lanes: overwritten later
    n = ((t + 8388608.0) - 8388608.0).to(tl.int32)
    return sign | tl.where(ec >= 121, normal, n)


@triton.jit
def _group_scale(emax, any_ok, any_real):
    """From a group's largest exponent field (NaN lanes as 0), whether it has any lane and any
    non-NaN lane: (2^(127 - G) as two normal fp32 factors, the fp32 scale 2^(G - 127)) with
    G = 0xFF for an all-NaN group, else max(emax - 8, 0); G = 0 is the subnormal 2^-127 (bits
    0x00400000), 0xFF a NaN."""
    G = tl.where((any_ok > 0) & (any_real == 0), 255, tl.maximum(emax - 8, 0))
    d = 127 - G                                     # in [-128, 127]
    d1 = d // 2
    p1 = ((d1 + 127) << 23).to(tl.float32, bitcast=True)
    p2 = ((d - d1 + 127) << 23).to(tl.float32, bitcast=True)
    sb = tl.where(G == 0, 0x00400000, tl.where(G == 255, 0x7FC00000, G << 23))
    return p1, p2, sb.to(tl.float32, bitcast=True)


@triton.jit
def carrier_kernel(v_ptr, code_ptr, scale_ptr, n_rows, n_cols, M, n_groups,
                   AXIS: tl.constexpr, BM: tl.constexpr, F32: tl.constexpr):
    """Program (i, g): output rows i*BM .. +BM of one 128-group g. Output row m, group column
    k reads values[m, k] (AXIS 1) or values[k, m] (AXIS 0) of the [n_rows, n_cols] input."""
    pm = tl.program_id(0)
    g = tl.program_id(1)
    m = pm * BM + tl.arange(0, BM)
    k = g * 128 + tl.arange(0, 128)
    if AXIS == 1:
        ok = (m < n_rows)[:, None] & (k < n_cols)[None, :]
        off = m.to(tl.int64)[:, None] * n_cols + k[None, :]
        kp = n_groups * 128
    else:
        ok = (m < n_cols)[:, None] & (k < n_rows)[None, :]
        off = k.to(tl.int64)[None, :] * n_cols + m[:, None]
        kp = n_groups * 128
    v = tl.load(v_ptr + off, mask=ok, other=0.0)
    if not F32:
        v = v.to(tl.float32)
    b = v.to(tl.int32, bitcast=True)
    e = (b >> 23) & 0xFF
    nan = (e == 0xFF) & ((b & 0x7FFFFF) != 0)
    emax = _max_along(tl.where(nan, 0, e), 1)
    any_ok = _max_along(tl.where(ok, 1, 0), 1)
    any_real = _max_along(tl.where(ok & (~nan), 1, 0), 1)
    p1, p2, sf = _group_scale(emax, any_ok, any_real)
    c = (v * p1[:, None]) * p2[:, None]
    c8 = _e4m3_code(c)
    c8 = tl.where(nan, 0x7F, c8)
    c8 = tl.where(ok, c8, 0).to(tl.uint8)
    m_ok = m < M
    tl.store(code_ptr + m.to(tl.int64)[:, None] * kp + k[None, :], c8, mask=m_ok[:, None])
    tl.store(scale_ptr + g.to(tl.int64) * M + m, sf, mask=m_ok)


@triton.jit
def _carrier_store(vb, m, code_ptr, scale_ptr, rows, cols, r0, c0, n_rows, n_cols,
                   AXIS: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
                   TRANS: tl.constexpr):
    """The carrier of one orientation of a [BR, BC] tile of exact values (fp32 bits vb, NaN as
    0x7FC00000, masked lanes +0): AXIS 1, groups of 128 along the columns, codes at [row, col]
    of [n_rows, Cp]; AXIS 0, groups down the rows, codes at [col, row] of [n_cols, Rp] (the
    transposed operand), scales group-major as carrier_kernel writes them."""
    e = (vb >> 23) & 0xFF
    nan = e == 0xFF
    if AXIS == 1:
        e3 = tl.reshape(tl.where(nan, 0, e), (BR, BC // 128, 128))
        ok3 = tl.reshape(tl.where(m, 1, 0), (BR, BC // 128, 128))
        re3 = tl.reshape(tl.where(m & (~nan), 1, 0), (BR, BC // 128, 128))
        emax = _max_along(e3, 2)
        any_ok = _max_along(ok3, 2)
        any_real = _max_along(re3, 2)
    else:
        e3 = tl.reshape(tl.where(nan, 0, e), (BR // 128, 128, BC))
        ok3 = tl.reshape(tl.where(m, 1, 0), (BR // 128, 128, BC))
        re3 = tl.reshape(tl.where(m & (~nan), 1, 0), (BR // 128, 128, BC))
        emax = _max_along(e3, 1)
        any_ok = _max_along(ok3, 1)
        any_real = _max_along(re3, 1)
    p1, p2, sf = _group_scale(emax, any_ok, any_real)
    if AXIS == 1:
        v3 = tl.reshape(vb.to(tl.float32, bitcast=True), (BR, BC // 128, 128))
        c = (v3 * p1[:, :, None]) * p2[:, :, None]
    else:
        v3 = tl.reshape(vb.to(tl.float32, bitcast=True), (BR // 128, 128, BC))
        c = (v3 * p1[:, None, :]) * p2[:, None, :]
    code = tl.reshape(_e4m3_code(c), (BR, BC))
    code = tl.where(nan, 0x7F, code)
    code = tl.where(m, code, 0).to(tl.uint8)
    if AXIS == 1:
        kp = ((n_cols + 127) // 128) * 128
        tl.store(code_ptr + rows.to(tl.int64)[:, None] * kp + cols[None, :], code,
                 mask=(rows < n_rows)[:, None] & (cols < kp)[None, :])
        g = c0 // 128 + tl.arange(0, BC // 128)
        tl.store(scale_ptr + g.to(tl.int64)[None, :] * n_rows + rows[:, None], sf,
                 mask=(rows < n_rows)[:, None] & (g < (n_cols + 127) // 128)[None, :])
    else:
        kp = ((n_rows + 127) // 128) * 128
        if TRANS:         # transpose the tile in the kernel: stores contiguous along rows
            tl.store(code_ptr + cols.to(tl.int64)[:, None] * kp + rows[None, :],
                     tl.trans(code), mask=(cols < n_cols)[:, None] & (rows < kp)[None, :])
        else:
            tl.store(code_ptr + cols.to(tl.int64)[None, :] * kp + rows[:, None], code,
                     mask=(cols < n_cols)[None, :] & (rows < kp)[:, None])
        g = r0 // 128 + tl.arange(0, BR // 128)
        tl.store(scale_ptr + g.to(tl.int64)[:, None] * n_cols + cols[None, :], sf,
                 mask=(cols < n_cols)[None, :] & (g < (n_rows + 127) // 128)[:, None])


@triton.jit
def qdq_carrier_kernel(
        x_ptr, row_code_ptr, row_scale_ptr, col_code_ptr, col_scale_ptr, n_rows, n_cols,
        SRC: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr, BR: tl.constexpr,
        BC: tl.constexpr, EL_MBITS: tl.constexpr, EL_EMIN: tl.constexpr,
        EL_EMAX: tl.constexpr, EL_MAXCODE: tl.constexpr, EL_SIGNBIT: tl.constexpr,
        FILL: tl.constexpr, EL_MAXSIG: tl.constexpr, EL_EVENTHR: tl.constexpr,
        EL_MAXF32: tl.constexpr, SCALE_RULE: tl.constexpr, SATURATE: tl.constexpr,
        TRANS: tl.constexpr):
    """MXFP4 fake quantization of each [BR, BC] tile (triton_fast._qdq_orient: the exact fp32
    values, blocks of 32 along the rows and / or down the columns) written straight as the FP8
    carrier of each orientation (_carrier_store): one read of x, one byte per element and
    orientation written, no bf16 values."""
    r0, c0, rows, cols, m, offs = _qdq_tile(n_rows, n_cols, BR, BC)
    b, a = _load_tile(x_ptr, r0, c0, n_rows, n_cols, BR, BC, SRC)
    if ROWS:
        v, byte, code = _qdq_orient(a, b, 1, BR, BC, EL_MBITS, EL_EMIN, EL_EMAX, EL_MAXCODE,
                                    EL_SIGNBIT, FILL, EL_MAXSIG, EL_EVENTHR, EL_MAXF32,
                                    SCALE_RULE, SATURATE, False, False, False, 0)
        _carrier_store(v.to(tl.int32, bitcast=True), m, row_code_ptr, row_scale_ptr, rows, cols,
                       r0, c0, n_rows, n_cols, 1, BR, BC, TRANS)
    if COLS:
        v, byte, code = _qdq_orient(a, b, 0, BR, BC, EL_MBITS, EL_EMIN, EL_EMAX, EL_MAXCODE,
                                    EL_SIGNBIT, FILL, EL_MAXSIG, EL_EVENTHR, EL_MAXF32,
                                    SCALE_RULE, SATURATE, False, False, False, 0)
        _carrier_store(v.to(tl.int32, bitcast=True), m, col_code_ptr, col_scale_ptr, rows, cols,
                       r0, c0, n_rows, n_cols, 0, BR, BC, TRANS)


class Carrier:
    """One FP8-carried GEMM operand [M, K]: ``codes`` uint8 [M, Kp], ``scales`` fp32 group-major
    [Kp / 128, M]; ``k`` the true contraction length."""

    __slots__ = ("codes", "scales", "k")

    def __init__(self, codes: torch.Tensor, scales: torch.Tensor, k: int):
        self.codes, self.scales, self.k = codes, scales, k

    @property
    def scales_t(self) -> torch.Tensor:
        """[M, Kp / 128] with strides (1, M): the 1x128 "outer-dim-major" layout."""
        return self.scales.t()

    def group_bytes(self) -> torch.Tensor:
        """The E8M0 group bytes G [M, Kp / 128] (uint8) read back from the fp32 scales."""
        b = self.scales.t().contiguous().view(torch.int32)
        e = (b >> 23) & 0xFF
        return torch.where(b == 0x00400000, 0, e).to(torch.uint8)


def carrier(values: torch.Tensor, axis: int = 1, *, block_rows: int = 32,
            num_warps: int = 4) -> Carrier:
    """The FP8 carrier of a 2-D values tensor (module docstring): ``axis=1`` the operand
    ``values`` itself (groups along its columns), ``axis=0`` the operand ``values.T`` (groups
    along the values' rows)."""
    if values.ndim != 2:
        raise ValueError(f"carrier: a 2-D values tensor is needed, got shape "
                         f"{tuple(values.shape)}")
    if values.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"carrier: values must be float32 or bfloat16, not {values.dtype}")
    if axis not in (0, 1):
        raise ValueError(f"carrier: axis={axis!r}; use 1 (groups along the columns) or 0")
    v = values.contiguous()
    R, C = v.shape
    M, K = (R, C) if axis == 1 else (C, R)
    ng = -(-K // GROUP)
    codes = torch.empty((M, ng * GROUP), dtype=torch.uint8, device=v.device)
    scales = torch.empty((ng, M), dtype=torch.float32, device=v.device)
    if M and ng:
        carrier_kernel[(triton.cdiv(M, block_rows), ng)](
            v, codes, scales, R, C, M, ng, AXIS=axis, BM=block_rows,
            F32=v.dtype == torch.float32, num_warps=num_warps)
    return Carrier(codes, scales, K)


# GPU tiles: "rows" / "cols" (block rows, block cols, warps) of a launch for one orientation
# (rows: BC >= 128, cols: BR >= 128, so that a group of 128 lies in one tile), "dual" for both
# orientations from one read (BR, BC >= 128); "split": both orientations as two one-orientation
# launches (two reads of x, small tiles) instead of one dual launch; "trans": the column
# orientation's tile is transposed in the kernel before its store. Measured on an H100 by
# scripts/gpu_carrier_tiles.py; MXK_CARRIER_TILES (JSON, the same keys) overrides.
TILES = {"rows": (16, 128, 4), "cols": (128, 32, 4), "dual": (128, 128, 16), "split": True,
         "trans": True}
if os.environ.get("MXK_CARRIER_TILES"):
    TILES.update({k: (tuple(v) if isinstance(v, list) else v)
                  for k, v in json.loads(os.environ["MXK_CARRIER_TILES"]).items()})

_QCE_KEYS = ("SRC", "ROWS", "COLS", "BR", "BC", "EL_MBITS", "EL_EMIN", "EL_EMAX", "EL_MAXCODE",
             "EL_SIGNBIT", "FILL", "EL_MAXSIG", "EL_EVENTHR", "EL_MAXF32", "SCALE_RULE",
             "SATURATE")
_QCE: dict = {}


def _qce(src: str, rows: bool, cols: bool, br: int, bc: int, trans: bool = True):
    key = (src, rows, cols, br, bc, trans)
    ce = _QCE.get(key)
    if ce is None:
        # (triton_fast's dual checks want tiles of >= 32 each way; a one-orientation launch
        # here may take fewer rows: only BR / BC differ)
        full = qdq_constexprs("mxfp4", "ocp", src, rows=rows, cols=cols,
                              block_rows=max(br, 32), block_cols=max(bc, 32))
        d = {k: full[k] for k in _QCE_KEYS}
        d["BR"], d["BC"] = br, bc
        d["TRANS"] = bool(trans)
        names = qdq_carrier_kernel.arg_names
        ce = _QCE[key] = (d, tuple(d[n] for n in names[7:]))
    return ce


def qdq_carrier(x: torch.Tensor, *, rows: bool = True, cols: bool = False,
                tiles: dict | None = None):
    """(row carrier, column carrier) of x [R, C] fake-quantized to OCP MXFP4: the row
    orientation (blocks along C) as the operand [R, C], the column orientation (blocks along
    R) as the operand of x^T, [C, R] (None for one not asked for). The same carriers as
    ``carrier(quantize_dequantize(x, "mxfp4", "ocp", ...))`` without the bf16 values in
    between. ``tiles``: :data:`TILES` entries to override (the tile sweep; under the
    interpreter, passing them also makes it follow the GPU's launch policy)."""
    if not (rows or cols):
        raise ValueError("qdq_carrier: ask for rows, cols or both")
    x, bits = _prep(x)
    R, C = x.shape
    t = dict(TILES, **(tiles or {}))
    src = {0: "float32", 1: "bfloat16", 2: "float16"}[_SRC[x.dtype]]
    dev = x.device
    ngc, ngr = -(-C // GROUP), -(-R // GROUP)
    rc = Carrier(torch.empty((R, ngc * GROUP), dtype=torch.uint8, device=dev),
                 torch.empty((ngc, R), dtype=torch.float32, device=dev), C) if rows else None
    cc = Carrier(torch.empty((C, ngr * GROUP), dtype=torch.uint8, device=dev),
                 torch.empty((ngr, C), dtype=torch.float32, device=dev), R) if cols else None
    if not (R and C):
        return rc, cc
    d = rc or cc
    if INTERPRETED and tiles is None:     # one program as large as the tensor allows
        launches = [(rows, cols, 128 if cols else 32, 128, None)]
    elif rows and cols and not t["split"]:
        launches = [(True, True, *t["dual"])]
    else:
        launches = ([(True, False, *t["rows"])] if rows else []) + \
            ([(False, True, *t["cols"])] if cols else [])
    for lr, lc, br, bc, nw in launches:
        args = (bits, (rc or d).codes, (rc or d).scales, (cc or d).codes, (cc or d).scales, R, C)
        launch_cached(qdq_carrier_kernel, triton.cdiv(R, br) * triton.cdiv(C, bc),
                      _qce(src, lr, lc, br, bc, bool(t["trans"])), nw, args, 5)
    return rc, cc


KERNELS = {"carrier": carrier_kernel, "qdq_carrier": qdq_carrier_kernel}


def aot_specs():
    """(id, jitfn, signature, constexprs) for ahead-of-time compilation of every kernel."""
    out = []
    for axis in (0, 1):
        for f32 in (False, True):
            ce = {"AXIS": axis, "BM": 32, "F32": f32}
            sig = {"v_ptr": "*fp32" if f32 else "*bf16", "code_ptr": "*u8",
                   "scale_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32", "M": "i32",
                   "n_groups": "i32", **{k: "constexpr" for k in ce}}
            out.append((f"carrier-axis{axis}-{'f32' if f32 else 'bf16'}", carrier_kernel,
                        sig, ce))
    for rows, cols, br, bc in ((True, True, 128, 128), (True, False, 16, 128),
                               (False, True, 128, 32)):
        ce = _qce("bfloat16", rows, cols, br, bc)[0]
        sig = {"x_ptr": "*i16", "row_code_ptr": "*u8", "row_scale_ptr": "*fp32",
               "col_code_ptr": "*u8", "col_scale_ptr": "*fp32", "n_rows": "i32",
               "n_cols": "i32", **{k: "constexpr" for k in ce}}
        out.append((f"qdq_carrier-{int(rows)}{int(cols)}", qdq_carrier_kernel, sig, ce))
    return out
