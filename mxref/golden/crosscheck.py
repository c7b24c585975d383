"""Cross-oracle records at generation: what ml_dtypes and torchao say about the same inputs.

Data, not test failures: the counts go into the file's ``cross_checks`` metadata (volatile: it
depends on which peers are installed). Both peers are optional and imported only here.
"""
from __future__ import annotations

import numpy as np


def _per_class(classes, agree_mask):
    out = {}
    for c, ok in zip(classes, agree_mask):
        a = out.setdefault(c, [0, 0])
        a[0 if ok else 1] += 1
    return {c: {"agree": v[0], "disagree": v[1]} for c, v in sorted(out.items())}


def ml_dtypes_cross_check(spec, el, bits, codes, classes):
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


def torchao_cross_check(spec, x, sd, mx, classes):
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

