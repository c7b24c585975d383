"""In-run validation: recompute what an MXLinear's training path produced with mxref.

``capture_next(layer)`` arms a layer: its next forward + backward records, for each GEMM, the
high-precision input of each operand (before the GEMM's rotation, after padding), the rotation
signs, the SR seed, the (scales, codes) and scale extras the training path produced, and the
raw GEMM output. ``check_capture(layer)`` then recomputes every quantized operand with mxref
(Numba, CPU: mxref.rotate, mxref.quantize with the same Philox seed, mxref.corrections for
macro-block scaling and outlier fallback, an mxref block-of-2 oracle for vector-wise E2M1)
and compares scales and codes byte for byte; the GEMM outputs are checked against
mxref.check_gemm (plain MX operands: the exact product and the a-priori fp32 accumulation
bound) or, for the other operand kinds, against the float64 product of the mxref values with
the standard bound ``(C + 2) u |A| |B|^T`` (u = 2^-24). Operands a backward GEMM re-uses from the
forward (source "fwd", FP4 activation storage) are checked against the mxref dequantization
of the forward copy. The fast path (mxlinear.fast_plan) also records the values each GEMM
multiplied and the forward's autocast state: a quantized operand's values must be mxref's
dequantization, an unquantized operand's the bf16 cast of its input under bf16 autocast (else
the fp32 input), in that dtype, bit for bit; a GEMM with an unquantized operand is held to the
bound on those values. A GEMM on the FP8 carrier (GemmSpec gemm "fp8") also has each
operand's carrier (E4M3 codes, group bytes) compared with mxref.mxfp4_to_fp8 of mxref's
operand, its fallback counted, and its output held to the carrier bound (CARRIER_ACC_BITS).

Cost: one CPU copy of every operand of one layer-step plus mxref's Numba kernels; meant for a
few layers every few hundred steps.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

import mxref
from mxref import corrections as C
from mxref.errors import MXRefError
from mxref.formats import get_format
from mxref.profiles import get_profile

from .recipes import GemmSpec, OperandSpec, operand_name

__all__ = ["CheckRecord", "capture_next", "check_capture", "ValidationError", "raise_if_failed",
           "CaptureError"]


class ValidationError(MXRefError, AssertionError):
    """A training-path operand or GEMM output that mxref does not reproduce."""


class CaptureError(MXRefError, RuntimeError):
    """check_capture on a layer with no completed capture."""


@dataclass
class CheckRecord:
    """One comparison: an operand's codes/scales or a GEMM output. JSON-able (asdict)."""

    layer: str
    gemm: str
    operand: str
    fmt: str
    profile: str
    elements: int
    mismatches: int
    ok: bool
    detail: str
    first_index: list | None = None
    # GEMMs on the FP8 carrier: how many elements / groups the re-encoding rounded (mxref's
    # count: groups whose block scales span more than 15 + nu binades), else None
    fallback: dict | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def capture_next(layer) -> None:
    """Arm ``layer`` (an MXLinear): its next forward + backward record their GEMM operands."""
    layer._capture = {}
    layer._capture_done = None


def _first(mask: np.ndarray):
    idx = np.argwhere(mask)
    return None if idx.size == 0 else [int(i) for i in idx[0]]


def _cmp(layer, gemm, operand, fmt, profile, what, got, exp, records, extra_detail="",
         nan_equal=False):
    """Byte / bit comparison of got and exp (floats as float32 bits; nan_equal: any NaN
    matches any NaN)."""
    got = np.asarray(got)
    exp = np.asarray(exp)
    if got.shape != exp.shape:
        records.append(CheckRecord(layer, gemm, operand, fmt, profile, int(exp.size),
                                   int(exp.size), False,
                                   f"{what}: shape {got.shape} != mxref {exp.shape}", None))
        return
    nan = None
    if got.dtype.kind == "f" or got.dtype.name == "bfloat16":
        g32, e32 = got.astype(np.float32), exp.astype(np.float32)
        nan = np.isnan(g32) & np.isnan(e32) if nan_equal else None
        got, exp = g32.view(np.uint32), e32.view(np.uint32)
    bad = got != exp
    if nan is not None:
        bad &= ~nan
    n = int(bad.sum())
    fi = _first(bad)
    detail = f"{what}: {n} of {exp.size} differ from mxref"
    if fi is not None:
        detail += f"; first at {fi}: got {got[tuple(fi)]!r}, mxref {exp[tuple(fi)]!r}"
    records.append(CheckRecord(layer, gemm, operand, fmt, profile, int(exp.size), n, n == 0,
                               detail + extra_detail, fi))


