"""A minimal GRPO-style RL loop (group-relative advantages, no value model, no KL penalty).

One step:

1. **Rollout phase** (no grad, weights frozen): ``prompts`` problems, each sampled ``group``
   times at temperature 1 by the *sampler* -- the policy under the rollout quantizer (the
   arm's, when ``where`` is 'rollout' or 'both'; else bf16), with AQN noise on the RMSNorm
   weights for the AQN arms. The sampler's full next-token distributions are kept.
2. **Reward**: exact-match addition (task.py), 0 or 1.
3. **Advantages**: per group, ``A_i = (r_i - mean(r)) / (std(r) + 1e-4)`` with the unbiased
   std (ddof = 1, as TRL's GRPOTrainer); a group whose rewards are all equal gets A = 0.
4. **Policy update**: the *trainer* -- the policy under the training quantizer (the arm's
   when ``where`` is 'train' or 'both') -- recomputes the log-probs of the sampled tokens in
   one teacher-forced pass; loss = PPO-clip surrogate with the importance ratio
   ``rho = pi_train / pi_sampler`` per token (clip 0.2), averaged over each sequence's tokens
   (up to and including its first EOS), then over sequences; one AdamW step.

Because the update is on-policy (one step per rollout batch), ``rho`` differs from 1 only by
the rollout/training mismatch; its statistics before the update, the per-token
KL(sampler || trainer) and KL(sampler || unquantized bf16 policy) are logged.

Every ``log_every`` steps (and at step 0, before any update) one JSONL record: rewards
(sampled train reward, greedy accuracy on a fixed train set and on the held-out split, both
under the sampler's quantizer without AQN noise), sampler and trainer entropy, mismatch
statistics, the gradient error of the arm's gradient vs the bf16 gradient on the same batch
(same samples, same advantages, same sampler log-probs; cosine and norm ratio per quantized
linear and over all parameters), and mxref.decompose shares of the quantized operands of two
linears (first layer q_proj, last layer down_proj; weight and input activation), decomposed
on the host by mxref (numpy/Numba) with the arm's quantizer.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import task
from .quant import ARMS, QuantState, swap_linears

SCHEMA = "mxref-rl-run/1"
# the fields of a log record of a training step (the final record, after the last update, has
# only the step, rewards and time)
LOG_FIELDS = ("step", "arm", "seed", "aqn_sigma", "reward_heldout", "reward_train_greedy",
              "reward_train", "loss", "frac_groups_all_equal", "entropy", "entropy_train",
              "mismatch", "kl_sampler_bf16", "grad", "time_s")
MISMATCH_FIELDS = ("ratio_mean", "ratio_std", "ratio_min", "ratio_max", "clip_frac", "k3",
                   "kl_sampler_trainer")
WHERE = ("both", "rollout", "train")


@dataclass
class RLConfig:
    arm: str = "bf16"
    seed: int = 0
    out: str = "runs/rl"
    model: str = "llama-tiny"
    digits: int = 3
    steps: int = 200
    prompts: int = 32
    group: int = 8
    lr: float = 3e-4
    clip: float = 0.2
    temperature: float = 1.0
    grad_clip: float = 1.0
    where: str = "both"
    log_every: int = 10
    eval_n: int = 512
    decomp_every: int = 10          # 0: no decomposition log
    aqn_sigma_start: float = 1e-2
    aqn_sigma_end: float = 1e-4
    aqn_stages: int = 10
    pretrain_steps: int = 1500          # at most; stops early at pretrain_target
    pretrain_target: float = 0.5        # greedy accuracy on a train-split probe set
    pretrain_check_every: int = 50
    pretrain_batch: int = 256
    pretrain_lr: float = 3e-3
    pretrain_path: str | None = None   # default: pretrain_file(cfg), beside <out>
    device: str = "auto"
    threads: int = 0
    meta: dict = field(default_factory=dict)

    def check(self):
        if self.arm not in ARMS:
            raise ValueError(f"unknown arm {self.arm!r}; known: {', '.join(ARMS)}")
        if self.where not in WHERE:
            raise ValueError(f"where={self.where!r}; use one of {WHERE}")
        if self.group < 2:
            raise ValueError("group must be >= 2 (group-relative advantages)")


def resolve_device(dev: str) -> torch.device:
    if dev == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(dev)


# ---- GRPO pieces ---------------------------------------------------------------------------
def group_advantages(r: torch.Tensor, group: int, eps: float = 1e-4) -> torch.Tensor:
    """(r - group mean) / (group std + eps), std unbiased (ddof 1); r is [n_prompts * group]
    with each prompt's samples contiguous."""
    g = r.reshape(-1, group)
    mean = g.mean(-1, keepdim=True)
    std = g.std(-1, unbiased=True, keepdim=True)
    return ((g - mean) / (std + eps)).reshape(-1)


