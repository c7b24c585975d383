"""``mxref train``: train a model with an MX recipe, compare runs, run experiment grids.

Registered through the ``mxref.commands`` entry-point group (pyproject.toml). This module
imports neither torch nor transformers: the commands import them when they run, so
``mxref train --help`` is fast.

Exit codes: 0 success; 2 usage or input errors (unknown model / recipe / experiment,
incompatible options, a run directory holding a different run, a corrupt or mismatched
checkpoint, unusable data); 3 an in-run validation check failed; 4 the loss became NaN/inf.
In cases 3 and 4 the last good checkpoint is kept and summary.json records the reason.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from mxref.errors import MXRefError

from .errors import NonFiniteLossError, TrainingCheckError

EXIT_USAGE, EXIT_CHECK, EXIT_NONFINITE = 2, 3, 4


def _fail(msg: str, code: int):
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


def _exit_code(e: MXRefError) -> int:
    if isinstance(e, TrainingCheckError):
        return EXIT_CHECK
    if isinstance(e, NonFiniteLossError):
        return EXIT_NONFINITE
    try:
        from .validate import ValidationError
        if isinstance(e, ValidationError):
            return EXIT_CHECK
    except ImportError:  # pragma: no cover
        pass
    return EXIT_USAGE


def _train_options(f):
    opts = [
        click.option("--model", "-m", help="Model name (mxref train models lists them)."),
        click.option("--recipe", "-r", default="bf16", show_default=True,
                     help="Recipe name (mxref train recipes), or a recipe JSON file."),
        click.option("--tokens", type=click.IntRange(1), default=1_000_000, show_default=True,
                     help="Training tokens (steps = tokens // (batch_size * seq_len))."),
        click.option("--seed", type=click.IntRange(0), default=0, show_default=True,
                     help="Init, batch order and recipe random streams."),
        click.option("--out", "-o", type=click.Path(file_okay=False),
                     help="Run directory (resumed when it holds the same run)."),
        click.option("--seq-len", type=click.IntRange(1), default=256, show_default=True),
        click.option("--batch-size", type=click.IntRange(1), default=32, show_default=True,
                     help="Global batch in sequences per optimizer step."),
        click.option("--grad-accum", type=click.IntRange(1), default=1, show_default=True),
        click.option("--lr", type=float, default=None, help="Peak LR (default by model size)."),
        click.option("--warmup-frac", type=float, default=0.1, show_default=True),
        click.option("--min-lr-frac", type=float, default=0.1, show_default=True),
        click.option("--weight-decay", type=float, default=0.1, show_default=True),
        click.option("--grad-clip", type=float, default=1.0, show_default=True),
        click.option("--precision", type=click.Choice(["bf16", "fp32"]), default="bf16",
                     show_default=True, help="bf16: fp32 master weights + bf16 autocast."),
        click.option("--backend", type=click.Choice(["auto", "torch", "triton"]), default="auto",
                     show_default=True, help="MXLinear quantizer backend."),
        click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1"),
        click.option("--corpus", default="stdlib", show_default=True,
                     help="'stdlib', 'python' (stdlib + site-packages .py files), a text file or "
                          "directory, or a .npy of token ids."),
        click.option("--val-fraction", type=float, default=0.02, show_default=True),
        click.option("--eval-every", type=click.IntRange(0), default=0, show_default=True,
                     help="Validation loss every N steps (0: at the end only)."),
        click.option("--eval-tokens", type=click.IntRange(1), default=65_536, show_default=True),
        click.option("--ckpt-every", type=click.IntRange(0), default=0, show_default=True,
                     help="Checkpoint every N steps (0: at the end only)."),
        click.option("--keep-checkpoints", type=click.IntRange(1), default=2, show_default=True),
        click.option("--validate-every", type=click.IntRange(0), default=0, show_default=True,
                     help="Check one MX layer (rotating) against mxref every N steps."),
        click.option("--decompose", is_flag=True,
                     help="With each in-run check, decompose the checked operands' error "
                          "(mxref.decompose: scale / deadzone / grid shares) into decomp.jsonl."),
        click.option("--quant-time-every", type=click.IntRange(0), default=5, show_default=True,
                     help="Time the quantization ops (CUDA events: host work of their own) on "
                          "every Nth step; those steps stay out of the median step time "
                          "(0: never)."),
        click.option("--threads", type=click.IntRange(0), default=0, show_default=True,
                     help="CPU threads for torch (0: torch's default)."),
        click.option("--no-progress", is_flag=True, help="No progress bar on stderr."),
        click.option("--stop-after", type=click.IntRange(1), default=None,
                     help="Leave cleanly after this step with a checkpoint (resume later)."),
        click.option("--stop-after-seconds", type=click.FloatRange(0), default=None,
                     help="Leave cleanly (checkpoint, status stopped) after the first step "
                          "that ends this many seconds after start; run again to resume."),
        click.option("--fsdp", is_flag=True,
                     help="Under torchrun: shard with FSDP2 (fully_shard per decoder layer) "
                          "instead of DDP."),
        click.option("--cuda-graph", is_flag=True,
                     help="One CUDA graph per step (forward, backward, clipping, optimizer): "
                          "no host enqueue. Needs a GPU, one process and a fast-path recipe or a "
                          "generic one with no per-step host state (ms-fp4, decomp-fixed); "
                          "the first two steps and the checked / timed ones run eagerly."),
        click.option("--deterministic", is_flag=True,
                     help="Deterministic kernels (torch.use_deterministic_algorithms, cuDNN "
                          "deterministic, CUBLAS_WORKSPACE_CONFIG=:4096:8): reruns on one GPU "
                          "repeat their bits. An op without a deterministic implementation "
                          "stops the run with a usage error naming it. Part of the run's "
                          "identity."),
        click.option("--tokenizer", type=click.Choice(["bytes", "bpe"]), default="bytes",
                     show_default=True,
                     help="bytes (vocabulary 256) or a BPE trained on the corpus's training "
                          "documents (cached next to the run; needs --vocab-size)."),
        click.option("--vocab-size", type=int, default=0,
                     help="BPE vocabulary size (with --tokenizer bpe)."),
        click.option("--debug-nan-at-step", type=int, default=None, hidden=True),
        click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _seed_list(seeds: str) -> list[int]:
    """``--seeds 0,1,2`` as integers; anything else is a usage error naming the option."""
    try:
        return [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise click.BadParameter(f"{seeds!r} is not a comma-separated list of integers",
                                 param_hint="--seeds") from None


@click.group("train", invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@_train_options
@click.pass_context
def train_group(ctx, model, recipe, tokens, seed, out, seq_len, batch_size, grad_accum, lr,
                warmup_frac, min_lr_frac, weight_decay, grad_clip, precision, backend, device,
                corpus, val_fraction, eval_every, eval_tokens, ckpt_every, keep_checkpoints,
                validate_every, decompose, quant_time_every, threads, stop_after, stop_after_seconds,
                no_progress,
                fsdp, cuda_graph, deterministic, tokenizer, vocab_size, debug_nan_at_step,
                as_json):
    """Train a Llama/Qwen model (random init) with an MX recipe.

    \b
    mxref train --model llama-30m --recipe mxfp4-fdw --tokens 20000000 --out runs/fdw
    mxref train compare runs/bf16 runs/fdw --out runs/cmp
    mxref train experiment amd --scale tiny --out runs/amd

    Exit codes: 0 ok; 2 usage/input error; 3 in-run validation failed; 4 NaN/inf loss.
    """
    if ctx.invoked_subcommand is not None:
        return
    if model is None or out is None:
        raise click.UsageError("--model and --out are required (or give a subcommand: "
                               + ", ".join(train_group.commands) + ")")
    from .trainer import TrainConfig, train

    cfg = TrainConfig(model=model, recipe=recipe, tokens=tokens, seed=seed, seq_len=seq_len,
                      batch_size=batch_size, grad_accum=grad_accum, lr=lr,
                      warmup_frac=warmup_frac, min_lr_frac=min_lr_frac,
                      weight_decay=weight_decay, grad_clip=grad_clip, precision=precision,
                      backend=backend, device=device, corpus=corpus, val_fraction=val_fraction,
                      eval_every=eval_every, eval_tokens=eval_tokens, ckpt_every=ckpt_every,
                      keep_checkpoints=keep_checkpoints, validate_every=validate_every,
                      decompose=decompose,
                      quant_time_every=quant_time_every, out=out, progress=not no_progress, threads=threads,
                      stop_after=stop_after, stop_after_seconds=stop_after_seconds,
                      debug_nan_at_step=debug_nan_at_step,
                      fsdp=fsdp, tokenizer=tokenizer, vocab_size=vocab_size,
                      cuda_graph=cuda_graph, deterministic=deterministic)
    try:
        summary = train(cfg)
    except MXRefError as e:
        _fail(str(e), _exit_code(e))
    if int(os.environ.get("RANK", "0")) != 0:  # torchrun: rank 0 reports
        return
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(f"{summary['model']} {summary['recipe']} seed {summary['seed']}: "
                   f"{summary['status']}, {summary['steps_done']} steps, {summary['tokens']} "
                   f"tokens, train loss {_num(summary['final_train_loss'])}, val loss "
                   f"{_num(summary['final_val_loss'])}, "
                   f"{summary['median_tokens_per_s'] or 0:.0f} tokens/s -> {out}")


def _num(v):
    return "-" if v is None else f"{v:.4f}"


@train_group.command("compare")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", "-o", type=click.Path(file_okay=False),
              help="Write compare.json/.md/.png here (default: the parent of the first run).")
@click.option("--grid", default=None,
              help="Add this experiment grid's paired contrasts (amd, decomp, ms-fp4, "
                   "hopper-moe).")
@click.option("--title", default="", help="Title of the plot.")
@click.option("--at-step", type=click.IntRange(0), default=None,
              help="Cut every run after this step and compare them as they stood then (runs "
                   "that stopped at different points; a contrast uses the seeds whose runs "
                   "reached it).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def compare_cmd(runs, out, grid, title, at_step, as_json):
    """dL versus the bf16 run of the same seed: final, smoothed, extra tokens, curves."""
    from .compare import compare_runs, contrasts, markdown_table, public, write_compare
    from .experiments import CONTRASTS

    if grid is not None and grid not in CONTRASTS:
        _fail(f"unknown grid {grid!r}; known: {', '.join(CONTRASTS)}", EXIT_USAGE)
    try:
        report = compare_runs(runs, at_step=at_step)
    except MXRefError as e:
        _fail(str(e), EXIT_USAGE)
    if grid is not None:
        report["contrasts"] = contrasts(report, CONTRASTS[grid])
    if not report["baselines"]:
        _fail("no bf16 run among the arguments: dL needs a baseline (train one with "
              "--recipe bf16 and the same model, seed, data and budget)", EXIT_USAGE)
    dest = Path(out) if out else Path(runs[0]).resolve().parent
    files = write_compare(report, dest, title=title)
    if as_json:
        click.echo(json.dumps({**public(report), "files": files}, indent=2))
        return
    click.echo(markdown_table(report), nl=False)
    if report["unpaired"]:
        click.echo(f"unpaired (no bf16 run with the same model/seed/data/budget): "
                   f"{', '.join(report['unpaired'])}", err=True)
    click.echo(f"wrote {files['json']}, {files['md']}, {files['png']}", err=True)


@train_group.command("experiment")
@click.argument("name")
@click.option("--scale", default="tiny", show_default=True,
              help="tiny (CPU minutes), small (one GPU, llama-30m), medium (llama-125m, 100M "
                   "tokens, one GPU per arm), anchor (training_anchors C.0 30M).")
@click.option("--seeds", default="0", show_default=True, help="Comma-separated seeds.")
@click.option("--out", "-o", type=click.Path(file_okay=False), required=True)
@click.option("--arms", default=None,
              help="Comma-separated subset of the grid's arms (default: all of them).")
@click.option("--jobs", type=click.IntRange(1), default=1, show_default=True,
              help="Parallel run processes, one GPU each (round-robin over the visible GPUs).")
@click.option("--time-budget", type=click.FloatRange(0), default=None,
              help="Seconds for the whole command: runs stop with a checkpoint inside it; "
                   "the same command again resumes them.")
@click.option("--min-start", type=click.FloatRange(0), default=120.0, show_default=True,
              help="With --time-budget: start no run with fewer seconds left.")
@click.option("--tokens", type=click.IntRange(1), default=None, help="Override the scale's budget.")
@click.option("--precision", type=click.Choice(["bf16", "fp32"]), default=None)
@click.option("--device", default="auto", show_default=True)
@click.option("--validate-every", type=click.IntRange(0), default=None)
@click.option("--decompose", is_flag=True, default=None,
              help="Quantized arms: decompose the checked operands (needs --validate-every).")
@click.option("--threads", type=click.IntRange(0), default=0, show_default=True)
@click.option("--no-progress", is_flag=True)
@click.option("--json", "as_json", is_flag=True)
def experiment_cmd(name, scale, seeds, out, arms, jobs, time_budget, min_start, tokens, precision,
                   device, validate_every, decompose, threads, no_progress, as_json):
    """Run a paired-seed grid (amd, decomp, ms-fp4, hopper-moe), then compare."""
    from .compare import markdown_table, public
    from .experiments import exit_code, run_experiment

    seed_list = _seed_list(seeds)
    try:
        arm_list = None if arms is None else [a.strip() for a in arms.split(",") if a.strip()]
        report = run_experiment(name, scale, seed_list, Path(out), progress=not no_progress,
                                arms=arm_list, jobs=jobs, time_budget=time_budget,
                                min_start_s=min_start, tokens=tokens, precision=precision, device=device,
                                validate_every=validate_every, threads=threads,
                                decompose=decompose or None)
    except MXRefError as e:
        _fail(str(e), _exit_code(e))
    if as_json:
        click.echo(json.dumps(public(report), indent=2))
    else:
        click.echo(markdown_table(report), nl=False)
    waiting = sorted(k for k, v in report["arm_status"].items() if v in ("stopped", "not started"))
    if waiting:
        click.echo(f"not complete within the time budget: {', '.join(waiting)}; the same "
                   "command resumes them", err=True)
    rc = exit_code(report)
    if rc:
        bad = sorted(k for k, v in report["arm_status"].items()
                     if v not in ("complete", "stopped", "not started"))
        _fail("arm(s) did not finish: " + ", ".join(f"{k} ({report['arm_status'][k]})"
                                                     for k in bad) + f" (logs in {out})", rc)


@train_group.command("rl")
@click.option("--scale", default="tiny", show_default=True,
              help="tiny (CPU smoke) or small (one GPU, ~1-2 min per arm).")
@click.option("--seeds", default="0", show_default=True, help="Comma-separated seeds.")
@click.option("--arms", default=None,
              help="Comma-separated arms (default: all; ARM@rollout / ARM@train quantizes "
                   "one phase only).")
@click.option("--out", "-o", type=click.Path(file_okay=False), required=True)
@click.option("--jobs", type=click.IntRange(1), default=1, show_default=True,
              help="Parallel run processes (spread over the visible GPUs).")
@click.option("--steps", type=click.IntRange(1), default=None, help="Override the RL steps.")
@click.option("--device", default="auto", show_default=True)
@click.option("--compare-only", is_flag=True, help="Only rebuild the compare tables / plots.")
def rl_cmd(scale, seeds, arms, out, jobs, steps, device, compare_only):
    """GRPO RL grid with MXFP4 error arms (issue 32; mxkernels.rl), then a paired compare."""
    from mxkernels.rl.experiment import DEFAULT_ARMS, compare, markdown, run_grid

    if compare_only:
        click.echo(markdown(compare(Path(out))), nl=False)
        return
    seed_list = _seed_list(seeds)
    try:
        rep = run_grid(arms.split(",") if arms else DEFAULT_ARMS, seed_list, Path(out), scale,
                       jobs, steps=steps, device=device)
    except ValueError as e:
        _fail(str(e), EXIT_USAGE)
    click.echo(markdown(rep), nl=False)


@train_group.command("models")
@click.option("--vocab-size", type=click.IntRange(1), default=256, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def models_cmd(vocab_size, as_json):
    """List the named model sizes with their parameter counts."""
    from .models import MODELS, count_params

    rows = []
    for name, spec in MODELS.items():
        rows.append({"name": name, "family": spec.family, "hidden": spec.hidden,
                     "layers": spec.layers, "heads": spec.heads,
                     "intermediate": spec.intermediate, **spec.extra,
                     **count_params(name, vocab_size)})
    if as_json:
        click.echo(json.dumps({"schema": "mxref-train-models/1", "vocab_size": vocab_size,
                               "models": rows}, indent=2))
        return
    click.echo(f"{'model':<16}{'family':<10}{'d':>6}{'L':>4}{'H':>4}{'ffn':>6}"
               f"{'non-emb params':>16}{'total':>14}  active (MoE)")
    for r in rows:
        act = f"{r['non_embedding_active']:,}" if "non_embedding_active" in r else ""
        click.echo(f"{r['name']:<16}{r['family']:<10}{r['hidden']:>6}{r['layers']:>4}"
                   f"{r['heads']:>4}{r['intermediate']:>6}{r['non_embedding']:>16,}"
                   f"{r['total']:>14,}  {act}")


@train_group.command("recipes")
@click.option("--json", "as_json", is_flag=True)
def recipes_cmd(as_json):
    """List the recipes (task A's RECIPES plus the experiment variants)."""
    from .recipes import RECIPES, VARIANTS

    allr = {**RECIPES, **VARIANTS}
    if as_json:
        click.echo(json.dumps({n: r.to_dict() for n, r in allr.items()}, indent=2))
        return
    for n, r in allr.items():
        click.echo(f"{n:<18}{r.description[:100]}")
