"""GPU check of the FP8 carrier (mxkernels.triton_carrier + mxkernels.training.carrier):

1. the compiled carrier kernel against mxref.mxfp4_to_fp8(group=128) byte for byte, both axes,
   bf16 and fp32 values, on edge tensors (NaN blocks, zeros, -0, tiny scales, spreads past the
   exact limit) and random ones;
2. in-run validation of one MXLinear with recipe mxfp4-fdw-fp8 at a llama-125m shape
   (T 4096, K 1024, N 2816), bf16 autocast: every record, the fallback counts, the carrier
   GEMM's error against its bound and against the plain fp32 bound;
3. do_bench medians: the carrier kernel against a bf16 copy of the same tensor, and one MXLinear
   forward + backward, mxfp4-fdw against mxfp4-fdw-fp8 (same process).

    python scripts/gpu_fp8_carrier.py OUT_DIR        (writes OUT_DIR/fp8_carrier.json)
"""
from __future__ import annotations

import json
import sys

import numpy as np
import torch
import triton.testing

import mxref
from mxkernels import triton_carrier as tcar
from mxref.fp8fp4 import mxfp4_to_fp8


def edge_values(rng, R=300, C=520):
    x = (rng.standard_normal((R, C)) * np.exp2(rng.integers(-30, 30, (R, 1)))).astype(np.float32)
    x[0, :32] = np.nan                    # a NaN block beside live ones
    x[1, :128] = np.nan                   # a whole NaN group
    x[2, :] = -0.0
    x[3, :] = 0.0
    x[4, :64] = np.float32(2.0 ** -140)   # scale byte 0 blocks
    x[5, 32:64] *= np.float32(2.0 ** -18)  # a spread past 15 + nu: rounded elements
    x[6, 64:96] *= np.float32(2.0 ** -16)
    x[7, :] = np.arange(C, dtype=np.float32) * 0.25
    return x


def kernel_check(rng) -> dict:
    res = {}
    for name, x in (("edge", edge_values(rng)),
                    ("random", rng.standard_normal((1024, 2816)).astype(np.float32))):
        for prof in ("ocp",):
            mx = mxref.quantize(x, "mxfp4", prof, axis=-1)
            ref = mxfp4_to_fp8(mx, group=128)
            v = torch.from_numpy(mxref.dequantize(mx).astype(np.float32)).cuda()
            for dt in (torch.bfloat16, torch.float32):
                for axis in (1, 0):
                    src = v.to(dt) if axis == 1 else v.t().contiguous().to(dt)
                    c = tcar.carrier(src, axis)
                    torch.cuda.synchronize()
                    codes = c.codes[:, :c.k].cpu().numpy()
                    g = c.group_bytes().cpu().numpy()
                    key = f"{name}/{str(dt).split('.')[-1]}/axis{axis}"
                    res[key] = {"code_mismatches": int((codes != ref.codes).sum()),
                                "group_mismatches": int((g != ref.scales).sum()),
                                "elements": int(ref.codes.size),
                                "rounded": int(ref.n_inexact)}
    return res


def capture_check() -> dict:
    from mxkernels.training.mxlinear import MXLinear
    from mxkernels.training.validate import capture_next, check_capture
    torch.manual_seed(0)
    lin = MXLinear(1024, 2816, bias=False, recipe="mxfp4-fdw-fp8", backend="triton",
                   device="cuda")
    x = torch.randn(4096, 1024, device="cuda", requires_grad=True)
    capture_next(lin)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = lin(x)
    (y.float() * torch.linspace(-1, 1, y.shape[-1], device="cuda")).sum().backward()
    recs = check_capture(lin)
    return {"records": [r.to_dict() for r in recs], "all_ok": all(r.ok for r in recs)}


def timing() -> dict:
    from mxkernels.training.mxlinear import MXLinear
    out = {}
    for R, C in ((16384, 1024), (16384, 2816), (2816, 1024)):
        v = torch.randn(R, C, device="cuda").to(torch.bfloat16)
        t_copy = triton.testing.do_bench(lambda: v.clone(), warmup=25, rep=200)
        for axis in (1, 0):
            t = triton.testing.do_bench(lambda: tcar.carrier(v, axis), warmup=25, rep=200)
            out[f"carrier {R}x{C} axis{axis}"] = {"ms": t, "bf16_copy_ms": t_copy,
                                                  "copy_over_carrier": t_copy / t}
    from mxkernels import triton_fast as tf
    for R, C in ((16384, 1024), (16384, 2816), (2816, 1024)):
        v = torch.randn(R, C, device="cuda").to(torch.bfloat16)
        t_copy = triton.testing.do_bench(lambda: v.clone(), warmup=25, rep=200)
        t_qdq = triton.testing.do_bench(lambda: tf.quantize_dequantize(
            v, "mxfp4", "ocp", rows=True, cols=True), warmup=25, rep=200)
        t_car = triton.testing.do_bench(lambda: tcar.qdq_carrier(v, rows=True, cols=True),
                                        warmup=25, rep=200)
        out[f"dual qdq {R}x{C}"] = {"bf16_values_ms": t_qdq, "fp8_carrier_ms": t_car,
                                    "bf16_copy_ms": t_copy,
                                    "carrier_over_values": t_car / t_qdq}
    x = torch.randn(16384, 1024, device="cuda", requires_grad=True)
    for N in (1024, 2816):
        for recipe in ("mxfp4-fdw", "mxfp4-fdw-fp8"):
            torch.manual_seed(0)
            lin = MXLinear(1024, N, bias=False, recipe=recipe, backend="triton", device="cuda")
            g = torch.randn(16384, N, device="cuda", dtype=torch.bfloat16)

            def step():
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    y = lin(x)
                y.backward(g)
            t = triton.testing.do_bench(step, warmup=10, rep=200)
            out[f"mxlinear fwd+bwd T16384 K1024 N{N} {recipe}"] = {"ms": t}
        lin = torch.nn.Linear(1024, N, bias=False, device="cuda")

        def step_bf16():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = lin(x)
            y.backward(g)
        out[f"mxlinear fwd+bwd T16384 K1024 N{N} bf16 nn.Linear"] = {
            "ms": triton.testing.do_bench(step_bf16, warmup=10, rep=200)}
    return out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    rng = np.random.default_rng(0)
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    res["kernel"] = kernel_check(rng)
    print(json.dumps(res["kernel"], indent=1))
    try:
        res["capture"] = capture_check()
        for r in res["capture"]["records"]:
            print(r["gemm"], r["operand"], r["ok"], r["detail"][:160])
    except Exception as e:  # noqa: BLE001 (reported, the timings still run)
        res["capture"] = {"error": f"{type(e).__name__}: {e}"}
        print("capture failed:", res["capture"]["error"])
    res["timing"] = timing()
    for k, v in res["timing"].items():
        print(k, json.dumps(v))
    json.dump(res, open(f"{out_dir}/fp8_carrier.json", "w"), indent=1)


if __name__ == "__main__":
    main()
