"""The leaderboard's verified-only rule, tamper detection, regression gate and reproduce.

Records here are sealed by `make_record` around a real `mxref verify` report (numba backend,
L0 quantize_mx mxfp4/ocp); every rejection test plants one defect in an otherwise accepted record
and checks the rejection names it.
"""
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from mxref.backends.registry import get_backend
from mxref.cli import main
from mxref.leaderboard import gate as gate_mod
from mxref.leaderboard.record import (block_medians, block_sizes, blocked, file_sha256,
                                     make_record, record_hash, run_env, seal, stats)
from mxref.leaderboard.reproduce import ReproduceError, reproduce
from mxref.leaderboard.runners import train_blocks
from mxref.leaderboard.submit import accept, check_record, record_files, store_path
from mxref.verify.run import verify

COMMIT = "0123456789abcdef0123456789abcdef01234567"


TREE = "fedcba9876543210fedcba9876543210fedcba98"


@pytest.fixture(autouse=True)
def fake_suites_may_run(monkeypatch):
    """The fake suites here are neither schema-complete records nor allow-listed commands; the
    seal is still checked. test_leaderboard_sealed.py tests the whole gate."""
    from mxref.leaderboard import reproduce as _rp
    monkeypatch.setattr(_rp, "schema_problems", lambda rec: [])
    monkeypatch.setattr(_rp, "command_problems", lambda cmd, repo=None: [])


@pytest.fixture(autouse=True)
def clean_build(monkeypatch):
    """A made-up clean commit with a made-up tree. The commit is in no repository, so the
    tree check is replaced by its answer for that pair (test_leaderboard_tree.py checks real
    trees in a real repository)."""
    from mxref import provenance as rmod
    from mxref.leaderboard import submit as smod
    from mxref.verify import run as vrun
    monkeypatch.setenv("MXREF_COMMIT", COMMIT)
    monkeypatch.setenv("MXREF_DIRTY", "0")
    monkeypatch.setattr(rmod, "tree_hash", lambda root=None: TREE)
    monkeypatch.setattr(smod, "tree_problems", lambda rec, repo=None: [] if (
        rec["git"]["commit"], rec["git"]["tree"]) == (COMMIT, TREE) else ["planted: tree"])
    vrun._git.cache_clear()
    rmod._git_state.cache_clear()
    yield
    vrun._git.cache_clear()
    rmod._git_state.cache_clear()


@pytest.fixture(scope="module")
def report_doc():
    return passing_report()


def passing_report() -> dict:
    """A passing verify report (numba, L0 quantize_mx mxfp4 ocp) stamped COMMIT."""
    from mxref.verify import run as vrun
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MXREF_COMMIT", COMMIT)
        mp.setenv("MXREF_DIRTY", "0")
        vrun._git.cache_clear()
        rep = verify(get_backend("numba"), levels=(0,), ops=["quantize_mx"], formats=["mxfp4"],
                     profiles=["ocp"])
        vrun._git.cache_clear()
    assert rep.doc["status"] == "pass" and rep.doc["summary"]["passed_cases"] > 0
    return rep.doc


def _write_report(root: Path, doc: dict) -> tuple[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    raw = root / "raw.json"
    raw.write_text(json.dumps(doc))
    sha = file_sha256(raw)
    rel = f"verify/{sha}.json"
    (root / "verify").mkdir(parents=True, exist_ok=True)
    shutil.move(raw, root / rel)
    return rel, sha


def _record(root: Path, doc: dict, *, entry="quantize fp32->mxfp4 ocp rows (numba)",
            profile="ocp", repeats=(1.0e-2, 1.1e-2, 1.05e-2), accelerator=None, write=True,
            metric_extra=None):
    rel, sha = _write_report(root, doc)
    rec = make_record(
        suite="cpu-emulator", entry=entry, group="quantize", impl="mxref numba",
        op="quantize_mx", fmt="mxfp4", profile=profile, params={"shape": [64, 64]},
        metric={"name": "time per call", "unit": "s", "lower_is_better": True,
                "repeats": list(repeats), **(metric_extra or {})},
        command=["mxref", "leaderboard", "run", "cpu", "--out", "X"],
        verify={"kind": "mxref-verify", "report": rel, "sha256": sha, "status": doc["status"],
                "backend": doc["backend"]["name"],
                "cases": doc["summary"]["passed_cases"]},
        accelerator=accelerator, env=run_env(accelerator))
    if write:
        p = store_path(root, rec)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(rec))
        return p, rec
    return None, rec


