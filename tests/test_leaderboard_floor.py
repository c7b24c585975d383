"""The run-to-run floor (measured between separate jobs) and repeats taken from separate
processes: what reproduce and gate hold a record to."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mxref.cli import main
from mxref.leaderboard import floor as fl
from mxref.leaderboard.gate import compare as gate_compare
from mxref.leaderboard.reproduce import compare as repro_compare
from mxref.leaderboard.runners import combine_processes

C, T = "a" * 40, "b" * 40


def _rec(entry, median, spread=0.001, suite="gpu-kernels", machine="nvidia-h100-80gb-hbm3",
         commit=C, tree=T, dirty=False, created="2026-11-22T10:00:00Z"):
    return {"suite": suite, "entry": entry, "machine": {"slug": machine},
            "metric": {"median": median, "spread": spread, "repeats": [median],
                       "lower_is_better": True, "unit": "ms"},
            "git": {"commit": commit, "tree": tree, "dirty": dirty}, "created": created,
            "golden": {"suite_version": "2026.11.1"}}


def _run_dir(tmp_path, name, recs):
    d = tmp_path / name / "records"
    for i, r in enumerate(recs):
        p = d / r["suite"] / r["machine"]["slug"] / f"e{i}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(r))
    return tmp_path / name


def _two_runs(tmp_path, moves):
    a = [_rec(f"k{i}", 1.0) for i in range(len(moves))]
    b = [_rec(f"k{i}", 1.0 + m, created="2026-11-22T11:00:00Z") for i, m in enumerate(moves)]
    return _run_dir(tmp_path, "a", a), _run_dir(tmp_path, "b", b)


def test_floor_is_the_quantile_of_the_entries_moves(tmp_path):
    moves = [0.001 * i for i in range(1, 11)]           # 0.1% .. 1.0%, one entry each
    a, b = _two_runs(tmp_path, moves)
    doc = fl.measure([a, b], quantile=0.9)
    (f,) = doc["floors"]
    assert (f["suite"], f["machine"], f["entries"], f["runs"]) == \
        ("gpu-kernels", "nvidia-h100-80gb-hbm3", 10, 2)
    assert f["floor"] == pytest.approx(0.009)            # 9th of 10: the noisiest is left out
    assert f["max_diff"] == pytest.approx(0.010)
    assert fl.measure([a, b], quantile=1.0)["floors"][0]["floor"] == pytest.approx(0.010)
    # rounded up to 0.01%, never down
    a2, b2 = _two_runs(tmp_path / "r", [0.00123])
    assert fl.measure([a2, b2], quantile=1.0)["floors"][0]["floor"] == pytest.approx(0.0013)


def test_floor_refuses_what_is_not_unchanged_code(tmp_path):
    a, b = _two_runs(tmp_path, [0.01])
    with pytest.raises(fl.FloorError, match="at least two runs"):
        fl.measure([a])
    other = _run_dir(tmp_path, "c", [_rec("k0", 1.0, commit="c" * 40)])
    with pytest.raises(fl.FloorError, match="different commits"):
        fl.measure([a, other])
    dirty = _run_dir(tmp_path, "d", [_rec("k0", 1.0, dirty=True)])
    with pytest.raises(fl.FloorError, match="dirty"):
        fl.measure([a, dirty])
    disjoint = _run_dir(tmp_path, "e", [_rec("zz", 1.0)])
    with pytest.raises(fl.FloorError, match="share no entry"):
        fl.measure([a, disjoint])
    with pytest.raises(fl.FloorError, match="quantile"):
        fl.measure([a, b], quantile=0)
    (tmp_path / "f" / "records").mkdir(parents=True)
    (tmp_path / "f" / "records" / "x.json").write_text("{not json")
    with pytest.raises(fl.FloorError, match="not a leaderboard record"):
        fl.measure([a, tmp_path / "f"])


def test_floor_file_merge_and_load(tmp_path):
    a, b = _two_runs(tmp_path, [0.02])
    doc = fl.measure([a, b], quantile=1.0)
    cpu = {"schema": fl.SCHEMA, "floors": [{"suite": "cpu-emulator", "machine": "cpu-x",
                                            "floor": 0.05}]}
    merged = fl.merge(cpu, doc)
    p = tmp_path / "run_to_run.json"
    p.write_text(json.dumps(merged))
    assert fl.load(p) == {("cpu-emulator", "cpu-x"): 0.05,
                          ("gpu-kernels", "nvidia-h100-80gb-hbm3"): 0.02}
    assert fl.load(tmp_path / "absent.json") == {} and fl.load(None) == {}
    p.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(fl.FloorError, match="not a run-to-run floor file"):
        fl.load(p)
    p.write_text(json.dumps({**merged, "floors": [{"suite": "s", "machine": "m",
                                                   "floor": 1.5}]}))
    with pytest.raises(fl.FloorError, match="not in"):
        fl.load(p)


def test_reproduce_and_gate_use_the_larger_of_spread_and_floor():
    rec = _rec("k", 1.0, spread=0.002)
    new = _rec("k", 1.008, spread=0.002)                       # +0.8%
    assert repro_compare(rec, new)["status"] == "not-reproduced"   # the spread alone: 0.2%
    r = repro_compare(rec, new, floor=0.01)
    assert r["status"] == "reproduced" and r["tolerance"] == pytest.approx(0.01)
    assert r["tolerance_from"] == "floor" and r["floor"] == 0.01
    loose = _rec("k", 1.0, spread=0.05)                        # a noisy entry keeps its spread
    r = repro_compare(loose, _rec("k", 1.04), floor=0.01)
    assert r["status"] == "reproduced" and r["tolerance_from"] == "spread"
    assert repro_compare(rec, _rec("k", 1.02), floor=0.01)["status"] == "not-reproduced"
    g = gate_compare(new, rec)
    assert g["status"] == "regression"
    g = gate_compare(new, rec, floor=0.01)
    assert g["status"] == "ok" and g["tolerance"] == pytest.approx(0.01)
    assert gate_compare(_rec("k", 1.02), rec, floor=0.01)["status"] == "regression"


def test_floor_cli_writes_and_refuses(tmp_path):
    a, b = _two_runs(tmp_path, [0.004, 0.006])
    out = tmp_path / "store" / "run_to_run.json"
    out.parent.mkdir()
    r = CliRunner().invoke(main, ["leaderboard", "floor", str(a), str(b), "--quantile", "1",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "floor 0.60%" in r.output
    assert fl.load(out) == {("gpu-kernels", "nvidia-h100-80gb-hbm3"): 0.006}
    r = CliRunner().invoke(main, ["leaderboard", "floor", str(a)])
    assert r.exit_code == 2 and "at least two runs" in r.output
    out.write_text("{}")                      # never overwrite a file that is not a floor file
    r = CliRunner().invoke(main, ["leaderboard", "floor", str(a), str(b), "--out", str(out)])
    assert r.exit_code == 2 and out.read_text() == "{}"


def test_gate_cli_reads_the_stores_floor(tmp_path):
    from mxref.leaderboard.record import seal
    base = _rec("k", 1.0)
    base.update(schema="x", record_sha256="0" * 64)
    new = dict(base, metric=dict(base["metric"], median=1.008))
    store = _run_dir(tmp_path, "store", [seal(base)])
    newd = _run_dir(tmp_path, "new", [seal(new)])
    args = ["leaderboard", "gate", str(newd), "--baseline", str(store)]
    assert CliRunner().invoke(main, args).exit_code == 1          # no floor: 0.8% > 0.1%
    (store / fl.FILE_NAME).write_text(json.dumps(
        {"schema": fl.SCHEMA, "floors": [{"suite": "gpu-kernels",
                                          "machine": "nvidia-h100-80gb-hbm3", "floor": 0.01}]}))
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert CliRunner().invoke(main, args + ["--no-floor"]).exit_code == 1


def _bench_doc(rows):
    return {"device": {}, "size": 8, "rows": rows}


def test_combine_processes():
    def row(ms, reps, status="ok"):
        return {"kernel": "q", "status": status, "ms": ms, "repeats_ms": reps, "gbps": 100 / ms,
                "meta": {"op": "quantize_mx"}}
    peer = {"kernel": "peer: p", "status": "ok", "ms": 2.0, "gbps": 50.0,
            "meta": {"peer_of": "quantize"}}
    docs = [_bench_doc([row(1.0, [1.0, 1.0, 1.1]), peer]),
            _bench_doc([row(1.2, [1.2, 1.2, 1.3]), dict(peer, ms=4.0)]),
            _bench_doc([row(1.1, [1.1, 1.1, 1.1]), dict(peer, ms=3.0)])]
    doc = combine_processes(docs)
    q = next(r for r in doc["rows"] if r["kernel"] == "q")
    assert q["repeats_ms"] == [1.0, 1.0, 1.1, 1.2, 1.2, 1.3, 1.1, 1.1, 1.1]
    assert q["ms"] == pytest.approx(1.1) and q["processes"] == 3
    assert q["repeats_per_process"] == [3, 3, 3]
    assert q["gbps"] == pytest.approx(100 / 1.1)               # work / time at the new median
    p = next(r for r in doc["rows"] if r["kernel"] == "peer: p")
    assert p["ms"] == pytest.approx(3.0)
    # a failed bit check in any process keeps the kernel out
    docs[1]["rows"][0] = dict(row(1.2, [1.2]), status="FAILED", error="1 code mismatch")
    q = next(r for r in combine_processes(docs)["rows"] if r["kernel"] == "q")
    assert q["status"] == "FAILED"
