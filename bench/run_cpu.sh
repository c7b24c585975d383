#!/usr/bin/env bash
# CPU benchmark of the reference against its peers, same run; results in bench/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python3 -m pytest bench/test_bench_quantize.py -q -p no:cacheprovider \
  --benchmark-json=bench/results/cpu_quantize.json
python3 bench/report.py bench/results/cpu_quantize.json bench/results/cpu_quantize.md
python3 -m pytest bench/test_bench_golden.py -q -p no:cacheprovider \
  --benchmark-json=bench/results/cpu_golden.json
python3 bench/report.py bench/results/cpu_golden.json bench/results/cpu_golden.md
python3 -m pytest bench/test_bench_verify.py -q -p no:cacheprovider \
  --benchmark-json=bench/results/cpu_verify.json
python3 bench/report.py bench/results/cpu_verify.json bench/results/cpu_verify.md
python3 -m pytest bench/test_bench_gemm.py -q -p no:cacheprovider \
  --benchmark-json=bench/results/cpu_gemm.json
python3 bench/report.py bench/results/cpu_gemm.json bench/results/cpu_gemm.md
