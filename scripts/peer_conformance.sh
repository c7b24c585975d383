#!/usr/bin/env bash
# Verify the third-party stacks installed on this machine against the L1 corpus and write their
# reports (text + mxref-verify/1 JSON) and detected profiles to conformance/results/.
set -uo pipefail
cd "$(dirname "$0")/.."
out=conformance/results
mkdir -p "$out"
export CI=true
for b in ml_dtypes torchao torchao-rceil torchao-ceil torchao-even; do
  mxref verify -b "$b" --max-errors 3 --json-out "$out/$b.verify.json" > "$out/$b.verify.txt"
  echo "$b verify exit $?"
  mxref verify -b "$b" --detect-profile --json-out "$out/$b.detect.json" > "$out/$b.detect.txt"
  echo "$b detect exit $?"
done