def _rewrite(p: Path, rec: dict, reseal=False):
    if reseal:
        seal(rec)
    p.write_text(json.dumps(rec))


def test_valid_record_is_accepted_and_stored(tmp_path, report_doc):
    p, rec = _record(tmp_path / "run", report_doc)
    v = check_record(p)
    assert v.ok, v.problems
    dest = accept(v, tmp_path / "store")
    assert json.loads(dest.read_text()) == rec
    assert (tmp_path / "store" / rec["verify"]["report"]).is_file()
    assert check_record(dest).ok            # the stored copy validates on its own


def test_edited_median_is_rejected(tmp_path, report_doc):
    p, rec = _record(tmp_path, report_doc)
    rec["metric"]["median"] *= 0.5
    _rewrite(p, rec)
    probs = check_record(p).problems
    assert any("record_sha256 does not match" in x for x in probs), probs
    assert any("is not the median of metric.repeats" in x for x in probs), probs
    # a forger who also re-seals is still caught by the repeats
    _rewrite(p, rec, reseal=True)
    probs = check_record(p).problems
    assert not any("record_sha256" in x for x in probs)
    assert any("is not the median of metric.repeats" in x for x in probs), probs


def test_inconsistent_roofline_ratio_is_rejected(tmp_path, report_doc):
    p, rec = _record(tmp_path, report_doc)
    rec["metric"]["rate"] = 100.0
    rec["metric"]["rate_unit"] = "M elem/s"
    rec["roofline"] = {"name": "copy", "median": 1e-2, "unit": "s", "rate": 200.0,
                       "rate_unit": "M elem/s", "ratio": 0.5, "ratio_label": "of copy",
                       "basis": "rate"}
    _rewrite(p, rec, reseal=True)
    assert check_record(p).ok
    rec["roofline"]["ratio"] = 0.9                  # a better-looking ratio
    _rewrite(p, rec, reseal=True)
    assert any("roofline.ratio" in x for x in check_record(p).problems)


def test_missing_verify_is_rejected(tmp_path, report_doc):
    p, rec = _record(tmp_path, report_doc)
    (tmp_path / rec["verify"]["report"]).unlink()
    probs = check_record(p).problems
    assert probs and "not found" in probs[0], probs
    del rec["verify"]
    _rewrite(p, rec, reseal=True)
    assert any("'verify' is a required property" in x for x in check_record(p).problems)


def test_wrong_verify_hash_is_rejected(tmp_path, report_doc):
    p, rec = _record(tmp_path, report_doc)
    ev = tmp_path / rec["verify"]["report"]
    doc = json.loads(ev.read_text())
    doc["summary"]["passed_cases"] += 1            # an edited report
    ev.write_text(json.dumps(doc))
    probs = check_record(p).problems
    assert any("hashes to" in x for x in probs), probs


def test_failing_verify_is_rejected(tmp_path, report_doc):
    doc = json.loads(json.dumps(report_doc))
    doc["status"] = "fail"
    doc["files"][0]["status"] = "fail"
    doc["files"][0]["mismatch"] = 1
    p, rec = _record(tmp_path, doc)
    probs = check_record(p).problems
    assert any("verify.status is 'fail'" in x for x in probs), probs
    rec["verify"]["status"] = "pass"                 # lie about it in the record
    _rewrite(p, rec, reseal=True)
    probs = check_record(p).problems
    assert any("report's status is 'fail'" in x for x in probs), probs
    assert any("verify failed files" in x for x in probs), probs


