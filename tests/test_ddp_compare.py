"""scripts/ddp_compare.py: the DDP-vs-one-GPU verdict on synthetic run directories."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "ddp_compare.py"


def _run_dir(root: Path, name: str, losses, world=1, step_s=0.1, status="complete", checks=None):
    d = root / name
    d.mkdir(parents=True)
    lines = [{"step": i, "loss": x, "step_time_s": step_s, "tokens": 1000 * (i + 1)}
             for i, x in enumerate(losses)]
    (d / "log.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (d / "summary.json").write_text(json.dumps({"status": status, "world_size": world}))
    if checks is not None:
        (d / "checks.jsonl").write_text("".join(json.dumps(c) + "\n" for c in checks))
    return d


def _compare(runs: Path, out: Path, *extra):
    r = subprocess.run([sys.executable, str(SCRIPT), str(runs), "--out", str(out), *extra],
                       capture_output=True, text=True, timeout=120)
    doc = json.loads((out / "ddp_compare.json").read_text()) if r.returncode in (0, 1) else None
    return r, doc


BASE = [4.0 - 0.02 * i for i in range(30)]           # 30 steps; tail = last 6


def _shift(losses, early=0.0, tail=0.0):
    return [x * (1 + early) if i < 20 else x + tail for i, x in enumerate(losses)]


def test_ddp_within_the_rerun_noise_matches(tmp_path):
    runs = tmp_path / "runs"
    _run_dir(runs, "r-single", BASE)
    _run_dir(runs, "r-rerun", _shift(BASE, tail=0.02))        # one-GPU noise: 0.02 nats
    _run_dir(runs, "r-accum2", _shift(BASE, early=1e-3))
    _run_dir(runs, "r-ddp", _shift(BASE, early=2e-3, tail=0.03), world=2)
    r, doc = _compare(runs, tmp_path / "out")
    assert r.returncode == 0, r.stdout + r.stderr
    # tolerance = max(0.01, 2 x 0.02) = 0.04 nats; ddp vs accum2: tail 0.03, early ~1e-3
    assert abs(doc["tail_tolerance"] - 0.04) < 1e-12
    res = doc["recipes"]["r"]
    assert res["verdict_against"] == "accum2" and res["match"] is True
    assert abs(res["accum2_vs_ddp"]["tail_mean_diff"] - 0.03) < 1e-9
    assert res["runs"]["ddp"]["world_size"] == 2
    assert (tmp_path / "out" / "ddp_compare.png").stat().st_size > 0


def test_ddp_outside_the_tolerance_fails(tmp_path):
    runs = tmp_path / "runs"
    _run_dir(runs, "r-single", BASE)
    _run_dir(runs, "r-rerun", _shift(BASE, tail=0.004))       # noise 0.004 -> tolerance 0.01
    _run_dir(runs, "r-ddp", _shift(BASE, tail=0.05), world=2)  # no accum2: held to single
    r, doc = _compare(runs, tmp_path / "out")
    assert r.returncode == 1
    assert doc["recipes"]["r"]["verdict_against"] == "single"
    assert doc["recipes"]["r"]["match"] is False
    # the early-step criterion alone also fails a run
    runs2 = tmp_path / "runs2"
    _run_dir(runs2, "r-single", BASE)
    _run_dir(runs2, "r-ddp", _shift(BASE, early=0.05), world=2)
    r2, doc2 = _compare(runs2, tmp_path / "out2")
    assert r2.returncode == 1 and doc2["recipes"]["r"]["match"] is False


def test_incomplete_or_failed_runs_are_refused(tmp_path):
    runs = tmp_path / "runs"
    _run_dir(runs, "r-single", BASE)
    _run_dir(runs, "r-ddp", BASE, world=2, status="stopped")
    r, _ = _compare(runs, tmp_path / "out")
    assert r.returncode == 2 and "not complete" in r.stderr
    runs2 = tmp_path / "runs2"
    _run_dir(runs2, "r-single", BASE, checks=[{"step": 5, "ok": False}])
    _run_dir(runs2, "r-ddp", BASE, world=2)
    r2, _ = _compare(runs2, tmp_path / "out2")
    assert r2.returncode == 2 and "validation check failed" in r2.stderr
    r3, _ = _compare(tmp_path / "runs2" / "r-ddp", tmp_path / "out3")
    assert r3.returncode == 2
