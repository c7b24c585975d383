"""scripts/device_golden.sh: golden/ leaves the working tree as an archive and comes back whole.

Runs on a throwaway clone of this repository: `pack` refuses a golden/ that differs from HEAD,
else writes the archive and takes golden/ out of the working tree; `unpack` in a copy of that
tree (as on a device) restores golden/ so that the files' tree hash is HEAD's tree (the value
git itself gives, not the code under test); `restore` brings golden/ back in the clone.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("xz") is None or shutil.which("git") is None,
                                reason="needs git and xz")


def _git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def _sh(cwd, *args):
    return subprocess.run(["bash", "scripts/device_golden.sh", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    d = tmp_path_factory.mktemp("dg") / "repo"
    _git(REPO.parent, "clone", "-q", "--no-hardlinks", str(REPO), str(d))
    # the script as it is in this checkout (it may be newer than the clone's HEAD)
    shutil.copy(REPO / "scripts" / "device_golden.sh", d / "scripts" / "device_golden.sh")
    _git(d, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "script", "--allow-empty")
    return d


def test_pack_refuses_a_golden_that_differs_from_head(clone):
    f = clone / "golden" / "README.md"
    old = f.read_text()
    f.write_text(old + "edited\n")
    try:
        r = _sh(clone, "pack")
        assert r.returncode == 1 and "differs from HEAD" in r.stderr
        assert not (clone / ".devcarry" / "golden.tar.xz").exists()
    finally:
        f.write_text(old)


def test_pack_unpack_restore_round_trip(clone, tmp_path):
    head_tree = _git(clone, "rev-parse", "HEAD^{tree}")
    r = _sh(clone, "pack")
    assert r.returncode == 0, r.stderr
    assert not (clone / "golden").exists()
    assert _git(clone, "status", "--porcelain") == ""          # nothing looks deleted
    archive = clone / ".devcarry" / "golden.tar.xz"
    assert 0 < archive.stat().st_size < 16 * 2**20

    dev = tmp_path / "device"                                    # what a device receives
    shutil.copytree(clone, dev, symlinks=True)
    r = _sh(dev, "unpack")
    assert r.returncode == 0, r.stderr
    assert not (dev / ".devcarry").exists()
    code = ("import sys; from mxref.leaderboard.record import tree_hash; "
            f"print(tree_hash({str(dev)!r}))")
    got = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120).stdout.strip()
    assert got == head_tree

    r = _sh(clone, "restore")
    assert r.returncode == 0, r.stderr
    assert (clone / "golden" / "MANIFEST.json").is_file()
    assert _git(clone, "status", "--porcelain") == ""