def test_verify_of_another_profile_is_rejected(tmp_path, report_doc):
    p, _ = _record(tmp_path, report_doc, profile="rceil")
    probs = check_record(p).problems
    assert any("no passing verify of quantize_mx mxfp4 rceil" in x for x in probs), probs


def test_foreign_backend_and_golden_are_rejected(tmp_path, report_doc):
    doc = json.loads(json.dumps(report_doc))
    doc["backend"]["name"] = "torch"
    doc["golden"]["manifest_sha256"] = "0" * 64
    p, rec = _record(tmp_path, doc)
    rec["verify"]["backend"] = "numba"
    _rewrite(p, rec, reseal=True)
    probs = check_record(p).problems
    assert any("of backend 'torch'" in x for x in probs), probs
    assert any("different golden suite" in x for x in probs), probs


def test_stale_suite_and_dirty_tree_are_rejected(tmp_path, report_doc):
    p, rec = _record(tmp_path, report_doc)
    rec["golden"]["suite_version"] = "2000.1.1"
    rec["git"]["dirty"] = True
    _rewrite(p, rec, reseal=True)
    probs = check_record(p).problems
    assert any("this store is on" in x for x in probs), probs
    assert any("dirty tree" in x for x in probs), probs
    assert not any("dirty" in x for x in check_record(p, allow_dirty=True).problems)


def test_verify_of_another_commit_is_rejected(tmp_path, report_doc):
    doc = json.loads(json.dumps(report_doc))
    doc["env"]["commit"] = "f" * 40
    p, _ = _record(tmp_path, doc)
    assert any("run at commit ffffffffff" in x for x in check_record(p).problems)


