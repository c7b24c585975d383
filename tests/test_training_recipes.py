"""Training recipes: construction, JSON round trip, typed refusals, swap_linears scope."""
import dataclasses
import json

import pytest
import torch

from mxkernels.training import (RECIPES, GemmSpec, MXLinear, OperandSpec, Recipe, get_recipe,
                                recipe_from_dict, set_step, swap_linears)
from mxref.errors import MXRefError
from mxkernels.training.errors import RecipeError, UnknownRecipeError

NAMED = ["bf16", "mxfp4-f", "mxfp4-fd", "mxfp4-fdw", "mxfp4-fdw-h16", "mxfp4-fdw-sr",
         "mxfp4-fdw-rht", "quartet", "nvfp4-te", "ms-fp4", "decomp-fixed", "fp4-activations"]


def test_every_named_recipe_exists_and_round_trips_json():
    assert set(NAMED) <= set(RECIPES)
    for name in NAMED:
        r = get_recipe(name)
        assert r.name == name and r.description and "training_anchors" in r.source
        d = json.loads(json.dumps(r.to_dict()))
        assert recipe_from_dict(d) == r
        assert len(r.table_rows()) == 6


def test_unknown_recipe_lists_names():
    with pytest.raises(UnknownRecipeError) as ei:
        get_recipe("mxfp5")
    assert isinstance(ei.value, MXRefError)
    for name in NAMED:
        assert name in str(ei.value)


def test_progressive_amd_recipes_quantize_what_they_say():
    q = {n: tuple(g.quantized for _, g in get_recipe(n).gemms())
         for n in ("bf16", "mxfp4-f", "mxfp4-fd", "mxfp4-fdw")}
    assert q == {"bf16": (False, False, False), "mxfp4-f": (True, False, False),
                 "mxfp4-fd": (True, True, False), "mxfp4-fdw": (True, True, True)}
    te = get_recipe("nvfp4-te")
    assert te.wgrad.hadamard == "fixed_sign" and te.wgrad.hadamard_n == 16
    assert te.fprop.hadamard == te.dgrad.hadamard == "none"
    assert te.dgrad.a.rounding == te.wgrad.a.rounding == "sr" and te.fprop.a.rounding == "rne"


F4 = OperandSpec("mxfp4")


@pytest.mark.parametrize("make, words", [
    (lambda: GemmSpec(F4, F4, "deterministic", 24), "power of two"),
    (lambda: GemmSpec(F4, F4, "deterministic", 512), "power of two"),
    (lambda: GemmSpec(F4, F4, "hadamard"), "hadamard="),
    (lambda: OperandSpec("mxfp5"), "unknown format"),
    (lambda: OperandSpec("mxfp4", profile="te_nvfp4"), "te_nvfp4"),
    (lambda: OperandSpec("mxfp4", profile="nope"), "unknown profile"),
    (lambda: OperandSpec(None, rounding="sr"), "needs a format"),
    (lambda: OperandSpec("mxfp4", rounding="sto"), "rounding="),
    (lambda: OperandSpec("mxfp8_e4m3", scaling="vector"), "E2M1"),
    (lambda: OperandSpec("nvfp4", profile="te_nvfp4", macro=128), "nvfp4"),
    (lambda: OperandSpec("mxfp4", macro=48), "multiple"),
    (lambda: OperandSpec("mxfp4", macro=128, rounding="sr"), "sr"),
    (lambda: OperandSpec("mxfp4", clamp_quantile=1.5), "clamp_quantile"),
    (lambda: OperandSpec("mxfp4", outlier="topk", outlier_k=0), "outlier_k"),
])
def test_bad_options_raise_typed_errors(make, words):
    with pytest.raises(RecipeError) as ei:
        Recipe("bad", "d", "s", fprop=make() if isinstance(make(), GemmSpec)
               else GemmSpec(make(), F4))
    assert words in str(ei.value)


