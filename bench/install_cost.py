"""Packaging measurements: wheel size, core install size, `mxref --version` time, pytest start-up
with and without the mxref plugin, and what the corpus would cost stored otherwise.

    python bench/install_cost.py [--reuse DIR] [--out bench/results/packaging]

Runs scripts/wheel_check.sh with WHEEL_CHECK_KEEP=DIR (unless --reuse DIR names one it left),
then measures in that venv. Writes OUT.json and OUT.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _median_s(cmd, n=5, cwd=None, env=None) -> dict:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return {"median_s": round(statistics.median(times), 3), "runs_s": [round(x, 3) for x in times]}


def _machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor()) \
        if os.path.exists("/proc/cpuinfo") else platform.processor()
    return {"cpu": cpu, "cores": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2),
            "python": platform.python_version(), "platform": platform.platform()}


def _wheel(dist: Path) -> dict:
    whl = next(dist.glob("mxref-*.whl"))
    with zipfile.ZipFile(whl) as z:
        infos = z.infolist()
    corpus = [i for i in infos if i.filename.startswith("mxref/_corpus/")]
    return {"file": whl.name, "bytes": whl.stat().st_size, "files": len(infos),
            "corpus_files": len(corpus),
            "corpus_compressed_bytes": sum(i.compress_size for i in corpus),
            "corpus_uncompressed_bytes": sum(i.file_size for i in corpus),
            "code_compressed_bytes": sum(i.compress_size for i in infos if i not in corpus)}


def _corpus_alternatives(corpus: Path) -> dict:
    """Each Arrow file rewritten with zstd-compressed buffers: bytes, and time to read all."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    files = sorted(corpus.rglob("*.arrow"))
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        zfiles = []
        for f in files:
            t = ipc.open_file(pa.memory_map(str(f), "r")).read_all()
            z = Path(tmp) / f"{len(zfiles)}.arrow"
            with ipc.new_file(str(z), t.schema,
                              options=ipc.IpcWriteOptions(compression="zstd")) as w:
                w.write_table(t)
            zfiles.append(z)

        def read_all(paths, mmap):
            t0 = time.perf_counter()
            for p in paths:
                src = pa.memory_map(str(p), "r") if mmap else pa.OSFile(str(p), "rb")
                ipc.open_file(src).read_all()
            return time.perf_counter() - t0

        for name, paths, mmap in (("uncompressed_mmap", files, True), ("zstd", zfiles, False)):
            read_all(paths, mmap)  # warm the page cache
            out[name] = {"bytes": sum(p.stat().st_size for p in paths),
                         "read_all_s": round(statistics.median(read_all(paths, mmap)
                                                               for _ in range(3)), 3)}
    out["files"] = len(files)
    return out


def _pytest_startup(venv: Path, n=5) -> dict:
    """A one-test run of pytest in the venv, with the plugin (as installed) and with
    ``-p no:mxref``, alternated so that load changes hit both alike; plus which heavy modules
    a plugin-enabled run leaves in sys.modules (deterministic, unlike the timing)."""
    py = str(venv / "bin" / "python")
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "test_trivial.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
        base = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_trivial.py"]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        runs = {"with_plugin": [], "without_plugin": []}
        for _ in range(n):
            for key, extra in (("with_plugin", []), ("without_plugin", ["-p", "no:mxref"])):
                t = time.perf_counter()
                subprocess.run(base + extra, cwd=tmp, env=env, check=True, capture_output=True)
                runs[key].append(round(time.perf_counter() - t, 3))
        probe = ("import sys, pytest; pytest.main(['-q', '-p', 'no:cacheprovider', "
                 "'test_trivial.py']); print(sorted(m for m in ('numpy', 'numba', 'pyarrow', "
                 "'torch', 'mxref', 'mxref.verify') if m in sys.modules))")
        heavy = subprocess.run([py, "-c", probe], cwd=tmp, env=env, capture_output=True,
                               text=True).stdout.strip().splitlines()[-1]
    doc = {k: {"median_s": statistics.median(v), "runs_s": v} for k, v in runs.items()}
    doc["overhead_fraction"] = round(doc["with_plugin"]["median_s"]
                                     / doc["without_plugin"]["median_s"] - 1, 3)
    doc["modules_after_a_plugin_run"] = heavy
    return doc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reuse", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "packaging")
    a = ap.parse_args()
    work = a.reuse
    wall = None
    if work is None:
        work = Path(tempfile.mkdtemp(prefix="mxref-packaging-"))
        t = time.perf_counter()
        subprocess.run(["bash", str(REPO / "scripts" / "wheel_check.sh")], check=True,
                       env={**os.environ, "WHEEL_CHECK_KEEP": str(work)})
        wall = round(time.perf_counter() - t, 1)
    venv = work / "venv"
    corpus = Path(subprocess.run([str(venv / "bin" / "python"), "-m", "mxref", "golden", "path"],
                                 capture_output=True, text=True, check=True, cwd="/").stdout.strip())
    doc = {
        "schema": "mxref-bench-packaging/1", "machine": _machine(),
        "wheel_check_wall_s": wall,
        "wheel": _wheel(work / "dist"),
        # measured by wheel_check.sh right after installing the wheel (before pytest and the
        # example package went into the same venv)
        "core_install": json.loads((work / "core_install.json").read_text()),
        "mxref_version": _median_s([str(venv / "bin" / "mxref"), "--version"], cwd="/"),
        "python_dash_m_version": _median_s([str(venv / "bin" / "python"), "-m", "mxref",
                                            "--version"], cwd="/"),
        "pytest_startup": _pytest_startup(venv),
        "corpus_storage": _corpus_alternatives(corpus),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    sys.exit(main())
