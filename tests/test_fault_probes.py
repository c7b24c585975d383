"""scripts/fault_probes.py: the classifier on synthetic runs, and the probe table's shape.

The probes themselves are not run here (minutes of subprocesses); each verdict the harness can
give is produced from a made-up `Run`, so a classifier that stops seeing a fault fails here.
"""
import importlib.util
import sys
from pathlib import Path

import pytest

_path = Path(__file__).resolve().parent.parent / "scripts" / "fault_probes.py"
_spec = importlib.util.spec_from_file_location("fault_probes", _path)
fp = importlib.util.module_from_spec(_spec)
sys.modules["fault_probes"] = fp
_spec.loader.exec_module(fp)
Run = fp.Run

TB = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
      "ValueError: boom\n")


def verdict(expect, run, reason=None):
    return fp.classify(expect, reason, run)[0]


def test_expected_exit_with_the_reason_is_correct():
    run = Run(3, err="FAIL corpus/x.arrow: sha256 content: decoded content differs\n")
    assert fp.classify((3,), r"content", run) == (
        "correct", "FAIL corpus/x.arrow: sha256 content: decoded content differs")
    assert verdict((0,), Run(0, out="ok\n")) == "correct"


def test_refusal_for_another_reason_or_code_is_a_typed_error():
    assert verdict((3,), Run(3, err="FAIL generator source hash\n"), r"content") == "typed error"
    assert verdict((4,), Run(1, err="error: backend failed\n"), r"backend") == "typed error"
    assert verdict((0,), Run(2, err="error: CheckpointError: corrupt\n")) == "typed error"


def test_traceback_or_signal_is_a_crash():
    assert verdict((1,), Run(1, err=TB), r"boom") == "crash"        # even with the "right" exit
    assert verdict((2,), Run(0, out=TB)) == "crash"
    v, detail = fp.classify((1,), None, Run(-11))
    assert v == "crash" and "SIGSEGV" in detail
    assert verdict((1,), Run(1), r"SIGSEGV") == "crash"             # died with no message
    assert verdict((2,), Run(1)) == "crash"


def test_exit_0_where_a_failure_was_due_is_silent_wrong():
    assert verdict((1,), Run(0, out="Summary: 0 cases; exit 0\n")) == "silent wrong"
    assert verdict((2,), Run(0)) == "silent wrong"
    # the right exit code with a wrong result (stdout not JSON, resumed from step 0)
    assert verdict((0, 1), Run(1, wrong="stdout is not one JSON document")) == "silent wrong"


def test_timeout_is_a_hang():
    assert verdict((1,), Run(None, seconds=60.0)) == "hang"


def test_changed_victim_or_lost_report_is_data_loss():
    assert verdict((2,), Run(2, err="error: refused\n", changed=["victim.txt"])) == "data loss"
    assert verdict((0,), Run(0, lost="exit 0 but r.json was not written")) == "data loss"
    assert verdict((1,), Run(None, changed=["victim.txt"])) == "data loss"   # outranks hang


def test_marker_is_command_execution_whatever_else_happened():
    for run in (Run(2, err="error: refused\n", marker=True), Run(0, marker=True),
                Run(None, marker=True, changed=["v"]), Run(1, err=TB, marker=True)):
        assert verdict((2,), run) == "command execution"


def test_victims_and_marker_are_measured_on_disk(tmp_path, monkeypatch):
    """run_probe end to end on a tiny python -c probe: a victim it rewrites and a marker it
    creates are seen (hash before/after, existence), and the verdict follows."""
    monkeypatch.setattr(fp, "FIX", None)
    code = ("import sys; open('victim.txt', 'w').write('x'); "
            "open(sys.argv[1], 'w').close() if sys.argv[1:] else None")

    def probe(pid, *extra):
        return fp.Probe(pid, "cli", "synthetic", lambda d: fp.snippet(code, *extra),
                        expect=(2,), setup=fp._setup_victim("victim.txt"), victims=("victim.txt",))
    row = fp.run_probe(probe("loss"), tmp_path)
    assert row["verdict"] == "data loss" and "victim.txt" in row["detail"]
    row = fp.run_probe(probe("exec", fp.MARKER), tmp_path)
    assert row["verdict"] == "command execution"
    hang = fp.Probe("hang", "cli", "synthetic", lambda d: fp.snippet("import time; time.sleep(30)"),
                    expect=(1,), timeout=1)
    assert fp.run_probe(hang, tmp_path)["verdict"] == "hang"


def test_probe_table_ids_unique_and_every_category_present():
    ids = [p.id for p in fp.PROBES]
    assert len(ids) == len(set(ids))
    assert {p.category for p in fp.PROBES} == set(fp.CATEGORIES)
    for p in fp.PROBES:
        assert p.expect and all(isinstance(c, int) for c in p.expect), p.id
        assert p.category in fp.CATEGORIES and p.description, p.id


@pytest.mark.parametrize("verdict_", sorted(fp.BAD))
def test_report_and_exit_code_gate_on_bad_verdicts(tmp_path, monkeypatch, verdict_):
    """main() exits 1 when a probe's verdict is bad, 0 when all are correct; the md and JSON
    reports count it."""
    import json

    def fake(p, root):
        v = verdict_ if p.id == "a" else "correct"
        return {"id": p.id, "category": p.category, "description": "d", "expected": "exit 1",
                "verdict": v, "exit": 1, "seconds": 0.0, "detail": "x"}
    probes = [fp.Probe(i, "api", "d", lambda d: [], expect=(1,)) for i in ("a", "b")]
    monkeypatch.setattr(fp, "PROBES", probes)
    monkeypatch.setattr(fp, "run_probe", fake)
    monkeypatch.setattr(fp, "has_option", lambda *a: False)
    assert fp.main(["--out", str(tmp_path)]) == 1
    doc = json.loads((tmp_path / "fault_probes.json").read_text())
    assert doc["counts"]["total"][verdict_] == 1 and doc["counts"]["api"]["correct"] == 1
    assert f"**{verdict_}**" in (tmp_path / "fault_probes.md").read_text()
    assert fp.main(["--out", str(tmp_path), "--probe", "b"]) == 0


def test_api_probe_that_returns_an_array_is_silent_wrong_not_a_harness_crash(tmp_path):
    """An API call that answers where a refusal was due is read as silent wrong, whatever it
    returns (an ndarray's == is elementwise); a typed refusal is correct."""
    p = fp.api("returns", "an array instead of a refusal", "return np.zeros(3)")
    row = fp.run_probe(p, tmp_path)
    assert row["verdict"] == "silent wrong" and "array" in row["detail"], row
    p = fp.api("refuses", "a typed refusal",
               "return mxref.quantize(np.ones((1, 32), np.float32), 'mxfp3')")
    assert fp.run_probe(p, tmp_path)["verdict"] == "correct"
