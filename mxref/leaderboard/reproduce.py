"""Re-run the recorded commands of records and compare the new medians with the recorded ones.

Records made by one suite run share one command (a GPU kernels run writes ~32 records, each
with the same ``mxref leaderboard run gpu --out DIR ...``). `reproduce_records` groups the
records by their command (``--out`` aside: it is replaced anyway), runs each distinct command
once with ``--out`` pointed at a fresh directory, and compares every record of the group with the
re-run's record of the same suite, entry and machine slug.

With ``only_needed`` a command that has a filter runs only the entries asked for:
``run gpu`` gets one ``--kernel ENTRY`` per record, ``run train`` gets ``--recipes`` of the
records' recipes (bf16 runs as the baseline either way); other commands run as recorded.

The verdict for one record (`compare`), with ``diff = new median / recorded median - 1``:

* ``reproduced`` when ``|diff| <= max(recorded spread, floor) x slack`` (the issue's rule:
  within the recorded spread; ``spread`` is (max - min) / median of the recorded repeats, which
  ``run gpu --processes`` takes from separate processes; ``floor`` is the measured run-to-run
  floor of the suite and machine between separate jobs, ``floor.py``, 0 where none is stored);
* ``not-reproduced`` otherwise;
* ``error`` when there is nothing to compare: the command failed, timed out, or wrote no record
  of that suite / entry / machine (another GPU model, a kernel whose in-run check failed).

Reported beside the verdict, not deciding it: the re-run's own spread, and whether the new median
lies in [min, max] of the recorded repeats widened by the re-run's spread,
``[min x (1 - new spread), max x (1 + new spread)]`` (``within_range``); and where both the record
and the re-run carry ``metric.clocks_under_load``, the SM clock, power and clock-event reasons of
each (``clocks``, `clocks.compare`), so a shift can be read against a clock change.

What runs (`admit`, before anything runs): only records whose ``record_sha256`` seal and
schema check out, and only commands of known forms (`command_problems`: ``mxref ...``,
``python -m mxref[.cli] ...``, ``python``/``bash`` with a script under bench/ or scripts/ of the
repo); any other command of a sealed record only with ``allow_command`` (``--allow-command``).
Commands run as argv lists, never through a shell.

Reproduce compares medians; it does not submit. The re-run's commit, dirty flag and tree are
reported (``new_git``) but checked against nothing: on a device the checkout's ``.git`` can be
stale or absent, and that must not decide whether a number reproduces.
"""
from __future__ import annotations

import collections
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import MXRefError
from . import clocks
from .record import REPO, record_hash
from .schema import SCHEMA, schema_problems
from .submit import StorePathError, inside, record_files

OUT_PLACEHOLDER = "{OUT}"
CLI = ["-m", "mxref.cli"]
TAIL_LINES = 40


class ReproduceError(MXRefError):
    """A record cannot be reproduced: it is unreadable, its command has no --out, or (from
    `reproduce`) its command failed or produced no matching record."""


class UntrustedCommandError(ReproduceError):
    """A record whose command will not be run: its seal (``record_sha256``) or schema does not
    check out, or its argv is not of a known form (`command_problems`) and ``--allow-command``
    was not given. Raised before anything runs."""


# ---- what may run -----------------------------------------------------------------------------
PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
MODULES = ("mxref", "mxref.cli")
SCRIPT_DIRS = {"python": ("bench", "scripts"), "bash": ("bench", "scripts")}
SCRIPT_SUFFIX = {"python": ".py", "bash": ".sh"}


def _script_problem(path: str, kind: str, repo) -> str | None:
    try:
        p = inside(repo, path)
    except StorePathError as e:
        return str(e)
    dirs = SCRIPT_DIRS[kind]
    if not path.split("/")[0] in dirs or not any(
            p.is_relative_to(Path(repo).resolve() / d) for d in dirs):
        return f"{path!r} is not a script under {' or '.join(d + '/' for d in dirs)} of the repo"
    if not path.endswith(SCRIPT_SUFFIX[kind]) or not p.is_file():
        return f"{path!r} is not a {SCRIPT_SUFFIX[kind]} file of the repo"
    return None


