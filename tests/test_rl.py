"""Issue 32: the GRPO loop with MXFP4 error arms (mxkernels/rl). CPU only.

* the component-isolated operands are built from mxref.decompose's exact components: every
  exact_* array of the torch decomposition equals mxref's bit for bit, the three add up to the
  full error exactly, and each isolated operand equals Q_s(x) minus the other two components;
* the torch corrections equal mxref.corrections' dequantized values;
* the reward on hand examples (and a planted reward that ignores the last digit is caught);
* the group-relative advantage on a hand-worked group, the completion mask, the PPO loss;
* a CPU smoke run (2 arms x 1 seed x 4 steps): every log field present and finite, compare
  tables and plots written.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mxkernels.rl import quant as Q
from mxkernels.rl import task
from mxkernels.rl.loop import (
    LOG_FIELDS,
    MISMATCH_FIELDS,
    completion_mask,
    group_advantages,
    ppo_loss,
)


def _operand(seed=0):
    """Gaussian rows with outliers, an all-zero block, a tiny block, and exact rounding ties
    of the ideal quantizer (|v| * 6 / A on 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((48, 256)).astype(np.float32)
    x[:, ::37] *= 30
    x[3, :32] = 0
    x[4, 32:64] = np.float32(1e-3) * rng.standard_normal(32).astype(np.float32)
    # block with amax 24 (A / 6 = 4): v = 4 * t for the E2M1 ties t, both signs
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.125], dtype=np.float32) * 4
    x[5, :32] = 0.1
    x[5, 0] = 24.0
    x[5, 1:9] = ties
    x[5, 9:17] = -ties
    x[6, 64:96] = rng.standard_normal(32).astype(np.float32) * 1e-2
    x[6, 64] = 3.0                       # a block with most elements in the deadzone
    return x


def test_components_equal_mxref_decompose_exactly():
    from mxref.decompose import decompose

    x = _operand()
    d = decompose(x, "mxfp4", "ocp")
    c = Q.components(torch.from_numpy(x))
    assert d.denominator == Q.M_ODD
    for f in ("exact_scale", "exact_dead", "exact_grid"):
        np.testing.assert_array_equal(getattr(c, f).numpy(), getattr(d, f), err_msg=f)
    np.testing.assert_array_equal(c.deadzone.numpy(), d.deadzone)
    np.testing.assert_array_equal(c.q.double().numpy(), d.q)
    assert c.deadzone.any() and (c.exact_scale != 0).any() and (c.exact_grid != 0).any()
    # scale + dead + grid = the full error, exactly (M_odd-scaled float64, no rounding)
    total = c.exact_scale + (c.exact_dead + c.exact_grid)
    assert torch.equal(total, c.dq - c.dx)
    np.testing.assert_array_equal(total.numpy(), d.exact_total)
    # each isolated operand = quantized value minus the other two components' exact values
    others = {"scale": c.exact_dead + c.exact_grid, "dead": c.exact_scale + c.exact_grid,
              "grid": c.exact_scale + c.exact_dead}
    exact = {"scale": d.exact_scale, "dead": d.exact_dead, "grid": d.exact_grid}
    for k, o in others.items():
        assert torch.equal(c.dq - o, c.dx + getattr(c, f"exact_{k}")), k
        want = ((d.x * d.denominator + exact[k]) / d.denominator).astype(np.float32)
        np.testing.assert_array_equal(c.isolated(k).numpy(), want, err_msg=k)
        np.testing.assert_array_equal(Q.operand_values(torch.from_numpy(x), k).numpy(), want)
    # and the isolated errors sum to the full error: (iso_s - x) + (iso_d - x) + (iso_g - x)
    sum_iso = sum((c.dx + getattr(c, f"exact_{k}")) - c.dx for k in others)
    assert torch.equal(sum_iso, c.dq - c.dx)
    # dead-only zeroes exactly the deadzone and keeps every other element
    dead_only = c.isolated("dead").numpy()
    np.testing.assert_array_equal(dead_only, np.where(d.deadzone, 0.0, x).astype(np.float32))


