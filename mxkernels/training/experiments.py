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

``--jobs N`` runs the arms as N parallel ``mxref train`` processes, one GPU each (round-robin
over the visible GPUs; on a CPU-only machine the cores are shared out). ``--time-budget S``
bounds the whole command: every run leaves with a checkpoint (status ``stopped``) once S
seconds are spent, no run is started with less than ``--min-start`` seconds left, and the same
command run again resumes the stopped runs and skips the complete ones. ``--arms`` runs a
subset of the grid. Each grid names its ``CONTRASTS``: paired differences between two arms
(per seed, then a t interval over seeds) that answer the grid's question directly.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mxref.errors import MXRefError

from .errors import TrainingConfigError
from .slots import child_visible_devices
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

# (arm a, arm b, what a - b measures): paired per seed (the same bf16 run cancels), reported
# with a t interval over seeds by compare.contrasts
CONTRASTS = {
    "amd": [("mxfp4-fd", "mxfp4-f", "Dgrad quantized (FD - F)"),
            ("mxfp4-fdw", "mxfp4-fd", "Wgrad quantized (FDW - FD)"),
            ("mxfp4-fdw-h16", "mxfp4-fdw", "deterministic Hadamard-16 on Wgrad (H16 - FDW)"),
            ("mxfp4-fdw-sr", "mxfp4-fdw", "SR on the gradients (SR - FDW)"),
            ("mxfp4-fdw-rht", "mxfp4-fdw-h16", "random vs deterministic Hadamard (RHT - H16)")],
    "decomp": [("decomp-outlier", "mxfp4-fdw", "outlier fallback alone"),
               ("decomp-macro", "mxfp4-fdw", "macro-block scaling alone"),
               ("decomp-fixed", "mxfp4-fdw", "both fixes")],
    "ms-fp4": [("ms-fp4", "ms-fp4-no-occ", "OCC's share (with DGE)"),
               ("ms-fp4", "ms-fp4-no-dge", "DGE's share (with OCC)"),
               ("ms-fp4-dge-mean", "ms-fp4", "DGE's shape vs its mean scale"),
               ("ms-w8a4-occ", "ms-w8a4", "OCC in W8A4"),
               ("ms-w4a8-dge", "ms-w4a8", "DGE in W4A8")],
    "hopper-moe": [("fp4-activations", "mxfp8-fdw", "FP4 storage of saved activations")],
}

# model size suffix, tokens, seq_len, batch, eval/ckpt cadence
SCALES = {
    "tiny": {"size": "tiny", "tokens": 16 * 64 * 100, "seq_len": 64, "batch_size": 16,
             "eval_every": 50, "eval_tokens": 16_384, "precision": "fp32",
             "note": "CPU smoke scale: llama-tiny (0.43M), 100 steps of 1024 tokens, fp32"},
    "small": {"size": "30m", "tokens": 20_000_000, "seq_len": 512, "batch_size": 64,
              "eval_every": 100, "eval_tokens": 262_144, "note": "one GPU, minutes per arm"},
    # issue 30: llama-125m, 100,007,936 tokens (3,052 steps of 32 x 1024), 512 validation
    # windows, one GPU per arm, graphed where the recipe allows it (plan() drops the graph for
    # the others). The corpus is the interpreter's stdlib + site-packages: the stdlib alone is
    # 10.5M bytes on the lent GPU image, so 100M tokens were 9.5 epochs and bf16 overfit
    # (bench/results/train/amd_medium_stdlib)
    "medium": {"size": "125m", "tokens": 32 * 1024 * 3052, "seq_len": 1024, "batch_size": 32,
               "eval_every": 250, "eval_tokens": 524_288, "ckpt_every": 500, "cuda_graph": True,
               "corpus": "python",
               "note": "llama-125m, 100M tokens, seq 1024 x 32, stdlib + site-packages, "
                       "graphed, one GPU per arm"},
    "anchor": {"size": "30m", "tokens": 262_144 * 2900, "seq_len": 512, "batch_size": 512,
               "grad_accum": 8, "eval_every": 250, "eval_tokens": 1_048_576,
               "note": "training_anchors C.0 30M at D/N ~ 25 (about 0.76B tokens), hours"},
}


def model_for(exp: dict, size: str) -> str:
    if exp["model"] == "qwen3-moe":
        return "qwen3-moe-tiny" if size == "tiny" else "qwen3-moe-60m"
    return f"{exp['model']}-{size}"


