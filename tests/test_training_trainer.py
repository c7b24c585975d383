"""The training loop: loss goes down, run directory, kill -9 + resume is bit-identical,
refusals (run dir, checkpoint, options), NaN stop, failed in-run check stop, DDP on gloo.

Everything runs on CPU in fp32 with one thread (bit-identical replays need a fixed thread
count), on llama-tiny with 4-8 sequences of 32-64 tokens: seconds per run.
"""
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mxkernels.training import checkpoint as ckpt
from mxkernels.training.trainer import TrainConfig, train
from mxkernels.training.errors import (CheckpointError, RunDirError,
                                       TrainingCheckError, TrainingConfigError,
                                       UnknownModelError, UnknownRecipeError)

REPO = Path(__file__).resolve().parents[1]
TINY = dict(model="llama-tiny", seq_len=32, batch_size=4, precision="fp32", threads=1,
            eval_tokens=256, progress=False, lr=3e-3)


def _cfg(out, **kw):
    return TrainConfig(out=str(out), **{**TINY, **kw})


def _losses(run):
    return [json.loads(line)["loss"] for line in (Path(run) / "log.jsonl").read_text().splitlines()]


def _env():
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    return env


def _cli(*args):
    return [sys.executable, "-m", "mxref.cli", "train", *args]


def _cli_args(out, steps, **extra):
    a = ["--model", "llama-tiny", "--seq-len", "32", "--batch-size", "4", "--precision", "fp32",
         "--threads", "1", "--eval-tokens", "256", "--lr", "0.003", "--no-progress",
         "--tokens", str(128 * steps), "--out", str(out)]
    for k, v in extra.items():
        a += [f"--{k.replace('_', '-')}", str(v)]
    return a


def test_tiny_model_learns_and_writes_the_run_directory(tmp_path):
    t0 = time.perf_counter()
    s = train(_cfg(tmp_path / "r", tokens=128 * 40, eval_every=20, seq_len=32, batch_size=4))
    losses = _losses(tmp_path / "r")
    assert len(losses) == 40
    # at init the model predicts ~uniformly over 256 bytes: loss ~ ln 256 = 5.545
    assert abs(losses[0] - math.log(256)) < 0.3
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0
    assert s["status"] == "complete" and s["final_val_loss"] < losses[0] - 1.0
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())
    assert cfg["corpus"]["sha256"] and cfg["recipe"]["name"] == "bf16"
    assert cfg["env"]["torch"] == torch.__version__ and "git_commit" in cfg["env"]
    assert cfg["model"]["params"]["non_embedding"] == 426_624
    rec = json.loads((tmp_path / "r" / "log.jsonl").read_text().splitlines()[19])
    assert {"step", "tokens", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s",
            "val_loss"} <= set(rec)
    assert rec["tokens"] == 20 * 128
    assert (tmp_path / "r" / "checkpoints" / "step_00000040" / "model.safetensors").exists()
    assert time.perf_counter() - t0 < 120


def test_quantization_is_timed_on_every_nth_step_only(tmp_path):
    """quant_time_every=3: the timer (CUDA events around each quantize op on a GPU; host work
    of its own) runs on steps 0, 3, 6 only, and those steps stay out of the median step time;
    the trajectory does not depend on it (quant_time_every is not part of the run identity)."""
    s = train(_cfg(tmp_path / "r", recipe="mxfp4-fdw", tokens=128 * 7, quant_time_every=3))
    recs = [json.loads(x) for x in (tmp_path / "r" / "log.jsonl").read_text().splitlines()]
    timed = [r["step"] for r in recs if "quant_share" in r]
    assert timed == [0, 3, 6]
    assert all(0 < r["quant_share"] <= 1 for r in recs if "quant_share" in r)
    untimed = sorted(r["step_time_s"] for r in recs if r["step"] not in (0, 3, 6))
    assert s["median_step_time_s"] == pytest.approx(
        (untimed[1] + untimed[2]) / 2, rel=1e-3, abs=2e-6)       # median of steps 1 2 4 5
    assert s["median_quant_share"] == pytest.approx(
        sorted(r["quant_share"] for r in recs if r["step"] in (3, 6))[0] / 2 +
        sorted(r["quant_share"] for r in recs if r["step"] in (3, 6))[1] / 2)
    s0 = train(_cfg(tmp_path / "r0", recipe="mxfp4-fdw", tokens=128 * 7, quant_time_every=0))
    recs0 = [json.loads(x) for x in (tmp_path / "r0" / "log.jsonl").read_text().splitlines()]
    assert not any("quant_share" in r for r in recs0) and s0["median_quant_share"] is None
    assert [r["loss"] for r in recs0] == [r["loss"] for r in recs]


