"""Experiment grids run as parallel processes within a time budget (issue 30 item 4):
--stop-after-seconds, `experiment --jobs / --time-budget / --arms`, the medium scale's plan,
the t intervals and the paired contrasts of compare."""
import json
import math
import subprocess
import threading
import time
from pathlib import Path

import pytest

from mxkernels.training import experiments as ex
from mxkernels.training.compare import ci95, contrasts, t975
from mxkernels.training.errors import TrainingConfigError
from mxkernels.training.trainer import TrainConfig, train

TINY = dict(model="llama-tiny", seq_len=32, batch_size=4, precision="fp32", threads=1,
            eval_tokens=256, progress=False, lr=3e-3)


def _losses(run):
    return [json.loads(line)["loss"] for line in (Path(run) / "log.jsonl").read_text().splitlines()]


def test_stop_after_seconds_leaves_with_a_checkpoint_and_resumes_bit_identically(tmp_path):
    kw = dict(TINY, recipe="mxfp4-fdw", tokens=128 * 4)
    train(TrainConfig(out=str(tmp_path / "ref"), **kw))
    s = train(TrainConfig(out=str(tmp_path / "r"), stop_after_seconds=0, **kw))
    assert s["status"] == "stopped" and s["last_checkpoint_step"] == 1
    assert (tmp_path / "r" / "checkpoints").is_dir()
    s = train(TrainConfig(out=str(tmp_path / "r"), stop_after_seconds=3600, **kw))
    assert s["status"] == "complete" and s["resumed_from_step"] == 1
    assert _losses(tmp_path / "r") == _losses(tmp_path / "ref")


def test_negative_stop_after_seconds_is_a_typed_error(tmp_path):
    with pytest.raises(TrainingConfigError, match="stop_after_seconds"):
        train(TrainConfig(out=str(tmp_path / "x"), stop_after_seconds=-1, tokens=256, **TINY))
    assert not (tmp_path / "x").exists()


def test_cli_args_always_name_the_model_and_the_run_directory():
    from mxkernels.training.trainer import _cli_args

    a = _cli_args(TrainConfig())           # every field at its default
    assert a[a.index("--model") + 1] == "llama-tiny" and a[a.index("--out") + 1] == "runs/run"
    with pytest.raises(TrainingConfigError, match="beta1"):
        _cli_args(TrainConfig(beta1=0.8))  # no option would carry it: refused, not dropped


def test_parallel_grid_runs_what_was_planned_and_a_budget_slices_it(tmp_path):
    """Two arms as two child processes: each run directory holds the planned config, and
    its losses equal an in-process run of the same config bit for bit. A budget that leaves
    nothing after the stop margin stops both after one step; the same call without a budget
    resumes them to the uninterrupted losses."""
    over = dict(tokens=64 * 16 * 3, threads=1)
    arms = ["bf16", "mxfp4-fdw"]
    ref = ex.plan("amd", "tiny", [0], tmp_path / "ref", arms=arms, **over)
    for c in ref:
        c.progress = False
        train(c)
    grid = tmp_path / "grid"
    rep = ex.run_experiment("amd", "tiny", [0], grid, arms=arms, jobs=2, min_start_s=0,
                            time_budget=ex.STOP_MARGIN_S, **over)
    assert rep["arm_status"] == {"bf16-s0": "stopped", "mxfp4-fdw-s0": "stopped"}
    assert ex.exit_code(rep) == 0
    for name in rep["arm_status"]:
        s = json.loads((grid / name / "summary.json").read_text())
        assert s["steps_done"] == 1 and s["last_checkpoint_step"] == 1
    rep = ex.run_experiment("amd", "tiny", [0], grid, arms=arms, jobs=2, **over)
    assert rep["arm_status"] == {"bf16-s0": "complete", "mxfp4-fdw-s0": "complete"}
    for c in ref:
        name = Path(c.out).name
        got = json.loads((grid / name / "config.json").read_text())["identity"]["train"]
        assert got == c.identity()
        assert _losses(grid / name) == _losses(c.out)
    log = (grid / "logs" / "mxfp4-fdw-s0.log").read_text()
    assert log.count("== ") == 2 and "--stop-after-seconds" in log   # both slices logged
    assert [r["a"] for r in rep["contrasts"]] == []   # no second quantized arm to contrast
    exp = json.loads((grid / "experiment.json").read_text())
    assert exp["jobs"] == 2 and exp["arms_run"] == ["bf16-s0", "mxfp4-fdw-s0"]


