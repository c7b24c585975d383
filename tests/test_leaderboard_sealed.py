"""Issue 27 item 7: a sealed leaderboard.

`submit` writes and reads only inside the store (no ``..``, no absolute path, no symlink out) and
never lets one record overwrite another entry's file; `reproduce` runs only sealed, schema-valid
records, and only commands of known forms unless ``--allow-command``. Each attack plants a
marker that a successful attack would create or overwrite, and checks it is untouched.
"""
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mxref.cli import main
from mxref.errors import MXRefError
from mxref.leaderboard.record import REPO, seal
from mxref.leaderboard.reproduce import reproduce
from mxref.leaderboard.submit import Verdict, accept, check_record, store_path

sys.path.insert(0, str(Path(__file__).parent))
import test_leaderboard as tl

_record = tl._record
clean_build = tl.clean_build          # autouse: a made-up clean commit and tree
report_doc = tl.report_doc            # a passing verify report

COMMITTED = REPO / "bench" / "results" / "leaderboard" / "records"
ORIGINAL = "ORIGINAL, must survive\n"


def _marker(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ORIGINAL)
    return path


def _untouched(marker: Path) -> bool:
    return marker.read_text() == ORIGINAL


def _submit(paths, store):
    return CliRunner().invoke(main, ["leaderboard", "submit", *map(str, paths), "--store",
                                     str(store), "--json"])


# ---- submit: paths stay inside the store ------------------------------------------------------
def _with_report(tmp_path, report_doc, rel, *, evidence_at=None, entry="escaping entry"):
    """A record (sealed) whose verify.report is `rel`, with the report also written at
    `evidence_at` (where the record's own ancestors find it)."""
    p, rec = _record(tmp_path / "run", report_doc, entry=entry)
    ev = tmp_path / "run" / rec["verify"]["report"]
    rec["verify"]["report"] = rel
    seal(rec)
    p.write_text(json.dumps(rec))
    if evidence_at is not None:
        evidence_at.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ev, evidence_at)
    return p, rec, ev


def test_dotdot_evidence_is_refused_and_writes_nothing(tmp_path, report_doc):
    store = tmp_path / "store"
    victim = _marker(tmp_path / "victim.txt")               # store/../victim.txt
    # the record's ancestor run/records finds run/records/../victim.txt = run/victim.txt
    p, rec, _ = _with_report(tmp_path, report_doc, "../victim.txt",
                             evidence_at=tmp_path / "run" / "victim.txt")
    r = _submit([p], store)
    assert r.exit_code == 1, r.output
    (row,) = json.loads(r.output)["records"]
    assert not row["accepted"] and any("'..'" in x for x in row["problems"]), row
    assert _untouched(victim)
    assert not (store / "records").exists()
    # accept() itself refuses, even given a verdict that says ok
    v = Verdict(str(p), rec, evidence=tmp_path / "run" / "victim.txt")
    with pytest.raises(MXRefError, match=r"victim\.txt"):
        accept(v, store)
    assert _untouched(victim) and not (store / "records").exists()


def test_absolute_evidence_is_refused_for_reading_and_writing(tmp_path, report_doc):
    store = tmp_path / "store"
    outside = tmp_path / "elsewhere" / "report.json"
    p, rec, ev = _with_report(tmp_path, report_doc, str(outside), evidence_at=outside)
    v = check_record(p)                              # reading a file outside any store
    assert not v.ok and any("absolute" in x for x in v.problems), v.problems
    victim = _marker(tmp_path / "victim.txt")
    rec = dict(rec, verify=dict(rec["verify"], report=str(victim)))
    with pytest.raises(MXRefError, match="absolute"):
        accept(Verdict(str(p), seal(rec), evidence=ev), store)
    assert _untouched(victim) and not (store / "records").exists()


