"""Suites that produce leaderboard records: each runs mxref verify and the timing in one job and
writes ``OUT/records/<suite>/<machine>/<entry>.json`` plus ``OUT/verify/<sha256>.<ext>``.

* ``cpu``   — the CPU emulator (numba backend): verify of quantize_mx, then pytest-benchmark of
  ``bench/test_bench_quantize.py`` (mxref against torchao ``to_mx``, torch eager, ml_dtypes and
  the numba copy roofline, same run).
* ``gpu``   — every Triton kernel: ``mxref verify --backend triton`` of the ops timed, then
  ``bench/gpu_kernels.py`` (do_bench medians, L2 flush, copy and cuBLAS BF16 rooflines, peers).
* ``train`` — training recipes: ``mxref train`` of bf16 and each recipe on the same data order,
  with in-run validation; the records carry step time, tokens/s, the ratio to bf16 and dL.

The commands run from a repository checkout (bench/ is not installed with the package). Each
takes the commit and the tree hash of the files (``record.git_state``) before it writes anything.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from ..errors import MXRefError
from .record import REPO, blocked, file_sha256, git_state, make_record, run_env, slug
from .submit import store_path


class RunnerError(MXRefError):
    """A suite could not run (missing checkout, a failing step)."""


# Repeats of single samples are medians of contiguous blocks of them (record.blocked): a few
# outlier rounds or steps then do not set the spread. CPU: blocks per process (3 processes of
# 15 rounds give 9 repeats of 5 rounds); training: blocks of at least TRAIN_BLOCK_STEPS steps.
CPU_BLOCKS = 3
TRAIN_BLOCK_STEPS = 5


def _store_evidence(out: Path, src: Path, ext: str) -> tuple[str, str]:
    sha = file_sha256(src)
    rel = f"verify/{sha}.{ext}"
    dest = out / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists():
        shutil.copyfile(src, dest)
    return rel, sha


def _write(out: Path, rec: dict) -> Path:
    p = store_path(out, rec)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    return p


# pytest-xdist's worker variables turn pytest-benchmark off in any pytest a worker starts
# ("Benchmarks are automatically disabled because xdist plugin is active"): the timing
# subprocess then wrote an empty JSON when the suite itself ran under `pytest -n`.
_PARENT_PYTEST_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT",
                      "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST")


def _run(cmd, log, env=None, timeout=None):
    e = {k: v for k, v in os.environ.items() if k not in _PARENT_PYTEST_ENV}
    e.update(env or {})
    print("+ " + " ".join(map(str, cmd)), file=sys.stderr, flush=True)
    with open(log, "a") as f:
        proc = subprocess.run([str(c) for c in cmd], cwd=REPO, env=e, stdout=f,
                              stderr=subprocess.STDOUT, timeout=timeout, check=False)
    return proc.returncode


def _need_checkout(*rel):
    for r in rel:
        if not (REPO / r).exists():
            raise RunnerError(f"{REPO / r} is missing: run the leaderboard suites from a "
                              "repository checkout (pip install -e .)")


def verify_command(backend, ops, formats, profiles, levels, raw, jobs, device=None) -> list:
    """The ``mxref verify`` argv a runner starts (a subprocess: it may need a GPU stack)."""
    cmd = [sys.executable, "-m", "mxref.cli", "verify", "-b", backend, "--no-progress",
           "--ops", ",".join(ops), "--json-out", raw, "--jobs", str(jobs)]
    if device:
        cmd += ["--device", device]
    for f in formats:
        cmd += ["-f", f]
    for p in profiles:
        cmd += ["-p", p]
    for lv in levels:
        cmd += ["--level", str(lv)]
    return cmd


def _verify(out: Path, backend: str, ops, formats, profiles, levels, log, extra_env=None,
            jobs: int = 1):
    """Run mxref verify in a subprocess (it may need a GPU stack), in `jobs` worker processes;
    returns (report, rel, sha)."""
    raw = out / f"verify-{backend}.json"
    cmd = verify_command(backend, ops, formats, profiles, levels, raw, jobs)
    rc = _run(cmd, log, extra_env)
    if not raw.is_file():
        raise RunnerError(f"mxref verify -b {backend} wrote no report (exit {rc}); see {log}")
    report = json.loads(raw.read_text())
    rel, sha = _store_evidence(out, raw, "json")
    raw.unlink()
    return report, rel, sha


def _verify_ref(report, rel, sha, backend):
    return {"kind": "mxref-verify", "report": rel, "sha256": sha, "status": report["status"],
            "backend": backend, "cases": int(report["summary"]["passed_cases"])}


# ---------------------------------------------------------------------------------------------
def run_cpu(out: Path, *, size: int, rounds: int, command: list[str],
            processes: int = 1, blocks: int = CPU_BLOCKS) -> list[Path]:
    """verify (numba) once, then the pytest-benchmark `processes` times as separate processes.
    Each process's rounds are cut into `blocks` contiguous blocks (`record.blocked`); a
    record's repeats are the block medians, in process order, and its samples every round."""
    git_state()     # commit + tree of the files now, before the run writes (cached)
    _need_checkout("bench/test_bench_quantize.py")
    out.mkdir(parents=True, exist_ok=True)
    log = out / "run.log"
    fmts = ["mxfp4", "mxfp8_e4m3"]
    report, rel, sha = _verify(out, "numba", ["quantize_mx"], fmts, ["ocp"], (0, 1), log)
    by = {}
    for i in range(processes):
        bj = out / f"cpu-bench-{i}.json"
        rc = _run([sys.executable, "-m", "pytest", "bench/test_bench_quantize.py", "-q",
                   "-p", "no:cacheprovider", "-k", "not fresh_output", "--benchmark-save-data",
                   f"--benchmark-json={bj}"], log,
                  {"MXREF_BENCH_SIZE": str(size), "MXREF_BENCH_ROUNDS": str(rounds)})
        if rc != 0 or not bj.is_file():
            raise RunnerError(f"the CPU benchmark (process {i + 1} of {processes}) failed "
                              f"(exit {rc}); see {log}")
        try:
            doc = json.loads(bj.read_text())
        except ValueError as exc:
            raise RunnerError(f"the CPU benchmark (process {i + 1} of {processes}) wrote no "
                              f"valid JSON to {bj} ({exc}); see {log}") from None
        bj.unlink()
        for b in doc["benchmarks"]:
            k = (b["extra_info"].get("impl"), b["extra_info"].get("fmt"))
            if k in by:
                by[k]["_rounds"].append(b["stats"]["data"])
                by[k]["_medians"].append(b["stats"]["median"])
            elif i == 0:
                by[k] = dict(b, _medians=[b["stats"]["median"]], _rounds=[b["stats"]["data"]])
    for b in by.values():                   # a peer's time: the median over the processes
        b["stats"]["median"] = statistics.median(b["_medians"])
    env = run_env()
    roof = by.get(("read fp32 + write u8 (numba)", "roofline"))
    if roof is None:
        raise RunnerError("the CPU benchmark has no copy roofline row")
    n_el = roof["extra_info"]["elements"]

    def rate(t):                                        # M elements / s
        return n_el / t / 1e6

    roof_reps = blocked(roof["_rounds"], blocks)
    roof_med = statistics.median(roof_reps["repeats"])
    written = []
    for fmt in fmts:
        b = by.get(("mxref", fmt))
        if b is None:
            continue
        peers = []
        for impl in ("torchao.to_mx", "torch-eager", "ml_dtypes.astype (elements only)"):
            p = by.get((impl, fmt))
            if p:
                pm = p["stats"]["median"]
                peers.append({"name": impl, "median": pm, "unit": "s", "rate": rate(pm),
                              "rate_unit": "M elem/s", "ratio": rate(pm) / rate(roof_med),
                              "ratio_label": "of copy"})
        rec = make_record(
            suite="cpu-emulator", entry=f"quantize fp32->{fmt} ocp rows (numba)",
            group="quantize", impl="mxref numba", op="quantize_mx", fmt=fmt, profile="ocp",
            params={"shape": [size, size], "src_dtype": "float32", "axis": -1,
                    "threads": os.environ.get("NUMBA_NUM_THREADS")},
            metric={"name": "time per call", "unit": "s", "lower_is_better": True,
                    **blocked(b["_rounds"], blocks), "work": n_el / 1e6,
                    "rate_unit": "M elem/s", "processes": processes},
            roofline={"name": "numba copy: read fp32 + write u8", "median": roof_med,
                      "unit": "s", "rate": rate(roof_med), "rate_unit": "M elem/s",
                      "ratio_label": "of copy", "basis": "rate",
                      **roof_reps},
            peers=peers, command=command, verify=_verify_ref(report, rel, sha, "numba"),
            env=env)
        written.append(_write(out, rec))
    return written