def plan(name: str, scale: str, seeds, out: Path, arms=None, **overrides) -> list:
    """The TrainConfigs of one experiment (no side effects). ``arms``: a subset of the grid's
    recipes (or its variants), in the grid's order; None runs them all."""
    from .trainer import TrainConfig, graph_refusal, resolve_recipe

    if name not in EXPERIMENTS:
        raise TrainingConfigError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}")
    if scale not in SCALES:
        raise TrainingConfigError(f"unknown scale {scale!r}; known: {', '.join(SCALES)}")
    exp, sc = EXPERIMENTS[name], dict(SCALES[scale])
    recipes = exp["recipes"]
    if arms is not None:
        unknown = [a for a in arms if a not in recipes]
        if unknown:
            raise TrainingConfigError(f"arm(s) {', '.join(unknown)} not in the {name!r} grid; "
                                      f"its arms: {', '.join(recipes)}")
        if not arms:
            raise TrainingConfigError("--arms names no arm")
        recipes = [r for r in recipes if r in arms]
    sc.pop("note")
    size = sc.pop("size")
    cfgs = []
    for seed in seeds:
        for recipe in recipes:
            kw = {**sc, **{k: v for k, v in overrides.items() if v is not None}}
            if recipe == "bf16":
                kw.pop("validate_every", None)   # the baseline has no MX layer to check
                kw.pop("decompose", None)
            if kw.get("cuda_graph") and graph_refusal(resolve_recipe(recipe, seed)):
                kw["cuda_graph"] = False         # e.g. SR seeds drawn on the host: eager
            cfgs.append(TrainConfig(model=model_for(exp, size), recipe=recipe, seed=seed,
                                    out=str(out / f"{recipe}-s{seed}"), **kw))
    return cfgs


MIN_START_S = 120.0   # a run started with less than this left would spend it on set-up
STOP_MARGIN_S = 45.0  # a stopped run's last step, checkpoint and exit, inside the budget
KILL_GRACE_S = 120.0  # a run still alive this long after the budget is killed (a hang)


def _status(run) -> str:
    """The status in a run directory's summary.json ("no summary" when there is none)."""
    try:
        return json.loads((Path(run) / "summary.json").read_text()).get("status", "unknown")
    except (OSError, ValueError):
        return "no summary"


def _run_child(cfg, gpu, logdir: Path, deadline, min_start_s: float, cpu_threads: int) -> dict:
    """One arm as its own ``mxref train`` process (on ``gpu``, or the CPU), within the
    budget: --stop-after-seconds leaves it with a checkpoint before the deadline."""
    from .trainer import _cli_args

    rec = {"run": cfg.out, "gpu": gpu}
    left = None if deadline is None else deadline - time.monotonic()
    if left is not None and left < min_start_s:
        rec.update(status="not started", error=f"{left:.0f} s of the time budget left "
                   f"(--min-start {min_start_s:g} s)")
        return rec
    child = dataclasses.replace(cfg, progress=False)
    if left is not None:
        child.stop_after_seconds = max(0.0, left - STOP_MARGIN_S)
    if not child.threads:
        child.threads = cpu_threads          # processes share the cores (the checks use them)
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = child_visible_devices(gpu, os.environ)
    cmd = [sys.executable, "-m", "mxref.cli", "train", *_cli_args(child), "--no-progress"]
    log = logdir / f"{Path(cfg.out).name}.log"
    t0 = time.monotonic()
    with open(log, "a") as f:
        f.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')} gpu={gpu}: {' '.join(cmd)}\n")
        f.flush()
        try:
            rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                timeout=None if left is None else left + KILL_GRACE_S).returncode
        except subprocess.TimeoutExpired:
            rc = None
    rec.update(rc=rc, seconds=round(time.monotonic() - t0, 1), log=str(log),
               status=_status(cfg.out) if rc is not None else "killed")
    if rc is None:
        rec["error"] = f"still running {KILL_GRACE_S:g} s after the time budget: killed"
    elif rc != 0:
        rec["error"] = f"exit code {rc} (see {log})"
    return rec


