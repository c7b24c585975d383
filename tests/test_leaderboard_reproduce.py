"""`mxref leaderboard reproduce` over many records: one run per distinct command, a verdict per
record against the re-run's record of the same suite / entry / machine, exit codes, --json.

The recorded command is a fake suite (a small script written to tmp) that writes records of the
medians it is told (FAKE_MEDIANS) and appends its argv to FAKE_RUNS, so a test can count runs.
"""
import json
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from mxref.cli import main
from mxref.leaderboard import reproduce as rp
from mxref.leaderboard import runners
from mxref.leaderboard.record import machine, make_record, seal
from mxref.leaderboard.reproduce import ReproduceError, reproduce, reproduce_records
from mxref.leaderboard.submit import store_path

GPU = {"name": "Fake GPU 80GB"}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def fake_suites_may_run(monkeypatch):
    """The fake suites here are neither schema-complete records nor allow-listed commands; the
    seal is still checked. test_leaderboard_sealed.py tests the whole gate."""
    from mxref.leaderboard import reproduce as _rp
    monkeypatch.setattr(_rp, "schema_problems", lambda rec: [])
    monkeypatch.setattr(_rp, "command_problems", lambda cmd, repo=None: [])
FAKE_SUITE = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from mxref.leaderboard.record import machine, make_record
    from mxref.leaderboard.submit import store_path
    argv = sys.argv[1:]
    with open(os.environ["FAKE_RUNS"], "a") as f:
        f.write(json.dumps(argv) + "\\n")
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
    print("fake suite running", flush=True)
    if os.environ.get("FAKE_EXIT"):
        print("fake suite failed", file=sys.stderr)
        sys.exit(int(os.environ["FAKE_EXIT"]))
    out = Path(argv[argv.index("--out") + 1])
    only = [argv[i + 1] for i, a in enumerate(argv) if a == "--kernel"]
    env = {"machine": machine({"name": os.environ.get("FAKE_GPU", "Fake GPU 80GB")}),
           "packages": {}, "golden": {"suite": "s", "suite_version": "1",
                                      "manifest_sha256": "0" * 64},
           "git": {"commit": "f" * 40, "dirty": True, "tree": None}, "created": "now"}
    for entry, med in json.loads(os.environ["FAKE_MEDIANS"]).items():
        if only and entry not in only:
            continue
        rec = make_record(suite="gpu-kernels", entry=entry, group="quantize", impl="fake",
                          op="quantize_mx", fmt="mxfp4", profile="ocp", params={},
                          metric={"name": "t", "unit": "ms", "lower_is_better": True,
                                  "repeats": [med * 0.995, med, med * 1.005]},
                          command=["python3"] + argv,
                          verify={"kind": "mxref-verify", "report": "verify/x",
                                  "sha256": "0" * 64, "status": "pass", "backend": "triton"},
                          env=env)
        p = store_path(out, rec)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(rec))
""")


@pytest.fixture
def suite(tmp_path, monkeypatch):
    """The fake suite's script; FAKE_RUNS is where its invocations are counted."""
    script = tmp_path / "fake_suite.py"
    script.write_text(FAKE_SUITE)
    monkeypatch.setenv("FAKE_RUNS", str(tmp_path / "runs.jsonl"))
    monkeypatch.delenv("FAKE_EXIT", raising=False)
    return script


