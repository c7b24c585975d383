"""Training-step time of MX recipes versus bf16, measured in one process on one device.

One model per recipe, all built from the same seed, each with its own AdamW. After warm-up
steps (Triton compiles on first use), the recipes take turns step by step (the starting
recipe rotates every round so that no recipe always runs after the same neighbour), with the
same batch for every recipe in a round. Reported per recipe: median step time and tokens/s,
the ratio to bf16's median from the same rounds, the share of the step spent in
quantization (CUDA events around every quantize / rotate / dequantize of every MXLinear, on two
extra steps after the timed rounds: the events are host work the timed steps do not carry),
and the step's peak memory above what was resident before it (CUDA max_memory_allocated;
on CPU only the process-wide ru_maxrss, which cannot be split per recipe).

    python bench/train_step.py --model llama-125m --seq-len 1024 --batch-size 16 \
        --recipes bf16,mxfp4-fdw,mxfp4-fdw-h16,nvfp4-te --steps 10 --out bench/results

Writes ``OUT/train_step_<device>.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import resource
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch


def _slug(device: torch.device) -> str:
    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(device).lower()
    m = re.search(r"(h100|h200|h20|a100|b200|gb200|l40s?|mi\d+)", name)
    return m.group(1) if m else re.sub(r"[^a-z0-9]+", "_", name).strip("_")


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


_ALLOC_STATS = ("num_device_alloc", "num_device_free", "num_alloc_retries",
                "num_sync_all_streams")


_GC_STEP: dict = {}      # this step's garbage collections: "gen<N>" -> [count, seconds]
_GC_T0 = [0.0]


def _gc_callback(phase, info):
    if phase == "start":
        _GC_T0[0] = time.perf_counter()
        return
    e = _GC_STEP.setdefault(f"gen{info['generation']}", [0, 0.0])
    e[0] += 1
    e[1] += time.perf_counter() - _GC_T0[0]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llama-125m")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--recipes", default="bf16,mxfp4-fdw")
    ap.add_argument("--steps", type=int, default=10, help="Timed rounds.")
    ap.add_argument("--warmup", type=int, default=2, help="Untimed steps per recipe first.")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--gc", choices=["auto", "manual", "freeze"], default="auto",
                    help="Python garbage collection: 'auto' (CPython's default thresholds), "
                         "'manual' (as torchtitan's gc_freq: automatic collection off, a "
                         "generation-1 collection after each round, outside the timed steps) or "
                         "'freeze' (automatic collection on, every object alive after warm-up "
                         "moved out of its reach by gc.freeze(): a full collection then scans "
                         "only what the steps allocate).")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="Capture each recipe's whole step (forward, backward, clipping, the "
                         "fused capturable AdamW of train --cuda-graph) in one CUDA graph "
                         "after warm-up and time its "
                         "replays: the GPU's part without the host's enqueue. Per-step kernel "
                         "arguments (SR seeds, random Hadamard signs) keep the values of the "
                         "captured step, which changes no timing; the quantization share is "
                         "not measured.")
    ap.add_argument("--generic", default="",
                    help="Comma-separated recipes to also time on the generic MXLinear path "
                         "(the fast path switched off), as arms named RECIPE:generic.")
    a = ap.parse_args(argv)

    from contextlib import nullcontext

    from mxkernels.training.data import BatchSampler, load_corpus
    from mxkernels.training.models import build_model, param_counts
    from mxkernels.training.quant import QuantTimer, quant_timer
    from mxkernels.training.trainer import (TrainConfig, environment, lm_loss, make_optimizer,
                                            pick_device, resolve_recipe)

    if a.threads:
        torch.set_num_threads(a.threads)
    device = pick_device(a.device)
    recipes = [r.strip() for r in a.recipes.split(",") if r.strip()]
    if "bf16" not in recipes:
        recipes.insert(0, "bf16")
    recipes += [f"{r.strip()}:generic" for r in a.generic.split(",") if r.strip()]
    from mxkernels.training import mxlinear as mxl
    corpus = load_corpus("stdlib")
    sampler = BatchSampler(corpus.train, a.seq_len, a.batch_size, seed=0)
    cfg = TrainConfig(model=a.model, lr=1e-4)
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) \
        if a.precision == "bf16" else nullcontext

    arms = {}
    for name in recipes:
        recipe = resolve_recipe(name.split(":")[0], 0)
        model = build_model(a.model, corpus.vocab_size, seed=0, max_seq_len=a.seq_len,
                            device=device)
        swapped = []
        if recipe.quantized:
            from mxkernels.training.mxlinear import swap_linears
            swapped = swap_linears(model, recipe, backend=a.backend)
        arms[name] = {"model": model, "opt": make_optimizer(model, cfg,
                                                            capturable=a.cuda_graph),
                      "swapped": len(swapped), "graph": None,
                      "times": [], "host": [], "host_parts": [], "gc": [], "alloc": [], "quant": [], "peak": [], "error": None,
                      "fast": not name.endswith(":generic")}
    counts = param_counts(next(iter(arms.values()))["model"])

    def body(arm, tokens):
        """forward, backward, clipping, optimizer (what a CUDA graph captures)."""
        model, opt = arm["model"], arm["opt"]
        with autocast():
            _, loss, _ = lm_loss(model, tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    def capture(arm, tokens):
        """Record arm's step in a CUDA graph reading the static token buffer (after warm-up
        steps on a side stream, as torch.cuda.graphs asks)."""
        static = tokens.clone()
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):
                arm["opt"].zero_grad(set_to_none=True)
                body(arm, static)
        torch.cuda.current_stream(device).wait_stream(side)
        arm["opt"].zero_grad(set_to_none=True)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body(arm, static)
        arm["graph"] = (g, static)

    def replay(arm, tokens):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            resident = torch.cuda.memory_allocated(device)
        _sync(device)
        _GC_STEP.clear()
        t0 = time.perf_counter()
        g, static = arm["graph"]
        static.copy_(tokens)
        g.replay()
        t_end = time.perf_counter()
        _sync(device)
        dt = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated(device) - resident
        return dt, 0.0, peak, (t_end - t0, 0.0, 0.0, 0.0), None

    def step(arm, tokens, timed=True):
        """One step; timed=True: wall time, no quantization timer (its CUDA events and
        context managers are host work of their own); timed=False: the quantization time
        (CUDA events around every quantization op) of an untimed step."""
        if arm["graph"] is not None:
            return replay(arm, tokens)
        model, opt = arm["model"], arm["opt"]
        mxl.FAST_PATH[0] = arm["fast"]
        timer = QuantTimer()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            resident = torch.cuda.memory_allocated(device)
            before = torch.cuda.memory_stats(device)
        _sync(device)
        _GC_STEP.clear()
        t0 = time.perf_counter()
        with quant_timer(timer) if not timed else nullcontext():
            with autocast():
                _, loss, _ = lm_loss(model, tokens)
            t_fwd = time.perf_counter()
            loss.backward()
        t_bwd = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t_end = time.perf_counter()         # the host's part: every launch enqueued
        host = (t_end - t0, t_fwd - t0, t_bwd - t_fwd, t_end - t_bwd)
        _sync(device)
        dt = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated(device) - resident if device.type == "cuda" else None
        alloc = None
        if device.type == "cuda":     # caching-allocator events during the step (cudaMalloc /
            st = torch.cuda.memory_stats(device)    # cudaFree calls, retries after a failure)
            alloc = {k: st.get(k, 0) - before.get(k, 0) for k in _ALLOC_STATS}
        return dt, timer.seconds(), peak, host, alloc

    def batch(i):
        return torch.from_numpy(sampler.batch(i)).to(device)

    for name, arm in arms.items():  # warm-up: compile, allocator, autotune
        t0 = time.perf_counter()
        try:
            for i in range(a.warmup):
                step(arm, batch(i))
            if a.cuda_graph:
                capture(arm, batch(0))
        except Exception as e:  # noqa: BLE001 - report the broken recipe, time the others
            arm["error"] = f"{type(e).__name__}: {e}"
            print(f"[train_step] {name}: {arm['error']}", file=sys.stderr)
        arm["warmup_s"] = round(time.perf_counter() - t0, 2)
        print(f"[train_step] warm-up {name}: {arm['warmup_s']} s", file=sys.stderr)
    live = [n for n in recipes if arms[n]["error"] is None]
    import gc
    gc.callbacks.append(_gc_callback)
    if a.gc in ("manual", "freeze"):
        gc.collect()
        (gc.disable if a.gc == "manual" else gc.freeze)()
    for r in range(a.steps):
        tokens = batch(a.warmup + r)
        order = live[r % len(live):] + live[:r % len(live)]
        for name in order:
            arm = arms[name]
            if arm["error"]:
                continue
            try:
                dt, _, peak, host, alloc = step(arm, tokens)
            except Exception as e:  # noqa: BLE001
                arm["error"] = f"{type(e).__name__}: {e}"
                continue
            arm["times"].append(dt)
            arm["host"].append(host[0])
            arm["host_parts"].append(host[1:])
            arm["gc"].append(dict(_GC_STEP))
            arm["alloc"].append(alloc)
            arm["peak"].append(peak)
        if a.gc == "manual":
            gc.collect(1)
        print(f"[train_step] round {r + 1}/{a.steps}", file=sys.stderr)
    gc.enable()
    gc.unfreeze()
    gc.callbacks.remove(_gc_callback)

    for name in live:       # quantization share: separate, untimed steps with the timer on
        arm = arms[name]
        for r in range(2 if arm["times"] and not arm["error"] and not a.cuda_graph else 0):
            dt, q, _, _, _ = step(arm, batch(a.warmup + a.steps + r), timed=False)
            arm["quant"].append(q / dt)
    tok = a.seq_len * a.batch_size
    base = float(np.median(arms["bf16"]["times"])) if arms["bf16"]["times"] else None
    base_peak = max((p for p in arms["bf16"]["peak"] if p is not None), default=None)
    rows = []
    for name in recipes:
        arm = arms[name]
        row = {"recipe": name, "swapped_linears": arm["swapped"], "error": arm["error"],
               "step_times_s": arm["times"], "host_enqueue_s": arm["host"],
               "allocator_events": arm["alloc"],
               "host_fwd_bwd_opt_s": arm["host_parts"],
               "gc_collections": arm["gc"],
               "warmup_s": arm.get("warmup_s"), "rounds": len(arm["times"])}
        if arm["times"]:
            med = float(np.median(arm["times"]))
            peaks = [p for p in arm["peak"] if p is not None]
            row.update({
                "median_step_s": med, "min_step_s": float(np.min(arm["times"])),
                # a step whose host enqueue time nears its wall time is host-bound: any host
                # hiccup then shows in the step time
                "median_host_enqueue_s": float(np.median(arm["host"])),
                "tokens_per_s": tok / med,
                "step_time_ratio_vs_bf16": med / base if base else None,
                "quant_share_median": float(np.median(arm["quant"])) if arm["quant"] else None,
                "step_peak_mem_bytes": max(peaks) if peaks else None,
                "step_peak_mem_ratio_vs_bf16": (max(peaks) / base_peak)
                if peaks and base_peak else None})
        rows.append(row)
    env = environment(device)
    doc = {"schema": "mxref-bench-train-step/1", "model": a.model, "params": counts,
           "seq_len": a.seq_len, "batch_size": a.batch_size, "tokens_per_step": tok,
           "precision": a.precision, "backend": a.backend, "rounds": a.steps, "gc": a.gc,
           "cuda_graph": a.cuda_graph,
           "warmup": a.warmup, "device": env, "cpu_ru_maxrss_bytes":
           resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
           "python_threads": [t.name for t in threading.enumerate()],
           "when": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": platform.node(), "results": rows}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"train_step_{_slug(device)}{'_graph' if a.cuda_graph else ''}"
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    md = [f"# Training step: {a.model} ({counts['non_embedding']:,} non-embedding params), "
          f"seq {a.seq_len} x batch {a.batch_size}, {a.precision}, on "
          f"{env.get('gpu', env['device'])}",
          "", f"torch {env['torch']}, triton {env.get('triton')}, transformers "
          f"{env['transformers']}, commit {env['git_commit']}; medians of {a.steps} alternating "
          f"rounds after warm-up; Python GC {a.gc}"
          f"{'; each step one CUDA graph replay (host enqueue = copy + replay), fused AdamW' if a.cuda_graph else ''}.", "",
          "| recipe | step (ms) | host enqueue (ms) | min step (ms) | tokens/s | step time / bf16 "
          "| quant share | step peak mem (GiB) | mem / bf16 | warm-up (s) | note |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "median_step_s" not in r:
            md.append(f"| {r['recipe']} | - | - | - | - | - | - | - | - | {r['warmup_s']} | "
                      f"{r['error']} |")
            continue
        pk = r["step_peak_mem_bytes"]
        md.append(f"| {r['recipe']} | {1e3 * r['median_step_s']:.1f} | "
                  f"{1e3 * r['median_host_enqueue_s']:.1f} | {1e3 * r['min_step_s']:.1f} | "
                  f"{r['tokens_per_s']:,.0f} | "
                  f"{r['step_time_ratio_vs_bf16']:.2f} | {r['quant_share_median'] if r['quant_share_median'] is not None else float('nan'):.2f} | "
                  f"{pk / 2**30 if pk else float('nan'):.2f} | "
                  f"{r['step_peak_mem_ratio_vs_bf16'] or float('nan'):.2f} | {r['warmup_s']} | "
                  f"{r['error'] or ''} |")
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return doc


if __name__ == "__main__":
    main()