def test_symlink_out_of_the_store_is_refused(tmp_path, report_doc):
    p, rec = _record(tmp_path / "run", report_doc)
    store, out = tmp_path / "store", tmp_path / "outside"
    victim = _marker(out / Path(rec["verify"]["report"]).name)
    store.mkdir()
    os.symlink(out, store / "verify", target_is_directory=True)
    r = _submit([p], store)
    assert r.exit_code == 1, r.output
    (row,) = json.loads(r.output)["records"]
    assert not row["accepted"] and any("outside" in x for x in row["problems"]), row
    assert _untouched(victim) and not (store / "records").exists()
    # the records directory linked out, too
    os.unlink(store / "verify")
    rdest = out / "r"
    rdest.mkdir()
    os.symlink(rdest, store / "records", target_is_directory=True)
    r = _submit([p], store)
    assert r.exit_code == 1 and not list(rdest.rglob("*.json")), r.output


def test_entries_differing_in_case_do_not_overwrite_each_other(tmp_path, report_doc):
    store = tmp_path / "store"
    a, rec_a = _record(tmp_path / "a", report_doc, entry="Quantize Kernel")
    b, _ = _record(tmp_path / "b", report_doc, entry="quantize kernel",
                       repeats=(2e-2, 2.1e-2, 2.05e-2))
    assert _submit([a], store).exit_code == 0
    dest = store_path(store, rec_a)
    before = dest.read_text()
    r = _submit([b], store)
    assert r.exit_code == 1, r.output
    (row,) = json.loads(r.output)["records"]
    assert not row["accepted"] and any(str(dest) in x for x in row["problems"]), row
    assert dest.read_text() == before                 # the first record is not lost
    # a stored file whose name differs only in case is a collision too
    upper = dest.with_name(dest.name.upper())
    dest.rename(upper)
    c, _ = _record(tmp_path / "c", report_doc, entry="Quantize Kernel",
                       repeats=(3e-2, 3.1e-2, 3.05e-2))
    r = _submit([c], store)
    assert r.exit_code == 1 and "case-insensitively" in r.output, r.output
    assert upper.read_text() == before and not dest.exists()
    # the same entry submitted again replaces its own record
    upper.rename(dest)
    assert _submit([a], store).exit_code == 0


# ---- reproduce: only sealed records, only known commands --------------------------------------
def _committed():
    return sorted(COMMITTED.rglob("*.json"))


def _sealed(command) -> dict:
    """A committed (schema-valid) record with `command`, re-sealed."""
    rec = json.loads(_committed()[0].read_text())
    rec["command"] = [str(c) for c in command]
    return seal(rec)


