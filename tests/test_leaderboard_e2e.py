"""End to end: the suites write records that `submit` accepts and `build` renders.

* GPU kernels: a real `mxref verify --backend triton` report (Triton interpreter, L0) and a GPU
  bench document in the exact shape bench/gpu_kernels.py writes, ingested as on a device.
* CPU emulator: `mxref leaderboard run cpu` for real (small input), then submit, gate, build.
* training: `mxref leaderboard run train` for real on a tiny model with in-run validation.
"""
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from mxref.cli import main
from mxref.leaderboard.runners import ingest_gpu
from mxref.leaderboard.submit import check_record, record_files

H100 = {"gpu": "NVIDIA H100 80GB HBM3", "sms": 132, "memory_gib": 79.1, "driver": "580.1",
        "clocks": "1980 MHz", "cuda": "13.0", "torch": "2.11", "triton": "3.6",
        "python": "3.12", "host_cpu": "x86_64", "commit": "abc"}


def _row(kernel, ms, reps, meta, group="quantize", **kw):
    return dict(kernel=kernel, group=group, status="ok", ms=ms, repeats_ms=reps, meta=meta, **kw)


@pytest.fixture(scope="module")
def triton_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("v") / "triton.json"
    env = dict(os.environ, TRITON_INTERPRET="1")
    subprocess.run([sys.executable, "-m", "mxref.cli", "verify", "-b", "triton", "--level", "0",
                    "--ops", "quantize_mx", "-f", "mxfp4", "-p", "ocp", "--no-progress",
                    "--json-out", str(out)], env=env, check=True, capture_output=True,
                   timeout=300)
    return out


def test_gpu_ingest_is_accepted(tmp_path, triton_report):
    from mxref.leaderboard.runners import _store_evidence
    report = json.loads(triton_report.read_text())
    assert report["status"] == "pass"
    out = tmp_path / "lb"
    rel, sha = _store_evidence(out, triton_report, "json")
    copy_bw = 2 * 8192 * 8192 * 2 / 1e-3 / 1e9           # 1 ms copy, in GB/s
    doc = {"device": H100, "size": 8192, "rows": [
        _row("roofline: device copy bf16 (read+write)", 1.0, [1.0, 1.01, 0.99],
             {"roofline": "copy"}, gbps=copy_bw, ratio=1.0, ratio_label="of copy"),
        _row("roofline: cuBLAS BF16 matmul", 2.0, [2.0], {"roofline": "bf16_matmul"},
             tflops=550.0, ratio=1.0),
        _row("fast quantize bf16->mxfp4 ocp axis=-1", 1.25, [1.2, 1.25, 1.3],
             dict(op="quantize_mx", format="mxfp4", profile="ocp", impl="triton fast",
                  params={"axis": -1}), gbps=copy_bw * 0.8 * 0.3125 / 0.5, ratio=0.5,
             check="0 scale and 0 code mismatches"),
        _row("fast quantize bf16->mxfp4 rceil axis=-1", 1.3, [1.3],       # not verified here
             dict(op="quantize_mx", format="mxfp4", profile="rceil", impl="triton fast",
                  params={"axis": -1}), gbps=100.0, ratio=0.1),
        _row("peer: torch-eager emulation bf16->mxfp4 ocp", 9.0, None, {"peer_of": "quantize"},
             gbps=50.0, ratio=0.05, ratio_label="of copy"),
        dict(kernel="generic quantize bf16->mxfp4 ocp (unpacked)", status="FAILED",
             error="1 code mismatch", meta=dict(op="quantize_mx", format="mxfp4",
                                                 profile="ocp", impl="triton generic")),
    ]}
    paths = ingest_gpu(out, doc, report, rel, sha, ["python3", "-m", "mxref.cli", "x",
                                                     "--out", "X"])
    assert len(paths) == 2                       # a kernel whose in-bench check failed: no record
    by = {json.loads(p.read_text())["profile"]: p for p in paths}
    ok = check_record(by["ocp"], allow_dirty=True)
    assert ok.ok, ok.problems
    rec = ok.record
    assert rec["machine"]["slug"] == "nvidia-h100-80gb-hbm3"
    assert rec["metric"]["median"] == 1.25 and rec["metric"]["spread"] == pytest.approx(0.08)
    assert rec["metric"]["rate"] == pytest.approx(copy_bw * 0.5)   # bytes / median
    assert rec["roofline"]["ratio"] == pytest.approx(0.5)
    assert [p["name"] for p in rec["peers"]] == ["torch-eager emulation bf16->mxfp4 ocp"]
    # the peer's ratio is its rate over the copy roofline's, not the bench row's own `ratio`
    # (one process's, 0.05 here)
    assert rec["peers"][0]["ratio"] == pytest.approx(50.0 / copy_bw)
    bad = check_record(by["rceil"], allow_dirty=True)
    assert any("no passing verify of quantize_mx mxfp4 rceil" in x for x in bad.problems)


