"""GPU check and timing of the bit-exact MXFP8 block-sequential GEMM (int8 planes).

    python scripts/gpu_gemm_planes.py OUT [--size 8192]

1. bits: random finite operands of every FP8 pair at a few shapes and tile configurations,
   compared bit for bit with mxref.gemm.gemm_codes(mode="block_sequential") (CPU reference);
2. timing at size^3 (triton.testing.do_bench, medians): each tile configuration of the planes
   kernel for E4M3 x E4M3, E4M3 x E2M1 (fp64 epilogue) and E5M2 x E4M3 (int64 epilogue),
   against cuBLAS BF16 and the fast path measured in
   the same run. Writes OUT/gemm_planes.json and OUT/gemm_planes.md."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import triton

from mxkernels import triton_gemm as g
from mxref.formats import ELEMENT_FORMATS
from mxref.gemm import gemm_codes

EL = {"mxfp4": "e2m1", "mxfp6_e3m2": "e3m2", "mxfp8_e4m3": "e4m3", "mxfp8_e5m2": "e5m2",
      "mxint8": "int8"}
CONFIGS = [(64, 64, 4, 2), (128, 64, 8, 3), (128, 128, 8, 3)]


def finite_codes(fmt):
    el = ELEMENT_FORMATS[EL[fmt]]
    return np.array([c for c in range(1 << el.bits) if not isinstance(el.decode(c), float)],
                    np.uint8)


def operands(rng, fmt, rows, k, lo=118, hi=136):
    return (rng.choice(finite_codes(fmt), (rows, k)),
            rng.integers(lo, hi, (rows, -(-k // 32)), dtype=np.uint8))


def main():
    out = Path(sys.argv[1])
    size = int(sys.argv[sys.argv.index("--size") + 1]) if "--size" in sys.argv else 8192
    out.mkdir(parents=True, exist_ok=True)
    dev = "cuda"
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__, "bits": [], "timing": []}
    rng = np.random.default_rng(0)
    t = lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(dev)
    pairs = [("mxfp8_e4m3", "mxfp8_e4m3"), ("mxfp8_e5m2", "mxfp8_e4m3"),
             ("mxfp4", "mxfp8_e5m2"), ("mxint8", "mxfp8_e4m3"), ("mxfp8_e4m3", "mxfp6_e3m2")]
    for fa, fb in pairs:
        for (M, N, K) in ((256, 192, 512), (129, 70, 1000)):
            ac, asc = operands(rng, fa, M, K, 0, 255)
            bc, bsc = operands(rng, fb, N, K, 0, 255)
            asc[:8], bsc[:8] = 127, 127
            ref = gemm_codes(ac, asc, fa, bc, bsc, fb, mode="block_sequential")
            for bm, bn, w, st in CONFIGS:
                y = g.mx_gemm(t(asc), t(ac), t(bsc), t(bc), fa, fb, block_m=bm, block_n=bn,
                              num_warps=w, num_stages=st).cpu().numpy()
                yb, rb = y.view(np.uint32), ref.view(np.uint32)
                bad = int((~((yb == rb) | (np.isnan(y) & np.isnan(ref)))).sum())
                res["bits"].append({"pair": f"{fa}x{fb}", "shape": [M, N, K],
                                    "config": [bm, bn, w, st], "mismatches": bad,
                                    "outputs": int(y.size), "nan": int(np.isnan(ref).sum()),
                                    "inf": int(np.isinf(ref).sum())})
                print(res["bits"][-1], flush=True)
    S = size
    a16 = torch.randn(S, S, device=dev, dtype=torch.bfloat16)
    b16 = torch.randn(S, S, device=dev, dtype=torch.bfloat16)
    ms_bf16 = triton.testing.do_bench(lambda: torch.mm(a16, b16.t()), warmup=25, rep=200)
    flops = 2.0 * S ** 3
    res["timing"].append({"what": "cuBLAS BF16 torch.mm", "ms": ms_bf16,
                          "tflops": flops / ms_bf16 / 1e9})
    del a16, b16
    for fa, fb in (("mxfp8_e4m3", "mxfp8_e4m3"), ("mxfp8_e4m3", "mxfp4"),
                   ("mxfp8_e5m2", "mxfp8_e4m3")):
        ac, asc = operands(rng, fa, S, S)
        bc, bsc = operands(rng, fb, S, S)
        A, As, B, Bs = t(ac), t(asc), t(bc), t(bsc)
        ms = triton.testing.do_bench(lambda: g.mx_gemm(As, A, Bs, B, fa, fb, mode="fast"),
                                     warmup=10, rep=100)
        res["timing"].append({"what": f"fast path {fa}x{fb}", "ms": ms,
                              "tflops": flops / ms / 1e9, "x_cublas_bf16": ms_bf16 / ms})
        print(res["timing"][-1], flush=True)
        for bm, bn, w, st in CONFIGS:
            fn = lambda: g.mx_gemm(As, A, Bs, B, fa, fb, block_m=bm, block_n=bn, num_warps=w,
                                   num_stages=st)
            try:
                t0 = time.time()
                fn()
                torch.cuda.synchronize()
                ms = triton.testing.do_bench(fn, warmup=2, rep=20)
            except Exception as e:                       # noqa: BLE001 - recorded, not hidden
                res["timing"].append({"what": f"planes {fa}x{fb}", "config": [bm, bn, w, st],
                                      "error": f"{type(e).__name__}: {str(e)[:300]}"})
                print(res["timing"][-1], flush=True)
                continue
            res["timing"].append({"what": f"planes {fa}x{fb}", "config": [bm, bn, w, st],
                                  "ms": ms, "tflops": flops / ms / 1e9,
                                  "x_cublas_bf16": ms_bf16 / ms,
                                  "first_call_s": time.time() - t0})
            print(res["timing"][-1], flush=True)
        del A, B
    (out / "gemm_planes.json").write_text(json.dumps(res, indent=1))
    lines = [f"# MXFP8 bit-exact GEMM (int8 planes), {res['device']}", "",
             f"torch {res['torch']}, triton {res['triton']}; {S}^3; do_bench medians", "",
             "| kernel | config (BM, BN, warps, stages) | ms | TFLOP/s | x cuBLAS BF16 |",
             "|---|---|---:|---:|---:|"]
    for r in res["timing"]:
        if "error" in r:
            lines.append(f"| {r['what']} | {r.get('config', '')} | error | | |")
        else:
            lines.append(f"| {r['what']} | {r.get('config', '-')} | {r['ms']:.3f} | "
                         f"{r['tflops']:.1f} | {r.get('x_cublas_bf16', 1.0):.3f} |")
    bad = sum(r["mismatches"] for r in res["bits"])
    lines += ["", f"bits: {len(res['bits'])} runs, {bad} mismatches against "
              "mxref gemm_codes(mode='block_sequential')"]
    (out / "gemm_planes.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