def runs_made(tmp_path) -> list[list[str]]:
    p = tmp_path / "runs.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def recorded(root: Path, script, entry, median, *, out="X", spread_step=0.01, gpu=GPU,
             extra=()) -> Path:
    """A record of `entry` with repeats median x (1 - step, 1, 1 + step): spread 2 x step."""
    env = {"machine": machine(gpu), "packages": {}, "golden": {
        "suite": "s", "suite_version": "1", "manifest_sha256": "0" * 64},
        "git": {"commit": COMMIT, "dirty": False, "tree": None}, "created": "then"}
    rec = make_record(suite="gpu-kernels", entry=entry, group="quantize", impl="fake",
                      op="quantize_mx", fmt="mxfp4", profile="ocp", params={},
                      metric={"name": "t", "unit": "ms", "lower_is_better": True,
                              "repeats": [median * (1 - spread_step), median,
                                          median * (1 + spread_step)]},
                      command=[sys.executable, str(script), "leaderboard", "run", "gpu",
                               "--out", out, "--size", "8", *extra],
                      verify={"kind": "mxref-verify", "report": "verify/x", "sha256": "0" * 64,
                              "status": "pass", "backend": "triton"}, env=env)
    p = store_path(root, rec)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(rec))
    return p


def cli(args, medians, **env):
    env = {"FAKE_MEDIANS": json.dumps(medians), **env}
    return CliRunner().invoke(main, ["leaderboard", "reproduce", *map(str, args)], env=env,
                              catch_exceptions=False)


RECORDED = {"a": 1.0, "b": 2.0, "c": 4.0}


def each_row_is_its_own_entry(rows, new_medians) -> bool:
    """Every row compared its record with the re-run's record of the same entry."""
    return all(r["new_median"] == new_medians[r["entry"]] and
               r["recorded_median"] == RECORDED[r["entry"]] for r in rows)


def test_one_run_for_many_records_and_a_verdict_each(tmp_path, suite, monkeypatch):
    store = tmp_path / "store"
    for e, m in RECORDED.items():            # the --out each was written to does not matter
        recorded(store, suite, e, m, out=f"/somewhere/{e}")
    new = {"a": 1.015, "b": 2.5, "c": 3.98}   # a: 1.5% off, spread 2%; b: 25% off; c: -0.5%
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps(new))
    rows, runs = reproduce_records([store])
    assert len(runs_made(tmp_path)) == 1 and len(runs) == 1 and runs[0]["records"] == 3
    assert each_row_is_its_own_entry(rows, new)
    st = {r["entry"]: r["status"] for r in rows}
    assert st == {"a": "reproduced", "b": "not-reproduced", "c": "reproduced"}
    a = next(r for r in rows if r["entry"] == "a")
    assert a["difference"] == pytest.approx(0.015) and a["tolerance"] == pytest.approx(0.02)
    assert a["new_spread"] == pytest.approx(0.01)
    # the re-run's git (another commit, dirty) is reported and decides nothing
    assert a["new_git"]["commit"] == "f" * 40 and a["recorded_commit"] == COMMIT


def test_a_planted_wrong_entry_comparison_is_caught(tmp_path, suite, monkeypatch):
    store = tmp_path / "store"
    for e, m in RECORDED.items():
        recorded(store, suite, e, m)
    new = {"a": 1.0, "b": 2.0, "c": 4.0}
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps(new))
    rows, _ = reproduce_records([store])
    assert each_row_is_its_own_entry(rows, new)
    assert {r["status"] for r in rows} == {"reproduced"}
    # the bug: re-run records matched by suite and machine only (entry forgotten)
    monkeypatch.setattr(rp, "key", lambda rec: (rec["suite"], rec["machine"]["slug"]))
    rows, _ = reproduce_records([store])
    assert not each_row_is_its_own_entry(rows, new)
    assert {r["status"] for r in rows} != {"reproduced"}


