"""Bytes one training forward keeps for the backward, per recipe (mxkernels.training.memory).

The Hopper MoE question (issue 8 (d)): what does storing the layer inputs in FP4 save? The
CUDA peak that `mxref train compare` reports mixes that with optimizer state, gradients and
the transient buffers of the kernels running at the peak; this counts only the tensors
autograd keeps between forward and backward (parameters excluded), on whatever device runs
it. Every recipe's model is built from the same seed and fed the same tokens.

    python bench/saved_activations.py --model qwen3-moe-60m --seq-len 512 --batch-size 2 \
        --recipes bf16,mxfp8-fdw,fp4-activations \
        --out bench/results/train/hopper-moe_small/saved_activations

Writes OUT.json and OUT.md. On CPU every MX recipe takes MXLinear's generic path, which keeps
an unquantized layer input in the dtype it arrives in (fp32 here); on CUDA mxfp8-fdw takes the
fast path, which keeps its bf16 quantized copies instead (run it there to measure that).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen3-moe-60m")
    ap.add_argument("--recipes", default="bf16,mxfp8-fdw,fp4-activations")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                    help="bf16: fp32 weights under bf16 autocast (the trainer's default)")
    ap.add_argument("--out", type=Path, required=True, help="output path without extension")
    a = ap.parse_args(argv)

    from mxkernels.training.memory import saved_bytes
    from mxkernels.training.models import build_model
    from mxkernels.training.mxlinear import fast_plan, swap_linears
    from mxkernels.training.trainer import resolve_recipe

    dev = torch.device(a.device)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (a.batch_size, a.seq_len), generator=g).to(dev)
    rows = []
    for name in a.recipes.split(","):
        recipe = resolve_recipe(name, 0)
        model = build_model(a.model, 256, seed=0, max_seq_len=a.seq_len, device=dev)
        n_mx = 0
        if recipe.quantized:
            n_mx = len(swap_linears(model, recipe, backend=a.backend))
        adt = torch.bfloat16 if a.precision == "bf16" else None
        r = saved_bytes(model, ids, autocast_dtype=adt)
        # the same forward on twice the tokens: the difference is what grows with the batch
        # (activations), free of what does not (autocast's bf16 weight copies, MXLinear's
        # quantized weights)
        r2 = saved_bytes(model, torch.cat([ids, ids.flip(0)]), autocast_dtype=adt)
        r["marginal_bytes_per_token"] = (r2["total_bytes"] - r["total_bytes"]) / ids.numel()
        r["fixed_bytes"] = r["total_bytes"] - r["marginal_bytes_per_token"] * ids.numel()
        path = "nn.Linear" if not recipe.quantized else \
            ("fast" if dev.type == "cuda" and fast_plan(recipe) is not None else "generic")
        rows.append({"recipe": name, "mx_layers": n_mx, "path": path, **r})
        print(f"{name}: {r['total_bytes'] / 2**20:.1f} MiB saved for the backward, "
              f"{r['marginal_bytes_per_token'] / 1024:.1f} KiB per extra token ({path})",
              file=sys.stderr)
    base = next((x for x in rows if x["recipe"] == "bf16"), None)
    for x in rows:
        x["ratio_vs_bf16"] = x["total_bytes"] / base["total_bytes"] if base else None
        x["marginal_ratio_vs_bf16"] = (x["marginal_bytes_per_token"]
                                       / base["marginal_bytes_per_token"]) if base else None
    env = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else
           platform.processor() or platform.machine(), "torch": torch.__version__,
           "python": platform.python_version()}
    out = {"model": a.model, "seq_len": a.seq_len, "batch_size": a.batch_size,
           "precision": a.precision, "env": env, "rows": rows}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    lines = [f"# Saved for the backward: {a.model}, {a.batch_size} x {a.seq_len} tokens, "
             f"{a.precision} ({env['device']}, torch {env['torch']})", "",
             "Total: every storage autograd saved in one forward (parameters excluded). Per "
             "token: the growth from the same forward on twice the tokens (activations only; "
             "no weight copies).", "",
             "| recipe | MXLinear path | total MiB | / bf16 | fixed MiB | KiB per token | "
             "per token / bf16 | total by dtype (MiB) |",
             "|---|---|---|---|---|---|---|---|"]

    def _r(v):
        return f"{v:.3f}" if v is not None else "-"
    for x in rows:
        dt = ", ".join(f"{k} {v / 2**20:.1f}" for k, v in x["by_dtype"].items())
        lines.append(f"| {x['recipe']} | {x['path']} | {x['total_bytes'] / 2**20:.1f} | "
                     f"{_r(x['ratio_vs_bf16'])} | {x['fixed_bytes'] / 2**20:.1f} | "
                     f"{x['marginal_bytes_per_token'] / 1024:.2f} | "
                     f"{_r(x['marginal_ratio_vs_bf16'])} | {dt} |")
    a.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {a.out.with_suffix('.json')}, {a.out.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
