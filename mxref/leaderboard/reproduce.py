"""Re-run an entry's recorded command and compare the new median with the recorded one.

The recorded command writes its records under ``--out DIR``; reproduce replaces DIR with a fresh
temporary directory, runs the command from the repository root, finds the record of the same
suite, entry and machine, and passes when the relative difference of the medians is within the
recorded spread (``metric.spread``) times ``slack`` (1 by default)."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from ..errors import MXRefError
from .record import REPO
from .submit import record_files


class ReproduceError(MXRefError):
    """The recorded command could not be run or produced no matching record."""


def command_with_out(cmd: list[str], out: Path) -> list[str]:
    cmd = list(cmd)
    for i, a in enumerate(cmd):
        if a == "--out" and i + 1 < len(cmd):
            cmd[i + 1] = str(out)
            return cmd
        if a.startswith("--out="):
            cmd[i] = f"--out={out}"
            return cmd
    raise ReproduceError(f"the recorded command has no --out to redirect: {shlex.join(cmd)}")


def reproduce(record: dict, *, slack: float = 1.0, timeout: float = 3600, cwd=None,
              env=None) -> dict:
    with tempfile.TemporaryDirectory(prefix="mxref-repro-") as tmp:
        cmd = command_with_out(record["command"], Path(tmp) / "out")
        e = dict(os.environ, **(env or {}))
        try:
            proc = subprocess.run(cmd, cwd=cwd or REPO, env=e, capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except FileNotFoundError as ex:
            raise ReproduceError(f"cannot run {cmd[0]!r}: {ex}") from None
        except subprocess.TimeoutExpired:
            raise ReproduceError(f"the recorded command ran past {timeout:.0f} s") from None
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout)[-2000:]
            raise ReproduceError(f"the recorded command exited {proc.returncode}:\n{tail}")
        for p in record_files([Path(tmp) / "out"]):
            try:
                new = json.loads(p.read_text())
            except ValueError:
                continue
            if (new.get("suite"), new.get("entry")) == (record["suite"], record["entry"]) and \
                    new.get("machine", {}).get("slug") == record["machine"]["slug"]:
                break
        else:
            raise ReproduceError(f"the re-run wrote no record of {record['suite']}/"
                                 f"{record['entry']} on {record['machine']['slug']}")
    old_m, new_m = record["metric"]["median"], new["metric"]["median"]
    diff = abs(new_m / old_m - 1.0)
    tol = record["metric"]["spread"] * slack
    return {"entry": record["entry"], "suite": record["suite"],
            "machine": record["machine"]["slug"], "command": shlex.join(cmd),
            "recorded_median": old_m, "new_median": new_m, "unit": record["metric"]["unit"],
            "difference": diff, "tolerance": tol, "new_spread": new["metric"]["spread"],
            "status": "reproduced" if diff <= tol else "not-reproduced"}