def test_bad_recipe_level_options():
    with pytest.raises(RecipeError, match="source must be 'hp'"):
        Recipe("x", "d", "s", fprop=GemmSpec(OperandSpec("mxfp4", source="fwd"), F4))
    with pytest.raises(RecipeError, match="needs the forward operand"):
        Recipe("x", "d", "s", dgrad=GemmSpec(F4, OperandSpec("mxfp4", source="fwd")))
    with pytest.raises(RecipeError, match="dge_k"):
        Recipe("x", "d", "s", fprop=GemmSpec(OperandSpec("mxfp4", scaling="vector", dge_k=5.0),
                                              F4))
    with pytest.raises(RecipeError, match="save_activations"):
        Recipe("x", "d", "s", save_activations="nvfp4")
    with pytest.raises(RecipeError, match="unknown recipe fields"):
        recipe_from_dict({"name": "x", "description": "", "source": "", "bogus": 1})
    with pytest.raises(RecipeError, match="backend"):
        MXLinear(32, 32, recipe="mxfp4-fdw", backend="cuda")


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = torch.nn.Linear(32, 32)
        self.mlp = torch.nn.Module()
        self.mlp.gate_proj = torch.nn.Linear(32, 64, bias=False)
        self.mlp.gate = torch.nn.Linear(32, 4, bias=False)          # MoE router


class _Model(torch.nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(10, 32)
        self.layers = torch.nn.ModuleList(_Block() for _ in range(n))
        self.lm_head = torch.nn.Linear(32, 10, bias=False)


def test_swap_linears_scope_and_shared_parameters():
    m = _Model()
    before = {n: p for n, p in m.named_parameters()}
    names = swap_linears(m, "mxfp4-fdw", backend="torch")
    assert names == [f"layers.{i}.{s}" for i in range(4) for s in ("q_proj", "mlp.gate_proj")]
    assert type(m.lm_head) is torch.nn.Linear and type(m.layers[0].mlp.gate) is torch.nn.Linear
    after = {n: p for n, p in m.named_parameters()}
    assert before.keys() == after.keys() and all(before[k] is after[k] for k in before)
    ids = [m.get_submodule(n).layer_id for n in names]
    assert ids == list(range(len(names)))
    set_step(m, 7)
    assert all(m.get_submodule(n).step == 7 for n in names)


def test_swap_linears_keeps_last_blocks_bf16():
    m = _Model()
    r = dataclasses.replace(get_recipe("nvfp4-te"), bf16_first=1, bf16_last=1)
    names = swap_linears(m, r, backend="torch")
    assert {n.split(".")[1] for n in names} == {"1", "2"}
    assert get_recipe("nvfp4-te").bf16_last == 1


def test_sr_words_is_validated_and_left_out_of_the_identity_at_1():
    """OperandSpec.sr_words: 1 or 4, and only with rounding='sr'; to_dict leaves out 1 (old
    run identities) and keeps 4; the named SR recipes use 4, their -w1 variants 1."""
    from mxkernels.training.errors import RecipeError
    from mxkernels.training.recipes import VARIANTS, OperandSpec, get_recipe
    with pytest.raises(RecipeError, match="sr_words=2"):
        OperandSpec("mxfp4", rounding="sr", sr_words=2).validate("x")
    with pytest.raises(RecipeError, match="sr_words=True"):
        OperandSpec("mxfp4", rounding="sr", sr_words=True).validate("x")
    with pytest.raises(RecipeError, match="needs rounding='sr'"):
        OperandSpec("mxfp4", sr_words=4).validate("x")
    sr = get_recipe("mxfp4-fdw-sr").to_dict()
    assert sr["dgrad"]["a"]["sr_words"] == 4 and "sr_words" not in sr["fprop"]["a"]
    w1 = VARIANTS["mxfp4-fdw-sr-w1"]
    assert w1.dgrad.a.sr_words == 1 and "sr_words" not in w1.to_dict()["dgrad"]["a"]
    assert get_recipe("nvfp4-te").wgrad.a.label() == "nvfp4/te_nvfp4/sr4"