def test_cli_table_json_and_exit_codes(tmp_path, suite):
    store = tmp_path / "store"
    for e, m in RECORDED.items():
        recorded(store, suite, e, m)
    r = cli([store], RECORDED)                                   # all reproduced
    assert r.exit_code == 0, r.output
    assert "3 reproduced, 0 not reproduced, 0 error(s) in 3 record(s), 1 command(s)" in r.stdout
    assert "[1/1] 3 record(s):" in r.stderr                      # progress on stderr
    assert "fake suite running" in r.stderr                      # the command's output
    r = cli([store, "--json", "-q"], dict(RECORDED, b=2.5))
    assert r.exit_code == 1 and not r.stderr
    doc = json.loads(r.stdout)
    assert doc["exit"] == 1 and doc["summary"] == {"records": 3, "commands": 1,
                                                   "reproduced": 2, "not-reproduced": 1,
                                                   "error": 0}
    row = next(x for x in doc["rows"] if x["entry"] == "b")
    assert row["status"] == "not-reproduced" and row["within_spread"] is False
    assert set(row) >= {"path", "suite", "entry", "machine", "unit", "recorded_median",
                        "recorded_spread", "new_median", "new_spread", "difference",
                        "tolerance", "widened_range", "within_range", "status", "run"}
    (run,) = doc["runs"]
    assert run["exit"] == 0 and run["records"] == 3 and "--out" in run["command"]
    # --slack widens the rule: 25% off with spread 2% passes at slack 13
    assert cli([store, "-q", "--slack", "13"], dict(RECORDED, b=2.5)).exit_code == 0
    # the command fails: exit 4, every record of it an error, its output in the reason / log
    r = cli([store, "--json", "-q"], RECORDED, FAKE_EXIT="3")
    doc = json.loads(r.stdout)
    assert r.exit_code == 4 and {x["status"] for x in doc["rows"]} == {"error"}
    assert "exited 3" in doc["rows"][0]["reason"]
    assert "fake suite failed" in doc["runs"][0]["error"]
    # not a record: exit 2, nothing run
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    n = len(runs_made(tmp_path))
    r = cli([bad], RECORDED)
    assert r.exit_code == 2 and "not a leaderboard record" in r.stderr
    assert len(runs_made(tmp_path)) == n


def test_table_lines(tmp_path, suite):
    store = tmp_path / "store"
    for e, m in RECORDED.items():
        recorded(store, suite, e, m)
    out = cli([store, "-q"], dict(RECORDED, b=2.5)).stdout.splitlines()
    b = next(x for x in out if x.startswith("b "))
    assert "2 ms" in b and "2.5 ms" in b and "+25.00%" in b and "2.00%" in b
    assert b.rstrip().endswith("out  not-reproduced")
    a = next(x for x in out if x.startswith("a "))
    assert a.rstrip().endswith("in  reproduced")


def test_a_command_without_out_is_a_typed_error_before_anything_runs(tmp_path, suite):
    store = tmp_path / "store"
    recorded(store, suite, "a", 1.0)
    p = recorded(tmp_path / "other", suite, "b", 2.0)
    rec = json.loads(p.read_text())
    rec["command"] = [x for x in rec["command"] if x not in ("--out", "X")]
    p.write_text(json.dumps(seal(rec)))
    with pytest.raises(ReproduceError, match="no --out"):
        reproduce_records([store, p])
    assert runs_made(tmp_path) == []
    r = cli([store, p], RECORDED)
    assert r.exit_code == 2 and "no --out" in r.stderr


def test_missing_record_and_other_machine_are_errors(tmp_path, suite):
    store = tmp_path / "store"
    recorded(store, suite, "a", 1.0)
    recorded(store, suite, "z", 1.0)                         # the re-run does not write z
    recorded(store, suite, "a", 1.0, gpu={"name": "Other GPU"})   # same command, other GPU
    r = cli([store, "--json", "-q"], {"a": 1.0})
    doc = json.loads(r.stdout)
    assert r.exit_code == 4 and len(runs_made(tmp_path)) == 1
    st = {(x["entry"], x["machine"]): x["status"] for x in doc["rows"]}
    assert st == {("a", "fake-gpu-80gb"): "reproduced", ("z", "fake-gpu-80gb"): "error",
                  ("a", "other-gpu"): "error"}
    other = next(x for x in doc["rows"] if x["machine"] == "other-gpu")
    assert "no record of gpu-kernels/a on other-gpu" in other["reason"]
    assert "on fake-gpu-80gb" in other["reason"]