def _cmp_values(layer, gemm, operand, fmt, profile, got, exp64, records):
    """The dequantized values a fast-path GEMM multiplied (bf16 or fp32) against mxref's,
    rounded to the same dtype (RNE: ml_dtypes); NaN matches NaN."""
    got = np.asarray(got)
    exp = np.asarray(exp64, dtype=np.float64).astype(np.float32)
    if got.dtype != np.float32:
        exp = exp.astype(got.dtype)
    _cmp(layer, gemm, operand, fmt, profile, f"values ({got.dtype})", got, exp, records,
         nan_equal=True)


def _check_unquantized(layer, gemm, operand, got, hp: np.ndarray, autocast, records) -> dict:
    """An unquantized operand of a fast-path GEMM: the values it multiplied must be its
    high-precision input cast to bf16 (RNE, ml_dtypes) when the forward ran under bf16 autocast,
    else the fp32 input itself, in that dtype and bit for bit (NaN matches NaN). Returns the
    expected values for the GEMM output's bound."""
    import ml_dtypes

    want = "bfloat16" if autocast == "bfloat16" else "float32"
    exp = np.asarray(hp, dtype=np.float32)
    if want == "bfloat16":
        exp = exp.astype(ml_dtypes.bfloat16)
    got = np.asarray(got)
    fmt = "bf16" if want == "bfloat16" else "fp32"
    what = f"unquantized {fmt} values (autocast {autocast})"
    if got.dtype.name != want:
        records.append(CheckRecord(layer, gemm, operand, fmt, "cast", int(exp.size),
                                   int(exp.size), False,
                                   f"{what}: multiplied as {got.dtype.name}, not {want}", None))
    else:
        _cmp(layer, gemm, operand, fmt, "cast", what, got, exp, records, nan_equal=True)
    return {"values": exp.astype(np.float64)}


def _sr_profile(spec: OperandSpec):
    p = get_profile(spec.profile)
    if spec.rounding == "sr":
        p = p.replace(name=f"{p.name}+sr", rounding="stochastic")
    return p


def _occ_bounds_np(x: np.ndarray, q: float):
    s = np.sort(x.reshape(-1))
    n = s.size
    khi = min(n, max(1, int(math.ceil(q * n))))
    return s[n - khi], s[khi - 1]


