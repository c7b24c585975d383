"""Profile one whole training step (forward, backward, optimizer) per recipe on a GPU: the
CUDA kernels by total device time and the step's wall time against its summed kernel time
(a step whose kernels cover its wall time is GPU-bound; a gap means the host is the limit).

    python scripts/gpu_profile_step.py [--model llama-125m] [--recipes bf16,mxfp4-fdw]
"""
from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-125m")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--recipes", default="bf16,mxfp4-fdw")
    ap.add_argument("--top", type=int, default=22)
    a = ap.parse_args()
    from mxkernels.training.data import BatchSampler, load_corpus
    from mxkernels.training.mxlinear import swap_linears
    from mxkernels.training.models import build_model
    from mxkernels.training.trainer import TrainConfig, lm_loss, make_optimizer, resolve_recipe
    dev = torch.device("cuda")
    corpus = load_corpus("stdlib")
    sampler = BatchSampler(corpus.train, a.seq_len, a.batch_size, seed=0)
    tokens = torch.from_numpy(sampler.batch(0)).to(dev)
    per = {}
    for name in a.recipes.split(","):
        recipe = resolve_recipe(name, 0)
        model = build_model(a.model, corpus.vocab_size, seed=0, max_seq_len=a.seq_len, device=dev)
        if recipe.quantized:
            swap_linears(model, recipe)
        opt = make_optimizer(model, TrainConfig(model=a.model, lr=1e-4))

        def step(model=model, opt=opt):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                _, loss, _ = lm_loss(model, tokens)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

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
        del model, opt
        torch.cuda.empty_cache()

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
