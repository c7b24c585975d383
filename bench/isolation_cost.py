"""What backend isolation costs: `mxref verify -b numba --level 1`, isolated (the default: the
backend in a worker process, arrays sent over a pipe) against `--in-process`, wall time.

Two states of numba's on-disk cache: *cold* (a fresh, empty ``NUMBA_CACHE_DIR`` per run: every
kernel compiled, in the worker and, for the judge's own numba code, in mxref's process) and
*warm* (one shared cache directory, filled by an untimed run first). The arms alternate within
each round so that drift on a shared machine hits both; medians and ranges are reported.

    python bench/isolation_cost.py [--rounds 3] [--level 1]    # bench/results/isolation.{json,md}

Measured, never asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from mxref.provenance import git_state, machine  # noqa: E402

ARMS = {"isolated": [], "in-process": ["--in-process"]}


def one_run(level: int, extra: list, cache_dir: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, CI="true")
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "mxref", "verify", "-b", "numba", "--level",
                        str(level), "--no-progress", "--json", *extra], capture_output=True,
                       text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t
    doc = json.loads(r.stdout)
    if r.returncode != 0:
        raise SystemExit(f"verify exited {r.returncode}: {r.stderr[-2000:]}")
    return {"wall_s": wall, "cases": doc["summary"]["cases"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args()
    walls = {(state, arm): [] for state in ("cold", "warm") for arm in ARMS}
    cases = None
    with tempfile.TemporaryDirectory(prefix="mxref-iso-warm-") as warm:
        one_run(a.level, [], warm)                        # fill the warm cache (untimed)
        for k in range(a.rounds):
            order = list(ARMS) if k % 2 == 0 else list(ARMS)[::-1]
            for arm in order:
                with tempfile.TemporaryDirectory(prefix="mxref-iso-cold-") as cold:
                    walls["cold", arm].append(one_run(a.level, ARMS[arm], cold)["wall_s"])
                r = one_run(a.level, ARMS[arm], warm)
                walls["warm", arm].append(r["wall_s"])
                cases = r["cases"]
    rows = []
    for state in ("cold", "warm"):
        iso, inp = (statistics.median(walls[state, arm]) for arm in ARMS)
        rows.append({"state": state, "isolated_s": iso, "in_process_s": inp,
                     "ratio": iso / inp,
                     "isolated_range_s": [min(walls[state, "isolated"]),
                                          max(walls[state, "isolated"])],
                     "in_process_range_s": [min(walls[state, "in-process"]),
                                            max(walls[state, "in-process"])]})
    doc = {"schema": "mxref-bench-isolation/1", "level": a.level, "cases": cases,
           "rounds": a.rounds, "machine": machine(), "git": git_state(),
           "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "rows": rows,
           "walls": {f"{s}/{arm}": v for (s, arm), v in walls.items()}}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "isolation.json").write_text(json.dumps(doc, indent=1) + "\n")
    m = doc["machine"]
    lines = [f"# Backend isolation cost: `mxref verify -b numba --level {a.level}` ({cases} cases)",
             "", f"{doc['date']}, commit {doc['git']['commit'][:10]}"
             f"{' (dirty)' if doc['git']['dirty'] else ''}; {m.get('cpu', '?')}, "
             f"{m.get('cores', '?')} cores, load average {m.get('loadavg', ['?'])[0]}; {a.rounds} alternating rounds, medians (range).", "",
             "| numba cache | isolated (s) | in-process (s) | isolated / in-process |",
             "|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['state']} | {r['isolated_s']:.1f} ({r['isolated_range_s'][0]:.1f}-"
                     f"{r['isolated_range_s'][1]:.1f}) | {r['in_process_s']:.1f} "
                     f"({r['in_process_range_s'][0]:.1f}-{r['in_process_range_s'][1]:.1f}) | "
                     f"{r['ratio']:.3f} |")
    lines += ["", "Isolated: the backend runs in `python -m mxref.verify.isolate`, arrays cross a "
              "pipe as raw bytes; the judge compares in its own process. Cold: an empty "
              "NUMBA_CACHE_DIR for each run (every kernel compiled in both processes)."]
    (out / "isolation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