def command_problems(cmd, repo=REPO) -> list[str]:
    """Why `cmd` is not of a known form (empty when it is): ``mxref ...``, ``python -m mxref
    ...``, ``python -m mxref.cli ...``, ``python bench/X.py`` / ``python scripts/X.py`` or
    ``bash bench/X.sh`` / ``bash scripts/X.sh`` (a relative path inside the repo). ``python``
    is python, python3 or python3.N by name, or this interpreter (sys.executable); no shell
    (``sh -c``, ``bash -c``), no absolute program path, no ``python -c``."""
    if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
        return [f"the command is not a non-empty list of strings: {cmd!r}"]
    prog = cmd[0]
    if prog == "mxref":
        return []
    if PYTHON.match(prog) or prog == sys.executable:
        if len(cmd) >= 3 and cmd[1] == "-m":
            if cmd[2] in MODULES:
                return []
            return [f"python -m {cmd[2]!r}: only -m {' / -m '.join(MODULES)} may run"]
        if len(cmd) >= 2:
            why = _script_problem(cmd[1], "python", repo)
            return [why] if why else []
        return ["a bare python"]
    if prog == "bash":
        if len(cmd) >= 2:
            why = _script_problem(cmd[1], "bash", repo)
            return [why] if why else []
        return ["a bare bash"]
    return [f"program {prog!r} is not mxref, python or bash (by name)"]


def admit(path, rec, *, allow_command: bool = False) -> None:
    """UntrustedCommandError (naming the record and the reason) unless `rec` is sealed, valid
    under the schema, and its command of a known form or `allow_command` is given. The seal
    and the schema are checked with or without `allow_command`."""
    where = path or (rec.get("entry") if isinstance(rec, dict) else None) or "a record"
    if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
        raise UntrustedCommandError(f"{where}: not a {SCHEMA} record; its command is not run")
    got = rec.get("record_sha256")
    if not isinstance(got, str) or record_hash(rec) != got:
        raise UntrustedCommandError(
            f"{where}: record_sha256 {str(got)[:12]}... does not match the content (unsealed "
            "or edited after sealing); its command is not run")
    probs = schema_problems(rec)
    if probs:
        raise UntrustedCommandError(f"{where}: fails the record schema ({probs[0]}"
                                    f"{f'; +{len(probs) - 1} more' if len(probs) > 1 else ''}"
                                    "); its command is not run")
    if not allow_command:
        probs = command_problems(rec["command"])
        if probs:
            raise UntrustedCommandError(
                f"{where}: refused to run {shlex.join(rec['command'])!r}: {probs[0]} "
                "(pass --allow-command to run a sealed record's other command)")


# ---- the command ------------------------------------------------------------------------------
def repaired(cmd: list[str]) -> tuple[list[str], list[str]]:
    """The recorded argv with known recording defects undone, and a note for each.

    Records made before the fix of ``cli.command_line`` under ``python -m mxref.cli`` say
    ``python3 -m mxref.cli -m mxref.cli leaderboard ...`` (click's program name for ``-m``
    leaked into the argv); that command exits 2 ("No such option '-m'"). The run itself was
    ``python3 -m mxref.cli leaderboard ...``."""
    cmd, notes = list(cmd), []
    while len(cmd) >= 5 and cmd[1:3] == CLI and cmd[3:5] == CLI:
        del cmd[3:5]
        notes.append("dropped a repeated '-m mxref.cli' from the recorded command (recorded "
                     "before cli.command_line was fixed)")
    return cmd, notes


def command_with_out(cmd: list[str], out) -> list[str]:
    """`cmd` with the value of its ``--out`` (``-o``) replaced by `out`."""
    cmd = list(cmd)
    for i, a in enumerate(cmd):
        if a in ("--out", "-o") and i + 1 < len(cmd):
            cmd[i + 1] = str(out)
            return cmd
        if a.startswith("--out="):
            cmd[i] = f"--out={out}"
            return cmd
    raise ReproduceError(f"the recorded command has no --out to redirect: {shlex.join(cmd)}")


