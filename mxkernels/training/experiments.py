"""Paired-seed experiment grids (training_anchors.md C.2), one command each:
``mxref train experiment NAME --scale tiny|small|anchor --seeds 0,1 --out DIR``.

Every arm of a grid runs with the same model, data, batch order and init seed; only the
recipe differs, so per-step loss differences are paired. After the runs, :mod:`.compare`
writes ``DIR/compare.{json,md,png}`` (dL versus the bf16 arm of the same seed, extra tokens
to reach the bf16 loss, step-time and memory ratios from the run summaries).

Experiments:

* ``amd`` (E3/E4 in small): F vs FD vs FDW MXFP4, and FDW with the deterministic Hadamard,
  SR on gradients, random Hadamard (AMD 2605.09825).
* ``decomp``: decomposition-paper fixes vs plain ``mxfp4-fdw`` (E8): outlier fallback alone
  (``decomp-outlier``), macro-block scaling alone (``decomp-macro``), both (``decomp-fixed``);
  with ``--decompose`` every in-run check also writes the checked operands' error components
  (``decomp.jsonl``).
* ``ms-fp4``: Microsoft FP4 W4A4 with DGE + OCC, and the ablations without OCC, without DGE,
  without both (E6; variants below).
* ``hopper-moe``: Qwen3-MoE, MXFP8 compute with the saved activations in FP4
  (``fp4-activations``) vs the same without FP4 storage (``mxfp8-fdw``): peak memory and dL
  (E10b).
"""
from __future__ import annotations

import json
import traceback
from pathlib import Path

from mxref.errors import MXRefError

from .errors import TrainingConfigError
from .recipes import VARIANTS  # noqa: F401  (re-exported: the variants the grids below run)

EXPERIMENTS = {
    "amd": {"model": "llama", "recipes": ["bf16", "mxfp4-f", "mxfp4-fd", "mxfp4-fdw",
                                          "mxfp4-fdw-h16", "mxfp4-fdw-sr", "mxfp4-fdw-rht"],
            "what": "AMD: F vs FD vs FDW, deterministic Hadamard, SR, random Hadamard"},
    "decomp": {"model": "llama", "recipes": ["bf16", "mxfp4-fdw", "decomp-outlier",
                                             "decomp-macro", "decomp-fixed"],
               "what": "decomposition-paper fixes vs plain MXFP4 FDW, each alone and both "
                       "(E8; --decompose records the error components at each check)"},
    "ms-fp4": {"model": "llama", "recipes": ["bf16", "ms-fp4", "ms-fp4-no-occ", "ms-fp4-no-dge",
                                             "ms-fp4-direct", "ms-fp4-dge-mean", "ms-w8a4",
                                             "ms-w8a4-occ", "ms-w4a8", "ms-w4a8-dge"],
               "what": "Microsoft FP4: DGE and OCC ablations in W4A4, DGE's scale without its "
                       "shape, and the paper's one-sided W8A4 +- OCC and W4A8 +- DGE"},
    "hopper-moe": {"model": "qwen3-moe", "recipes": ["bf16", "mxfp8-fdw", "fp4-activations"],
                   "what": "Hopper MoE: FP4 storage of saved activations (memory, dL)"},
}

# model size suffix, tokens, seq_len, batch, eval/ckpt cadence
SCALES = {
    "tiny": {"size": "tiny", "tokens": 16 * 64 * 100, "seq_len": 64, "batch_size": 16,
             "eval_every": 50, "eval_tokens": 16_384, "precision": "fp32",
             "note": "CPU smoke scale: llama-tiny (0.43M), 100 steps of 1024 tokens, fp32"},
    "small": {"size": "30m", "tokens": 20_000_000, "seq_len": 512, "batch_size": 64,
              "eval_every": 100, "eval_tokens": 262_144, "note": "one GPU, minutes per arm"},
    "anchor": {"size": "30m", "tokens": 262_144 * 2900, "seq_len": 512, "batch_size": 512,
               "grad_accum": 8, "eval_every": 250, "eval_tokens": 1_048_576,
               "note": "training_anchors C.0 30M at D/N ~ 25 (about 0.76B tokens), hours"},
}


def model_for(exp: dict, size: str) -> str:
    if exp["model"] == "qwen3-moe":
        return "qwen3-moe-tiny" if size == "tiny" else "qwen3-moe-60m"
    return f"{exp['model']}-{size}"


def plan(name: str, scale: str, seeds, out: Path, **overrides) -> list:
    """The TrainConfigs of one experiment (no side effects)."""
    from .trainer import TrainConfig

    if name not in EXPERIMENTS:
        raise TrainingConfigError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}")
    if scale not in SCALES:
        raise TrainingConfigError(f"unknown scale {scale!r}; known: {', '.join(SCALES)}")
    exp, sc = EXPERIMENTS[name], dict(SCALES[scale])
    sc.pop("note")
    size = sc.pop("size")
    cfgs = []
    for seed in seeds:
        for recipe in exp["recipes"]:
            kw = {**sc, **{k: v for k, v in overrides.items() if v is not None}}
            if recipe == "bf16":
                kw.pop("validate_every", None)   # the baseline has no MX layer to check
                kw.pop("decompose", None)
            cfgs.append(TrainConfig(model=model_for(exp, size), recipe=recipe, seed=seed,
                                    out=str(out / f"{recipe}-s{seed}"), **kw))
    return cfgs


def run_experiment(name: str, scale: str, seeds, out: Path, progress=True, **overrides) -> dict:
    """Run every arm (an arm that fails is recorded and the grid goes on), then compare."""
    from .compare import compare_runs, write_compare
    from .trainer import train

    out.mkdir(parents=True, exist_ok=True)
    results = []
    for cfg in plan(name, scale, seeds, out, **overrides):
        cfg.progress = progress
        try:
            s = train(cfg)
            results.append({"run": cfg.out, "status": s["status"]})
        except MXRefError as e:  # NaN, failed check: the arm's summary.json records it
            results.append({"run": cfg.out, "status": type(e).__name__, "error": str(e)})
        except Exception as e:  # noqa: BLE001 - one broken arm must not lose the others
            traceback.print_exc()
            results.append({"run": cfg.out, "status": "crashed", "error": repr(e)})
    (out / "experiment.json").write_text(json.dumps(
        {"schema": "mxref-train-experiment/1", "experiment": name, "scale": scale,
         "scale_settings": SCALES[scale], "seeds": list(seeds), "what": EXPERIMENTS[name]["what"],
         "arms": results}, indent=2) + "\n")
    runs = [r["run"] for r in results if (Path(r["run"]) / "config.json").exists()]
    report = compare_runs(runs)
    report["experiment"] = name
    report["scale"] = scale
    write_compare(report, out, title=f"{name} ({scale}: {SCALES[scale]['note']})")
    return report
