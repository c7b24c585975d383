"""GPU check of the fake-quantization kernel (triton_fast.quantize_dequantize) and the MXLinear
fast path: bit-exactness against mxref on edge-case tensors, an in-run validation capture, and
do_bench medians against a device copy measured in the same run.

    python scripts/gpu_qdq_check.py OUT_DIR        (writes OUT_DIR/qdq_check.json)
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import triton.testing

import mxref
from mxkernels import triton_fast as tf


def edge_tensor(rng, R=257, C=300):
    x = (rng.standard_normal((R, C)) * np.exp2(rng.integers(-30, 30, (R, 1)))).astype(np.float32)
    x[0, :32] = np.nan
    x[1, 40] = np.inf
    x[2, :] = -0.0
    x[3, :64] = np.float32(2.0 ** -140)                      # fp32 subnormals: scale byte 0
    x[4, :] = np.float32(3.0e38) * np.sign(x[4, :])
    x[5, :32] = np.arange(32, dtype=np.float32) * 0.25       # element-grid ties
    x[:, 7] = np.nextafter(np.float32(4.0), np.float32(0))   # amax = 2^k - 1 ulp in column 7
    return x


def check(rng) -> dict:
    x = edge_tensor(rng)
    res = {}
    for fmt, prof in tf.FAST_COMBOS:
        if prof not in ("ocp", "rceil"):
            continue
        for od, rep in ((a, b) for a in (torch.float32, torch.bfloat16) for b in range(2)):
            # rep 1 launches through the cached launcher (tf._LAUNCHED), rep 0 through the JIT
            rv, cv, q = tf.quantize_dequantize(torch.from_numpy(x).cuda(), fmt, prof, rows=True,
                                               cols=True, out_dtype=od, with_codes=True)
            bad = 0
            for ax, v, sc, cd in ((-1, rv, q[0], q[1]), (0, cv, q[2], q[3])):
                mx = mxref.quantize(x, fmt, prof, axis=ax)
                e = torch.from_numpy(mxref.dequantize(mx).astype(np.float32)).to(od).float()
                g = v.float().cpu()
                bad += int((~((g.view(torch.int32) == e.view(torch.int32)) |
                              (g.isnan() & e.isnan()))).sum())
                bad += int((sc.cpu().numpy() != mx.scales).sum())
                bad += int((cd.cpu().numpy() != mx.codes).sum())
            res[f"{fmt}/{prof}/{str(od).split('.')[-1]}/{'cached' if rep else 'jit'}"] = bad
    return res


def capture() -> list:
    from mxkernels.training.mxlinear import MXLinear
    from mxkernels.training.validate import capture_next, check_capture
    torch.manual_seed(0)
    lin = MXLinear(768, 2048, bias=False, recipe="mxfp4-fdw", backend="triton", device="cuda")
    x = torch.randn(4096, 768, device="cuda", requires_grad=True)
    capture_next(lin)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = lin(x)
    y.float().pow(2).mean().backward()
    return [r.to_dict() for r in check_capture(lin)]


def bench() -> list:
    rows = []
    for R, C, dt in ((8192, 8192, torch.bfloat16), (16384, 768, torch.float32),
                     (16384, 2048, torch.bfloat16)):
        x = torch.randn(R, C, device="cuda", dtype=dt)
        copy = triton.testing.do_bench(lambda x=x: x.clone(), warmup=25, rep=200,
                                       return_mode="median")
        copy_bw = 2 * x.numel() * x.element_size() / (copy * 1e-3)
        for label, r, c in (("rows+cols", True, True), ("rows", True, False)):
            def f(x=x, r=r, c=c):
                return tf.quantize_dequantize(x, "mxfp4", "ocp", rows=r, cols=c)
            f()
            ms = triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")
            moved = x.numel() * (x.element_size() + 2 * (int(r) + int(c)))
            rows.append({"shape": [R, C], "src": str(dt).split(".")[-1], "orient": label,
                         "median_us": ms * 1e3, "copy_us": copy * 1e3,
                         "bytes": moved, "frac_of_copy_bw": moved / (ms * 1e-3) / copy_bw})
            print(rows[-1], flush=True)
    return rows


def sweep() -> list:
    """Tile / warp candidates of the two-orientation launch (median us)."""
    rows = []
    for R, C, dt in ((16384, 768, torch.float32), (16384, 2048, torch.bfloat16)):
        x = torch.randn(R, C, device="cuda", dtype=dt)
        for br, bc, nw in ((32, 128, 4), (32, 64, 4), (64, 64, 4), (64, 64, 8), (64, 128, 8),
                           (32, 256, 8), (128, 64, 8), (32, 128, 8)):
            def f(x=x, br=br, bc=bc, nw=nw):
                return tf.quantize_dequantize(x, "mxfp4", "ocp", rows=True, cols=True,
                                              block_rows=br, block_cols=bc, num_warps=nw)
            f()
            ms = triton.testing.do_bench(f, warmup=25, rep=100, return_mode="median")
            rows.append({"shape": [R, C], "br": br, "bc": bc, "warps": nw, "us": ms * 1e3})
            print(rows[-1], flush=True)
    return rows


def host() -> dict:
    """Host cost per call (us) on tiny tensors, where the launch path, not the GPU, binds."""
    from mxkernels.training.mxlinear import MXLinear
    x = torch.randn(64, 64, device="cuda")
    ce = tf.qdq_constexprs("mxfp4", "ocp", "float32", rows=True, cols=True, block_rows=32,
                           block_cols=128)
    rv = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    cv = torch.empty_like(rv)
    bits = x.view(torch.int32)

    def per_call(f, n=2000):
        for _ in range(20):
            f()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n * 1e6

    lin = torch.nn.Linear(64, 64, bias=False, device="cuda")
    mx = MXLinear.from_linear(lin, "mxfp4-fdw", backend="triton")
    xi = torch.randn(64, 64, device="cuda", requires_grad=True)

    def fb(m):
        def f():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = m(xi)
            y.sum().backward()
        return f

    def qdq():
        return tf.quantize_dequantize(x, "mxfp4", "ocp", rows=True, cols=True)

    tf._LAUNCH_CACHE[0] = False
    res = {"quantize_dequantize_jit": per_call(qdq), "mxlinear_fast_fwd_bwd_jit": per_call(fb(mx), 500)}
    tf._LAUNCH_CACHE[0] = True
    res |= {
        "quantize_dequantize": per_call(qdq),
        "raw_jit_launch": per_call(lambda: tf.mx_qdq_kernel[(1,)](bits, rv, cv, rv, rv, rv, rv,
                                                                  64, 64, **ce, num_warps=4)),
        "torch_empty_x2": per_call(lambda: (torch.empty(64, 64, device="cuda"),
                                            torch.empty(64, 64, device="cuda"))),
        "torch_mm": per_call(lambda: torch.mm(rv, cv)),
        "nn_linear_fwd_bwd": per_call(fb(lin), 500),
        "mxlinear_fast_fwd_bwd": per_call(fb(mx), 500),
    }
    print("host us per call", res, flush=True)
    return res


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    doc = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    doc["bitexact_mismatches"] = check(np.random.default_rng(0))
    print("mismatches", doc["bitexact_mismatches"], flush=True)
    doc["capture"] = capture()
    print("capture", [(r["gemm"], r["operand"], r["ok"]) for r in doc["capture"]], flush=True)
    print("capture ok", all(r["ok"] for r in doc["capture"]), flush=True)
    doc["host_us"] = host()
    if "--host-only" not in sys.argv:
        doc["bench"] = bench()
        doc["sweep"] = sweep()
    doc["seconds"] = time.time() - t0
    (out / "qdq_check.json").write_text(json.dumps(doc, indent=1) + "\n")
    ok = all(v == 0 for v in doc["bitexact_mismatches"].values()) and \
        all(r["ok"] for r in doc["capture"])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
