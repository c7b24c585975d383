"""Scan checkpoint files and build the ``mxref-scan/1`` document (schema: docs/scan.md)."""
from __future__ import annotations

import numpy as np

from .. import __version__
from ..formats import get_format
from ..profiles import get_profile
from .fingerprint import fingerprint, interior_scale_mask, magnitude_table
from .io import SafetensorsFile, expand_paths
from .kernels import PAIR_MAX, codes_hist, packed_fp4_hist
from .layouts import recognise

__all__ = ["SCHEMA", "plan", "scan"]

SCHEMA = "mxref-scan/1"
CHUNK_BYTES = 32 * 2**20            # codes read per kernel call (bounded memory, progress steps)
CONSTANT_MIN_BLOCKS = 256           # fewer blocks sharing one scale byte is not suspicious
_NV_NEG = np.zeros(256, dtype=bool)
_NV_NEG[0x80:0xFF] = True           # E4M3 block scales with the sign bit (0xFF is NaN)


def plan(paths, layout="auto", fmt=None):
    """Open and check every file and recognise its tensors before any data is read:
    [(SafetensorsFile, [QTensor], [unquantized names])]. Raises ScanFileError (exit 3) or
    UnknownLayoutError (exit 2)."""
    out = []
    for p in expand_paths(paths):
        f = SafetensorsFile(p)
        qs, left = recognise(f.tensors, layout, fmt)
        out.append((f, qs, left))
    return out