def test_distinct_commands_run_once_each(tmp_path, suite, monkeypatch):
    store = tmp_path / "store"
    recorded(store, suite, "a", 1.0)
    recorded(store, suite, "b", 2.0)
    recorded(tmp_path / "s2", suite, "c", 4.0, extra=("--repeats", "5"))
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps(RECORDED))
    # a file given twice (by itself and through its directory) is one record
    rows, runs = reproduce_records([store, tmp_path / "s2", *sorted(store.rglob("*.json"))])
    assert len(rows) == 3 and len(runs) == 2 and len(runs_made(tmp_path)) == 2
    assert sorted(r["records"] for r in runs) == [1, 2]


def test_only_needed_runs_only_the_entries_asked_for(tmp_path, suite, monkeypatch):
    store = tmp_path / "store"
    for e, m in RECORDED.items():
        recorded(store, suite, e, m)
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps(RECORDED))
    want = [p for p in store.rglob("*.json") if p.stem in ("a", "c")]
    rows, _ = reproduce_records(want, only_needed=True)
    (argv,) = runs_made(tmp_path)
    assert [argv[i + 1] for i, x in enumerate(argv) if x == "--kernel"] == ["a", "c"]
    assert {r["entry"]: r["status"] for r in rows} == {"a": "reproduced", "c": "reproduced"}
    # without it, the recorded command runs as it is (every kernel)
    reproduce_records(want)
    assert "--kernel" not in runs_made(tmp_path)[-1]


def test_narrowed_commands():
    gpu = ["python3", "-m", "mxref.cli", "leaderboard", "run", "gpu", "--out", "O",
           "--size", "8192", "--kernel", "old"]
    assert rp.narrowed(gpu, [{"entry": "y"}, {"entry": "x"}, {"entry": "y"}]) == \
        gpu[:-2] + ["--kernel", "x", "--kernel", "y"]
    train = ["python3", "-m", "mxref.cli", "leaderboard", "run", "train", "--out", "O",
             "--recipes", "mxfp4-fdw,nvfp4-te,quartet", "--tokens", "8"]
    recs = [{"entry": "m quartet", "params": {"recipe": "quartet"}},
            {"entry": "m mxfp4-fdw", "params": {"recipe": "mxfp4-fdw"}}]
    assert rp.narrowed(train, recs) == train[:8] + ["--tokens", "8", "--recipes",
                                                    "mxfp4-fdw,quartet"]
    old_train = train[:8]                  # recorded before --recipes was spelled out
    assert rp.narrowed(old_train, recs[:1]) == old_train + ["--recipes", "quartet"]
    cpu = ["python3", "-m", "mxref.cli", "leaderboard", "run", "cpu", "--out", "O"]
    assert rp.narrowed(cpu, [{"entry": "e"}]) == cpu


def test_compare_rule_and_widened_range():
    rec = {"metric": {"median": 1.0, "repeats": [0.99, 1.0, 1.01], "spread": 0.02}}

    def new(med, spread):
        return {"metric": {"median": med, "repeats": [med] * 3, "spread": spread}}
    v = rp.compare(rec, new(1.02, 0.0))
    assert v["status"] == "reproduced" and v["within_range"] is False      # 1.02 > max 1.01
    v = rp.compare(rec, new(1.02, 0.01))                                   # max widened: 1.0201
    assert v["within_range"] is True and v["widened_range"] == pytest.approx([0.9801, 1.0201])
    v = rp.compare(rec, new(0.975, 0.03))
    assert v["status"] == "not-reproduced" and v["within_range"] is True
    assert v["difference"] == pytest.approx(-0.025)
    assert rp.compare(rec, new(0.975, 0.0), slack=1.5)["status"] == "reproduced"


def test_timeout_kills_the_command(tmp_path, suite, monkeypatch):
    p = recorded(tmp_path / "store", suite, "a", 1.0)
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps(RECORDED))
    monkeypatch.setenv("FAKE_SLEEP", "60")
    rows, runs = reproduce_records([p], timeout=1)
    assert rows[0]["status"] == "error" and "ran past 1 s" in rows[0]["reason"]
    assert runs[0]["seconds"] < 30


