"""Golden files of the ``quantize`` family: the core conversions.

One file per (op x format x profile x source dtype x level):

* ``quantize_mx``: one row = one 32-element block: source bits -> scale byte, codes, packed
  bytes, dequantized fp32 bits.
* ``quantize_mx_tensor``: one row = one 40x40 tensor (ragged along both axes) quantized along
  axis 0 and along axis 1 (layout classes L1, L2).
* ``quantize_nvfp4``: one row = one 64-element tensor (4 blocks of 16), its own global amax:
  source bits -> 4 E4M3 scales, 64 codes, fp32 tensor scale, dequantized fp32 bits.
* ``convert``: element conversion alone at scale 2^0 (rounding, overflow, signed zero).
* ``dequantize``: every code x scale bytes from 0x00 to 0xFF -> fp32 bits.
* ``pack``: codes -> packed bytes (FP4 nibbles, FP6 4-in-3), plus cuBLAS/AMD scale layouts.
"""
from __future__ import annotations

import hashlib

import numpy as np

from ... import _kernels as K
from ...formats import FORMATS
from ...layouts import to_amd_shuffle, to_cublas_blocked
from ...profiles import PROFILES
from ...quantize import dequantize, quantize
from .. import cases as C
from ..columns import MX_FORMATS, SRC_NP, FileSpec, applies, case_ids, src_field, src_view
from ..crosscheck import ml_dtypes_cross_check, torchao_cross_check
from ..writer import dict_column, plain_column, tensor_column


# ---- which files exist ----------------------------------------------------------------------
def _mx_specs(op, level):
    """One file per MX format x profile that defines it x source dtype."""
    return [FileSpec(op, fmt, pname, s, level) for fmt in MX_FORMATS
            for pname, prof in PROFILES.items() for s in SRC_NP if applies(fmt, prof, s)]


def specs_quantize_mx(level):
    return _mx_specs("quantize_mx", level)


def specs_quantize_mx_tensor(level):
    return _mx_specs("quantize_mx_tensor", level)


def specs_quantize_nvfp4(level):
    return [FileSpec("quantize_nvfp4", fmt, pname, s, level) for fmt in FORMATS
            if FORMATS[fmt].is_nvfp4 for pname, prof in PROFILES.items() for s in SRC_NP
            if applies(fmt, prof, s)]


def specs_convert(level):
    """Element conversion alone: the two profiles whose element rounding differs."""
    return [FileSpec("convert", fmt, pname, s, level) for fmt in MX_FORMATS
            for pname in ("ocp", "microxcaling") for s in SRC_NP]


def specs_dequantize(level):
    return [FileSpec("dequantize", fmt, "ocp", "float32", level) for fmt in MX_FORMATS]


def specs_pack(level):
    return [FileSpec("pack", fmt, "ocp", "float32", level) for fmt in MX_FORMATS]


# ---- row builders ---------------------------------------------------------------------------
def build_quantize_mx(spec: FileSpec, cross_check=True):
    fmt = FORMATS[spec.fmt]
    cs = [c for c in C.block_cases(fmt.element.name, spec.src_dtype, spec.level)]
    if not cs:
        return None
    src = np.stack([c.src for c in cs]).astype(SRC_NP[spec.src_dtype])
    classes = [c.cls for c in cs]
    x, sd = src_view(src, spec.src_dtype)
    mx = quantize(x, spec.fmt, spec.profile, source_dtype=sd)
    deq = mx.dequantize().view(np.uint32)
    check = ["scale_only" if s == 0xFF else "bitexact" for s in mx.scales[:, 0]]
    el = fmt.element
    packing = {4: "fp4-nibble-lo-first", 6: "fp6-4in3-lsb-first", 8: "none"}[el.bits]
    cols = [
        plain_column("case_id", case_ids(spec, classes, src, [c.n_valid for c in cs])),
        dict_column("class", classes),
        plain_column("tags", [list(c.tags) for c in cs]),
        dict_column("check", check),
        plain_column("n_valid", np.array([c.n_valid for c in cs], np.uint8)),
        src_field(spec, src, [src.shape[1]]),
        plain_column("exp_scale", mx.scales[:, 0].copy(), {
            "dtype": fmt.scale.name, "encoding": "ocp-code", "role": "expected"}),
        tensor_column("exp_codes", mx.codes, {
            "dtype": el.name, "encoding": "ocp-code", "packing": "unpacked", "role": "expected",
            "logical_shape": [src.shape[1]]}),
        tensor_column("exp_packed", mx.packed(), {
            "dtype": el.name, "encoding": "ocp-code", "packing": packing, "role": "expected",
            "logical_shape": [src.shape[1]]}),
        tensor_column("exp_dequant", deq, {
            "dtype": "float32", "encoding": "ieee754-bits", "role": "expected",
            "logical_shape": [src.shape[1]]}),
    ]
    extra = {"cross_checks": torchao_cross_check(spec, x, sd, mx, classes) if cross_check else []}
    return cols, classes, extra