def _suite_command(cmd: list[str]) -> str | None:
    """'cpu', 'gpu' or 'train' when `cmd` is ``... leaderboard run SUITE ...``."""
    for i in range(len(cmd) - 2):
        if cmd[i:i + 2] == ["leaderboard", "run"]:
            return cmd[i + 2]
    return None


def _without_option(cmd: list[str], name: str) -> list[str]:
    out, skip = [], False
    for a in cmd:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + "="):
            out.append(a)
    return out


def narrowed(cmd: list[str], records: list[dict]) -> list[str]:
    """`cmd` restricted to the entries of `records` where the suite command has a filter
    (module docstring); `cmd` itself where it has none."""
    suite = _suite_command(cmd)
    if suite == "gpu":
        entries = sorted({r["entry"] for r in records})
        return _without_option(cmd, "--kernel") + [x for e in entries for x in ("--kernel", e)]
    if suite == "train":
        want = {(r.get("params") or {}).get("recipe") for r in records}
        if None in want:
            return cmd
        recorded = []
        for i, a in enumerate(cmd):
            if a == "--recipes" and i + 1 < len(cmd):
                recorded = cmd[i + 1].split(",")
            elif a.startswith("--recipes="):
                recorded = a.split("=", 1)[1].split(",")
        order = [r for r in recorded if r in want] + sorted(want - set(recorded))
        return _without_option(cmd, "--recipes") + ["--recipes", ",".join(order)]
    return cmd


# ---- records ------------------------------------------------------------------------------------
def key(rec: dict) -> tuple:
    return rec["suite"], rec["entry"], rec["machine"]["slug"]


def load_records(paths) -> list[tuple[Path, dict]]:
    """(path, record) for every record file named by `paths` (files or directories, as
    `submit` takes them), each file once; ReproduceError for a file that is not a record."""
    out, seen = [], set()
    for p in record_files(paths):
        rp = p.resolve()
        if rp in seen:
            continue
        seen.add(rp)
        try:
            rec = json.loads(p.read_text())
            key(rec), rec["metric"]["median"], rec["metric"]["repeats"], rec["command"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ReproduceError(f"{p} is not a leaderboard record: {e!r}") from None
        out.append((p, rec))
    return out


@dataclass
class Run:
    """One distinct command and the records it re-measures."""
    recorded: list[str]                      # the recorded argv of the first record
    argv: list[str]                          # what runs, --out as OUT_PLACEHOLDER
    notes: list[str]
    members: list[tuple[Path | None, dict]] = field(default_factory=list)


def plan(items, *, only_needed: bool = False, allow_command: bool = False) -> list[Run]:
    """Group (path, record) pairs by command, ``--out`` aside; raises ReproduceError (before
    anything runs) for a command without ``--out``, UntrustedCommandError for a record that
    `admit` refuses."""
    runs: dict[tuple, Run] = {}
    items = list(items)
    for path, rec in items:
        admit(path, rec, allow_command=allow_command)
    for path, rec in items:
        cmd, notes = repaired(rec["command"])
        try:
            cmd = command_with_out(cmd, OUT_PLACEHOLDER)
        except ReproduceError as e:
            raise ReproduceError(f"{path or rec['entry']}: {e}") from None
        run = runs.setdefault(tuple(cmd), Run(list(rec["command"]), cmd, notes))
        run.members.append((path, rec))
    out = list(runs.values())
    if only_needed:
        for run in out:
            run.argv = narrowed(run.argv, [r for _, r in run.members])
    return out


# ---- running -----------------------------------------------------------------------------------
def run_command(argv, *, cwd, env, timeout, echo=None) -> tuple[int | None, list[str]]:
    """Run `argv` (stdout and stderr merged), passing each line to `echo` as it comes; kill its
    process group after `timeout` seconds. Returns (exit code, None on timeout) and the last
    TAIL_LINES lines. Never through a shell: `argv` is a list of strings, run as given."""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ReproduceError(f"refused to run {argv!r}: not a non-empty list of strings")
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                                errors="replace", start_new_session=True, shell=False)
    except OSError as e:
        raise ReproduceError(f"cannot run {argv[0]!r}: {e}") from None
    fired = threading.Event()

    def kill():
        fired.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)     # the suite's own children too
        except OSError:
            pass
    timer = threading.Timer(timeout, kill)
    timer.start()
    tail = collections.deque(maxlen=TAIL_LINES)
    try:
        for line in proc.stdout:
            tail.append(line.rstrip("\n"))
            if echo:
                echo(line.rstrip("\n"))
        rc = proc.wait()
    finally:
        timer.cancel()
        proc.stdout.close()
    return (None if fired.is_set() else rc), list(tail)


