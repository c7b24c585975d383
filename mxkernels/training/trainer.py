"""The training loop, top to bottom: config, run directory, model + recipe, data, loop, checkpoints.

``train(cfg)`` is what ``mxref train`` runs. Read it in order:

1. :func:`prepare_run_dir` — refuse a directory that is not a resumable run of the same config.
2. :func:`build` — corpus, sampler, model (random init from the seed), recipe swap, optimizer.
3. resume from ``checkpoints/latest.json`` if present (weights, optimizer, RNG; data = step);
   without it, from the newest intact ``step_*`` (said on stderr), or refuse - never step 0
   while checkpoints exist.
4. the loop: lr schedule, batch, (arm one layer for validation), forward, backward, check,
   clip, step, log line, eval, checkpoint.
5. ``summary.json``.

Run directory: ``config.json`` (everything needed to reproduce), ``log.jsonl`` (one line per
step), ``checks.jsonl`` (in-run validation records), ``checkpoints/``, ``summary.json``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch


from . import checkpoint as ckpt
from . import ddp
from . import fsdp as fsdp_mod
from .data import BatchSampler, load_corpus, val_batches
from .errors import (NonFiniteLossError, RunDirError, TrainingCheckError,
                     TrainingConfigError)
from .models import build_model, get_model_spec, param_counts

CONFIG_SCHEMA = "mxref-train-config/1"
SUMMARY_SCHEMA = "mxref-train-summary/1"
# Learning rates of training_anchors.md C.0 (Quartet), scaled by model size.
DEFAULT_LR = {"tiny": 3e-3, "30m": 1.2e-3, "50m": 1.2e-3, "60m": 1.2e-3, "100m": 6e-4, "125m": 6e-4}


@dataclass
class TrainConfig:
    """Every knob of a run. Fields in ``NON_IDENTITY`` do not change the loss trajectory."""

    model: str = "llama-tiny"
    recipe: str = "bf16"  # a name in RECIPES / recipes.VARIANTS, or a path to a recipe JSON
    tokens: int = 1_000_000
    seed: int = 0
    seq_len: int = 256
    batch_size: int = 32  # global batch, sequences per optimizer step
    grad_accum: int = 1
    lr: float | None = None  # None: DEFAULT_LR by model size
    min_lr_frac: float = 0.1
    warmup_frac: float = 0.1
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    precision: str = "bf16"  # bf16: fp32 master weights + bf16 autocast; fp32: no autocast
    backend: str = "auto"  # MXLinear backend
    device: str = "auto"
    corpus: str = "stdlib"
    val_fraction: float = 0.02
    eval_every: int = 0  # 0: only at the end
    eval_tokens: int = 65_536
    ckpt_every: int = 0  # 0: only at the end
    keep_checkpoints: int = 2
    validate_every: int = 0  # 0: no in-run validation
    decompose: bool = False  # with each in-run check: mxref.decompose of the checked operands
    # time the quantization ops (CUDA events around each: host work of their own) on every Nth
    # step only; those steps stay out of the median step time. 0: never
    quant_time_every: int = 5
    out: str = "runs/run"
    progress: bool = True
    stop_after: int | None = None  # leave cleanly after this step (checkpoint, status "stopped")
    # leave cleanly (checkpoint, status "stopped") after the first step that ends this many
    # seconds after the run started: a run longer than one job slot continues in the next
    stop_after_seconds: float | None = None
    threads: int = 0  # CPU intra-op threads (0: torch's default); part of the bit-exactness setup
    debug_nan_at_step: int | None = None  # test hook: the loss of this step is replaced by NaN
    fsdp: bool = False  # under torchrun: FSDP2 fully_shard instead of DDP (fsdp.py)
    tokenizer: str = "bytes"  # bytes (vocabulary 256) or bpe (tokenizer.py, trained on the corpus)
    vocab_size: int = 0  # BPE vocabulary size (0: bytes); the model's vocabulary is this
    # one CUDA graph per step (_StepGraph): a capturable AdamW (its own rounding: part of the
    # identity) and the fused launches read the step from the device
    cuda_graph: bool = False
    # torch.use_deterministic_algorithms(True), cuDNN deterministic, cuBLAS's fixed workspace
    # (CUBLAS_WORKSPACE_CONFIG): reruns of the same run on one GPU repeat their bits; another
    # choice of kernels (part of the identity)
    deterministic: bool = False

    # validate_every: the in-run check reads captured operands on the host and changes no bit
    # of the step (tests/test_training_trainer.py runs a recipe with and without checks), so a
    # run resumes, or a grid reuses a complete arm, under another check cadence
    NON_IDENTITY = ("out", "progress", "keep_checkpoints", "device", "backend", "threads",
                    "stop_after", "stop_after_seconds", "quant_time_every", "validate_every",
                    "decompose")

    # fields added after runs were made: left out of the identity at their default, so the
    # fingerprints of earlier runs (and their resumes) stay what they were
    NEW_DEFAULTS = {"fsdp": False, "tokenizer": "bytes", "vocab_size": 0, "cuda_graph": False,
                    "deterministic": False}

    def identity(self) -> dict:
        d = dataclasses.asdict(self)
        for k in self.NON_IDENTITY:
            d.pop(k, None)
        for k, v in self.NEW_DEFAULTS.items():
            if d.get(k) == v:
                d.pop(k, None)
        return d

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.batch_size

    @property
    def total_steps(self) -> int:
        return self.tokens // self.tokens_per_step

    def resolved_lr(self) -> float:
        if self.lr is not None:
            return self.lr
        return DEFAULT_LR.get(self.model.rsplit("-", 1)[-1], 6e-4)

    def validate(self, world_size: int = 1) -> None:
        get_model_spec(self.model)
        if self.precision not in ("bf16", "fp32"):
            raise TrainingConfigError(f"precision={self.precision!r}; use bf16 or fp32")
        for k in ("seq_len", "batch_size", "grad_accum", "tokens"):
            if getattr(self, k) < 1:
                raise TrainingConfigError(f"{k} must be >= 1, got {getattr(self, k)}")
        if self.total_steps < 1:
            raise TrainingConfigError(
                f"--tokens {self.tokens} is less than one step of batch_size*seq_len = "
                f"{self.tokens_per_step} tokens")
        if self.batch_size % (world_size * self.grad_accum):
            raise TrainingConfigError(
                f"batch_size {self.batch_size} is not divisible by world_size*grad_accum = "
                f"{world_size}*{self.grad_accum}")
        for k in ("eval_every", "ckpt_every", "validate_every", "quant_time_every"):
            if getattr(self, k) < 0:
                raise TrainingConfigError(f"{k} must be >= 0")
        if self.stop_after_seconds is not None and not self.stop_after_seconds >= 0:
            raise TrainingConfigError(f"stop_after_seconds must be >= 0, got "
                                      f"{self.stop_after_seconds}")
        if self.recipe == "bf16" and self.validate_every:
            raise TrainingConfigError("--validate-every needs a quantized recipe; bf16 has no MX "
                                      "layer to check")
        if self.decompose and not self.validate_every:
            raise TrainingConfigError("--decompose decomposes the operands of the in-run checks; "
                                      "it needs --validate-every N")
        if self.fsdp and world_size < 2:
            raise TrainingConfigError("--fsdp shards over the ranks of torchrun: it needs "
                                      "WORLD_SIZE > 1 (one process trains unsharded)")
        if self.cuda_graph and world_size > 1:
            raise TrainingConfigError("--cuda-graph captures one process's step; DDP / FSDP "
                                      "communication hooks are not captured (run without "
                                      "torchrun, or without --cuda-graph)")
        if self.tokenizer not in ("bytes", "bpe"):
            raise TrainingConfigError(f"tokenizer={self.tokenizer!r}; use bytes or bpe")
        if self.tokenizer == "bytes" and self.vocab_size:
            raise TrainingConfigError("--vocab-size sets the BPE vocabulary; it needs "
                                      "--tokenizer bpe (the byte tokenizer has 256)")
        if self.tokenizer == "bpe":
            from .tokenizer import check_vocab_size

            check_vocab_size(self.vocab_size)
        if not 0 <= self.warmup_frac < 1 or not 0 <= self.min_lr_frac <= 1:
            raise TrainingConfigError("warmup_frac must be in [0, 1) and min_lr_frac in [0, 1]")


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup over warmup_frac of the steps, then cosine down to min_lr_frac * lr."""
    peak, total = cfg.resolved_lr(), cfg.total_steps
    warm = int(cfg.warmup_frac * total)
    if step < warm:
        return peak * (step + 1) / warm
    t = (step - warm) / max(1, total - warm)
    return peak * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


