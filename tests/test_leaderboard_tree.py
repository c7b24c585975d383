"""git.tree: the tree hash of the files a leaderboard run had on disk, and submit's check of it
against the record's commit. The hole it closes: a device's copy of .git is stale, so a wrong
MXREF_COMMIT (or a device-side `git rev-parse HEAD`) stamped a commit the files were not, and
record and evidence agreed with each other.

Each test builds its own git repository in tmp_path (two commits, an executable file, an ignored
file); records are sealed around the real verify report of test_leaderboard.py and planted with
one git block each.
"""
import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_leaderboard import _record, passing_report

from mxref.cli import main
from mxref import provenance as rmod
from mxref.leaderboard.record import git_state, seal, tree_hash
from mxref.leaderboard.schema import schema_problems
from mxref.leaderboard.submit import (
    check_record,
    record_files,
    store_repo,
)

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
STORE = Path(__file__).resolve().parents[1] / "bench/results/leaderboard"


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args],
                          check=True, capture_output=True, text=True,
                          env=dict(os.environ, **GIT_ENV)).stdout.strip()


def _objects(repo) -> list[str]:
    return sorted(str(p.relative_to(repo)) for p in (repo / ".git" / "objects").rglob("*")
                  if p.is_file())


@pytest.fixture(scope="module")
def report_doc():
    return passing_report()


@pytest.fixture
def repo(tmp_path):
    """Commit c1, then c2 (a.py edited); the files on disk are c2's. ignored.txt is ignored."""
    r = tmp_path / "repo"
    (r / "sub").mkdir(parents=True)
    _git(r, "init", "-q")
    (r / ".gitignore").write_text("ignored.txt\n__pycache__/\n")
    (r / "a.py").write_text("print(1)\n")
    (r / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (r / "run.sh").chmod(0o755)
    (r / "sub" / "b.txt").write_text("b\n")
    (r / "ignored.txt").write_text("scratch\n")
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "c1")
    (r / "a.py").write_text("print(2)\n")
    _git(r, "commit", "-q", "-am", "c2")
    return r


@pytest.fixture
def fresh_state(monkeypatch):
    monkeypatch.delenv("MXREF_COMMIT", raising=False)
    monkeypatch.delenv("MXREF_DIRTY", raising=False)
    rmod._git_state.cache_clear()
    yield
    rmod._git_state.cache_clear()


def test_tree_hash_of_a_clean_checkout_is_the_commits_tree(repo):
    index, objects = (repo / ".git" / "index").read_bytes(), _objects(repo)
    t = tree_hash(repo)
    assert t == _git(repo, "rev-parse", "HEAD^{tree}")
    assert tree_hash(repo / "sub") == t                 # the whole checkout from anywhere in it
    assert _git(repo, "ls-tree", "HEAD", "run.sh").startswith("100755 ")   # mode is in the hash
    # the repository's own index and object store are untouched
    assert (repo / ".git" / "index").read_bytes() == index and _objects(repo) == objects


