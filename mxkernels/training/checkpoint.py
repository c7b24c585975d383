"""Checkpoints without pickle: model weights as safetensors, optimizer and RNG state as torch
files readable with ``torch.load(weights_only=True)``, everything else JSON.

Layout under ``RUN/checkpoints/``::

    step_00000100/model.safetensors   fp32 master weights (state_dict of the unwrapped model)
    step_00000100/optimizer.pt        optimizer.state_dict()
    step_00000100/rng.pt              {"torch_cpu": ByteTensor, "torch_cuda": [ByteTensor, ...]}
    step_00000100/state.json          step, tokens, config fingerprint, SHA-256 of each file
    latest.json                       {"step": 100, "dir": "step_00000100"}

A checkpoint is written into ``step_X.tmp`` and renamed into place, then ``latest.json`` is
replaced atomically: a kill -9 at any moment leaves the previous checkpoint intact and
``latest.json`` pointing at a complete one. If ``latest.json`` itself is gone, the resume
takes the newest intact ``step_*`` (see :func:`find_resume_checkpoint`) and says so on stderr;
it never restarts from step 0 while checkpoint directories exist. The data position is the
step itself (the batch order is a pure function of the step, see ``data.py``).
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle  # only for its UnpicklingError: torch.load(weights_only=True) raises it
import shutil
from pathlib import Path

import torch

from .errors import CheckpointError

FILES = ("model.safetensors", "optimizer.pt", "rng.pt")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def write_json_atomic(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _rng_state() -> dict:
    state = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch_cuda"] = torch.cuda.get_rng_state_all()
    return state


def save_checkpoint(root: Path, step: int, tokens: int, model, optimizer, fingerprint: str,
                    keep: int = 2) -> Path:
    """Write checkpoint ``step`` under ``root`` and keep only the ``keep`` most recent ones."""
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:08d}"
    final, tmp = root / name, root / (name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(tmp / "model.safetensors"), metadata={"step": str(step)})
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(_rng_state(), tmp / "rng.pt")
    meta = {"schema": "mxref-train-checkpoint/1", "step": step, "tokens": tokens,
            "fingerprint": fingerprint, "files": {f: _sha256(tmp / f) for f in FILES}}
    (tmp / "state.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_json_atomic(root / "latest.json", {"step": step, "dir": name})
    old = sorted(p for p in root.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
    for p in old[:-keep] if keep > 0 else []:
        shutil.rmtree(p, ignore_errors=True)
    return final


def latest_checkpoint(root: Path) -> Path | None:
    """The directory ``latest.json`` names, or None when no checkpoint was ever completed."""
    pointer = root / "latest.json"
    if not pointer.exists():
        return None
    try:
        name = json.loads(pointer.read_text())["dir"]
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{pointer} is corrupt ({e})") from None
    path = root / name
    if not path.is_dir():
        raise CheckpointError(f"{pointer} names {name}, which does not exist")
    return path


def _step_dirs(root: Path) -> list[Path]:
    """Completed checkpoint directories ``step_NNNNNNNN`` under ``root``, newest first
    (``.tmp`` directories are writes a kill interrupted: never candidates)."""
    out = []
    for p in root.glob("step_*") if root.is_dir() else []:
        digits = p.name[len("step_"):]
        if p.is_dir() and digits.isdigit():
            out.append((int(digits), p))
    return [p for _, p in sorted(out, reverse=True)]


def verify_checkpoint(path: Path, fingerprint: str | None = None) -> dict:
    """Check a checkpoint without touching any model: state.json, the SHA-256 of every file,
    the step in state.json against the directory name, the fingerprint, and that every file
    loads (safetensors; ``torch.load(weights_only=True)``). Returns state.json or raises
    CheckpointError."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        meta = read_checkpoint_state(path, None)
    except (KeyError, TypeError, AttributeError) as e:   # state.json of the wrong shape
        raise CheckpointError(f"checkpoint {path}: state.json is malformed ({e!r})") from None
    digits = path.name[len("step_"):]
    if digits.isdigit() and meta.get("step") != int(digits):
        raise CheckpointError(f"checkpoint {path}: state.json says step {meta.get('step')!r}, "
                              f"the directory says {int(digits)}")
    try:
        load_file(str(path / "model.safetensors"))
        torch.load(path / "optimizer.pt", weights_only=True, map_location="cpu")
        torch.load(path / "rng.pt", weights_only=True, map_location="cpu")
    except (SafetensorError, RuntimeError, OSError, ValueError, EOFError,
            pickle.UnpicklingError) as e:
        raise CheckpointError(f"checkpoint {path}: cannot load ({e})") from None
    if fingerprint is not None:
        read_checkpoint_state(path, fingerprint)   # intact but another configuration: refuse
    return meta