def test_an_exhausted_budget_starts_nothing_and_says_so(tmp_path):
    with pytest.raises(TrainingConfigError, match="no arm of 'amd' has started"):
        ex.run_experiment("amd", "tiny", [0], tmp_path, arms=["bf16"], jobs=2, time_budget=0)
    arms = json.loads((tmp_path / "experiment.json").read_text())["arms"]
    assert arms[0]["status"] == "not started" and "time budget" in arms[0]["error"]


def test_parallel_slots_never_share_a_gpu(tmp_path, monkeypatch):
    """Six runs on three "GPUs", three at a time: every run holds its slot to the end, so
    no two running at once have the same GPU (a pool that assigns GPU i % n by position
    would put a late run next to a slow one)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    lock, running, seen = threading.Lock(), {}, []

    def fake(cfg, gpu, logdir, deadline, min_start_s, cpu_threads):
        with lock:
            assert gpu not in running.values(), (gpu, running)
            running[cfg.out] = gpu
            seen.append(gpu)
        time.sleep(0.05 if cfg.seed % 2 else 0.2)   # uneven lengths
        with lock:
            del running[cfg.out]
        return {"run": cfg.out, "gpu": gpu, "status": "complete"}

    monkeypatch.setattr(ex, "_run_child", fake)
    cfgs = [TrainConfig(out=str(tmp_path / f"r{i}"), seed=i) for i in range(6)]
    res = ex._run_parallel(cfgs, tmp_path, 3, None, 0)
    assert [r["run"] for r in res] == [c.out for c in cfgs] and sorted(set(seen)) == [0, 1, 2]


def test_arm_subsets_and_the_medium_scale_plan(tmp_path):
    cfgs = ex.plan("amd", "medium", [0, 1], tmp_path,
                   arms=["mxfp4-fdw-h16", "bf16", "mxfp4-fd", "mxfp4-fdw"], validate_every=1000)
    assert [(c.recipe, c.seed) for c in cfgs][:4] == [
        ("bf16", 0), ("mxfp4-fd", 0), ("mxfp4-fdw", 0), ("mxfp4-fdw-h16", 0)]  # grid order
    c = cfgs[0]
    assert (c.model, c.seq_len, c.batch_size) == ("llama-125m", 1024, 32)
    assert c.tokens >= 100_000_000 and c.total_steps * c.tokens_per_step == c.tokens
    assert all(c.cuda_graph for c in cfgs) and cfgs[0].validate_every == 0
    assert c.corpus == "python"     # the stdlib alone was 9.5 epochs of 100M tokens
    ms = {c.recipe: c for c in ex.plan("ms-fp4", "medium", [0], tmp_path)}
    assert ms["ms-fp4"].cuda_graph and not ms["ms-fp4-dge-mean"].cuda_graph  # DGE constant
    with pytest.raises(TrainingConfigError, match="not in the 'amd' grid"):
        ex.plan("amd", "medium", [0], tmp_path, arms=["ms-fp4"])


def test_t_quantiles_and_intervals():
    assert t975(1) == 12.706 and t975(30) == 2.042
    assert abs(t975(31) - 2.0395) < 2e-4 and abs(t975(1000) - 1.9623) < 1e-4
    with pytest.raises(ValueError):
        t975(0)
    c = ci95([1.0, 3.0])
    assert c["mean"] == 2.0 and c["n"] == 2 and math.isclose(c["ci95"], 12.706)
    assert ci95([0.5])["ci95"] is None and ci95([None]) is None
    scipy = pytest.importorskip("scipy.stats")
    for df in (1, 2, 5, 12, 30, 31, 45, 200):
        assert abs(t975(df) - scipy.t.ppf(0.975, df)) < 5e-4


def test_contrasts_pair_per_seed_and_skip_incomplete_runs():
    def row(recipe, seed, val, tail, status="complete"):
        return {"recipe": recipe, "seed": seed, "dL_val": val, "dL_train_tail": tail,
                "status": status}

    report = {"runs": [row("a", 0, 0.30, 0.20), row("b", 0, 0.10, 0.05),
                       row("a", 1, 0.40, 0.30), row("b", 1, 0.10, 0.10),
                       row("a", 2, 9.0, 9.0), row("b", 2, 0.0, 0.0, status="stopped")]}
    (c,) = contrasts(report, [("a", "b", "a's extra loss"), ("a", "missing", "none")])
    assert [d["seed"] for d in c["per_seed"]] == [0, 1]           # seed 2: b incomplete
    assert math.isclose(c["dL_val"]["mean"], 0.25)
    assert math.isclose(c["dL_val"]["ci95"], 12.706 * math.sqrt(0.005) / math.sqrt(2))
    assert math.isclose(c["dL_train_tail"]["mean"], 0.175)


def test_experiment_exit_codes():
    def rep(*st):
        return {"arm_status": {f"r{i}": s for i, s in enumerate(st)}}

    assert ex.exit_code(rep("complete", "stopped", "not started")) == 0
    assert ex.exit_code(rep("complete", "check_failed", "crashed")) == 3
    assert ex.exit_code(rep("complete", "nonfinite_loss")) == 4
    assert ex.exit_code(rep("complete", "killed")) == 1
    assert ex.exit_code(rep("no summary")) == 1


def test_experiment_command_fails_when_an_arm_failed_its_check(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from mxref.cli import main

    def fake(*a, **k):
        return {"runs": [], "by_recipe": [], "arm_status": {"bf16-s0": "complete",
                                                            "mxfp4-fdw-s0": "check_failed"}}

    monkeypatch.setattr(ex, "run_experiment", fake)
    r = CliRunner().invoke(main, ["train", "experiment", "amd", "--out", str(tmp_path)])
    assert r.exit_code == 3 and "mxfp4-fdw-s0 (check_failed)" in r.output


def _fake_run(path, recipe, seed, val, losses, train_tokens=1000):
    """A run directory with eval points ``val`` ([(step, loss)]) and per-step ``losses``."""
    path.mkdir(parents=True)
    cfg = {"recipe": {"name": recipe}, "corpus": {"sha256": "c", "train_tokens": train_tokens},
           "train": {"seed": seed, "model": "m", "seq_len": 1, "batch_size": 1, "tokens": 9}}
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "summary.json").write_text(json.dumps({"status": "complete"}))
    vals = dict(val)
    (path / "log.jsonl").write_text("".join(
        json.dumps({"step": i, "tokens": 100 * (i + 1), "loss": float(x),
                    **({"val_loss": vals[i]} if i in vals else {})}) + "\n"
        for i, x in enumerate(losses)))


def test_compare_reads_dl_at_the_baselines_best_point_and_flags_overfitting(tmp_path):
    """A baseline that memorizes: its validation loss falls to 1.0 at step 4, then rises to
    2.0. The recipe is 0.1 worse at that point and better at the end; the report gives both,
    the contrast pairs them per seed, and the markdown says the baseline overfits."""
    from mxkernels.training.compare import compare_runs, markdown_table

    losses = [3.0 - 0.2 * i for i in range(10)]
    for seed in (0, 1):
        _fake_run(tmp_path / f"b{seed}", "bf16", seed, [(1, 2.0), (4, 1.0), (9, 2.0)], losses)
        _fake_run(tmp_path / f"q{seed}", "mxfp4-fdw", seed,
                  [(1, 2.2), (4, 1.1 + 0.01 * seed), (9, 1.5)], losses)
        _fake_run(tmp_path / f"h{seed}", "mxfp4-fdw-h16", seed,
                  [(1, 2.1), (4, 1.05), (9, 1.6)], losses)
    rep = compare_runs(sorted(tmp_path.iterdir()))
    row = next(r for r in rep["runs"] if r["recipe"] == "mxfp4-fdw" and r["seed"] == 0)
    assert math.isclose(row["dL_val"], -0.5) and math.isclose(row["dL_val_at_bf16_best"], 0.1)
    assert row["bf16_val_best_tokens"] == 500 and math.isclose(row["bf16_val_rise"], 1.0)
    assert math.isclose(row["epochs"], 1.0)                      # 1000 tokens of 1000
    agg = next(a for a in rep["by_recipe"] if a["recipe"] == "mxfp4-fdw")
    assert math.isclose(agg["dL_val_at_bf16_best_mean"], 0.105)
    (c,) = contrasts(rep, [("mxfp4-fdw-h16", "mxfp4-fdw", "H16 - FDW")])
    assert [round(d["dL_val_at_bf16_best"], 6) for d in c["per_seed"]] == [-0.05, -0.06]
    md = markdown_table({**rep, "contrasts": [c]})
    assert "The baseline overfits" in md and "at bf16's best" in md
    assert "-0.0550 ± 0.0635" in md     # mean -0.055, 12.706 x 0.00707 / 1.414


def test_compare_command_adds_a_grids_contrasts(tmp_path):
    from click.testing import CliRunner

    from mxref.cli import main

    losses = [3.0, 2.0, 1.5]
    for seed in (0, 1):
        _fake_run(tmp_path / f"b{seed}", "bf16", seed, [(2, 1.0)], losses)
        _fake_run(tmp_path / f"f{seed}", "mxfp4-fd", seed, [(2, 1.1)], losses)
        _fake_run(tmp_path / f"w{seed}", "mxfp4-fdw", seed, [(2, 1.3)], losses)
    runs = [str(p) for p in sorted(tmp_path.iterdir())]
    r = CliRunner().invoke(main, ["train", "compare", *runs, "--grid", "amd", "--json",
                                  "--out", str(tmp_path / "cmp")])
    assert r.exit_code == 0, r.output
    (c,) = json.loads(r.output)["contrasts"]
    assert (c["a"], c["b"]) == ("mxfp4-fdw", "mxfp4-fd")
    assert math.isclose(c["dL_val"]["mean"], 0.2) and c["dL_val"]["n"] == 2
    r = CliRunner().invoke(main, ["train", "compare", *runs, "--grid", "nope"])
    assert r.exit_code == 2 and "unknown grid 'nope'" in r.output


def test_python_corpus_is_the_stdlib_then_each_site_directory(tmp_path, monkeypatch):
    from mxkernels.training import data

    std, site = tmp_path / "std", tmp_path / "site"
    (std / "site-packages" / "x").mkdir(parents=True)
    (std / "site-packages" / "x" / "dup.py").write_text("never twice")  # pruned under stdlib
    (std / "os.py").write_text("import sys\n")
    (site / "pkg" / "__pycache__").mkdir(parents=True)
    (site / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (site / "pkg" / "__pycache__" / "mod.py").write_text("stale")
    (site / "pkg" / "data.txt").write_text("not python")
    monkeypatch.setattr(data, "stdlib_root", lambda: std)
    monkeypatch.setattr(data, "site_roots", lambda: [std / "site-packages", site])
    c = data.load_corpus("python", val_fraction=0.01)
    text = bytes(c.train.tolist()) + bytes(c.val.tolist())
    assert c.source == "python" and c.n_documents == 3
    assert text.count(b"never twice") == 1 and b"stale" not in text and b"not python" not in text
    assert text.index(b"import sys") < text.index(b"never twice") < text.index(b"def f()")
    assert c.info["site_roots"] == [str(std / "site-packages"), str(site)]
    assert data.load_corpus("stdlib", val_fraction=0.01).n_documents == 1


def _records(run):
    out = []
    for line in (Path(run) / "checks.jsonl").read_text().splitlines():
        d = json.loads(line)
        d.pop("check_time_s")
        out.append(d)
    return out


def test_background_checks_write_the_same_records_and_change_no_bit(tmp_path, monkeypatch):
    """The background-thread checks (automatic on a one-process CUDA run, forced here) give
    the records of the inline ones, in order, and the same losses bit for bit."""
    from mxkernels.training import trainer

    kw = dict(TINY, recipe="mxfp4-fdw-rht", tokens=64 * 4, seq_len=32, batch_size=2,
              validate_every=2, decompose=True, ckpt_every=3)
    monkeypatch.setattr(trainer, "ASYNC_CHECKS", False)
    train(TrainConfig(out=str(tmp_path / "inline"), **kw))
    monkeypatch.setattr(trainer, "ASYNC_CHECKS", True)
    s = train(TrainConfig(out=str(tmp_path / "bg"), **kw))
    assert s["status"] == "complete"
    got = _records(tmp_path / "bg")
    assert got == _records(tmp_path / "inline") and {d["step"] for d in got} == {0, 2}
    assert (tmp_path / "bg" / "decomp.jsonl").read_text() == \
        (tmp_path / "inline" / "decomp.jsonl").read_text()
    assert _losses(tmp_path / "bg") == _losses(tmp_path / "inline")


def test_a_failed_background_check_stops_the_run_before_any_later_checkpoint(tmp_path,
                                                                             monkeypatch):
    """A planted failure in the second check (step 2), slow enough that the loop goes on to
    step 3: the checkpoint due after step 3 waits for the check, so the run stops there with
    check_failed, its records written and no checkpoint taken after the failed step."""
    from mxkernels.training import trainer, validate

    calls = []

    def planted(layer, **kw):
        calls.append(layer.name)
        bad = len(calls) == 2
        if bad:
            time.sleep(1.0)
        return [validate.CheckRecord(layer.name, "fprop", "x", "mxfp4", "ocp", 64,
                                     5 if bad else 0, not bad, "planted" if bad else "ok")]

    monkeypatch.setattr(validate, "check_capture", planted)
    monkeypatch.setattr(trainer, "ASYNC_CHECKS", True)
    run = tmp_path / "bg"
    with pytest.raises(trainer.TrainingCheckError, match="step 2"):
        train(TrainConfig(out=str(run), **{**TINY, "recipe": "mxfp4-f", "tokens": 64 * 8,
                                           "seq_len": 32, "batch_size": 2, "ckpt_every": 4,
                                           "validate_every": 2}))
    recs = _records(run)
    assert [(d["step"], d["ok"]) for d in recs] == [(0, True), (2, False)]
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "check_failed" and s["last_checkpoint_step"] is None
    assert [json.loads(x)["step"] for x in (run / "log.jsonl").read_text().splitlines()] == \
        [0, 1, 2, 3]                   # steps 3 ran while the check of step 2 did
    assert not list((run / "checkpoints").glob("step*"))


def test_a_call_that_runs_one_arm_still_compares_the_whole_grid(tmp_path):
    """The first call runs bf16 and FD; a second call adds FDW only. Its report (and
    compare.md) pairs all three, with the FDW - FD contrast; a stray directory is ignored."""
    over = dict(tokens=64 * 16 * 2, threads=1)
    ex.run_experiment("amd", "tiny", [0], tmp_path, arms=["bf16", "mxfp4-fd"], progress=False,
                      **over)
    (tmp_path / "notes-s0").mkdir()
    rep = ex.run_experiment("amd", "tiny", [0], tmp_path, arms=["mxfp4-fdw"], progress=False,
                            **over)
    assert rep["arm_status"] == {"bf16-s0": "complete", "mxfp4-fd-s0": "complete",
                                 "mxfp4-fdw-s0": "complete"}
    assert sorted(r["recipe"] for r in rep["runs"]) == ["mxfp4-fd", "mxfp4-fdw"]
    assert [(c["a"], c["b"]) for c in rep["contrasts"]] == [("mxfp4-fdw", "mxfp4-fd")]
    assert "| mxfp4-fdw - mxfp4-fd |" in (tmp_path / "compare.md").read_text()
    assert [p.name for p in ex.grid_runs("amd", tmp_path)] == ["bf16-s0", "mxfp4-fd-s0",
                                                               "mxfp4-fdw-s0"]


def test_the_rl_grid_holds_one_gpu_per_run_too(tmp_path, monkeypatch):
    """mxref train rl --jobs used GPU i % n by position; it now takes the same slots."""
    import torch

    from mxkernels.rl import experiment as rl

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    lock, running, seen = threading.Lock(), {}, []

    def fake(cfg, mode, gpu, logdir):
        key = (mode, cfg.out)
        with lock:
            assert gpu not in running.values(), (gpu, running)
            running[key] = gpu
            seen.append(gpu)
        slow = mode == "run" and Path(cfg.out).name == "bf16-s0"
        time.sleep(0.3 if slow else 0.02)         # the first run is the slow one
        with lock:
            del running[key]
        return 0

    monkeypatch.setattr(rl, "_subprocess", fake)
    monkeypatch.setattr(rl, "compare", lambda out: {"ok": True})
    cfgs = rl.configs(["bf16", "mxfp4"], [0, 1], tmp_path, "tiny")
    monkeypatch.setattr(rl, "c_dev", lambda cfgs: "cuda")
    rep = rl.run_grid(["bf16", "mxfp4"], [0, 1], tmp_path, "tiny", jobs=2)
    assert rep == {"ok": True} and len(seen) == 2 + len(cfgs) and set(seen) == {0, 1}


def test_a_run_longer_than_its_corpus_says_how_many_epochs(tmp_path, capsys):
    text = tmp_path / "c.txt"
    text.write_bytes(b"abcdefgh" * 400)          # 3,136 training bytes, the last 2% val
    run = tmp_path / "r"
    train(TrainConfig(out=str(run), corpus=str(text), **{**TINY, "tokens": 128 * 60}))
    err = capsys.readouterr().err
    assert "7,680 tokens are 2.5 epochs of this corpus (3,136 training tokens)" in err
    ep = json.loads((run / "config.json").read_text())["epochs"]
    assert ep == pytest.approx(60 * 4 / (3135 // 32), 1e-9)   # samples over windows


def test_host_side_mxref_kernels_and_the_check_share_one_lock(tmp_path, monkeypatch):
    """numba's workqueue layer aborts the process when two threads launch parallel kernels
    at once: the background check holds quant.HOST_NUMBA, and so does the training path's
    host-side SR words (the torch backend's mxref.random_bits)."""
    import importlib

    import torch

    from mxkernels.training import quant, trainer, validate

    mq = importlib.import_module("mxref.quantize")   # mxref.quantize is also a function
    seen = []
    real = mq.random_bits

    def spy_bits(*a, **k):
        seen.append(("bits", quant.HOST_NUMBA.locked()))
        return real(*a, **k)

    def spy_check(layer, **kw):
        seen.append(("check", quant.HOST_NUMBA.locked()))
        return []

    monkeypatch.setattr(mq, "random_bits", spy_bits)
    monkeypatch.setattr(validate, "check_capture", spy_check)
    assert quant.sr_bits((4, 32), 7, "cpu").shape == (4, 32)
    trainer._run_check(("l", torch.nn.Linear(1, 1)), 0, False, False)
    assert seen == [("bits", True), ("check", True)] and not quant.HOST_NUMBA.locked()


def test_a_child_runs_on_the_gpu_its_slot_names_under_a_parents_visible_devices(
        tmp_path, monkeypatch):
    """Slot k is the parent's k-th visible GPU: under CUDA_VISIBLE_DEVICES=2,3 the child of
    slot 1 must see GPU 3 (it was told "1": another grid's GPU)."""
    from mxkernels.rl import experiment as rl
    from mxkernels.training.slots import child_visible_devices as cvd

    assert cvd(1, {}) == "1" and cvd(0, {"CUDA_VISIBLE_DEVICES": ""}) == "0"
    assert cvd(1, {"CUDA_VISIBLE_DEVICES": "2,3"}) == "3"
    assert cvd(0, {"CUDA_VISIBLE_DEVICES": " GPU-ab12 , GPU-cd"}) == "GPU-ab12"
    with pytest.raises(ValueError, match="slot 2"):
        cvd(2, {"CUDA_VISIBLE_DEVICES": "2,3"})
    seen = []

    def fake_run(cmd, env, **kw):
        seen.append(env["CUDA_VISIBLE_DEVICES"])
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setattr(ex.subprocess, "run", fake_run)
    ex._run_child(TrainConfig(out=str(tmp_path / "r")), 1, tmp_path, None, 0, 1)
    monkeypatch.setattr(rl.subprocess, "call", lambda cmd, env, **kw: seen.append(
        env["CUDA_VISIBLE_DEVICES"]) or 0)
    rl._subprocess(rl.RLConfig(arm="bf16", seed=0, out=str(tmp_path / "q")), "run", 0, tmp_path)
    assert seen == ["3", "2"]
