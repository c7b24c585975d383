"""cProfile of the MXLinear fast path's host side on tiny CUDA tensors (where the launch path,
not the GPU, binds): which Python calls cost the time per forward + backward.

    python scripts/gpu_host_profile.py [RECIPE]
"""
import cProfile
import pstats
import sys

import torch

from mxkernels.training.mxlinear import MXLinear

recipe = sys.argv[1] if len(sys.argv) > 1 else "mxfp4-fdw"
lin = torch.nn.Linear(64, 64, bias=False, device="cuda")
mx = MXLinear.from_linear(lin, recipe, backend="triton")
x = torch.randn(64, 64, device="cuda", requires_grad=True)


def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = mx(x)
    y.sum().backward()


for _ in range(20):
    step()
torch.cuda.synchronize()
pr = cProfile.Profile()
pr.enable()
for _ in range(300):
    step()
torch.cuda.synchronize()
pr.disable()
st = pstats.Stats(pr)
st.sort_stats("tottime").print_stats(30)
