"""Is mxref a good neighbour on CPU? A user's torch step timed before and after one mxref call.

Issue 26 item 8: on a loaded 2-core machine, after the first mxref call numba's OpenMP workers
slowed an MXLinear forward+backward on the torch backend 5-9x. ``mxref._numba_setup.configure``
now picks numba's threading layer; this script measures the torch step after/before one mxref
numba call for numba's default layer and for the configured one, quiet and with competing
CPU-burning processes. Each measurement runs in a fresh subprocess (numba picks its threading
layer once per process); variants are interleaved and repeated, and medians reported.

Also timed per variant: ``mxref.quantize`` on a 4096x4096 fp32 tensor (mxref's own numba speed)
and, with ``--verify``, the wall time of ``mxref verify -b numba --level 1``.

Run from the repository root::

    python bench/neighbour.py                      # writes bench/results/neighbour.{json,md}
    python bench/neighbour.py --child configured   # one measurement, one JSON line

Measured, never asserted. Not a pytest-benchmark file: every number needs its own process.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Environment of each variant's subprocess. NUMBA_THREADING_LAYER=default is an explicit user
# choice of numba's own default, so configure() leaves it alone: that is the "before the fix" arm.
VARIANTS = {
    "numba-default": {"NUMBA_THREADING_LAYER": "default"},
    "configured": {},
}
# Extra arms for the record (what issue 26 reported as work-arounds), run with --all.
EXTRA_VARIANTS = {
    "workqueue": {"NUMBA_THREADING_LAYER": "workqueue"},
    "omp-passive-everywhere": {"NUMBA_THREADING_LAYER": "omp", "OMP_WAIT_POLICY": "PASSIVE"},
}
_CLEAR = ("NUMBA_THREADING_LAYER", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")

WORKLOADS = {
    # name: (tokens, features, steps) - MXLinear mxfp4-fdw on the torch backend, and nn.Linear
    "mxlinear": (256, 256, 12),
    "linear": (512, 512, 100),
}
QUANT_SHAPE = (4096, 4096)


# ----------------------------------------------------------------------------- child process
def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1


def _torch_steps(workload: str):
    import torch

    tokens, feats, steps = WORKLOADS[workload]
    torch.manual_seed(0)
    lin = torch.nn.Linear(feats, feats)
    if workload == "mxlinear":
        from mxkernels.training import MXLinear

        mod = MXLinear.from_linear(lin, "mxfp4-fdw", backend="torch")
    else:
        mod = lin
    g = torch.Generator().manual_seed(1)
    x = torch.randn(tokens, feats, generator=g)
    gy = torch.randn(tokens, feats, generator=g)

    def step():
        xx = x.clone().requires_grad_(True)
        (mod(xx) * gy).sum().backward()

    def timed() -> tuple[float, float]:
        ts = []
        for _ in range(steps):
            t = time.perf_counter()
            step()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts), min(ts)

    step()
    step()
    return timed


def child(variant: str, workload: str) -> dict:
    import numpy as np
    import torch  # a user's process: torch first (its OpenMP runtime starts here)

    import mxref
    from mxref import _numba_setup

    _numba_setup.configure()   # idempotent; mxref's kernels call it too
    import numba
    from numba.np.ufunc import parallel as nbp

    timed = _torch_steps(workload)
    out = {"variant": variant, "workload": workload, "numba_started_by_import": nbp._is_initialized,
           "os_threads_before": _threads(), "loadavg_before": os.getloadavg()[0]}
    before = timed()
    x = np.random.default_rng(0).standard_normal(QUANT_SHAPE, dtype=np.float32)
    t = time.perf_counter()
    mxref.quantize(x, "mxfp4")          # the one mxref call (compiles on first use; cached)
    out["first_quantize_s"] = time.perf_counter() - t
    after = timed()
    qs = []
    for _ in range(5):                  # mxref's own speed with this layer, warm
        t = time.perf_counter()
        mxref.quantize(x, "mxfp4")
        qs.append(time.perf_counter() - t)
    (before, before_min), (after, after_min) = before, after
    out.update(before_s=before, after_s=after, ratio=after / before, before_min_s=before_min,
               after_min_s=after_min, ratio_min=after_min / before_min,
               quantize_4096_s=statistics.median(qs), threading_layer=numba.threading_layer(),
               numba_threads=numba.get_num_threads(), torch_threads=torch.get_num_threads(),
               os_threads_after=_threads(), loadavg_after=os.getloadavg()[0],
               omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"))
    return out


# ----------------------------------------------------------------------------- parent process
def _env(variant: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _CLEAR}
    env.update({**VARIANTS, **EXTRA_VARIANTS}[variant])
    env.setdefault("MXREF_NUMBA_CACHE", "1")   # compile once, not in every child
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def run_child(variant: str, workload: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", variant, "--workload", workload],
                          env=_env(variant), capture_output=True, text=True, timeout=900, cwd=ROOT,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant}/{workload} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def verify_walls(variants: list[str], rounds: int = 3) -> list[dict]:
    """Wall time of ``mxref verify -b numba --level 1`` per variant, fresh process each, after one
    untimed run that fills numba's cache; variants alternate so load drift hits each alike."""
    cmd = [sys.executable, "-m", "mxref", "verify", "-b", "numba", "--level", "1"]
    subprocess.run(cmd, env=_env(variants[0]), capture_output=True, timeout=1800, cwd=ROOT)
    out = {v: {"variant": v, "walls_s": [], "loadavg": []} for v in variants}
    for _ in range(rounds):
        for v in variants:
            out[v]["loadavg"].append(os.getloadavg()[0])
            t = time.perf_counter()
            proc = subprocess.run(cmd, env=_env(v), capture_output=True, text=True, timeout=1800,
                                  cwd=ROOT)
            out[v]["walls_s"].append(time.perf_counter() - t)
            out[v]["rc"] = proc.returncode
    for r in out.values():
        r["median_s"] = statistics.median(r["walls_s"])
    return list(out.values())