def test_kill_9_then_resume_reproduces_the_uninterrupted_losses_bit_for_bit(tmp_path):
    steps = 16
    ref = tmp_path / "ref"
    train(_cfg(ref, tokens=128 * steps))
    run = tmp_path / "killed"
    p = subprocess.Popen(_cli(*_cli_args(run, steps, ckpt_every=4)), env=_env(), cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log = run / "log.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and p.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= 6:
            break
        time.sleep(0.05)
    assert p.poll() is None, f"finished before the kill: {p.stderr.read().decode()[-2000:]}"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    killed_at = len(log.read_text().splitlines())
    assert killed_at < steps
    # resume in this process (same config as the CLI arguments above, so same fingerprint)
    train(_cfg(run, tokens=128 * steps, ckpt_every=4))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["resumed_from_step"] in (4, 8, 12)
    assert _losses(run) == _losses(ref)  # exact float equality, every step


def test_stop_and_resume_with_stochastic_rounding_is_bit_identical(tmp_path):
    # the SR streams and random signs are seeded by (recipe seed, layer, step): a resumed run
    # must draw the same bits. 3 quantized steps each way (mxfp4-fdw-sr, 2 layers).
    kw = dict(recipe="mxfp4-fdw-sr", tokens=64 * 3, seq_len=32, batch_size=2)
    train(_cfg(tmp_path / "a", **kw))
    s = train(_cfg(tmp_path / "b", stop_after=1, **kw))
    assert s["status"] == "stopped" and s["last_checkpoint_step"] == 1
    s = train(_cfg(tmp_path / "b", **kw))
    assert s["status"] == "complete" and s["resumed_from_step"] == 1
    assert _losses(tmp_path / "b") == _losses(tmp_path / "a")


def test_in_run_checks_change_no_bit_and_do_not_split_a_run(tmp_path):
    """validate_every is not part of a run's identity: a run checked every step has the
    losses of the unchecked run bit for bit (SR and random signs included), and a run stopped
    without checks resumes with them, as a grid slice reusing a complete arm does."""
    kw = dict(recipe="mxfp4-fdw-rht", tokens=64 * 3, seq_len=32, batch_size=2)
    train(_cfg(tmp_path / "plain", **kw))
    s = train(_cfg(tmp_path / "checked", validate_every=1, decompose=True, **kw))
    assert s["status"] == "complete"
    checks = (tmp_path / "checked" / "checks.jsonl").read_text().splitlines()
    assert len({json.loads(c)["step"] for c in checks}) == 3
    # --decompose: one record per quantized operand of each checked layer (6 for FDW)
    dec = [json.loads(x) for x in (tmp_path / "checked" / "decomp.jsonl").read_text().splitlines()]
    assert [d["step"] for d in dec] == [0] * 6 + [1] * 6 + [2] * 6
    assert all(d["plain"]["error_to_signal"] > 0 for d in dec)
    repro = json.loads((tmp_path / "checked" / "config.json").read_text())["reproduce"]
    assert "--decompose --" in repro + " --" and "--decompose True" not in repro
    from mxkernels.training.compare import compare_runs, markdown_table
    rep = compare_runs([tmp_path / "plain", tmp_path / "checked"])
    (dec_sum,) = rep["decomposition"]
    assert [r["step"] for r in dec_sum["by_step"]] == [0, 1, 2]
    assert all(r["operands"] == 6 and r["recipe_error_to_signal"] > 0 for r in dec_sum["by_step"])
    assert "| mxfp4-fdw-rht | 2 | 6 |" in markdown_table(rep)
    assert _losses(tmp_path / "checked") == _losses(tmp_path / "plain")
    train(_cfg(tmp_path / "split", stop_after=1, **kw))
    s = train(_cfg(tmp_path / "split", validate_every=2, **kw))
    assert s["status"] == "complete" and s["resumed_from_step"] == 1
    assert _losses(tmp_path / "split") == _losses(tmp_path / "plain")
    # an old run dir that still records validate_every in its identity is the same run
    cfg = json.loads((tmp_path / "plain" / "config.json").read_text())
    cfg["identity"]["train"]["validate_every"] = 200
    (tmp_path / "plain" / "config.json").write_text(json.dumps(cfg))
    assert train(_cfg(tmp_path / "plain", **kw))["status"] == "complete"
    with pytest.raises(RunDirError, match="seed"):
        train(_cfg(tmp_path / "plain", **{**kw, "seed": 3}))


def test_existing_directories_are_never_overwritten(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    with pytest.raises(RunDirError, match="not a run directory"):
        train(_cfg(mine, tokens=256))
    assert (mine / "notes.txt").read_text() == "precious" and len(list(mine.iterdir())) == 1
    run = tmp_path / "run"
    train(_cfg(run, tokens=256))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with pytest.raises(RunDirError, match="seed"):
        train(_cfg(run, tokens=256, seed=1))
    with pytest.raises(RunDirError, match="model"):
        train(_cfg(run, tokens=256, model="qwen3-tiny"))
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    # the same config again: complete, nothing retrained
    assert train(_cfg(run, tokens=256))["status"] == "complete"


def test_corrupt_or_foreign_checkpoints_are_refused(tmp_path):
    from mxkernels.training.models import build_model
    from mxkernels.training.trainer import make_optimizer

    run = tmp_path / "run"
    train(_cfg(run, tokens=128 * 4, stop_after=2))
    last = ckpt.latest_checkpoint(run / "checkpoints")
    fp = json.loads((run / "config.json").read_text())["fingerprint"]
    # a model of another size does not load
    other = build_model("llama-30m", 256, seed=0)
    with pytest.raises(CheckpointError, match="does not fit"):
        ckpt.load_checkpoint(last, other, make_optimizer(other, _cfg(run)), None, "cpu")
    m = build_model("llama-tiny", 256, seed=0)
    with pytest.raises(CheckpointError, match="different configuration"):
        ckpt.load_checkpoint(last, m, make_optimizer(m, _cfg(run)), "0" * 64, "cpu")
    ckpt.load_checkpoint(last, m, make_optimizer(m, _cfg(run)), fp, "cpu")  # the right one loads
    # flip one byte of the weights: the resume refuses instead of training on garbage
    w = last / "model.safetensors"
    data = bytearray(w.read_bytes())
    data[-3] ^= 0xFF
    w.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt"):
        train(_cfg(run, tokens=128 * 4))
    (run / "checkpoints" / "latest.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt"):
        train(_cfg(run, tokens=128 * 4))


def test_nan_loss_stops_cleanly_and_keeps_the_last_good_checkpoint(tmp_path):
    run = tmp_path / "nan"
    r = _invoke(*_cli_args(run, 8, ckpt_every=3, debug_nan_at_step=5))
    assert r.exit_code == 4, r.output
    assert "step 5" in r.output and "step 3" in r.output
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "nonfinite_loss" and s["last_checkpoint_step"] == 3
    assert ckpt.latest_checkpoint(run / "checkpoints").name == "step_00000003"
    ckpt.read_checkpoint_state(ckpt.latest_checkpoint(run / "checkpoints"))  # intact
    lines = (run / "log.jsonl").read_text().splitlines()
    assert len(lines) == 6 and json.loads(lines[-1])["loss"] == "nan"


def test_failed_in_run_check_stops_with_a_typed_error(tmp_path, monkeypatch):
    # plant a failing check record (the checker itself is tested in test_training_mxlinear /
    # validate); the trainer must log it, stop, keep the checkpoint and say which layer
    from mxkernels.training import validate
    calls = []

    def planted(layer, **kw):
        calls.append(layer.name)
        assert layer._capture_done is not None  # the trainer armed it before forward/backward
        bad = len(calls) == 2
        return [validate.CheckRecord(layer.name, "fprop", "x", "mxfp4", "ocp", 64,
                                     7 if bad else 0, not bad, "planted" if bad else "ok")]

    monkeypatch.setattr(validate, "check_capture", planted)
    run = tmp_path / "chk"
    with pytest.raises(TrainingCheckError, match="step 1, layer model.layers.0.self_attn.k_proj"):
        train(_cfg(run, recipe="mxfp4-f", tokens=128 * 3, ckpt_every=1, validate_every=1,
                   seq_len=32, batch_size=2))
    checks = [json.loads(x) for x in (run / "checks.jsonl").read_text().splitlines()]
    assert any(not c["ok"] and c["mismatches"] == 7 for c in checks)
    assert all(c["ok"] for c in checks if c["step"] == 0)
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "check_failed" and s["last_checkpoint_step"] == 1


@pytest.mark.parametrize("kw,err,needle", [
    (dict(model="llama-7b"), UnknownModelError, "llama-7b"),
    (dict(recipe="mxfp3"), UnknownRecipeError, "mxfp3"),
    (dict(validate_every=5), TrainingConfigError, "quantized recipe"),
    (dict(recipe="mxfp4-f", decompose=True), TrainingConfigError, "needs --validate-every"),
    (dict(batch_size=6, grad_accum=4), TrainingConfigError, "divisible"),
    (dict(tokens=10), TrainingConfigError, "less than one step"),
    (dict(quant_time_every=-1), TrainingConfigError, "quant_time_every"),
])
def test_bad_options_are_typed_errors(tmp_path, kw, err, needle):
    with pytest.raises(err, match=needle):
        train(_cfg(tmp_path / "x", **{"tokens": 256, **kw}))
    assert not (tmp_path / "x").exists()


def _invoke(*args):
    from click.testing import CliRunner

    from mxref.cli import main
    return CliRunner().invoke(main, ["train", *args])


def test_cli_exit_codes_for_bad_input(tmp_path):
    r = _invoke(*_cli_args(tmp_path / "x", 2), "--recipe", "nope")
    assert r.exit_code == 2 and "unknown recipe 'nope'" in r.output
    r = _invoke(*_cli_args(tmp_path / "x", 2), "--model", "gpt-5")
    assert r.exit_code == 2 and "unknown model 'gpt-5'" in r.output
    r = _invoke("--tokens", "100")
    assert r.exit_code == 2 and "--model and --out are required" in r.output
    r = _invoke("experiment", "nope", "--out", str(tmp_path / "e"))
    assert r.exit_code == 2 and "unknown experiment" in r.output


def test_mxref_help_does_not_import_torch():
    code = ("import sys; from click.testing import CliRunner; from mxref.cli import main; "
            "r = CliRunner().invoke(main, ['--help']); assert 'train' in r.output; "
            "print(sorted(m for m in ('torch', 'transformers', 'mxkernels.training') "
            "if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], env=_env(), cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.serial
def test_ddp_two_gloo_processes_match_the_single_process_run(tmp_path):
    steps = 4
    single = tmp_path / "single"
    train(_cfg(single, tokens=128 * steps))
    run = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_port", str(29500 + os.getpid() % 1000), "-m", "mxref.cli", "train",
           *_cli_args(run, steps)]
    r = subprocess.run(cmd, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = _losses(single), _losses(run)
    assert len(a) == len(b) == steps
    # same global batch, gradients averaged over 2 ranks of 2 sequences: equal up to fp32
    # summation order. Stated tolerance: 1e-5 relative per step.
    for x, y in zip(a, b):
        assert abs(x - y) <= 1e-5 * abs(x), (a, b)
    assert json.loads((run / "summary.json").read_text())["world_size"] == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_quantized_training_with_in_run_validation(tmp_path):
    # Triton backend on CUDA, bf16 autocast, every step checked against mxref
    s = train(TrainConfig(out=str(tmp_path / "g"), model="llama-tiny", recipe="mxfp4-fdw",
                          tokens=64 * 32 * 4, seq_len=64, batch_size=32, validate_every=1,
                          eval_tokens=4096, progress=False, device="cuda"))
    assert s["status"] == "complete" and s["swapped_linears"] == 14
    checks = [json.loads(x) for x in (tmp_path / "g" / "checks.jsonl").read_text().splitlines()]
    assert checks and all(c["ok"] for c in checks)
    assert len({c["layer"] for c in checks}) == 4


def test_experiment_plan_validates_quantized_arms_only(tmp_path):
    """``--validate-every`` on an experiment reaches every quantized arm and not the bf16
    baseline: bf16 refuses the option, so passing it through lost the baseline arm (its
    TrainConfig raised and the grid had nothing to pair against)."""
    from mxkernels.training.experiments import plan
    cfgs = plan("amd", "tiny", [0, 1], tmp_path, validate_every=7)
    by = {(c.recipe, c.seed): c for c in cfgs}
    assert len(by) == 14
    assert by[("bf16", 0)].validate_every == 0 and by[("bf16", 1)].validate_every == 0
    assert all(c.validate_every == 7 for c in cfgs if c.recipe != "bf16")
    for c in cfgs:
        c.validate(1)                                   # every arm is a valid config


def test_decomp_experiment_plans_the_one_fix_arms_and_decomposes_quantized_arms_only(tmp_path):
    from mxkernels.training.experiments import plan

    cfgs = plan("decomp", "tiny", [0], tmp_path, validate_every=7, decompose=True)
    assert [c.recipe for c in cfgs] == ["bf16", "mxfp4-fdw", "decomp-outlier", "decomp-macro",
                                        "decomp-fixed"]
    assert [c.decompose for c in cfgs] == [False, True, True, True, True]
    assert cfgs[0].validate_every == 0


# ---- --deterministic ----------------------------------------------------------------------------
def test_deterministic_mode_sets_and_restores_the_process_state(monkeypatch):
    """deterministic_mode turns torch's deterministic algorithms, cuDNN's deterministic flag
    and cuBLAS's fixed workspace on inside, and puts each back after (also after an error);
    a workspace the user set is kept."""
    from mxkernels.training.trainer import CUBLAS_WORKSPACE, deterministic_mode
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (torch.are_deterministic_algorithms_enabled(),
              torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    assert not before[0]
    with pytest.raises(ValueError):
        with deterministic_mode(True):
            assert torch.are_deterministic_algorithms_enabled()
            assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE
            raise ValueError("inside")
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark) == before
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    with deterministic_mode(True):
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    with deterministic_mode(False):
        assert not torch.are_deterministic_algorithms_enabled()


def test_deterministic_is_part_of_the_identity_only_when_on(tmp_path):
    """Runs made before the option keep their identity; a deterministic run is another run
    (its kernels differ), and it trains, repeats itself and restores the process state."""
    assert "deterministic" not in _cfg(tmp_path / "a").identity()
    on = _cfg(tmp_path / "b", deterministic=True, tokens=4 * 32 * 3)
    assert on.identity()["deterministic"] is True
    s1 = train(on)
    s2 = train(_cfg(tmp_path / "c", deterministic=True, tokens=4 * 32 * 3))
    assert s1["status"] == s2["status"] == "complete"
    assert _losses(tmp_path / "b") == _losses(tmp_path / "c")
    assert not torch.are_deterministic_algorithms_enabled()
    with pytest.raises(RunDirError):            # same directory, other identity
        train(_cfg(tmp_path / "b", tokens=4 * 32 * 3))


def test_deterministic_without_an_implementation_is_a_usage_error(tmp_path, monkeypatch):
    """An op with no deterministic implementation (torch raises RuntimeError) stops a
    --deterministic run with a TrainingConfigError that names it; without the option the
    error is not rewritten."""
    from mxkernels.training import trainer as T

    def boom(*a, **k):
        raise RuntimeError("index_put_ with accumulate=False does not have a deterministic "
                           "implementation, but you set 'torch.use_deterministic_algorithms"
                           "(True)'.\nmore")
    monkeypatch.setattr(T, "_train", boom)
    with pytest.raises(TrainingConfigError, match="--deterministic: .*index_put_"):
        train(_cfg(tmp_path / "d", deterministic=True))
    with pytest.raises(RuntimeError, match="index_put_") as e:
        train(_cfg(tmp_path / "e"))
    assert not isinstance(e.value, TrainingConfigError)
