"""Scale-rule fingerprint: which named profiles could have produced a tensor's blocks.

An amax-driven scale rule fixes where a block's largest element lands on the element grid: under
the OCP floor rule an E2M1 block maximum is 4 or 6 (codes 0x6, 0x7), the round-up rule (RCEIL)
also leaves 3 (0x5), CEIL 2..4 (0x4-0x6), round-down always 6 (0x7). The sets are not written
down here: :func:`rule_table` derives them from mxref's own semantics by quantizing, under each
profile, one block per amax significand across a binade (every 12-bit significand, two fp32 ulps
either side of it, and the midpoints), and collecting the block maximum's code. Midpoints also
give each code's share when log2(amax) is uniform within a binade, which turns "a code this
rule produces was never seen in N blocks" into a probability.

Only blocks whose scale byte is far from the clamps count as evidence (E8M0 0x02-0xFD; NVFP4
E4M3 normal scales 0x08-0x7E): a clamped scale can leave any maximum.
"""
from __future__ import annotations

from functools import cache

import numpy as np

from ..errors import MXRefError
from ..formats import get_format
from ..profiles import PROFILES, get_profile
from ..quantize import quantize

__all__ = [
    "ALPHA",
    "applicable_profiles",
    "fingerprint",
    "interior_scale_mask",
    "magnitude_table",
    "rule_table",
]

ALPHA = 1e-3          # a consistent rule whose unseen codes had this chance or less is "unlikely"
_GRID_BITS = 12


def magnitude_table(fmt) -> np.ndarray:
    """int16[256]: the magnitude of each element code (the block-max statistic), -1 for a code
    outside the format's range, -2 for a NaN or Inf code."""
    el = get_format(fmt).element
    out = np.full(256, -1, dtype=np.int16)
    if el.name == "int8":
        out[:] = np.abs(np.arange(256, dtype=np.uint8).view(np.int8).astype(np.int16))
        return out
    for c in range(1 << el.bits):
        out[c] = -2 if el.is_nan_code(c) or el.is_inf_code(c) else c & (el.sign_mask - 1)
    return out


def interior_scale_mask(fmt) -> np.ndarray:
    """bool[256]: scale bytes whose blocks are fingerprint evidence (no clamp reached)."""
    m = np.zeros(256, dtype=bool)
    if get_format(fmt).is_nvfp4:
        m[0x08:0x7F] = True
    else:
        m[0x02:0xFE] = True
    return m


def applicable_profiles(fmt) -> list:
    """The profiles (read from PROFILES now) that define ``fmt``."""
    f = get_format(fmt)
    out = []
    for p in PROFILES.values():
        try:
            p.check_format(f)
        except MXRefError:
            continue
        if p.nvfp4_amax_scope != "tensor" or p.nvfp4_tile_2d:
            continue    # the rule table models one tensor scale and 1x16 blocks (te_nvfp4's)
        if p.amax_floor:
            continue    # below its floor the block max no longer sets the scale (dsv4_vllm:
            #             every block under 1e-4 gets 0x70), so the table read in [1, 2) does
            #             not hold there; above it these are `rceil`, which is fingerprinted
        out.append(p)
    return out


@cache
def _table(prof, fmt_name: str) -> tuple:
    f = get_format(fmt_name)
    bs = prof.block_size or f.block_size
    k = np.arange(1 << _GRID_BITS, dtype=np.int64) << (23 - _GRID_BITS)
    one = np.int64(127 << 23)                       # amax in [1, 2): an interior binade
    pts = (one + k[:, None] + np.arange(-2, 3)[None, :]).ravel()
    mids = one + k + (1 << (22 - _GRID_BITS))
    bits = np.concatenate([pts, mids]).astype(np.uint32)
    x = np.zeros((bits.size, bs), dtype=np.float32)
    x[:, 0] = bits.view(np.float32)
    kw = {"global_amax": np.float32(64.0)} if f.is_nvfp4 else {}
    if prof.rounding == "stochastic":
        kw["seed"] = 0
    mx = quantize(x, f, prof, axis=-1, **kw)
    mag = magnitude_table(f)[mx.codes[:, 0]]
    support = tuple(sorted(set(mag.tolist())))
    w = np.log2((1 + (np.arange(1 << _GRID_BITS) + 1) / 2**_GRID_BITS)
                / (1 + np.arange(1 << _GRID_BITS) / 2**_GRID_BITS))
    share = np.bincount(mag[pts.size:], weights=w, minlength=256)
    return support, tuple(share.tolist())


def rule_table(profile, fmt) -> dict:
    """{'support': sorted block-max magnitudes ``profile`` can leave on interior blocks of
    ``fmt``, 'share': {magnitude: probability under log-uniform amax}}."""
    support, share = _table(get_profile(profile), get_format(fmt).name)
    return {"support": list(support), "share": {c: share[c] for c in support}}


def fingerprint(fmt, maxcode_counts: np.ndarray, subnormal_scales: int = 0,
                against: str | None = None) -> dict:
    """The verdict for one tensor from its interior block-max histogram (int64[256]).

    Each applicable profile is ``excluded`` (a block max it never leaves was seen, or NVFP4
    subnormal block scales under a profile that clamps them to 2^-6) or ``consistent`` with
    ``p_unseen``: the chance that N blocks under it show none of the codes it leaves that were
    not seen. Verdict: ``no_evidence`` (no interior block), ``not_amax_rule`` (no profile
    consistent: a search-based picker such as GPTQ or Four-over-Six, or a rule mxref does not
    name), ``confident`` (the profiles with p_unseen >= ALPHA share one support set: the data
    cannot tell them apart), else ``ambiguous`` (more blocks needed)."""
    counts = np.asarray(maxcode_counts, dtype=np.int64)
    n = int(counts.sum())
    seen = {int(c) for c in np.flatnonzero(counts)}
    profiles = []
    for p in applicable_profiles(fmt):
        t = rule_table(p, fmt)
        extra = sorted(seen - set(t["support"]))
        rec = {"profile": p.name, "support": t["support"]}
        if extra:
            rec.update(status="excluded", reason=f"block max code(s) {[hex(c) for c in extra]} "
                       f"never left by scale rule {p.scale_rule!r}")
        elif subnormal_scales and p.nvfp4_scale_min == "tiny":
            rec.update(status="excluded", reason=f"{subnormal_scales} subnormal E4M3 block "
                       "scale(s); this profile clamps block scales to >= 2^-6")
        else:
            q = sum(t["share"][c] for c in t["support"] if c not in seen)
            rec.update(status="consistent", p_unseen=float((1.0 - min(q, 1.0)) ** n))
        profiles.append(rec)
    cons = [r for r in profiles if r["status"] == "consistent"]
    likely = [r for r in cons if r["p_unseen"] >= ALPHA]
    if n == 0:
        verdict = "no_evidence"
    elif not cons:
        verdict = "not_amax_rule"
    elif len({tuple(r["support"]) for r in likely}) == 1:
        verdict = "confident"
    else:
        verdict = "ambiguous"
    others = [r["p_unseen"] for r in cons if r not in likely]
    out = {"blocks": n, "block_max_counts": {hex(c): int(counts[c]) for c in sorted(seen)},
           "verdict": verdict, "call": [r["profile"] for r in likely] if n else [],
           "confidence": (1.0 - max(others, default=0.0)) if verdict == "confident" else None,
           "profiles": profiles}
    if against is not None:
        rec = next((r for r in profiles if r["profile"] == against), None)
        out["against"] = {"profile": against,
                          "status": "not_applicable" if rec is None else rec["status"],
                          "p_unseen": None if rec is None else rec.get("p_unseen")}
    return out
