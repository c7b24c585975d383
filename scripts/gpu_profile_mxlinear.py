"""Where does an MXLinear step's time go on a GPU? One 16384 x 640 -> 640 layer, forward and
backward, bf16 recipe vs mxfp4-fdw (triton backend): CUDA-event medians, then the top
torch.profiler rows of one mxfp4-fdw step. Usage: python scripts/gpu_profile_mxlinear.py"""
import statistics
import time

import torch

from mxkernels.training.mxlinear import MXLinear


def step(layer, x):
    y = layer(x)
    y.float().pow(2).mean().backward()


def main():
    torch.manual_seed(0)
    x = torch.randn(16384, 640, device="cuda", requires_grad=True)
    for recipe in ("bf16", "mxfp4-fdw"):
        layer = MXLinear(640, 640, recipe=recipe, device="cuda")
        t0 = time.perf_counter()
        step(layer, x)
        torch.cuda.synchronize()
        warm = time.perf_counter() - t0
        ts = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step(layer, x)
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b))
        print(f"{recipe}: first call {warm:.2f} s, step median {statistics.median(ts):.3f} ms",
              flush=True)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step(layer, x)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))


if __name__ == "__main__":
    main()