def _run_parallel(cfgs, out: Path, jobs: int, deadline, min_start_s: float) -> list:
    """Every config as a child process, ``jobs`` at a time; each holds one slot (a GPU, in
    turn over the visible ones) from start to exit, so two runs never share a GPU unless
    there are more jobs than GPUs."""
    import torch

    from .slots import GpuSlots

    on_gpu = torch.cuda.is_available() and all(c.device in ("auto", "cuda") for c in cfgs)
    slots = GpuSlots(jobs, torch.cuda.device_count() if on_gpu else 0)
    cpu_threads = max(1, (os.cpu_count() or 1) // jobs)
    logdir = out / "logs"
    logdir.mkdir(parents=True, exist_ok=True)

    def one(cfg):
        with slots.take() as gpu:
            return _run_child(cfg, gpu, logdir, deadline, min_start_s, cpu_threads)

    with ThreadPoolExecutor(jobs) as ex:
        return list(ex.map(one, cfgs))


def grid_runs(name: str, out: Path) -> list[Path]:
    """The run directories of grid ``name`` under ``out``: ARM-sSEED for the grid's arms."""
    arms = set(EXPERIMENTS[name]["recipes"])
    found = []
    for d in sorted(Path(out).iterdir()) if Path(out).is_dir() else ():
        arm, _, seed = d.name.rpartition("-s")
        if d.is_dir() and arm in arms and seed.isdigit() and (d / "config.json").exists():
            found.append(d)
    return found


def exit_code(report: dict) -> int:
    """The experiment command's exit code from its arms: 3 when an in-run check failed, 4 on a
    NaN/inf loss, 1 when a run crashed or was killed, else 0 (complete, or stopped / not
    started by the time budget: the same command resumes them)."""
    st = set((report.get("arm_status") or {}).values())
    if st & {"check_failed", "TrainingCheckError"}:
        return 3
    if st & {"nonfinite_loss", "NonFiniteLossError"}:
        return 4
    return 1 if st - {"complete", "stopped", "not started"} else 0


def run_experiment(name: str, scale: str, seeds, out: Path, progress=True, arms=None, jobs=1,
                   time_budget=None, min_start_s=MIN_START_S, **overrides) -> dict:
    """Run every arm (an arm that fails is recorded and the grid goes on), then compare.

    ``jobs`` > 1: parallel child processes (:func:`_run_parallel`). ``time_budget`` (seconds):
    runs stop with a checkpoint inside it and later ones are not started (run the command
    again to resume them)."""
    from .compare import compare_runs, contrasts, write_compare
    from .trainer import train

    deadline = None if time_budget is None else time.monotonic() + float(time_budget)
    cfgs = plan(name, scale, seeds, out, arms=arms, **overrides)
    out.mkdir(parents=True, exist_ok=True)
    if jobs > 1:
        results = _run_parallel(cfgs, out, jobs, deadline, min_start_s)
    else:
        results = []
        for cfg in cfgs:
            cfg.progress = progress
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left < min_start_s:
                results.append({"run": cfg.out, "status": "not started",
                                "error": f"{left:.0f} s of the time budget left "
                                         f"(--min-start {min_start_s:g} s)"})
                continue
            if left is not None:
                cfg.stop_after_seconds = max(0.0, left - STOP_MARGIN_S)
            try:
                s = train(cfg)
                results.append({"run": cfg.out, "status": s["status"]})
            except MXRefError as e:  # NaN, failed check: the arm's summary.json records it
                st = _status(cfg.out)
                results.append({"run": cfg.out, "error": str(e),
                                "status": st if st != "no summary" else type(e).__name__})
            except Exception as e:  # noqa: BLE001 - one broken arm must not lose the others
                traceback.print_exc()
                results.append({"run": cfg.out, "status": "crashed", "error": repr(e)})
    (out / "experiment.json").write_text(json.dumps(
        {"schema": "mxref-train-experiment/1", "experiment": name, "scale": scale,
         "scale_settings": SCALES[scale], "seeds": list(seeds), "what": EXPERIMENTS[name]["what"],
         "arms_run": [Path(c.out).name for c in cfgs], "jobs": jobs, "time_budget_s": time_budget,
         "arms": results}, indent=2) + "\n")
    # compare every run of this grid in ``out``, not only this call's arms: a call that
    # resumes one arm (or adds a seed) still reports the whole grid
    status = {r.name: _status(r) for r in grid_runs(name, out)}
    status.update({Path(r["run"]).name: r["status"] for r in results})
    runs = [str(out / n) for n in sorted(status) if (out / n / "config.json").exists()]
    if not runs:
        raise TrainingConfigError(f"no arm of {name!r} has started yet (experiment.json in {out} "
                                  "says why); run the command again with more --time-budget")
    report = compare_runs(runs)
    report["experiment"] = name
    report["scale"] = scale
    report["arm_status"] = status
    report["contrasts"] = contrasts(report, CONTRASTS.get(name, []))
    write_compare(report, out, title=f"{name} ({scale}: {SCALES[scale]['note']})")
    return report
