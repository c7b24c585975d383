"""Which ops of a training step synchronize the host with the GPU (a sync inside the step makes
the host wait, and a host that waits cannot run ahead to absorb its own hiccups).

    python scripts/gpu_sync_check.py [--model llama-125m] [--recipes bf16,mxfp4-fdw]

Runs two warm-up steps, then one step per recipe under torch.cuda.set_sync_debug_mode("warn")
and prints each distinct synchronizing call site with its count.
"""
from __future__ import annotations

import argparse
import collections
import traceback
import warnings

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-125m")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--recipes", default="bf16,mxfp4-fdw")
    a = ap.parse_args()
    from mxkernels.training.data import BatchSampler, load_corpus
    from mxkernels.training.models import build_model
    from mxkernels.training.mxlinear import swap_linears
    from mxkernels.training.trainer import TrainConfig, lm_loss, make_optimizer, resolve_recipe
    dev = torch.device("cuda")
    corpus = load_corpus("stdlib")
    sampler = BatchSampler(corpus.train, a.seq_len, a.batch_size, seed=0)
    tokens = torch.from_numpy(sampler.batch(0)).to(dev)
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

        for _ in range(2):
            step()
        torch.cuda.synchronize()
        sites = collections.Counter()

        def record(message, category, filename, lineno, file=None, line=None):
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