def test_not_a_record(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{broken")
    assert "cannot read a JSON record" in check_record(p).problems[0]
    p.write_text(json.dumps({"schema": "something-else"}))
    assert "not a mxref-leaderboard/1 record" in check_record(p).problems[0]


def test_cli_submit_exit_codes_and_json(tmp_path, report_doc):
    good, _ = _record(tmp_path / "run", report_doc)
    bad, rec = _record(tmp_path / "run", report_doc, entry="tampered")
    rec["metric"]["repeats"][0] = 1.0
    _rewrite(bad, rec)
    r = CliRunner().invoke(main, ["leaderboard", "submit", str(tmp_path / "run"), "--store",
                                  str(tmp_path / "store"), "--json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output)
    assert (doc["accepted"], doc["rejected"]) == (1, 1)
    stored = list((tmp_path / "store" / "records").rglob("*.json"))
    assert [s.name for s in stored] == [good.name]
    r = CliRunner().invoke(main, ["leaderboard", "submit", str(good), "--store",
                                  str(tmp_path / "store")])
    assert r.exit_code == 0 and "1 accepted, 0 rejected" in r.output


H100 = {"name": "NVIDIA H100 80GB HBM3", "runtime": "CUDA 12.8", "driver": "570",
        "clocks": None, "sms": 132, "memory_gib": 79.1}


def test_gate(tmp_path, report_doc):
    base, _ = _record(tmp_path / "base", report_doc, repeats=(1.00, 1.02, 0.98),
                      accelerator=H100)                 # spread 4%
    ok, _ = _record(tmp_path / "ok", report_doc, repeats=(1.03, 1.04, 1.02), accelerator=H100)
    slow, _ = _record(tmp_path / "slow", report_doc, repeats=(1.10, 1.11, 1.09),
                      accelerator=H100)
    other, _ = _record(tmp_path / "other", report_doc, repeats=(3.0, 3.0, 3.0),
                       accelerator=dict(H100, name="NVIDIA H200"))
    rows = {r["status"] for r in gate_mod.gate([ok], tmp_path / "base")}
    assert rows == {"ok"}
    (row,) = gate_mod.gate([slow], tmp_path / "base")
    assert row["status"] == "regression" and row["change"] == pytest.approx(0.10)
    assert row["tolerance"] == pytest.approx(0.04)
    (row,) = gate_mod.gate([other], tmp_path / "base")
    assert row["status"] == "no-baseline"           # another GPU model is never compared
    r = CliRunner().invoke(main, ["leaderboard", "gate", str(slow), "--baseline",
                                  str(tmp_path / "base")])
    assert r.exit_code == 1 and "regression" in r.output
    r = CliRunner().invoke(main, ["leaderboard", "gate", str(ok), "--baseline",
                                  str(tmp_path / "base")])
    assert r.exit_code == 0, r.output


FAKE_RUNNER = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    from mxref.leaderboard.record import make_record
    from mxref.leaderboard.submit import store_path
    out = Path(sys.argv[sys.argv.index("--out") + 1])
    med = float(os.environ["FAKE_MEDIAN"])
    rec = make_record(suite="cpu-emulator", entry=sys.argv[1], group="quantize", impl="fake",
                      op="quantize_mx", fmt="mxfp4", profile="ocp", params={},
                      metric={"name": "t", "unit": "s", "lower_is_better": True,
                              "repeats": [med * 0.99, med, med * 1.01]},
                      command=sys.argv, verify={"kind": "mxref-verify", "report": "verify/x",
                                                "sha256": "0" * 64, "status": "pass",
                                                "backend": "numba"})
    p = store_path(out, rec)
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(rec))
""")


def test_reproduce(tmp_path):
    script = tmp_path / "fake_runner.py"
    script.write_text(FAKE_RUNNER)
    _, rec = _record_fake(tmp_path, script)
    res = reproduce(rec, env={"FAKE_MEDIAN": "1.015"})          # 1.5% off, spread 2%
    assert res["status"] == "reproduced" and res["difference"] == pytest.approx(0.015)
    res = reproduce(rec, env={"FAKE_MEDIAN": "1.5"})
    assert res["status"] == "not-reproduced"
    with pytest.raises(ReproduceError, match="no record of"):
        reproduce(seal(dict(rec, entry="another")), env={"FAKE_MEDIAN": "1"})
    with pytest.raises(ReproduceError, match="no --out"):
        reproduce(seal(dict(rec, command=["true"])))
    with pytest.raises(ReproduceError, match="exited 1"):
        reproduce(seal(dict(rec, command=[sys.executable, "-c", "import sys; sys.exit(1)",
                                          "--out", "x"])))


def _record_fake(tmp_path, script):
    rec = make_record(suite="cpu-emulator", entry="fake entry", group="quantize", impl="fake",
                      op="quantize_mx", fmt="mxfp4", profile="ocp", params={},
                      metric={"name": "t", "unit": "s", "lower_is_better": True,
                              "repeats": [0.99, 1.0, 1.01]},
                      command=[sys.executable, str(script), "fake entry", "--out", "X"],
                      verify={"kind": "mxref-verify", "report": "verify/x", "sha256": "0" * 64,
                              "status": "pass", "backend": "numba"})
    return None, rec


def test_record_files_and_hash_are_stable(tmp_path, report_doc):
    p, rec = _record(tmp_path, report_doc)
    assert record_files([tmp_path]) == [p]
    again = json.loads(json.dumps(rec, indent=3))
    assert record_hash(again) == rec["record_sha256"]


def test_edited_spread_and_time_ratio_are_rejected(tmp_path, report_doc):
    p, rec = _record(tmp_path, report_doc)
    rec["metric"]["spread"] = 0.01                     # a tighter-looking spread, re-sealed
    _rewrite(p, rec, reseal=True)
    assert any("metric.spread" in x for x in check_record(p).problems)
    p, rec = _record(tmp_path, report_doc, entry="time basis")
    rec["roofline"] = {"name": "bf16 step", "median": 5e-3, "unit": "s", "ratio": 2.1,
                       "ratio_label": "x bf16 step time", "basis": "time"}   # truly 2.1
    _rewrite(p, rec, reseal=True)
    assert check_record(p).ok
    rec["roofline"]["ratio"] = 1.05
    _rewrite(p, rec, reseal=True)
    assert any("metric.median / roofline.median" in x for x in check_record(p).problems)


def test_make_record_derives_rate_and_ratio():
    rec = make_record(suite="training", entry="e", group="train", impl="x", op="train-step",
                      fmt="r", profile="recipe", params={},
                      metric={"name": "step", "unit": "s", "lower_is_better": True,
                              "repeats": [0.2, 0.4, 0.3], "work": 6000, "rate_unit": "tok/s"},
                      roofline={"name": "bf16", "median": 0.1, "unit": "s", "basis": "time",
                                "ratio_label": "x bf16"},
                      command=["x"], verify={"kind": "in-run-validation", "report": "v",
                                             "sha256": "0" * 64, "status": "pass",
                                             "backend": "b"})
    assert rec["metric"]["median"] == 0.3 and rec["metric"]["rate"] == pytest.approx(20000)
    assert "work" not in rec["metric"] and rec["roofline"]["ratio"] == pytest.approx(3.0)
    assert rec["metric"]["spread"] == pytest.approx(0.2 / 0.3)


# --- repeats as medians of blocks of single samples ------------------------------------------
def test_block_medians_edge_cases():
    assert block_sizes(11, 3) == [4, 4, 3]              # near-equal, the larger blocks first
    assert block_sizes(10, 5) == [2, 2, 2, 2, 2]
    assert block_sizes(2, 5) == [1, 1]                  # fewer samples than blocks: one each
    # in time order, not sorted: [1, 2, 3, 4] [5, 6, 7, 8] [9, 10, 11]
    assert block_medians(list(range(1, 12)), 3) == [2.5, 6.5, 10.0]
    assert block_medians([9.0, 1.0, 2.0, 8.0], 2) == [5.0, 5.0]
    assert block_medians([3.0, 1.0], 5) == [3.0, 1.0]
    assert block_medians([0.7], 3) == [0.7]             # one sample, one repeat
    assert block_medians([5.0, 1.0, 3.0, 2.0, 9.0, 4.0], 2) == [3.0, 4.0]
    with pytest.raises(ValueError):
        block_medians([], 3)
    # per process: each run is cut on its own, the runs kept in order
    got = blocked([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0]], 2)
    assert got == {"samples": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], "blocks": [2, 2, 2, 1],
                   "repeats": [1.5, 3.5, 5.5, 7.0], "samples_per_repeat": 1}


# 20 step times at about 0.25 s; three outlier steps (1.9, 1.9, 1.95 s) fall in blocks 0, 1
# and 3 of 5 steps, and block 2 is truly slower (0.27 s). Worked by hand: the block medians
# are 0.25, 0.25, 0.27, 0.25, so the spread is 0.02 / 0.25 = 8%; over single steps it was
# (1.95 - 0.24) / 0.26 (the 10th and 11th of the 20 sorted steps are both 0.26) = 658%.
OUTLIER_STEPS = [0.25, 0.24, 1.9, 0.26, 0.25,
                 0.25, 0.26, 0.24, 1.9, 0.25,
                 0.27, 0.26, 0.27, 0.28, 0.27,
                 0.26, 0.25, 1.95, 0.24, 0.25]


def test_outlier_steps_do_not_set_the_spread():
    got = train_blocks(OUTLIER_STEPS)                   # the default: blocks of 5 steps
    assert got["blocks"] == [5, 5, 5, 5] and got["samples_per_repeat"] == 5
    assert got["repeats"] == [0.25, 0.25, 0.27, 0.25]
    assert stats(got["repeats"])["spread"] == pytest.approx(0.08)
    per_step = stats(OUTLIER_STEPS)["spread"]       # the old repeats: one step each
    assert per_step == pytest.approx((1.95 - 0.24) / 0.26) and per_step > 6.0
    # 17 timed steps: 3 blocks of 6, 6, 5 (at least 5 steps each); 4 steps: one block
    assert train_blocks(OUTLIER_STEPS[:17])["blocks"] == [6, 6, 5]
    assert train_blocks(OUTLIER_STEPS[:4])["blocks"] == [4]


# samples in time order and blocks of 3, 2, 2; repeats worked by hand: median(1.0, 1.2, 1.1),
# median(0.9, 1.0), median(5.0, 1.05) (x 1e-2)
SAMPLES = [1.0e-2, 1.2e-2, 1.1e-2, 0.9e-2, 1.0e-2, 5.0e-2, 1.05e-2]
BLOCKED = {"samples": SAMPLES, "blocks": [3, 2, 2], "samples_per_repeat": 2}
BLOCK_REPEATS = (1.1e-2, 0.95e-2, 3.025e-2)


def test_samples_that_do_not_give_the_repeats_are_rejected(tmp_path, report_doc):
    p, rec = _record(tmp_path, report_doc, repeats=BLOCK_REPEATS, metric_extra=BLOCKED)
    assert check_record(p).ok, check_record(p).problems
    orig = json.loads(json.dumps(rec))

    def tampered(edit):
        r = json.loads(json.dumps(orig))
        edit(r)
        _rewrite(p, r, reseal=True)                     # re-sealed: only the numbers speak
        return check_record(p).problems

    # a sample edited so block 0's median moves (1.0, 1.2, 2.0 -> 1.2)
    probs = tampered(lambda r: r["metric"]["samples"].__setitem__(2, 2.0e-2))
    assert any(x.startswith("metric.repeats[0]") and "metric.samples" in x
               for x in probs), probs
    # a sample edited inside its block's median (1.0, 1.3, 1.1 -> 1.1): the repeats still hold
    assert not tampered(lambda r: r["metric"]["samples"].__setitem__(1, 1.3e-2))
    # other blocks: [1.0, 1.2] [1.1, 0.9, 1.0] [5.0, 1.05] give 1.1, 1.0, 3.025
    probs = tampered(lambda r: r["metric"].__setitem__("blocks", [2, 3, 2]))
    assert any(x.startswith("metric.repeats[1]") and "metric.blocks" in x
               for x in probs), probs
    probs = tampered(lambda r: r["metric"].__setitem__("blocks", [3, 3, 2]))
    assert any("metric.blocks [3, 3, 2] sum to 8" in x for x in probs), probs
    probs = tampered(lambda r: r["metric"].__setitem__("samples_per_repeat", 1))
    assert any("metric.samples_per_repeat" in x for x in probs), probs
    probs = tampered(lambda r: r["metric"].pop("blocks"))
    assert any(x.startswith("metric:") and "'blocks' is a dependency of 'samples'" in x
               for x in probs), probs
    # the roofline's samples: a time-basis roofline whose repeats are its block medians
    roof = {"name": "bf16 step", "unit": "s", "ratio_label": "x bf16", "basis": "time",
            "samples": [4.0e-3, 6.0e-3, 5.0e-3, 5.0e-3], "blocks": [2, 2],
            "repeats": [5.0e-3, 5.0e-3], "median": 5.0e-3, "ratio": 1.1e-2 / 5.0e-3}
    probs = tampered(lambda r: r.__setitem__("roofline", roof))
    assert not probs, probs
    probs = tampered(lambda r: r.__setitem__("roofline", dict(roof, samples=[
        4.0e-3, 6.0e-3, 5.0e-3, 7.0e-3])))
    assert any(x.startswith("roofline.repeats[1]") for x in probs), probs
    probs = tampered(lambda r: r.__setitem__("roofline", dict(
        roof, median=4.0e-3, ratio=1.1e-2 / 4.0e-3)))
    assert any("roofline.median" in x for x in probs), probs
