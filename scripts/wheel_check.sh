#!/usr/bin/env bash
# The installed package, as a kernel repository gets it: build the wheel from a clean copy of
# the tracked files, install it with its core dependencies into a fresh venv, and from an empty
# directory (the repository not on the path) run the CLI, the corpus checks, a verify at level 0
# and the example kernel repository's tests with the mxref pytest plugin. Any failure: exit != 0.
#   WHEEL_CHECK_KEEP=DIR  keep the wheel, the venv and the example under DIR (bench/install_cost.py)
#   PYTHON=python3.X      the interpreter for the venv
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python3}
if [ -n "${WHEEL_CHECK_KEEP:-}" ]; then
  WORK=$WHEEL_CHECK_KEEP; rm -rf "$WORK"; mkdir -p "$WORK"
else
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/mxref-wheel.XXXXXX"); trap 'rm -rf "$WORK"' EXIT
fi
step() { echo "== wheel_check: $*" >&2; }

step "copy the tracked and untracked-not-ignored files (no stale build/ output in the wheel)"
"$PY" - "$REPO" "$WORK/src" <<'PYEOF'
import os, shutil, subprocess, sys
repo, dst = sys.argv[1:]
try:
    out = subprocess.run(["git", "-C", repo, "ls-files", "-z", "-co", "--exclude-standard"],
                         check=True, capture_output=True).stdout.decode().split("\0")
except (OSError, subprocess.CalledProcessError):       # not a git checkout: everything
    out = [os.path.relpath(os.path.join(d, f), repo) for d, _, fs in os.walk(repo) for f in fs
           if "/build/" not in d + "/" and ".egg-info" not in d]
for rel in filter(None, out):
    src = os.path.join(repo, rel)
    if os.path.isfile(src):                              # skip deletions not yet committed
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dst, rel))
PYEOF

step "build the wheel"
"$PY" -m pip wheel --quiet --no-deps --no-build-isolation -w "$WORK/dist" "$WORK/src" >&2
WHEEL=$(ls "$WORK"/dist/mxref-*.whl)
echo "wheel: $WHEEL ($(du -k "$WHEEL" | cut -f1) KiB)" >&2

step "fresh venv + the wheel with its core dependencies"
"$PY" -m venv "$WORK/venv"
V="$WORK/venv/bin"
"$V/python" -m pip install --quiet "$WHEEL" >&2
"$V/python" - "$WORK" <<'PYEOF'   # the core install's size, before anything else joins the venv
import json, pathlib, sys, sysconfig
work = pathlib.Path(sys.argv[1])
du = lambda p: sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())
site = pathlib.Path(sysconfig.get_paths()["purelib"])
per = {p.name: du(p) for p in site.iterdir() if p.is_dir() and not p.name.endswith(".dist-info")}
doc = {"venv_bytes": du(work / "venv"), "site_packages_bytes": du(site),
       "largest": dict(sorted(per.items(), key=lambda kv: -kv[1])[:8])}
(work / "core_install.json").write_text(json.dumps(doc, indent=1))
print(f"core install: {doc['venv_bytes'] / 2**20:.0f} MiB (venv)", file=sys.stderr)
PYEOF

step "from an empty directory, the repository not on the path"
mkdir -p "$WORK/empty"
cd "$WORK/empty"
unset PYTHONPATH MXREF_GOLDEN
export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-2}
"$V/python" -m mxref --version
CORPUS=$("$V/python" -m mxref golden path)
echo "corpus: $CORPUS" >&2
case "$CORPUS" in
  "$WORK/venv/"*) ;;
  *) echo "wheel_check: the corpus is not the installed one: $CORPUS" >&2; exit 1 ;;
esac
"$V/python" -c "import mxref.corpus as c, sys; sys.exit(c.expectations_file('torchao') is None)"
"$V/python" -m mxref golden check
"$V/python" -m mxref verify -b numba --level 0 --no-progress > "$WORK/verify_numba_L0.txt" \
  || { tail -20 "$WORK/verify_numba_L0.txt" >&2; exit 1; }
tail -1 "$WORK/verify_numba_L0.txt"

step "the example kernel repository, installed, gated by the plugin"
cp -r "$REPO/examples/kernel_repo" "$WORK/kernel_repo"
rm -rf "$WORK/kernel_repo/build" "$WORK/kernel_repo"/src/*.egg-info
"$V/python" -m pip install --quiet "$WORK/kernel_repo[test]" >&2
rm -rf "$WORK/kernel_repo/src"      # the tests must use the installed package
cd "$WORK/kernel_repo"
"$V/python" -m pytest -q -p no:cacheprovider
step "ok"