def completion_mask(gen: torch.Tensor) -> torch.Tensor:
    """[B, T] bool: tokens up to and including the first EOS (all when there is none)."""
    is_eos = gen == task.EOS
    before = torch.cumsum(is_eos.int(), dim=1) - is_eos.int()   # EOS seen strictly before
    return before == 0


def ppo_loss(logp, logp_old, adv, mask, clip):
    """PPO-clip surrogate, token mean per sequence, then mean over sequences."""
    ratio = torch.exp(logp - logp_old)
    a = adv[:, None]
    per_tok = -torch.minimum(ratio * a, torch.clamp(ratio, 1 - clip, 1 + clip) * a)
    m = mask.float()
    return ((per_tok * m).sum(1) / m.sum(1).clamp(min=1)).mean()


# ---- model ---------------------------------------------------------------------------------
def build_policy(cfg: RLConfig, device):
    from mxkernels.training.models import build_model

    seq = task.prompt_len(cfg.digits) + task.answer_len(cfg.digits)
    model = build_model(cfg.model, task.VOCAB_SIZE, seed=cfg.seed, max_seq_len=max(64, seq),
                        device=device)
    state = QuantState()
    names = swap_linears(model, state)
    return model, state, names


def logits_of(model, ids):
    return model(input_ids=ids).logits.float()


@torch.no_grad()
def generate(model, prompts, n_new, *, greedy=False, temperature=1.0, generator=None):
    """(tokens [B, n_new], per-step log-softmax of the sampler [B, n_new, V]); full recompute
    per token (sequences are ~15 tokens; no KV cache, so every position sees exactly the
    computation of the teacher-forced pass)."""
    ids = prompts
    toks, dists = [], []
    for _ in range(n_new):
        lg = logits_of(model, ids)[:, -1] / temperature
        lp = torch.log_softmax(lg, -1)
        if greedy:
            nxt = lp.argmax(-1)
        else:
            nxt = torch.multinomial(lp.exp(), 1, generator=generator).squeeze(-1)
        toks.append(nxt)
        dists.append(lp)
        ids = torch.cat([ids, nxt[:, None]], 1)
    return torch.stack(toks, 1), torch.stack(dists, 1)


def accuracy(model, state, kind, a, b, digits, device) -> float:
    prev = state.kind, state.cache_weights
    state.kind, state.cache_weights = kind, True
    try:
        gen, _ = generate(model, task.prompts_tensor(a, b, digits, device), task.answer_len(digits),
                          greedy=True)
    finally:
        state.kind, state.cache_weights = prev
        _drop_cache(model)
    return float(task.rewards(gen, a, b, digits).mean())


def _drop_cache(model):
    for m in model.modules():
        if hasattr(m, "_wcache"):
            m._wcache = None


def pretrain_file(cfg: RLConfig) -> Path:
    """Where a seed's pretrained policy is cached (shared by the arms of a grid)."""
    if cfg.pretrain_path:
        return Path(cfg.pretrain_path)
    return Path(cfg.out).parent / (f"pretrain-{cfg.model}-d{cfg.digits}-n{cfg.pretrain_steps}"
                                   f"-b{cfg.pretrain_batch}-t{cfg.pretrain_target}"
                                   f"-s{cfg.seed}.pt")


