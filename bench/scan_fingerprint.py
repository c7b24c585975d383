"""How many blocks does the scale-rule fingerprint of `mxref scan` need for a confident call?

For each true source (torchao 0.18 ``to_mx`` in every ScaleCalculationMode, mxref's
triton_kernels_round_down profile, and a non-amax source: scales taken over 64 elements but
stored per 32), each weight distribution and each tensor size (blocks), TRIALS disjoint
tensors are fingerprinted with ``mxref.scan.fingerprint.fingerprint`` (the function the scan
calls on its interior block-max histogram). An outcome is

* ``right``: a confident call that contains the true profile (or, for the non-amax source,
  ``not_amax_rule``);
* ``ambiguous``: no confident call yet, the truth still consistent;
* ``wrong``: a confident call without the truth, the truth excluded, or ``not_amax_rule`` for
  an amax rule.

Distributions: ``student_t`` (3 dof, per-row spread e^N(0,1): heavy-tailed trained-like
weights) and ``init_normal`` (N(0, 0.02) everywhere: the random-init a transformers model gets
from ``initializer_range=0.02``; narrow block-amax spread, the hard case for the log-uniform
model behind p_unseen).

Writes bench/results/scan_fingerprint.{json,md,png}. Run: python bench/scan_fingerprint.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import mxref
from mxref.profiles import PROFILES
from mxref.scan.fingerprint import fingerprint, interior_scale_mask, magnitude_table

SIZES = (4, 8, 16, 32, 64, 128, 256, 1024)
TRIALS = 40
OUT = Path(__file__).parent / "results"
TORCHAO = {"FLOOR": "torchao_floor", "RCEIL": "torchao_rceil", "CEIL": "torchao_ceil",
           "EVEN": "torchao_even"}


def weights(dist, n_blocks, seed):
    rng = np.random.default_rng(seed)
    rows = n_blocks * 32 // 1024
    if dist == "student_t":
        x = rng.standard_t(3, (rows, 1024)) * np.exp(rng.normal(0, 1, (rows, 1)))
    else:
        x = rng.normal(0, 0.02, (rows, 1024))
    return x.astype(np.float32)


def source(name, fmt, x):
    """(scales [blocks], block max magnitude [blocks]) of x under a true source."""
    if name in TORCHAO:
        import torch
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
        from torchao.prototype.mx_formats.mx_tensor import to_mx
        dt = torch.float4_e2m1fn_x2 if fmt == "mxfp4" else torch.float8_e4m3fn
        s, d = to_mx(torch.from_numpy(x), dt, 32, getattr(ScaleCalculationMode, name))
        s = s.view(torch.uint8).numpy().reshape(-1)
        c = d.contiguous().view(torch.uint8).numpy().reshape(-1)
        if fmt == "mxfp4":
            c = np.stack([c & 0xF, c >> 4], axis=-1).reshape(-1)
    elif name == "block64_stored_per_32":
        q = mxref.quantize(x, fmt, "ocp", block_size=64)
        s, c = np.repeat(q.scales, 2, axis=1).reshape(-1), q.codes.reshape(-1)
    else:
        q = mxref.quantize(x, fmt, name)
        s, c = q.scales.reshape(-1), q.codes.reshape(-1)
    return s, magnitude_table(fmt)[c].reshape(-1, 32).max(axis=1)


def truth_profile(name):
    return TORCHAO.get(name, name)


def outcome(name, fp):
    if name == "block64_stored_per_32":
        return "right" if fp["verdict"] == "not_amax_rule" else (
            "ambiguous" if fp["verdict"] == "ambiguous" else "wrong")
    t = truth_profile(name)
    rec = next(r for r in fp["profiles"] if r["profile"] == t)
    if rec["status"] == "excluded" or fp["verdict"] == "not_amax_rule":
        return "wrong"
    if fp["verdict"] == "confident":
        return "right" if t in fp["call"] else "wrong"
    return "ambiguous"


def call_class(fp):
    if fp["verdict"] in ("not_amax_rule", "ambiguous", "no_evidence"):
        return fp["verdict"]
    return "+".join(sorted({PROFILES[p].scale_rule for p in fp["call"]}))


def run():
    rows = []
    interior = None
    for fmt, sources in (("mxfp4", [*TORCHAO, "triton_kernels_round_down",
                                    "block64_stored_per_32"]),
                         ("mxfp8_e4m3", [*TORCHAO, "triton_kernels_round_down"])):
        interior = interior_scale_mask(fmt)
        for dist in ("student_t", "init_normal"):
            for name in sources:
                s, m = source(name, fmt, weights(dist, max(SIZES) * TRIALS, 7))
                for n in SIZES:
                    counts = {"right": 0, "ambiguous": 0, "wrong": 0}
                    classes: dict = {}
                    for t in range(TRIALS):
                        sl = slice(t * n, (t + 1) * n)
                        ok = interior[s[sl]]
                        fp = fingerprint(fmt, np.bincount(m[sl][ok], minlength=256))
                        counts[outcome(name, fp)] += 1
                        c = call_class(fp)
                        classes[c] = classes.get(c, 0) + 1
                    rows.append({"format": fmt, "dist": dist, "source": name, "blocks": n,
                                 "trials": TRIALS, **counts, "calls": classes})
                    print(fmt, dist, name, n, counts, file=sys.stderr)
    return rows


def needed(rows, frac=0.95):
    """Per (format, dist, source): the smallest size from which on every size measured had
    >= frac of its trials right (None: not even the largest)."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["format"], r["dist"], r["source"]), []).append(r)
    out = {}
    for k, rs in groups.items():
        out[k] = None
        for r in sorted(rs, key=lambda r: -r["blocks"]):
            if r["right"] < frac * r["trials"]:
                break
            out[k] = r["blocks"]
    return out


