"""`mxref verify --jobs N` / `--shard K/N`: the shards partition the selection, and the merged
report of the shards is the one-process report, counters, files, records, expectations and
status alike, also when there are mismatches, truncation and known deviations."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mxref.backends.numba_backend import NumbaBackend
from mxref.backends.planted import SwappedNibbles, TiesAway
from mxref.cli import main
from mxref.verify import verify
from mxref.verify.expectations import load_expectations
from mxref.verify.parallel import VerifyWorkerError, verify_parallel
from mxref.verify.run import merge_reports
from mxref.verify.select import default_golden_root, plan_files, select_files, shard_of

from test_verify import PACK_EXPECTATIONS

ROOT = default_golden_root()


def _files(**kw):
    return select_files(ROOT, **kw)[1]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64])
def test_shards_partition_the_selection(n):
    files = _files(levels=(0, 1), ops=["quantize_mx", "dequantize", "gemm", "pack"])
    shards = [shard_of(files, k, n) for k in range(n)]
    got = [f.relpath for s in shards for f in s]
    assert sorted(got) == sorted(f.relpath for f in files) and len(got) == len(set(got))
    order = {f.relpath: i for i, f in enumerate(files)}
    for s in shards:                                     # manifest order kept in each shard
        assert [order[f.relpath] for f in s] == sorted(order[f.relpath] for f in s)
    if n <= len(files):
        assert all(shards), [len(s) for s in shards]     # big groups split until all are busy
    assert [f.relpath for f in shard_of(files, n - 1, n)] == \
        [f.relpath for f in shard_of(list(files), n - 1, n)]        # deterministic
    with pytest.raises(ValueError, match="shard"):
        shard_of(files, n, n)


def _strip(doc):
    return {k: v for k, v in doc.items() if k != "parallel"}


def _merged(backend, n, **kw):
    docs = [verify(backend, shard=(k, n), **kw).doc for k in range(n)]
    sel = _files(levels=kw.get("levels", (1,)), ops=kw.get("ops"),
                 profiles=kw.get("profiles"), formats=kw.get("formats"))
    planned, _ = plan_files(backend, sel, ops=kw.get("ops"), profiles=kw.get("profiles"))
    return merge_reports(docs, max_errors=kw.get("max_errors", 20),
                         strict_xpass=kw.get("strict_xpass", False),
                         file_order=[f.relpath for f in planned])


@pytest.mark.parametrize("n", [2, 3])
def test_merge_equals_one_process_with_mismatches_and_truncation(n):
    kw = dict(profiles=["ocp"], ops=["quantize_mx"], formats=["mxfp4", "mxint8"],
              levels=(0,), max_errors=7)
    one = verify(TiesAway(), **kw).doc
    assert one["status"] == "fail" and one["truncated"] and len(one["mismatches"]) == 7
    merged = _merged(TiesAway(), n, **kw)
    assert merged["parallel"] == {"shards": n}
    assert _strip(merged) == one


def test_merge_equals_one_process_with_expectations(tmp_path):
    f = tmp_path / "exp.toml"
    f.write_text(PACK_EXPECTATIONS)
    for strict in (False, True):
        kw = dict(ops=["pack"], expectations=load_expectations(f), strict_xpass=strict)
        one = verify(SwappedNibbles(), **kw).doc
        merged = _merged(SwappedNibbles(), 3, **kw)
        assert _strip(merged) == one
        assert merged["status"] == ("xpass" if strict else "pass")
        assert merged["summary"]["xfail"] > 0 and merged["summary"]["xpass"] == 1


def test_merge_sees_a_failure_in_any_shard():
    # two shards of a passing reference and one of a planted bug: the merged run fails, with
    # exactly that shard's mismatches (a merge that dropped or overwrote a shard would not)
    kw = dict(profiles=["ocp"], ops=["quantize_mx"], formats=["mxfp4"], levels=(0,))
    good = [verify(NumbaBackend(), shard=(k, 3), **kw).doc for k in range(3)]
    bad = verify(TiesAway(), shard=(1, 3), **kw).doc
    assert bad["summary"]["mismatched_cases"] > 0
    merged = merge_reports([good[0], bad, good[2]], max_errors=20)
    assert merged["status"] == "fail" and merged["exit_code"] == 1
    assert merged["summary"]["mismatched_cases"] == bad["summary"]["mismatched_cases"]
    assert merged["summary"]["cases"] == sum(d["summary"]["cases"] for d in good)
    assert {m["file"] for m in merged["mismatches"]} <= {f["path"] for f in bad["files"]}


def _cli(*args):
    return CliRunner().invoke(main, ["verify", *args], env={"CI": "true"})


def test_cli_jobs_matches_one_process(tmp_path):
    args = ["-b", "mxref.backends.planted:SwappedNibbles", "--ops", "pack", "--level", "0",
            "--level", "1", "--max-errors", "5"]
    r1 = _cli(*args, "--json-out", str(tmp_path / "one.json"))
    r2 = _cli(*args, "-j", "2", "--json-out", str(tmp_path / "two.json"))
    assert r1.exit_code == 1 and r2.exit_code == 1, (r1.output, r2.output)
    one = json.loads((tmp_path / "one.json").read_text())
    two = json.loads((tmp_path / "two.json").read_text())
    # the env is the process's that verified: a worker has not imported what pytest has
    # (torch, triton), so only the keys every process has must agree
    for k in ("python", "numpy", "platform", "commit", "dirty"):
        assert two["env"][k] == one["env"][k], k
    assert two["parallel"] == {"shards": 2}
    assert {**_strip(two), "env": None} == {**one, "env": None}
    # --shard runs one part of the same split
    parts = []
    for k in (1, 2):
        r = _cli(*args, "--shard", f"{k}/2", "--json-out", str(tmp_path / f"s{k}.json"))
        assert r.exit_code in (0, 1), r.output
        parts.append(json.loads((tmp_path / f"s{k}.json").read_text()))
    assert sum(p["summary"]["cases"] for p in parts) == one["summary"]["cases"]
    assert sorted(f["path"] for p in parts for f in p["files"]) == \
        sorted(f["path"] for f in one["files"])


@pytest.mark.parametrize("args, needle", [
    (["-j", "2", "--junit-xml", "x.xml"], "--junit-xml"),
    (["-j", "2", "--detect-profile"], "--detect-profile"),
    (["-j", "2", "--shard", "1/2"], "--shard"),
    (["--shard", "3/2"], "K/N"),
    (["--shard", "two"], "K/N"),
    (["-j", "0"], "0"),
])
def test_cli_usage_errors(args, needle):
    r = _cli("-b", "numba", "--ops", "pack", *args)
    assert r.exit_code == 2 and needle in r.output, r.output


def test_worker_failure_is_a_typed_error():
    with pytest.raises(VerifyWorkerError, match="no-such-backend"):
        verify_parallel({"backend": "no-such-backend", "root": str(ROOT), "levels": [0],
                         "ops": ["pack"], "max_errors": 5}, 2, planned=[])
