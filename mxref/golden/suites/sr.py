"""Golden files of the ``sr`` family: stochastic rounding (``quantize_mx_sr``,
``quantize_nvfp4_sr``), generated with the named profile's rounding replaced by ``stochastic``
(:func:`sr_profile`). Each row stores the random words it was rounded with.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ...formats import FORMATS
from ...profiles import PROFILES, get_profile, sr_profile  # noqa: F401  (sr_profile: re-exported)
from ...quantize import quantize
from .. import cases as C
from ..columns import (MX_FORMATS, FileSpec, applies, bits_to_f32, f32_bits, head_columns,
                       src_view, to_src)
from ..writer import plain_column, tensor_column

SR_PROFILES = ("ocp", "rceil")


# =============================================================================================
# quantize_mx_sr
# =============================================================================================
def specs_quantize_mx_sr(level):
    return [FileSpec("quantize_mx_sr", f, p, s, level) for f in MX_FORMATS for p in SR_PROFILES
            for s in ("float32", "bfloat16") if applies(f, p)]


def _sr_fraction(value: Fraction, el) -> int:
    """floor(frac(|value| / quantum) * 2^32) on the element grid (docs/semantics.md)."""
    table = el.value_table() if callable(el.value_table) else el.value_table
    mags = sorted({Fraction(float(v)) for v in table if np.isfinite(v) and v >= 0})
    a = abs(value)
    if a >= mags[-1]:
        return 0
    lo = max(m for m in mags if m <= a)
    hi = min(m for m in mags if m > a)
    return int((a - lo) / (hi - lo) * 2 ** 32)


def build_quantize_mx_sr(spec, cross_check=True):
    fmt = FORMATS[spec.fmt]
    el = fmt.element
    prof = sr_profile(spec.profile)
    base = [c for c in C.block_cases(el.name, spec.src_dtype, spec.level)
            if c.cls in ("E1", "E2", "E3", "E5", "R2") and c.n_valid == 32]
    picks = base[:: max(1, len(base) // (40 if spec.level else 4))]
    rows = []
    for j, c in enumerate(picks):
        x, sd = src_view(c.src.astype(np.uint32 if spec.src_dtype == "float32" else np.uint16),
                          spec.src_dtype)
        kind = ("SR1", "SR2", "SR3", "SR4")[j % 4]
        seed, offset = 0, 0
        if kind == "SR1":           # the documented Philox stream
            from ...quantize import random_bits
            seed, offset = 0x5EED0000 + j, 32 * j
            rb = random_bits((32,), seed, offset)
        elif kind == "SR2":
            rb = np.zeros(32, np.uint32)
        elif kind == "SR3":
            rb = np.full(32, 0xFFFFFFFF, np.uint32)
        else:                       # f + r exactly 2^32 (rounds up) and one below (rounds down)
            ref = quantize(x.reshape(1, 32), spec.fmt, spec.profile, source_dtype=sd)
            scale = int(ref.scales[0, 0])
            vals = x.astype(np.float32) if sd is None else bits_to_f32(x, sd)
            rb = np.zeros(32, np.uint32)
            if scale != 0xFF:
                for t in range(32):
                    v = vals[t]
                    if not np.isfinite(v):
                        continue
                    f = _sr_fraction(Fraction(float(v)) / Fraction(2) ** (scale - 127), el)
                    rb[t] = ((1 << 32) - f - (t & 1)) & 0xFFFFFFFF if f else (t * 0x9E3779B9) & 0xFFFFFFFF
        mx = quantize(x.reshape(1, 32), spec.fmt, prof, source_dtype=sd, rbits=rb.reshape(1, 32))
        rows.append((kind, c.src, rb, seed, offset, mx.scales[0, 0], mx.codes[0]))
    classes = [r[0] for r in rows]
    src = np.stack([r[1] for r in rows])
    cols = [
        *head_columns(spec, classes, src,
               tags=[[] for _ in rows],
               extra=[r[2].tobytes().hex() for r in rows],
               check=["scale_only" if r[5] == 0xFF else "bitexact" for r in rows]),
        tensor_column("src_bits", src, {"dtype": spec.src_dtype, "encoding": "ieee754-bits",
                                        "role": "input", "logical_shape": [32]}),
        tensor_column("rbits", np.stack([r[2] for r in rows]), {
            "dtype": "uint32", "role": "input",
            "rule": "round up iff floor(frac(v/quantum) * 2^32) + r >= 2^32"}),
        plain_column("seed", np.array([r[3] for r in rows], np.uint64), {
            "role": "input", "note": "SR1 rows: rbits[i] = tl.randint(seed, offset + i)"}),
        plain_column("offset", np.array([r[4] for r in rows], np.uint32), {"role": "input"}),
        plain_column("exp_scale", np.array([r[5] for r in rows], np.uint8), {
            "dtype": fmt.scale.name, "role": "expected", "encoding": "ocp-code"}),
        tensor_column("exp_codes", np.stack([r[6] for r in rows]), {
            "dtype": el.name, "encoding": "ocp-code", "role": "expected", "packing": "unpacked",
            "logical_shape": [32]}),
    ]
    return cols, classes, {"sr_profile": prof.knobs()}


# =============================================================================================
# quantize_nvfp4_sr
# =============================================================================================
# The profiles of the quantize_nvfp4 files, one per NVFP4 op order (exact, te, torchao).
NVFP4_SR_PROFILES = ("ocp", "te_nvfp4", "torchao_nvfp4")
SR_KINDS = ("SR1", "SR2", "SR3", "SR4")


def specs_quantize_nvfp4_sr(level):
    return [FileSpec("quantize_nvfp4_sr", "nvfp4", p, s, level) for p in NVFP4_SR_PROFILES
            for s in ("float32", "bfloat16")]


def _nv_scale_extremes(src_dtype: str, level: int) -> list:
    """(tags, fp32 bits [64]) of [4, 16] tensors at the ends of the tensor-scale range: all
    subnormal (fp32: amax / 2688 underflows, T = 2^-149 in the exact order, S_enc = FLT_MAX
    under te, T = 0 under torchao; bf16, whose smallest subnormal is 2^-133, cannot get there
    and gets a subnormal T), a subnormal T, amax near FLT_MAX, one block dominating
    (the other blocks' E4M3 scales subnormal or 0), and a T rounded down (the amax block's
    scale ratio just above 448: elements past 6 saturate whatever the word)."""
    out = []
    rng = C._Rng("quantize_nvfp4_sr", "scale_extremes")
    sign = np.where(rng.uniform(64) < 0.5, -1.0, 1.0)
    tiny = 2.0 ** (-140 if src_dtype == "float32" else -129)
    out.append((("tensor_scale_extreme", "all_subnormal"), rng.normal(64) * tiny * sign))
    out.append((("tensor_scale_extreme", "T_subnormal"), rng.normal(64) * 2.0 ** -122))
    if level >= 1:
        v = (rng.uniform(64) * 0.5 + 0.5) * 3.0e38 * sign
        out.append((("tensor_scale_extreme", "amax_near_flt_max"), v))
        v = rng.normal(64) * np.repeat(2.0 ** np.array([20.0, 3.0, -1.0, -40.0]), 16)
        v[48:52] = -0.0
        out.append((("block_scale_extreme", "one_block_dominates"), v))
        # 2688 * 3.5 = 9408 rounds exactly; 9409.0 / 2688 rounds down in fp32
        v = rng.normal(64) * 1000.0
        v[0] = 9409.0
        v[1:16] = 9409.0 * (1 - 2.0 ** -np.arange(1, 16))
        out.append((("block_scale_extreme", "T_rounded_down"), v))
    return [(tags, f32_bits(v)) for tags, v in out]


def _nv_cast_inputs(b32: np.ndarray, spec, ref) -> list:
    """The exact magnitude entering the E2M1 cast of each element (a Fraction), or None
    (non-finite, poisoned block, zero or NaN scale), from the RNE reference's scales and
    tensor scale: |x| / (S T) (exact order), fl(x * min(fl(1 / fl(S T)), FLT_MAX)) (te),
    clamp(fl(x * fl(fl(1 / T) / S)), 6) (torchao); fp32 operations in the integer domain."""
    from ... import _kernels as K
    prof = PROFILES[spec.profile]
    e4 = FORMATS["nvfp4"].scale
    f32p = K.F32_PARAMS
    t = int(np.float32(ref.tensor_scale).view(np.uint32))
    out = []
    for i, b in enumerate(b32.reshape(-1).tolist()):
        sc = int(ref.scales.reshape(-1)[i // 16])
        if (b & 0x7FFFFFFF) >= 0x7F800000 or e4.is_nan_code(sc):
            out.append(None)
            continue
        sval = int(np.float32(float(e4.decode(sc))).view(np.uint32))
        if prof.nvfp4_order == "exact":
            y = b if sc else None
        elif prof.nvfp4_order == "te":
            inv = K.f32_min_pos(K.f32_div(K.F32_ONE, K.f32_mul(sval, t, f32p), f32p),
                                K.F32_MAXBITS)
            y = K.f32_mul(b, inv, f32p)
        else:
            one = K.F32_ONE
            recip = K.f32_div(K.f32_div(one, t, f32p) if prof.nvfp4_tensor_scale else one, sval,
                              f32p)
            y = K.f32_mul(b, recip, f32p)
        if y is None or (y & 0x7FFFFFFF) >= 0x7F800000:
            out.append(None)
            continue
        mag = Fraction(float(np.uint32(y & 0x7FFFFFFF).view(np.float32)))
        if prof.nvfp4_order == "exact":
            mag /= Fraction(float(e4.decode(sc))) * Fraction(float(ref.tensor_scale))
        out.append(min(mag, Fraction(6)) if prof.nvfp4_order == "torchao" else mag)
    return out


def build_quantize_nvfp4_sr(spec, cross_check=True):
    """One row = one [4, 16] tensor (its own global amax, as quantize_nvfp4) with one uint32
    word per element. Every base tensor (the quantize_nvfp4 cases, plus the scale extremes)
    appears once per word class: SR1 the Philox stream of (seed, offset) over the tensor in C
    order, SR2 r = 0, SR3 r = 2^32 - 1, SR4 f + r = 2^32 exactly (even elements: rounds up)
    and one below (odd: rounds down), f from the exact cast input of the op order."""
    from ...quantize import random_bits
    el = FORMATS["nvfp4"].element
    prof = sr_profile(spec.profile)
    np_src = np.uint32 if spec.src_dtype == "float32" else np.uint16
    base = [(c.cls, tuple(c.tags), np.asarray(c.src).astype(np_src))
            for c in C.nvfp4_cases(spec.src_dtype, spec.level)]
    base += [("S5", tags, to_src(b32, spec.src_dtype)) for tags, b32 in
             _nv_scale_extremes(spec.src_dtype, spec.level)]
    rows = []
    for i, (bcls, tags, src) in enumerate(base):
        x, sd = src_view(src, spec.src_dtype)
        x = x.reshape(4, 16)
        ref = quantize(x, "nvfp4", spec.profile, source_dtype=sd)
        for k, kind in enumerate(SR_KINDS):
            j = 4 * i + k
            seed, offset = 0, 0
            if kind == "SR1":       # the documented Philox stream; some keys > 2^32, a wrap
                seed = 0x5EED0000 + j + ((j % 3) << 32)
                offset = (1 << 32) - 17 if i % 5 == 1 else 64 * j
                rb = random_bits((4, 16), seed, offset).reshape(-1)
            elif kind == "SR2":
                rb = np.zeros(64, np.uint32)
            elif kind == "SR3":
                rb = np.full(64, 0xFFFFFFFF, np.uint32)
            else:
                b32 = (src.astype(np.uint32) if sd is None else
                       bits_to_f32(src, sd).view(np.uint32))
                rb = np.zeros(64, np.uint32)
                for e, v in enumerate(_nv_cast_inputs(b32, spec, ref)):
                    f = _sr_fraction(v, el) if v is not None else 0
                    rb[e] = ((1 << 32) - f - (e & 1)) & 0xFFFFFFFF if f else \
                        (e * 0x9E3779B9 + j) & 0xFFFFFFFF
            mx = quantize(x, "nvfp4", prof, source_dtype=sd, rbits=rb.reshape(4, 16))
            rows.append((kind, (bcls,) + tags, src, rb, seed, offset, mx.scales.reshape(-1),
                         mx.codes.reshape(-1), np.float32(mx.tensor_scale).view(np.uint32)))
    classes = [r[0] for r in rows]
    src = np.stack([r[2] for r in rows])
    cols = [
        *head_columns(spec, classes, src, tags=[list(r[1]) for r in rows],
               extra=[r[3].tobytes().hex() for r in rows]),
        tensor_column("src_bits", src, {"dtype": spec.src_dtype, "encoding": "ieee754-bits",
                                        "role": "input", "logical_shape": [4, 16]}),
        tensor_column("rbits", np.stack([r[3] for r in rows]), {
            "dtype": "uint32", "role": "input", "logical_shape": [4, 16],
            "rule": "round up iff floor(frac(v/quantum) * 2^32) + r >= 2^32, v the exact "
                    "E2M1 cast input of the profile's nvfp4_order"}),
        plain_column("seed", np.array([r[4] for r in rows], np.uint64), {
            "role": "input", "note": "SR1 rows: rbits[i] = tl.randint(seed, offset + i), i the "
                                     "C-order index in the [4, 16] tensor"}),
        plain_column("offset", np.array([r[5] for r in rows], np.uint32), {"role": "input"}),
        tensor_column("exp_scales", np.stack([r[6] for r in rows]), {
            "dtype": "e4m3", "encoding": "ocp-code", "role": "expected", "logical_shape": [4]}),
        tensor_column("exp_codes", np.stack([r[7] for r in rows]), {
            "dtype": "e2m1", "encoding": "ocp-code", "packing": "unpacked", "role": "expected",
            "logical_shape": [4, 16]}),
        plain_column("exp_tensor_scale", np.array([r[8] for r in rows], np.uint32), {
            "dtype": "float32", "encoding": "ieee754-bits", "role": "expected"}),
    ]
    return cols, classes, {"sr_profile": prof.knobs()}


# =============================================================================================
#: op -> (specs(level), build(spec, cross_check)); ops and row layouts: mxref.ops.OPS
WRITERS = {
    "quantize_mx_sr": (specs_quantize_mx_sr, build_quantize_mx_sr),
    "quantize_nvfp4_sr": (specs_quantize_nvfp4_sr, build_quantize_nvfp4_sr),
}