# ---- recipes (task A's API) -------------------------------------------------------------
def resolve_recipe(spec: str, seed: int):
    """A Recipe from a name (RECIPES, or an experiment variant) or a recipe JSON file; its
    random streams are seeded from the run's seed so that paired runs differ only by recipe."""
    from .recipes import RECIPES, VARIANTS, get_recipe, recipe_from_dict

    if spec not in RECIPES and spec.endswith(".json") and Path(spec).is_file():
        recipe = recipe_from_dict(json.loads(Path(spec).read_text()))
    else:
        recipe = VARIANTS[spec] if spec in VARIANTS else get_recipe(spec)
    return recipe.replace(seed=seed)


# ---- run directory ----------------------------------------------------------------------
def _git_commit() -> str | None:
    try:
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device: torch.device) -> dict:
    import transformers

    import mxref

    env = {"python": sys.version.split()[0], "torch": torch.__version__,
           "transformers": transformers.__version__, "numpy": np.__version__,
           "mxref": getattr(mxref, "__version__", "?"), "git_commit": _git_commit(),
           "platform": platform.platform(), "hostname": platform.node(),
           "device": str(device), "torch_threads": torch.get_num_threads()}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1),
                   gpu_sms=p.multi_processor_count, cuda=torch.version.cuda)
    return env


