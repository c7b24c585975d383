"""GPU check of the fused training fake quantization (triton_train.qdq: rotation and / or SR
per orientation): bit-exactness against mxref on full edge-case tensors, in-run validation
captures of the recipes that use it, and do_bench medians against the plain qdq launch and a
device copy measured in the same run.

    python scripts/gpu_fused_check.py OUT_DIR        (writes OUT_DIR/fused_check.json)
    NVFP4_ONLY=1 python scripts/gpu_fused_check.py OUT_DIR   (the NVFP4 parts only)
    ONLY_RECIPES=mxfp4-fdw-sr,nvfp4-te python scripts/gpu_fused_check.py OUT_DIR
        (the captures and fast = generic of these recipes only: no kernel checks, no timings)
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import triton.testing
from gpu_qdq_check import edge_tensor

import mxref
from mxkernels import triton_fast as tf
from mxkernels import triton_train as tt
from mxkernels import triton_train_nvfp4 as tn
from mxref.quantize import random_bits
from mxref.rotate import sign_vector

CASES = {"h16": (16, None, None), "h16-te16": (16, ("mask", 0xA5F0), None),
         "rht16": (16, ("random", 7, 3, 9), None), "h32-random": (32, ("random", 1, 2, 3), None),
         "sr": (0, None, 12345), "rht16+sr": (16, ("random", 7, 3, 9), 2**40 + 1)}


def _ref(x, fmt, n, signs, seed):
    if n:
        s = "none" if signs is None else (
            np.array([-1 if (signs[1] >> j) & 1 else 1 for j in range(n)], dtype=np.int8)
            if signs[0] == "mask" else sign_vector("random", n, seed=signs[1], step=signs[2],
                                                   tensor_id=signs[3]))
        x = mxref.rotate(x, n, axis=-1, signs=s)
    p = mxref.get_profile("ocp")
    rb = None
    if seed is not None:
        p = p.replace(name="ocp+sr", rounding="stochastic")
        rb = random_bits(x.shape, seed, 0)
    return mxref.quantize(x, fmt, p, axis=-1, rbits=rb)


def check(rng) -> dict:
    x = edge_tensor(rng, R=1024, C=768)
    res = {}
    for fmt in ("mxfp4", "mxfp8_e4m3"):
        for name, (n, signs, seed) in CASES.items():
            for rep in range(2):        # rep 1: the cached launcher
                rv, cv, q = tt.qdq(torch.from_numpy(x).cuda(), fmt, rows=True, cols=True,
                                   out_dtype=torch.float32, with_codes=True, rot_n=n,
                                   row_signs=signs, col_signs=signs, row_sr=seed,
                                   col_sr=None if seed is None else seed + 1)
                bad = 0
                for xx, v, sc, cd, sd in ((x, rv, q[0], q[1], seed),
                                          (np.ascontiguousarray(x.T), cv.T, q[2].T, q[3].T,
                                           None if seed is None else seed + 1)):
                    mx = _ref(xx, fmt, n, signs, sd)
                    e = torch.from_numpy(mx.dequantize().astype(np.float32))
                    g = v.float().cpu().contiguous()
                    bad += int((~((g.view(torch.int32) == e.view(torch.int32)) |
                                  (g.isnan() & e.isnan()))).sum())
                    bad += int((sc.cpu().numpy() != mx.scales).sum())
                    bad += int((cd.cpu().numpy() != mx.codes).sum())
                res[f"{fmt}/{name}/{'cached' if rep else 'jit'}"] = bad
    return res


def check_nvfp4(rng) -> dict:
    """triton_train_nvfp4.qdq on the GPU against mxref on the edge tensor (plus a block of
    subnormal elements among normal ones): codes, scales, T and values of both orientations."""
    from mxkernels.training.quant import nvfp4_values
    x = edge_tensor(rng, R=1024, C=768)
    x[16:32, :] *= np.float32(2.0 ** -135)
    x[16:32, ::8] = 1.0
    res = {}
    for prof in ("te_nvfp4", "ocp"):
        for name, (n, signs, seed) in CASES.items():
            if n == 32:
                continue
            for rep in range(2):
                rv, cv, q, ts = tn.qdq(torch.from_numpy(x).cuda(), prof, rows=True, cols=True,
                                       out_dtype=torch.float32, with_codes=True, rot_n=n,
                                       row_rot=False, col_signs=signs, row_sr=seed,
                                       col_sr=None if seed is None else seed + 1)
                bad = 0
                for k, (xx, v, sc, cd, sd, nn) in enumerate((
                        (x, rv, q[0], q[1], seed, 0),
                        (np.ascontiguousarray(x.T), cv.T, q[2].T, q[3].T,
                         None if seed is None else seed + 1, n))):
                    xr = mxref.rotate(xx, nn, axis=-1, signs=_host(signs, nn)) if nn else xx
                    pr = mxref.get_profile(prof)
                    if sd is not None:
                        pr = pr.replace(name=prof + "+sr", rounding="stochastic")
                    mx = mxref.quantize(xr, "nvfp4", pr, axis=-1, seed=sd)
                    e = nvfp4_values(torch.from_numpy(mx.scales), torch.from_numpy(mx.codes))
                    g = v.float().cpu().contiguous()
                    bad += int((~((g.view(torch.int32) == e.view(torch.int32)) |
                                  (g.isnan() & e.isnan()))).sum())
                    bad += int((sc.cpu().numpy() != mx.scales).sum())
                    bad += int((cd.cpu().numpy() != mx.codes).sum())
                    bad += int(np.float32(ts[k].item()) != np.float32(mx.tensor_scale))
                res[f"nvfp4/{prof}/{name}/{'cached' if rep else 'jit'}"] = bad
    return res


def check_last_program(rng, reps: int = 200) -> dict:
    """The NVFP4 tensor constants come from the last amax program to finish: with the programs
    running concurrently, T of both orientations must be mxref's T of the whole tensor's amax
    wherever the amax element sits (R x C with a 3e4 element at a random place per repetition;
    T depends on the amax alone)."""
    want = {}
    for prof in ("te_nvfp4", "ocp"):
        probe = np.zeros((1, 16), np.float32)
        probe[0, 0] = 3.0e4
        want[prof] = np.float32(mxref.quantize(probe, "nvfp4", prof, axis=-1).tensor_scale)
    bad = {p: 0 for p in want}
    for i in range(reps):
        x = torch.randn(8192, 768, device="cuda")
        x.view(-1)[int(rng.integers(x.numel()))] = 3.0e4 * (1 if i % 2 else -1)
        for prof, w in want.items():
            ts = tn.qdq(x, prof, rows=True, cols=True)[3].cpu().numpy()
            bad[prof] += int((ts != w).sum())
    return {f"nvfp4/last_program/{p}": b for p, b in bad.items()}


def _host(signs, n):
    if signs is None:
        return "none"
    if signs[0] == "mask":
        return np.array([-1 if (signs[1] >> j) & 1 else 1 for j in range(n)], dtype=np.int8)
    return sign_vector("random", n, seed=signs[1], step=signs[2], tensor_id=signs[3])


NVFP4_ONLY = os.environ.get("NVFP4_ONLY") == "1"
SWEEP = os.environ.get("NVFP4_SWEEP") == "1"        # the NVFP4 tile sweep with NVFP4_ONLY
ONLY = [r for r in os.environ.get("ONLY_RECIPES", "").split(",") if r]


def _recipe(name):
    """A named recipe or experiment variant (MXLinear takes the Recipe itself)."""
    from mxkernels.training.recipes import RECIPES, VARIANTS
    return {**RECIPES, **VARIANTS}[name]


def capture() -> list:
    from mxkernels.training.mxlinear import MXLinear
    from mxkernels.training.validate import capture_next, check_capture
    out = []
    for recipe in ONLY or (("nvfp4-te",) if NVFP4_ONLY else (
            "mxfp4-fdw-h16", "mxfp4-fdw-rht", "mxfp4-fdw-sr", "fp4-activations", "quartet",
            "nvfp4-te")):
        torch.manual_seed(0)
        lin = MXLinear(768, 2048, bias=False, recipe=_recipe(recipe), backend="triton",
                       device="cuda")
        lin.layer_id, lin.step = 3, 11
        x = torch.randn(4096, 768, device="cuda", requires_grad=True)
        capture_next(lin)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = lin(x)
        y.float().pow(2).mean().backward()
        out += [{"recipe": recipe, **r.to_dict()} for r in check_capture(lin)]
    return out


def identity() -> dict:
    """Fast path vs generic path on CUDA in fp32 (no autocast): y, dx, dW and db bit for bit,
    per recipe (the CPU tests check the same through the interpreter)."""
    from mxkernels.training import mxlinear as M
    from mxkernels.training.mxlinear import MXLinear
    res = {}
    for recipe in ONLY or (("nvfp4-te",) if NVFP4_ONLY else ("mxfp4-fdw-h16", "mxfp4-fdw-sr",
                                                              "quartet", "nvfp4-te")):
        torch.manual_seed(1)
        lin = MXLinear(768, 2048, bias=True, recipe=_recipe(recipe), backend="triton",
                       device="cuda")
        lin.layer_id, lin.step = 2, 5
        x0 = torch.randn(4096, 768, device="cuda")
        got = []
        for fast in (True, False):
            M.FAST_PATH[0] = fast
            lin.weight.grad = lin.bias.grad = None
            x = x0.clone().requires_grad_(True)
            y = lin(x)
            y.pow(2).mean().backward()
            got.append((y.detach(), x.grad, lin.weight.grad.clone(), lin.bias.grad.clone()))
        M.FAST_PATH[0] = True
        res[recipe] = {n: int((a != b).sum()) for n, a, b in zip(("y", "dx", "dW", "db"), *got)}
    return res


def bench() -> list:
    rows = []
    for R, C in ((16384, 768), (16384, 3072), (8192, 8192)):
        x = torch.randn(R, C, device="cuda", dtype=torch.bfloat16)
        copy = triton.testing.do_bench(lambda x=x: x.clone(), warmup=25, rep=200,
                                       return_mode="median")
        copy_bw = 2 * x.numel() * x.element_size() / (copy * 1e-3)
        arms = {"plain qdq (triton_fast)": lambda x=x: tf.quantize_dequantize(
                    x, "mxfp4", rows=True, cols=True),
                "fused, no rotation/SR": lambda x=x: tt.qdq(x, "mxfp4", rows=True, cols=True),
                "fused H16": lambda x=x: tt.qdq(x, "mxfp4", rows=True, cols=True, rot_n=16),
                "fused RHT16": lambda x=x: tt.qdq(x, "mxfp4", rows=True, cols=True, rot_n=16,
                                                  row_signs=("random", 1, 2, 3),
                                                  col_signs=("random", 1, 2, 4)),
                "fused H32": lambda x=x: tt.qdq(x, "mxfp4", rows=True, cols=True, rot_n=32),
                "fused SR": lambda x=x: tt.qdq(x, "mxfp4", rows=True, cols=True, row_sr=1,
                                               col_sr=2),
                # NVFP4 (amax pass + qdq): nvfp4-te's x (columns RHT16) and dy (+ SR)
                "nvfp4 te, cols RHT16": lambda x=x: tn.qdq(x, "te_nvfp4", rows=True, cols=True,
                                                           rot_n=16, row_rot=False,
                                                           col_signs=("mask", 0xA5F0)),
                "nvfp4 te, SR + cols RHT16": lambda x=x: tn.qdq(
                    x, "te_nvfp4", rows=True, cols=True, rot_n=16, row_rot=False,
                    col_signs=("mask", 0xA5F0), row_sr=1, col_sr=2),
                "nvfp4 te, plain": lambda x=x: tn.qdq(x, "te_nvfp4", rows=True, cols=True)}
        for label, f in arms.items():
            if NVFP4_ONLY and "nvfp4" not in label and label != "fused, no rotation/SR":
                continue
            f()
            ms = triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")
            moved = x.numel() * (x.element_size() + 4)
            rows.append({"shape": [R, C], "arm": label, "median_us": ms * 1e3,
                         "copy_us": copy * 1e3, "frac_of_copy_bw": moved / (ms * 1e-3) / copy_bw})
            print(rows[-1], flush=True)
        # NVFP4 tile sweep (BR, BC, num_warps) of the plain and the dy-like launch (the
        # launcher's defaults: 16 x 256 x 4 RNE, 16 x 128 x 4 SR)
        # one-warp tiles keep each column block inside a warp: no cross-warp reduction
        sweep = {"nvfp4 te, plain": ((16, 32, 1), (16, 64, 1), (16, 128, 1), (32, 64, 1)),
                 "nvfp4 te, SR + cols RHT16": ((16, 32, 1), (16, 64, 1), (16, 128, 1))}
        for arm, tiles in sweep.items():
            for tile in () if NVFP4_ONLY and not SWEEP else tiles:
                tn.TILE[0] = tile
                f = arms[arm]
                f()
                ms = triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")
                tn.TILE[0] = None
                moved = x.numel() * (x.element_size() + 4)
                rows.append({"shape": [R, C], "arm": f"{arm}, tile {tile}",
                             "median_us": ms * 1e3, "copy_us": copy * 1e3,
                             "frac_of_copy_bw": moved / (ms * 1e-3) / copy_bw})
                print(rows[-1], flush=True)
    return rows


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    doc = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    if os.environ.get("BENCH_ONLY") == "1":           # timings only (no verdict)
        doc["bench"] = bench()
        (out / "fused_bench.json").write_text(json.dumps(doc, indent=1) + "\n")
        return
    doc["bitexact_mismatches"] = {} if NVFP4_ONLY or ONLY else check(np.random.default_rng(0))
    if not ONLY:
        doc["bitexact_mismatches"].update(check_nvfp4(np.random.default_rng(1)))
        doc["bitexact_mismatches"].update(check_last_program(np.random.default_rng(2)))
    print("mismatches", doc["bitexact_mismatches"], flush=True)
    doc["capture"] = capture()
    print("capture", [(r["recipe"], r["gemm"], r["operand"], r["ok"]) for r in doc["capture"]],
          flush=True)
    doc["fast_vs_generic_mismatches"] = identity()
    print("fast vs generic", doc["fast_vs_generic_mismatches"], flush=True)
    doc["bench"] = [] if ONLY else bench()
    doc["seconds"] = time.time() - t0
    (out / "fused_check.json").write_text(json.dumps(doc, indent=1) + "\n")
    ok = all(v == 0 for v in doc["bitexact_mismatches"].values()) and \
        all(r["ok"] for r in doc["capture"]) and \
        all(v == 0 for d in doc["fast_vs_generic_mismatches"].values() for v in d.values())
    print("ok", ok)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
