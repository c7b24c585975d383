"""FSDP2 (``mxref train --fsdp``, mxkernels/training/fsdp.py) on CPU: 2 gloo processes under
torchrun against one process with ``--grad-accum 2`` (the same micro-batches), for bf16 and for
an MX recipe with in-run validation; checkpoints written from the sharded state in the
single-process format, loadable with ``weights_only=True``, and a stop + resume under FSDP
that reproduces the uninterrupted run.

Tolerance (the DDP test's, tests/test_training_trainer.py): 1e-5 relative per step for the
loss, and 1e-5 relative (to the largest entry) for the final parameters. Why it is not 0: with
fp32 parameters and the same micro-batches, the forward and the per-rank gradients are the same
computation; the gradient mean over 2 ranks (reduce-scatter, then /2) equals the accumulated
g1/2 + g2/2 exactly (halving is exact, a sum of two is commutative); but ``clip_grad_norm_``
sums the squared norms of the shards in another order, so the clip coefficient (the norm is
> 1 on these steps, clipping is active) differs in its last bits, and so do the updated
parameters: measured 3e-7 absolute (~1e-7 relative) on the parameters, losses equal or 1e-7
relative. 1e-5 leaves two orders of magnitude and catches any real error (a missing gradient
reduction, a shard loaded into the wrong place: 1e-2 and more).

Each torchrun costs ~30 s (bf16) to ~90 s (mxfp4-fdw, torch-emulated quantizers) on 2 cores.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mxkernels.training.errors import TrainingConfigError
from mxkernels.training.trainer import TrainConfig, train

REPO = Path(__file__).resolve().parents[1]
TINY = dict(model="llama-tiny", seq_len=32, batch_size=4, precision="fp32", threads=1,
            eval_tokens=256, progress=False, lr=3e-3)
RTOL = 1e-5


def _env():
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1")
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def _torchrun(out, steps, *extra, port_off=0):
    args = ["--model", "llama-tiny", "--seq-len", "32", "--batch-size", "4", "--precision",
            "fp32", "--threads", "1", "--eval-tokens", "256", "--lr", "0.003", "--no-progress",
            "--tokens", str(128 * steps), "--out", str(out), "--fsdp", *extra]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_port", str(29100 + (os.getpid() * 7 + port_off) % 800),
           "-m", "mxref.cli", "train", *args]
    r = subprocess.run(cmd, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return r


def _log(run):
    return [json.loads(x) for x in (Path(run) / "log.jsonl").read_text().splitlines()]


def _final_weights(run):
    from safetensors.torch import load_file

    ck = Path(run) / "checkpoints"
    name = json.loads((ck / "latest.json").read_text())["dir"]
    return load_file(str(ck / name / "model.safetensors")), ck / name


def _close(a: dict, b: dict, rtol=RTOL):
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].shape == b[k].shape, k
        scale = float(a[k].abs().max()) or 1.0
        err = float((a[k] - b[k]).abs().max())
        assert err <= rtol * scale, (k, err, scale)


def _same_losses(a, b, rtol=RTOL):
    la, lb = [r["loss"] for r in a], [r["loss"] for r in b]
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        assert abs(x - y) <= rtol * abs(x), (la, lb)


@pytest.mark.serial
def test_fsdp_bf16_matches_grad_accum_and_resumes_from_full_checkpoints(tmp_path):
    steps = 4
    single = tmp_path / "accum2"
    train(TrainConfig(out=str(single), tokens=128 * steps, grad_accum=2, ckpt_every=2, **TINY))
    full = tmp_path / "fsdp"
    _torchrun(full, steps, "--ckpt-every", "2")
    _same_losses(_log(single), _log(full))
    wa, _ = _final_weights(single)
    wb, ckdir = _final_weights(full)
    _close(wa, wb)
    s = json.loads((full / "summary.json").read_text())
    assert s["world_size"] == 2 and s["parallel"] == "fsdp" and s["status"] == "complete"
    cfg = json.loads((full / "config.json").read_text())
    assert cfg["parallel"] == "fsdp" and cfg["identity"]["train"]["fsdp"] is True
    # the checkpoint is the single-process format: full tensors, weights_only loads, the
    # optimizer state keyed by parameter index with full-shaped moments
    opt_a = torch.load(single / "checkpoints" / "step_00000004" / "optimizer.pt",
                       weights_only=True)
    opt_b = torch.load(ckdir / "optimizer.pt", weights_only=True)
    assert opt_b["state"].keys() == opt_a["state"].keys()
    assert opt_b["param_groups"] == opt_a["param_groups"]
    for i, st in opt_a["state"].items():
        for k, v in st.items():
            assert type(opt_b["state"][i][k]) is torch.Tensor
            assert opt_b["state"][i][k].shape == v.shape
            scale = float(v.abs().max()) or 1.0
            assert float((opt_b["state"][i][k] - v).abs().max()) <= RTOL * scale, (i, k)
    torch.load(ckdir / "rng.pt", weights_only=True)
    # stop after step 2 (checkpoint from the shards), resume: the uninterrupted FSDP run
    res = tmp_path / "fsdp-resumed"
    _torchrun(res, steps, "--ckpt-every", "2", "--stop-after", "2", port_off=1)
    assert json.loads((res / "summary.json").read_text())["status"] == "stopped"
    _torchrun(res, steps, "--ckpt-every", "2", port_off=2)
    assert json.loads((res / "summary.json").read_text())["resumed_from_step"] == 2
    assert [r["loss"] for r in _log(res)] == [r["loss"] for r in _log(full)]
    wr, _ = _final_weights(res)
    for k in wb:
        assert torch.equal(wr[k], wb[k]), k


@pytest.mark.serial
def test_fsdp_mx_recipe_matches_grad_accum_with_in_run_validation(tmp_path):
    steps = 2
    single = tmp_path / "accum2"
    train(TrainConfig(out=str(single), tokens=128 * steps, grad_accum=2, recipe="mxfp4-fdw",
                      **TINY))
    run = tmp_path / "fsdp"
    _torchrun(run, steps, "--recipe", "mxfp4-fdw", "--validate-every", "1")
    _same_losses(_log(single), _log(run))
    _close(_final_weights(single)[0], _final_weights(run)[0])
    checks = [json.loads(x) for x in (run / "checks.jsonl").read_text().splitlines()]
    assert checks and all(c["ok"] for c in checks), [c for c in checks if not c["ok"]][:2]
    gathered = [c for c in checks if c["operand"] == "W (FSDP shards gathered)"]
    assert [c["step"] for c in gathered] == [0, 1]     # one per checked step, all passing
    assert len({c["layer"] for c in checks}) == 2      # the check rotates over the layers


def test_fsdp_needs_more_than_one_process_and_leaves_old_fingerprints_alone(tmp_path):
    with pytest.raises(TrainingConfigError, match="WORLD_SIZE > 1"):
        train(TrainConfig(out=str(tmp_path / "x"), tokens=128, fsdp=True, **TINY))
    assert not (tmp_path / "x").exists()
    # new knobs at their defaults stay out of the identity: runs made before them resume
    ident = TrainConfig(**TINY).identity()
    assert not {"fsdp", "tokenizer", "vocab_size"} & set(ident)
    assert TrainConfig(fsdp=True, **TINY).identity()["fsdp"] is True