class Burners:
    """``n`` CPU-burning processes, each bounded in time, killed (by pid) on exit."""

    def __init__(self, n: int, seconds: int):
        self.n, self.seconds, self.procs = n, seconds, []

    def __enter__(self):
        code = f"import time\nt = time.time() + {self.seconds}\nwhile time.time() < t: pass\n"
        self.procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(self.n)]
        time.sleep(2)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def _summary(rows: list[dict]) -> dict:
    out = {}
    for r in rows:
        out.setdefault((r["condition"], r["workload"], r["variant"]), []).append(r)
    summ = []
    for (cond, wl, var), rs in sorted(out.items()):
        summ.append({"condition": cond, "workload": wl, "variant": var, "n": len(rs),
                     "threading_layer": rs[0]["threading_layer"],
                     "ratio_median": statistics.median(r["ratio"] for r in rs),
                     "ratios": [round(r["ratio"], 3) for r in rs],
                     "ratio_min_median": statistics.median(r["ratio_min"] for r in rs),
                     "ratios_min": [round(r["ratio_min"], 3) for r in rs],
                     "before_s_median": statistics.median(r["before_s"] for r in rs),
                     "after_s_median": statistics.median(r["after_s"] for r in rs),
                     "quantize_4096_s_median": statistics.median(r["quantize_4096_s"] for r in rs),
                     "loadavg_median": statistics.median(r["loadavg_before"] for r in rs)})
    return summ