def test_corrections_equal_mxref():
    from mxref.corrections import quantize_macroblock, quantize_outlier_fallback

    x = _operand(1)
    t = torch.from_numpy(x)
    np.testing.assert_array_equal(Q.macro_values(t).numpy(),
                                  quantize_macroblock(x, "mxfp4", "ocp", macro=128).dequantize())
    fb = quantize_outlier_fallback(x, "mxfp4", "ocp", rule="block", tau=10.0, rho=8)
    assert 0 < fb.flagged.sum() < fb.flagged.size
    np.testing.assert_array_equal(Q.outlier_flags(t).numpy(), fb.passthrough)
    np.testing.assert_array_equal(Q.outlier_values(t).numpy(), fb.dequantize())
    np.testing.assert_array_equal(Q.mx_values(t).numpy(),
                                  __import__("mxref").quantize(x, "mxfp4", "ocp").dequantize())


# ---- reward -------------------------------------------------------------------------------
def _hand_reward_failures(reward_fn) -> list:
    """Hand examples (digits=2): 23 + 45 = 68 -> answer '860' (LSB first, 3 digits) + EOS."""
    E = task.EOS
    enc = task.encode
    cases = [
        (enc("860") + [E], 1.0),          # right
        (enc("860") + [E, 5, 5], 1.0),    # anything after EOS is ignored
        (enc("861") + [E], 0.0),          # last digit wrong (the planted bug misses this)
        (enc("960") + [E], 0.0),          # first digit wrong
        (enc("86") + [E], 0.0),           # too short
        (enc("8600") + [E], 0.0),         # too long
        (enc("068") + [E], 0.0),          # MSB-first is the wrong format
        (enc("8601"), 0.0),               # no EOS in the budget, extra digit
        ([E], 0.0),                       # empty
        (enc("86+") + [E], 0.0),          # non-digit
    ]
    return [(g, want, reward_fn(g, 23, 45, 2)) for g, want in cases
            if reward_fn(g, 23, 45, 2) != want]


def test_reward_hand_examples():
    assert task.answer_str(23, 45, 2) == "860"
    assert task.answer_str(99, 99, 2) == "891"          # 198, LSB first
    assert task.answer_str(5, 7, 1) == "21"
    assert _hand_reward_failures(task.reward) == []
    ids, mask = task.sft_batch([23], [45], 2)
    assert task.decode(ids[0, 1:].tolist()) == "23+45=860"
    assert mask[0].tolist() == [False] * 7 + [True] * 4


def test_planted_reward_bug_is_caught():
    def ignores_last_digit(gen, a, b, digits):
        return 1.0 if task.decode(gen)[:-1] == task.answer_str(a, b, digits)[:-1] else 0.0

    bad = _hand_reward_failures(ignores_last_digit)
    assert any(task.decode(g) == "861" for g, _, _ in bad)


def test_held_out_split_is_disjoint_and_about_ten_percent():
    rng = np.random.default_rng(0)
    a, b = task.sample_problems(rng, 2000, 3, "train")
    ha, hb = task.sample_problems(rng, 500, 3, "heldout")
    assert not task.held_out(a, b).any() and task.held_out(ha, hb).all()
    allp = np.arange(1000)
    frac = task.held_out(np.repeat(allp, 1000), np.tile(allp, 1000)).mean()
    assert 0.09 < frac < 0.11
    # i.i.d.: every (last digit of a, last digit of b) pattern occurs in the held-out split
    assert len(set(zip(ha % 10, hb % 10))) > 80


# ---- GRPO pieces --------------------------------------------------------------------------
def test_group_advantages_hand_worked():
    # group [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3) = 0.5773502692
    # A = +-0.5 / (0.5773502692 + 1e-4) = +-0.8658753...
    # group [1, 1, 1, 1]: std 0 -> A = 0; group [1, 0, 0, 0]: mean 0.25, std sqrt((0.5625 +
    # 3 * 0.0625) / 3) = 0.5, A = 0.75 / 0.5001 = 1.49970006, -0.25 / 0.5001 = -0.49990002
    r = torch.tensor([1., 0., 0., 1., 1., 1., 1., 1., 1., 0., 0., 0.])
    a = group_advantages(r, 4)
    want = [0.86587533, -0.86587533, -0.86587533, 0.86587533, 0, 0, 0, 0,
            1.49970006, -0.49990002, -0.49990002, -0.49990002]
    np.testing.assert_allclose(a.numpy(), want, rtol=1e-6, atol=1e-7)


