"""Turn a pytest-benchmark JSON into bench/results/<name>.md: M elements/s and ratio to torchao."""
import json
import platform
import sys
from pathlib import Path


TIMING_TITLES = {
    "cpu_golden": ("Golden corpus costs (CPU)", "Targets from the golden-corpus issue: open all of "
                   "L1 <= 1 s; generate L1 <= 2 min on 2 cores."),
    "cpu_gemm": ("GEMM reference costs (CPU)", "Target from the rotations/GEMM issue: the exact "
                 "MXFP4 GEMM reference at 1024x1024x1024 <= 30 s on 2 cores; peer in the same "
                 "run: dequantize + numpy float32 matmul."),
    "cpu_verify": ("mxref verify costs (CPU)", "Target from the verify issue: the full L1 corpus "
                   "with the numba backend <= 30 s on 2 cores; harness overhead must not dominate."),
}


def timing_table(doc: dict, name: str = "cpu_golden") -> list[str]:
    """Plain table for benchmarks that are not throughput comparisons."""
    m = doc["machine_info"]
    title, target = TIMING_TITLES.get(name, (name, ""))
    lines = [f"# {title}", "",
             f"Machine: {m.get('cpu', {}).get('brand_raw', '?')}, "
             f"{m.get('cpu', {}).get('count', '?')} logical CPUs; commit "
             f"{doc.get('commit_info', {}).get('id', '?')[:10]}.",
             target, "", "| what | median s | min s | max s | notes |", "|---|---:|---:|---:|---|"]
    for b in doc["benchmarks"]:
        st = b["stats"]
        notes = ", ".join(f"{k} {v}" for k, v in b["extra_info"].items() if k != "what")
        lines.append(f"| {b['extra_info']['what']} | {st['median']:.3f} | {st['min']:.3f} | "
                     f"{st['max']:.3f} | {notes} |")
    return lines


def main(src: str, dst: str) -> None:
    doc = json.loads(Path(src).read_text())
    if not all("fmt" in b["extra_info"] for b in doc["benchmarks"]):
        lines = timing_table(doc, Path(src).stem)
        Path(dst).write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return
    rows = []
    for b in doc["benchmarks"]:
        info = b["extra_info"]
        med = b["stats"]["median"]
        rows.append((info["fmt"], info["impl"], info["elements"] / med / 1e6, med,
                     b["stats"]["iqr"]))
    ref = {f: r for f, i, r, *_ in rows if i == "torchao.to_mx"}
    roof = next((r for f, i, r, *_ in rows if f == "roofline"), None)
    m = doc["machine_info"]
    lines = [
        "# CPU quantize throughput, fp32 8192x8192", "",
        f"Machine: {m.get('cpu', {}).get('brand_raw', platform.processor())}, "
        f"{m.get('cpu', {}).get('count', '?')} logical CPUs, Python {m['python_version']}; "
        f"commit {doc.get('commit_info', {}).get('id', '?')[:10]}; {doc['datetime'][:19]} UTC.",
        "Median of timed rounds (pytest-benchmark); ratios to torchao.to_mx and to the memory "
        "roofline (read fp32, write one byte per element) measured in the same run.",
        "", "| format | implementation | M elem/s | median s | IQR s | x torchao | of roofline |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for f, i, r, med, iqr in sorted(rows):
        ratio = f"{r / ref[f]:.1f}" if f in ref else "-"
        frac = f"{r / roof:.0%}" if roof else "-"
        lines.append(f"| {f} | {i} | {r:,.0f} | {med:.4f} | {iqr:.4f} | {ratio} | {frac} |")
    Path(dst).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