def _cli(args):
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r


def test_cpu_and_training_suites_end_to_end(tmp_path):
    lb = tmp_path / "lb"
    r = _cli(["leaderboard", "run", "cpu", "--out", str(lb), "--size", "256", "--rounds", "4",
              "--blocks", "2", "--json"])
    assert r.exit_code == 0, r.output
    cpu = json.loads(r.stdout)["records"]
    assert len(cpu) == 2
    rec = json.loads(open(cpu[0]).read())
    assert rec["command"][:6] == ["python3", "-m", "mxref.cli", "leaderboard", "run", "cpu"]
    assert rec["command"][rec["command"].index("--blocks") + 1] == "2"
    # 3 processes x 4 rounds, each process cut into 2 blocks of 2: a repeat is the mean of a
    # pair of consecutive rounds (the median of two); the copy roofline likewise
    for m in (rec["metric"], rec["roofline"]):
        s = m["samples"]
        assert len(s) == 12 and m["blocks"] == [2] * 6 and m["samples_per_repeat"] == 2
        assert m["repeats"] == pytest.approx([(s[i] + s[i + 1]) / 2 for i in range(0, 12, 2)])
        assert m["median"] == pytest.approx(sum(sorted(m["repeats"])[2:4]) / 2)
    assert rec["verify"]["cases"] > 0 and {p["name"] for p in rec["peers"]} >= {"torch-eager"}
    r = _cli(["leaderboard", "run", "train", "--out", str(lb), "--model", "llama-tiny",
              "--tokens", "2048", "--seq-len", "32", "--batch-size", "4",
              "--validate-every", "8", "--eval-tokens", "2048", "--json"])
    assert r.exit_code == 0, r.output
    (tr,) = json.loads(r.stdout)["records"]
    t = json.loads(open(tr).read())
    assert t["command"][t["command"].index("--eval-tokens") + 1] == "2048"
    for run in ("bf16", "mxfp4-fdw"):
        cfg = json.loads((lb / "runs" / run / "config.json").read_text())
        assert cfg["train"]["eval_tokens"] == 2048
    assert t["verify"]["kind"] == "in-run-validation" and t["verify"]["status"] == "pass"
    assert t["roofline"]["ratio_label"] == "x bf16 step time"
    assert t["quality"]["loss_curve"] and t["quality"]["baseline_curve"]
    # dL against bf16 comes from the runs' compare.json (the leaderboard reads run artifacts)
    cmp = json.loads((lb / "compare" / "compare.json").read_text())
    (row,) = cmp["runs"]
    assert t["quality"]["dl_vs_bf16"] == row["dL_train_tail"] is not None
    assert t["quality"]["dl_vs_bf16_ema"] == row["dL_train_ema"]
    assert t["params"]["validated_steps"] == [0, 8]      # validated steps are not timed
    # not timed: step 0 (compilation), the validated steps 0 and 8, and the steps that timed
    # the quantization ops (every 5th: 0, 5, 10, 15; their CUDA events are host work)
    assert t["params"]["timed_steps"] == 16 - len({0} | {0, 8} | {0, 5, 10, 15})
    # the 11 timed steps in blocks of at least 5 (--block-steps): 6 and 5 steps
    m = t["metric"]
    s = m["samples"]
    assert len(s) == 11 and m["blocks"] == [6, 5] and m["samples_per_repeat"] == 5
    assert m["repeats"] == pytest.approx([sum(sorted(s[:6])[2:4]) / 2, sorted(s[6:])[2]])
    # bf16: 15 timed steps (all but the first) in 3 blocks of 5; the roofline's median is the
    # median of its 3 block medians, and the ratio is taken at it
    b = t["roofline"]
    assert len(b["samples"]) == 15 and b["blocks"] == [5, 5, 5]
    assert b["repeats"] == pytest.approx([sorted(b["samples"][i:i + 5])[2] for i in (0, 5, 10)])
    assert b["median"] == pytest.approx(sorted(b["repeats"])[1])
    assert b["ratio"] == pytest.approx(m["median"] / b["median"])
    store = tmp_path / "store"
    r = _cli(["leaderboard", "submit", str(lb), "--store", str(store), "--allow-dirty",
              "--json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["accepted"] == 3, r.output
    assert len(record_files([store])) == 3
    # the same records against themselves: no regression
    r = _cli(["leaderboard", "gate", str(lb), "--baseline", str(store)])
    assert r.exit_code == 0, r.output
    site = tmp_path / "site"
    r = _cli(["leaderboard", "build", str(store), "--out", str(site), "--json"])
    assert r.exit_code == 0, r.output
    md = (site / "LEADERBOARD.md").read_text()
    assert "quantize fp32->mxfp4 ocp rows (numba)" in md and "llama-tiny" in md
    # a record edited inside the store is shown as rejected, not as an entry
    p = record_files([store])[0]
    d = json.loads(p.read_text())
    d["metric"]["median"] /= 2
    p.write_text(json.dumps(d))
    r = _cli(["leaderboard", "build", str(store), "--out", str(site), "--json"])
    md = (site / "LEADERBOARD.md").read_text()
    assert "record_sha256 does not match" in md, md[-2000:]


def test_subprocesses_do_not_inherit_xdist_worker_variables(tmp_path, monkeypatch):
    """Under `pytest -n`, PYTEST_XDIST_WORKER reached the benchmark subprocess and
    pytest-benchmark switched itself off ("disabled because xdist plugin is active"), so
    `run cpu` read an empty JSON. The runner's subprocesses start without those variables."""
    from mxref.leaderboard import runners
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv("MXREF_KEEP_ME", "1")
    log = tmp_path / "log"
    rc = runners._run([sys.executable, "-c",
                       "import os; print(sorted(k for k in os.environ if k.startswith(('PYTEST_', 'MXREF_KEEP'))))"],
                      log, {"PYTEST_EXTRA": "x"})
    assert rc == 0
    seen = log.read_text()
    assert "MXREF_KEEP_ME" in seen and "PYTEST_EXTRA" in seen
    assert "PYTEST_XDIST" not in seen


def test_an_unreadable_benchmark_json_is_a_runner_error(tmp_path, monkeypatch):
    """A benchmark process that exits 0 but leaves an empty JSON (what the xdist leak did) is a
    RunnerError naming the file, not a JSONDecodeError."""
    from mxref.leaderboard import runners

    def fake_run(cmd, log, env=None, timeout=None):
        out = next(str(c).split("=", 1)[1] for c in cmd if str(c).startswith("--benchmark-json="))
        open(out, "w").close()
        return 0
    monkeypatch.setattr(runners, "_run", fake_run)
    monkeypatch.setattr(runners, "_verify", lambda *a, **k: ({"status": "pass"}, "v.json", "0"))
    with pytest.raises(runners.RunnerError, match="wrote no valid JSON"):
        runners.run_cpu(tmp_path / "lb", size=64, rounds=2, command=["x"])