def _float_values(f, info) -> np.ndarray:
    raw = f.array(info)
    if info.dtype == "F32":
        return raw.copy().view(np.float32)
    if info.dtype == "BF16":
        return (raw.copy().view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if info.dtype == "F16":
        return raw.copy().view(np.float16).astype(np.float32)
    return None


def _scalar_check(f, info, kind, anomalies) -> dict | None:
    """NVFP4's per-tensor fp32 scales (weight_scale_2, input_scale): finite and > 0."""
    if info is None:
        return None
    v = _float_values(f, info)
    rec = {"name": info.name, "dtype": info.dtype, "shape": list(info.shape)}
    if v is None:
        anomalies.append({"kind": f"invalid_{kind}", "message": f"{info.name!r} is {info.dtype}; "
                          "a tensor scale is a float (F32)"})
        return rec
    bad = int(np.count_nonzero(~np.isfinite(v) | (v <= 0)))
    rec["values"] = [float(x) for x in v[:4]] + (["..."] if v.size > 4 else [])
    if bad:
        anomalies.append({"kind": f"invalid_{kind}", "message": f"{info.name!r}: {bad} of "
                          f"{v.size} value(s) NaN, infinite, zero or negative ({v[:4].tolist()})"})
    return rec


def _fill_hist(f, q, hist, bad, progress):
    """One pass over the codes, in row chunks; returns the stored scale grid for padding."""
    bs, rows, nblk = q.block_size, q.rows, q.nblk
    s = f.array(q.scales)
    codes = f.array(q.codes)
    if q.layout == "gpt-oss":
        grid = s.reshape(rows, nblk)
        per_row = codes.size // max(rows, 1)
    else:
        grid = s.reshape(-1, q.scales.shape[-1]) if q.scales.shape else s.reshape(1, 1)
        per_row = codes.size // max(rows, 1)
    c2 = codes.reshape(rows, per_row)
    whole = q.packed and (q.n // 2) % (bs // 2) == 0 and q.n % 2 == 0
    magtab = magnitude_table(q.fmt)
    step = max(1, CHUNK_BYTES // max(per_row, 1))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        sc = np.ascontiguousarray(grid[r0:r1, :nblk])
        if whole:
            flat = c2[r0:r1].reshape(-1)
            if flat.ctypes.data % 2:
                flat = flat.copy()
            packed_fp4_hist(flat.view(np.uint16).reshape(-1, bs // 4), sc.reshape(-1), PAIR_MAX,
                            hist)
        else:
            blk = c2[r0:r1]
            if q.packed:
                un = np.empty((blk.shape[0], blk.shape[1] * 2), dtype=np.uint8)
                un[:, 0::2] = blk & 0xF
                un[:, 1::2] = blk >> 4
                blk = un[:, :q.n]
            codes_hist(np.ascontiguousarray(blk), sc, bs, magtab, hist, bad)
        if progress is not None:
            progress((r1 - r0) * per_row)
    return grid


def _scan_tensor(f, q, against, progress) -> dict:
    fmt = get_format(q.fmt)
    hist = np.zeros((256, 256), dtype=np.int64)
    bad = np.zeros(2, dtype=np.int64)
    grid = _fill_hist(f, q, hist, bad, progress)
    anomalies = [{"kind": k, "message": m} for k, m in q.notes]
    per_scale = hist.sum(axis=1)
    blocks = int(per_scale.sum())
    pad = None
    if q.layout != "gpt-oss" and (grid.shape[0] > q.rows or grid.shape[1] > q.nblk):
        nz = int(np.count_nonzero(grid[q.rows:])) + int(np.count_nonzero(grid[:q.rows, q.nblk:]))
        pad = {"stored": list(grid.shape), "used": [q.rows, q.nblk],
               "bytes": int(grid.size - q.rows * q.nblk), "nonzero": nz}
        if nz:
            anomalies.append({"kind": "dirty_padding", "message": f"{nz} nonzero byte(s) in the "
                              f"padding of {q.scales.name!r} (stored {list(grid.shape)}, used "
                              f"[{q.rows}, {q.nblk}])"})
    nan_scales = [0x7F, 0xFF] if fmt.is_nvfp4 else [0xFF]
    n_nan = int(per_scale[nan_scales].sum())
    if n_nan:
        anomalies.append({"kind": "invalid_scale_bytes", "message": f"{n_nan} block scale(s) are "
                          f"NaN ({'E4M3 0x7F/0xFF' if fmt.is_nvfp4 else 'E8M0 0xFF'})"})
    if fmt.is_nvfp4 and per_scale[_NV_NEG].sum():
        anomalies.append({"kind": "negative_scales", "message": f"{int(per_scale[_NV_NEG].sum())} "
                          "E4M3 block scale(s) have the sign bit set"})
    if bad[0]:
        anomalies.append({"kind": "invalid_codes", "message": f"{int(bad[0])} element code(s) "
                          f"outside {fmt.element.name}'s {fmt.element.bits}-bit range"})
    if bad[1]:
        anomalies.append({"kind": "nan_codes", "message": f"{int(bad[1])} element code(s) are "
                          f"NaN or Inf in {fmt.element.name}"})
    used = np.flatnonzero(per_scale)
    if blocks and used.tolist() == [0]:
        anomalies.append({"kind": "all_zero_scales", "message": f"all {blocks} block scales "
                          "are 0x00"})
    elif blocks >= CONSTANT_MIN_BLOCKS and used.size == 1:
        anomalies.append({"kind": "constant_scales", "message": f"all {blocks} block scales are "
                          f"{int(used[0]):#04x}"})
    interior = interior_scale_mask(fmt)
    sub = int(per_scale[1:8].sum()) if fmt.is_nvfp4 else 0
    fp = fingerprint(fmt, hist[interior].sum(axis=0), subnormal_scales=sub, against=against)
    if fmt.is_nvfp4:
        pos = [c for c in used.tolist() if c < 0x7F]
        fp["max_block_scale"] = hex(max(pos)) if pos else None
        fp["tensor_scale_from_amax"] = bool(pos) and max(pos) == 0x7E
        fp["subnormal_block_scales"] = sub
    if against is not None and fp["against"]["status"] != "consistent":
        st = fp["against"]["status"]
        anomalies.append({"kind": "against_mismatch", "message": f"--against {against}: "
                          f"{'profile does not define ' + q.fmt if st == 'not_applicable' else 'excluded by the block maxima'}"})
    return {
        "name": q.name, "file": q.codes.file, "layout": q.layout, "format": q.fmt,
        "shape": q.shape, "block_size": q.block_size, "blocks": blocks, "packed": q.packed,
        "codes": {"name": q.codes.name, "dtype": q.codes.dtype, "shape": list(q.codes.shape)},
        "scales": {"name": q.scales.name, "dtype": q.scales.dtype, "shape": list(q.scales.shape)},
        "scale_histogram": {f"{c:#04x}": int(per_scale[c]) for c in used.tolist()},
        "zero_blocks": int(hist[:, 0].sum()),
        "invalid_codes": int(bad[0]), "nan_codes": int(bad[1]), "padding": pad,
        "tensor_scale": _scalar_check(f, q.tensor_scale, "tensor_scale", anomalies),
        "input_scale": _scalar_check(f, q.input_scale, "input_scale", anomalies),
        "fingerprint": fp, "anomalies": anomalies,
    }


def _consensus(tensors) -> dict:
    """Per format: the profiles consistent with every tensor of it that had evidence."""
    out = {}
    for t in tensors:
        fp = t["fingerprint"]
        if fp["verdict"] == "no_evidence":
            continue
        ok = {p["profile"] for p in fp["profiles"] if p["status"] == "consistent"}
        out[t["format"]] = ok if t["format"] not in out else out[t["format"]] & ok
    return {k: sorted(v) for k, v in out.items()}


def scan(paths, layout="auto", fmt=None, against=None, progress=None, planned=None) -> dict:
    """Scan ``paths`` and return the ``mxref-scan/1`` document. ``progress(n_bytes)`` is
    called as codes are read; ``planned`` is :func:`plan`'s result when the caller already has
    it (to size a progress bar)."""
    if against is not None:
        against = get_profile(against).name
    planned = plan(paths, layout, fmt) if planned is None else planned
    files, tensors, unquantized = [], [], []
    for f, qs, left in planned:
        files.append({"path": str(f.path), "bytes": f.path.stat().st_size,
                      "tensors": len(f.tensors), "metadata": f.metadata})
        tensors += [_scan_tensor(f, q, against, progress) for q in qs]
        unquantized += [f"{f.path.name}:{n}" for n in left]
        f.close()
    kinds: dict = {}
    for t in tensors:
        for a in t["anomalies"]:
            kinds[a["kind"]] = kinds.get(a["kind"], 0) + 1
    verdicts: dict = {}
    for t in tensors:
        v = t["fingerprint"]["verdict"]
        verdicts[v] = verdicts.get(v, 0) + 1
    return {
        "schema": SCHEMA, "mxref_version": __version__,
        "options": {"layout": layout, "format": fmt, "against": against},
        "files": files, "tensors": tensors, "unquantized": unquantized,
        "summary": {"tensors": len(tensors), "blocks": sum(t["blocks"] for t in tensors),
                    "anomalies": sum(kinds.values()), "anomaly_kinds": kinds,
                    "verdicts": verdicts, "consensus": _consensus(tensors)},
        "exit": 1 if kinds else 0,
    }
