#!/usr/bin/env bash
# Send golden/ to a lent GPU machine compressed. The device tool copies the working tree, 64 MiB
# at most; golden/ is 61 MiB of uncompressed Arrow IPC (kept uncompressed for zero-copy reads)
# but about 5 MiB as tar.xz. Here, around a device call:
#   scripts/device_golden.sh pack      # .devcarry/golden.tar.xz from HEAD; golden/ leaves the
#                                      # working tree (a sparse checkout; nothing is deleted
#                                      # from git, nothing uncommitted is touched)
#   device run, carry [".devcarry"], command beginning: scripts/device_golden.sh unpack && ...
#   scripts/device_golden.sh restore   # golden/ back on disk, the sparse checkout off
# There, `unpack` extracts the archive into golden/ and turns the sparse checkout off in that
# copy's .git, so `git add` (record.tree_hash) sees golden/ again and a record's git.tree is
# the commit's tree.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ARCHIVE=.devcarry/golden.tar.xz
case ${1:-} in
  pack)
    if ! git diff --quiet HEAD -- golden || [ -n "$(git ls-files --others --exclude-standard golden)" ]; then
      echo "device_golden: golden/ differs from HEAD; commit it first (the archive is HEAD's)" >&2
      exit 1
    fi
    mkdir -p .devcarry
    grep -qx '/.devcarry/' "$(git rev-parse --git-path info/exclude)" 2>/dev/null ||
      { mkdir -p "$(dirname "$(git rev-parse --git-path info/exclude)")";
        echo '/.devcarry/' >> "$(git rev-parse --git-path info/exclude)"; }
    git archive --format=tar HEAD golden | xz -T0 -6 > "$ARCHIVE.tmp"
    mv "$ARCHIVE.tmp" "$ARCHIVE"
    git sparse-checkout set --no-cone '/*' '!/golden/'
    echo "device_golden: $ARCHIVE $(du -h "$ARCHIVE" | cut -f1); golden/ is out of the working tree" \
         "until: scripts/device_golden.sh restore"
    ;;
  restore)
    git sparse-checkout disable
    git diff --quiet HEAD -- golden && echo "device_golden: golden/ restored"
    ;;
  unpack)
    [ -f "$ARCHIVE" ] || { echo "device_golden: no $ARCHIVE (carry .devcarry)" >&2; exit 1; }
    python3 - "$ARCHIVE" <<'EOF'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    t.extractall(".", filter="data")
EOF
    rm -rf .devcarry      # that copy's .git may not ignore it: it would enter record.tree_hash
    git config --worktree core.sparseCheckout false 2>/dev/null || true
    git config core.sparseCheckout false 2>/dev/null || true
    echo "device_golden: golden/ unpacked ($(find golden -type f | wc -l) files)"
    ;;
  *) echo "usage: scripts/device_golden.sh pack|restore|unpack" >&2; exit 2 ;;
esac
