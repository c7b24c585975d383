"""One command per RL grid, and the paired compare.

``mxref train rl --scale small --seeds 0,1,2 --jobs 9 --out DIR`` (or ``python -m
mxkernels.rl grid ...``): pretrain one policy per seed (shared by every arm of that seed), then
run every arm x seed (``DIR/<arm>-s<seed>/``; complete runs are skipped, so a grid resumes),
then :func:`compare` writes ``DIR/rl_compare.{json,md}`` and ``rl_curves.png`` /
``rl_decomp.png``.

Pairing: every arm of a seed starts from the same pretrained weights and sees the same RL
prompts, sampler random stream and held-out set; only the quantizer differs. Differences vs
the bf16 arm are taken per seed, then averaged, with a 95% Student-t interval over seeds.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..training.slots import child_visible_devices
from .loop import RLConfig, run
from .quant import ARM_NOTES, ARMS

SCALES = {
    "tiny": dict(digits=1, steps=4, prompts=4, group=4, log_every=2, eval_n=32, decomp_every=4,
                 pretrain_steps=40, pretrain_batch=64, pretrain_check_every=10,
                 pretrain_target=0.3, note="CPU smoke: 4 steps, 1 digit"),
    "small": dict(digits=3, steps=150, prompts=32, group=8, log_every=10, eval_n=512,
                  decomp_every=30, pretrain_steps=3000, pretrain_batch=256,
                  pretrain_check_every=25, pretrain_target=0.4,
                  note="one GPU: llama-tiny, 3-digit addition, pretrained to ~40% greedy "
                       "accuracy, 150 GRPO steps of 32 prompts x 8 samples"),
}
# every arm quantizes rollouts and training ('both'); ARM@where runs an arm with the
# quantizer on one phase only ('mxfp4@rollout': quantized sampler, bf16 trainer -> mismatch)
DEFAULT_ARMS = list(ARMS) + ["mxfp4@rollout"]


def split_arm(label: str) -> tuple[str, str]:
    arm, _, where = label.partition("@")
    return arm, where or "both"


def arm_label(arm: str, where: str) -> str:
    return arm if where == "both" else f"{arm}@{where}"


def configs(arms, seeds, out: Path, scale: str, **over) -> list[RLConfig]:
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; known: {', '.join(SCALES)}")
    sc = {k: v for k, v in SCALES[scale].items() if k != "note"}
    sc.update({k: v for k, v in over.items() if v is not None})
    cfgs = []
    for s in seeds:
        for label in arms:
            arm, where = split_arm(label)
            kw = dict(sc, where=where) if "@" in label else sc
            cfgs.append(RLConfig(arm=arm, seed=s, out=str(out / f"{label}-s{s}"), **kw))
    for c in cfgs:
        c.check()
    return cfgs


def _subprocess(cfg: RLConfig, mode: str, gpu: int | None, logdir: Path) -> int:
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = child_visible_devices(gpu, os.environ)
    name = f"{Path(cfg.out).name}" if mode == "run" else f"pretrain-s{cfg.seed}"
    with open(logdir / f"{name}.log", "w") as f:
        return subprocess.call([sys.executable, "-m", "mxkernels.rl", mode, "--config",
                                json.dumps(asdict(cfg))], env=env, stdout=f, stderr=subprocess.STDOUT)


def run_grid(arms, seeds, out: Path, scale="tiny", jobs=1, progress=True, **over) -> dict:
    """Pretrain per seed, run every arm x seed (``jobs`` parallel processes when > 1, spread
    over the visible GPUs), then compare."""
    out.mkdir(parents=True, exist_ok=True)
    cfgs = configs(arms, seeds, out, scale, **over)
    status = {}
    if jobs <= 1:
        for c in cfgs:
            try:
                status[c.out] = run(c, progress=progress)["status"]
            except Exception as e:  # noqa: BLE001 - one broken arm must not lose the others
                status[c.out] = f"failed: {e!r}"
    else:
        import torch

        from mxkernels.training.slots import GpuSlots

        ngpu = torch.cuda.device_count() if c_dev(cfgs) != "cpu" else 0
        logdir = out / "logs"
        logdir.mkdir(exist_ok=True)
        for c in cfgs:
            c.threads = c.threads or 1                       # many processes share the CPUs
        firsts = {c.seed: c for c in cfgs}.values()           # one pretrain per seed
        slots = GpuSlots(jobs, ngpu)                          # one run per GPU at a time

        def sub(cfg, mode):
            with slots.take() as gpu:
                return _subprocess(cfg, mode, gpu, logdir)

        with ThreadPoolExecutor(jobs) as ex:
            list(ex.map(lambda c: sub(c, "pretrain"), firsts))
        with ThreadPoolExecutor(jobs) as ex:
            rcs = list(ex.map(lambda c: sub(c, "run"), cfgs))
        for c, rc in zip(cfgs, rcs):
            status[c.out] = "complete" if rc == 0 else f"rc={rc}"
    (out / "grid.json").write_text(json.dumps({"scale": scale, "scale_settings": SCALES[scale],
                                               "arms": list(arms), "seeds": list(seeds),
                                               "overrides": {k: v for k, v in over.items()
                                                             if v is not None},
                                               "status": status}, indent=2) + "\n")
    return compare(out)


def c_dev(cfgs) -> str:
    return cfgs[0].device if cfgs else "cpu"


# ---- compare -------------------------------------------------------------------------------
def load_runs(root: Path) -> dict:
    """{(arm, seed): [log records]} of the complete runs under root."""
    runs = {}
    for d in sorted(Path(root).iterdir()):
        s, lg = d / "summary.json", d / "log.jsonl"
        if not (d.is_dir() and s.exists() and lg.exists()):
            continue
        summ = json.loads(s.read_text())
        if summ.get("status") != "complete":
            continue
        c = summ["config"]
        recs = [json.loads(line) for line in lg.read_text().splitlines() if line.strip()]
        runs[(arm_label(c["arm"], c.get("where", "both")), c["seed"])] = recs
    return runs


def _mean(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.mean(xs)) if xs else float("nan")


def _1m(c):
    return None if c is None else 1 - c


def run_metrics(recs: list) -> dict:
    """Scalar metrics of one run (means over its log records unless named otherwise)."""
    train = [r for r in recs if "entropy" in r]
    held = [r["reward_heldout"] for r in recs if "reward_heldout" in r]
    m = {
        "heldout_step0": held[0] if held else float("nan"),
        "heldout_final": _mean(held[-3:]),
        "train_greedy_final": _mean([r["reward_train_greedy"] for r in recs
                                     if "reward_train_greedy" in r][-3:]),
        "reward_train": _mean([r["reward_train"] for r in train]),
        "entropy": _mean([r["entropy"] for r in train]),
        "entropy_step0": train[0]["entropy"] if train else float("nan"),
        "kl_sampler_bf16": _mean([r.get("kl_sampler_bf16") for r in train]),
        "kl_sampler_trainer": _mean([r["mismatch"]["kl_sampler_trainer"] for r in train]),
        "ratio_std": _mean([r["mismatch"]["ratio_std"] for r in train]),
        "grad_1mcos": _mean([_1m(r["grad"]["all"]["cos"]) for r in train if "grad" in r]),
        "grad_norm_ratio": _mean([r["grad"]["all"]["norm_ratio"] for r in train if "grad" in r]),
        "grad_lognorm_dev": _mean([abs(math.log(r["grad"]["all"]["norm_ratio"])) for r in train
                                   if "grad" in r and r["grad"]["all"]["norm_ratio"]]),
    }
    m["heldout_gain"] = m["heldout_final"] - m["heldout_step0"]
    layers = sorted({k for r in train for k in r.get("grad", {}) if k != "all"})
    for k in layers:
        m[f"grad_1mcos.{k}"] = _mean([_1m(r["grad"][k]["cos"]) for r in train if k in r["grad"]])
        m[f"grad_norm_ratio.{k}"] = _mean([r["grad"][k]["norm_ratio"] for r in train
                                           if k in r["grad"]])
    for op in ("act", "weight"):
        rows = [v for r in train for k, v in r.get("decomp", {}).items() if f".{op}." in k]
        for c in ("scale", "dead", "grid", "cross"):
            m[f"share_{c}.{op}"] = _mean([v["energy_share"][c] for v in rows])
        m[f"deadzone_fraction.{op}"] = _mean([v["deadzone_fraction"] for v in rows])
        m[f"passthrough_fraction.{op}"] = _mean([v["passthrough_fraction"] for v in rows])
    return m


def interval(d) -> tuple[float, float, float, int]:
    """(mean, lo, hi, n): 95% Student-t interval of the mean of d (NaN bounds for n < 2)."""
    d = np.array([x for x in d if x is not None and math.isfinite(x)], dtype=float)
    n = d.size
    if n == 0:
        return float("nan"), float("nan"), float("nan"), 0
    mu = float(d.mean())
    if n < 2:
        return mu, float("nan"), float("nan"), 1
    from scipy.stats import t

    h = float(t.ppf(0.975, n - 1) * d.std(ddof=1) / math.sqrt(n))
    return mu, mu - h, mu + h, n


TABLE_METRICS = [("heldout_step0", "held-out acc @0"), ("heldout_final", "held-out acc end"),
                 ("heldout_gain", "RL gain"), ("entropy", "entropy"),
                 ("kl_sampler_bf16", "KL(samp||bf16)"), ("kl_sampler_trainer", "KL(samp||train)"),
                 ("grad_1mcos", "1-cos(g,g_bf16)"), ("grad_norm_ratio", "|g|/|g_bf16|")]


def _paired(per, arm, base, key):
    seeds = sorted(set(per.get(arm, {})) & set(per.get(base, {})))
    return interval([per[arm][s][key] - per[base][s][key] for s in seeds])


def _verdict(iv, sign) -> str:
    _, lo, hi, n = iv
    if n < 2 or not math.isfinite(lo):
        return f"inconclusive (n={n})"
    if (sign > 0 and lo > 0) or (sign < 0 and hi < 0):
        return "supported"
    if (sign > 0 and hi < 0) or (sign < 0 and lo > 0):
        return "contradicted"
    return "not resolved (interval spans 0)"


def claims(per) -> list:
    """The seed's pathway claims as paired contrasts (arm - other, per seed) with intervals."""
    out = []

    def add(claim, arm, other, key, sign, what):
        if arm in per and other in per:
            iv = _paired(per, arm, other, key)
            out.append({"claim": claim, "contrast": f"{arm} - {other}", "metric": key,
                        "expect": "> 0" if sign > 0 else "< 0", "mean": iv[0], "lo": iv[1],
                        "hi": iv[2], "n": iv[3], "verdict": _verdict(iv, sign), "what": what})

    for other in ("dead-only", "grid-only"):
        add("scale bias hurts gradient accuracy", "scale-only", other, "grad_1mcos", +1,
            "gradient direction error vs the bf16 gradient, larger for scale bias")
        add("scale bias hurts gradient accuracy", "scale-only", other, "grad_lognorm_dev", +1,
            "|log(|g| / |g_bf16|)|: gradient norm error, either direction")
    for other in ("scale-only", "grid-only"):
        add("deadzone degrades rollout quality", "dead-only", other, "heldout_step0", -1,
            "greedy held-out accuracy of the quantized sampler at the pretrained weights")
        add("deadzone degrades rollout quality", "dead-only", other, "heldout_final", -1,
            "held-out accuracy after RL")
    for other in ("bf16", "scale-only", "dead-only"):
        add("grid noise raises policy entropy", "grid-only", other, "entropy", +1,
            "mean per-token entropy of the sampler over the run")
    for arm in ("macro", "outlier", "aqn", "all3"):
        add("corrections recover bf16", arm, "mxfp4", "heldout_final", +1,
            "held-out accuracy after RL, vs plain MXFP4")
    add("rollout-only quantization: sampler/trainer mismatch", "mxfp4@rollout", "mxfp4",
        "kl_sampler_trainer", +1, "quantized sampler + bf16 trainer vs the same quantizer on both")
    add("corrections recover bf16", "all3", "bf16", "heldout_final", 0,
        "all three vs bf16: recovery means an interval around 0 (|d| small)")
    if out and out[-1]["contrast"] == "all3 - bf16":
        c = out[-1]
        c["expect"] = "~ 0"
        c["verdict"] = ("consistent with recovery (interval contains 0)"
                        if c["n"] >= 2 and c["lo"] <= 0 <= c["hi"] else
                        "gap remains" if c["n"] >= 2 else f"inconclusive (n={c['n']})")
    return out