def fingerprint(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _diff_keys(a: dict, b: dict, prefix="") -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += _diff_keys(va, vb, f"{prefix}{k}.")
        elif va != vb:
            out.append(f"{prefix}{k}: {vb!r} in the run dir, {va!r} now")
    return out


def prepare_run_dir(out: Path, identity: dict) -> str:
    """'new', 'resume' or 'complete'. Never touches a directory that is not the same run."""
    if out.exists() and not out.is_dir():
        raise RunDirError(f"{out} exists and is not a directory")
    if not out.exists() or not any(out.iterdir()):
        return "new"
    cfg_path = out / "config.json"
    if not cfg_path.exists():
        raise RunDirError(f"{out} exists, is not empty and holds no config.json: not a run "
                          "directory; choose another --out (nothing was changed)")
    try:
        old = json.loads(cfg_path.read_text())
    except ValueError as e:
        raise RunDirError(f"{cfg_path} is not valid JSON ({e}); nothing was changed") from None
    if old.get("schema") != CONFIG_SCHEMA:
        raise RunDirError(f"{cfg_path} has schema {old.get('schema')!r}, not {CONFIG_SCHEMA}")
    old_id = dict(old.get("identity", {}))
    if isinstance(old_id.get("train"), dict):     # run dirs written before a knob left identity
        old_id["train"] = {k: v for k, v in old_id["train"].items()
                           if k not in TrainConfig.NON_IDENTITY}
    diffs = _diff_keys(identity, old_id)
    if diffs:
        raise RunDirError(f"{out} holds a different run; refusing to overwrite it. Differences: "
                          + "; ".join(diffs[:6]) + (" ..." if len(diffs) > 6 else ""))
    summary = out / "summary.json"
    if summary.exists():
        try:
            if json.loads(summary.read_text()).get("status") == "complete":
                return "complete"
        except ValueError:
            pass
    return "resume"


def _truncate_jsonl(path: Path, start_step: int) -> None:
    """Drop lines of steps >= start_step (written after the checkpoint we resume from)."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line).get("step", -1) < start_step:
                keep.append(line)
        except ValueError:  # a line cut by kill -9
            continue
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in keep))
    os.replace(tmp, path)


# ---- building blocks --------------------------------------------------------------------
def pick_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(spec)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise TrainingConfigError("--device cuda but CUDA is not available")
    return dev


def make_optimizer(model, cfg: TrainConfig, *, capturable: bool = False):
    """AdamW; no weight decay on 1-D parameters (norms, biases). capturable: the fused
    (one-kernel) AdamW with its state on the device, so that a CUDA graph can hold the step
    (the per-parameter loop's capturable form launches ~10 kernels per parameter)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    if capturable:
        return torch.optim.AdamW(groups, lr=cfg.resolved_lr(), betas=(cfg.beta1, cfg.beta2),
                                 eps=1e-8, fused=True, capturable=True)
    return torch.optim.AdamW(groups, lr=cfg.resolved_lr(), betas=(cfg.beta1, cfg.beta2),
                             eps=1e-8, foreach=False)


def lm_loss(model, tokens: torch.Tensor):
    """Next-token cross entropy in fp32 (plus the MoE router's auxiliary loss, if any)."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    out = model(input_ids=inputs)
    logits = out.logits.float()
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
    aux = getattr(out, "aux_loss", None)
    if aux is not None:
        coef = getattr(ddp.unwrap(model).config, "router_aux_loss_coef", 0.0)
        return ce, ce + coef * aux.float(), aux.detach().float()
    return ce, ce, None


@torch.no_grad()
def evaluate(model, batches, device, autocast) -> float:
    was = model.training
    model.eval()
    total, n = 0.0, 0
    for b in batches:
        t = torch.from_numpy(b).to(device)
        with autocast():
            ce, _, _ = lm_loss(model, t)
        total += float(ce) * b.shape[0]
        n += b.shape[0]
    model.train(was)
    return total / n


def peak_memory(device: torch.device) -> dict:
    if device.type == "cuda":
        return {"peak_mem_bytes": int(torch.cuda.max_memory_allocated(device)), "kind": "cuda_max_allocated"}
    # ru_maxrss is in KiB on Linux
    return {"peak_mem_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,
            "kind": "cpu_ru_maxrss"}


class _JsonlWriter:
    def __init__(self, path: Path, enabled: bool):
        self.f = open(path, "a") if enabled else None

    def write(self, rec: dict) -> None:
        if self.f:
            self.f.write(json.dumps(rec, sort_keys=True) + "\n")
            self.f.flush()

    def close(self):
        if self.f:
            self.f.close()


def _record_dict(rec) -> dict:
    if hasattr(rec, "to_dict"):
        return rec.to_dict()
    if dataclasses.is_dataclass(rec):
        return dataclasses.asdict(rec)
    return dict(rec)


@dataclass
class Built:
    model: torch.nn.Module
    raw_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    sampler: BatchSampler
    val: list
    corpus: object
    recipe: object
    swapped: list = field(default_factory=list)
    # tokens per byte of the validation targets: val_loss (nats/token) x this = nats/byte,
    # comparable across tokenizers (1.0 for the byte tokenizer)
    val_tokens_per_byte: float = 1.0


def build(cfg: TrainConfig, device: torch.device, dist: ddp.DistInfo) -> Built:
    if cfg.tokenizer == "bpe":
        from .tokenizer import bpe_cache_dir

        cache = bpe_cache_dir(Path(cfg.out))
        if dist.enabled and not dist.is_main:
            ddp.barrier(dist)          # rank 0 trains (or finds) the cached tokenizer first
        corpus = load_corpus(cfg.corpus, cfg.val_fraction, tokenizer="bpe",
                             bpe_vocab_size=cfg.vocab_size, cache_dir=cache)
        if dist.enabled and dist.is_main:
            ddp.barrier(dist)
    else:
        corpus = load_corpus(cfg.corpus, cfg.val_fraction)
    sampler = BatchSampler(corpus.train, cfg.seq_len, cfg.batch_size, cfg.seed)
    val = val_batches(corpus.val, cfg.seq_len, max(1, cfg.batch_size // cfg.grad_accum),
                      cfg.eval_tokens)
    recipe = resolve_recipe(cfg.recipe, cfg.seed)
    raw = build_model(cfg.model, corpus.vocab_size, cfg.seed, max_seq_len=max(cfg.seq_len, 512),
                      device=device)
    swapped = []
    if recipe.quantized:
        from .mxlinear import swap_linears

        swapped = list(swap_linears(raw, recipe, backend=cfg.backend))
    if cfg.cuda_graph:
        _check_graphable(recipe, device)
    model = fsdp_mod.wrap(raw, dist, device) if cfg.fsdp else ddp.wrap(raw, dist, device)
    opt = make_optimizer(raw, cfg, capturable=cfg.cuda_graph)
    if cfg.cuda_graph:          # a graph reads the learning rate from the device
        for g in opt.param_groups:
            g["lr"] = torch.tensor(float(g["lr"]), dtype=torch.float32, device=device)
    return Built(model, raw, opt, sampler, val, corpus, recipe, swapped,
                 val_tokens_per_byte=tokens_per_byte(val, corpus))


def _generic_host_state(recipe) -> str | None:
    """What a generic-path recipe computes on the host per step or per call (a CUDA graph
    would replay the captured value), or None: random Hadamard signs and SR seeds are drawn
    on the host from the step; a DGE constant is copied to the device per call."""
    from .recipes import GEMMS
    for gemm in GEMMS:
        g = getattr(recipe, gemm)
        if g.hadamard == "random":
            return f"random Hadamard signs drawn on the host each step ({gemm})"
        for side, op in (("a", g.a), ("b", g.b)):
            if op.rounding == "sr":
                return f"stochastic-rounding seeds drawn on the host each step ({gemm} {side})"
            if op.dge_const is not None:
                return f"a DGE constant copied to the device per call ({gemm} {side})"
    return None


def graph_refusal(recipe) -> str | None:
    """Why --cuda-graph cannot capture ``recipe``'s step, or None when it can: the fast-path
    recipes and generic-path ones without per-step host state (no random signs, no SR: e.g.
    ms-fp4, decomp-fixed; the generic path makes no host synchronization there) can."""
    if not recipe.quantized:
        return None
    from .mxlinear import fast_plan

    why = None if fast_plan(recipe) is not None else _generic_host_state(recipe)
    if why:
        return (f"recipe {recipe.name!r} runs on the generic MXLinear path with {why}, which a "
                "CUDA graph would replay unchanged; the fast-path recipes "
                "(mxkernels.training.mxlinear.fast_plan) and generic ones without per-step "
                "host state can be graphed")
    return None


def _check_graphable(recipe, device: torch.device) -> None:
    """--cuda-graph needs a GPU and a recipe :func:`graph_refusal` accepts."""
    if device.type != "cuda":
        raise TrainingConfigError(f"--cuda-graph needs a CUDA device, not {device.type}")
    why = graph_refusal(recipe)
    if why:
        raise TrainingConfigError(f"--cuda-graph: {why}")


class _StepGraph:
    """A training step in two CUDA graphs: every micro-batch's forward and backward plus the
    gradient clipping (g1, returning static loss / aux / grad-norm tensors), then the
    optimizer step (g2), so that the host checks the loss between them as the eager loop does.
    Tokens are copied into static buffers; the learning rate (optimizer lr tensors) and the
    fused launches' step (mxlinear.use_device_step) are read from the device, so replays follow
    the step. Captured once, after eager steps have compiled the kernels and made the
    optimizer state."""

    def __init__(self, b: Built, cfg: TrainConfig, autocast, device: torch.device):
        self.b, self.cfg, self.autocast, self.device = b, cfg, autocast, device
        self.g1 = self.g2 = None
        self.tokens: list = []
        self.out = None

    def _fwd_bwd(self):
        cfg, b = self.cfg, self.b
        loss_sum = torch.zeros((), device=self.device)
        aux_sum = None
        for t in self.tokens:
            with self.autocast():
                ce, total_loss, aux = lm_loss(b.model, t)
            (total_loss / cfg.grad_accum).backward()
            loss_sum += ce.detach() / cfg.grad_accum
            if aux is not None:
                aux_sum = (aux_sum if aux_sum is not None else 0) + aux / cfg.grad_accum
        grad_norm = torch.nn.utils.clip_grad_norm_(b.raw_model.parameters(), cfg.grad_clip)
        return loss_sum, aux_sum, grad_norm

    def _load(self, rows, micro: int) -> None:
        for k, t in enumerate(self.tokens):
            t.copy_(torch.from_numpy(rows[k * micro:(k + 1) * micro]), non_blocking=False)

    def capture(self, rows, micro: int) -> None:
        cfg, b, dev = self.cfg, self.b, self.device
        self.tokens = [torch.from_numpy(rows[k * micro:(k + 1) * micro]).to(dev)
                       for k in range(cfg.grad_accum)]
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):          # lazy initialisations, off the capture
            b.optimizer.zero_grad(set_to_none=True)
            self._fwd_bwd()
        torch.cuda.current_stream(dev).wait_stream(side)
        b.optimizer.zero_grad(set_to_none=True)   # the graph's backward assigns the grads
        self.g1 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.g1):
            self.out = self._fwd_bwd()
        self.g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.g2, pool=self.g1.pool()):
            b.optimizer.step()

    def fwd_bwd(self, rows, micro: int):
        """(loss, aux or None, grad norm) tensors of this step's forward and backward."""
        if self.g1 is None:
            self.capture(rows, micro)
        else:
            self._load(rows, micro)
        self.g1.replay()
        return self.out

    def opt_step(self) -> None:
        self.g2.replay()


def tokens_per_byte(batches, corpus) -> float:
    """Target tokens per byte of text over ``batches`` (windows of seq_len + 1 ids): exact, from
    each token's byte length (``corpus.token_bytes``; every token is one byte without it)."""
    lengths = getattr(corpus, "token_bytes", None)
    n_tok = sum(int(w[:, 1:].size) for w in batches)
    if lengths is None:
        return 1.0
    n_bytes = sum(int(lengths[w[:, 1:]].sum()) for w in batches)
    return n_tok / n_bytes


def _set_step(model, step: int) -> None:
    try:
        from .mxlinear import set_step
    except ImportError:  # pragma: no cover - task A's module absent
        return
    set_step(model, step)


# ---- the loop ---------------------------------------------------------------------------
def train(cfg: TrainConfig) -> dict:
    """Run (or resume) one training run; returns the summary dict (also in summary.json).

    Raises RunDirError / CheckpointError / TrainingConfigError before training starts,
    TrainingCheckError when an in-run check fails and NonFiniteLossError on a NaN/inf loss;
    in both of the latter the last good checkpoint is kept and summary.json says why.
    """
    t_begin = time.perf_counter()   # --stop-after-seconds counts the set-up too
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = pick_device(cfg.device)
    dist = ddp.init_distributed(device.type)
    if dist.enabled:
        device = ddp.device_for(dist, device.type)
    cfg.validate(dist.world_size)
    resolve_recipe(cfg.recipe, cfg.seed)  # unknown recipe: fail before loading anything
    out = Path(cfg.out)
    try:
        with deterministic_mode(cfg.deterministic):
            return _train(cfg, out, device, dist, t_begin)
    except RuntimeError as e:
        if cfg.deterministic and "deterministic" in str(e):
            raise TrainingConfigError(
                f"--deterministic: an operation of this run has no deterministic "
                f"implementation on {device.type}: {str(e).splitlines()[0]}") from e
        raise
    finally:
        ddp.shutdown(dist)


CUBLAS_WORKSPACE = ":4096:8"


@contextmanager
def deterministic_mode(on: bool):
    """With ``on``: torch's deterministic algorithms (an op without a deterministic
    implementation raises instead of running), cuDNN deterministic and not benchmarking, and
    cuBLAS's fixed workspace (``CUBLAS_WORKSPACE_CONFIG``, which torch requires for
    deterministic cuBLAS; it takes effect for cuBLAS handles made after it is set, so a
    process that ran CUDA matmuls before keeps its old handles). Every setting is put back on
    exit. Our Triton kernels use only integer or max atomics: they are deterministic either
    way."""
    if not on:
        yield
        return
    prev = (torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
            os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = prev[4] or CUBLAS_WORKSPACE
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev[0], warn_only=prev[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = prev[2], prev[3]
        if prev[4] is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = prev[4]


def _train(cfg: TrainConfig, out: Path, device: torch.device, dist: ddp.DistInfo,
           t_begin: float | None = None) -> dict:
    torch.manual_seed(cfg.seed)
    b = build(cfg, device, dist)
    identity = {"train": cfg.identity(), "recipe": b.recipe.to_dict(),
                "corpus_sha256": b.corpus.sha256, "world_size": dist.world_size}
    if b.corpus.tokenizer == "bpe":      # the vocabulary file itself, not only its settings
        identity["tokenizer_sha256"] = b.corpus.info["tokenizer_sha256"]
    fp = fingerprint(identity)
    mode = prepare_run_dir(out, identity)
    if mode == "complete":
        return json.loads((out / "summary.json").read_text())
    ddp.barrier(dist)
    ck_root = out / "checkpoints"
    start = 0
    if mode == "resume":
        last, notes = ckpt.find_resume_checkpoint(ck_root, fp, out)
        if dist.is_main:
            for note in notes:
                print(f"mxref train: {note}", file=sys.stderr, flush=True)
        if last is not None:
            if cfg.fsdp:   # full tensors in the file; each rank keeps its shards
                meta = ckpt.load_checkpoint(last, fsdp_mod.FullStateModel(b.raw_model),
                                            fsdp_mod.FullStateOptimizer(b.optimizer), fp, device)
            else:
                meta = ckpt.load_checkpoint(last, b.raw_model, b.optimizer, fp, device)
            start = int(meta["step"])
            if cfg.cuda_graph:   # a loaded learning rate may come back as a host value
                for g in b.optimizer.param_groups:
                    g["lr"] = torch.tensor(float(g["lr"]), dtype=torch.float32, device=device)
    main = dist.is_main
    if main:
        out.mkdir(parents=True, exist_ok=True)
        if mode == "new":
            config = {"schema": CONFIG_SCHEMA, "identity": identity, "fingerprint": fp,
                      "train": dataclasses.asdict(cfg), "lr": cfg.resolved_lr(),
                      "total_steps": cfg.total_steps, "tokens_per_step": cfg.tokens_per_step,
                      "recipe": b.recipe.to_dict(), "corpus": b.corpus.describe(),
                      "model": {"name": cfg.model, **dataclasses.asdict(get_model_spec(cfg.model)),
                                "params": param_counts(b.raw_model),
                                "hf_config": b.raw_model.config.to_dict()},
                      "swapped_linears": b.swapped, "world_size": dist.world_size,
                      "epochs": b.sampler.epochs_at(cfg.total_steps),
                      "parallel": _parallel(cfg, dist),
                      "env": environment(device),
                      "reproduce": "mxref train " + " ".join(_cli_args(cfg))}
            ckpt.write_json_atomic(out / "config.json", config)
        epochs = b.sampler.epochs_at(cfg.total_steps)
        if epochs > 1.0 and start == 0:
            print(f"mxref train: {cfg.tokens:,} tokens are {epochs:.1f} epochs of this corpus "
                  f"({b.corpus.train.size:,} training tokens): once the text repeats, the "
                  "validation loss measures memorization as well (a larger corpus: --corpus "
                  "python, a file or a directory)", file=sys.stderr, flush=True)
        if b.corpus.tokenizer == "bpe":   # the run directory's own copy of the vocabulary
            (out / "tokenizer.json").write_bytes(b.corpus.bpe.json_bytes)
        _truncate_jsonl(out / "log.jsonl", start)
        _truncate_jsonl(out / "checks.jsonl", start)
        _truncate_jsonl(out / "decomp.jsonl", start)
        (out / "summary.json").unlink(missing_ok=True)
    ddp.barrier(dist)

    log = _JsonlWriter(out / "log.jsonl", main)
    checks = _JsonlWriter(out / "checks.jsonl", main)
    decomp = _JsonlWriter(out / "decomp.jsonl", main) if cfg.decompose else None
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) \
        if cfg.precision == "bf16" else nullcontext
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    total = cfg.total_steps
    micro = cfg.batch_size // (dist.world_size * cfg.grad_accum)
    bar = None
    if main and cfg.progress:
        from tqdm import tqdm

        bar = tqdm(total=total, initial=start, file=sys.stderr, unit="step", dynamic_ncols=True,
                   desc=f"{cfg.model} {b.recipe.name}")
    status, error, last_val, step_times = "complete", None, None, []
    last_ckpt = start if start else None
    t_run = time.perf_counter()
    step = start
    graph = None
    graph_steps = 0
    if cfg.cuda_graph:
        from .mxlinear import use_device_step

        use_device_step(device)
        # MXK_CUDA_GRAPH_EAGER=1 (a test hook): every step eager, with the graph mode's
        # optimizer and device step, to compare the graph's results bit for bit
        if os.environ.get("MXK_CUDA_GRAPH_EAGER", "0") != "1":
            graph = _StepGraph(b, cfg, autocast, device)
    pending = _PendingCheck(checks, dist, device, decomp) \
        if cfg.validate_every and _async_checks(device, dist) else None
    try:
        for step in range(start, total):
            t0 = time.perf_counter()
            lr = lr_at(step, cfg)
            for g in b.optimizer.param_groups:
                if isinstance(g["lr"], torch.Tensor):
                    g["lr"].fill_(lr)
                else:
                    g["lr"] = lr
            _set_step(b.raw_model, step)
            rows = b.sampler.batch(step, dist.rank, dist.world_size)
            if pending is not None and cfg.validate_every and step % cfg.validate_every == 0:
                pending.collect(wait=True)   # one check at a time
            armed = _arm_validation(cfg, b, step)
            loss_sum = torch.zeros((), device=device)
            aux_sum = None
            qtimed = bool(b.swapped and cfg.quant_time_every and
                          step % cfg.quant_time_every == 0)
            qt = _quant_timer(b) if qtimed else _QuantTiming(None)
            # eager: the first two steps (compile, optimizer state), checked and timed ones
            replay = graph is not None and armed is None and not qtimed and step >= start + 2
            if replay:
                loss_sum, aux_sum, grad_norm = graph.fwd_bwd(rows, micro)
                graph_steps += 1
            elif graph is not None and graph.g1 is not None:
                # the graph's gradients are still attached: an eager step starts from none
                b.optimizer.zero_grad(set_to_none=True)
            for k in range(0 if replay else cfg.grad_accum):
                tokens = torch.from_numpy(rows[k * micro:(k + 1) * micro]).to(device)
                sync = k == cfg.grad_accum - 1 or not dist.enabled
                with _sync_context(b.model, sync, cfg), qt:
                    with autocast():
                        ce, total_loss, aux = lm_loss(b.model, tokens)
                    (total_loss / cfg.grad_accum).backward()
                loss_sum += ce.detach() / cfg.grad_accum
                if aux is not None:
                    aux_sum = (aux_sum or 0) + aux / cfg.grad_accum
                # drop this micro-batch's autograd graph now: a graph kept alive into a CUDA
                # graph capture ties its gradient accumulation to the eager stream
                ce = total_loss = aux = None
                if armed is not None and k == 0:
                    if pending is not None:
                        pending.submit(armed, step, sharded=cfg.fsdp)
                    else:
                        _check_validation(armed, step, checks, log, dist, device, decomp,
                                          sharded=cfg.fsdp)
                    armed = None
            loss_t = ddp.all_reduce_mean(loss_sum, dist)
            if cfg.debug_nan_at_step is not None and step == cfg.debug_nan_at_step:
                loss_t = loss_t * float("nan")
            if not replay:
                grad_norm = fsdp_mod.to_full(   # a replicated DTensor under FSDP
                    torch.nn.utils.clip_grad_norm_(b.raw_model.parameters(), cfg.grad_clip))
            loss = float(loss_t)
            if not math.isfinite(loss) or not math.isfinite(float(grad_norm)):
                log.write({"step": step, "tokens": (step + 1) * cfg.tokens_per_step,
                           "loss": loss if math.isfinite(loss) else str(loss), "lr": lr,
                           "grad_norm": float(grad_norm) if math.isfinite(float(grad_norm))
                           else str(float(grad_norm))})
                raise NonFiniteLossError(
                    f"step {step}: loss {loss}, grad norm {float(grad_norm)}; stopped. The last "
                    f"good checkpoint is "
                    f"{'step ' + str(last_ckpt) if last_ckpt is not None else 'none (no checkpoint yet)'}"
                    f" in {ck_root}")
            if replay:
                graph.opt_step()       # the graph's gradients stay its own (no zeroing)
            else:
                b.optimizer.step()
                b.optimizer.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            dt = time.perf_counter() - t0
            step_times.append((dt, qtimed))
            rec = {"step": step, "tokens": (step + 1) * cfg.tokens_per_step, "loss": loss,
                   "lr": lr, "grad_norm": float(grad_norm), "step_time_s": round(dt, 6),
                   "tokens_per_s": round(cfg.tokens_per_step / dt, 1)}
            if aux_sum is not None:
                rec["aux_loss"] = float(aux_sum)
            if qtimed:
                q_s = qt.timer.seconds()
                rec["quant_time_s"] = round(q_s, 6)
                rec["quant_share"] = round(q_s / dt, 4)
            last_step = step == total - 1
            if (cfg.eval_every and (step + 1) % cfg.eval_every == 0) or last_step:
                if main or cfg.fsdp:   # a sharded forward needs every rank
                    v = evaluate(b.raw_model, b.val, device, autocast)
                    if main:
                        last_val = v
                        rec["val_loss"] = last_val
                        rec["val_loss_per_byte"] = last_val * b.val_tokens_per_byte
                ddp.barrier(dist)
            log.write(rec)
            if pending is not None:
                pending.collect(wait=last_step)
            if (cfg.ckpt_every and (step + 1) % cfg.ckpt_every == 0) or last_step:
                if pending is not None:
                    pending.collect(wait=True)   # no checkpoint after an unreported check
                _save(cfg, b, dist, ck_root, step + 1, fp)
                last_ckpt = step + 1
                ddp.barrier(dist)
            if bar:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{cfg.tokens_per_step / dt:.3g}")
            if not last_step and (
                    (cfg.stop_after is not None and step + 1 >= cfg.stop_after)
                    or (cfg.stop_after_seconds is not None and ddp.any_rank(
                        time.perf_counter() - (t_begin if t_begin is not None else t_run)
                        >= cfg.stop_after_seconds, dist, device))):
                if pending is not None:
                    pending.collect(wait=True)
                if last_ckpt != step + 1:
                    _save(cfg, b, dist, ck_root, step + 1, fp)
                    last_ckpt = step + 1
                    ddp.barrier(dist)
                status = "stopped"
                break
    except NonFiniteLossError as e:
        status, error = "nonfinite_loss", e
    except TrainingCheckError as e:
        status, error = "check_failed", e
    finally:
        if pending is not None:
            pending.close()
        if bar:
            bar.close()
        log.close()
        checks.close()
        if cfg.cuda_graph:
            from .mxlinear import use_device_step

            use_device_step(None)
    summary = _summary(cfg, out, b, device, dist, status, error, last_val, step_times,
                       time.perf_counter() - t_run, last_ckpt, start)
    if cfg.cuda_graph:
        summary["cuda_graph_steps"] = graph_steps
    if main:
        ckpt.write_json_atomic(out / "summary.json", summary)
    if error is not None:
        raise error
    return summary


def _parallel(cfg: TrainConfig, dist: ddp.DistInfo) -> str:
    return "none" if not dist.enabled else ("fsdp" if cfg.fsdp else "ddp")


def _sync_context(model, sync: bool, cfg: TrainConfig):
    """No gradient communication on the non-final micro-batches (DDP no_sync / FSDP2
    set_requires_gradient_sync(False))."""
    if sync:
        return nullcontext()
    return fsdp_mod.gradient_sync(model, False) if cfg.fsdp else model.no_sync()


def _save(cfg: TrainConfig, b: Built, dist: ddp.DistInfo, ck_root: Path, step: int,
          fp: str) -> None:
    """Checkpoint ``step``: rank 0 writes; under FSDP every rank first gathers the full state
    (the file is the single-process format either way)."""
    model, opt = b.raw_model, b.optimizer
    if cfg.fsdp:
        model = fsdp_mod.static(fsdp_mod.full_model_state(b.raw_model))
        opt = fsdp_mod.static(fsdp_mod.full_optimizer_state(b.optimizer))
    if dist.is_main:
        ckpt.save_checkpoint(ck_root, step, step * cfg.tokens_per_step, model, opt, fp,
                             cfg.keep_checkpoints)


class _QuantTiming:
    """Re-entrant wrapper of mxlinear's quant_timer: accumulates over the micro-batches."""

    def __init__(self, timer):
        self.timer, self._cm = timer, None

    def __enter__(self):
        if self.timer is not None:
            from .quant import quant_timer

            self._cm = quant_timer(self.timer)
            self._cm.__enter__()
        return self

    def __exit__(self, *exc):
        if self._cm is not None:
            self._cm.__exit__(*exc)
            self._cm = None
        return False


def _quant_timer(b: Built) -> _QuantTiming:
    if not b.swapped:
        return _QuantTiming(None)
    from .quant import QuantTimer

    return _QuantTiming(QuantTimer())


def _arm_validation(cfg: TrainConfig, b: Built, step: int):
    if not cfg.validate_every or not b.swapped or step % cfg.validate_every:
        return None
    from .validate import capture_next

    name = b.swapped[(step // cfg.validate_every) % len(b.swapped)]
    layer = b.raw_model.get_submodule(name)
    capture_next(layer)
    return name, layer


# In-run checks of a single-process CUDA run go to a background thread: mxref's Numba kernels
# release the GIL and read host copies made at capture time, so the GPU keeps training while
# the CPU checks (35-48 s per check for llama-125m at 32 x 1024 on 16 cores, against 0.13 s
# per step). None: that automatic choice; True / False force it (tests).
ASYNC_CHECKS: bool | None = None


def _async_checks(device: torch.device, dist: ddp.DistInfo) -> bool:
    if ASYNC_CHECKS is not None:
        return ASYNC_CHECKS
    return device.type == "cuda" and not dist.enabled   # ranks must agree on the step


def _run_check(armed, step, want_decomp: bool, sharded: bool) -> tuple:
    """mxref's recomputation of one armed layer: (step, layer name, records as dicts,
    decomposition parts or None). Writes nothing. Holds quant.HOST_NUMBA: no other thread
    launches one of mxref's parallel kernels meanwhile (numba's workqueue layer would abort)."""
    from .quant import HOST_NUMBA
    from .validate import check_capture

    name, layer = armed
    t0 = time.perf_counter()
    parts = [] if want_decomp else None
    cap = getattr(layer, "_capture_done", None) or {}
    with HOST_NUMBA:
        records = check_capture(layer, decompose=parts)
    if sharded:
        records.append(_sharded_weight_record(layer, cap))
    dt = time.perf_counter() - t0
    rows = [{"step": step, "layer": name, "check_time_s": round(dt, 4), **_record_dict(r)}
            for r in records]
    return step, name, rows, parts


def _report_check(result, checks, dist, device, decomp=None) -> None:
    """Write a check's records; raise TrainingCheckError (on every rank) when one failed."""
    step, name, rows, parts = result
    for d in parts or ():
        decomp.write({"step": step, "layer": name, **d})
    bad = []
    for d in rows:
        checks.write(d)
        if not d.get("ok", False):
            bad.append(d)
    if ddp.any_rank(bool(bad), dist, device):
        detail = "; ".join(f"{d.get('gemm', '?')} {d.get('operand', '')}: "
                           f"{d.get('mismatches', '?')} mismatches ({d.get('detail', '')})"
                           for d in bad[:3]) or "a check failed on another rank"
        raise TrainingCheckError(f"in-run validation failed at step {step}, layer {name}: {detail}"
                                 " (records in checks.jsonl)")


def _check_validation(armed, step, checks, log, dist, device, decomp=None, sharded=False):
    _report_check(_run_check(armed, step, decomp is not None, sharded), checks, dist, device,
                  decomp)


class _PendingCheck:
    """At most one in-run check running on a background thread. ``collect`` reports it
    when it is done (``wait``: first wait for it): the loop waits before every checkpoint,
    before arming the next check and at the end, so no checkpoint follows an unreported
    check and a failed one stops the run within the steps it took."""

    def __init__(self, checks, dist, device, decomp):
        from concurrent.futures import ThreadPoolExecutor

        self.checks, self.dist, self.device, self.decomp = checks, dist, device, decomp
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="mxref-check")
        self.future = None

    def submit(self, armed, step, sharded: bool) -> None:
        self.collect(wait=True)
        self.future = self.pool.submit(_run_check, armed, step, self.decomp is not None,
                                       sharded)

    def collect(self, wait: bool = False) -> None:
        f = self.future
        if f is None or not (wait or f.done()):
            return
        self.future = None
        _report_check(f.result(), self.checks, self.dist, self.device, self.decomp)

    def close(self) -> None:
        """Finish and record a check still running (the run is ending for another reason:
        its records are still written; its verdict cannot change the status any more)."""
        try:
            if self.future is not None:
                self.collect(wait=True)
        except TrainingCheckError:
            pass
        finally:
            self.pool.shutdown(wait=True)


def _sharded_weight_record(layer, cap: dict) -> dict:
    """Under FSDP: the checked layer's sharded weight, gathered, against the W operand its
    forward quantized (captured): equal bytes prove the check saw the full parameter."""
    w = fsdp_mod.gathered_weight(layer).to("cpu", torch.float32).numpy()
    got = np.asarray(cap.get("fprop", {}).get("b", {}).get("input", np.zeros((0, 0))))
    got = got[:w.shape[0], :w.shape[1]] if got.ndim == 2 else got
    same = got.shape == w.shape and got.tobytes() == np.ascontiguousarray(w).tobytes()
    mism = int((got != w).sum()) if got.shape == w.shape else int(w.size)
    return {"gemm": "fprop", "operand": "W (FSDP shards gathered)", "ok": bool(same),
            "mismatches": mism,
            "detail": "captured W operand == all-gathered sharded weight" if same else
            f"captured W operand {got.shape} differs from the gathered weight {w.shape}"}


def _summary(cfg, out, b, device, dist, status, error, last_val, step_times, wall, last_ckpt,
             start) -> dict:
    losses, shares = [], []
    log_path = out / "log.jsonl"
    if log_path.exists():
        for line in log_path.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r.get("loss"), float):
                losses.append(r["loss"])
            if "quant_share" in r:
                shares.append(r["quant_share"])
    tail = losses[-max(1, len(losses) // 10):] if losses else []
    # the first step includes compilation; quantization-timed steps carry the timer's events
    times = [t for t, q in step_times[1:] if not q] or [t for t, _ in step_times[1:]] or \
        [t for t, _ in step_times]
    med = float(np.median(times)) if times else None
    return {"schema": SUMMARY_SCHEMA, "status": status, "error": str(error) if error else None,
            "model": cfg.model, "recipe": b.recipe.name, "seed": cfg.seed,
            "steps_done": len(losses), "total_steps": cfg.total_steps,
            "tokens": len(losses) * cfg.tokens_per_step,
            "final_train_loss": losses[-1] if losses else None,
            "final_train_loss_tail_mean": float(np.mean(tail)) if tail else None,
            "final_val_loss": last_val, "last_checkpoint_step": last_ckpt,
            "tokenizer": b.corpus.tokenizer, "vocab_size": b.corpus.vocab_size,
            "val_tokens_per_byte": b.val_tokens_per_byte,
            "final_val_loss_per_byte": None if last_val is None else
            last_val * b.val_tokens_per_byte,
            "parallel": _parallel(cfg, dist),
            "resumed_from_step": start or None,
            "median_step_time_s": med,
            "median_tokens_per_s": cfg.tokens_per_step / med if med else None,
            "median_quant_share": float(np.median(shares[1:] or shares)) if shares else None,
            "wall_time_s": round(wall, 3), "world_size": dist.world_size, "device": str(device),
            "params": param_counts(b.raw_model), "swapped_linears": len(b.swapped),
            **peak_memory(device)}


def _cli_args(cfg: TrainConfig) -> list[str]:
    """``mxref train`` options that rebuild ``cfg``: every field off its default, and always
    --model and --out (the command requires them)."""
    out = []
    defaults = TrainConfig()
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if f.name in ("progress", "debug_nan_at_step") or v is None or v is False:
            continue
        if f.name in ("beta1", "beta2"):
            if v != getattr(defaults, f.name):
                raise TrainingConfigError(f"{f.name}={v} has no mxref train option")
            continue
        if v == getattr(defaults, f.name) and f.name not in ("model", "out"):
            continue
        flag = f"--{f.name.replace('_', '-')}"
        out += [flag] if v is True else [flag, str(v)]
    return out