def find_resume_checkpoint(root: Path, fingerprint: str | None,
                           run_dir: Path | None = None) -> tuple[Path | None, list[str]]:
    """The checkpoint a resume continues from, and notes to print on stderr.

    With ``latest.json``: the checkpoint it names (its problems raise, as before).
    Without it (deleted, or lost with its directory): the newest ``step_*`` directory that
    passes :func:`verify_checkpoint`; a newer one that fails its integrity checks is skipped
    and named in the notes (fall back). A checkpoint of another configuration is refused, not
    skipped. Checkpoint directories exist but none is intact: CheckpointError naming the run
    directory. No checkpoint directory at all: ``(None, notes)`` - the run starts at step 0.
    """
    pointer = root / "latest.json"
    if pointer.exists():
        return latest_checkpoint(root), []
    run_dir = run_dir if run_dir is not None else root.parent
    candidates = _step_dirs(root)
    if not candidates:
        note = f"{pointer} is missing and {root} holds no checkpoint: starting {run_dir} "
        return None, [note + "from step 0"]
    notes, skipped = [], []
    for path in candidates:
        try:
            meta = verify_checkpoint(path, None)
        except CheckpointError as e:
            skipped.append(f"{path.name}: {e}")
            notes.append(f"skipping checkpoint {path}: not intact ({e})")
            continue
        if fingerprint is not None:
            read_checkpoint_state(path, fingerprint)   # another configuration: refuse, not skip
        notes.append(f"{pointer} is missing: resuming from step {meta['step']} ({path}), the "
                     f"newest intact checkpoint (hashes and torch.load(weights_only=True) "
                     f"checked" + (f"; {len(skipped)} newer one(s) skipped as not intact)"
                                   if skipped else ")"))
        return path, notes
    raise CheckpointError(
        f"run directory {run_dir}: {pointer} is missing and no intact checkpoint remains "
        f"to resume from; refusing to restart from step 0 over it. Checked, newest first: "
        + "; ".join(skipped) + ". Move the run directory aside (or restore latest.json and "
        "a checkpoint) and rerun.")


def read_checkpoint_state(path: Path, fingerprint: str | None = None) -> dict:
    """state.json of a checkpoint, after checking every file's hash and the config fingerprint."""
    try:
        meta = json.loads((path / "state.json").read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path}: cannot read state.json ({e})") from None
    if meta.get("schema") != "mxref-train-checkpoint/1":
        raise CheckpointError(f"checkpoint {path}: unknown schema {meta.get('schema')!r}")
    for f in FILES:
        p = path / f
        if not p.exists():
            raise CheckpointError(f"checkpoint {path}: {f} is missing")
        if _sha256(p) != meta["files"].get(f):
            raise CheckpointError(f"checkpoint {path}: {f} is corrupt (SHA-256 differs from state.json)")
    if fingerprint is not None and meta.get("fingerprint") != fingerprint:
        raise CheckpointError(
            f"checkpoint {path} belongs to a different configuration (fingerprint "
            f"{meta.get('fingerprint', '?')[:12]} != run's {fingerprint[:12]}): different model, "
            f"recipe, data or hyperparameters")
    return meta


def load_checkpoint(path: Path, model, optimizer, fingerprint: str | None, device) -> dict:
    """Restore model, optimizer and RNG state in place; returns the checkpoint's state.json."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    meta = read_checkpoint_state(path, fingerprint)
    try:
        weights = load_file(str(path / "model.safetensors"))
        opt_state = torch.load(path / "optimizer.pt", weights_only=True, map_location="cpu")
        rng = torch.load(path / "rng.pt", weights_only=True, map_location="cpu")
    except (SafetensorError, RuntimeError, OSError, ValueError, EOFError,
            pickle.UnpicklingError) as e:
        raise CheckpointError(f"checkpoint {path}: cannot load ({e})") from None
    own = model.state_dict()
    if set(weights) != set(own) or any(weights[k].shape != own[k].shape for k in own):
        missing = sorted(set(own) - set(weights))[:3]
        extra = sorted(set(weights) - set(own))[:3]
        raise CheckpointError(f"checkpoint {path} does not fit this model (missing {missing}, "
                              f"unexpected {extra}, or shapes differ)")
    model.load_state_dict(weights)
    try:
        optimizer.load_state_dict(opt_state)
    except (ValueError, KeyError) as e:
        raise CheckpointError(f"checkpoint {path}: optimizer state does not fit ({e})") from None
    torch.set_rng_state(rng["torch_cpu"])
    if "torch_cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["torch_cuda"])
    return meta