def test_completion_mask_and_ppo_loss():
    E = task.EOS
    gen = torch.tensor([[1, 2, E, 3], [E, 1, 1, 1], [1, 1, 1, 1]])
    assert completion_mask(gen).tolist() == [[True, True, True, False], [True, False, False, False],
                                             [True] * 4]
    # ratio 1 everywhere: loss = -mean over sequences of A (token mean of a constant)
    lp = torch.zeros(3, 4)
    adv = torch.tensor([1.0, -2.0, 0.5])
    assert float(ppo_loss(lp, lp, adv, completion_mask(gen), 0.2)) == pytest.approx(0.5 / 3)
    # a ratio of e^1 with A > 0 is clipped at 1.2: the token's term is -1.2 A
    lp1 = torch.tensor([[1.0, 0, 0, 0]])
    got = float(ppo_loss(lp1, torch.zeros(1, 4), torch.tensor([1.0]),
                         torch.tensor([[True, True, False, False]]), 0.2))
    assert got == pytest.approx(-(1.2 + 1.0) / 2)


# ---- smoke ----------------------------------------------------------------------------------
def _finite(v, path=""):
    if isinstance(v, dict):
        for k, x in v.items():
            _finite(x, f"{path}.{k}")
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        assert math.isfinite(v), path
    else:
        assert isinstance(v, str), f"{path}: {v!r} is not a finite number"


def test_cpu_smoke_two_arms(tmp_path):
    from mxkernels.rl.experiment import run_grid

    rep = run_grid(["bf16", "grid-only"], [0], tmp_path, "tiny", jobs=1, progress=False,
                   device="cpu")
    for arm in ("bf16", "grid-only"):
        d = tmp_path / f"{arm}-s0"
        assert json.loads((d / "summary.json").read_text())["status"] == "complete"
        recs = [json.loads(x) for x in (d / "log.jsonl").read_text().splitlines()]
        assert [r["step"] for r in recs] == [0, 2, 4]
        for r in recs[:-1]:
            missing = [f for f in LOG_FIELDS if f not in r]
            assert not missing, (arm, r["step"], missing)
            assert set(MISMATCH_FIELDS) <= set(r["mismatch"])
            assert r["frac_groups_all_equal"] < 1     # the batch carries a gradient
            _finite({k: r[k] for k in LOG_FIELDS})
            assert set(r["grad"]) >= {"all", "L0.q_proj", "L1.down_proj"}
            if arm == "bf16":
                assert r["grad"]["all"]["cos"] == pytest.approx(1.0, abs=1e-9)
                assert r["kl_sampler_bf16"] == pytest.approx(0, abs=1e-6)
        assert "reward_heldout" in recs[-1]
        dec = recs[0]["decomp"]
        assert set(dec) == {"L0.q_proj.act.mxfp4", "L0.q_proj.weight.mxfp4",
                            "L1.down_proj.act.mxfp4", "L1.down_proj.weight.mxfp4"}
        for v in dec.values():
            _finite(v)
            es = v["energy_share"]
            assert es["scale"] + es["dead"] + es["grid"] + es["cross"] == pytest.approx(1.0)
    g = [json.loads(x) for x in (tmp_path / "grid-only-s0/log.jsonl").read_text().splitlines()]
    assert g[0]["kl_sampler_bf16"] > 0 and g[0]["grad"]["all"]["cos"] < 1
    assert (tmp_path / "rl_compare.md").exists() and (tmp_path / "rl_curves.png").exists()
    assert (tmp_path / "rl_decomp.png").exists()
    assert [r["arm"] for r in rep["table"]] == ["bf16", "grid-only"]
    # a complete run is skipped on a second call (resumable grid)
    before = (tmp_path / "bf16-s0/log.jsonl").stat().st_mtime_ns
    run_grid(["bf16"], [0], tmp_path, "tiny", jobs=1, progress=False, device="cpu")
    assert (tmp_path / "bf16-s0/log.jsonl").stat().st_mtime_ns == before
