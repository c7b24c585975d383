"""Resume when ``checkpoints/latest.json`` is gone (issue 27, item 8, training part).

Policy (docs/faults.md, training section): without ``latest.json`` the resume scans
``checkpoints/step_*`` newest first, verifies each one as the normal resume does (SHA-256 of every
file against state.json, the step in state.json, torch.load(weights_only=True) / safetensors
loadability) and resumes from the newest intact one, saying on stderr which step, which directory
and why. A corrupt newer checkpoint is skipped with its reason on stderr (fall back). No intact
checkpoint while checkpoint directories exist -> CheckpointError naming the run directory.
No checkpoint directories at all -> the run starts from step 0 (nothing was ever saved).

CPU, fp32, one thread, llama-tiny (helpers from test_training_trainer.py): seconds per run.
"""
import json
import shutil
from pathlib import Path

import pytest
from test_training_trainer import _cfg, _losses

from mxkernels.training.errors import CheckpointError
from mxkernels.training.trainer import train

STEPS = 8


def _stopped_run(tmp_path, stop_after=6):
    """A reference (uninterrupted) run and a run stopped after ``stop_after`` steps with
    checkpoints every 2 steps (keep 2: step 4 and step 6 remain)."""
    ref = tmp_path / "ref"
    train(_cfg(ref, tokens=128 * STEPS))
    run = tmp_path / "run"
    s = train(_cfg(run, tokens=128 * STEPS, ckpt_every=2, stop_after=stop_after))
    assert s["status"] == "stopped" and s["last_checkpoint_step"] == stop_after
    ck = run / "checkpoints"
    assert sorted(p.name for p in ck.glob("step_*")) == ["step_00000004", "step_00000006"]
    (ck / "latest.json").unlink()
    return ref, run


def test_missing_latest_json_resumes_from_the_newest_intact_checkpoint(tmp_path, capsys):
    ref, run = _stopped_run(tmp_path)
    capsys.readouterr()
    s = train(_cfg(run, tokens=128 * STEPS, ckpt_every=2))
    err = capsys.readouterr().err
    assert s["status"] == "complete"
    assert s["resumed_from_step"] == 6          # not a silent restart from step 0
    assert "latest.json" in err and "step 6" in err and "step_00000006" in err
    assert _losses(run) == _losses(ref)          # exact float equality, every step


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupt_newest_checkpoint_falls_back_to_the_previous_intact_one(tmp_path, capsys):
    ref, run = _stopped_run(tmp_path)
    _flip_byte(run / "checkpoints" / "step_00000006" / "optimizer.pt")
    capsys.readouterr()
    s = train(_cfg(run, tokens=128 * STEPS, ckpt_every=2))
    err = capsys.readouterr().err
    assert s["status"] == "complete" and s["resumed_from_step"] == 4
    assert "step_00000006" in err and "optimizer.pt" in err and "corrupt" in err
    assert "step 4" in err and "step_00000004" in err
    assert _losses(run) == _losses(ref)


def test_unloadable_newest_checkpoint_with_matching_hashes_is_skipped(tmp_path, capsys):
    """A file whose hash was rewritten to match garbage still has to load with
    torch.load(weights_only=True): hashes alone are not trusted."""
    ref, run = _stopped_run(tmp_path)
    d = run / "checkpoints" / "step_00000006"
    (d / "rng.pt").write_bytes(b"not a torch file")
    meta = json.loads((d / "state.json").read_text())
    import hashlib
    meta["files"]["rng.pt"] = hashlib.sha256(b"not a torch file").hexdigest()
    (d / "state.json").write_text(json.dumps(meta))
    capsys.readouterr()
    s = train(_cfg(run, tokens=128 * STEPS, ckpt_every=2))
    err = capsys.readouterr().err
    assert s["resumed_from_step"] == 4 and "cannot load" in err and "step_00000006" in err
    assert _losses(run) == _losses(ref)


def test_no_intact_checkpoint_refuses_naming_the_run_directory(tmp_path):
    _, run = _stopped_run(tmp_path)
    for name in ("step_00000004", "step_00000006"):
        _flip_byte(run / "checkpoints" / name / "model.safetensors")
    log_before = (run / "log.jsonl").read_text()
    with pytest.raises(CheckpointError, match="no intact checkpoint") as e:
        train(_cfg(run, tokens=128 * STEPS, ckpt_every=2))
    assert str(run) in str(e.value) and "latest.json" in str(e.value)
    assert "step_00000004" in str(e.value) and "step_00000006" in str(e.value)
    assert (run / "log.jsonl").read_text() == log_before    # nothing truncated or overwritten


def test_foreign_checkpoint_is_refused_not_skipped(tmp_path):
    """A checkpoint of another configuration is not 'corrupt': the resume refuses."""
    _, run = _stopped_run(tmp_path)
    st = run / "checkpoints" / "step_00000006" / "state.json"
    meta = json.loads(st.read_text())
    meta["fingerprint"] = "0" * 64
    st.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="different configuration"):
        train(_cfg(run, tokens=128 * STEPS, ckpt_every=2))


def test_no_checkpoints_and_no_latest_json_starts_from_step_0(tmp_path, capsys):
    ref = tmp_path / "ref"
    train(_cfg(ref, tokens=128 * 4))
    run = tmp_path / "run"
    train(_cfg(run, tokens=128 * 4, stop_after=2))
    shutil.rmtree(run / "checkpoints")
    capsys.readouterr()
    s = train(_cfg(run, tokens=128 * 4))
    err = capsys.readouterr().err
    assert s["status"] == "complete" and s["resumed_from_step"] is None
    assert "no checkpoint" in err and "step 0" in err
    assert _losses(run) == _losses(ref)


def test_cli_refusal_exits_2_with_the_reason_on_stderr(tmp_path):
    from test_training_trainer import _cli_args, _invoke

    _, run = _stopped_run(tmp_path)
    for name in ("step_00000004", "step_00000006"):
        (run / "checkpoints" / name / "state.json").write_text("{cut")
    r = _invoke(*_cli_args(run, STEPS, ckpt_every=2))
    assert r.exit_code == 2, r.output
    assert "error:" in r.output and "no intact checkpoint" in r.output and str(run) in r.output


class _Plant:
    """A pickle that would create a marker file if it were ever unpickled."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_planted_pickle_is_never_run_and_is_a_typed_error(tmp_path):
    """optimizer.pt holding a code-running pickle (its hash re-sealed into state.json): with
    latest.json the resume is a CheckpointError (not a raw UnpicklingError traceback); without
    it, the checkpoint is skipped. The payload never runs either way."""
    import hashlib
    import pickle

    _, run = _stopped_run(tmp_path)
    d = run / "checkpoints" / "step_00000006"
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Plant(marker), protocol=2)
    (d / "optimizer.pt").write_bytes(payload)
    meta = json.loads((d / "state.json").read_text())
    meta["files"]["optimizer.pt"] = hashlib.sha256(payload).hexdigest()
    (d / "state.json").write_text(json.dumps(meta))
    (run / "checkpoints" / "latest.json").write_text(
        json.dumps({"step": 6, "dir": "step_00000006"}))
    with pytest.raises(CheckpointError, match="cannot load"):
        train(_cfg(run, tokens=128 * STEPS, ckpt_every=2))
    assert not marker.exists()
    (run / "checkpoints" / "latest.json").unlink()
    s = train(_cfg(run, tokens=128 * STEPS, ckpt_every=2))
    assert s["resumed_from_step"] == 4 and not marker.exists()