def _nvfp4_tile_2d_rows(cs, src):
    """nvfp4_tile_2d files: one row = one 32x32 tensor made of 16 consecutive 4x16 cases,
    four per 16x16 tile (tile (i, j) stacks cases 4 (2i + j) .. 4 (2i + j) + 3 vertically);
    the last tensor wraps around to the first cases. Returns (src [N, 32, 32], classes, tags):
    a row's class is its first case's, its tags every member's class and tags."""
    k = len(cs)
    n = -(-k // 16)
    idx = [(r * 16 + j) % k for r in range(n) for j in range(16)]
    blocks = src[idx].reshape(n, 2, 2, 4, 4, 16)            # [row, ti, tj, case, 4, 16]
    out = np.ascontiguousarray(blocks.transpose(0, 1, 3, 4, 2, 5).reshape(n, 32, 32))
    classes = [cs[idx[r * 16]].cls for r in range(n)]
    tags = [sorted({"tile2d"} | {cs[i].cls for i in idx[r * 16:(r + 1) * 16]}
                   | {t for i in idx[r * 16:(r + 1) * 16] for t in cs[i].tags})
            for r in range(n)]
    return out, classes, tags


def build_quantize_nvfp4(spec: FileSpec, cross_check=True):
    cs = C.nvfp4_cases(spec.src_dtype, spec.level)
    if not cs:
        return None
    prof = PROFILES[spec.profile]
    src = np.stack([c.src for c in cs]).astype(SRC_NP[spec.src_dtype])
    classes = [c.cls for c in cs]
    tags = [list(c.tags) for c in cs]
    shape = (4, 16)
    if prof.nvfp4_tile_2d:      # 16x16 tiles need taller tensors: 32x32 (4 tiles)
        src, classes, tags = _nvfp4_tile_2d_rows(cs, src)
        shape = (32, 32)
        src = src.reshape(len(src), -1)
    nb = shape[0] * shape[1] // 16
    x, sd = src_view(src, spec.src_dtype)
    scales, codes, ts, deq = [], [], [], []
    for row in x:           # every row is its own tensor with its own global amax
        mx = quantize(row.reshape(shape), "nvfp4", spec.profile, source_dtype=sd)
        scales.append(mx.scales.reshape(-1))
        codes.append(mx.codes.reshape(-1))
        ts.append(np.asarray(mx.tensor_scale, np.float32).view(np.uint32))
        deq.append(mx.dequantize().reshape(-1).view(np.uint32))
    ts_meta = {"dtype": "float32", "encoding": "ieee754-bits", "role": "expected"}
    if prof.nvfp4_amax_scope == "row":      # one tensor scale per row of the tensor
        ts_col = tensor_column("exp_tensor_scale", np.stack(ts).reshape(len(ts), shape[0]),
                               {**ts_meta, "logical_shape": [shape[0]]})
    else:
        ts_col = plain_column("exp_tensor_scale", np.array(ts, np.uint32), ts_meta)
    cols = [
        plain_column("case_id", case_ids(spec, classes, src)),
        dict_column("class", classes),
        plain_column("tags", tags),
        dict_column("check", ["bitexact"] * len(classes)),
        src_field(spec, src, list(shape)),
        tensor_column("exp_scales", np.stack(scales), {
            "dtype": "e4m3", "encoding": "ocp-code", "role": "expected",
            "logical_shape": [nb] if nb == shape[0] else [shape[0], nb // shape[0]]}),
        tensor_column("exp_codes", np.stack(codes), {
            "dtype": "e2m1", "encoding": "ocp-code", "packing": "unpacked", "role": "expected",
            "logical_shape": list(shape)}),
        ts_col,
        tensor_column("exp_dequant", np.stack(deq), {
            "dtype": "float32", "encoding": "ieee754-bits", "role": "expected",
            "logical_shape": list(shape)}),
    ]
    return cols, classes, {"cross_checks": []}


def build_convert(spec: FileSpec, cross_check=True):
    el = FORMATS[spec.fmt].element
    cs = [c for c in C.block_cases(el.name, spec.src_dtype, spec.level)
          if c.cls.startswith("E") or c.cls == "R1"]
    if not cs:
        return None
    src = np.stack([c.src for c in cs]).astype(SRC_NP[spec.src_dtype])
    classes = [c.cls for c in cs]
    x, sd = src_view(src, spec.src_dtype)
    from ...inputs import as_f32_bits
    bits, _ = as_f32_bits(x, source_dtype=sd)
    out = np.empty(bits.size, np.uint8)
    K.encode_elements(np.ascontiguousarray(bits).reshape(-1), 0, el.kernel_params(),
                      PROFILES[spec.profile].kernel_params(), out)
    codes = out.reshape(bits.shape)
    cols = [
        plain_column("case_id", case_ids(spec, classes, src)),
        dict_column("class", classes),
        plain_column("tags", [list(c.tags) for c in cs]),
        dict_column("check", ["bitexact"] * len(cs)),
        src_field(spec, src, [src.shape[1]]),
        tensor_column("exp_codes", codes, {
            "dtype": el.name, "encoding": "ocp-code", "packing": "unpacked", "role": "expected",
            "logical_shape": [src.shape[1]]}),
    ]
    extra = {"cross_checks": ml_dtypes_cross_check(spec, el, bits, codes, classes)
             if cross_check else [], "scale": "2^0 (element conversion alone)"}
    return cols, classes, extra


DEQ_SCALES = (0x00, 0x01, 0x02, 0x40, 0x76, 0x7F, 0x80, 0x9F, 0xC0, 0xFC, 0xFD, 0xFE, 0xFF)


def build_dequantize(spec: FileSpec, cross_check=True):
    fmt = FORMATS[spec.fmt]
    ncodes = 1 << fmt.element.bits
    all_codes = np.arange(ncodes, dtype=np.uint8)
    reps = -(-ncodes // 32)
    blocks = np.resize(all_codes, reps * 32).reshape(reps, 32)
    scale_list = DEQ_SCALES if spec.level == 0 else tuple(range(256))
    if spec.level == 0:
        blocks = blocks[:1]
    codes = np.concatenate([blocks] * len(scale_list))
    scales = np.repeat(np.array(scale_list, np.uint8), blocks.shape[0])
    out = dequantize(codes=codes, scales=scales[:, None], fmt=spec.fmt).view(np.uint32)
    classes = ["D1"] * len(scales)
    cols = [
        plain_column("case_id", case_ids(spec, classes, codes, scales)),
        dict_column("class", classes),
        plain_column("tags", [["scale_0x%02x" % s] for s in scales]),
        dict_column("check", ["nan_any_payload"] * len(scales)),
        plain_column("scale", scales, {"dtype": "e8m0", "encoding": "ocp-code", "role": "input"}),
        tensor_column("codes", codes, {"dtype": fmt.element.name, "encoding": "ocp-code",
                                       "packing": "unpacked", "role": "input",
                                       "logical_shape": [32]}),
        tensor_column("exp_dequant", out, {"dtype": "float32", "encoding": "ieee754-bits",
                                           "role": "expected", "logical_shape": [32]}),
    ]
    return cols, classes, {"cross_checks": []}


LAYOUT_SHAPES = ((1, 1), (5, 3), (128, 4), (130, 7), (256, 8), (300, 12))


def build_pack(spec: FileSpec, cross_check=True):
    fmt = FORMATS[spec.fmt]
    bits = fmt.element.bits
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(spec.relpath.encode()).digest()[:8], "little"))
    ns = (1, 2, 3, 4, 5, 7, 8, 31, 32, 33, 64) if spec.level >= 1 else (5, 32)
    classes, codes_l, packed_l, shapes = [], [], [], []
    from ...layouts import pack_codes
    for n in ns:
        c = rng.integers(0, 1 << bits, n, dtype=np.uint8)
        classes.append("L3" if bits == 4 else ("L4" if bits == 6 else "L3"))
        codes_l.append(c.tolist())
        packed_l.append(pack_codes(c[None, :], bits)[0].tolist())
        shapes.append([n])
    lay_cls, lay_in, lay_cub, lay_amd, lay_shape = [], [], [], [], []
    for r, c in (LAYOUT_SHAPES if spec.level >= 1 else LAYOUT_SHAPES[:2]):
        s = rng.integers(0, 255, (r, c), dtype=np.uint8)
        lay_cls.append("L5")
        lay_in.append(s.reshape(-1).tolist())
        lay_cub.append(to_cublas_blocked(s).tolist())
        lay_amd.append(to_amd_shuffle(s).reshape(-1).tolist())
        lay_shape.append([r, c])
    import pyarrow as pa
    u8list = pa.list_(pa.uint8())
    n_pack = len(classes)
    all_cls = classes + lay_cls
    kind = ["pack"] * n_pack + ["scale_layout"] * len(lay_cls)
    inputs = codes_l + lay_in
    cols = [
        plain_column("case_id", case_ids(spec, all_cls, [np.array(v, np.uint8) for v in inputs], kind)),
        dict_column("class", all_cls),
        plain_column("tags", [[k] for k in kind]),
        dict_column("check", ["bitexact"] * len(all_cls)),
        dict_column("kind", kind),
        plain_column("shape", shapes + lay_shape, {"role": "input"}, typ=pa.list_(pa.int32())),
        plain_column("input", inputs, {"role": "input", "encoding": "ocp-code"}, typ=u8list),
        plain_column("exp_packed", packed_l + [[]] * len(lay_cls), {
            "role": "expected", "packing": {4: "fp4-nibble-lo-first", 6: "fp6-4in3-lsb-first",
                                            8: "none"}[bits]}, typ=u8list),
        plain_column("exp_cublas", [[]] * n_pack + lay_cub, {"role": "expected",
                     "layout": "cublas-128x4"}, typ=u8list),
        plain_column("exp_amd", [[]] * n_pack + lay_amd, {"role": "expected",
                     "layout": "aiter-e8m0-shuffle"}, typ=u8list),
    ]
    return cols, all_cls, {"cross_checks": []}


TENSOR_SHAPE = (40, 40)          # ragged along both axes (40 = 32 + 8)
TENSORS_PER_LEVEL = {0: 1, 1: 2, 2: 10, 3: 10}


def build_quantize_mx_tensor(spec: FileSpec, cross_check=True):
    """Layout classes L1 (ragged) and L2 (either block axis): 40x40 tensors made of 50
    consecutive coverage-class blocks, quantized along axis 0 and along axis 1."""
    fmt = FORMATS[spec.fmt]
    cs = C.block_cases(fmt.element.name, spec.src_dtype, max(spec.level, 1))
    cs = [c for c in cs if c.n_valid == c.src.size]
    if not cs:
        return None
    per = TENSOR_SHAPE[0] * TENSOR_SHAPE[1] // 32
    rows, tags = [], []
    for t in range(TENSORS_PER_LEVEL[spec.level]):
        pick = [cs[(t * per + j * 7) % len(cs)] for j in range(per)]   # stride mixes classes
        rows.append(np.concatenate([c.src for c in pick]).reshape(TENSOR_SHAPE))
        tags.append(sorted({c.cls for c in pick}))
    src = np.stack(rows).astype(SRC_NP[spec.src_dtype])
    x, sd = src_view(src, spec.src_dtype)
    q0 = quantize(x, spec.fmt, spec.profile, axis=1, source_dtype=sd)     # tensor axis 0
    q1 = quantize(x, spec.fmt, spec.profile, axis=2, source_dtype=sd)     # tensor axis 1
    classes = ["L2"] * len(rows)
    el = fmt.element
    code_meta = {"dtype": el.name, "encoding": "ocp-code", "packing": "unpacked",
                 "role": "expected", "logical_shape": list(TENSOR_SHAPE)}
    cols = [
        plain_column("case_id", case_ids(spec, classes, src)),
        dict_column("class", classes),
        plain_column("tags", tags),
        dict_column("check", ["bitexact"] * len(rows)),
        src_field(spec, src, TENSOR_SHAPE),
        tensor_column("exp_scales_axis0", q0.scales, {
            "dtype": fmt.scale.name, "encoding": "ocp-code", "role": "expected", "block_axis": 0}),
        tensor_column("exp_codes_axis0", q0.codes, {**code_meta, "block_axis": 0}),
        tensor_column("exp_scales_axis1", q1.scales, {
            "dtype": fmt.scale.name, "encoding": "ocp-code", "role": "expected", "block_axis": 1}),
        tensor_column("exp_codes_axis1", q1.codes, {**code_meta, "block_axis": 1}),
    ]
    return cols, classes, {"cross_checks": []}


# =============================================================================================
#: op -> (specs(level), build(spec, cross_check)); ops and row layouts: mxref.ops.OPS
WRITERS = {
    "quantize_mx": (specs_quantize_mx, build_quantize_mx),
    "quantize_mx_tensor": (specs_quantize_mx_tensor, build_quantize_mx_tensor),
    "quantize_nvfp4": (specs_quantize_nvfp4, build_quantize_nvfp4),
    "convert": (specs_convert, build_convert),
    "dequantize": (specs_dequantize, build_dequantize),
    "pack": (specs_pack, build_pack),
}