def compare(root: Path, plots=True) -> dict:
    root = Path(root)
    runs = load_runs(root)
    per: dict = {}
    for (arm, seed), recs in runs.items():
        per.setdefault(arm, {})[seed] = run_metrics(recs)
    arms = _order(per)
    table = []
    for a in arms:
        base, where = split_arm(a)
        note = ARM_NOTES.get(base, "") + ("" if where == "both" else
                                          f"; quantizer on the {where} phase only")
        row = {"arm": a, "seeds": sorted(per[a]), "note": note}
        keys = sorted({k for m in per[a].values() for k in m})
        for k in keys:
            row[k] = interval([m[k] for m in per[a].values()])
            if a != "bf16" and "bf16" in per:
                row[f"d_{k}"] = _paired(per, a, "bf16", k)
        table.append(row)
    rep = {"schema": "mxref-rl-compare/1", "root": str(root), "arms": arms, "table": table,
           "claims": claims(per)}
    (root / "rl_compare.json").write_text(json.dumps(rep, indent=2, default=_jsonable) + "\n")
    (root / "rl_compare.md").write_text(markdown(rep))
    if plots and runs:
        plot(runs, per, root)
    return rep


def _order(per) -> list:
    return [a for a in ARMS if a in per] + sorted(a for a in per if a not in ARMS)