# ---- pretraining on the task format --------------------------------------------------------
def pretrain(cfg: RLConfig, path: Path, device, log=print) -> dict:
    """Supervised training on the task format (bf16 operands, no MX; AdamW, linear warmup then
    constant LR) until the greedy accuracy on a probe set of training problems reaches
    ``pretrain_target`` (checked every ``pretrain_check_every`` steps; at most
    ``pretrain_steps``), so RL starts from a policy with intermediate accuracy and room to
    improve. Cached at ``path`` (shared by all arms of a seed)."""
    if path.exists():
        blob = torch.load(path, map_location="cpu", weights_only=False)
        return blob["stats"]
    torch.manual_seed(cfg.seed)
    model, state, _ = build_policy(cfg, device)
    state.kind = "bf16"
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.pretrain_lr, weight_decay=0.0,
                            betas=(0.9, 0.98))
    rng = np.random.default_rng(10_000 + cfg.seed)
    warm = max(1, cfg.pretrain_steps // 20)
    t0 = time.time()
    probe = task.sample_problems(np.random.default_rng(50_000 + cfg.seed), 256, cfg.digits)
    history = []
    step = 0
    for step in range(1, cfg.pretrain_steps + 1):
        lr = cfg.pretrain_lr * min(1.0, step / warm)
        for gparam in opt.param_groups:
            gparam["lr"] = lr
        a, b = task.sample_problems(rng, cfg.pretrain_batch, cfg.digits)
        ids, mask = task.sft_batch(a, b, cfg.digits, device)
        lg = logits_of(model, ids[:, :-1])
        tgt = ids[:, 1:]
        m = mask[:, 1:].float()
        nll = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt.reshape(-1),
                                                reduction="none").reshape(tgt.shape)
        loss = (nll * m).sum() / m.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % cfg.pretrain_check_every == 0 or step == cfg.pretrain_steps:
            acc = accuracy(model, state, "bf16", *probe, cfg.digits, device)
            history.append((step, float(loss.detach()), acc))
            if acc >= cfg.pretrain_target:
                break
    erng = np.random.default_rng(20_000 + cfg.seed)
    ha, hb = task.sample_problems(erng, cfg.eval_n, cfg.digits, "heldout")
    stats = {"steps": step, "final_loss": float(loss.detach()), "history": history,
             "heldout_acc_bf16": accuracy(model, state, "bf16", ha, hb, cfg.digits, device),
             "seconds": time.time() - t0}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"state_dict": {k: v.cpu() for k, v in model.state_dict().items()},
                "stats": stats, "model": cfg.model, "digits": cfg.digits}, tmp)
    tmp.replace(path)
    log(f"pretrain seed {cfg.seed}: {stats}")
    return stats


# ---- logging helpers -----------------------------------------------------------------------
def _entropy(lp, mask):
    h = -(lp.exp() * lp).sum(-1)
    return float((h * mask).sum() / mask.sum().clamp(min=1))


def _grad_error(names, arm_grads, ref_grads) -> dict:
    out = {}
    va, vr = [], []
    for n in arm_grads:
        ga, gr = arm_grads[n].double().reshape(-1), ref_grads[n].double().reshape(-1)
        va.append(ga)
        vr.append(gr)
        if n.removesuffix(".weight") not in names:
            continue
        na, nr = float(ga.norm()), float(gr.norm())
        cos = float(ga @ gr) / (na * nr) if na > 0 and nr > 0 else float("nan")
        key = _short(n.removesuffix(".weight"))
        out[key] = {"cos": cos, "norm_ratio": na / nr if nr > 0 else float("nan")}
    ga, gr = torch.cat(va), torch.cat(vr)
    na, nr = float(ga.norm()), float(gr.norm())
    out["all"] = {"cos": float(ga @ gr) / (na * nr) if na > 0 and nr > 0 else float("nan"),
                  "norm_ratio": na / nr if nr > 0 else float("nan")}
    return out


def _short(name: str) -> str:
    # model.layers.0.self_attn.q_proj -> L0.q_proj
    parts = name.split(".")
    i = parts.index("layers")
    return f"L{parts[i + 1]}.{parts[-1]}"


DECOMP_QUANTIZERS = {"macro": ["macro"], "outlier": ["outlier"], "all3": ["macro", "outlier"]}


def decomposition_log(captured: dict, arm: str) -> dict:
    """mxref decomposition stats of the captured operands under the arm's quantizer(s)
    (plain mxfp4 for bf16 / isolated / AQN arms: the operand the isolated arms split)."""
    from mxref.corrections import decompose_macroblock, decompose_outlier_fallback
    from mxref.decompose import decompose

    fns = {"mxfp4": lambda x: decompose(x, "mxfp4", "ocp"),
           "macro": lambda x: decompose_macroblock(x, "mxfp4", "ocp", macro=128 if x.shape[1] %
                                                   128 == 0 else "row"),
           "outlier": lambda x: decompose_outlier_fallback(x, "mxfp4", "ocp", rule="block",
                                                           tau=10.0, rho=8)}
    out = {}
    for lname, (act, w) in captured.items():
        for op, t in (("act", act), ("weight", w)):
            x = t.numpy().astype(np.float32)
            for qn in DECOMP_QUANTIZERS.get(arm, ["mxfp4"]):
                st = fns[qn](x).stats()
                out[f"{_short(lname)}.{op}.{qn}"] = {
                    "energy_share": st["energy_share"], "deadzone_fraction":
                    st["deadzone_fraction"], "passthrough_fraction": st["passthrough_fraction"],
                    "error_to_signal": st["error_to_signal"], "mean_s_ratio": st["mean_s_ratio"],
                    "gain_contrib": st["gain_contrib"]}
    return out


