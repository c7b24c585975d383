"""Which ops of a training step synchronize the host with the GPU (a sync inside the step makes
the host wait, and a host that waits cannot run ahead to absorb its own hiccups).

    python scripts/gpu_sync_check.py [--model llama-125m] [--recipes bf16,mxfp4-fdw]

Runs two warm-up steps, then one step per recipe under torch.cuda.set_sync_debug_mode("warn")
and prints each distinct synchronizing call site with its count.
"""
from __future__ import annotations

import collections
import traceback
import warnings

import torch
from _step_arms import arms, parser


def main():
    a = parser(__doc__).parse_args()
    for name, step in arms(a):
        for _ in range(2):
            step()
        torch.cuda.synchronize()
        sites = collections.Counter()

        def record(message, category, filename, lineno, file=None, line=None, *, sites=sites):
            stack = [f for f in traceback.extract_stack()[:-1]
                     if "warnings" not in f.filename][-4:]
            sites[" <- ".join(f"{f.filename.split('site-packages/')[-1]}:{f.lineno}"
                              for f in reversed(stack)) + f" [{str(message)[:60]}]"] += 1

        old = warnings.showwarning
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.showwarning = record
                step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
            warnings.showwarning = old
        torch.cuda.synchronize()
        print(f"{name}: {sum(sites.values())} synchronizing calls in one step", flush=True)
        for s, n in sites.most_common(12):
            print(f"  {n:4d}  {s}", flush=True)


if __name__ == "__main__":
    main()
