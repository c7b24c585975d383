"""--cuda-graph: one CUDA graph per training step. On CPU: the refusals (no GPU, a recipe on
the generic path, torchrun) and the config identity. On a GPU: a graph run repeats bit for
bit, its in-run checks pass, and a planted bug (the device step not written) changes the run.

A graph run is NOT bit-identical to the same run stepped eagerly (MXK_CUDA_GRAPH_EAGER=1: the
graph mode's optimizer and device step, no capture), and neither is the bf16 recipe, which
runs none of our kernels: on an H100 (torch 2.11) bf16 parts at step 3, mxfp4-fdw at 9,
mxfp4-fdw-sr at 5, while eager reruns and graph reruns each repeat exactly
(scripts/gpu_graph_diag.py). Kernels picked under capture (cuBLAS / attention) round
differently; the in-run checks hold each GEMM to its bound either way."""
import json
from pathlib import Path

import pytest
import torch

from mxkernels.training import mxlinear as M
from mxkernels.training.errors import TrainingConfigError
from mxkernels.training.trainer import TrainConfig, _check_graphable, train
from mxkernels.training.recipes import get_recipe

GPU = torch.cuda.is_available()


def test_cuda_graph_on_cpu_is_refused(tmp_path):
    cfg = TrainConfig(out=str(tmp_path / "r"), model="llama-tiny", tokens=4096, seq_len=32,
                      batch_size=4, device="cpu", cuda_graph=True, progress=False)
    with pytest.raises(TrainingConfigError, match="needs a CUDA device"):
        train(cfg)
    assert not (tmp_path / "r" / "log.jsonl").exists()


def test_generic_recipes_with_host_state_are_refused_by_name():
    """A generic-path recipe that takes random signs or SR seeds from the host each step (or a
    DGE constant per call) is refused, naming the recipe and the reason; the generic ones
    without (ms-fp4, decomp-fixed and their arms) and every fast-path recipe are accepted."""
    import dataclasses

    from mxkernels.training.recipes import VARIANTS
    dev = torch.device("cuda")        # the recipe check comes after the device check
    dec = get_recipe("decomp-fixed")
    ms = get_recipe("ms-fp4")
    sr = dataclasses.replace(ms.dgrad.a, rounding="sr")            # ms-fp4's E5M2 dy
    bad = {
        "ms-fp4-sr": (ms.replace(name="ms-fp4-sr",
                                 dgrad=dataclasses.replace(ms.dgrad, a=sr)), "seeds"),
        "decomp-rht": (dec.replace(name="decomp-rht", wgrad=dataclasses.replace(
            dec.wgrad, hadamard="random", hadamard_n=16)), "random Hadamard"),
        "ms-fp4-dge-mean": (VARIANTS["ms-fp4-dge-mean"], "DGE constant"),
    }
    for name, (recipe, why) in bad.items():
        with pytest.raises(TrainingConfigError, match=f"{name}.*{why}"):
            _check_graphable(recipe, dev)
    for name in ("bf16", "mxfp4-fdw", "mxfp4-fdw-rht", "mxfp4-fdw-sr", "fp4-activations",
                 "quartet", "nvfp4-te", "ms-fp4", "decomp-fixed"):
        _check_graphable(get_recipe(name), dev)
    for name in ("ms-fp4-no-occ", "decomp-outlier", "decomp-macro"):
        _check_graphable(VARIANTS[name], dev)


def test_cuda_graph_under_torchrun_is_refused():
    cfg = TrainConfig(model="llama-tiny", cuda_graph=True)
    with pytest.raises(TrainingConfigError, match="DDP / FSDP"):
        cfg.validate(world_size=2)


def test_cuda_graph_is_part_of_the_run_identity_only_when_on():
    assert "cuda_graph" not in TrainConfig().identity()      # earlier runs keep their id
    assert TrainConfig(cuda_graph=True).identity()["cuda_graph"] is True


def _run(tmp_path, name, monkeypatch, eager: bool, recipe="mxfp4-fdw-sr", **kw):
    if eager:
        monkeypatch.setenv("MXK_CUDA_GRAPH_EAGER", "1")
    else:
        monkeypatch.delenv("MXK_CUDA_GRAPH_EAGER", raising=False)
    cfg = TrainConfig(out=str(tmp_path / name), model="llama-tiny", recipe=recipe,
                      tokens=12 * 8 * 64, seq_len=64, batch_size=8, grad_accum=2, seed=3,
                      device="cuda", cuda_graph=True, progress=False, quant_time_every=0,
                      eval_every=0, **kw)
    s = train(cfg)
    rows = [json.loads(x) for x in (Path(cfg.out) / "log.jsonl").read_text().splitlines()]
    return s, [(r["loss"], r["grad_norm"]) for r in rows]


@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_graph_runs_repeat_bit_for_bit_and_pass_their_checks(tmp_path, monkeypatch):
    """Checked steps 5 and 10 run eagerly between the replays."""
    s1, g1 = _run(tmp_path, "graph1", monkeypatch, eager=False, validate_every=5)
    _, g2 = _run(tmp_path, "graph2", monkeypatch, eager=False, validate_every=5)
    assert s1["cuda_graph_steps"] >= 7
    assert g1 == g2
    checks = (tmp_path / "graph1" / "checks.jsonl").read_text().splitlines()
    assert len(checks) >= 3 and all(json.loads(c)["ok"] for c in checks)


@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("recipe", ["ms-fp4", "decomp-fixed"])
def test_generic_recipe_graph_runs_repeat_and_pass_their_checks(tmp_path, monkeypatch, recipe):
    """A generic-path recipe without per-step host state: graphed runs replay most steps,
    repeat bit for bit, and their checked steps (run eagerly) pass. (A graph run is not
    bit-identical to the eager run, bf16 included: docs/training.md, CUDA graphs.)"""
    s1, g1 = _run(tmp_path, "graph", monkeypatch, eager=False, recipe=recipe, validate_every=5)
    _, g2 = _run(tmp_path, "graph2", monkeypatch, eager=False, recipe=recipe, validate_every=5)
    assert s1["cuda_graph_steps"] >= 7
    assert g1 == g2
    checks = (tmp_path / "graph" / "checks.jsonl").read_text().splitlines()
    assert len(checks) >= 3 and all(json.loads(c)["ok"] for c in checks)


@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_graph_steps_follow_the_device_step(tmp_path, monkeypatch):
    """Planted bug: set_step stops writing the device step. The SR streams then stay those
    of step 0, and the run leaves a correct graph run after its first step."""
    _, good = _run(tmp_path, "good", monkeypatch, eager=False)
    real = M.set_step

    def stale(model, step):
        st = M._DEV_STEP[0]
        M._DEV_STEP[0] = None
        try:
            real(model, step)
        finally:
            M._DEV_STEP[0] = st
    monkeypatch.setattr(M, "set_step", stale)
    _, g = _run(tmp_path, "stale", monkeypatch, eager=False)
    assert g[0] == good[0] and g[1:] != good[1:]
