"""`mxref train compare` on fabricated run directories whose answers are known by hand."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from mxkernels.training import compare as C
from mxkernels.training.errors import RunDirError


def _run(root, name, recipe, losses, seed=0, val=None):
    d = root / name
    d.mkdir(parents=True)
    cfg = {"schema": "mxref-train-config/1", "recipe": {"name": recipe},
           "corpus": {"sha256": "abc"},
           "train": {"seed": seed, "model": "llama-tiny", "seq_len": 10, "batch_size": 10,
                     "tokens": 100 * len(losses)}}
    (d / "config.json").write_text(json.dumps(cfg))
    lines = []
    for s, x in enumerate(losses):
        rec = {"step": s, "tokens": 100 * (s + 1), "loss": float(x)}
        if val is not None and s == len(losses) - 1:
            rec["val_loss"] = val
        lines.append(json.dumps(rec))
    lines.append("{cut by kill -9")
    (d / "log.jsonl").write_text("\n".join(lines) + "\n")
    (d / "summary.json").write_text(json.dumps({"status": "complete", "median_step_time_s": 2.0
                                                if recipe != "bf16" else 1.0}))
    return d


@pytest.fixture
def runs(tmp_path):
    s = np.arange(100)
    base = 4 - 0.01 * s  # 100 steps of 100 tokens; EMA horizon 5 steps (alpha 0.8, lag 4)
    return {
        "bf16": _run(tmp_path, "bf16-s0", "bf16", base, val=3.0),
        "worse": _run(tmp_path, "worse-s0", "mxfp4-fdw", base + 0.045, val=3.07),
        "faster": _run(tmp_path, "faster-s0", "mxfp4-f", 4 - 0.0126 * s, val=2.9),
        "other_seed": _run(tmp_path, "x-s1", "mxfp4-fdw", base, seed=1),
    }


def test_ema_is_bias_corrected_and_shift_equivariant():
    assert np.allclose(C.ema(np.full(7, 3.0), 0.8), 3.0)
    x = np.random.default_rng(0).normal(size=50)
    assert np.allclose(C.ema(x + 0.25, 0.9) - C.ema(x, 0.9), 0.25)


def test_dl_extra_tokens_and_pairing(runs):
    rep = C.compare_runs([str(p) for p in runs.values()])
    rows = {r["name"]: r for r in rep["runs"]}
    assert rep["unpaired"] == [str(runs["other_seed"])]  # seed 1 has no bf16 partner
    w = rows["worse-s0"]
    assert w["dL_train_tail"] == pytest.approx(0.045)
    assert w["dL_train_ema"] == pytest.approx(0.045)
    assert w["dL_val"] == pytest.approx(0.07)
    assert w["extra_tokens_frac"] is None and not w["reached_bf16_loss"]
    # bf16's EMA is 0.045 above its final value 4.5 steps before the end: first at or below
    # it at step 95 (0.04 above), i.e. 9,600 tokens; the run used 10,000
    assert w["extra_tokens_frac_iso"] == pytest.approx(10_000 / 9_600 - 1)
    assert w["step_time_ratio"] == pytest.approx(2.0)
    f = rows["faster-s0"]
    # target = bf16 EMA at the end = 4 - 0.01 * (99 - 4) = 3.05; the run's EMA
    # 4 - 0.0126 * (i - 4) first gets there at i = 80 -> 8,100 tokens of 10,000
    assert f["extra_tokens_frac"] == pytest.approx(8_100 / 10_000 - 1)
    assert f["reached_bf16_loss_at_tokens"] == 8_100
    agg = {a["recipe"]: a for a in rep["by_recipe"]}
    assert agg["mxfp4-fdw"]["seeds"] == [0] and agg["mxfp4-fdw"]["dL_val_mean"] == pytest.approx(0.07)


def test_cli_compare_writes_json_md_png(runs, tmp_path):
    from mxkernels.training.cli import train_group

    out = tmp_path / "cmp"
    r = CliRunner().invoke(train_group, ["compare", str(runs["bf16"]), str(runs["worse"]),
                                         "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema"] == "mxref-train-compare/1" and len(doc["runs"]) == 1
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"
    assert "mxfp4-fdw" in (out / "compare.md").read_text()
    assert json.loads((out / "compare.json").read_text())["runs"][0]["recipe"] == "mxfp4-fdw"


def test_compare_refuses_non_runs_and_missing_baseline(runs, tmp_path):
    from mxkernels.training.cli import train_group

    with pytest.raises(RunDirError):
        C.compare_runs([str(tmp_path)])
    r = CliRunner().invoke(train_group, ["compare", str(runs["worse"])])
    assert r.exit_code == 2 and "no bf16 run" in r.output


def test_phase_means_by_hand():
    d = np.arange(20, dtype=float)          # phases of 20 steps: [0,2) [2,5) [5,10) [10,20)
    ph = C.phase_means(d)
    assert [(p["from_step"], p["to_step"]) for p in ph] == [(0, 2), (2, 5), (5, 10), (10, 20)]
    assert [p["dL"] for p in ph] == [0.5, 3.0, 7.0, 14.5]
    assert [(p["from_step"], p["to_step"]) for p in C.phase_means(np.ones(5))] == \
        [(0, 1), (1, 2), (2, 5)]              # an empty phase ([0, 0)) is left out
    assert C.phase_means(np.zeros(0)) == []


def test_phases_show_an_early_lead_that_ends_level(tmp_path):
    """A run 0.3 below bf16 over its first 10 of 100 steps, then level: the phases say so, the
    tail does not; two seeds average per phase."""
    base = 4 - 0.01 * np.arange(100)
    lead = base.copy()
    lead[:10] -= 0.3
    lead1 = base.copy()
    lead1[:10] -= 0.1
    paths = [_run(tmp_path, "bf16-s0", "bf16", base), _run(tmp_path, "ms-s0", "ms-fp4", lead),
             _run(tmp_path, "bf16-s1", "bf16", base, seed=1),
             _run(tmp_path, "ms-s1", "ms-fp4", lead1, seed=1)]
    rep = C.compare_runs([str(p) for p in paths])
    row = next(r for r in rep["runs"] if r["name"] == "ms-s0")
    assert [p["dL"] for p in row["dL_train_phases"]] == pytest.approx([-0.3, 0, 0, 0])
    assert row["dL_train_tail"] == pytest.approx(0.0)
    agg = rep["by_recipe"][0]["dL_train_phases_mean"]
    assert [p["dL"] for p in agg] == pytest.approx([-0.2, 0, 0, 0])
    md = C.markdown_table(rep)
    assert "| ms-fp4 | -0.200 | +0.000 | +0.000 | +0.000 |" in md
    assert "0-10% | 10-25% | 25-50% | 50-100%" in md


def _run_vals(root, name, recipe, n, val_of, seed, complete=True):
    """A run of ``n`` steps (loss 4 everywhere) with a validation point every 10 steps whose
    value is ``val_of(step)``; no summary.json when not complete (a run stopped early)."""
    d = root / name
    d.mkdir(parents=True)
    cfg = {"recipe": {"name": recipe}, "corpus": {"sha256": "abc"},
           "train": {"seed": seed, "model": "llama-tiny", "seq_len": 10, "batch_size": 10,
                     "tokens": 100 * 60}}
    (d / "config.json").write_text(json.dumps(cfg))
    lines = []
    for s in range(n):
        rec = {"step": s, "tokens": 100 * (s + 1), "loss": 4.0 + val_of(s) - val_of(0)}
        if s % 10 == 9:
            rec["val_loss"] = val_of(s)
        lines.append(json.dumps(rec))
    (d / "log.jsonl").write_text("\n".join(lines) + "\n")
    if complete:
        (d / "summary.json").write_text(json.dumps({"status": "complete"}))
    return str(d)


def test_at_step_compares_runs_where_all_of_them_stood(tmp_path):
    """Seed 1's two arms stopped at step 45 of 60. Cut at step 39, every run counts and the
    contrast of the two arms has both seeds (by hand: a - b = 0.02 at step 39 in each seed,
    because a's val is bf16's + 0.03 and b's + 0.01). Without the cut, seed 1 is left out of
    the contrast (its arms are not complete) and a's final dL val is seed 0's alone."""
    bf = lambda s: 3.0 - 0.01 * s
    paths = []
    for seed in (0, 1):
        n = 60 if seed == 0 else 46
        paths += [_run_vals(tmp_path, f"bf16-s{seed}", "bf16", 60, bf, seed),
                  _run_vals(tmp_path, f"a-s{seed}", "a", n, lambda s: bf(s) + 0.03, seed,
                            complete=seed == 0),
                  _run_vals(tmp_path, f"b-s{seed}", "b", n, lambda s: bf(s) + 0.01 * (s < 40)
                            + 0.5 * (s >= 40), seed, complete=seed == 0)]
    pairs = [("a", "b", "a against b")]
    cut = C.compare_runs(paths, at_step=39)
    con = C.contrasts(cut, pairs)[0]
    assert [d["seed"] for d in con["per_seed"]] == [0, 1]
    assert [d["dL_val"] for d in con["per_seed"]] == pytest.approx([0.02, 0.02])
    assert con["dL_val"]["mean"] == pytest.approx(0.02)
    rows = {r["name"]: r for r in cut["runs"]}
    assert rows["a-s1"]["dL_val"] == pytest.approx(0.03) and rows["a-s1"]["reached_at_step"]
    assert cut["at_step"] == 39
    assert {a["recipe"]: a["statuses"] for a in cut["by_recipe"]}["a"] == ["reached step 39"]
    assert "cut after step 39" in C.markdown_table(cut)
    # not cut: the stopped arms are not complete, so the contrast has seed 0 only, whose b
    # ended 0.5 above bf16 (its late jump): a - b = 0.03 - 0.5
    full = C.compare_runs(paths)
    con = C.contrasts(full, pairs)[0]
    assert [d["seed"] for d in con["per_seed"]] == [0]
    assert con["dL_val"]["mean"] == pytest.approx(-0.47)
    # a cut no run of seed 1 reached (step 50): seed 1 leaves the contrast again
    late = C.compare_runs(paths, at_step=50)
    assert [d["seed"] for d in C.contrasts(late, pairs)[0]["per_seed"]] == [0]
    assert {a["recipe"]: a["statuses"] for a in late["by_recipe"]}["a"] == [
        "reached step 50", "stopped before step 50"]


def test_cli_at_step(tmp_path):
    from mxkernels.training.cli import train_group
    bf = lambda s: 3.0 - 0.01 * s
    paths = [_run_vals(tmp_path, "bf16-s0", "bf16", 60, bf, 0),
             _run_vals(tmp_path, "a-s0", "a", 46, lambda s: bf(s) + 0.03, 0, complete=False)]
    res = CliRunner().invoke(train_group, ["compare", *paths, "--at-step", "39", "--json",
                                           "-o", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["at_step"] == 39 and doc["runs"][0]["dL_val"] == pytest.approx(0.03)
    res = CliRunner().invoke(train_group, ["compare", *paths, "--at-step", "-1"])
    assert res.exit_code == 2 and "-1" in res.output
