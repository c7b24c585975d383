"""Golden corpus costs: opening every committed L1 file (target <= 1 s) and generating L1
(target <= 2 min on 2 cores). Measured with pytest-benchmark, never asserted."""
import shutil
import tempfile
from pathlib import Path

from mxref.golden import generate as G
from mxref.golden import manifest as M
from mxref.golden.store import read_golden

ROOT = Path(__file__).resolve().parents[1] / "golden"


def _open_all(paths):
    return sum(read_golden(p).num_rows for p in paths)


def test_open_l1(benchmark):
    doc = M.load_manifest(ROOT)
    paths = [ROOT / rel for rel, e in doc["files"].items() if e["level"] == 1]
    benchmark.extra_info.update(files=len(paths), what="open all L1 files (memory_map, zero copy)")
    rows = benchmark.pedantic(_open_all, args=(paths,), rounds=5, warmup_rounds=1)
    assert rows > 0


def test_generate_l1(benchmark):
    from mxref import warmup

    warmup()
    out = Path(tempfile.mkdtemp())
    benchmark.extra_info.update(what="generate all L1 files with cross-checks")
    try:
        benchmark.pedantic(G.generate, args=(out, [1]), rounds=1, iterations=1)
    finally:
        shutil.rmtree(out)
