"""One-tensor NVFP4 quantize on the GPU (a quick check and timing, not a benchmark of
record): triton_quant.nvfp4_quantize of x[None] through the training launch
(nvfp4_quantize_rows) against mxref, then timed beside the block kernels it replaces and a
copy in the same process.

    PYTHONPATH=. python scripts/gpu_nvfp4_rows.py OUT.json
"""
from __future__ import annotations

import json
import sys

import numpy as np
import torch
import triton.testing

import mxref
from mxkernels.ops import kernels


def main():
    ks = kernels(torch.device("cuda"))
    tq = ks.modules["triton_quant"]
    doc = {"gpu": torch.cuda.get_device_name(), "rows": []}
    g = torch.Generator(device="cuda").manual_seed(0)
    xs = torch.randn(2048, 4096, device="cuda", generator=g).to(torch.bfloat16)
    xs[5, 7] = float("nan")
    xs[9, :16] *= 2.0 ** -130
    for prof in ("te_nvfp4", "ocp"):
        s, c, ts = ks.nvfp4_quantize(xs[None], prof)
        want = mxref.quantize(xs.float().cpu().numpy(), "nvfp4", prof, axis=-1)
        doc[f"mismatches_{prof}"] = int((s[0].cpu().numpy() != want.scales).sum() +
                                        (c[0].cpu().numpy() != want.codes).sum() +
                                        (np.float32(ts.cpu()[0]) != np.float32(want.tensor_scale)))
    x = torch.randn(8192, 8192, device="cuda", generator=g).to(torch.bfloat16)
    n = x.numel()
    copy = triton.testing.do_bench(lambda: x.clone(), return_mode="median")
    bw = 4 * n / (copy * 1e-3)
    real = tq.NVFP4_ROWS[0]
    for label, hook in (("one-tensor launch", real), ("block kernels", None)):
        tq.NVFP4_ROWS[0] = hook
        f = (lambda: ks.nvfp4_quantize(x[None], "te_nvfp4"))
        f()
        ms = triton.testing.do_bench(f, return_mode="median")
        doc["rows"].append({"arm": label, "us": ms * 1e3, "copy_us": copy * 1e3,
                            "of_copy": (2 * n + n + n / 16) / (ms * 1e-3) / bw})
        print(doc["rows"][-1], flush=True)
    tq.NVFP4_ROWS[0] = real
    print({k: v for k, v in doc.items() if k.startswith("mismatches")})
    with open(sys.argv[1], "w") as fh:
        json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
