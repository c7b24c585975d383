"""Named model sizes, random init, the MoE expert replacement, which linears get swapped."""
import pytest
import torch

from mxkernels.training import models as M
from mxref.errors import MXRefError
from mxkernels.training.errors import UnknownModelError


@pytest.mark.parametrize("name,n", [
    # non-embedding counts of the Quartet / Quartet II sizes (training_anchors.md C.0, runs.json N)
    ("llama-30m", 30_482_560), ("llama-50m", 49_556_736), ("llama-100m", 102_777_856)])
def test_anchor_sizes_have_the_published_parameter_counts(name, n):
    assert M.count_params(name)["non_embedding"] == n


def test_125m_and_tiny_sizes():
    # 10 * (4*1024^2 + 3*1024*2816 + 2*1024) + 1024 = 128,472,064 (hand count)
    assert M.count_params("llama-125m")["non_embedding"] == 128_472_064
    assert M.count_params("llama-tiny", vocab_size=256)["embedding"] == 2 * 256 * 128
    # 16 * (4*2048^2 + 3*2048*5632 + 2*2048) + 2048 (hand count; ffn = ceil(16384/3/256)*256)
    assert M.count_params("llama-820m")["non_embedding"] == 822_151_168


def test_unknown_model_is_a_typed_error():
    with pytest.raises(UnknownModelError, match="llama-30m") as e:
        M.get_model_spec("llama-7b")
    assert isinstance(e.value, MXRefError) and isinstance(e.value, KeyError)


def test_init_depends_only_on_the_seed():
    a = M.build_model("qwen3-tiny", 256, seed=1)
    b = M.build_model("qwen3-tiny", 256, seed=1)
    c = M.build_model("qwen3-tiny", 256, seed=2)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.layers.0.mlp.up_proj.weight"],
                           sc["model.layers.0.mlp.up_proj.weight"])
    assert a.config.tie_word_embeddings is False
    assert not torch.equal(sa["lm_head.weight"], sa["model.embed_tokens.weight"])


def test_linear_experts_compute_what_the_fused_upstream_experts_compute():
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

    cfg = M.make_config(M.get_model_spec("qwen3-moe-tiny"), 256)
    torch.manual_seed(0)
    ours = M.LinearExperts(cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size,
                           torch.nn.functional.silu)
    for p in ours.parameters():
        torch.nn.init.normal_(p, std=0.1)
    ref = Qwen3MoeExperts(cfg)
    with torch.no_grad():
        for e in range(cfg.num_experts):
            ref.gate_up_proj[e] = torch.cat([ours.gate_proj[e].weight, ours.up_proj[e].weight])
            ref.down_proj[e] = ours.down_proj[e].weight
    x = torch.randn(40, cfg.hidden_size)
    idx = torch.stack([torch.randperm(cfg.num_experts)[:2] for _ in range(40)])
    w = torch.rand(40, 2)
    torch.testing.assert_close(ours(x, idx, w), ref(x, idx, w), rtol=1e-5, atol=1e-6)


def test_moe_model_trains_through_linear_experts_and_router():
    m = M.build_model("qwen3-moe-tiny", 256, seed=0)
    assert all(isinstance(layer.mlp.experts, M.LinearExperts) for layer in m.model.layers)
    x = torch.randint(0, 256, (2, 33))
    out = m(input_ids=x)
    loss = torch.nn.functional.cross_entropy(out.logits.reshape(-1, 256), x.reshape(-1)) + out.aux_loss
    loss.backward()
    assert m.model.layers[0].mlp.gate.weight.grad.abs().sum() > 0
    grads = [p.grad for p in m.model.layers[0].mlp.experts.parameters()]
    assert sum(g is not None and g.abs().sum() > 0 for g in grads) > 6
    counts = M.param_counts(m)
    assert counts["non_embedding_active"] < counts["non_embedding"]


def test_swap_covers_projections_and_experts_but_not_head_embeddings_router():
    from mxkernels.training.mxlinear import swap_linears

    m = M.build_model("qwen3-moe-tiny", 256, seed=0)
    names = swap_linears(m, "mxfp4-fdw")
    assert "lm_head" not in names and not any("embed" in n for n in names)
    assert not any(n.endswith("mlp.gate") for n in names)
    assert "model.layers.1.self_attn.q_proj" in names
    assert "model.layers.0.mlp.experts.down_proj.3" in names
    assert len(names) == 2 * (4 + 3 * 4)  # 2 layers x (q,k,v,o + 4 experts x gate,up,down)
