"""An authenticated golden corpus (issue 27 item 5): every fault below was planted and used to
pass or crash; each is now refused with exit 3 (GoldenIntegrityError) naming the problem.

The corpus under test is a copy of a few committed L0 files whose manifest is re-sealed with
the current generator-source hash, so these tests do not depend on the committed corpus being
freshly regenerated.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from mxref.cli import main
from mxref.golden import manifest as M
from mxref.golden import store
from mxref.golden.columns import generator_source_sha256
from mxref.golden.store import GoldenIntegrityError, sha256_bytes

ROOT = Path(__file__).resolve().parents[1] / "golden"
OP = "dequantize"                          # 6 small L0 files, a tensor 'expected' column
VICTIM = f"L0/{OP}/mxfp4__ocp__float32.arrow"


def _cli(*args):
    return CliRunner().invoke(main, list(args), env={"CI": "true"})


def _doc(root):
    return json.loads((root / "MANIFEST.json").read_text())


def _write_doc(root, doc):
    (root / "MANIFEST.json").write_text(json.dumps(doc))


@pytest.fixture()
def corpus(tmp_path):
    """The committed L0 files of OP, their manifest entries, the current generator hash."""
    root = tmp_path / "g"
    doc = _doc(ROOT)
    doc["files"] = {r: e for r, e in doc["files"].items() if e["op"] == OP and e["level"] == 0}
    for rel in doc["files"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, root / rel)
    doc["generator_source_sha256"] = generator_source_sha256()
    _write_doc(root, doc)
    assert M.check(root) == []
    return root


def _exit3(r, *words):
    assert r.exit_code == 3, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception   # no traceback
    for w in words:
        assert w in r.output, (w, r.output)


# ---- content re-hashed: an expected value edited, sha256_bytes re-sealed -------------------------
def _edit_expected_and_reseal(root, rel=VICTIM, column="exp_dequant"):
    path = root / rel
    t = pa.ipc.open_file(pa.BufferReader(path.read_bytes())).read_all()
    i = t.schema.get_field_index(column)
    col = t.column(i).combine_chunks()
    vals = col.storage.values.to_numpy().copy()
    vals[0] ^= 1                                               # one bit of one expected value
    storage = pa.FixedSizeListArray.from_arrays(pa.array(vals), col.storage.type.list_size)
    t = t.set_column(i, t.schema.field(i), pa.ExtensionArray.from_storage(col.type, storage))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, t.schema) as w:
        w.write_table(t)
    data = sink.getvalue().to_pybytes()
    path.write_bytes(data)
    doc = _doc(root)
    doc["files"][rel].update(sha256_bytes=sha256_bytes(data), bytes=len(data))
    _write_doc(root, doc)


def test_resealed_edit_fails_golden_check(corpus):
    _edit_expected_and_reseal(corpus)
    _exit3(_cli("golden", "check", str(corpus)), VICTIM, "sha256 content")


def test_resealed_edit_fails_generate_check(corpus):
    _edit_expected_and_reseal(corpus)
    r = _cli("generate", "--level", "0", "--suite", OP, "--out", str(corpus), "--check")
    _exit3(r, VICTIM, "sha256 content")


def test_resealed_edit_fails_verify_before_running(corpus):
    _edit_expected_and_reseal(corpus)
    r = _cli("verify", "-b", "numba", "--golden", str(corpus), "--level", "0", "--ops", OP)
    _exit3(r, "sha256 content")


def test_generate_check_compares_rows(corpus):
    doc = _doc(corpus)
    doc["files"][VICTIM]["rows"] += 1
    _write_doc(corpus, doc)
    r = _cli("generate", "--level", "0", "--suite", OP, "--out", str(corpus), "--check")
    _exit3(r, "regenerated", "rows")


# ---- manifest keys: '..', absolute, symlinks out of the corpus --------------------------------
def _outside_copy(corpus, tmp_path):
    """A valid golden file outside the corpus, and its (valid) manifest entry."""
    out = tmp_path / "outside.arrow"
    shutil.copy(corpus / VICTIM, out)
    return out, dict(_doc(corpus)["files"][VICTIM])


@pytest.mark.parametrize("key", ["../outside.arrow", "L0/../../outside.arrow", "ABS",
                                 "L0\\dequantize\\x.arrow", "C:/x.arrow", "L0//x.arrow",
                                 "./L0/x.arrow", "L0/x.json", ""])
def test_bad_key_is_refused_naming_it(corpus, tmp_path, key):
    out, entry = _outside_copy(corpus, tmp_path)
    key = str(out) if key == "ABS" else key
    doc = _doc(corpus)
    doc["files"][key] = entry
    _write_doc(corpus, doc)
    _exit3(_cli("golden", "check", str(corpus)), "manifest schema", repr(key))
    _exit3(_cli("verify", "-b", "numba", "--golden", str(corpus), "--level", "0"), repr(key))


def test_passwd_is_not_read(corpus):
    doc = _doc(corpus)
    doc["files"]["../../../../etc/passwd"] = doc["files"][VICTIM]
    _write_doc(corpus, doc)
    with pytest.raises(GoldenIntegrityError, match="'..'"):
        M.load_manifest(corpus)


@pytest.mark.parametrize("what", ["file", "folder"])
def test_symlink_out_of_the_corpus_is_refused(corpus, tmp_path, what):
    out, entry = _outside_copy(corpus, tmp_path)
    if what == "file":
        rel = "L0/dequantize/evil.arrow"
        (corpus / rel).symlink_to(out)
    else:
        rel = "L0/evil/outside.arrow"
        (corpus / "L0/evil").symlink_to(tmp_path, target_is_directory=True)
    doc = _doc(corpus)
    doc["files"][rel] = entry
    _write_doc(corpus, doc)
    _exit3(_cli("golden", "check", str(corpus)), "outside the corpus", rel)
    _exit3(_cli("verify", "-b", "numba", "--golden", str(corpus), "--level", "0"),
           "outside the corpus")


def test_symlink_inside_the_corpus_is_allowed(corpus):
    (corpus / "L0/alias").symlink_to(corpus / f"L0/{OP}", target_is_directory=True)
    doc = _doc(corpus)
    doc["files"][f"L0/alias/{Path(VICTIM).name}"] = doc["files"][VICTIM]
    _write_doc(corpus, doc)
    assert M.check(corpus) == []


# ---- manifest schema --------------------------------------------------------------------------
def _null(d): d["files"][VICTIM] = None                                     # noqa: E704
def _missing(d): del d["files"][VICTIM]["sha256_content"]                   # noqa: E704
def _level_str(d): d["files"][VICTIM]["level"] = "0"                        # noqa: E704
def _rows_neg(d): d["files"][VICTIM]["rows"] = -1                           # noqa: E704
def _rows_bool(d): d["files"][VICTIM]["rows"] = True                        # noqa: E704
def _hex(d): d["files"][VICTIM]["sha256_bytes"] = "XYZ"                     # noqa: E704
def _classes(d): d["files"][VICTIM]["classes"] = {"E1": [1]}                # noqa: E704
def _extra(d): d["files"][VICTIM]["oops"] = 1                               # noqa: E704
def _files_list(d): d["files"] = []                                         # noqa: E704
def _no_schema(d): del d["schema"]                                          # noqa: E704
def _top_list(d): d.clear()                                                 # noqa: E704


@pytest.mark.parametrize("plant, words", [
    (_null, [VICTIM, "expected an object"]), (_missing, [VICTIM, "missing key(s) sha256_content"]),
    (_level_str, [".level", "non-negative integer"]), (_rows_neg, [".rows"]), (_rows_bool, [".rows"]),
    (_hex, [".sha256_bytes", "hex digest"]), (_classes, [".classes"]), (_extra, ["unknown key(s) oops"]),
    (_files_list, ["manifest.files"]), (_no_schema, ["missing key(s) schema"]),
    (_top_list, ["missing key(s)"])], ids=lambda v: getattr(v, "__name__", ""))
def test_malformed_manifest_is_exit_3_naming_the_problem(corpus, plant, words):
    doc = _doc(corpus)
    plant(doc)
    _write_doc(corpus, doc)
    _exit3(_cli("golden", "check", str(corpus)), "manifest schema", *words)
    # verify used to drop a bad entry silently (level "0") and pass
    _exit3(_cli("verify", "-b", "numba", "--golden", str(corpus), "--level", "0"), "manifest schema")
    _exit3(_cli("generate", "--level", "0", "--suite", OP, "--out", str(corpus), "--check"))


@pytest.mark.parametrize("text, words", [
    ("[" * 100_000 + "]" * 100_000, ["nested too deeply"]),
    ('{"files": {}, "files": {}}', ["'files' appears twice"]),
    ("[1, 2]", ["expected an object"]), ("NaN", ["expected an object"])],
    ids=["deep", "duplicate", "list", "nan"])
def test_unparseable_or_nested_manifest(corpus, text, words):
    (corpus / "MANIFEST.json").write_text(text)
    _exit3(_cli("golden", "check", str(corpus)), *words)


def test_writing_into_a_malformed_manifest_is_exit_3(corpus):
    doc = _doc(corpus)
    doc["files"][VICTIM] = None
    _write_doc(corpus, doc)
    _exit3(_cli("generate", "--level", "0", "--suite", "pack", "--out", str(corpus)), "manifest schema")


# ---- size: refused from stat(), before a byte is read -----------------------------------------
def test_600mb_file_is_refused_without_reading_it(corpus, monkeypatch):
    big = corpus / "L0" / OP / "big.arrow"
    with open(big, "wb") as f:
        f.truncate(600 * 1024 * 1024)                          # sparse: no disk used
    doc = _doc(corpus)
    doc["files"]["L0/dequantize/big.arrow"] = dict(doc["files"][VICTIM], bytes=600 * 1024 * 1024)
    _write_doc(corpus, doc)

    def guarded_open(path, *a, **k):
        assert "big.arrow" not in str(path), "the oversize file was opened for reading"
        return open(path, *a, **k)
    monkeypatch.setattr(store, "open", guarded_open, raising=False)
    problems = [p for p in M.check(corpus) if "big.arrow" in p.path]
    assert [p.check for p in problems] == ["size limit"], problems


# ---- one generator per output folder ---------------------------------------------------------
def test_second_generator_is_refused_naming_the_holder(corpus):
    before = (corpus / "MANIFEST.json").read_text()
    with M.generation_lock(corpus):
        r = _cli("generate", "--level", "0", "--suite", "pack", "--out", str(corpus))
    _exit3(r, "lock", f"pid {os.getpid()}")
    assert (corpus / "MANIFEST.json").read_text() == before and not (corpus / "L0/pack").exists()
    assert not (corpus / M.LOCK).exists()


_HOLD = ("import sys; from pathlib import Path; from mxref.golden.manifest import generation_lock\n"
         "with generation_lock(Path(sys.argv[1])):\n    print('locked', flush=True); sys.stdin.read()\n")


def test_concurrent_generate_processes_one_refused(corpus):
    """A generator process holds the folder (another process, as in two shells); a second
    `mxref generate` process into it exits 3 naming the first one's pid; once the first ends,
    the lock file is gone and the second runs."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(corpus)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        gen = [sys.executable, "-m", "mxref", "generate", "--level", "0", "--suite", "pack",
               "--out", str(corpus)]
        r = subprocess.run(gen, check=False, capture_output=True, text=True, env={**os.environ, "CI": "true"})
        assert r.returncode == 3 and f"pid {holder.pid}" in r.stderr, r.stderr
    finally:
        holder.communicate("")
    assert holder.returncode == 0 and not (corpus / M.LOCK).exists()
    r = subprocess.run(gen, check=False, capture_output=True, text=True, env={**os.environ, "CI": "true"})
    assert r.returncode == 0, r.stderr
    files = _doc(corpus)["files"]
    assert {e["op"] for e in files.values()} == {OP, "pack"}       # neither run's entries lost
    assert M.check(corpus) == [] and not (corpus / M.LOCK).exists()


def test_stale_lock_file_does_not_block(corpus):
    (corpus / M.LOCK).write_text("99999999\n")                 # left by a killed run: not locked
    r = _cli("generate", "--level", "0", "--suite", OP, "--out", str(corpus))
    assert r.exit_code == 0, r.output
    assert not (corpus / M.LOCK).exists() and M.check(corpus) == []


def test_symlinked_lock_file_is_refused(corpus, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (corpus / M.LOCK).symlink_to(victim)
    _exit3(_cli("generate", "--level", "0", "--suite", OP, "--out", str(corpus)), "lock")
    assert victim.read_text() == "keep me"


def test_lock_file_is_not_a_corpus_file_and_not_shipped():
    tomllib = pytest.importorskip("tomllib")
    globs = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["package-data"]["mxref._corpus"]
    assert not any(Path(M.LOCK).match(g) for g in globs) and not Path(M.LOCK).match("*.arrow")
    assert M.LOCK in (ROOT.parent / ".gitignore").read_text().split()