# ---------------------------------------------------------------------------------------------
GPU_OPS = ["quantize_mx", "quantize_mx_sr", "rotate", "quantize_rotated", "dequantize",
           "mxfp4_to_fp8", "gemm", "quantize_nvfp4", "quantize_nvfp4_sr", "fp8_to_mxfp4",
           "reblock"]


def default_jobs() -> int:
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(8, (n or 1) // 2))


def combine_processes(docs: list[dict]) -> dict:
    """One bench document from the documents of P separate processes of bench/gpu_kernels.py:
    per kernel, the repeats of every process in process order (``repeats_ms``), their median
    (``ms``) and the rate at it; ``processes`` and ``repeats_per_process`` say where they came
    from. A kernel counts only if it is ``ok`` in every process (a failed bit check in any
    process keeps it out); a peer timed once per process gets the median of those times. Each
    process's ``clocks_under_load`` dict is kept, as a list in process order (None for a process
    without one; no key where no process has one)."""
    base = docs[0]
    by = [{r["kernel"]: r for r in d["rows"]} for d in docs]
    rows = []
    for r in base["rows"]:
        name = r["kernel"]
        same = [b.get(name) for b in by]
        if any(x is None for x in same):
            continue
        if any(x.get("status") != "ok" for x in same):
            bad = next(x for x in same if x.get("status") != "ok")
            rows.append(bad)
            continue
        reps = [v for x in same for v in (x.get("repeats_ms") or [x["ms"]])]
        ms = statistics.median(reps)
        new = dict(r, ms=ms, repeats_ms=reps, processes=len(docs),
                   repeats_per_process=[len(x.get("repeats_ms") or [x["ms"]]) for x in same])
        clocks = [x.get("clocks_under_load") for x in same]      # one per process, in order
        if any(c is not None for c in clocks):
            new["clocks_under_load"] = clocks
        for k in ("gbps", "tflops"):
            if r.get(k):
                new[k] = r[k] * r["ms"] / ms          # work / time at the new median
        rows.append(new)
    return {**base, "rows": rows, "processes": len(docs)}


def run_gpu(out: Path, *, size: int, repeats: int, levels, command: list[str],
            kernels=(), processes: int = 1, jobs: int = 1) -> list[Path]:
    """`kernels` (exact bench kernel names = record entries) restricts the timing to those
    kernels; the verify, the rooflines and the peers run as in a full run. The timing runs
    `processes` times as separate processes, one after the other, each taking `repeats`
    do_bench medians per kernel; a record's repeats are all of them (`combine_processes`). The
    verify runs once, in `jobs` worker processes."""
    git_state()     # commit + tree of the files now, before the run writes (cached)
    _need_checkout("bench/gpu_kernels.py")
    out.mkdir(parents=True, exist_ok=True)
    log = out / "run.log"
    report, rel, sha = _verify(out, "triton", GPU_OPS,
                               ["mxfp4", "mxfp8_e4m3", "nvfp4", "hadamard"],
                               ["ocp", "rceil", "te_nvfp4"], levels, log, jobs=jobs)
    docs = []
    cache = out / "gemm-reference-cache"
    for i in range(processes):
        bj = out / f"gpu-bench-{i}.json"
        rc = _run([sys.executable, "bench/gpu_kernels.py", "--out", bj, "--size", str(size),
                   "--repeats", str(repeats), "--cache", cache] +
                  [x for k in kernels for x in ("--kernel", k)], log)
        if rc != 0 or not bj.is_file():
            raise RunnerError(f"bench/gpu_kernels.py (process {i + 1} of {processes}) failed "
                              f"(exit {rc}); see {log}")
        docs.append(json.loads(bj.read_text()))
        for ext in (".json", ".md"):
            bj.with_suffix(ext).unlink(missing_ok=True)
    shutil.rmtree(cache, ignore_errors=True)
    doc = combine_processes(docs)
    unknown = sorted(set(kernels) - {r["kernel"] for r in doc["rows"]})
    if unknown:                # a misspelt name, or a bench part that crashed before it
        print(f"warning: bench/gpu_kernels.py ran no kernel named {unknown} (size {size}); "
              f"see {log}", file=sys.stderr, flush=True)
    return ingest_gpu(out, doc, report, rel, sha, command)


def _peer_ratio(p: dict, roofs: dict):
    """A peer's rate over its roofline's rate (cuBLAS BF16 for TFLOP/s, copy for GB/s), both at
    the medians of the combined processes; the bench's own ``ratio`` is one process's."""
    key, rk = ("tflops", "bf16_matmul") if "tflops" in p else ("gbps", "copy")
    roof = roofs.get(rk) or {}
    if p.get(key) and roof.get(key):
        return p[key] / roof[key]
    return p.get("ratio")


def ingest_gpu(out: Path, doc: dict, report: dict, rel: str, sha: str, command) -> list[Path]:
    d = doc["device"]
    acc = {"name": d["gpu"], "runtime": f"CUDA {d['cuda']}" if d.get("cuda") else
           f"ROCm {d.get('hip', '?')}", "driver": d.get("driver"), "clocks": d.get("clocks"),
           "sms": d.get("sms"), "memory_gib": d.get("memory_gib")}
    env = run_env(acc)
    rows = doc["rows"]
    roofs = {r["meta"]["roofline"]: r for r in rows if (r.get("meta") or {}).get("roofline")}
    peers = [r for r in rows if (r.get("meta") or {}).get("peer_of") and r.get("status") == "ok"]
    written = []
    for r in rows:
        meta = r.get("meta") or {}
        if r.get("status") != "ok" or "op" not in meta:
            continue
        gemm = r.get("group") == "gemm"
        roof = roofs["bf16_matmul" if gemm else "copy"]
        rate, unit = (r["tflops"], "TFLOP/s") if gemm else (r["gbps"], "GB/s")
        rrate = roof["tflops"] if gemm else roof["gbps"]
        pe = [{"name": p["kernel"].removeprefix("peer: "), "median": p["ms"], "unit": "ms",
               "rate": p.get("tflops", p.get("gbps")),
               "rate_unit": "TFLOP/s" if "tflops" in p else "GB/s", "ratio": _peer_ratio(p, roofs),
               "ratio_label": p.get("ratio_label")}
              for p in peers if p["meta"]["peer_of"] == ("gemm" if gemm else "quantize")
              and (gemm or r.get("group") in ("quantize", "dual"))
              and p["meta"].get("format", meta["format"]) == meta["format"]]
        # the rate follows the median of the repeats (do_bench medians)
        metric = {"name": "kernel time", "unit": "ms", "lower_is_better": True,
                  "repeats": r.get("repeats_ms") or [r["ms"]], "work": rate * r["ms"],
                  "rate_unit": unit, "processes": int(r.get("processes", 1))}
        clocks = r.get("clocks_under_load")
        if isinstance(clocks, dict):             # one process's document, not combined
            clocks = [clocks]
        if clocks:
            metric["clocks_under_load"] = clocks
        rec = make_record(
            suite="gpu-kernels", entry=r["kernel"], group=r.get("group", "quantize"),
            impl=meta["impl"], op=meta["op"], fmt=meta["format"], profile=meta["profile"],
            params={"size": doc["size"], **meta.get("params", {})},
            metric=metric,
            roofline={"name": roof["kernel"].removeprefix("roofline: "),
                      "median": roof["ms"], "unit": "ms", "rate": rrate, "rate_unit": unit,
                      "ratio_label": "of copy" if not gemm else "x cuBLAS BF16",
                      "basis": "rate", "repeats": roof.get("repeats_ms") or [roof["ms"]]},
            peers=pe, check=r.get("check"), command=command,
            verify=_verify_ref(report, rel, sha, "triton"), env=env)
        written.append(_write(out, rec))
    return written


# ---------------------------------------------------------------------------------------------
def run_train(out: Path, *, model: str, recipes: list[str], tokens: int, seed: int,
              device: str, seq_len: int, batch_size: int, validate_every: int, threads: int,
              command: list[str], block_steps: int = TRAIN_BLOCK_STEPS,
              eval_tokens: int = 65_536) -> list[Path]:
    git_state()     # commit + tree of the files now, before the run writes (cached)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "run.log"
    runs = {}
    for rc_name in ["bf16"] + [r for r in recipes if r != "bf16"]:
        rd = out / "runs" / slug(rc_name)
        cmd = [sys.executable, "-m", "mxref.cli", "train", "--model", model, "--recipe",
               rc_name, "--tokens", str(tokens), "--seed", str(seed), "--out", rd,
               "--device", device, "--seq-len", str(seq_len), "--batch-size", str(batch_size),
               "--validate-every", str(validate_every if rc_name != "bf16" else 0),
               "--eval-tokens", str(eval_tokens), "--threads", str(threads), "--no-progress"]
        rc = _run(cmd, log)
        summ = rd / "summary.json"
        if rc != 0 or not summ.is_file() or \
                json.loads(summ.read_text()).get("status") != "complete":
            raise RunnerError(f"mxref train --recipe {rc_name} did not complete (exit {rc}); "
                              f"see {log}")
        runs[rc_name] = rd
    return ingest_train(out, runs, command, block_steps)


def _steps(rd: Path) -> list[dict]:
    return [json.loads(x) for x in (rd / "log.jsonl").read_text().splitlines() if x.strip()]


def train_blocks(times, block_steps: int = TRAIN_BLOCK_STEPS) -> dict:
    """A run's timed step times as repeats: len // block_steps blocks (at least one) of
    near-equal size, so each block holds block_steps steps or a few more (`record.blocked`)."""
    return blocked([times], max(1, len(times) // block_steps))


def _compare_rows(out: Path, runs: dict) -> dict:
    """Each run's row of ``compare.json`` (dL and extra tokens against the bf16 run), keyed by
    the resolved run directory. The file is what ``mxref train compare`` writes; it is made
    here (in a subprocess, like the runs) when ``OUT/compare/compare.json`` does not cover
    every run, so the leaderboard reads run artifacts and never imports training code."""
    dest = out / "compare"
    base = Path(runs["bf16"]).resolve()
    want = {Path(rd).resolve() for name, rd in runs.items() if name != "bf16"}

    def rows():
        if not (dest / "compare.json").is_file():
            return {}
        doc = json.loads((dest / "compare.json").read_text())
        return {Path(r["run"]).resolve(): r for r in doc.get("runs", ())}

    got = rows()
    if not want <= set(got):
        log = out / "run.log"
        rc = _run([sys.executable, "-m", "mxref.cli", "train", "compare", base, *sorted(want),
                   "--out", dest], log)
        got = rows()
        if rc != 0 or not got:
            raise RunnerError(f"mxref train compare did not write {dest / 'compare.json'} "
                              f"(exit {rc}); see {log}")
    missing = sorted(str(p) for p in want - set(got))
    if missing:
        raise RunnerError(f"{dest / 'compare.json'} pairs no bf16 baseline with "
                          f"{', '.join(missing)}")
    return got


def _accelerator(rd: Path) -> dict | None:
    """The GPU a run used, from the environment its config.json recorded (None on the CPU)."""
    env = json.loads((rd / "config.json").read_text()).get("env") or {}
    if not str(env.get("device", "cpu")).startswith("cuda"):
        return None
    return {"name": env.get("gpu"), "runtime": f"CUDA {env.get('cuda')}", "driver": None,
            "clocks": None, "sms": env.get("gpu_sms"), "memory_gib": env.get("gpu_memory_gib")}


def ingest_train(out: Path, runs: dict, command,
                 block_steps: int = TRAIN_BLOCK_STEPS) -> list[Path]:
    """One record per recipe run in `runs` (bf16 is the baseline). The repeats are medians of
    blocks of about `block_steps` timed steps (`train_blocks`), the bf16 roofline's likewise.
    Reads the run directories' files only (summary.json, log.jsonl, checks.jsonl, config.json)
    and the runs' compare.json (`_compare_rows`)."""
    base_dir = runs["bf16"]
    bsum = json.loads((base_dir / "summary.json").read_text())
    bsteps = _steps(base_dir)
    btimes = [s["step_time_s"] for s in bsteps[1:]] or [s["step_time_s"] for s in bsteps]
    broof = train_blocks(btimes, block_steps)
    bmed = statistics.median(broof["repeats"])
    compared = _compare_rows(out, runs)
    acc = _accelerator(base_dir) if str(bsum.get("device", "cpu")).startswith("cuda") else None
    env = run_env(acc)

    def curve(steps):
        return [[s["tokens"], s["loss"]] for s in steps if isinstance(s.get("loss"), float)]

    written = []
    for name, rd in runs.items():
        if name == "bf16":
            continue
        summ = json.loads((rd / "summary.json").read_text())
        steps = _steps(rd)
        cmp = compared[Path(rd).resolve()]
        checks = rd / "checks.jsonl"
        if not checks.is_file() or not checks.read_text().strip():
            raise RunnerError(f"{rd} holds no in-run validation checks (use --validate-every)")
        # steps that captured operands for validation copy them to the host, and steps that
        # timed the quantization ops carry the timer's CUDA events: neither is timed
        checked = {json.loads(x).get("step") for x in checks.read_text().splitlines()
                   if x.strip()}
        times = [s["step_time_s"] for s in steps[1:] if s["step"] not in checked and
                 "quant_share" not in s] or [s["step_time_s"] for s in steps]
        rel, sha = _store_evidence(out, checks, "jsonl")
        lines = [json.loads(x) for x in checks.read_text().splitlines() if x.strip()]
        status = "pass" if all(x.get("ok") for x in lines) else "fail"
        tokens_per_step = steps[0]["tokens"]
        rec = make_record(
            suite="training", entry=f"{summ['model']} {name}", group="train",
            impl=f"MXLinear ({summ.get('device')})", op="train-step", fmt=name,
            profile="recipe",
            params={"model": summ["model"], "recipe": name, "tokens": summ["tokens"],
                    "seed": summ["seed"], "tokens_per_step": tokens_per_step,
                    "timed_steps": len(times), "validated_steps": sorted(checked),
                    "params": summ.get("params")},
            metric={"name": "step time", "unit": "s", "lower_is_better": True,
                    **train_blocks(times, block_steps), "work": tokens_per_step,
                    "rate_unit": "tokens/s"},
            roofline={"name": "bf16 step time (same run)", "median": bmed, "unit": "s",
                      "rate": tokens_per_step / bmed, "rate_unit": "tokens/s",
                      "ratio_label": "x bf16 step time", "basis": "time",
                      **broof},
            peers=[], command=command,
            quality={"final_loss": summ.get("final_train_loss_tail_mean"),
                     "bf16_final_loss": bsum.get("final_train_loss_tail_mean"),
                     "dl_vs_bf16": cmp.get("dL_train_tail"),
                     "dl_vs_bf16_ema": cmp.get("dL_train_ema"),
                     "extra_tokens_frac": cmp.get("extra_tokens_frac"),
                     "quant_share": summ.get("median_quant_share"),
                     "peak_mem_gib": (summ["peak_mem_bytes"] / 2**30
                                      if summ.get("peak_mem_bytes") else None),
                     "loss_curve": curve(steps), "baseline_curve": curve(bsteps)},
            verify={"kind": "in-run-validation", "report": rel, "sha256": sha,
                    "status": status, "backend": f"MXLinear {summ.get('device')}",
                    "cases": len(lines)}, env=env)
        written.append(_write(out, rec))
    return written