def _expected_operand(x: np.ndarray, spec: OperandSpec, rec: dict, signs, n):
    """mxref's version of one operand: dict of expected arrays + values for the GEMM check."""
    exp: dict = {}
    if signs is not None:
        x = mxref.rotate(x, n, axis=-1, signs=signs)
    hp = x
    if spec.clamp_quantile is not None:
        lo, hi = _occ_bounds_np(x, spec.clamp_quantile)
        exp["occ_lo"], exp["occ_hi"] = np.float32(lo), np.float32(hi)
        x = np.clip(x, lo, hi)
    prof = _sr_profile(spec)
    if spec.scaling == "vector":
        amax = np.abs(x).max(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.where(amax > 0, amax / np.float32(6), np.float32(1)).astype(np.float32)
            y = (x / s[:, None]).astype(np.float32)
        # element conversion at scale 2^0: block of 2 with a companion 4.0 (floor(log2 4) - 2 = 0)
        pair = np.stack([y, np.full_like(y, 4.0)], axis=-1)
        mx = mxref.quantize(pair, spec.fmt, "ocp", axis=-1, block_size=2)
        if not (mx.scales == 127).all():
            raise ValidationError("vector oracle: companion block did not get scale 2^0")
        exp["codes"] = mx.codes[..., 0]
        exp["row_scale"] = s
        vals = mxref.dequantize(mx)[..., 0].astype(np.float64)
        exp["values"] = vals * s.astype(np.float64)[:, None]
        exp["gemm_values"] = vals
        exp["gemm_row_scale"] = s.astype(np.float64)
        return exp, hp
    f = get_format(spec.fmt)
    rest = x
    pt = None
    if spec.outlier is not None:
        fb = C.quantize_outlier_fallback(x, spec.fmt, prof, rule=spec.outlier,
                                         tau=float(spec.outlier_tau), rho=None,
                                         k=int(spec.outlier_k), axis=-1)
        pt = fb.passthrough
        exp["passthrough"] = pt
        rest = np.where(pt, np.float32(0), x).astype(np.float32)
    if spec.macro is not None:
        mb = C.quantize_macroblock(rest, spec.fmt, prof, macro=spec.macro, axis=-1,
                                   macro_scale_dtype=spec.macro_scale_dtype)
        exp["scales"], exp["codes"] = mb.scales, mb.codes
        exp["macro_scales"] = mb.macro_scales
        vals = mb.dequantize()
    elif f.is_nvfp4:
        mx = mxref.quantize(rest, "nvfp4", prof, axis=-1,
                            seed=rec.get("sr_seed") if spec.rounding == "sr" else None,
                            **({"rng_words": spec.sr_words} if spec.rounding == "sr" else {}))
        exp["scales"], exp["codes"] = mx.scales, mx.codes
        exp["tensor_scale"] = np.float32(mx.tensor_scale)
        exp["mx"] = mx
        unit = mxref.dequantize(codes=mx.codes, scales=mx.scales, fmt="nvfp4", axis=-1,
                                tensor_scale=np.float32(1.0))
        exp["gemm_values"] = unit.astype(np.float64)
        exp["gemm_tensor_scale"] = float(mx.tensor_scale)
        vals = mxref.dequantize(mx)
    else:
        mx = mxref.quantize(rest, spec.fmt, prof, axis=-1,
                            seed=rec.get("sr_seed") if spec.rounding == "sr" else None,
                            **({"rng_words": spec.sr_words} if spec.rounding == "sr" else {}))
        exp["scales"], exp["codes"] = mx.scales, mx.codes
        exp["mx"] = mx
        vals = mxref.dequantize(mx)
    if pt is not None:
        kept = C.bf16_rne_bits(x.view(np.uint32))
        vals = np.where(pt, (kept.astype(np.uint32) << np.uint32(16)).view(np.float32), vals)
        exp.pop("mx", None)
    exp["values"] = vals.astype(np.float64)
    return exp, hp


# A Hopper FP8 MMA keeps fewer bits than fp32 while it sums the products of one 128-group
# (scripts/gpu_fp8_probe.py; bench/results/fp8_carrier/): the carrier GEMM's check charges each
# group sum 2^-ACC_BITS of the group's sum of |products| per product, on top of fp32
# accumulation across groups (docs/training.md, "The FP8 carrier").
CARRIER_ACC_BITS = 13


def _check_carrier(layer, gemm, opname, side_rec, e, records) -> np.ndarray | None:
    """One operand of a GEMM on the FP8 carrier: its E4M3 codes and group bytes against
    mxref.mxfp4_to_fp8(group=128) of mxref's own MXFP4 operand, byte for byte. Returns mxref's
    carrier values (float64) for the GEMM check, None when there is nothing to compare."""
    from mxref.fp8fp4 import mxfp4_to_fp8
    c = side_rec.get("carrier")
    if e is None or "mx" not in e:
        return None
    ref = mxfp4_to_fp8(e["mx"], group=128, fp8="e4m3")
    fb = {"elements_rounded": int(ref.n_inexact), "elements_flushed": int(ref.n_flushed),
          "groups_inexact": int((~ref.exact).sum()), "groups": int(ref.exact.size),
          "elements": int(ref.codes.size)}
    what = f"{opname} (fp8 carrier)"
    if c is None:
        records.append(CheckRecord(layer, gemm, what, "e4m3", "mxfp4_to_fp8", 0, 1, False,
                                   "the training path recorded no carrier", None, fb))
        return ref.dequantize().astype(np.float64)
    sub: list[CheckRecord] = []
    _cmp(layer, gemm, what, "e4m3", "mxfp4_to_fp8", "codes", c["codes"], ref.codes, sub)
    _cmp(layer, gemm, what, "e4m3", "mxfp4_to_fp8", "group bytes", c["scales"], ref.scales,
         sub)
    bad = [r for r in sub if not r.ok]
    rate = fb["elements_rounded"] / max(fb["elements"], 1)
    detail = "; ".join(r.detail for r in bad) if bad else (
        f"codes, group bytes identical to mxref.mxfp4_to_fp8; {fb['elements_rounded']} of "
        f"{fb['elements']} elements rounded ({rate:.3g}) in {fb['groups_inexact']} of "
        f"{fb['groups']} groups")
    records.append(CheckRecord(layer, gemm, what, "e4m3", "mxfp4_to_fp8", fb["elements"],
                               sum(r.mismatches for r in sub), not bad, detail,
                               bad[0].first_index if bad else None, fb))
    return ref.dequantize().astype(np.float64)


def _carrier_gemm_check(layer, gemm, out, va, vb, records) -> None:
    """A GEMM on the FP8 carrier against the float64 product of mxref's carrier values:
    |y - exact| <= (min(C, 128) 2^-CARRIER_ACC_BITS + (ceil(C / 128) + 2) u) |A||B|^T
    + 4 u |exact| (u = 2^-24)."""
    prod = va @ vb.T
    absprod = np.abs(va) @ np.abs(vb).T
    u = 2.0 ** -24
    k = va.shape[1]
    ng = -(-k // 128)
    bound = (min(k, 128) * 2.0 ** -CARRIER_ACC_BITS + (ng + 2) * u) * absprod + \
        4 * u * np.abs(prod) + 1e-45
    y = out.astype(np.float64)
    err = np.abs(y - prod)
    with np.errstate(invalid="ignore"):
        bad = ~(err <= bound)
    bad &= ~(np.isnan(y) & np.isnan(prod))
    n = int(bad.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = float(np.nanmax(err / np.maximum(bound, 1e-300))) if err.size else 0.0
        fp32b = (k + 2) * u * absprod + 4 * u * np.abs(prod) + 1e-45
        over32 = int((err > fp32b).sum())
    records.append(CheckRecord(layer, gemm, "out", "fp32", "float64 product + fp8 bound",
                               int(out.size), n, n == 0,
                               f"max |y - exact| / bound = {rel:.3g}; {n} outside the FP8 "
                               f"carrier bound ({CARRIER_ACC_BITS}-bit group sums); {over32} "
                               "outside the plain fp32 bound (C + 2) u |A||B|^T", _first(bad)))


def _gemm_check(layer, gemm, out, ea, eb, spec: GemmSpec, hp_a, hp_b, records, mode):
    """Output check: mxref.check_gemm for two plain MX operands (mode "mxref"), else the
    float64 bound."""
    plain = mode == "mxref" and all("mx" in e and not get_format(s.fmt).is_nvfp4
                for e, s in ((ea, spec.a), (eb, spec.b)) if e is not None) and \
        ea is not None and eb is not None
    if plain:
        chk = mxref.check_gemm(out, ea["mx"], eb["mx"], upcast="fp32")
        ok = chk.n_outside == 0 and chk.nan_mismatch == 0
        fi = _first(~chk.within)
        records.append(CheckRecord(layer, gemm, "out", "fp32", "mxref.check_gemm",
                                   int(out.size), int(chk.n_outside + chk.nan_mismatch), ok,
                                   f"max {chk.max_ulp:.3g} ulp from the exact product; "
                                   f"{chk.n_outside} outside the fp32 accumulation bound", fi))
        return
    def side(e, hp):
        if e is None:
            return hp.astype(np.float64), None, 1.0
        return e.get("gemm_values", e["values"]), e.get("gemm_row_scale"), \
            e.get("gemm_tensor_scale", 1.0)
    va, ra, ta = side(ea, hp_a)
    vb, rb, tb = side(eb, hp_b)
    prod = va @ vb.T
    absprod = np.abs(va) @ np.abs(vb).T
    scale = np.ones_like(prod)
    if ra is not None:
        scale = scale * ra[:, None]
    if rb is not None:
        scale = scale * rb[None, :]
    exact = prod * scale * (ta * tb)
    u = 2.0 ** -24
    k = va.shape[1]
    bound = (k + 2) * u * absprod * np.abs(scale) * abs(ta * tb) + 4 * u * np.abs(exact) + 1e-45
    y = out.astype(np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(y - exact) <= bound)
    bad &= ~(np.isnan(y) & np.isnan(exact))
    n = int(bad.sum())
    fi = _first(bad)
    err = np.abs(y - exact)
    rel = float(np.nanmax(err / np.maximum(bound, 1e-300))) if err.size else 0.0
    records.append(CheckRecord(layer, gemm, "out", "fp32", "float64 product + bound",
                               int(out.size), n, n == 0,
                               f"max |y - exact| / bound = {rel:.3g}; {n} outside "
                               "(C + 2) u |A||B|^T", fi))


GEMM_CHECKS = ("mxref", "bound")


_DECOMP_KEYS = ("error_to_signal", "energy_share", "zeroed_fraction", "deadzone_fraction",
                "saturated_fraction", "mean_s_ratio")


def _decomposition(gemm, opname, spec: OperandSpec, hp: np.ndarray, exp: dict) -> dict:
    """What one quantized operand's error is made of: ``recipe_error_to_signal``, the
    ||q - x||^2 / ||x||^2 of the values the recipe multiplied (OCC's compensated residual
    added back: the GEMM sees it), and ``plain``, mxref.decompose of the same tensor under
    plain MX block quantization with the operand's profile (RNE): the error the corrections
    work on, split into scale / deadzone / grid components (None for NVFP4 and vector-wise
    operands, which are not E8M0-block formats). For a plain RNE MX operand the two
    error-to-signal ratios are the same number computed two independent ways."""
    x = np.asarray(hp, dtype=np.float64)
    eff = np.asarray(exp["values"], dtype=np.float64)
    if "occ_lo" in exp:
        eff = eff + (x - np.clip(x, float(exp["occ_lo"]), float(exp["occ_hi"])))
    ok = np.isfinite(x) & np.isfinite(eff)
    sig = float(np.sum(x[ok] ** 2))
    out = {"gemm": gemm, "operand": opname, "fmt": spec.fmt, "profile": spec.profile,
           "corrections": [k for k, on in (("outlier", spec.outlier is not None),
                                           ("macro", spec.macro is not None),
                                           ("occ", spec.clamp_quantile is not None),
                                           ("vector", spec.scaling == "vector"),
                                           ("sr", spec.rounding == "sr")) if on],
           "recipe_error_to_signal": float(np.sum((eff[ok] - x[ok]) ** 2)) / sig if sig else None,
           "plain": None}
    f = get_format(spec.fmt)
    if not f.is_nvfp4 and spec.scaling == "block" and f.element.kind != "int":
        st = mxref.decompose(np.asarray(hp, dtype=np.float32), spec.fmt, spec.profile).stats()
        out["plain"] = {k: st[k] for k in _DECOMP_KEYS}
    return out


def check_capture(layer, *, gemm_check: str = "mxref", decompose: list | None = None
                  ) -> list[CheckRecord]:
    """Recompute the captured operands of ``layer`` with mxref; one CheckRecord per quantized
    operand (codes, scales and scale extras together: ``mismatches`` counts differing bytes),
    per re-used forward copy, and per GEMM output.

    gemm_check: "mxref" (two plain MX operands: mxref.check_gemm, the exact product and its
    fp32 accumulation bound; Numba compiles it once per process, ~20-50 s) or "bound" (every
    GEMM: float64 product of the mxref operand values with the (C + 2) u |A||B|^T bound).

    decompose: a list to append one :func:`_decomposition` dict per quantized operand to
    (mxref.decompose of the operand: a few seconds per 10^7 elements on one core)."""
    if gemm_check not in GEMM_CHECKS:
        raise CaptureError(f"gemm_check={gemm_check!r}; use one of {GEMM_CHECKS}")
    cap = getattr(layer, "_capture_done", None)
    if not cap:
        raise CaptureError(f"layer {getattr(layer, 'name', '') or type(layer).__name__} has no "
                           "completed capture: call capture_next(layer), then run one forward "
                           "and backward")
    recipe = layer.recipe
    lname = getattr(layer, "name", "") or f"layer{getattr(layer, 'layer_id', 0)}"
    records: list[CheckRecord] = []
    fwd_values: dict = {}
    for gemm in ("fprop", "dgrad", "wgrad"):
        rec = cap.get(gemm)
        if rec is None:
            continue
        g: GemmSpec = rec["spec"]
        signs = rec.get("signs")
        n = rec.get("hadamard_n")
        exps = {}
        hps = {}
        for side, spec in (("a", g.a), ("b", g.b)):
            r = rec[side]
            opname = operand_name(gemm, side)
            x = r["input"]
            # operands the backward re-uses from the forward
            if gemm == "dgrad" and side == "b" and spec.source == "fwd" and "W" in fwd_values:
                w = fwd_values["W"].astype(np.float32).T
                _cmp(lname, gemm, opname + " (forward copy)", spec.fmt or "fp32", "fwd",
                     "re-used forward W", x[:, :w.shape[1]] if x.shape != w.shape else x,
                     w, records)
            if gemm == "wgrad" and side == "b":
                if spec.source == "fwd" and "x" in fwd_values:
                    xv = fwd_values["x"].astype(np.float32).T
                    _cmp(lname, gemm, opname + " (forward copy)", spec.fmt or "fp32", "fwd",
                         "re-used forward x", x[:, :xv.shape[1]], xv, records)
                elif recipe.save_activations is not None and "x_in" in fwd_values:
                    st = mxref.quantize(fwd_values["x_in"], recipe.save_activations, "ocp",
                                        axis=-1)
                    xv = mxref.dequantize(st).T
                    _cmp(lname, gemm, opname + " (stored activation)", recipe.save_activations,
                         "ocp", "dequantized stored x", x[:, :xv.shape[1]], xv, records)
            if spec.fmt is None:
                hp = x if signs is None else mxref.rotate(x, n, axis=-1, signs=signs)
                hps[side] = hp
                exps[side] = None
                if r.get("values") is not None:     # the fast path records what it multiplied
                    exps[side] = _check_unquantized(lname, gemm, opname, r["values"], hp,
                                                    cap.get("autocast"), records)
                continue
            e, hp = _expected_operand(x, spec, r, signs, n)
            exps[side], hps[side] = e, hp
            if decompose is not None:
                decompose.append(_decomposition(gemm, opname, spec, hp, e))
            fails_before = len(records)
            pname = spec.profile + ("+sr" if spec.rounding == "sr" else "")
            got = {"codes": r.get("codes"), "scales": r.get("scales"),
                   "row_scale": r.get("row_scale"),
                   "tensor_scale": None if r.get("tensor_scale") is None
                   else np.float32(r["tensor_scale"])}
            got.update({k: v for k, v in (r.get("extra") or {}).items()})
            parts = [k for k in ("codes", "scales", "row_scale", "tensor_scale", "macro_scales",
                                 "passthrough", "occ_lo", "occ_hi") if k in e]
            sub: list[CheckRecord] = []
            for k in parts:
                gv = got.get(k)
                if gv is None:
                    sub.append(CheckRecord(lname, gemm, opname, spec.fmt, pname, 0, 1, False,
                                           f"{k}: not recorded by the training path"))
                    continue
                _cmp(lname, gemm, opname, spec.fmt, pname, k, gv, e[k], sub)
            if r.get("values") is not None:     # NVFP4: e2m1 x e4m3, the tensor scale apart
                _cmp_values(lname, gemm, opname, spec.fmt, pname, r["values"],
                            e.get("gemm_values", e["values"]), sub)
                parts.append("values")
            del fails_before
            tot = sum(s.elements for s in sub if s.detail.startswith("codes")) or \
                int(x.size)
            mism = sum(s.mismatches for s in sub)
            bad = [s for s in sub if not s.ok]
            detail = "; ".join(s.detail for s in bad) if bad else \
                f"{', '.join(parts)} identical to mxref"
            records.append(CheckRecord(lname, gemm, opname, spec.fmt, pname, tot, mism,
                                       not bad, detail, bad[0].first_index if bad else None))
        if gemm == "fprop":
            fwd_values["x_in"] = rec["a"]["input"]
            if exps.get("b") is not None:
                fwd_values["W"] = exps["b"]["values"]
            elif g.b.fmt is None:
                fwd_values["W"] = hps["b"].astype(np.float64)
            if exps.get("a") is not None:
                fwd_values["x"] = exps["a"]["values"]
            elif g.a.fmt is None:
                fwd_values["x"] = hps["a"].astype(np.float64)
        if g.gemm == "fp8":
            ca = _check_carrier(lname, gemm, operand_name(gemm, "a"), rec["a"], exps.get("a"),
                                records)
            cb = _check_carrier(lname, gemm, operand_name(gemm, "b"), rec["b"], exps.get("b"),
                                records)
            if ca is not None and cb is not None:
                _carrier_gemm_check(lname, gemm, rec["out"], ca, cb, records)
                continue
        _gemm_check(lname, gemm, rec["out"], exps.get("a"), exps.get("b"), g, hps["a"],
                    hps["b"], records, gemm_check)
    return records


def raise_if_failed(records: list[CheckRecord]) -> None:
    """Raise ValidationError naming the first failing record's layer, GEMM, operand and
    first mismatching index."""
    bad = [r for r in records if not r.ok]
    if bad:
        r = bad[0]
        raise ValidationError(
            f"in-run validation failed ({len(bad)} of {len(records)} checks): layer {r.layer!r} "
            f"{r.gemm} operand {r.operand} ({r.fmt}/{r.profile}): {r.mismatches} of {r.elements} "
            f"mismatch, first at index {r.first_index}: {r.detail}")
