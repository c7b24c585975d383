# Sourced by the GPU scripts after `OUT` is set: environment, and `part NAME TIMEOUT_S CMD...`
# which runs CMD under its own timeout, logs to $OUT/NAME.log and counts failures in $fails.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
fails=0
part() {
  local name=$1 t=$2; shift 2
  echo "== $name (timeout ${t}s): $*" | tee -a "$OUT/parts.log"
  local t0=$SECONDS
  timeout --signal=TERM --kill-after=15 "$t" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc after $((SECONDS - t0)) s" | tee -a "$OUT/parts.log"
  if [ $rc -ne 0 ]; then fails=$((fails + 1)); tail -30 "$OUT/$name.log"; fi
  return 0
}
