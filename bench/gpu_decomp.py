"""The fused decomp launch (triton_corrections.decomp_qdq: outlier fallback + macro-block
scaling + MX qdq, decomp-fixed's operand) on the GPU: each way the training path can hand it an
operand, at llama-125m's shapes, checked then timed against a device copy in the same run.

    python bench/gpu_decomp.py --out bench/results/decomp_h200.json

Ways (the operand [R, C], quantized along C):
* ``fp32``: a contiguous fp32 operand (W, and before bf16 was read: x and dy);
* ``bf16``: a contiguous bf16 operand read as it is (x, dy under autocast);
* ``fp32 view``: a transposed fp32 view read in place (W^T; and dy^T, x^T before);
* ``bf16 view``: a transposed bf16 view read in place (DECOMP_VIEW_READ);
* ``bf16 view via copy``: the view copied to a contiguous bf16 transpose by torch first, then
  ``bf16``, timed together;
* ``bf16 view via transpose``, ``fp32 view via transpose``: made contiguous by
  triton_corrections.transpose_contiguous's tiled transpose first (the training path's
  default), timed together;
* ``bf16 -> fp32 view``: the old path of a bf16 view (an fp32 copy keeping the transposed
  strides, then ``fp32 view``), timed together.
Each row at each tile configuration asked for (rows per tile x warps, ``--tiles``), timed as
a CUDA graph replay (``triton.testing.do_bench_cudagraph``: GPU time; the launcher's host time
is what a training step's graph removes). Before a row
is timed its values, scales, codes, passthrough mask and S_M are compared bit for bit with the
torch chain of mxkernels.training.quant on the same operand's fp32 value (the CPU-independent
reference the training path's own tests hold both to); a mismatching row is reported and not
timed. Compulsory bytes: the source read once, values fp32 + codes + passthrough written
(+ scales and S_M), plus the copy's read and write for the two-step rows. Median of the replays.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import triton.testing

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SCHEMA = "mxkernels-decomp-bench/1"
DEV = "cuda"
SHAPES = {"x 16384x768": (16384, 768), "dy 16384x2048": (16384, 2048),
          "W 2048x768": (2048, 768)}


def _operand(R, C, dtype, g):
    x = torch.randn((R, C), generator=g, device=DEV) * torch.exp(
        torch.randn((R, 1), generator=g, device=DEV))
    x[::97, ::13] *= 300.0                                   # outlier blocks
    return x.to(dtype)


def _same(got, want) -> str | None:
    names = ("scales", "codes", "values", "passthrough", "macro_scales")
    for n, a, b in zip(names, got, want):
        if (a is None) != (b is None):
            return f"{n}: one side missing"
        if a is None:
            continue
        a, b = a.contiguous(), b.contiguous()
        if a.dtype == torch.float32:
            a, b = a.view(torch.int32), b.view(torch.int32)
            z = (a & 0x7FFFFFFF) == 0                      # +-0 alike (the module's rule)
            a = torch.where(z, 0, a)
            b = torch.where((b & 0x7FFFFFFF) == 0, 0, b)
        bad = (a.to(torch.int64) != b.to(torch.int64)).sum().item()
        if bad:
            return f"{n}: {bad} mismatches"
    return None


def _reference(t, spec):
    from mxkernels.training import quant as Q
    q = Q._quantize_operand(t.float().contiguous(), spec, "torch", 0)
    return (q.scales, q.codes, q.values, q.extra.get("passthrough"),
            q.extra.get("macro_scales"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiles", default="32x4,16x4,32x8",
                    help="rows-per-tile x warps configurations, comma separated")
    ap.add_argument("--rep", type=int, default=200, help="do_bench rep (ms)")
    ap.add_argument("--smoke", action="store_true",
                    help="CPU (the interpreter), small shapes, one untimed call: the script's "
                         "own check, no speed")
    args = ap.parse_args(argv)
    global DEV
    if args.smoke:
        DEV = "cpu"
        SHAPES.clear()
        SHAPES.update({"smoke 64x256": (64, 256)})
    from gpu_kernels import device_info
    if args.smoke:
        def device_info():
            return {"gpu": "cpu (smoke)", "torch": torch.__version__, "triton": "interpreter",
                    "commit": "smoke"}
    from mxkernels.training.recipes import RECIPES
    from mxkernels import triton_corrections as tc
    spec = RECIPES["decomp-fixed"].fprop.a
    tiles = [tuple(int(v) for v in s.split("x")) for s in args.tiles.split(",")]
    g = torch.Generator(device=DEV).manual_seed(0)
    rows = []

    def bench(fn):
        if args.smoke:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e6
        # a CUDA graph of the call: the GPU's time, not the host's enqueue (the launcher's
        # Python costs ~80 us a call, more than the small operands' kernels)
        return triton.testing.do_bench_cudagraph(fn, rep=args.rep, return_mode="median") * 1e3

    for label, (R, C) in SHAPES.items():
        src = torch.empty((R, C), dtype=torch.bfloat16, device=DEV)
        dst = torch.empty_like(src)
        copy_us = bench(lambda: dst.copy_(src))
        copy_gbps = 4 * R * C / copy_us / 1e3
        xb = _operand(R, C, torch.bfloat16, g)
        xf = _operand(R, C, torch.float32, g)
        xbv = xb.t().contiguous().t()            # a transposed view of [C, R] storage
        xfv = xf.t().contiguous().t()
        want_b, want_f = _reference(xb, spec), _reference(xf, spec)
        out_b = R * C * (4 + 1 + 1) + R * (C // 32) + R * (C // 128) * 4
        ways = [
            ("fp32", xf, want_f, lambda t=xf: tc.decomp_qdq(t, spec), 4 * R * C + out_b),
            ("bf16", xb, want_b, lambda t=xb: tc.decomp_qdq(t, spec), 2 * R * C + out_b),
            ("fp32 view", xfv, want_f, lambda t=xfv: tc.decomp_qdq(t, spec), 4 * R * C + out_b),
            ("bf16 view", xbv, want_b, lambda t=xbv: tc.decomp_qdq(t, spec), 2 * R * C + out_b),
            ("bf16 view via copy", xbv, want_b,
             lambda t=xbv: tc.decomp_qdq(t.contiguous(), spec), 6 * R * C + out_b),
            ("bf16 view via transpose", xbv, want_b,
             lambda t=xbv: tc.decomp_qdq(tc.transpose_contiguous(t), spec), 6 * R * C + out_b),
            ("fp32 view via transpose", xfv, want_f,
             lambda t=xfv: tc.decomp_qdq(tc.transpose_contiguous(t), spec),
             12 * R * C + out_b),
            ("bf16 -> fp32 view", xbv, want_b,
             lambda t=xbv: tc.decomp_qdq(t.to(torch.float32), spec), 10 * R * C + out_b),
        ]
        saved = dict(tc.DECOMP_TILES)
        for br, warps in tiles:
            for way, t, want, fn, nbytes in ways:
                tc.DECOMP_TILES.clear()
                tc.DECOMP_TILES.update({k: (br, warps) for k in saved})
                row = {"shape": label, "way": way, "tile": f"{br}x{warps}", "bytes": nbytes}
                try:
                    err = _same(fn(), want)
                except Exception as e:  # noqa: BLE001  (a config that fails to compile)
                    err = f"{type(e).__name__}: {e}"
                if err:
                    row.update(status="failed", check=err)
                else:
                    us = bench(fn)
                    row.update(status="ok", check="0 mismatches", us=round(us, 2),
                               gbps=round(nbytes / us / 1e3, 1),
                               of_copy=round(nbytes / us / 1e3 / copy_gbps, 3))
                rows.append(row)
                print(json.dumps(row), flush=True)
        tc.DECOMP_TILES.clear()
        tc.DECOMP_TILES.update(saved)
        rows.append({"shape": label, "way": "device copy bf16", "us": round(copy_us, 2),
                     "gbps": round(copy_gbps, 1), "status": "ok"})
        for way, v, fn in (
                ("bf16 transpose_contiguous alone", xbv, lambda: tc.transpose_contiguous(xbv)),
                ("bf16 torch transposed copy alone", xbv, lambda: xbv.contiguous()),
                ("fp32 transpose_contiguous alone", xfv, lambda: tc.transpose_contiguous(xfv)),
                ("fp32 torch transposed copy alone", xfv, lambda: xfv.contiguous())):
            it = torch.int16 if v.element_size() == 2 else torch.int32
            ok = torch.equal(fn().view(it), v.contiguous().view(it))
            nb = 2 * v.element_size() * R * C
            row = {"shape": label, "way": way, "bytes": nb,
                   "status": "ok" if ok else "failed",
                   "check": "equal to torch's copy" if ok else "differs from torch's copy"}
            if ok:
                us = bench(fn)
                row.update(us=round(us, 2), gbps=round(nb / us / 1e3, 1),
                           of_copy=round(nb / us / 1e3 / copy_gbps, 3))
            rows.append(row)
            print(json.dumps(row), flush=True)
    doc = {"schema": SCHEMA, "device": device_info(), "spec": str(spec),
           "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    md = [f"# decomp_qdq on {doc['device']['gpu']} ({doc['when']})", "",
          f"Operand spec: `{spec}`. torch {doc['device']['torch']}, triton "
          f"{doc['device']['triton']}, commit {doc['device']['commit'][:10]}. Median of CUDA "
          "graph replays (do_bench_cudagraph); `of copy`: compulsory bytes per second over a "
          "bf16 device copy's.", "",
          "| shape | way | tile (rows x warps) | us | GB/s | of copy | check |",
          "|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        md.append(f"| {r['shape']} | {r['way']} | {r.get('tile', '')} | {r.get('us', '')} | "
                  f"{r.get('gbps', '')} | {r.get('of_copy', '')} | "
                  f"{r.get('check', r['status'])} |")
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    return 1 if any(r["status"] == "failed" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
