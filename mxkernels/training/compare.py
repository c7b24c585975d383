"""Compare training runs against their bf16 baseline: dL, extra tokens, curves.

Pairing: a run's baseline is the run with recipe ``bf16`` and the same model, seed, data
(corpus hash), batch and token budget. With paired batches the per-step difference
``loss_recipe[s] - loss_bf16[s]`` has far less noise than either curve, so it is reported too.

Metrics per run (all losses in nats per token):

* ``dL_val``: final validation loss minus the baseline's (same fixed validation batches).
* ``dL_train_tail``: mean over the last 10% of steps of the paired per-step difference.
* ``dL_train_ema``: difference of the EMA-smoothed training losses at the last step.
* ``dL_train_phases``: the paired difference averaged over phases of the run, steps
  [0, 10%) (the default LR warmup), [10%, 25%), [25%, 50%), [50%, 100%) of the shorter of the
  pair: where a recipe gains or loses, not just where it ends (ms-fp4's DGE leads bf16 by
  0.2 nats over 10-25% of the run and ends level).
* ``extra_tokens_frac``: AMD's metric. ``L*`` = the baseline's EMA loss at its last step;
  ``T_r`` = first token count at which the run's EMA loss is <= ``L*``;
  ``extra = T_r / T_bf16 - 1``. When the run never reaches ``L*`` it is reported as not
  reached (``null``), with the lower bound ``> 0`` (no extrapolation).
* ``extra_tokens_frac_iso``: the same question answered on the bf16 curve, for paired runs of
  equal length (where a worse recipe never reaches the bf16 final loss): bf16 reached the run's
  final EMA loss after ``T_b`` tokens, the run used ``T_r``; ``extra = T_r / T_b - 1``. It
  assumes the token-efficiency gap stays constant, and the bf16 point lies earlier in the LR
  schedule (higher LR, not annealed), so it over-states the gap; label it as an estimate.
* ``step_time_ratio`` / ``peak_mem_ratio``: from the run summaries (separate runs; for a
  same-process measurement use bench/train_step.py).

* ``dL_val_at_bf16_best``: at the evaluation where the baseline's validation loss was
  lowest, the run's validation loss minus the baseline's (same tokens, same batches);
  ``dL_val_best``: the run's lowest validation loss minus the baseline's lowest. When the
  corpus is repeated for many epochs the baseline overfits (its validation loss rises after
  its best point: ``bf16_val_rise``) and the final ``dL_val`` then measures how much a recipe
  slows memorization, not its accuracy; these two do not.
* ``epochs``: training tokens over the corpus's training tokens.

Over seeds, ``dL_val`` and ``dL_train_tail`` get a two-sided 95% Student t interval
(``*_ci95``: the half-width, mean +- half-width; None for one seed). With two seeds t = 12.7:
an honest interval is wide. :func:`contrasts` pairs two recipes seed by seed (their difference
of dL, the same bf16 run cancelling) and gives the same interval.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .errors import RunDirError

SCHEMA = "mxref-train-compare/1"
PHASES = (0.0, 0.1, 0.25, 0.5, 1.0)


def phase_means(diff: np.ndarray, bounds=PHASES) -> list[dict]:
    """Mean of ``diff`` over the steps [floor(a n), floor(b n)) of each phase (a, b); the
    last phase ends at n. A phase with no step (n < 10) is left out."""
    n = len(diff)
    out = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        lo, hi = int(math.floor(a * n)), (n if b >= 1 else int(math.floor(b * n)))
        if hi > lo:
            out.append({"from_frac": a, "to_frac": b, "from_step": lo, "to_step": hi,
                        "dL": float(diff[lo:hi].mean())})
    return out


def load_run(path, at_step: int | None = None) -> dict:
    """A run directory's config, losses and validation points; with ``at_step`` only the
    records of steps <= at_step (the run as it stood then)."""
    p = Path(path)
    try:
        config = json.loads((p / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise RunDirError(f"{p} is not a training run directory (config.json: {e})") from None
    steps, tokens, loss, val = [], [], [], []
    if (p / "log.jsonl").exists():
        for line in (p / "log.jsonl").read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if not isinstance(r.get("loss"), float):
                continue
            if at_step is not None and r["step"] > at_step:
                continue
            steps.append(r["step"])
            tokens.append(r["tokens"])
            loss.append(r["loss"])
            if "val_loss" in r:
                val.append((r["tokens"], r["val_loss"]))
    decomp = []
    if (p / "decomp.jsonl").exists():           # written by --decompose
        for line in (p / "decomp.jsonl").read_text().splitlines():
            try:
                decomp.append(json.loads(line))
            except ValueError:
                continue
    summary = {}
    if (p / "summary.json").exists():
        summary = json.loads((p / "summary.json").read_text())
    t = config["train"]
    return {"path": str(p), "name": p.name, "recipe": config["recipe"]["name"],
            "seed": t["seed"], "model": t["model"], "config": config, "summary": summary,
            "pair_key": (t["model"], t["seed"], config["corpus"]["sha256"], t["seq_len"],
                         t["batch_size"], t["tokens"]),
            "steps": np.array(steps), "tokens": np.array(tokens, dtype=np.float64),
            "loss": np.array(loss, dtype=np.float64), "val": val, "decomp": decomp,
            "at_step": at_step,
            "reached_at_step": at_step is not None and at_step in set(steps)}


def decomposition_summary(runs: list) -> list:
    """Per recipe, over the in-run checks of its runs that wrote decomp.jsonl: by step, the
    mean over the checked operands of the recipe's error-to-signal and of the plain MX
    error-to-signal and energy shares (scale / dead / grid / cross) of the same tensors."""
    by = {}
    for r in runs:
        for d in r.get("decomp") or ():
            by.setdefault(r["recipe"], {}).setdefault(d["step"], []).append(d)
    out = []
    for recipe, steps in by.items():
        rows = []
        for step in sorted(steps):
            ds = steps[step]
            plain = [d["plain"] for d in ds if d.get("plain")]
            rows.append({
                "step": step, "operands": len(ds),
                "recipe_error_to_signal": _mean(d.get("recipe_error_to_signal") for d in ds),
                "plain_error_to_signal": _mean(p["error_to_signal"] for p in plain),
                "plain_energy_share": {k: _mean(p["energy_share"][k] for p in plain)
                                       for k in ("scale", "dead", "grid", "cross")}
                if plain else None})
        out.append({"recipe": recipe, "by_step": rows})
    return out


def ema(x: np.ndarray, alpha: float) -> np.ndarray:
    """Bias-corrected exponential moving average (as in Adam's first moment)."""
    out = np.empty_like(x)
    m = 0.0
    for i, v in enumerate(x):
        m = alpha * m + (1 - alpha) * v
        out[i] = m / (1 - alpha ** (i + 1))
    return out


def ema_alpha(n_steps: int) -> float:
    """Smoothing horizon of ~5% of the run (at least 5 steps)."""
    return 1.0 - 1.0 / max(5.0, 0.05 * n_steps)


def extra_tokens(base_tokens, base_smooth, run_tokens, run_smooth):
    """(extra fraction or None, tokens at which the run reaches the baseline's final loss)."""
    if len(base_smooth) == 0 or len(run_smooth) == 0:
        return None, None
    target = base_smooth[-1]
    hit = np.nonzero(run_smooth <= target)[0]
    if hit.size == 0:
        return None, None
    t = float(run_tokens[hit[0]])
    return t / float(base_tokens[-1]) - 1.0, t


def iso_loss_extra(base_tokens, base_smooth, run_tokens, run_smooth):
    """Extra tokens from the bf16 curve: bf16 reached the run's final loss after ``T_b`` tokens;
    the run needed ``T_r``: extra = T_r / T_b - 1 (None when bf16 never got that low)."""
    if len(base_smooth) == 0 or len(run_smooth) == 0:
        return None
    hit = np.nonzero(base_smooth <= run_smooth[-1])[0]
    if hit.size == 0:
        return None
    return float(run_tokens[-1]) / float(base_tokens[hit[0]]) - 1.0


def compare_pair(run: dict, base: dict) -> dict:
    n = min(len(run["loss"]), len(base["loss"]))
    alpha = ema_alpha(len(base["loss"]))
    row = {"run": run["path"], "name": run["name"], "recipe": run["recipe"], "seed": run["seed"],
           "model": run["model"], "baseline": base["path"], "steps": int(len(run["loss"])),
           "status": run["summary"].get("status", "incomplete")}
    if run["at_step"] is not None:
        # cut at a step both runs reached: compared as they stood then (final = at that step)
        row["at_step"] = run["at_step"]
        row["reached_at_step"] = run["reached_at_step"] and base["reached_at_step"]
    if n == 0:
        return row
    diff = run["loss"][:n] - base["loss"][:n]
    tail = max(1, n // 10)
    rs, bs = ema(run["loss"], alpha), ema(base["loss"], alpha)
    frac, reach = extra_tokens(base["tokens"], bs, run["tokens"], rs)
    row.update({
        "final_train_loss_ema": float(rs[-1]), "bf16_train_loss_ema": float(bs[-1]),
        "dL_train_tail": float(diff[-tail:].mean()),
        "dL_train_ema": float(rs[n - 1] - bs[n - 1]),
        "dL_train_phases": phase_means(diff),
        "extra_tokens_frac": frac, "reached_bf16_loss_at_tokens": reach,
        "extra_tokens_frac_iso": iso_loss_extra(base["tokens"], bs, run["tokens"], rs),
        "reached_bf16_loss": frac is not None,
        "complete_pair": len(run["loss"]) == len(base["loss"]),
    })
    if run["val"] and base["val"]:
        row["final_val_loss"] = run["val"][-1][1]
        row["bf16_val_loss"] = base["val"][-1][1]
        if run["val"][-1][0] == base["val"][-1][0]:
            row["dL_val"] = row["final_val_loss"] - row["bf16_val_loss"]
        bv, rv = dict(base["val"]), dict(run["val"])
        t_best = min(bv, key=bv.get)
        row.update({"bf16_val_best": bv[t_best], "bf16_val_best_tokens": int(t_best),
                    "bf16_val_rise": base["val"][-1][1] - bv[t_best],
                    "dL_val_best": min(rv.values()) - bv[t_best]})
        if t_best in rv:
            row["dL_val_at_bf16_best"] = rv[t_best] - bv[t_best]
    train_tokens = (run["config"].get("corpus") or {}).get("train_tokens")
    if train_tokens:
        row["epochs"] = float(run["tokens"][-1]) / train_tokens if len(run["tokens"]) else 0.0
    rsum, bsum = run["summary"], base["summary"]
    if rsum.get("median_step_time_s") and bsum.get("median_step_time_s"):
        row["step_time_ratio"] = rsum["median_step_time_s"] / bsum["median_step_time_s"]
        row["tokens_per_s"] = rsum.get("median_tokens_per_s")
    # CPU ru_maxrss is a process-wide high-water mark (monotone over the arms of an in-process
    # experiment): only CUDA peaks, reset at the start of every run, are compared
    if rsum.get("peak_mem_bytes") and bsum.get("peak_mem_bytes") and \
            rsum.get("kind") == bsum.get("kind") == "cuda_max_allocated":
        row["peak_mem_bytes"] = rsum["peak_mem_bytes"]
        row["peak_mem_ratio"] = rsum["peak_mem_bytes"] / bsum["peak_mem_bytes"]
    return row


def compare_runs(paths, at_step: int | None = None) -> dict:
    """Pair each run with its bf16 baseline; with ``at_step`` every run is cut after that step
    (a grid whose runs stopped at different points compared where all of them stood)."""
    if at_step is not None and at_step < 0:
        raise RunDirError(f"--at-step must be >= 0, got {at_step}")
    runs = [load_run(p, at_step) for p in paths]
    if not runs:
        raise RunDirError("no run directories to compare")
    bases = {r["pair_key"]: r for r in runs if r["recipe"] == "bf16"}
    rows, unpaired = [], []
    for r in runs:
        b = bases.get(r["pair_key"])
        if b is None:
            unpaired.append(r["path"])
            continue
        if r is not b:
            rows.append(compare_pair(r, b))
    by_recipe = {}
    for row in rows:
        by_recipe.setdefault(row["recipe"], []).append(row)
    agg = []
    for recipe, rs in by_recipe.items():
        vals = [x["dL_val"] for x in rs if x.get("dL_val") is not None]
        tails = [x["dL_train_tail"] for x in rs if x.get("dL_train_tail") is not None]
        extras = [x.get("extra_tokens_frac") for x in rs]
        isos = [x.get("extra_tokens_frac_iso") for x in rs]
        cv, ct = ci95(vals), ci95(tails)
        cb = ci95(x.get("dL_val_at_bf16_best") for x in rs)
        agg.append({"recipe": recipe, "seeds": sorted(x["seed"] for x in rs),
                    "dL_val_mean": float(np.mean(vals)) if vals else None,
                    "dL_val_std": float(np.std(vals, ddof=1)) if len(vals) > 1 else None,
                    "dL_val_ci95": cv["ci95"] if cv else None,
                    "dL_train_tail_ci95": ct["ci95"] if ct else None,
                    "dL_val_at_bf16_best_mean": cb["mean"] if cb else None,
                    "dL_val_at_bf16_best_ci95": cb["ci95"] if cb else None,
                    "epochs_max": max((x.get("epochs") or 0.0 for x in rs), default=0.0),
                    "dL_train_tail_mean": float(np.mean(tails)) if tails else None,
                    "extra_tokens_frac_mean": float(np.mean(extras))
                    if extras and all(e is not None for e in extras) else None,
                    "reached_in_all_seeds": all(e is not None for e in extras),
                    "extra_tokens_frac_iso_mean": float(np.mean(isos))
                    if isos and all(e is not None for e in isos) else None,
                    "step_time_ratio_mean": _mean(x.get("step_time_ratio") for x in rs),
                    "peak_mem_ratio_mean": _mean(x.get("peak_mem_ratio") for x in rs),
                    "dL_train_phases_mean": _phase_mean(rs),
                    "statuses": sorted({_status(x) for x in rs}),
                    **({"reached_at_step_all": all(x.get("reached_at_step") for x in rs)}
                       if at_step is not None else {})})
    return {"schema": SCHEMA, "at_step": at_step, "runs": rows, "by_recipe": agg,
            "unpaired": unpaired, "baselines": [b["path"] for b in bases.values()],
            "decomposition": decomposition_summary(runs), "_loaded": runs}


# two-sided 95% Student t quantiles t_{0.975, df}, df = 1..30
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    """t_{0.975, df}: the table for df <= 30, then the Cornish-Fisher expansion to second
    order, z + (z^3 + z) / (4 df) + (5 z^5 + 16 z^3 + 3 z) / (96 df^2) (within 1e-4)."""
    if df < 1:
        raise ValueError("a t interval needs at least two values")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df * df)


def ci95(values) -> dict | None:
    """Mean, sample std, n and the 95% t half-width of ``values`` (None-free); None for
    fewer than one value, no interval (``ci95`` None) for one."""
    v = [float(x) for x in values if x is not None and math.isfinite(float(x))]
    if not v:
        return None
    n, m = len(v), float(np.mean(v))
    sd = float(np.std(v, ddof=1)) if n > 1 else None
    return {"mean": m, "std": sd, "n": n,
            "ci95": t975(n - 1) * sd / math.sqrt(n) if n > 1 else None}


CONTRAST_KEYS = ("dL_val", "dL_train_tail", "dL_val_at_bf16_best")


def contrasts(report: dict, pairs) -> list[dict]:
    """For each (a, b, what): per seed, dL(a) - dL(b) (val and train tail; the shared bf16
    run cancels, so this is a's loss minus b's), then mean and 95% t interval over the seeds
    that have both arms complete."""
    rows = {(r["recipe"], r["seed"]): r for r in report["runs"]}
    out = []
    for a, b, what in pairs:
        seeds = sorted({s for (rc, s) in rows if rc == a} & {s for (rc, s) in rows if rc == b},
                       key=str)
        per_seed = []
        for s in seeds:
            ra, rb = rows[(a, s)], rows[(b, s)]
            if not (_usable(ra) and _usable(rb)):
                continue
            d = {"seed": s}
            for k in CONTRAST_KEYS:
                if ra.get(k) is not None and rb.get(k) is not None:
                    d[k] = ra[k] - rb[k]
            per_seed.append(d)
        if not per_seed:
            continue
        out.append({"a": a, "b": b, "what": what, "per_seed": per_seed,
                    **{k: ci95(d.get(k) for d in per_seed) for k in CONTRAST_KEYS}})
    return out


def _status(row) -> str:
    if row.get("at_step") is None:
        return row["status"]
    return (f"reached step {row['at_step']}" if row.get("reached_at_step")
            else f"stopped before step {row['at_step']}")


def _usable(row) -> bool:
    """A run row a contrast may use: complete, or cut at a step it and its baseline reached."""
    if row.get("at_step") is not None:
        return bool(row.get("reached_at_step"))
    return row.get("status") == "complete"


def _pm(c) -> str:
    if not c:
        return "-"
    return _fmt(c["mean"]) + (f" ± {c['ci95']:.4f}" if c.get("ci95") is not None else "")


def _phase_mean(rows) -> list[dict] | None:
    """Per phase, the mean over seeds of dL_train_phases (rows whose phases line up)."""
    ph = [r.get("dL_train_phases") for r in rows if r.get("dL_train_phases")]
    if not ph or any([(p["from_frac"], p["to_frac"]) for p in x] !=
                     [(p["from_frac"], p["to_frac"]) for p in ph[0]] for x in ph):
        return None
    return [{"from_frac": p["from_frac"], "to_frac": p["to_frac"],
             "dL": float(np.mean([x[i]["dL"] for x in ph]))} for i, p in enumerate(ph[0])]


def _mean(values):
    v = [x for x in values if x is not None]
    return float(np.mean(v)) if v else None


def _fmt(v, spec="+.4f"):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def markdown_table(report: dict) -> str:
    lines = []
    if report.get("at_step") is not None:
        lines += [f"Every run cut after step {report['at_step']}: 'final' means at that step "
                  "(runs that did not reach it are marked in the status column).", ""]
    lines += ["| recipe | seeds | dL val | dL train (last 10%) | extra tokens to bf16 loss "
             "(direct; iso-loss estimate) | step time / bf16 | peak mem / bf16 | status |",
             "|---|---|---|---|---|---|---|---|"]
    for a in report["by_recipe"]:
        extra = (_fmt(100 * a["extra_tokens_frac_mean"], "+.1f") + "%") \
            if a["extra_tokens_frac_mean"] is not None else "not reached"
        iso = a.get("extra_tokens_frac_iso_mean")
        extra += "; " + ((_fmt(100 * iso, "+.1f") + "%") if iso is not None else "-")
        lines.append(f"| {a['recipe']} | {','.join(map(str, a['seeds']))} | "
                     f"{_fmt(a['dL_val_mean'])}"
                     f"{' ± ' + _fmt(a.get('dL_val_ci95'), '.4f') if a.get('dL_val_ci95') else ''} | "
                     f"{_fmt(a['dL_train_tail_mean'])}"
                     f"{' ± ' + _fmt(a.get('dL_train_tail_ci95'), '.4f') if a.get('dL_train_tail_ci95') else ''}"
                     f" | {extra} | "
                     f"{_fmt(a['step_time_ratio_mean'], '.2f')} | "
                     f"{_fmt(a['peak_mem_ratio_mean'], '.3f')} | {', '.join(a['statuses'])} |")
    best = [a for a in report["by_recipe"] if a.get("dL_val_at_bf16_best_mean") is not None]
    if best:
        lines += ["", "dL val at the evaluation where bf16's validation loss was lowest "
                  "(mean over seeds ± 95% t half-width):", "",
                  "| recipe | dL val at bf16's best | epochs |", "|---|---|---|"]
        for a in best:
            ci = a.get("dL_val_at_bf16_best_ci95")
            lines.append(f"| {a['recipe']} | {_fmt(a['dL_val_at_bf16_best_mean'])}"
                         f"{' ± ' + format(ci, '.4f') if ci else ''} | "
                         f"{_fmt(a.get('epochs_max'), '.2f')} |")
    rose = [r for r in report["runs"] if r.get("bf16_val_rise") is not None and
            r["bf16_val_rise"] > 0.02 * abs(r["bf16_val_best"])]
    if rose:
        worst = max(rose, key=lambda r: r["bf16_val_rise"])
        lines += ["", f"**The baseline overfits**: bf16's validation loss rose by up to "
                  f"{worst['bf16_val_rise']:.3f} after its best point "
                  f"({worst['bf16_val_best']:.3f} at {worst['bf16_val_best_tokens']:,} tokens; "
                  f"{_fmt(worst.get('epochs'), '.1f')} epochs in all). The final dL val then "
                  "measures how much a recipe slows memorization, not its accuracy: read dL "
                  "val at bf16's best."]
    if any(a.get("dL_val_ci95") for a in report["by_recipe"]):
        lines += ["", "± is the 95% Student t half-width over seeds (t = 12.7 for two seeds)."]
    cons = report.get("contrasts") or []
    if cons:
        lines += ["", "Contrasts: a - b paired per seed (the same bf16 run cancels); mean ± 95% t "
                  "half-width over seeds:", "",
                  "| a - b | what | seeds | d val loss (final) | d val loss at bf16's best | "
                  "d train loss (last 10%) | per seed (final val; at bf16's best) |",
                  "|---|---|---|---|---|---|---|"]
        for c in cons:
            per = ", ".join(f"s{d['seed']} {_fmt(d.get('dL_val'))}; "
                            f"{_fmt(d.get('dL_val_at_bf16_best'))}" for d in c["per_seed"])
            lines.append(f"| {c['a']} - {c['b']} | {c['what']} | {len(c['per_seed'])} | "
                         f"{_pm(c['dL_val'])} | {_pm(c.get('dL_val_at_bf16_best'))} | "
                         f"{_pm(c['dL_train_tail'])} | {per} |")
    status = report.get("arm_status") or {}
    unfinished = {k: v for k, v in status.items() if v != "complete"}
    if unfinished:
        lines += ["", "Not complete: " + ", ".join(f"{k} ({v})" for k, v in
                                                    sorted(unfinished.items())) +
                  " (run the same command again to resume)."]
    phased = [a for a in report["by_recipe"] if a.get("dL_train_phases_mean")]
    if phased:
        heads = [f"{100 * p['from_frac']:g}-{100 * p['to_frac']:g}%"
                 for p in phased[0]["dL_train_phases_mean"]]
        lines += ["", "Paired dL train by phase of the run (mean over the phase's steps of "
                  "loss_recipe - loss_bf16, then over seeds; the first 10% is the LR warmup):",
                  "", "| recipe | " + " | ".join(heads) + " |",
                  "|---|" + "---|" * len(heads)]
        for a in phased:
            lines.append(f"| {a['recipe']} | " + " | ".join(
                _fmt(p["dL"], "+.3f") for p in a["dL_train_phases_mean"]) + " |")
    dec = report.get("decomposition") or []
    if dec:
        lines += ["", "Error at the in-run checks (mean over the checked operands; e/s = "
                  "||q - x||^2 / ||x||^2; plain = mxref.decompose of the same tensors under "
                  "plain MX, with its energy shares):", "",
                  "| recipe | step | operands | recipe e/s | plain e/s | scale | dead | grid | "
                  "cross |", "|---|---|---|---|---|---|---|---|---|"]
        for d in dec:
            for r in d["by_step"]:
                sh = r["plain_energy_share"] or {}
                lines.append(f"| {d['recipe']} | {r['step']} | {r['operands']} | "
                             f"{_fmt(r['recipe_error_to_signal'], '.4g')} | "
                             f"{_fmt(r['plain_error_to_signal'], '.4g')} | " +
                             " | ".join(_fmt(sh.get(k), ".3f") for k in
                                        ("scale", "dead", "grid", "cross")) + " |")
    return "\n".join(lines) + "\n"


def plot(report: dict, path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["_loaded"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 8), sharex=True)
    # one colour per recipe (the same in both panels), one line style per seed
    recipes = list(dict.fromkeys(r["recipe"] for r in runs if r["recipe"] != "bf16"))
    palette = plt.get_cmap("tab10").colors
    colour = {n: palette[i % len(palette)] for i, n in enumerate(recipes)}
    colour["bf16"] = "black"
    seeds = sorted({r["seed"] for r in runs}, key=str)
    dash = {s: ("-", "--", ":", "-.")[i % 4] for i, s in enumerate(seeds)}

    def style(r, lw):
        return {"color": colour[r["recipe"]], "ls": dash[r["seed"]],
                "lw": 2 if r["recipe"] == "bf16" else lw}

    for r in runs:
        if len(r["loss"]) == 0:
            continue
        a = ema_alpha(len(r["loss"]))
        ax1.plot(r["tokens"], ema(r["loss"], a), label=f"{r['recipe']} s{r['seed']}",
                 **style(r, 1.2))
        if r["val"]:
            vt, vl = zip(*r["val"])
            ax1.plot(vt, vl, "o", ms=3, color=colour[r["recipe"]])
    ax1.set_yscale("log")
    bases = {b["pair_key"]: b for b in runs if b["recipe"] == "bf16"}
    for r in runs:
        b = bases.get(r["pair_key"])
        if b is None or r is b:
            continue
        n = min(len(r["loss"]), len(b["loss"]))
        if n == 0:
            continue
        d = ema(r["loss"][:n] - b["loss"][:n], ema_alpha(n))
        ax2.plot(r["tokens"][:n], d, label=f"{r['recipe']} s{r['seed']}", **style(r, 1.2))
    ax2.axhline(0, color="black", lw=1)
    ax1.set_ylabel("train loss (EMA; dots: val)")
    ax2.set_ylabel("paired dL vs bf16 (EMA)")
    ax2.set_xlabel("tokens")
    ax1.legend(fontsize=7, ncol=2)
    ax2.legend(fontsize=7, ncol=2)
    ax1.set_title(title or "loss vs tokens")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def public(report: dict) -> dict:
    return {k: v for k, v in report.items() if not k.startswith("_")}


def write_compare(report: dict, out: Path, title: str = "") -> dict:
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(public(report), indent=2) + "\n")
    (out / "compare.md").write_text((f"## {title}\n\n" if title else "") + markdown_table(report))
    plot(report, out / "compare.png", title)
    return {"json": str(out / "compare.json"), "md": str(out / "compare.md"),
            "png": str(out / "compare.png")}