def _new_records(out: Path) -> dict[tuple, dict]:
    found = {}
    for p in record_files([out]) if out.is_dir() else []:
        try:
            rec = json.loads(p.read_text())
            found[key(rec)] = rec
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def compare(rec: dict, new: dict, *, slack: float = 1.0, floor: float = 0.0) -> dict:
    """The verdict for one record against the re-run's record of the same key (module
    docstring); the re-run's git state is reported, never checked. `floor`: the measured
    run-to-run floor of the record's suite and machine (`floor.py`); the tolerance is
    max(recorded spread, floor) x slack."""
    m, n = rec["metric"], new["metric"]
    diff = n["median"] / m["median"] - 1.0
    tol = max(m["spread"], floor) * slack
    lo = min(m["repeats"]) * (1.0 - n["spread"])
    hi = max(m["repeats"]) * (1.0 + n["spread"])
    ok = abs(diff) <= tol or math.isclose(abs(diff), tol, rel_tol=1e-9)   # a rounding at the edge
    out = {"recorded_median": m["median"], "recorded_spread": m["spread"], "floor": floor,
           "tolerance_from": "floor" if floor > m["spread"] else "spread",
           "recorded_repeats": len(m["repeats"]), "new_median": n["median"],
           "new_spread": n["spread"], "new_repeats": len(n["repeats"]), "difference": diff,
           "tolerance": tol, "within_spread": ok,
           "widened_range": [lo, hi], "within_range": lo <= n["median"] <= hi,
           "status": "reproduced" if ok else "not-reproduced",
           "new_git": new.get("git")}
    clk = clocks.compare(m.get("clocks_under_load"), n.get("clocks_under_load"))
    if clk is not None:                 # both sides sampled their clocks under load
        out["clocks"] = clk
    return out


def _row(path, rec, run_index) -> dict:
    return {"path": str(path) if path else None, "suite": rec["suite"], "entry": rec["entry"],
            "machine": rec["machine"]["slug"], "unit": rec["metric"].get("unit"),
            "recorded_commit": rec.get("git", {}).get("commit"), "run": run_index}