def test_tree_hash_follows_the_files_on_disk(repo):
    index = (repo / ".git" / "index").read_bytes()
    head = _git(repo, "rev-parse", "HEAD^{tree}")
    (repo / "ignored.txt").write_text("other scratch\n")        # ignored: no change
    (repo / "__pycache__").mkdir()
    (repo / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert tree_hash(repo) == head
    (repo / "a.py").write_text("print(3)\n")                    # an edit
    edited = tree_hash(repo)
    assert edited not in (None, head)
    (repo / "a.py").write_text("print(2)\n")                    # undone: the commit's again
    assert tree_hash(repo) == head
    (repo / "new.py").write_text("x = 1\n")                     # untracked, not ignored
    assert tree_hash(repo) not in (None, head)
    (repo / "new.py").unlink()
    (repo / "run.sh").chmod(0o644)                              # the executable bit
    assert tree_hash(repo) not in (None, head)
    (repo / "run.sh").chmod(0o755)
    (repo / "sub" / "b.txt").unlink()                           # a deletion
    assert tree_hash(repo) not in (None, head)
    (repo / "sub" / "b.txt").write_text("b\n")
    assert tree_hash(repo) == head
    assert (repo / ".git" / "index").read_bytes() == index


def test_tree_hash_is_none_without_a_repository(tmp_path):
    (tmp_path / "plain").mkdir()
    assert tree_hash(tmp_path / "plain") is None
    assert tree_hash(tmp_path / "missing") is None


def test_git_state_is_taken_once_per_process(repo, fresh_state, monkeypatch):
    head, c2 = _git(repo, "rev-parse", "HEAD^{tree}"), _git(repo, "rev-parse", "HEAD")
    assert git_state(repo) == {"commit": c2, "dirty": False, "tree": head}
    (repo / "out").mkdir()                              # a run writing into the checkout
    (repo / "out" / "run.log").write_text("...")
    assert git_state(repo)["tree"] == head              # fixed at the first call
    rmod._git_state.cache_clear()
    late = git_state(repo)
    # an untracked, not ignored file: the files are not the commit's, so dirty
    assert late["tree"] not in (None, head) and late["dirty"] is True
    # MXREF_COMMIT wins for the commit; the tree is still the files'
    monkeypatch.setenv("MXREF_COMMIT", "A" * 40)
    monkeypatch.setenv("MXREF_DIRTY", "0")
    assert git_state(repo) == {"commit": "a" * 40, "dirty": False, "tree": late["tree"]}


def _planted(root: Path, doc: dict, git: dict, entry="quantize fp32->mxfp4 ocp rows (numba)"):
    """A record accepted in every other respect, sealed with `git` (its verify report says the
    same commit, as a real run's would)."""
    doc = dict(doc, env=dict(doc["env"], commit=git["commit"], dirty=git["dirty"]))
    p, rec = _record(root, doc, entry=entry)
    rec["git"] = dict(git)
    seal(rec)
    p.write_text(json.dumps(rec))
    return p, rec


def test_submit_rejects_a_tree_that_is_not_the_commits(tmp_path, repo, report_doc):
    c1, c2 = _git(repo, "rev-parse", "HEAD~1"), _git(repo, "rev-parse", "HEAD")
    t1, t2 = _git(repo, "rev-parse", "HEAD~1^{tree}"), _git(repo, "rev-parse", "HEAD^{tree}")
    files = tree_hash(repo)                          # the run's files: c2's
    assert files == t2
    # the hole: files of c2 stamped with the stale commit c1
    p, _ = _planted(tmp_path / "wrong", report_doc, {"commit": c1, "dirty": False, "tree": files})
    v = check_record(p, repo=repo)
    assert v.problems == [(f"the run's files (tree {t2}) are not commit {c1}'s (tree {t1}): "
                           "the record's commit is wrong or the tree was modified (edited or "
                           "untracked files)")], v.problems
    assert not check_record(p, repo=repo, allow_dirty=True).ok    # dirty: false is a claim
    # the right commit, in full or abbreviated
    for commit in (c2, c2[:10]):
        p, _ = _planted(tmp_path / commit, report_doc,
                        {"commit": commit, "dirty": False, "tree": files})
        v = check_record(p, repo=repo)
        assert v.ok and not v.warnings, (v.problems, v.warnings)


def test_submit_rejects_a_commit_it_cannot_find(tmp_path, repo, report_doc):
    unknown = "0123456789abcdef0123456789abcdef01234567"
    p, _ = _planted(tmp_path / "run", report_doc,
                    {"commit": unknown, "dirty": False, "tree": tree_hash(repo)})
    probs = check_record(p, repo=repo).problems
    assert probs == [(f"commit {unknown} is not in this repository ({repo}): cannot check "
                      "the record's tree")], probs
    # a tree hash is not a commit, even though <tree>^{tree} would name itself
    tree = tree_hash(repo)
    p, _ = _planted(tmp_path / "tree", report_doc, {"commit": tree, "dirty": False, "tree": tree})
    assert any("is not in this repository" in x for x in check_record(p, repo=repo).problems)


def test_dirty_and_legacy_records(tmp_path, repo, report_doc):
    c2 = _git(repo, "rev-parse", "HEAD")
    (repo / "a.py").write_text("print(3)\n")
    edited = tree_hash(repo)
    # dirty and said so: the dirty rule decides, the tree is not compared
    p, _ = _planted(tmp_path / "dirty", report_doc, {"commit": c2, "dirty": True, "tree": edited})
    assert [x for x in check_record(p, repo=repo).problems if "dirty" in x]
    assert check_record(p, repo=repo, allow_dirty=True).ok
    # no tree (made before trees were recorded, or git failed): rejected, naming the field
    for git, why in (({"commit": c2, "dirty": False}, "'tree' is a required property"),
                     ({"commit": c2, "dirty": False, "tree": None}, "git/tree:")):
        p, rec = _planted(tmp_path / "legacy", report_doc, git)
        v = check_record(p, repo=repo)
        assert not v.ok and any(why in x for x in v.problems), v.problems
    # the schema: 40 lowercase hex
    rec["git"]["tree"] = "ABC"
    assert any(x.startswith("git/tree:") for x in schema_problems(rec))


def test_cli_submit_looks_commits_up_in_the_stores_repository(tmp_path, repo, report_doc):
    c2 = _git(repo, "rev-parse", "HEAD")
    _planted(tmp_path / "run", report_doc, {"commit": c2, "dirty": False,
                                            "tree": tree_hash(repo)})
    assert store_repo(repo / "lb" / "store") == repo             # not created yet
    r = CliRunner().invoke(main, ["leaderboard", "submit", str(tmp_path / "run"), "--store",
                                  str(repo / "lb"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["records"][0]["warnings"] == []
    r = CliRunner().invoke(main, ["leaderboard", "submit", str(tmp_path / "run"), "--store",
                                  str(tmp_path / "elsewhere"), "--dry-run"])
    assert r.exit_code == 1 and "is not in this repository" in r.output, r.output


def test_committed_records_carry_their_commits_tree():
    """Every stored record names the tree of the files it ran, and it is its commit's tree
    (checked in this repository): the records made before trees were recorded were
    re-measured."""
    files = record_files([STORE])
    assert len(files) >= 46
    for p in files:
        v = check_record(p, current_golden=False, allow_dirty=True)
        assert v.ok and not v.warnings, (p, v.problems, v.warnings)
        assert v.record["git"]["tree"], p
