"""Shared by the GPU step scripts: the common arguments, and one training step per recipe on
one fixed batch (llama from the stdlib corpus; bf16 autocast, clip, AdamW)."""
from __future__ import annotations

import argparse

import torch


def parser(doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--model", default="llama-125m")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--recipes", default="bf16,mxfp4-fdw")
    return ap


def arms(a):
    """Yield (recipe name, step function) per recipe of ``a.recipes``, each with its own model
    (seed 0) and optimizer; the previous arm's model is freed before the next is built."""
    from mxkernels.training.data import BatchSampler, load_corpus
    from mxkernels.training.models import build_model
    from mxkernels.training.mxlinear import swap_linears
    from mxkernels.training.trainer import (
        TrainConfig,
        lm_loss,
        make_optimizer,
        resolve_recipe,
    )
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

        yield name, step
        del model, opt, step
        torch.cuda.empty_cache()
