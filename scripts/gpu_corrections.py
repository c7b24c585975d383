"""The corrections kernels on the GPU (a quick check and timing, not a benchmark of record):
triton_corrections.decomp_qdq (decomp-fixed's operand in one launch) against the torch chain
it replaces and against mxref; occ_bounds (radix select) against torch.topk's selections; the
TF32 and split-bf16 GEMMs against the fp32 matmul they replace. All timed in one process
(triton.testing.do_bench medians) beside an fp32 copy of the same tensor.

    PYTHONPATH=. python scripts/gpu_corrections.py OUT.json
"""
from __future__ import annotations

import json
import sys

import torch
import triton.testing

from mxkernels.training import mxlinear as M
from mxkernels.training import quant as Q
from mxkernels.training.recipes import RECIPES


def _bench(f):
    f()
    torch.cuda.synchronize()
    return triton.testing.do_bench(f, return_mode="median") * 1e3     # us


def main():
    dev = torch.device("cuda")
    tc = Q.triton_module("triton_corrections", dev)
    spec = RECIPES["decomp-fixed"].fprop.a
    doc = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}
    g = torch.Generator(device="cuda").manual_seed(0)
    for shape in ((16384, 768), (16384, 2048), (768, 16384)):
        x = torch.randn(*shape, device=dev, generator=g) * \
            torch.exp(torch.randn(shape[0], 1, device=dev, generator=g))
        x[::97, ::31] *= 400.0                                   # outlier blocks
        x[5, 7] = float("nan")
        x = x.contiguous()
        # bit check: the fused launch against the torch chain on the same GPU
        s, c, v, pt, sm = tc.decomp_qdq(x, spec)
        ref = Q._quantize_operand(x.clone(), spec, "torch", None)
        nan = torch.isnan(ref.values)
        same_v = torch.equal(torch.isnan(v), nan) and \
            torch.equal(v[~nan], ref.values[~nan])
        mism = int((s != ref.scales).sum() + (c != ref.codes).sum() +
                   (pt != ref.extra["passthrough"]).sum() +
                   (sm != ref.extra["macro_scales"]).sum()) + (0 if same_v else 1)
        copy = _bench(lambda: x.clone())
        fused = _bench(lambda: tc.decomp_qdq(x, spec))
        chain = _bench(lambda: Q._quantize_operand(x, spec, "torch", None))
        row = {"what": "decomp_qdq", "shape": list(shape), "mismatches": mism,
               "passthrough": int(pt.sum()), "fused_us": fused, "torch_chain_us": chain,
               "fp32_copy_us": copy, "speedup": chain / fused,
               # bytes: read fp32, write fp32 values + codes + passthrough + scales
               "of_copy": (copy / fused) * (4 + 4 + 1 + 1 + 1 / 32) / 8}
        doc["rows"].append(row)
        print(row, flush=True)
        xf = torch.nan_to_num(x)
        rlo, rhi = Q._occ_bounds(xf, 0.99)
        row = {"what": "occ_bounds q=0.99", "shape": list(shape),
               "topk_us": _bench(lambda: Q._occ_bounds(xf, 0.99)), "fp32_copy_us": copy}
        lo, hi = tc.occ_bounds(xf, 0.99)
        row["equal"] = bool((lo == rlo) & (hi == rhi))
        row["radix_us"] = _bench(lambda: tc.occ_bounds(xf, 0.99))
        doc["rows"].append(row)
        print(row, flush=True)
        if shape[1] <= 8192:
            vspec = RECIPES["ms-fp4"].fprop.a           # OCC 0.99 + vector-wise
            got = Q._quantize_operand(xf, vspec, "triton", None)
            ref = Q._quantize_operand(xf.clone(), vspec, "torch", None)
            mism = int((got.codes != ref.codes).sum() + (got.row_scale != ref.row_scale).sum()
                       + (got.values != ref.values).sum() +
                       (got.extra["occ_residual"] != ref.extra["occ_residual"]).sum())
            row = {"what": "ms-fp4 x operand (OCC + vector)", "shape": list(shape),
                   "mismatches": mism,
                   "triton_us": _bench(lambda: Q._quantize_operand(xf, vspec, "triton", None)),
                   "torch_us": _bench(lambda: Q._quantize_operand(xf, vspec, "torch", None)),
                   "vector_qdq_us": _bench(lambda: tc.vector_qdq(xf, None)),
                   "fp32_copy_us": copy}
            doc["rows"].append(row)
            print(row, flush=True)
    # GEMMs: TF32 on decomp values, split-bf16 on an fp32 operand, against the fp32 matmul
    a = tc.decomp_qdq(torch.randn(16384, 768, device=dev, generator=g), spec)[2]
    b = tc.decomp_qdq(torch.randn(768, 768, device=dev, generator=g), spec)[2]
    w = torch.randn(768, 768, device=dev, generator=g)
    ab = a.to(torch.bfloat16).float()
    with torch.autocast("cuda", enabled=False):
        for label, f in (("fp32 matmul (decomp values)", lambda: a @ b.t()),
                         ("tf32 (decomp values)", lambda: M._mm_tf32(a, b.t())),
                         ("fp32 matmul (bf16 x fp32)", lambda: ab @ w.t()),
                         ("split-bf16 x3 (bf16 x fp32)", lambda: M._mm_split3(ab, w, 1)),
                         ("bf16 mm, fp32 out", lambda: M._mm_bf16_f32(ab, w.t()))):
            row = {"what": "gemm", "arm": label, "us": _bench(f)}
            doc["rows"].append(row)
            print(row, flush=True)
        exact = (a.double() @ b.double().t())
        bound = (768 + 2) * 2.0 ** -24 * (a.abs().double() @ b.abs().double().t())
        for label, y in (("tf32", M._mm_tf32(a, b.t())), ("fp32", a @ b.t())):
            doc[f"gemm_err_over_bound_{label}"] = float(((y.double() - exact).abs() /
                                                         bound.clamp_min(1e-300)).max())
        exact = ab.double() @ w.double().t()
        bound = (768 + 2) * 2.0 ** -24 * (ab.abs().double() @ w.abs().double().t())
        for label, y in (("split3", M._mm_split3(ab, w, 1)), ("fp32_split_case", ab @ w.t())):
            doc[f"gemm_err_over_bound_{label}"] = float(((y.double() - exact).abs() /
                                                         bound.clamp_min(1e-300)).max())
    print({k: v for k, v in doc.items() if k.startswith("gemm_err")})
    with open(sys.argv[1], "w") as fh:
        json.dump(doc, fh, indent=1)
    bad = [r for r in doc["rows"] if r.get("mismatches") or r.get("equal") is False]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