def _jsonable(o):
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)


def _fmt(iv, pct=False):
    mu, lo, hi, n = iv
    f = (lambda v: f"{100 * v:.1f}") if pct else (lambda v: f"{v:.3g}")
    if not math.isfinite(mu):
        return "-"
    return f"{f(mu)}" if n < 2 or not math.isfinite(lo) else f"{f(mu)} [{f(lo)}, {f(hi)}]"


def markdown(rep) -> str:
    lines = ["# RL grid: MXFP4 error arms (issue 32)", "",
             "Mean over seeds [95% t interval]; `d` rows are paired differences vs bf16 of "
             "the same seed. Accuracies in %.", ""]
    hdr = "| arm | seeds | " + " | ".join(t for _, t in TABLE_METRICS) + " |"
    lines += [hdr, "|" + "---|" * (len(TABLE_METRICS) + 2)]
    for row in rep["table"]:
        cells = [_fmt(row.get(k, (math.nan,) * 3 + (0,)), pct=k.startswith("heldout"))
                 for k, _ in TABLE_METRICS]
        lines.append(f"| {row['arm']} | {len(row['seeds'])} | " + " | ".join(cells) + " |")
    lines += ["", "Paired differences vs bf16 (same seed):", "",
              hdr.replace("| arm |", "| arm - bf16 |"), "|" + "---|" * (len(TABLE_METRICS) + 2)]
    for row in rep["table"]:
        if row["arm"] == "bf16":
            continue
        cells = [_fmt(row.get(f"d_{k}", (math.nan,) * 3 + (0,)), pct=k.startswith("heldout"))
                 for k, _ in TABLE_METRICS]
        lines.append(f"| {row['arm']} | {len(row['seeds'])} | " + " | ".join(cells) + " |")
    lines += ["", "Decomposition energy shares of the quantized operands (mxref.decompose; "
              "mean over logged steps, L0.q_proj and last down_proj):", "",
              "| arm | act scale | act dead | act grid | act deadzone frac | act passthrough | "
              "w scale | w dead | w grid |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rep["table"]:
        ks = ["share_scale.act", "share_dead.act", "share_grid.act", "deadzone_fraction.act",
              "passthrough_fraction.act", "share_scale.weight", "share_dead.weight",
              "share_grid.weight"]
        lines.append(f"| {row['arm']} | " + " | ".join(
            _fmt(row.get(k, (math.nan,) * 3 + (0,))) for k in ks) + " |")
    lines += ["", "## The seed's pathway claims at this scale", "",
              "| claim | contrast | metric | expect | mean [95% CI] | n | verdict |",
              "|---|---|---|---|---|---|---|"]
    for c in rep["claims"]:
        lines.append(f"| {c['claim']} | {c['contrast']} | {c['metric']} | {c['expect']} | "
                     f"{_fmt((c['mean'], c['lo'], c['hi'], c['n']))} | {c['n']} | "
                     f"{c['verdict']} |")
    lines += ["", "Arms:", ""] + [f"* `{r['arm']}`: {r['note']}" for r in rep["table"]] + [""]
    return "\n".join(lines)


def plot(runs, per, root: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("reward_heldout", "held-out greedy accuracy"), ("entropy", "sampler entropy"),
              ("grad_1mcos", "1 - cos(g, g_bf16) (all params)"),
              ("kl_sampler_bf16", "KL(sampler || bf16 policy)")]
    fig, axs = plt.subplots(2, 2, figsize=(12, 8))
    arms = _order(per)
    for ax, (key, title) in zip(axs.flat, panels):
        for a in arms:
            curves = {}
            for (arm, seed), recs in runs.items():
                if arm != a:
                    continue
                for r in recs:
                    v = _1m(r["grad"]["all"]["cos"]) if key == "grad_1mcos" and "grad" in r \
                        else r.get(key) if key != "grad_1mcos" else None
                    if v is not None:
                        curves.setdefault(r["step"], []).append(v)
            if not curves:
                continue
            xs = sorted(curves)
            mu = np.array([np.mean(curves[x]) for x in xs])
            se = np.array([np.std(curves[x], ddof=1) / math.sqrt(len(curves[x]))
                           if len(curves[x]) > 1 else 0.0 for x in xs])
            ax.plot(xs, mu, label=a)
            ax.fill_between(xs, mu - se, mu + se, alpha=0.15)
        ax.set_title(title)
        ax.set_xlabel("RL step")
        if key in ("grad_1mcos", "kl_sampler_bf16"):
            ax.set_yscale("symlog", linthresh=1e-6)
    axs[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(root / "rl_curves.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(10, 4))
    w = 0.25
    for i, c in enumerate(("scale", "dead", "grid")):
        vals = [_mean([m.get(f"share_{c}.act") for m in per[a].values()]) for a in arms]
        ax.bar(np.arange(len(arms)) + (i - 1) * w, vals, w, label=f"act {c}")
    ax.set_xticks(np.arange(len(arms)), arms, rotation=30)
    ax.set_ylabel("energy share of the error")
    ax.legend()
    fig.tight_layout()
    fig.savefig(root / "rl_decomp.png", dpi=110)
    plt.close(fig)