def execute(runs: list[Run], *, slack: float = 1.0, timeout: float = 3600, cwd=None, env=None,
            keep=None, progress=None, echo=None, floors=None) -> tuple[list[dict], list[dict]]:
    """Run each planned command once and compare its records. Returns (rows, runs): a row per
    record (`compare`'s fields, or status 'error' with a reason) and a summary per command.
    `keep`: a directory to leave each re-run's output in (``run-<i>``) instead of a temporary
    one. `progress(msg)` hears what is starting and finishing, `echo(line)` the command's
    output. `floors`: {(suite, machine): run-to-run floor} (`floor.load`)."""
    from .floor import floor_of
    rows, summaries = [], []
    say = progress or (lambda msg: None)
    taken = [Path(keep) / f"run-{i}" for i in range(len(runs))] if keep else []
    if any(p.exists() for p in taken):
        raise ReproduceError(f"{keep} already holds run-* directories: --keep needs a fresh "
                             "directory")
    e = dict(os.environ, **(env or {}))
    n_rec = sum(len(r.members) for r in runs)
    say(f"reproduce: {n_rec} record(s), {len(runs)} command(s) to run")
    for i, run in enumerate(runs):
        with tempfile.TemporaryDirectory(prefix="mxref-repro-") as tmp:
            out = taken[i] if keep else Path(tmp) / "out"
            argv = command_with_out(run.argv, out)
            say(f"[{i + 1}/{len(runs)}] {len(run.members)} record(s): {shlex.join(argv)}")
            for note in run.notes:
                say(f"[{i + 1}/{len(runs)}] note: {note}")
            t0 = time.monotonic()
            rc, tail = run_command(argv, cwd=cwd or REPO, env=e, timeout=timeout, echo=echo)
            secs = time.monotonic() - t0
            error = None
            if rc is None:
                error = f"the command ran past {timeout:.0f} s"
            elif rc != 0:
                error = f"the command exited {rc}"
            if error:
                log = out / "run.log"                   # the suite's own log, if it wrote one
                log_tail = log.read_text(errors="replace").splitlines()[-TAIL_LINES:] \
                    if log.is_file() else []
                error += ":\n" + "\n".join(tail + (["-- run.log:"] + log_tail if log_tail
                                                   else []))
            found = {} if error else _new_records(out)
        slugs = sorted({v["machine"]["slug"] for v in found.values()})
        for path, rec in run.members:
            row = _row(path, rec, i)
            new = found.get(key(rec))
            if error:
                row.update(status="error", reason=error.splitlines()[0])
            elif new is None:
                row.update(status="error", reason=(
                    f"the re-run wrote no record of {rec['suite']}/{rec['entry']} on "
                    f"{rec['machine']['slug']} (it wrote {len(found)} record(s) on "
                    f"{', '.join(slugs) or 'no machine'})"))
            else:
                row.update(compare(rec, new, slack=slack,
                                   floor=floor_of(floors or {}, rec)))
            rows.append(row)
        done = collections.Counter(r["status"] for r in rows if r["run"] == i)
        summaries.append({"recorded_command": run.recorded, "command": argv,
                          "notes": run.notes, "records": len(run.members), "exit": rc,
                          "seconds": round(secs, 1), "error": error, "out": str(out) if keep
                          else None})
        say(f"[{i + 1}/{len(runs)}] {secs:.0f} s: " +
            ", ".join(f"{v} {k}" for k, v in sorted(done.items())) +
            (f" ({error.splitlines()[0]})" if error else ""))
        if error:
            say(error)
    return rows, summaries


def reproduce_records(paths, *, only_needed: bool = False, allow_command: bool = False,
                      **kw) -> tuple[list[dict], list[dict]]:
    """Load the records named by `paths`, plan and execute (`execute`'s keywords). Every record
    must pass `admit` (seal, schema, a known command unless `allow_command`) before anything
    runs."""
    items = load_records(paths)
    if not items:
        raise ReproduceError("no record files under " + ", ".join(map(str, paths)))
    return execute(plan(items, only_needed=only_needed, allow_command=allow_command), **kw)


def reproduce(record: dict, *, slack: float = 1.0, timeout: float = 3600, cwd=None,
              env=None, allow_command: bool = False) -> dict:
    """One record: its row, or ReproduceError where the row would be an error."""
    (row,), (run,) = execute(plan([(None, record)], allow_command=allow_command), slack=slack,
                             timeout=timeout, cwd=cwd, env=env)
    if row["status"] == "error":
        raise ReproduceError(run["error"] or row["reason"])
    row["command"] = shlex.join(run["command"])
    return row


def exit_code(rows: list[dict]) -> int:
    """0 every record reproduced; 1 some record not reproduced; 4 some record could not be
    compared (its command failed or wrote no matching record), whatever the others did."""
    st = {r["status"] for r in rows}
    return 4 if "error" in st else 1 if "not-reproduced" in st else 0
