"""Named Llama / Qwen model sizes built from Hugging Face ``transformers`` configs with random init.

Nothing is downloaded: each entry of :data:`MODELS` is a config (family + dimensions); the
model is built with ``AutoModelForCausalLM.from_config``-equivalent constructors and random
weights from the seed. Shapes follow training_anchors.md C.0: ``tie_word_embeddings=False``,
RoPE, RMSNorm eps 1e-5, SwiGLU with intermediate = ceil((8d/3)/256)*256, untied lm_head.
``llama-30m`` / ``-50m`` / ``-100m`` are exactly the Quartet / Quartet II sizes (their
non-embedding parameter counts are 30,482,560 / 49,556,736 / 102,777,856).

Which linears are quantized: the recipe's swap (task A's ``swap_linears``) replaces every
``nn.Linear`` in the decoder layers (q, k, v, o, gate, up, down and, for MoE, the expert
projections). :func:`quantizable_linear_filter` names what is excluded and stays in bf16:
embeddings, ``lm_head``, norms, attention (the softmax(QK^T)V part, not its projections) and
the MoE router.

Qwen3-MoE: transformers stores the experts as fused 3-D parameters (``Qwen3MoeExperts``), which
no linear-layer swap can see. :class:`LinearExperts` replaces them with one ``nn.Linear`` per
expert projection (same forward contract, same math), so expert GEMMs can be quantized.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .errors import UnknownModelError


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # llama | qwen2 | qwen3 | qwen3_moe
    hidden: int
    layers: int
    heads: int
    intermediate: int
    extra: dict = field(default_factory=dict)
    note: str = ""


def _ffn(d: int) -> int:
    return -(-(8 * d // 3) // 256) * 256


def _specs():
    out = []
    dims = {
        "tiny": (128, 2, 4, 384),
        "30m": (640, 6, 5, 1792),
        "50m": (768, 7, 6, 2048),
        "100m": (1024, 8, 8, 2816),
        "125m": (1024, 10, 8, 2816),
        "820m": (2048, 16, 16, 5632),     # GEMMs most of the step: the FP8 carrier's case
    }
    for fam in ("llama", "qwen2", "qwen3"):
        for size, (d, n, h, i) in dims.items():
            if fam != "llama" and size in ("50m", "100m", "820m"):
                continue
            out.append(ModelSpec(f"{fam}-{size}", fam, d, n, h, i))
    moe = dict(num_experts=8, num_experts_per_tok=2)
    out.append(ModelSpec("qwen3-moe-tiny", "qwen3_moe", 128, 2, 4, 256,
                         dict(moe, num_experts=4, moe_intermediate_size=128)))
    out.append(ModelSpec("qwen3-moe-60m", "qwen3_moe", 512, 8, 8, 1536,
                         dict(moe, moe_intermediate_size=512),
                         "training_anchors E10: d=512, 8 layers, 8 experts, top-2"))
    return {s.name: s for s in out}


MODELS: dict[str, ModelSpec] = _specs()


def get_model_spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownModelError(f"unknown model {name!r}; known: {', '.join(MODELS)}") from None


def make_config(spec: ModelSpec, vocab_size: int, max_seq_len: int = 4096):
    import transformers as tf

    common = dict(vocab_size=vocab_size, hidden_size=spec.hidden, num_hidden_layers=spec.layers,
                  num_attention_heads=spec.heads, num_key_value_heads=spec.heads,
                  intermediate_size=spec.intermediate, max_position_embeddings=max_seq_len,
                  rms_norm_eps=1e-5, tie_word_embeddings=False, hidden_act="silu",
                  attention_dropout=0.0, initializer_range=0.02, use_cache=False)
    head_dim = spec.hidden // spec.heads
    if spec.family == "llama":
        cfg = tf.LlamaConfig(**common, head_dim=head_dim)
    elif spec.family == "qwen2":
        cfg = tf.Qwen2Config(**common, use_sliding_window=False)
    elif spec.family == "qwen3":
        cfg = tf.Qwen3Config(**common, head_dim=head_dim, use_sliding_window=False)
    elif spec.family == "qwen3_moe":
        cfg = tf.Qwen3MoeConfig(**common, head_dim=head_dim, use_sliding_window=False,
                                decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
                                output_router_logits=True, router_aux_loss_coef=0.001,
                                **spec.extra)
    else:  # pragma: no cover - registry is closed
        raise UnknownModelError(spec.family)
    return cfg


class LinearExperts(nn.Module):
    """MoE experts as ``nn.Linear`` modules (gate/up/down per expert), so they can be swapped.

    Same call contract as transformers' ``Qwen3MoeExperts.forward(hidden, top_k_index,
    top_k_weights)``. Token order inside an expert is ascending token index, as upstream.
    """

    def __init__(self, num_experts: int, hidden: int, intermediate: int, act):
        super().__init__()
        self.num_experts = num_experts
        self.gate_proj = nn.ModuleList(nn.Linear(hidden, intermediate, bias=False) for _ in range(num_experts))
        self.up_proj = nn.ModuleList(nn.Linear(hidden, intermediate, bias=False) for _ in range(num_experts))
        self.down_proj = nn.ModuleList(nn.Linear(intermediate, hidden, bias=False) for _ in range(num_experts))
        self.act_fn = act

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        for e in range(self.num_experts):
            token_idx, pos = torch.where(top_k_index == e)
            if token_idx.numel() == 0:
                continue
            x = hidden_states[token_idx]
            y = self.down_proj[e](self.act_fn(self.gate_proj[e](x)) * self.up_proj[e](x))
            y = y * top_k_weights[token_idx, pos, None].to(y.dtype)
            out.index_add_(0, token_idx, y.to(out.dtype))
        return out


def _replace_fused_experts(model, cfg, std: float):
    for layer in model.model.layers:
        mlp = layer.mlp
        # transformers 5 fuses experts into 3-D parameters; 4.x keeps a ModuleList of MLPs
        # whose nn.Linear layers a swap already sees
        if not hasattr(getattr(mlp, "experts", None), "gate_up_proj"):
            continue
        old = mlp.experts
        new = LinearExperts(cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size, old.act_fn)
        for p in new.parameters():
            nn.init.normal_(p, mean=0.0, std=std)
        mlp.experts = new.to(old.gate_up_proj.device)


def build_model(name: str, vocab_size: int, seed: int, max_seq_len: int = 4096,
                device: str | torch.device = "cpu") -> nn.Module:
    """Random-init model ``name`` (fp32 master weights) on ``device``; the init depends only on seed."""
    import transformers as tf

    spec = get_model_spec(name)
    cfg = make_config(spec, vocab_size, max_seq_len)
    cfg._attn_implementation = "sdpa"
    cls = {"llama": tf.LlamaForCausalLM, "qwen2": tf.Qwen2ForCausalLM,
           "qwen3": tf.Qwen3ForCausalLM, "qwen3_moe": tf.Qwen3MoeForCausalLM}[spec.family]
    torch.manual_seed(seed)
    model = cls(cfg)
    if spec.family == "qwen3_moe":
        # the router weight is created as zeros and is initialized by post_init; keep that.
        _replace_fused_experts(model, cfg, cfg.initializer_range)
    model.to(device=device, dtype=torch.float32)
    model.config.use_cache = False
    return model


def quantizable_linear_filter(name: str, module: nn.Module) -> bool:
    """True for the linears a recipe quantizes: those inside decoder layers, except the router."""
    return isinstance(module, nn.Linear) and ".layers." in f".{name}" and not name.endswith("mlp.gate")


def param_counts(model: nn.Module) -> dict:
    """Total, embedding (embed_tokens + lm_head) and non-embedding parameter counts; MoE active."""
    total = sum(p.numel() for p in model.parameters())
    emb = sum(p.numel() for n, p in model.named_parameters()
              if "embed_tokens" in n or n.startswith("lm_head"))
    out = {"total": total, "embedding": emb, "non_embedding": total - emb}
    experts = [m for m in model.modules() if isinstance(m, LinearExperts)]
    if experts:
        cfg = model.config
        per_expert = sum(p.numel() for p in experts[0].parameters()) // experts[0].num_experts
        inactive = len(experts) * per_expert * (cfg.num_experts - cfg.num_experts_per_tok)
        out["non_embedding_active"] = out["non_embedding"] - inactive
    return out


def count_params(name: str, vocab_size: int = 256) -> dict:
    """Parameter counts of a named model, built on the meta device (no memory, no init)."""
    with torch.device("meta"):
        model = build_model(name, vocab_size, seed=0, device="meta")
    return param_counts(model)
