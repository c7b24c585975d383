"""Profile one whole training step (forward, backward, optimizer) per recipe on a GPU: the
CUDA kernels by total device time and the step's wall time against its summed kernel time
(a step whose kernels cover its wall time is GPU-bound; a gap means the host is the limit).

    python scripts/gpu_profile_step.py [--model llama-125m] [--recipes bf16,mxfp4-fdw]
"""
from __future__ import annotations

import time

import torch
from _step_arms import arms, parser
from torch.profiler import ProfilerActivity, profile


def main():
    ap = parser(__doc__)
    ap.add_argument("--top", type=int, default=22)
    a = ap.parse_args()
    per = {}
    for name, step in arms(a):
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        ka = prof.key_averages()
        dev_total = sum(e.self_device_time_total for e in ka) / 1e3
        print(f"\n### {name}: step wall {wall * 1e3:.1f} ms (unprofiled); summed kernel time "
              f"{dev_total:.1f} ms (profiled step)")
        print(ka.table(sort_by="self_cuda_time_total", row_limit=a.top, max_name_column_width=70))
        kern = {}
        for e in ka:
            if e.self_device_time_total > 0 and e.device_type == torch.autograd.DeviceType.CUDA:
                kern[e.key] = (e.self_device_time_total / 1e3, e.count)
        per[name] = kern

    names = list(per)
    if len(names) >= 2:
        a0, a1 = names[0], names[1]
        keys = set(per[a0]) | set(per[a1])
        rows = sorted(keys, key=lambda k: -abs(per[a1].get(k, (0, 0))[0] -
                                             per[a0].get(k, (0, 0))[0]))
        print(f"\n### GPU kernels: {a1} minus {a0} (ms, calls)")
        for k in rows[:a.top]:
            t0, n0 = per[a0].get(k, (0.0, 0))
            t1, n1 = per[a1].get(k, (0.0, 0))
            print(f"{t1 - t0:+8.2f}  {t0:7.2f} ({n0:4d})  {t1:7.2f} ({n1:4d})  {k[:110]}")


if __name__ == "__main__":
    main()
