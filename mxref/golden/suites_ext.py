"""Golden files for the operations built on the core: rotations, rotated quantization, MX
GEMMs, stochastic rounding, FP8 <-> MXFP4 conversion, re-blocking and error decomposition.

Each op has a ``specs(level)`` function (which files exist) and a row builder (same contract
as the builders in :mod:`.suites`: ``(columns, classes, extra)``). File coordinates reuse
``{op}/{format}__{profile}__{src_dtype}``:

* ``rotate``: format ``hadamard``, profile ``ocp`` (rotations have no profile);
* ``gemm``: format ``{fmt_a}+{fmt_b}``, profile ``ocp`` (a GEMM of quantized operands has no
  profile: scales and codes decode one way), src_dtype ``float32`` (the result);
* ``mxfp4_to_fp8``: format ``mxfp4``, profile ``ocp``; ``fp8_to_mxfp4``: src_dtype ``e4m3``;
* ``quantize_mx_sr``: the named profile with its rounding replaced by ``stochastic``.

Inputs are built from exact constructions and from raw PCG64 words (``cases._Rng``), never from
libm, so every byte is the same on every machine.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pyarrow as pa

from ..formats import FORMATS
from ..profiles import PROFILES, get_profile
from ..quantize import MXTensor, quantize
from . import cases as C
from .store import dict_column, plain_column, tensor_column

MX_FORMATS = tuple(f for f in FORMATS if not FORMATS[f].is_nvfp4)
HAD_SIZES = (16, 32, 64, 128, 256)
ROW = 256                       # rotation / rotated-quantization row length (every H_n divides it)
SIGN_KINDS = ("none", "random", "te16")
SR_PROFILES = ("ocp", "rceil")
CONVERT_PROFILES = ("ocp", "rceil")


def _spec(op, fmt, profile, src, level):
    from .suites import FileSpec
    return FileSpec(op, fmt, profile, src, level)


def _applies(fmt, pname):
    from .suites import _applies as a
    return a(fmt, PROFILES[pname])


def _ids(spec, classes, inputs, extra=None):
    from .suites import _case_ids
    return _case_ids(spec, classes, inputs, extra)


def _head(spec, classes, inputs, *, tags, extra=None, check=None) -> list:
    """The columns every golden file starts with: case_id, class, tags, check."""
    return [plain_column("case_id", _ids(spec, classes, inputs, extra)),
            dict_column("class", classes),
            plain_column("tags", tags),
            dict_column("check", check if check is not None else ["bitexact"] * len(classes))]


def _f32(x) -> np.ndarray:
    """float64 -> float32 bits, one correctly rounded conversion (numpy's astype is RNE)."""
    return np.asarray(x, np.float64).astype(np.float32).view(np.uint32)


def _to_src(bits32: np.ndarray, src_dtype: str) -> np.ndarray:
    """fp32 bits -> source bits (RNE narrowing by ml_dtypes / numpy; NaN stays NaN)."""
    if src_dtype == "float32":
        return bits32.astype(np.uint32)
    if src_dtype == "bfloat16":
        import ml_dtypes
        return bits32.view(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    with np.errstate(over="ignore"):
        return bits32.view(np.float32).astype(np.float16).view(np.uint16)


def _src_view(src: np.ndarray, src_dtype: str):
    return (src.view(np.float32), None) if src_dtype == "float32" else (src, src_dtype)


def _meta(spec, coverage, extra) -> dict:
    from .suites import SPEC, generator_source_sha256
    from .store import FORMAT_VERSION, SUITE_VERSION
    prof = PROFILES.get(spec.profile)
    return {
        "format_version": FORMAT_VERSION, "suite": "mx-core", "suite_version": SUITE_VERSION,
        "spec": SPEC, "op": spec.op, "format": spec.fmt, "src_dtype": spec.src_dtype,
        "level": str(spec.level), "profile": spec.profile,
        "profile_params": prof.knobs() if prof is not None else {},
        "generator": f"mxref-golden/{C.GENERATOR_VERSION}",
        "generator_source_sha256": generator_source_sha256(),
        "coverage": coverage, **extra,
    }


# =============================================================================================
# rotate
# =============================================================================================
def _rot_rows(level: int, key: str, classes=("H1", "H2", "H3", "H4", "H5", "H6")):
    """(class, fp32 bits [ROW], n, sign kind, seed, step, tensor_id) rows for rotation files."""
    rows = []
    combos = [(n, k) for n in HAD_SIZES for k in ("none", "random")] + [(16, "te16")]
    if level == 0:
        combos = [(32, "random")]
    for cls in classes:
        rng = C._Rng("rotate", key, cls)
        for i, (n, kind) in enumerate(combos):
            if cls == "H1":        # basis vectors (times 2^e): columns of H, exact +-2^e/sqrt(n)
                v = np.zeros(ROW)
                for b in range(ROW // n):
                    v[b * n + (i + 3 * b) % n] = 2.0 ** ((i % 7) - 3)
            elif cls == "H2":      # LLM-like Gaussian rows
                v = rng.normal(ROW) * 2.0 ** rng.int(-8, 8)
            elif cls == "H3":      # specials: NaN, +-Inf, -0 in some blocks, finite elsewhere
                v = rng.normal(ROW)
                v[rng.int(0, ROW)] = np.nan
                v[rng.int(0, ROW)] = np.inf
                v[rng.int(0, ROW)] = -np.inf
                v[rng.ints(0, ROW, 8)] = -0.0
            elif cls == "H4":      # near fp32 max: butterfly sums overflow to Inf
                v = (rng.uniform(ROW) * 0.5 + 0.5) * 3.0e38 * np.where(rng.uniform(ROW) < 0.5, -1, 1)
            elif cls == "H5":      # subnormal inputs and results (no flush anywhere)
                v = rng.normal(ROW) * 2.0 ** -140
            else:                  # H6 heavy tails: one outlier per block dominates
                v = rng.student_t3(ROW)
            rows.append((cls, _f32(v), n, kind, 0 if kind != "random" else 1234 + i, i, 7 * i))
    return rows


def _signs(kind, n, seed, step, tid) -> np.ndarray:
    from ..rotate import sign_vector
    out = np.zeros(ROW, np.int8)
    out[:n] = sign_vector(kind, n, seed=seed, step=step, tensor_id=tid)
    return out


def specs_rotate(level):
    return [_spec("rotate", "hadamard", "ocp", s, level) for s in ("float32", "bfloat16")]


def build_rotate(spec, cross_check=True):
    from ..rotate import rotate
    rows = _rot_rows(spec.level, spec.src_dtype)
    classes, srcs, signs, bf, ex, bf16 = [], [], [], [], [], []
    for cls, b32, n, kind, seed, step, tid in rows:
        src = _to_src(b32, spec.src_dtype)
        x, sd = _src_view(src, spec.src_dtype)
        sv = _signs(kind, n, seed, step, tid)
        kw = dict(signs=sv[:n], source_dtype=sd)
        classes.append(cls)
        srcs.append(src)
        signs.append(sv)
        bf.append(rotate(x, n, method="butterfly", **kw).view(np.uint32))
        ex.append(rotate(x, n, method="exact", **kw).view(np.uint32))
        bf16.append(rotate(x, n, method="butterfly", round_to="bfloat16", **kw).view(np.uint32))
    src = np.stack(srcs)
    f32 = {"dtype": "float32", "encoding": "ieee754-bits", "role": "expected",
           "logical_shape": [ROW]}
    cols = [
        *_head(spec, classes, src,
               tags=[[r[3], f"n{r[2]}"] for r in rows],
               extra=[f"{r[2]}|{r[3]}|{r[4]}|{r[5]}|{r[6]}" for r in rows]),
        plain_column("n", np.array([r[2] for r in rows], np.uint16), {"role": "input"}),
        dict_column("sign_kind", [r[3] for r in rows], {"role": "input"}),
        plain_column("seed", np.array([r[4] for r in rows], np.uint64), {"role": "input"}),
        plain_column("step", np.array([r[5] for r in rows], np.uint32), {"role": "input"}),
        plain_column("tensor_id", np.array([r[6] for r in rows], np.uint32), {"role": "input"}),
        tensor_column("src_bits", src, {"dtype": spec.src_dtype, "encoding": "ieee754-bits",
                                        "role": "input", "logical_shape": [ROW]}),
        tensor_column("signs", np.stack(signs), {"dtype": "int8", "role": "input",
                                                 "note": "first n entries; the rest are 0",
                                                 "logical_shape": [ROW]}),
        tensor_column("exp_butterfly", np.stack(bf), f32),
        tensor_column("exp_exact", np.stack(ex), f32),
        tensor_column("exp_butterfly_bf16", np.stack(bf16), {**f32, "dtype": "bfloat16-in-float32"}),
    ]
    return cols, classes, {"contract": "docs/rotations.md"}


# =============================================================================================
# quantize_rotated
# =============================================================================================
def specs_quantize_rotated(level):
    out = []
    for fmt in FORMATS:
        for pname in PROFILES:
            if _applies(fmt, pname):
                out += [_spec("quantize_rotated", fmt, pname, s, level)
                        for s in ("float32", "bfloat16")]
    return out


def build_quantize_rotated(spec, cross_check=True):
    from ..rotate import quantize_rotated, rotate
    fmt = FORMATS[spec.fmt]
    rows = [r for r in _rot_rows(spec.level, "q" + spec.src_dtype, ("H2", "H3", "H5", "H6"))
            if spec.level == 0 or r[2] in (16, 32, 128)]
    # every fourth row also rounds the rotated values to bf16 (TE's intermediate dtype)
    classes, srcs, signs, rots, scales, codes, tscales, round_to = [], [], [], [], [], [], [], []
    for i, (cls, b32, n, kind, seed, step, tid) in enumerate(rows):
        rt = "bfloat16" if i % 4 == 3 else "float32"
        src = _to_src(b32, spec.src_dtype)
        x, sd = _src_view(src, spec.src_dtype)
        sv = _signs(kind, n, seed, step, tid)
        mx = quantize_rotated(x.reshape(1, ROW), spec.fmt, spec.profile, n, signs=sv[:n],
                              round_to=rt, source_dtype=sd)
        rot = rotate(x, n, signs=sv[:n], round_to=rt, source_dtype=sd)
        classes.append(cls)
        srcs.append(src)
        signs.append(sv)
        round_to.append(rt)
        rots.append(rot.view(np.uint32))
        scales.append(mx.scales.reshape(-1))
        codes.append(mx.codes.reshape(-1))
        tscales.append(np.float32(mx.tensor_scale if mx.tensor_scale is not None else 1.0)
                       .view(np.uint32))
    src = np.stack(srcs)
    code_meta = {"dtype": fmt.element.name, "encoding": "ocp-code", "packing": "unpacked",
                 "role": "expected", "logical_shape": [ROW]}
    cols = [
        *_head(spec, classes, src,
               tags=[[r[3], f"n{r[2]}", rt] for r, rt in zip(rows, round_to)],
               extra=[f"{r[2]}|{r[3]}|{r[4]}|{rt}" for r, rt in zip(rows, round_to)]),
        plain_column("n", np.array([r[2] for r in rows], np.uint16), {"role": "input"}),
        dict_column("sign_kind", [r[3] for r in rows], {"role": "input"}),
        dict_column("round_to", round_to, {"role": "input"}),
        tensor_column("src_bits", src, {"dtype": spec.src_dtype, "encoding": "ieee754-bits",
                                        "role": "input", "logical_shape": [ROW]}),
        tensor_column("signs", np.stack(signs), {"dtype": "int8", "role": "input",
                                                 "logical_shape": [ROW]}),
        tensor_column("exp_rotated", np.stack(rots), {"dtype": "float32", "role": "expected",
                                                      "encoding": "ieee754-bits",
                                                      "logical_shape": [ROW]}),
        tensor_column("exp_scales", np.stack(scales), {"dtype": fmt.scale.name, "role": "expected",
                                                       "encoding": "ocp-code"}),
        tensor_column("exp_codes", np.stack(codes), code_meta),
        plain_column("exp_tensor_scale", np.array(tscales, np.uint32), {
            "dtype": "float32", "role": "expected", "note": "NVFP4 only; 1.0 for MX"}),
    ]
    return cols, classes, {"contract": "docs/rotations.md (butterfly) + docs/semantics.md"}


# =============================================================================================
# gemm
# =============================================================================================
GEMM_CLASSES = ("G1", "G2", "G3", "G4", "G5", "G6", "G7", "G8", "G9")


def specs_gemm(level):
    pairs = [(a, b) for a in MX_FORMATS for b in MX_FORMATS] + [("nvfp4", "nvfp4")]
    if level == 0:
        pairs = [("mxfp4", "mxfp4"), ("mxfp8_e4m3", "mxfp4"), ("nvfp4", "nvfp4")]
    return [_spec("gemm", f"{a}+{b}", "ocp", "float32", level) for a, b in pairs]


def _q(x, fmt):
    """Quantize an [R, K] float32 matrix along K with the canonical profile (exact inputs)."""
    prof = "ocp"
    return quantize(np.asarray(x, np.float32), fmt, prof, axis=1)


def _gemm_problem(cls, fa, fb, rng, i):
    """(A MXTensor, B MXTensor) for one case of class cls."""
    bs = FORMATS[fa].block_size
    if cls == "G9":                          # empty dimensions
        m, n, k = [(0, 3, 64), (3, 0, 64), (2, 3, 0)][i % 3]
        return _q(np.zeros((m, k)), fa), _q(np.zeros((n, k)), fb)
    if cls == "G8":                          # ragged K
        k = (1, bs - 1, bs + 1, 3 * bs - 1)[i % 4]
    else:
        k = bs * (1 + i % 4)
    m, n = 1 + rng.int(0, 4), 1 + rng.int(0, 4)
    nb = -(-k // bs)
    a = rng.normal(m * k).reshape(m, k)
    b = rng.normal(n * k).reshape(n, k)
    # per-block magnitudes in a window around 1 (quantization then picks the scale bytes)
    a *= 2.0 ** np.repeat(np.array(rng.ints(-6, 7, m * nb)).reshape(m, nb), bs, 1)[:, :k]
    b *= 2.0 ** np.repeat(np.array(rng.ints(-6, 7, n * nb)).reshape(n, nb), bs, 1)[:, :k]
    if cls == "G2" and nb >= 1:              # cancellation: block 0 and 1 cancel, block 2 tiny
        k = 3 * bs
        a = rng.normal(m * k).reshape(m, k)
        b = rng.normal(n * k).reshape(n, k)
        a[:, bs:2 * bs] = a[:, :bs]
        b[:, bs:2 * bs] = -b[:, :bs]
        a[:, :2 * bs] *= 2.0 ** 40
        b[:, 2 * bs:] *= 2.0 ** -30
    elif cls == "G3":                        # extreme scales side by side: 0x00..0xFE
        a[:, :bs] *= 2.0 ** (124 - FORMATS[fa].element.emax)
        if k > bs:
            a[:, bs:2 * bs] *= 2.0 ** -140
        b[:, :bs] *= 2.0 ** -130
    elif cls == "G4":                        # final-rounding ties: 2^24 + 1 and 2^24 + 3 (x 2^j)
        k = max(k, 2 * bs)
        a = np.zeros((m, k))
        b = np.zeros((n, k))
        a[:, 0] = 4.0
        b[:, 0] = 2.0 ** 22
        if k > bs:
            a[:, bs] = 1.0
            b[:, bs] = np.array([1.0, 3.0, 1.5, 0.5][:n] + [1.0] * max(0, n - 4))
        else:
            a[:, 1] = 1.0
            b[:, 1] = 1.0
        a *= 2.0 ** (i - 2)
    elif cls == "G5":                        # subnormal fp32 results
        a *= 2.0 ** -70
        b *= 2.0 ** -70
    elif cls == "G6":                        # products overflow fp32 (and cancel in exact mode)
        a *= 2.0 ** 100
        b *= 2.0 ** 100
        if k >= 2 * bs:
            a[:, bs:2 * bs] = a[:, :bs]
            b[:, bs:2 * bs] = -b[:, :bs]
    qa, qb = _q(np.nan_to_num(a, nan=0.0), fa), _q(b, fb)
    if cls == "G7":                          # NaN scale bytes and NaN / Inf element codes
        bad = FORMATS[fa].scale.nan_code if FORMATS[fa].is_nvfp4 else 0xFF
        qa.scales[0, 0] = bad
        el = FORMATS[fb].element
        if el.nan_code is not None and qb.codes.shape[0] > 1:
            qb.codes[1, 0] = el.nan_code
        if el.inf_code is not None and qb.codes.shape[0] > 2:
            qb.codes[2, 0] = el.inf_code
    return qa, qb


def _gemm_row_meta(mx: MXTensor) -> np.uint32:
    return np.float32(1.0 if mx.tensor_scale is None else mx.tensor_scale).view(np.uint32)


def build_gemm(spec, cross_check=True):
    from ..gemm import gemm, gemm_error_bound
    fa, fb = spec.fmt.split("+")
    per = 1 if spec.level == 0 else 4
    classes, data = [], []
    for cls in GEMM_CLASSES:
        rng = C._Rng("gemm", spec.fmt, cls)
        for i in range(per if cls != "G9" else min(per, 3)):
            qa, qb = _gemm_problem(cls, fa, fb, rng, i)
            exact = gemm(qa, qb, mode="exact").view(np.uint32)
            seq = gemm(qa, qb, mode="block_sequential").view(np.uint32)
            bound = np.asarray(gemm_error_bound(qa, qb), np.float64).view(np.uint64)
            classes.append(cls)
            data.append((qa, qb, exact, seq, bound))
    u8, u32, u64 = pa.list_(pa.uint8()), pa.list_(pa.uint32()), pa.list_(pa.uint64())
    flat = lambda a: np.ascontiguousarray(a).reshape(-1).tolist()  # noqa: E731
    shapes = [(d[0].codes.shape[0], d[1].codes.shape[0], d[0].codes.shape[1]) for d in data]
    inputs = [np.concatenate([d[0].codes.reshape(-1), d[0].scales.reshape(-1),
                              d[1].codes.reshape(-1), d[1].scales.reshape(-1)]) for d in data]
    cols = [
        *_head(spec, classes, inputs,
               tags=[[f"{m}x{n}x{k}"] for m, n, k in shapes],
               extra=[str(s) for s in shapes]),
        plain_column("m", np.array([s[0] for s in shapes], np.uint32), {"role": "input"}),
        plain_column("n", np.array([s[1] for s in shapes], np.uint32), {"role": "input"}),
        plain_column("k", np.array([s[2] for s in shapes], np.uint32), {"role": "input"}),
        plain_column("a_codes", [flat(d[0].codes) for d in data], {"role": "input",
                     "dtype": FORMATS[fa].element.name, "layout": "[m, k] row-major"}, typ=u8),
        plain_column("a_scales", [flat(d[0].scales) for d in data], {"role": "input",
                     "dtype": FORMATS[fa].scale.name, "layout": "[m, ceil(k/block)]"}, typ=u8),
        plain_column("b_codes", [flat(d[1].codes) for d in data], {"role": "input",
                     "dtype": FORMATS[fb].element.name, "layout": "[n, k] row-major"}, typ=u8),
        plain_column("b_scales", [flat(d[1].scales) for d in data], {"role": "input",
                     "dtype": FORMATS[fb].scale.name, "layout": "[n, ceil(k/block)]"}, typ=u8),
        plain_column("a_tensor_scale", np.array([_gemm_row_meta(d[0]) for d in data], np.uint32),
                     {"role": "input", "dtype": "float32", "note": "NVFP4 only; 1.0 for MX"}),
        plain_column("b_tensor_scale", np.array([_gemm_row_meta(d[1]) for d in data], np.uint32),
                     {"role": "input", "dtype": "float32", "note": "NVFP4 only; 1.0 for MX"}),
        plain_column("exp_exact", [flat(d[2]) for d in data], {"role": "expected",
                     "dtype": "float32", "contract": "exact"}, typ=u32),
        plain_column("exp_block_sequential", [flat(d[3]) for d in data], {"role": "expected",
                     "dtype": "float32", "contract": "block_sequential"}, typ=u32),
        plain_column("exp_bound", [flat(d[4]) for d in data], {"role": "expected",
                     "dtype": "float64", "contract": "bound: |y - exp_exact| <= exp_bound"},
                     typ=u64),
    ]
    return cols, classes, {"contract": "docs/gemm.md"}


# =============================================================================================
# quantize_mx_sr
# =============================================================================================
def specs_quantize_mx_sr(level):
    return [_spec("quantize_mx_sr", f, p, s, level) for f in MX_FORMATS for p in SR_PROFILES
            for s in ("float32", "bfloat16") if _applies(f, p)]


def sr_profile(name: str):
    """The profile a quantize_mx_sr file is generated with: `name` with stochastic rounding."""
    return get_profile(name).replace(name=f"{name}+sr", rounding="stochastic")


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
        x, sd = _src_view(c.src.astype(np.uint32 if spec.src_dtype == "float32" else np.uint16),
                          spec.src_dtype)
        kind = ("SR1", "SR2", "SR3", "SR4")[j % 4]
        seed, offset = 0, 0
        if kind == "SR1":           # the documented Philox stream
            from ..quantize import random_bits
            seed, offset = 0x5EED0000 + j, 32 * j
            rb = random_bits((32,), seed, offset)
        elif kind == "SR2":
            rb = np.zeros(32, np.uint32)
        elif kind == "SR3":
            rb = np.full(32, 0xFFFFFFFF, np.uint32)
        else:                       # f + r exactly 2^32 (rounds up) and one below (rounds down)
            ref = quantize(x.reshape(1, 32), spec.fmt, spec.profile, source_dtype=sd)
            scale = int(ref.scales[0, 0])
            vals = x.astype(np.float32) if sd is None else _bits_to_f32(x, sd)
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
        *_head(spec, classes, src,
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


def _bits_to_f32(bits16: np.ndarray, sd: str) -> np.ndarray:
    from ..inputs import as_f32_bits
    return as_f32_bits(bits16, source_dtype=sd)[0].view(np.float32)


# =============================================================================================
# quantize_nvfp4_sr
# =============================================================================================
# The profiles of the quantize_nvfp4 files, one per NVFP4 op order (exact, te, torchao).
NVFP4_SR_PROFILES = ("ocp", "te_nvfp4", "torchao_nvfp4")
SR_KINDS = ("SR1", "SR2", "SR3", "SR4")


def specs_quantize_nvfp4_sr(level):
    return [_spec("quantize_nvfp4_sr", "nvfp4", p, s, level) for p in NVFP4_SR_PROFILES
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
    return [(tags, _f32(v)) for tags, v in out]


def _nv_cast_inputs(b32: np.ndarray, spec, ref) -> list:
    """The exact magnitude entering the E2M1 cast of each element (a Fraction), or None
    (non-finite, poisoned block, zero or NaN scale), from the RNE reference's scales and
    tensor scale: |x| / (S T) (exact order), fl(x * min(fl(1 / fl(S T)), FLT_MAX)) (te),
    clamp(fl(x * fl(fl(1 / T) / S)), 6) (torchao); fp32 operations in the integer domain."""
    from .. import _kernels as K
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
    from ..quantize import random_bits
    el = FORMATS["nvfp4"].element
    prof = sr_profile(spec.profile)
    np_src = np.uint32 if spec.src_dtype == "float32" else np.uint16
    base = [(c.cls, tuple(c.tags), np.asarray(c.src).astype(np_src))
            for c in C.nvfp4_cases(spec.src_dtype, spec.level)]
    base += [("S5", tags, _to_src(b32, spec.src_dtype)) for tags, b32 in
             _nv_scale_extremes(spec.src_dtype, spec.level)]
    rows = []
    for i, (bcls, tags, src) in enumerate(base):
        x, sd = _src_view(src, spec.src_dtype)
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
                       _bits_to_f32(src, sd).view(np.uint32))
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
        *_head(spec, classes, src, tags=[list(r[1]) for r in rows],
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
# FP8 <-> MXFP4 and re-blocking
# =============================================================================================
FP8_GROUPS = (32, 128, 0)       # 0 = the whole row ("row")


def specs_mxfp4_to_fp8(level):
    return [_spec("mxfp4_to_fp8", "mxfp4", "ocp", "float32", level)]


def specs_fp8_to_mxfp4(level):
    return [_spec("fp8_to_mxfp4", "mxfp4", p, "e4m3", level) for p in CONVERT_PROFILES]


def specs_reblock(level):
    return [_spec("reblock", f, p, "float32", level) for f in MX_FORMATS for p in CONVERT_PROFILES
            if _applies(f, p)]


def _mxfp4_row(cls, rng, i):
    """One MXFP4 row of ROW elements: (codes [ROW], scales [ROW/32])."""
    nb = ROW // 32
    codes = np.array(rng.ints(0, 16, ROW), np.uint8)
    base = 127 + rng.int(-10, 10)
    if cls == "C1":                                     # one scale for every block
        scales = np.full(nb, base)
    elif cls == "C2":                                   # spread 1..6: exact in E4M3
        scales = base - np.array(rng.ints(0, 1 + (i % 6) + 1, nb))
    elif cls == "C3":                                   # wide spread: E4M3 subnormals / flush
        scales = base - np.array(rng.ints(0, 12 + 4 * (i % 4), nb))
    elif cls == "C4":                                   # a NaN block
        scales = np.full(nb, base)
        scales[i % nb] = 0xFF
    elif cls == "C5":                                   # all-zero blocks and -0 codes
        scales = np.full(nb, base)
        codes[: 64] = 0
        codes[64: 96] = 8
    else:                                               # C6: scale extremes 0x00 / 0xFE
        scales = np.array([0x00, 0x01, 0xFE, 0xFD, 0x7F, 0x00, 0xFE, 0x80][: nb])
        if i % 2:
            scales = np.array([0xFE] * (nb // 2) + [0xF0] * (nb - nb // 2))
    return codes, np.clip(scales, 0, 255).astype(np.uint8)


def build_mxfp4_to_fp8(spec, cross_check=True):
    from ..fp8fp4 import mxfp4_to_fp8
    per = 1 if spec.level == 0 else 6
    rows = []
    for cls in ("C1", "C2", "C3", "C4", "C5", "C6"):
        rng = C._Rng("mxfp4_to_fp8", cls)
        for i in range(per):
            codes, scales = _mxfp4_row(cls, rng, i)
            for g in (FP8_GROUPS if spec.level else (128,)):
                mx = MXTensor(codes=codes[None].copy(), scales=scales[None].copy(),
                              fmt=FORMATS["mxfp4"], profile=get_profile("ocp"), axis=1,
                              block_size=32)
                f8 = mxfp4_to_fp8(mx, group=g if g else "row")
                gsc = np.zeros(ROW // 32, np.uint8)
                gex = np.zeros(ROW // 32, np.uint8)
                ng = f8.scales.size
                gsc[:ng] = f8.scales.reshape(-1)
                gex[:ng] = np.asarray(f8.exact).reshape(-1)
                rows.append((cls, codes, scales, g, ng, f8.codes.reshape(-1), gsc, gex))
    classes = [r[0] for r in rows]
    cols = [
        *_head(spec, classes, [np.concatenate([r[1], r[2]]) for r in rows],
               tags=[[f"group{r[3] or 'row'}"] for r in rows],
               extra=[r[3] for r in rows]),
        plain_column("group", np.array([r[3] for r in rows], np.uint32), {
            "role": "input", "note": "elements per group along the row; 0 = the whole row"}),
        tensor_column("codes", np.stack([r[1] for r in rows]), {"dtype": "e2m1", "role": "input",
                      "encoding": "ocp-code", "logical_shape": [ROW]}),
        tensor_column("scales", np.stack([r[2] for r in rows]), {"dtype": "e8m0", "role": "input"}),
        plain_column("n_groups", np.array([r[4] for r in rows], np.uint8), {"role": "expected"}),
        tensor_column("exp_codes", np.stack([r[5] for r in rows]), {
            "dtype": "e4m3", "role": "expected", "encoding": "ocp-code", "logical_shape": [ROW]}),
        tensor_column("exp_scales", np.stack([r[6] for r in rows]), {
            "dtype": "e8m0", "role": "expected", "note": "first n_groups entries"}),
        tensor_column("exp_exact", np.stack([r[7] for r in rows]), {
            "dtype": "bool", "role": "expected", "note": "first n_groups entries"}),
    ]
    return cols, classes, {"contract": "docs/fp8fp4.md"}


def build_fp8_to_mxfp4(spec, cross_check=True):
    from ..fp8fp4 import FP8Tensor, fp8_to_mxfp4
    per = 1 if spec.level == 0 else 8
    rows = []
    for cls in ("C1", "C3", "C4", "C6", "C7"):
        rng = C._Rng("fp8_to_mxfp4", cls)
        for i in range(per):
            codes = np.array(rng.ints(0, 256, ROW), np.uint8)
            if cls != "C4":                                # no NaN codes outside C4
                codes[(codes & 0x7F) == 0x7F] ^= 0x01
            if cls == "C7":                                # every E4M3 code once (+ padding)
                codes = np.arange(ROW, dtype=np.uint8)
            base = 127 + rng.int(-20, 20)
            if cls == "C6":
                gs = np.array([(0x00, 0xFE), (0x01, 0xFD), (0xFE, 0xFE), (0x00, 0x00),
                               (0x7F, 0xF8), (0x10, 0x08), (0xF0, 0x05), (0x02, 0xFC)][i % 8])
            else:
                gs = np.array([base, base - rng.int(0, 8)])
            gs = gs.astype(np.uint8)
            f8 = FP8Tensor(codes=codes[None].copy(), scales=gs[None].copy(), group=128, axis=1,
                           fp8="e4m3", exact=np.ones((1, 2), bool))
            mx = fp8_to_mxfp4(f8, profile=spec.profile)
            rows.append((cls, codes, gs, mx.scales.reshape(-1), mx.codes.reshape(-1)))
    classes = [r[0] for r in rows]
    cols = [
        *_head(spec, classes, [np.concatenate([r[1], r[2]]) for r in rows],
               tags=[[] for _ in rows]),
        tensor_column("codes", np.stack([r[1] for r in rows]), {"dtype": "e4m3", "role": "input",
                      "encoding": "ocp-code", "logical_shape": [ROW]}),
        tensor_column("group_scales", np.stack([r[2] for r in rows]), {
            "dtype": "e8m0", "role": "input", "note": "one per 128 elements"}),
        tensor_column("exp_scales", np.stack([r[3] for r in rows]), {"dtype": "e8m0",
                                                                     "role": "expected"}),
        tensor_column("exp_codes", np.stack([r[4] for r in rows]), {
            "dtype": "e2m1", "role": "expected", "encoding": "ocp-code", "logical_shape": [ROW]}),
    ]
    return cols, classes, {"contract": "docs/fp8fp4.md"}


RB_SHAPE = (64, 64)


def build_reblock(spec, cross_check=True):
    from ..fp8fp4 import reblock
    per = 1 if spec.level == 0 else 4
    rows = []
    for cls in ("B1", "B2", "B3"):
        rng = C._Rng("reblock", spec.fmt, cls)
        for i in range(per):
            x = rng.normal(RB_SHAPE[0] * RB_SHAPE[1]).reshape(RB_SHAPE)
            if cls == "B2":                  # heavy tails: per-row and per-column outliers
                x = rng.student_t3(x.size).reshape(RB_SHAPE) * 2.0 ** rng.int(-20, 20)
            elif cls == "B3":                # specials and extremes: NaN, zero rows, 2^-130 rows
                x[i % 64, 5] = np.nan
                x[(i + 7) % 64, :] = 0.0
                x[(i + 9) % 64, :] *= 2.0 ** -130
                x[(i + 11) % 64, :32] = -0.0
            src = quantize(_f32(x).view(np.float32), spec.fmt, spec.profile, axis=1)
            out = reblock(src, axis=0, profile=spec.profile)
            rows.append((cls, src.codes, src.scales, out.codes, out.scales))
    classes = [r[0] for r in rows]
    el = FORMATS[spec.fmt].element
    cm = {"dtype": el.name, "encoding": "ocp-code", "packing": "unpacked",
          "logical_shape": list(RB_SHAPE)}
    cols = [
        *_head(spec, classes, [np.concatenate([r[1].reshape(-1), r[2].reshape(-1)])
                               for r in rows],
               tags=[[] for _ in rows]),
        tensor_column("codes_axis1", np.stack([r[1] for r in rows]), {**cm, "role": "input"}),
        tensor_column("scales_axis1", np.stack([r[2] for r in rows]), {"dtype": "e8m0",
                                                                       "role": "input"}),
        tensor_column("exp_codes_axis0", np.stack([r[3] for r in rows]), {**cm, "role": "expected"}),
        tensor_column("exp_scales_axis0", np.stack([r[4] for r in rows]), {"dtype": "e8m0",
                                                                           "role": "expected"}),
    ]
    return cols, classes, {"contract": "docs/fp8fp4.md"}


# =============================================================================================
# decompose
# =============================================================================================
DECOMP_PROFILES = ("ocp", "rceil", "torchao_even", "te_nvfp4")
DECOMP_CLASSES = ("E1", "E2", "E3", "E5", "E6", "E7", "E9", "S1", "S2", "S4", "S5", "S6", "S7",
                  "S8", "R1", "R2")
FLAG_BITS = {"deadzone": 1, "special": 2, "saturated": 4, "zeroed": 8}


def specs_decompose(level):
    return [_spec("decompose", f, p, s, level) for f in FORMATS for p in DECOMP_PROFILES
            for s in ("float32", "bfloat16") if _applies(f, p)]


def decomposition_flags(d) -> np.ndarray:
    """uint8 per element: bit 0 deadzone, 1 special, 2 saturated, 3 zeroed."""
    out = np.zeros(d.x.shape, np.uint8)
    for name, bit in FLAG_BITS.items():
        out |= np.where(getattr(d, name), np.uint8(bit), np.uint8(0))
    return out


def build_decompose(spec, cross_check=True):
    from ..decompose import decompose
    fmt = FORMATS[spec.fmt]
    if fmt.is_nvfp4:
        cs = C.nvfp4_cases(spec.src_dtype, spec.level)
        shape = (4, 16)
    else:
        cs = [c for c in C.block_cases(fmt.element.name, spec.src_dtype, spec.level)
              if c.cls in DECOMP_CLASSES and c.n_valid == 32]
        shape = (32,)
    if spec.level >= 1:                      # thin the big classes: decompositions are wide rows
        keep, seen = [], {}
        for c in cs:
            seen[c.cls] = seen.get(c.cls, 0) + 1
            if seen[c.cls] <= 6:
                keep.append(c)
        cs = keep
    rows = []
    for c in cs:
        src = c.src.astype(np.uint32 if spec.src_dtype == "float32" else np.uint16)
        x, sd = _src_view(src, spec.src_dtype)
        d = decompose(x.reshape(shape), spec.fmt, spec.profile, source_dtype=sd)
        comps = np.stack([d.exact_scale, d.exact_dead, d.exact_grid]).reshape(3, -1)
        rows.append((c.cls, src, comps.view(np.uint64), decomposition_flags(d).reshape(-1),
                     np.asarray(d.exact_total).reshape(-1).view(np.uint64), d.denominator))
    if not rows:
        return None
    classes = [r[0] for r in rows]
    src = np.stack([r[1] for r in rows])
    L = src.shape[1]
    f64 = {"dtype": "float64", "encoding": "ieee754-bits", "role": "expected",
           "logical_shape": [L], "scaled_by": "denominator (odd part of the element max)"}
    cols = [
        *_head(spec, classes, src,
               tags=[list(c.tags) for c in cs]),
        tensor_column("src_bits", src, {"dtype": spec.src_dtype, "encoding": "ieee754-bits",
                                        "role": "input", "logical_shape": list(shape)}),
        plain_column("denominator", np.array([r[5] for r in rows], np.uint16), {"role": "expected"}),
        tensor_column("exp_scale", np.stack([r[2][0] for r in rows]), f64),
        tensor_column("exp_dead", np.stack([r[2][1] for r in rows]), f64),
        tensor_column("exp_grid", np.stack([r[2][2] for r in rows]), f64),
        tensor_column("exp_total", np.stack([r[4] for r in rows]), {
            **f64, "identity": "exp_total == exp_scale + (exp_dead + exp_grid) == "
                               "denominator * (Q(x) - x), exactly"}),
        tensor_column("exp_flags", np.stack([r[3] for r in rows]), {
            "dtype": "uint8", "role": "expected", "bits": FLAG_BITS, "logical_shape": [L]}),
    ]
    return cols, classes, {"contract": "docs/decompose.md"}


# =============================================================================================
# rotated_gemm
# =============================================================================================
RG_PAIRS = (("mxfp4", "mxfp4", "ocp"), ("mxfp8_e4m3", "mxfp4", "ocp"),
            ("mxfp6_e2m3", "mxfp6_e2m3", "ocp"), ("nvfp4", "nvfp4", "te_nvfp4"))
RG_SHAPE = (4, 4, 256)           # M, N, K


def specs_rotated_gemm(level):
    pairs = RG_PAIRS if level else RG_PAIRS[:1] + RG_PAIRS[3:]
    return [_spec("rotated_gemm", f"{a}+{b}", p, s, level) for a, b, p in pairs
            for s in ("float32", "bfloat16")]


def _rg_operands(cls, rng, m, n, k):
    x = rng.normal(m * k).reshape(m, k)
    w = rng.normal(n * k).reshape(n, k) * 0.05
    if cls == "RG2":                 # outlier channels of X: what rotations are for
        x[:, rng.ints(0, k, 3)] *= 40.0
    elif cls == "RG3":               # a NaN in X row 0 and an Inf in W row 1
        x[0, rng.int(0, k)] = np.nan
        w[1, rng.int(0, k)] = np.inf
    return x, w


def _exact_xwt(x32: np.ndarray, w32: np.ndarray) -> np.ndarray:
    """X.W^T of fp32 operands, exactly summed and rounded once to float64 (NaN if non-finite)."""
    out = np.empty((x32.shape[0], w32.shape[0]), np.float64)
    for i in range(x32.shape[0]):
        for j in range(w32.shape[0]):
            a, b = x32[i].astype(np.float64), w32[j].astype(np.float64)
            if not (np.isfinite(a).all() and np.isfinite(b).all()):
                out[i, j] = np.nan
                continue
            out[i, j] = float(sum(Fraction(float(u)) * Fraction(float(v)) for u, v in zip(a, b)))
    return out


def build_rotated_gemm(spec, cross_check=True):
    from ..gemm import gemm_error_bound
    from ..rotated_gemm import rotated_gemm
    fa, fb = spec.fmt.split("+")
    m, n, k = RG_SHAPE
    combos = [(16, "te16"), (32, "none"), (32, "random"), (128, "random"), (256, "none")]
    if spec.level == 0:
        combos = combos[2:3]
    rows = []
    for cls in ("RG1", "RG2", "RG3"):
        rng = C._Rng("rotated_gemm", spec.fmt, spec.src_dtype, cls)
        for i, (hn, kind) in enumerate(combos):
            x, w = _rg_operands(cls, rng, m, n, k)
            xs, ws = _to_src(_f32(x), spec.src_dtype), _to_src(_f32(w), spec.src_dtype)
            (xv, sd), (wv, _) = _src_view(xs, spec.src_dtype), _src_view(ws, spec.src_dtype)
            sv = _signs(kind, hn, 99 + i, i, 3)
            rt = "bfloat16" if i % 3 == 2 else "float32"
            kw = dict(n=hn, profile=spec.profile, signs=sv[:hn], round_to=rt, source_dtype=sd)
            ex = rotated_gemm(xv, wv, fa, fb, mode="exact", **kw)
            seq = rotated_gemm(xv, wv, fa, fb, mode="block_sequential", **kw)
            bound = gemm_error_bound(ex.qx, ex.qw)
            x32 = xv.astype(np.float32) if sd is None else _bits_to_f32(xs, sd)
            w32 = wv.astype(np.float32) if sd is None else _bits_to_f32(ws, sd)
            rows.append((cls, xs, ws, hn, kind, sv, rt, ex.y.view(np.uint32).reshape(-1),
                         seq.y.view(np.uint32).reshape(-1),
                         np.asarray(bound, np.float64).reshape(-1).view(np.uint64),
                         _exact_xwt(x32, w32).reshape(-1).view(np.uint64)))
    classes = [r[0] for r in rows]
    f32 = {"dtype": "float32", "encoding": "ieee754-bits", "role": "expected",
           "logical_shape": [m, n]}
    src_meta = {"dtype": spec.src_dtype, "encoding": "ieee754-bits", "role": "input"}
    cols = [
        *_head(spec, classes, [np.concatenate([r[1].reshape(-1), r[2].reshape(-1)])
                               for r in rows],
               tags=[[r[4], f"n{r[3]}", r[6]] for r in rows],
               extra=[f"{r[3]}|{r[4]}|{r[6]}" for r in rows]),
        plain_column("n", np.array([r[3] for r in rows], np.uint16), {"role": "input"}),
        dict_column("sign_kind", [r[4] for r in rows], {"role": "input"}),
        dict_column("round_to", [r[6] for r in rows], {"role": "input"}),
        tensor_column("signs", np.stack([r[5] for r in rows]), {"dtype": "int8", "role": "input",
                                                                "logical_shape": [ROW]}),
        tensor_column("x_bits", np.stack([r[1] for r in rows]), {**src_meta,
                                                                 "logical_shape": [m, k]}),
        tensor_column("w_bits", np.stack([r[2] for r in rows]), {**src_meta,
                                                                 "logical_shape": [n, k]}),
        tensor_column("exp_exact", np.stack([r[7] for r in rows]), {**f32, "contract": "exact"}),
        tensor_column("exp_block_sequential", np.stack([r[8] for r in rows]),
                      {**f32, "contract": "block_sequential"}),
        tensor_column("exp_bound", np.stack([r[9] for r in rows]), {
            "dtype": "float64", "role": "expected", "logical_shape": [m, n],
            "contract": "bound: |y - exp_exact| <= exp_bound"}),
        tensor_column("ref_xwt", np.stack([r[10] for r in rows]), {
            "dtype": "float64", "role": "information", "logical_shape": [m, n],
            "note": "X.W^T of the unquantized operands, exact sum rounded once to float64"}),
    ]
    return cols, classes, {"contract": "docs/rotations.md + docs/gemm.md"}


# =============================================================================================
# corrections: macro-block scaling, outlier fallback, Four-over-Six NVFP4
# =============================================================================================
MACRO_SIZES = (32, 128, 0)          # 0 = the whole row
MACRO_DTYPES = ("float32", "bfloat16", "e4m3")


def specs_macroblock(level):
    return [_spec("macroblock", f, "ocp", s, level) for f in ("mxfp4", "mxfp8_e4m3")
            for s in ("float32", "bfloat16")]


def specs_outlier_fallback(level):
    return [_spec("outlier_fallback", "mxfp4", "ocp", s, level) for s in ("float32", "bfloat16")]


def specs_quantize_4over6(level):
    return [_spec("quantize_4over6", "nvfp4", p, s, level) for p in ("ocp", "te_nvfp4")
            for s in ("float32", "bfloat16")]


def _correction_rows(spec, classes=("H2", "H3", "H5", "H6")):
    """[ROW] fp32 rows: Gaussian, specials, subnormal, heavy-tailed (the rotation classes),
    plus outlier rows (class O1: a few elements x 2^6..2^12 in some blocks)."""
    rows = [(r[0], r[1]) for r in _rot_rows(spec.level, spec.op + spec.fmt, classes)
            if r[3] == "none"]
    rng = C._Rng(spec.op, spec.fmt, "O1")
    for _ in range(1 if spec.level == 0 else 4):
        v = rng.normal(ROW)
        for b in rng.ints(0, ROW // 32, 3):
            v[32 * b + rng.int(0, 32)] *= 2.0 ** rng.int(6, 13)
        rows.append(("O1", _f32(v)))
    return rows


def build_macroblock(spec, cross_check=True):
    from ..corrections import quantize_macroblock
    fmt = FORMATS[spec.fmt]
    rows = []
    for i, (cls, b32) in enumerate(_correction_rows(spec)):
        src = _to_src(b32, spec.src_dtype)
        x, sd = _src_view(src, spec.src_dtype)
        macro, dt = MACRO_SIZES[i % 3], MACRO_DTYPES[(i // 3) % 3]
        mb = quantize_macroblock(x.reshape(1, ROW), spec.fmt, "ocp", macro=macro or "row",
                                 macro_scale_dtype=dt, source_dtype=sd)
        ms = np.zeros(ROW // 32, np.uint32)
        ms[:mb.macro_scale_bits.size] = mb.macro_scale_bits.reshape(-1).astype(np.uint32)
        rows.append((cls, src, macro, dt, mb.macro_scale_bits.size, ms, mb.scales.reshape(-1),
                     mb.codes.reshape(-1)))
    classes = [r[0] for r in rows]
    cols = [
        *_head(spec, classes, [r[1] for r in rows],
               tags=[[f"macro{r[2] or 'row'}", r[3]] for r in rows],
               extra=[f"{r[2]}|{r[3]}" for r in rows]),
        plain_column("macro", np.array([r[2] for r in rows], np.uint32), {
            "role": "input", "note": "elements per macro block; 0 = the whole row"}),
        dict_column("macro_scale_dtype", [r[3] for r in rows], {"role": "input"}),
        tensor_column("src_bits", np.stack([r[1] for r in rows]), {
            "dtype": spec.src_dtype, "encoding": "ieee754-bits", "role": "input",
            "logical_shape": [ROW]}),
        plain_column("n_macro", np.array([r[4] for r in rows], np.uint8), {"role": "expected"}),
        tensor_column("exp_macro_scales", np.stack([r[5] for r in rows]), {
            "role": "expected", "encoding": "macro_scale_dtype bits (fp32 / bf16 / e4m3 code) "
            "in a uint32", "note": "first n_macro entries"}),
        tensor_column("exp_scales", np.stack([r[6] for r in rows]), {"dtype": "e8m0",
                                                                     "role": "expected"}),
        tensor_column("exp_codes", np.stack([r[7] for r in rows]), {
            "dtype": fmt.element.name, "encoding": "ocp-code", "role": "expected",
            "logical_shape": [ROW]}),
    ]
    return cols, classes, {"contract": "docs/decompose.md section 5.1"}


def build_outlier_fallback(spec, cross_check=True):
    from ..corrections import quantize_outlier_fallback
    rows = []
    for i, (cls, b32) in enumerate(_correction_rows(spec)):
        src = _to_src(b32, spec.src_dtype)
        x, sd = _src_view(src, spec.src_dtype)
        rule = ("block", "topk")[i % 2]
        of = quantize_outlier_fallback(x.reshape(1, ROW), spec.fmt, "ocp", rule=rule,
                                       source_dtype=sd)
        rows.append((cls, src, rule, of.flagged.reshape(-1).astype(np.uint8),
                     of.mx.scales.reshape(-1), of.mx.codes.reshape(-1),
                     of.residual_bits.reshape(-1).astype(np.uint16)))
    classes = [r[0] for r in rows]
    cols = [
        *_head(spec, classes, [r[1] for r in rows],
               tags=[[r[2]] for r in rows],
               extra=[r[2] for r in rows]),
        dict_column("rule", [r[2] for r in rows], {
            "role": "input", "note": "tau = 10, rho = 8, k = 1 (corrections.py defaults)"}),
        tensor_column("src_bits", np.stack([r[1] for r in rows]), {
            "dtype": spec.src_dtype, "encoding": "ieee754-bits", "role": "input",
            "logical_shape": [ROW]}),
        tensor_column("exp_flagged", np.stack([r[3] for r in rows]), {"role": "expected",
                                                                      "dtype": "bool"}),
        tensor_column("exp_scales", np.stack([r[4] for r in rows]), {"dtype": "e8m0",
                                                                     "role": "expected"}),
        tensor_column("exp_codes", np.stack([r[5] for r in rows]), {
            "dtype": "e2m1", "encoding": "ocp-code", "role": "expected", "logical_shape": [ROW]}),
        tensor_column("exp_residual", np.stack([r[6] for r in rows]), {
            "dtype": "bfloat16", "encoding": "ieee754-bits", "role": "expected",
            "note": "passthrough elements in bf16 (RNE), 0 elsewhere", "logical_shape": [ROW]}),
    ]
    return cols, classes, {"contract": "docs/decompose.md section 5.2"}


def build_quantize_4over6(spec, cross_check=True):
    from ..corrections import quantize_nvfp4_4over6
    cs = C.nvfp4_cases(spec.src_dtype, spec.level)
    rows = []
    for c in cs:
        x, sd = _src_view(c.src.astype(np.uint32 if spec.src_dtype == "float32" else np.uint16),
                          spec.src_dtype)
        mx = quantize_nvfp4_4over6(x.reshape(4, 16), spec.profile, source_dtype=sd)
        rows.append((c.cls, c.src, mx.scales.reshape(-1), mx.codes.reshape(-1),
                     np.float32(mx.tensor_scale).view(np.uint32),
                     np.asarray(mx.meta["four_over_six"]).reshape(-1).astype(np.uint8)))
    classes = [r[0] for r in rows]
    src = np.stack([r[1] for r in rows]).astype(np.uint32 if spec.src_dtype == "float32"
                                                else np.uint16)
    cols = [
        *_head(spec, classes, src,
               tags=[list(c.tags) for c in cs]),
        tensor_column("src_bits", src, {"dtype": spec.src_dtype, "encoding": "ieee754-bits",
                                        "role": "input", "logical_shape": [4, 16]}),
        tensor_column("exp_scales", np.stack([r[2] for r in rows]), {"dtype": "e4m3",
                                                                     "role": "expected"}),
        tensor_column("exp_codes", np.stack([r[3] for r in rows]), {
            "dtype": "e2m1", "encoding": "ocp-code", "role": "expected", "logical_shape": [4, 16]}),
        plain_column("exp_tensor_scale", np.array([r[4] for r in rows], np.uint32), {
            "dtype": "float32", "role": "expected", "note": "bound 256: T = amax / (6 * 256)"}),
        tensor_column("exp_choice", np.stack([r[5] for r in rows]), {
            "role": "expected", "note": "4 or 6 per block (select = mse, ties -> 6)"}),
    ]
    return cols, classes, {"contract": "docs/decompose.md section 5.3"}


# =============================================================================================
EXT_OPS = {
    "rotate": (specs_rotate, build_rotate),
    "quantize_rotated": (specs_quantize_rotated, build_quantize_rotated),
    "gemm": (specs_gemm, build_gemm),
    "quantize_mx_sr": (specs_quantize_mx_sr, build_quantize_mx_sr),
    "quantize_nvfp4_sr": (specs_quantize_nvfp4_sr, build_quantize_nvfp4_sr),
    "mxfp4_to_fp8": (specs_mxfp4_to_fp8, build_mxfp4_to_fp8),
    "fp8_to_mxfp4": (specs_fp8_to_mxfp4, build_fp8_to_mxfp4),
    "reblock": (specs_reblock, build_reblock),
    "decompose": (specs_decompose, build_decompose),
    "rotated_gemm": (specs_rotated_gemm, build_rotated_gemm),
    "macroblock": (specs_macroblock, build_macroblock),
    "outlier_fallback": (specs_outlier_fallback, build_outlier_fallback),
    "quantize_4over6": (specs_quantize_4over6, build_quantize_4over6),
}
