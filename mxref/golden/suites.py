"""Suites: which golden files exist, and how each one's expected columns are computed.

One file per (op x format x profile x source dtype x level). Ops:

* ``quantize_mx``: one row = one 32-element block: source bits -> scale byte, codes, packed
  bytes, dequantized fp32 bits.
* ``quantize_mx_tensor``: one row = one 40x40 tensor (ragged along both axes) quantized along
  axis 0 and along axis 1 (layout classes L1, L2).
* ``quantize_nvfp4``: one row = one 64-element tensor (4 blocks of 16), its own global amax:
  source bits -> 4 E4M3 scales, 64 codes, fp32 tensor scale, dequantized fp32 bits.
* ``convert``: element conversion alone at scale 2^0 (rounding, overflow, signed zero).
* ``dequantize``: every code x scale bytes from 0x00 to 0xFF -> fp32 bits.
* ``pack``: codes -> packed bytes (FP4 nibbles, FP6 4-in-3), plus cuBLAS/AMD scale layouts.

The ops built on the core (rotate, quantize_rotated, gemm, quantize_mx_sr, mxfp4_to_fp8,
fp8_to_mxfp4, reblock, decompose, rotated_gemm, macroblock, outlier_fallback,
quantize_4over6) live in :mod:`.suites_ext` and are merged into OPS.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import _kernels as K
from ..formats import FORMATS
from ..layouts import to_amd_shuffle, to_cublas_blocked
from ..profiles import PROFILES
from ..quantize import dequantize, quantize
from . import cases as C
from .store import (FORMAT_VERSION, SUITE_VERSION, dict_column, plain_column, tensor_column,
                    write_golden)

SRC_NP = {"float32": np.uint32, "bfloat16": np.uint16, "float16": np.uint16}
SPEC = "OCP-MX-1.0 + NVFP4"
ROOT = Path(__file__).resolve().parents[1]
# Sources whose bytes decide the goldens (the transitive generator; WebGPU CTS hashes.json idea)
GENERATOR_SOURCES = ("_kernels.py", "formats.py", "profiles.py", "quantize.py", "inputs.py",
                     "layouts.py", "rotate.py", "gemm.py", "rotated_gemm.py", "fp8fp4.py",
                     "decompose.py", "corrections.py",
                     "golden/cases.py", "golden/suites.py", "golden/suites_ext.py",
                     "golden/store.py")


def generator_source_sha256() -> str:
    h = hashlib.sha256()
    for rel in GENERATOR_SOURCES:
        h.update(rel.encode() + b"\0" + (ROOT / rel).read_bytes().replace(b"\r\n", b"\n"))
    return h.hexdigest()


@dataclass(frozen=True)
class FileSpec:
    op: str
    fmt: str
    profile: str
    src_dtype: str
    level: int

    @property
    def relpath(self) -> str:
        return f"L{self.level}/{self.op}/{self.fmt}__{self.profile}__{self.src_dtype}.arrow"


def _applies(fmt, prof) -> bool:
    try:
        prof.check_format(FORMATS[fmt])
        return True
    except Exception:  # a knob/format combination the profile does not define
        return False


def file_specs(level: int, ops=None) -> list[FileSpec]:
    ops = ops or OPS
    specs = []
    for op in ops:
        if op in EXT_OPS:
            specs += EXT_OPS[op][0](level)
            continue
        for fmt in FORMATS:
            for pname, prof in PROFILES.items():
                if op in ("quantize_mx", "quantize_mx_tensor") and not FORMATS[fmt].is_nvfp4 \
                        and _applies(fmt, prof):
                    specs += [FileSpec(op, fmt, pname, s, level) for s in SRC_NP]
                elif op == "quantize_nvfp4" and FORMATS[fmt].is_nvfp4 and _applies(fmt, prof):
                    specs += [FileSpec(op, fmt, pname, s, level) for s in SRC_NP]
            if op == "convert" and not FORMATS[fmt].is_nvfp4:
                for pname in ("ocp", "microxcaling"):
                    specs += [FileSpec(op, fmt, pname, s, level) for s in SRC_NP]
            if op in ("dequantize", "pack") and not FORMATS[fmt].is_nvfp4:
                specs.append(FileSpec(op, fmt, "ocp", "float32", level))
    return specs


def _case_ids(spec: FileSpec, classes, srcs, extra=None) -> np.ndarray:
    """Content-addressed stable ids: hash(op, format, dtype, class, input bytes). The profile is
    left out on purpose: the same input case has the same id in every profile's file, so
    `mxref diff` between two profiles shows exactly which cases they disagree on."""
    ids = np.empty(len(classes), dtype=np.uint64)
    for i, (c, s) in enumerate(zip(classes, srcs)):
        h = hashlib.sha256(f"{spec.op}|{spec.fmt}|{spec.src_dtype}|{c}|".encode())
        h.update(np.ascontiguousarray(s).tobytes())
        if extra is not None:
            h.update(str(extra[i]).encode())
        ids[i] = int.from_bytes(h.digest()[:8], "little")
    return ids


def _src_field(spec: FileSpec, src: np.ndarray, logical):
    return tensor_column("src_bits", src, {
        "dtype": spec.src_dtype, "encoding": "ieee754-bits", "role": "input",
        "logical_shape": list(logical)})


def _common_meta(spec: FileSpec, coverage: dict, extra: dict) -> dict:
    prof = PROFILES[spec.profile]
    fmt = FORMATS[spec.fmt]
    return {
        "format_version": FORMAT_VERSION, "suite": "mx-core", "suite_version": SUITE_VERSION,
        "spec": SPEC, "op": spec.op, "format": spec.fmt, "elem_format": fmt.element.name,
        "scale_format": fmt.scale.name, "block_size": fmt.block_size, "src_dtype": spec.src_dtype,
        "level": str(spec.level), "profile": spec.profile, "profile_params": prof.knobs(),
        "generator": f"mxref-golden/{C.GENERATOR_VERSION}",
        "generator_source_sha256": generator_source_sha256(),
        "oracle": {"kind": "integer-domain numba kernels, differentially tested against the "
                           "fractions.Fraction oracle in tests/oracle.py"},
        "coverage": coverage,
        "rng": {"bitgen": "PCG64 raw 64-bit words", "seed": "sha256 of (element, dtype, class, "
                "block key) per block", "note": "provenance only: every input is stored"},
        **extra,
    }


def _coverage(classes) -> dict:
    out = {}
    for c in classes:
        out[c] = out.get(c, 0) + 1
    return dict(sorted(out.items()))


def _views(src: np.ndarray, dtype: str):
    """Numpy array mxref.quantize accepts for these bit patterns."""
    if dtype == "float32":
        return src.view(np.float32), None
    return src, dtype


# ---- row builders -------------------------------------------------------------------------
def build_quantize_mx(spec: FileSpec, cross_check=True):
    fmt = FORMATS[spec.fmt]
    cs = [c for c in C.block_cases(fmt.element.name, spec.src_dtype, spec.level)]
    if not cs:
        return None
    src = np.stack([c.src for c in cs]).astype(SRC_NP[spec.src_dtype])
    classes = [c.cls for c in cs]
    x, sd = _views(src, spec.src_dtype)
    mx = quantize(x, spec.fmt, spec.profile, source_dtype=sd)
    deq = mx.dequantize().view(np.uint32)
    check = ["scale_only" if s == 0xFF else "bitexact" for s in mx.scales[:, 0]]
    el = fmt.element
    packing = {4: "fp4-nibble-lo-first", 6: "fp6-4in3-lsb-first", 8: "none"}[el.bits]
    cols = [
        plain_column("case_id", _case_ids(spec, classes, src, [c.n_valid for c in cs])),
        dict_column("class", classes),
        plain_column("tags", [list(c.tags) for c in cs]),
        dict_column("check", check),
        plain_column("n_valid", np.array([c.n_valid for c in cs], np.uint8)),
        _src_field(spec, src, [src.shape[1]]),
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
    extra = {"cross_checks": _torchao_cross_check(spec, x, sd, mx, classes) if cross_check else []}
    return cols, classes, extra


def build_quantize_nvfp4(spec: FileSpec, cross_check=True):
    cs = C.nvfp4_cases(spec.src_dtype, spec.level)
    if not cs:
        return None
    src = np.stack([c.src for c in cs]).astype(SRC_NP[spec.src_dtype])
    classes = [c.cls for c in cs]
    x, sd = _views(src, spec.src_dtype)
    scales, codes, ts, deq = [], [], [], []
    for row in x:           # every row is its own tensor with its own global amax
        mx = quantize(row.reshape(4, 16), "nvfp4", spec.profile, source_dtype=sd)
        scales.append(mx.scales.reshape(-1))
        codes.append(mx.codes.reshape(-1))
        ts.append(np.float32(mx.tensor_scale).view(np.uint32))
        deq.append(mx.dequantize().reshape(-1).view(np.uint32))
    cols = [
        plain_column("case_id", _case_ids(spec, classes, src)),
        dict_column("class", classes),
        plain_column("tags", [list(c.tags) for c in cs]),
        dict_column("check", ["bitexact"] * len(cs)),
        _src_field(spec, src, [4, 16]),
        tensor_column("exp_scales", np.stack(scales), {
            "dtype": "e4m3", "encoding": "ocp-code", "role": "expected", "logical_shape": [4]}),
        tensor_column("exp_codes", np.stack(codes), {
            "dtype": "e2m1", "encoding": "ocp-code", "packing": "unpacked", "role": "expected",
            "logical_shape": [4, 16]}),
        plain_column("exp_tensor_scale", np.array(ts, np.uint32), {
            "dtype": "float32", "encoding": "ieee754-bits", "role": "expected"}),
        tensor_column("exp_dequant", np.stack(deq), {
            "dtype": "float32", "encoding": "ieee754-bits", "role": "expected",
            "logical_shape": [4, 16]}),
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
    x, sd = _views(src, spec.src_dtype)
    from ..inputs import as_f32_bits
    bits, _ = as_f32_bits(x, source_dtype=sd)
    out = np.empty(bits.size, np.uint8)
    K.encode_elements(np.ascontiguousarray(bits).reshape(-1), 0, el.kernel_params(),
                      PROFILES[spec.profile].kernel_params(), out)
    codes = out.reshape(bits.shape)
    cols = [
        plain_column("case_id", _case_ids(spec, classes, src)),
        dict_column("class", classes),
        plain_column("tags", [list(c.tags) for c in cs]),
        dict_column("check", ["bitexact"] * len(cs)),
        _src_field(spec, src, [src.shape[1]]),
        tensor_column("exp_codes", codes, {
            "dtype": el.name, "encoding": "ocp-code", "packing": "unpacked", "role": "expected",
            "logical_shape": [src.shape[1]]}),
    ]
    extra = {"cross_checks": _ml_dtypes_cross_check(spec, el, bits, codes, classes)
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
        plain_column("case_id", _case_ids(spec, classes, codes, scales)),
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
    from ..layouts import pack_codes
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
        plain_column("case_id", _case_ids(spec, all_cls, [np.array(v, np.uint8) for v in inputs], kind)),
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
    x, sd = _views(src, spec.src_dtype)
    q0 = quantize(x, spec.fmt, spec.profile, axis=1, source_dtype=sd)     # tensor axis 0
    q1 = quantize(x, spec.fmt, spec.profile, axis=2, source_dtype=sd)     # tensor axis 1
    classes = ["L2"] * len(rows)
    el = fmt.element
    code_meta = {"dtype": el.name, "encoding": "ocp-code", "packing": "unpacked",
                 "role": "expected", "logical_shape": list(TENSOR_SHAPE)}
    cols = [
        plain_column("case_id", _case_ids(spec, classes, src)),
        dict_column("class", classes),
        plain_column("tags", tags),
        dict_column("check", ["bitexact"] * len(rows)),
        _src_field(spec, src, TENSOR_SHAPE),
        tensor_column("exp_scales_axis0", q0.scales, {
            "dtype": fmt.scale.name, "encoding": "ocp-code", "role": "expected", "block_axis": 0}),
        tensor_column("exp_codes_axis0", q0.codes, {**code_meta, "block_axis": 0}),
        tensor_column("exp_scales_axis1", q1.scales, {
            "dtype": fmt.scale.name, "encoding": "ocp-code", "role": "expected", "block_axis": 1}),
        tensor_column("exp_codes_axis1", q1.codes, {**code_meta, "block_axis": 1}),
    ]
    return cols, classes, {"cross_checks": []}


OPS = {"quantize_mx": build_quantize_mx, "quantize_mx_tensor": build_quantize_mx_tensor,
       "quantize_nvfp4": build_quantize_nvfp4, "convert": build_convert,
       "dequantize": build_dequantize, "pack": build_pack}
from .suites_ext import EXT_OPS, _meta as _ext_meta  # noqa: E402  (needs the helpers above)
OPS.update({op: builder for op, (_, builder) in EXT_OPS.items()})


def build_file(spec: FileSpec, out_root: Path | None, cross_check=True):
    """Build one golden file; returns (bytes, rows, coverage) or None if it has no rows."""
    res = OPS[spec.op](spec, cross_check)
    if res is None:
        return None
    cols, classes, extra = res
    cov = _coverage(classes)
    meta = _ext_meta(spec, cov, extra) if spec.op in EXT_OPS else _common_meta(spec, cov, extra)
    data = write_golden(None if out_root is None else out_root / spec.relpath, cols, meta)
    return data, len(classes), cov


# ---- cross-oracle records (data, not test failures) -------------------------------------
def _per_class(classes, agree_mask):
    out = {}
    for c, ok in zip(classes, agree_mask):
        a = out.setdefault(c, [0, 0])
        a[0 if ok else 1] += 1
    return {c: {"agree": v[0], "disagree": v[1]} for c, v in sorted(out.items())}


def _ml_dtypes_cross_check(spec, el, bits, codes, classes):
    if spec.profile != "ocp" or el.kind == "int":
        return []
    try:
        import ml_dtypes
    except ImportError:
        return [{"ref": "ml_dtypes", "status": "not installed"}]
    dt = {"e2m1": ml_dtypes.float4_e2m1fn, "e2m3": ml_dtypes.float6_e2m3fn,
          "e3m2": ml_dtypes.float6_e3m2fn, "e4m3": ml_dtypes.float8_e4m3fn,
          "e5m2": ml_dtypes.float8_e5m2}[el.name]
    v = bits.view(np.float32)
    comparable = np.isfinite(v) & (np.abs(v) <= np.float32(float(el.max_normal)))
    with np.errstate(all="ignore"):
        theirs = v.astype(dt).view(np.uint8)
    row_ok = np.all((theirs == codes) | ~comparable, axis=1)
    return [{"ref": "ml_dtypes", "version": ml_dtypes.__version__,
             "scope": "finite, |v| <= max normal (ml_dtypes FP8 casts do not saturate)",
             "per_class": _per_class(classes, row_ok)}]


def _torchao_cross_check(spec, x, sd, mx, classes):
    modes = {"torchao_floor": "FLOOR", "torchao_rceil": "RCEIL", "torchao_ceil": "CEIL",
             "torchao_even": "EVEN"}
    if spec.profile not in modes:
        return []
    try:
        import torch
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
        from torchao.prototype.mx_formats.mx_tensor import to_mx
        import torchao
    except Exception:
        return [{"ref": "torchao", "status": "not installed"}]
    t = torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16) \
        if sd == "bfloat16" else torch.from_numpy(np.ascontiguousarray(
            x.view(np.float16) if sd == "float16" else x))
    dt = {"mxfp8_e4m3": torch.float8_e4m3fn, "mxfp8_e5m2": torch.float8_e5m2,
          "mxfp4": torch.float4_e2m1fn_x2, "mxfp6_e2m3": "fp6_e2m3",
          "mxfp6_e3m2": "fp6_e3m2"}[spec.fmt]
    try:
        s, d = to_mx(t, dt, 32, getattr(ScaleCalculationMode, modes[spec.profile]))
    except Exception as e:  # record, do not fail: this is evidence, not a test
        return [{"ref": "torchao", "version": torchao.__version__, "status": f"error: {e}"}]
    ts = s.view(torch.uint8).numpy().reshape(-1)
    tc = d.view(torch.uint8).numpy().reshape(len(classes), -1)
    if spec.fmt == "mxfp4":
        from ..layouts import unpack_codes
        tc = unpack_codes(tc, 4, 32)
    live = (mx.scales[:, 0] != 0xFF)[:, None]
    ok = (ts == mx.scales[:, 0]) & np.all((tc == mx.codes) | ~live, axis=1)
    return [{"ref": "torchao", "version": torchao.__version__,
             "scope": "scale bytes; codes of non-NaN blocks", "per_class": _per_class(classes, ok)}]


def manifest_entry(spec: FileSpec, data: bytes, rows: int, cov: dict, content: str) -> dict:
    return {"op": spec.op, "format": spec.fmt, "profile": spec.profile,
            "src_dtype": spec.src_dtype, "level": spec.level, "rows": rows, "bytes": len(data),
            "sha256_bytes": hashlib.sha256(data).hexdigest(), "sha256_content": content,
            "classes": cov}


def dumps_manifest(entries: dict) -> str:
    doc = {"schema": "mxref-golden-manifest/1", "format_version": FORMAT_VERSION,
           "suite": "mx-core", "suite_version": SUITE_VERSION,
           "generator": f"mxref-golden/{C.GENERATOR_VERSION}",
           "generator_source_sha256": generator_source_sha256(),
           "files": dict(sorted(entries.items()))}
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"
