"""The four-word SR stream on one GPU: bit checks against mxref, then kernel timings of the
one-word and four-word streams side by side (triton.testing.do_bench medians, same process,
a copy of the same tensor as the bandwidth reference).

    PYTHONPATH=. python scripts/gpu_sr_words.py OUT.json

Checks: the fused training launches (MX both orientations, NVFP4 with the RHT16 columns) and
the standalone SR quantizers (MX, NVFP4) on edge-laden tensors, the four-word stream against
mxref.quantize(..., seed=, rng_words=4). Timings: the same launches with sr_words 1 and 4, an
RNE launch of the same shape, and 8192 x 8192 standalone SR quantizers.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch
import triton.testing

import mxref
from mxkernels.ops import kernels

# DEV=cpu: the checks alone on small shapes through the interpreter (a smoke run)
DEV = os.environ.get("DEV", "cuda")


def _edge(R, C, g):
    x = torch.randn(R, C, device=DEV, generator=g) * 3
    x[0, :32] = 5.0                      # grid points and ties: the words decide the ties
    x[1, :32] = 2.5
    x[2, 5] = float("nan")
    x[3, :16] *= 2.0 ** -130
    x[4, 7] = -0.0
    return x.to(torch.bfloat16)


def _sr_prof(name):
    return mxref.get_profile(name).replace(name=f"{name}+sr", rounding="stochastic")


def _mism(got, want):
    return int((got.cpu().numpy() != want).sum())


def checks(ks) -> dict:
    tt, tn, sr = (ks.modules[m] for m in ("triton_train", "triton_train_nvfp4", "triton_sr"))
    g = torch.Generator(device=DEV).manual_seed(1)
    out = {}
    for R, C in ((1024, 768), (768, 1024), (96, 102)) if DEV == "cuda" else ((64, 48), (40, 36)):
        x = _edge(R, C, g)
        xf = x.float().cpu().numpy()
        xt = np.ascontiguousarray(xf.T)
        _, _, q = tt.qdq(x, "mxfp4", rows=True, cols=True, with_codes=True, row_sr=11,
                         col_sr=12, sr_words=4)
        rr = mxref.quantize(xf, "mxfp4", _sr_prof("ocp"), seed=11, rng_words=4)
        cr = mxref.quantize(xt, "mxfp4", _sr_prof("ocp"), seed=12, rng_words=4)
        out[f"mx fused {R}x{C}"] = (_mism(q[0], rr.scales) + _mism(q[1], rr.codes) +
                                    _mism(q[2].T, cr.scales) + _mism(q[3].T, cr.codes))
        if R % 16 == 0 and C % 16 == 0:
            _, _, q, ts = tn.qdq(x, "te_nvfp4", rows=True, cols=True, with_codes=True,
                                 rot_n=16, row_rot=False, col_signs=("mask", 0xA5F0),
                                 row_sr=13, col_sr=14, sr_words=4)
            signs = np.array([-1 if (0xA5F0 >> j) & 1 else 1 for j in range(16)], np.int8)
            rr = mxref.quantize(xf, "nvfp4", _sr_prof("te_nvfp4"), seed=13, rng_words=4)
            cr = mxref.quantize(mxref.rotate(xt, 16, axis=-1, signs=signs), "nvfp4",
                                _sr_prof("te_nvfp4"), seed=14, rng_words=4)
            tsw = np.array([rr.tensor_scale, cr.tensor_scale], np.float32).view(np.uint32)
            out[f"nvfp4 fused {R}x{C}"] = (_mism(q[0], rr.scales) + _mism(q[1], rr.codes) +
                                           _mism(q[2].T, cr.scales) + _mism(q[3].T, cr.codes) +
                                           _mism(ts.view(torch.int32), tsw.view(np.int32)))
        s, c = sr.quantize_sr(x, "mxfp4", "ocp", seed=15, offset=3, words=4)
        w = mxref.quantize(xf, "mxfp4", _sr_prof("ocp"), seed=15, rng_offset=3, rng_words=4)
        out[f"mx standalone {R}x{C}"] = _mism(s, w.scales) + _mism(c, w.codes)
        if C % 16 == 0:
            s, c, _ = sr.quantize_nvfp4_sr(x[None], "te_nvfp4", seed=16, words=4)
            w = mxref.quantize(xf, "nvfp4", _sr_prof("te_nvfp4"), seed=16, rng_words=4)
            out[f"nvfp4 standalone {R}x{C}"] = _mism(s[0], w.scales) + _mism(c[0], w.codes)
        print(out, flush=True)
    return out


def timings(ks) -> list:
    tt, tn, sr = (ks.modules[m] for m in ("triton_train", "triton_train_nvfp4", "triton_sr"))
    rows = []

    def time(label, shape, f, moved, copy_bw, copy):
        f()
        ms = triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")
        rows.append({"shape": list(shape), "arm": label, "median_us": ms * 1e3,
                     "copy_us": copy * 1e3, "of_copy": moved / (ms * 1e-3) / copy_bw})
        print(rows[-1], flush=True)

    for R, C in ((16384, 768), (16384, 3072)):
        x = torch.randn(R, C, device="cuda", dtype=torch.bfloat16)
        copy = triton.testing.do_bench(lambda x=x: x.clone(), warmup=25, rep=200,
                                       return_mode="median")
        bw = 2 * x.numel() * 2 / (copy * 1e-3)
        moved = x.numel() * 6            # read bf16 once, write both orientations' bf16
        time("MX fused, RNE", (R, C), lambda: tt.qdq(x, "mxfp4", rows=True, cols=True),
             moved, bw, copy)
        for w in (1, 4):
            time(f"MX fused, SR words={w}", (R, C),
                 lambda w=w: tt.qdq(x, "mxfp4", rows=True, cols=True, row_sr=1, col_sr=2,
                                    sr_words=w), moved, bw, copy)
        time("NVFP4 te fused, RNE + cols RHT16", (R, C),
             lambda: tn.qdq(x, "te_nvfp4", rows=True, cols=True, rot_n=16, row_rot=False,
                            col_signs=("mask", 0xA5F0)), moved, bw, copy)
        for w in (1, 4):
            time(f"NVFP4 te fused, SR words={w} + cols RHT16", (R, C),
                 lambda w=w: tn.qdq(x, "te_nvfp4", rows=True, cols=True, rot_n=16,
                                    row_rot=False, col_signs=("mask", 0xA5F0), row_sr=1,
                                    col_sr=2, sr_words=w), moved, bw, copy)
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    copy = triton.testing.do_bench(lambda: x.clone(), warmup=25, rep=200, return_mode="median")
    bw = 2 * x.numel() * 2 / (copy * 1e-3)
    n = x.numel()
    for w in (1, 4):
        time(f"MX standalone quantize_sr mxfp4 words={w}", x.shape,
             lambda w=w: sr.quantize_sr(x, "mxfp4", "ocp", seed=1, words=w),
             2 * n + n + n / 32, bw, copy)
        time(f"NVFP4 standalone quantize_nvfp4_sr words={w}", x.shape,
             lambda w=w: sr.quantize_nvfp4_sr(x[None], "te_nvfp4", seed=1, words=w),
             2 * n + n + n / 16, bw, copy)
    return rows


def main():
    ks = kernels(torch.device(DEV))
    doc = {"gpu": torch.cuda.get_device_name() if DEV == "cuda" else "cpu (interpreter)",
           "torch": torch.__version__}
    doc["mismatches"] = checks(ks)
    doc["rows"] = timings(ks) if DEV == "cuda" else []
    with open(sys.argv[1], "w") as fh:
        json.dump(doc, fh, indent=1)
    bad = {k: v for k, v in doc["mismatches"].items() if v}
    print("mismatches:", bad or "none")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