def _writes(marker) -> list[str]:
    return [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('PWNED')"]


def _reproduce_cli(rec, tmp_path, *extra):
    p = tmp_path / "in" / "rec.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(rec))
    return CliRunner().invoke(main, ["leaderboard", "reproduce", str(p), "-q", "--json",
                                     "--no-floor", "--timeout", "60", *extra])


ATTACKS = {
    "sh -c": lambda m: ["sh", "-c", f"echo PWNED > '{m}'", "--out", "X"],
    "bash -c": lambda m: ["bash", "-c", f"echo PWNED > '{m}'", "--out", "X"],
    "absolute /bin path": lambda m: ["/bin/sh", "-c", f"echo PWNED > '{m}'", "--out", "X"],
    "python -c": lambda m: _writes(m) + ["--out", "X"],
    "script outside the repo": lambda m: [sys.executable, str(m.parent / "evil.py"), "--out",
                                         "X"],
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_unknown_commands_are_refused(tmp_path, name):
    marker = _marker(tmp_path / "marker.txt")
    (tmp_path / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('PWNED')\n")
    rec = _sealed(ATTACKS[name](marker))
    with pytest.raises(MXRefError, match="refused to run"):
        reproduce(rec, timeout=60)
    assert _untouched(marker)
    r = _reproduce_cli(rec, tmp_path)
    assert r.exit_code == 2 and "allow-command" in r.output, r.output
    assert _untouched(marker)


def test_tampered_and_unsealed_records_never_run(tmp_path):
    marker = _marker(tmp_path / "marker.txt")
    rec = _sealed(["python3", "-m", "mxref.cli", "leaderboard", "run", "cpu", "--out", "X"])
    tampered = dict(rec, command=_writes(marker) + ["--out", "X"])      # not re-sealed
    unsealed = {k: v for k, v in tampered.items() if k != "record_sha256"}
    invalid = seal(dict(tampered, created="yesterday"))               # sealed, bad schema
    for bad, why in ((tampered, "record_sha256"), (unsealed, "record_sha256"),
                     (invalid, "schema")):
        with pytest.raises(MXRefError, match=why):
            reproduce(bad, timeout=60)
        assert _untouched(marker)
        for extra in ((), ("--allow-command",)):        # --allow-command does not waive a seal
            r = _reproduce_cli(bad, tmp_path, *extra)
            assert r.exit_code == 2 and why in r.output, r.output
            assert _untouched(marker)


def test_allow_command_runs_a_sealed_unknown_command(tmp_path):
    marker = tmp_path / "ran.txt"
    rec = _sealed(_writes(marker) + ["--out", "X"])
    r = _reproduce_cli(rec, tmp_path, "--allow-command")
    assert marker.read_text() == "PWNED", r.output     # it ran (and wrote no record: error)
    assert r.exit_code == 4, r.output
    marker.unlink()
    reproduce_rows = None
    with pytest.raises(MXRefError, match="no record of"):
        reproduce_rows = reproduce(rec, timeout=60, allow_command=True)
    assert reproduce_rows is None and marker.read_text() == "PWNED"


def test_every_committed_record_stays_reproducible():
    from mxref.leaderboard import reproduce as rp
    files = _committed()
    assert len(files) >= 40
    items = [(p, json.loads(p.read_text())) for p in files]
    for p, rec in items:
        rp.admit(p, rec)                               # sealed, schema-valid, known command
    for run in rp.plan(items) + rp.plan(items, only_needed=True):
        argv = rp.command_with_out(run.argv, "/tmp/x")
        assert rp.command_problems(argv) == [], argv


def test_known_forms(tmp_path):
    from mxref.leaderboard.reproduce import command_problems
    ok = [["mxref", "leaderboard", "run", "cpu"], ["python", "-m", "mxref", "verify"],
          ["python3", "-m", "mxref.cli", "leaderboard"], [sys.executable, "-m", "mxref.cli"],
          ["python", "bench/train_step.py", "--x"], ["bash", "bench/run_cpu.sh"],
          ["bash", "scripts/gpu_leaderboard.sh"]]
    for cmd in ok:
        assert command_problems(cmd) == [], cmd
    bad = [["sh", "-c", "x"], ["bash", "-c", "x"], ["/usr/bin/python3", "-m", "mxref"],
           ["python", "-m", "os"], ["python", "-c", "1"], ["python", "../bench/x.py"],
           ["python", "bench/../../x.py"], ["python", "/tmp/x.py"], ["python", "mxref/cli.py"],
           ["bash", "bench/train_step.py"], ["python", "bench/nope.py"], ["/usr/bin/mxref"],
           ["mxref; rm -rf /"], [], "mxref leaderboard", ["python"], [1, 2]]
    for cmd in bad:
        assert command_problems(cmd), cmd


def test_reproduce_output_names_the_range():
    from mxref.leaderboard.cli import reproduce_table
    row = {"entry": "e", "unit": "ms", "status": "reproduced", "recorded_median": 1.0,
           "new_median": 1.01, "difference": 0.01, "tolerance": 0.02, "new_spread": 0.03,
           "within_range": True, "tolerance_from": "spread"}
    text = reproduce_table([row])
    assert "new rng" in text and "(max - min) / median" in text and "±" not in text
