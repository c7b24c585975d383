"""Compare two `mxref verify --json` reports file by file (issue 26: same results before and after
the restructuring). Writes a summary JSON; exits 1 when any file's counts differ.

    python bench/restructure_compare.py BEFORE.json AFTER.json OUT.json
"""
from __future__ import annotations

import json
import sys

KEYS = ("status", "cases", "pass", "mismatch", "error", "skipped", "xfail")


def per_file(doc: dict) -> dict:
    return {(f["path"], f.get("run_as")): {k: f.get(k) for k in KEYS} for f in doc["files"]}


def main(before_path: str, after_path: str, out_path: str) -> int:
    before, after = (json.load(open(p)) for p in (before_path, after_path))
    b, a = per_file(before), per_file(after)
    changed = sorted(str(k) for k in set(b) | set(a) if b.get(k) != a.get(k))
    summary_keys = ("cases", "elements", "passed_cases", "mismatched_cases", "error_cases",
                    "mismatched_elements", "xfail", "skipped_unsupported", "xpass", "files")
    doc = {"before": {"commit": before["env"].get("commit"),
                      "summary": {k: before["summary"][k] for k in summary_keys}},
           "after": {"commit": after["env"].get("commit"),
                     "summary": {k: after["summary"][k] for k in summary_keys}},
           "files_compared": len(set(b) | set(a)), "files_differing": changed}
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"{out_path}: {doc['files_compared']} files, {len(changed)} differ")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