def markdown(doc: dict) -> str:
    m = doc["machine"]
    lines = [
        "# mxref as a CPU neighbour: a torch step after one mxref call", "",
        f"Machine: {m['cpu']}, {m['cores']} cores; commit {doc['commit']}; {doc['date']} UTC. "
        "Shared machine: other agents were running, so `quiet` means no burners added, not an "
        "idle machine; the 1-min load average is noted per row.",
        f"Each row: median over {doc['repeats']} fresh subprocesses of (median step time after one "
        "`mxref.quantize` 4096x4096 / median step time before). `contended`: "
        f"{doc['burners']} extra CPU-burning processes. Goal: ratio ~1.0 for `configured`.",
        "Workloads (fwd+bwd): `mxlinear` = MXLinear mxfp4-fdw on the torch backend, "
        f"{WORKLOADS['mxlinear'][1]}x{WORKLOADS['mxlinear'][1]}, "
        f"{WORKLOADS['mxlinear'][0]} tokens; "
        f"`linear` = nn.Linear {WORKLOADS['linear'][1]}x{WORKLOADS['linear'][1]}, "
        f"{WORKLOADS['linear'][0]} tokens.", "",
        "Two ratios per run: of the median step times and of the fastest step times (the "
        "fastest step is the least disturbed by other processes; a pool spinning after the "
        "mxref call would slow it too).", "",
        "| condition | workload | variant | numba layer | after/before, median steps | runs | "
        "after/before, fastest steps | runs | before ms | after ms | quantize 4096^2 s | load |",
        "|---|---|---|---|---:|---|---:|---|---:|---:|---:|---:|",
    ]
    for s in doc["summary"]:
        lines.append(f"| {s['condition']} | {s['workload']} | {s['variant']} | "
                     f"{s['threading_layer']} | {s['ratio_median']:.2f} | "
                     f"{', '.join(f'{r:.2f}' for r in s['ratios'])} | "
                     f"{s['ratio_min_median']:.2f} | "
                     f"{', '.join(f'{r:.2f}' for r in s['ratios_min'])} | "
                     f"{1e3 * s['before_s_median']:.1f} | {1e3 * s['after_s_median']:.1f} | "
                     f"{s['quantize_4096_s_median']:.3f} | {s['loadavg_median']:.1f} |")
    if doc.get("verify"):
        lines += ["", "`mxref verify -b numba --level 1` wall time (fresh process each, incl. "
                  "import and numba cache load; variants alternate after one warm-up run):", "",
                  "| variant | median s | runs s | load | rc |", "|---|---:|---|---|---:|"]
        for v in doc["verify"]:
            lines.append(f"| {v['variant']} | {v['median_s']:.1f} | "
                         f"{', '.join(f'{w:.1f}' for w in v['walls_s'])} | "
                         f"{', '.join(f'{x:.1f}' for x in v['loadavg'])} | {v['rc']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", metavar="VARIANT")
    ap.add_argument("--workload", default="mxlinear", choices=list(WORKLOADS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--burners", type=int, default=4, help="competing processes (contended)")
    ap.add_argument("--all", action="store_true", help="also the workqueue / PASSIVE arms")
    ap.add_argument("--workloads", default="mxlinear,linear")
    ap.add_argument("--conditions", default="quiet,contended")
    ap.add_argument("--verify", action="store_true", help="time mxref verify -b numba --level 1")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "neighbour"))
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child, a.workload)))
        return
    from mxref import provenance

    variants = list(VARIANTS) + (list(EXTRA_VARIANTS) if a.all else [])
    rows = []
    for cond in a.conditions.split(","):
        for rep in range(a.repeats):
            for wl in a.workloads.split(","):
                for var in variants:    # interleaved, so load drift hits every arm alike
                    if cond == "contended":
                        with Burners(a.burners, 120):
                            r = run_child(var, wl)
                    else:
                        r = run_child(var, wl)
                    r.update(condition=cond, repeat=rep)
                    rows.append(r)
                    print(f"{cond} {wl} {var} {r['threading_layer']}: ratio {r['ratio']:.2f} "
                          f"(before {r['before_s'] * 1e3:.1f} ms, after {r['after_s'] * 1e3:.1f} "
                          f"ms, load {r['loadavg_before']:.1f})", flush=True)
    git = provenance.git_state(ROOT)
    doc = {"what": "torch step time after/before one mxref numba call (issue 26 item 8)",
           "machine": provenance.machine(), "commit": (git.get("commit") or "?")[:10],
           "dirty": git.get("dirty"), "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
           "repeats": a.repeats, "burners": a.burners, "workloads": WORKLOADS,
           "variants": {v: {**VARIANTS, **EXTRA_VARIANTS}[v] for v in variants},
           "summary": _summary(rows), "runs": rows}
    if a.verify:
        doc["verify"] = verify_walls(variants)
    Path(a.out + ".json").write_text(json.dumps(doc, indent=1) + "\n")
    Path(a.out + ".md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
