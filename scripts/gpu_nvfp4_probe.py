"""Where the NVFP4 training launch spends its time (a probe, not a benchmark of record): the
amax and qdq kernels' own times (torch.profiler), their registers / spills, and variants of the
qdq kernel built from this source with parts removed (timing only: a variant is not exact).

    PYTHONPATH=. python scripts/gpu_nvfp4_probe.py OUTDIR
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.testing

ROOT = Path(__file__).resolve().parents[1]
SRC = (ROOT / "mxkernels" / "triton_train_nvfp4.py").read_text()
FAST_T = "        if _max_along(t, 0) >= 0x05000000:        # T >= 2^-117: the blocks on the FPU"
SLOW = "        if _max_along(_max_along(slow.to(tl.int32), 1), 0) > 0:"
VARIANTS = {
    "current": [],
    "no tiny-T branch": [(FAST_T, "        if True:")],
    "no slow tiles": [(SLOW, "        if False:")],
    "neither": [(FAST_T, "        if True:"), (SLOW, "        if False:")],
}


def load(name, edits):
    src = SRC
    for a, b in edits:
        assert a in src, a
        src = src.replace(a, b)
    d = Path(tempfile.mkdtemp())
    p = d / f"tnv_{abs(hash(name))}.py"
    p.write_text(src)
    spec = importlib.util.spec_from_file_location(p.stem, p)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def kernel_times(f):
    from torch.profiler import ProfilerActivity, profile
    f()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            f()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0):
            t = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total")
            out[e.key[:60]] = round(t / 20, 2)
    return out


def regs(m):
    res = {}
    for kn in ("nvfp4_train_amax_kernel", "nvfp4_qdq_train_kernel"):
        k = getattr(m, kn)
        for dev_cache in getattr(k, "device_caches", {}).values():
            for ck in dev_cache[0].values():
                res.setdefault(kn, []).append({"regs": getattr(ck, "n_regs", None),
                                               "spills": getattr(ck, "n_spills", None)})
    return res


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    doc = {"gpu": torch.cuda.get_device_name(), "rows": []}
    from mxkernels import triton_fast
    triton_fast._LAUNCH_CACHE[0] = False        # plain launches: the JIT cache is inspectable
    only = os.environ.get("VARIANTS")          # a comma-separated subset
    for name, edits in VARIANTS.items():
        if only and name not in only.split(","):
            continue
        m = load(name, edits)
        for R, C in ((16384, 768), (16384, 3072)):
            x = torch.randn(R, C, device="cuda", dtype=torch.bfloat16)
            copy = triton.testing.do_bench(lambda: x.clone(), return_mode="median")
            arms = {
                "plain": lambda: m.qdq(x, "te_nvfp4", rows=True, cols=True),
                "rows": lambda: m.qdq(x, "te_nvfp4", rows=True, cols=False),
                "cols": lambda: m.qdq(x, "te_nvfp4", rows=False, cols=True),
                "sr+rht16": lambda: m.qdq(x, "te_nvfp4", rows=True, cols=True, rot_n=16,
                                          row_rot=False, col_signs=("mask", 0xA5F0),
                                          row_sr=1, col_sr=2)}
            for arm, f in arms.items():
                if name != "current" and arm in ("rows", "cols"):
                    continue
                f()
                ms = triton.testing.do_bench(f, return_mode="median")
                row = {"variant": name, "shape": [R, C], "arm": arm, "us": ms * 1e3,
                       "copy_us": copy * 1e3,
                       "of_copy": x.numel() * 6 / (ms * 1e-3) / (4 * x.numel() / (copy * 1e-3))}
                if name == "current" or arm == "plain":
                    row["kernels_us"] = kernel_times(f)
                doc["rows"].append(row)
                print(json.dumps(row), flush=True)
        try:
            doc.setdefault("regs", {})[name] = regs(m)
        except Exception as e:  # noqa: BLE001 (the JIT cache's layout differs by version)
            doc.setdefault("regs", {})[name] = repr(e)
        print(name, doc["regs"][name], flush=True)
    (out / "nvfp4_probe.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