def markdown(rows) -> str:
    need = needed(rows)
    lines = ["# Scale-rule fingerprint vs tensor size", "",
             ("Generated by `python bench/scan_fingerprint.py` (mxref "
              f"{mxref.__version__}); {TRIALS} disjoint tensors per cell. A tensor of N blocks "
              "is fingerprinted from its block maxima (docs/scan.md). `right` = confident call "
              "containing the truth (non-amax source: `not_amax_rule`); `ambiguous` = the "
              "truth still consistent, no call; `wrong` = anything else."), "",
             "## Blocks needed for >= 95% right calls", "",
             "| format | weights | true source | blocks needed |", "|---|---|---|---|"]
    for (fmt, dist, src), n in need.items():
        lines.append(f"| {fmt} | {dist} | {src} | {n if n else f'> {max(SIZES)}'} |")
    lines += ["", f"## Outcomes per size (right / ambiguous / wrong of {TRIALS}), top call",
              "",
              "| format | weights | true source | " + " | ".join(map(str, SIZES)) + " |",
              "|---|---|---|" + "---|" * len(SIZES)]
    cell = {}
    for r in rows:
        top = max(r["calls"].items(), key=lambda kv: kv[1])[0]
        cell.setdefault((r["format"], r["dist"], r["source"]), []).append(
            f"{r['right']}/{r['ambiguous']}/{r['wrong']} {top}")
    for (fmt, dist, src), cs in cell.items():
        lines.append(f"| {fmt} | {dist} | {src} | " + " | ".join(cs) + " |")
    lines += ["", "## Wrong calls", "",
              "Every cell with a wrong outcome, and what was called instead:", ""]
    lines += [f"- {r['format']} {r['dist']} {r['source']}, {r['blocks']} blocks: {r['wrong']}/"
              f"{r['trials']} wrong; calls {r['calls']}" for r in rows if r["wrong"]] or ["- none"]
    return "\n".join(lines) + "\n"


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, dist in zip(axes, ("student_t", "init_normal")):
        keys = sorted({(r["format"], r["source"]) for r in rows if r["dist"] == dist})
        for fmt, src in keys:
            rs = [r for r in rows if (r["format"], r["dist"], r["source"]) == (fmt, dist, src)]
            ax.plot([r["blocks"] for r in rs], [r["right"] / r["trials"] for r in rs],
                    marker="o", ms=3, label=f"{fmt} {src}")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{dist}: share of right calls")
        ax.set_xlabel("blocks in the tensor")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    rows = run()
    OUT.mkdir(exist_ok=True)
    (OUT / "scan_fingerprint.json").write_text(json.dumps(
        {"mxref_version": mxref.__version__, "trials": TRIALS, "sizes": SIZES, "rows": rows},
        indent=1) + "\n")
    (OUT / "scan_fingerprint.md").write_text(markdown(rows))
    plot(rows, OUT / "scan_fingerprint.png")
