"""Is a quantizer row of bench/gpu_kernels.py GPU time or host time? Times the fast MXFP4
quantizers (8192 x 8192 bf16, packed, rows / columns / dual) and a device copy two ways:
``triton.testing.do_bench`` on the Python call (what gpu_kernels.py does: CUDA events around
each call, L2 flushed before it) and ``do_bench_cudagraph`` on a graph of the same call (GPU
time only). One check per kernel against mxref first. Prints one JSON line per row.

    python scripts/gpu_host_vs_graph.py
"""
import json
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mxref  # noqa: E402
from mxkernels.loader import load_kernels  # noqa: E402

N = 8192
fast = load_kernels(False).modules["triton_fast"]
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn((N, N), generator=g, device="cuda").to(torch.bfloat16)
dst = torch.empty_like(x)
xc = x[:64].float().cpu().numpy()
rows = {
    "copy": lambda: dst.copy_(x),
    "fast mxfp4 axis=-1": lambda: fast.quantize_fast(x, "mxfp4", "ocp", axis=-1, packed=True),
    "fast mxfp4 axis=0": lambda: fast.quantize_fast(x, "mxfp4", "ocp", axis=0, packed=True),
    "dual mxfp4": lambda: fast.quantize_dual(x, "mxfp4", "ocp", packed=True),
}
s, c = rows["fast mxfp4 axis=-1"]()
ref = mxref.quantize(xc, "mxfp4", "ocp", axis=-1)
ok = bool((s[:64].cpu().numpy() == ref.scales).all() and
          (c[:64].cpu().numpy() == ref.packed()).all())
print(json.dumps({"check rows 0-63 vs mxref": ok}), flush=True)
for name, fn in rows.items():
    fn()
    plain = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3
    graph = triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median") * 1e3
    print(json.dumps({"row": name, "do_bench_us": round(plain, 1),
                      "cudagraph_us": round(graph, 1)}), flush=True)