def _finite(v):
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else (1e308 if v > 0 else -1e308)
    return v


# ---- the RL run ----------------------------------------------------------------------------
def run(cfg: RLConfig, progress=True) -> dict:
    """One arm, one seed. Writes <out>/config.json, log.jsonl, summary.json; a run whose
    summary says complete (same config) is skipped."""
    cfg.check()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    conf = {k: v for k, v in asdict(cfg).items() if k not in ("device", "threads", "out")}
    summ = out / "summary.json"
    if summ.exists():
        s = json.loads(summ.read_text())
        if s.get("status") == "complete" and s.get("config") == conf:
            return s
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    log = print if progress else (lambda *a, **k: None)
    ppath = pretrain_file(cfg)
    pstats = pretrain(cfg, ppath, device, log)
    model, state, qnames = build_policy(cfg, device)
    blob = torch.load(ppath, map_location="cpu", weights_only=False)
    model.load_state_dict(blob["state_dict"])
    kind, aqn_on = ARMS[cfg.arm]
    roll_kind = kind if cfg.where in ("rollout", "both") else "bf16"
    train_kind = kind if cfg.where in ("train", "both") else "bf16"
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.99))
    norms = [p for n, p in model.named_parameters() if n.endswith("layernorm.weight")]
    torch.manual_seed(cfg.seed)
    gen = torch.Generator(device=device)
    gen.manual_seed(1_000 + cfg.seed)
    aqn_gen = torch.Generator(device=device)
    aqn_gen.manual_seed(2_000 + cfg.seed)
    rng = np.random.default_rng(30_000 + cfg.seed)             # RL prompts: same for all arms
    erng = np.random.default_rng(20_000 + cfg.seed)
    ha, hb = task.sample_problems(erng, cfg.eval_n, cfg.digits, "heldout")
    ta, tb = task.sample_problems(np.random.default_rng(40_000 + cfg.seed), cfg.eval_n,
                                  cfg.digits, "train")
    cap_names = (qnames[0], qnames[-1]) if qnames else ()
    n_new = task.answer_len(cfg.digits)
    (out / "config.json").write_text(json.dumps({"schema": SCHEMA, "config": conf,
                                                 "pretrain": pstats}, indent=2) + "\n")
    logf = open(out / "log.jsonl", "w")  # noqa: SIM115 (closed after the loop)
    t_start = time.time()
    last = {}
    for step in range(cfg.steps + 1):
        logging = step % cfg.log_every == 0 or step == cfg.steps
        sigma = 0.0
        if aqn_on:
            from mxref.corrections import aqn_sigma
            sigma = aqn_sigma(step, cfg.steps, cfg.aqn_sigma_start, cfg.aqn_sigma_end,
                              cfg.aqn_stages)
        rec = {"step": step, "arm": cfg.arm, "seed": cfg.seed, "aqn_sigma": sigma}
        if logging:     # greedy accuracy under the sampler's quantizer, no AQN noise
            rec["reward_heldout"] = accuracy(model, state, roll_kind, ha, hb, cfg.digits, device)
            rec["reward_train_greedy"] = accuracy(model, state, roll_kind, ta, tb, cfg.digits,
                                                  device)
        if step == cfg.steps:
            rec["time_s"] = time.time() - t_start
            logf.write(json.dumps(_finite(rec)) + "\n")
            last.update(rec)
            break
        clean = [p.detach().clone() for p in norms] if sigma > 0 else None
        if clean is not None:
            from mxref.corrections import aqn_apply
            with torch.no_grad():
                for p in norms:
                    p.copy_(aqn_apply(p.detach(), sigma, aqn_gen))
        # 1. rollouts
        a, b = task.sample_problems(rng, cfg.prompts, cfg.digits)
        a, b = np.repeat(a, cfg.group), np.repeat(b, cfg.group)
        prompts = task.prompts_tensor(a, b, cfg.digits, device)
        state.kind, state.cache_weights = roll_kind, True
        toks, samp_lp = generate(model, prompts, n_new, temperature=cfg.temperature,
                                 generator=gen)
        state.cache_weights = False
        _drop_cache(model)
        # 2-3. rewards, advantages
        r = task.rewards(toks, a, b, cfg.digits).to(device)
        adv = group_advantages(r, cfg.group)
        mask = completion_mask(toks)
        logp_old = samp_lp.gather(-1, toks[..., None]).squeeze(-1)
        seq = torch.cat([prompts, toks], 1)
        lp0 = prompts.shape[1] - 1

        def policy_logp(k, seq=seq, lp0=lp0):
            state.kind = k
            lg = logits_of(model, seq[:, :-1])[:, lp0:] / cfg.temperature
            return torch.log_softmax(lg, -1)

        # 4. policy update under the training quantizer
        state.capture = {"names": cap_names} if logging and cfg.decomp_every and \
            step % cfg.decomp_every == 0 else None
        lp_all = policy_logp(train_kind)
        captured = {n: state.capture[n] for n in cap_names if state.capture and n in state.capture}
        state.capture = None
        logp = lp_all.gather(-1, toks[..., None]).squeeze(-1)
        loss = ppo_loss(logp, logp_old, adv, mask, cfg.clip)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if logging:
            m = mask.float()
            with torch.no_grad():
                lr_ = (logp - logp_old)[mask]
                ratio = lr_.exp()
                ps = samp_lp.exp()
                kl_st = (ps * (samp_lp - lp_all)).sum(-1)
                rec.update({
                    "reward_train": float(r.mean()), "loss": float(loss),
                    "frac_groups_all_equal": float((r.reshape(-1, cfg.group).std(-1) == 0)
                                                   .float().mean()),
                    "entropy": _entropy(samp_lp, m), "entropy_train": _entropy(lp_all, m),
                    "mismatch": {"ratio_mean": float(ratio.mean()),
                                 "ratio_std": float(ratio.std()) if ratio.numel() > 1 else 0.0,
                                 "ratio_min": float(ratio.min()), "ratio_max": float(ratio.max()),
                                 "clip_frac": float(((ratio - 1).abs() > cfg.clip).float().mean()),
                                 "k3": float((ratio - 1 - lr_).mean()),
                                 "kl_sampler_trainer": float((kl_st * m).sum() / m.sum())},
                })
            arm_grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()
                         if p.grad is not None}
            # the bf16 gradient on the same batch (clean norms, same samples / advantages)
            if clean is not None:
                with torch.no_grad():
                    noisy = [p.detach().clone() for p in norms]
                    for p, c in zip(norms, clean):
                        p.copy_(c)
            opt.zero_grad(set_to_none=True)
            lp_ref = policy_logp("bf16")
            ppo_loss(lp_ref.gather(-1, toks[..., None]).squeeze(-1), logp_old, adv, mask,
                     cfg.clip).backward()
            ref_grads = {n: p.grad.detach().clone() if p.grad is not None else
                         torch.zeros_like(p) for n, p in model.named_parameters()}
            with torch.no_grad():
                kl_sb = (samp_lp.exp() * (samp_lp - lp_ref.detach())).sum(-1)
                rec["kl_sampler_bf16"] = float((kl_sb * m).sum() / m.sum())
            if clean is not None:
                with torch.no_grad():
                    for p, nz in zip(norms, noisy):
                        p.copy_(nz)
            rec["grad"] = _grad_error(set(qnames), arm_grads, ref_grads)
            for n, p in model.named_parameters():
                p.grad = arm_grads.get(n)
            if captured:
                rec["decomp"] = decomposition_log(captured, cfg.arm)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        if clean is not None:
            with torch.no_grad():
                for p, c in zip(norms, clean):
                    p.copy_(c)
        opt.step()
        state.kind = "none"
        if logging:
            rec["time_s"] = time.time() - t_start
            logf.write(json.dumps(_finite(rec)) + "\n")
            logf.flush()
            last.update(rec)
            log(f"[{cfg.arm} s{cfg.seed}] step {step}: reward {rec['reward_train']:.3f} "
                f"heldout {rec['reward_heldout']:.3f} H {rec['entropy']:.3f} "
                f"gcos {rec['grad']['all']['cos']:.4f} KLsb {rec['kl_sampler_bf16']:.2e} "
                f"{rec['time_s']:.0f}s")
    logf.close()
    s = {"schema": SCHEMA, "status": "complete", "config": conf, "pretrain": pstats,
         "final": {k: last.get(k) for k in ("reward_heldout", "reward_train_greedy")},
         "seconds": time.time() - t_start, "device": str(device),
         "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    summ.write_text(json.dumps(_finite(s), indent=2) + "\n")
    return s