def test_keep_leaves_the_rerun_records(tmp_path, suite, monkeypatch):
    p = recorded(tmp_path / "store", suite, "a", 1.0)
    monkeypatch.setenv("FAKE_MEDIANS", json.dumps(RECORDED))
    reproduce_records([p], keep=tmp_path / "keep")
    assert len(list((tmp_path / "keep" / "run-0").rglob("*.json"))) == 3
    with pytest.raises(ReproduceError, match="fresh directory"):
        reproduce_records([p], keep=tmp_path / "keep")


def test_single_record_api(tmp_path, suite, monkeypatch):
    p = recorded(tmp_path / "store", suite, "a", 1.0)
    rec = json.loads(p.read_text())
    res = reproduce(rec, env={"FAKE_MEDIANS": json.dumps({"a": 1.015})})
    assert res["status"] == "reproduced" and "--out" in res["command"]
    with pytest.raises(ReproduceError, match="exited 1"):
        reproduce(seal(dict(rec, command=[sys.executable, "-c", "import sys; sys.exit(1)",
                                          "--out", "x"])))


def test_recorded_stutter_is_repaired_and_the_committed_gpu_records_group_by_command():
    cmd, notes = rp.repaired(["python3", "-m", "mxref.cli", "-m", "mxref.cli", "leaderboard",
                              "run", "gpu", "--out", "O"])
    assert cmd == ["python3", "-m", "mxref.cli", "leaderboard", "run", "gpu", "--out", "O"]
    assert notes
    assert rp.repaired(cmd) == (cmd, [])
    items = rp.load_records(["bench/results/leaderboard/records/gpu-kernels"])
    assert len(items) >= 30
    # one run per distinct recorded command, --out aside (the store holds a full run's records
    # and records of `run gpu --kernel ...` runs); every record in exactly one run
    def key(rec):
        argv = rp.repaired(rec["command"])[0]
        i = argv.index("--out")
        return tuple(argv[:i] + argv[i + 2:])
    runs = rp.plan(items)
    assert len(runs) == len({key(rec) for _, rec in items})
    assert sum(len(r.members) for r in runs) == len(items)
    assert all(r.argv[:6] == ["python3", "-m", "mxref.cli", "leaderboard", "run", "gpu"]
               for r in runs)
    assert max(len(r.members) for r in runs) >= 30            # the full run
    full = [(p, rec) for p, rec in items if "--kernel" not in rec["command"]]
    (run,) = rp.plan(full[:2], only_needed=True)
    assert run.argv.count("--kernel") == 2


def test_run_gpu_records_its_kernel_filter(monkeypatch):
    """`run gpu --kernel` reaches the runner and the recorded command, and a full run's
    command has no --kernel; under `python -m mxref.cli` the command does not repeat -m."""
    seen = []
    monkeypatch.setattr(runners, "run_gpu", lambda out, **kw: seen.append(kw) or [])
    r = CliRunner().invoke(main, ["leaderboard", "run", "gpu", "--out", "O", "--kernel", "k 1",
                                  "--kernel", "k2"], prog_name="python -m mxref.cli")
    assert r.exit_code == 4                                  # no records from the stub
    assert seen[0]["kernels"] == ("k 1", "k2")
    assert seen[0]["command"] == ["python3", "-m", "mxref.cli", "leaderboard", "run", "gpu",
                                  "--out", "O", "--size", "8192", "--repeats", "3", "--level",
                                  "0", "--level", "1", "--kernel", "k 1", "--kernel", "k2",
                                  "--processes", "3"]
    assert seen[0]["processes"] == 3 and seen[0]["jobs"] >= 1
    CliRunner().invoke(main, ["leaderboard", "run", "gpu", "--out", "O"])
    assert "--kernel" not in seen[1]["command"] and seen[1]["kernels"] == ()
