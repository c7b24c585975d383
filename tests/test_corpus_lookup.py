"""Where mxref finds the golden corpus (mxref/corpus.py): an explicit path > MXREF_GOLDEN > the
corpus installed with mxref > the repository checkout; nowhere -> CorpusNotFoundError, exit 3
with where it looked and how to point at one (never an "integrity" error)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import mxref.corpus as corpus
from mxref.cli import main
from mxref.corpus import (CorpusNotFoundError, expectations_dir, expectations_file, golden_root,
                          locate)

REPO_GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _fake_corpus(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "MANIFEST.json").write_text("{}")
    return path


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """No installed corpus and no checkout: mxref/ seen as living in an empty folder."""
    monkeypatch.delenv("MXREF_GOLDEN", raising=False)
    monkeypatch.setattr(corpus, "_HERE", tmp_path / "site" / "mxref")
    monkeypatch.setattr(corpus, "_package_dir", lambda name: None)
    return tmp_path


def test_order_explicit_env_installed_checkout(tmp_path, monkeypatch):
    here = tmp_path / "site" / "mxref"
    checkout = _fake_corpus(tmp_path / "site" / "golden")
    installed = _fake_corpus(here / "_corpus")
    env = _fake_corpus(tmp_path / "env")
    given = _fake_corpus(tmp_path / "given")
    monkeypatch.setattr(corpus, "_HERE", here)
    monkeypatch.setenv("MXREF_GOLDEN", str(env))
    assert locate(given) == (given, "the path given")
    assert locate() == (env, "MXREF_GOLDEN")
    monkeypatch.delenv("MXREF_GOLDEN")
    assert locate() == (installed, "the corpus installed with mxref")
    shutil.rmtree(installed)
    assert locate() == (checkout, "the repository checkout")


def test_explicit_or_env_without_manifest_does_not_fall_through(tmp_path, monkeypatch):
    """Asking for a corpus that is not there is an error even when another one exists."""
    assert (REPO_GOLDEN / "MANIFEST.json").is_file()
    with pytest.raises(CorpusNotFoundError, match="the path given"):
        golden_root(tmp_path)
    monkeypatch.setenv("MXREF_GOLDEN", str(tmp_path / "missing"))
    with pytest.raises(CorpusNotFoundError, match="MXREF_GOLDEN"):
        golden_root()


def test_not_found_message_says_where_and_how(nowhere):
    with pytest.raises(CorpusNotFoundError) as e:
        golden_root()
    msg = str(e.value)
    assert "installed with mxref" in msg and "repository checkout" in msg
    assert "--golden" in msg and "MXREF_GOLDEN" in msg and "integrity" not in msg
    assert isinstance(e.value, FileNotFoundError)


@pytest.mark.parametrize("args", [["verify", "-b", "numba", "--level", "0"],
                                  ["golden", "check"], ["golden", "path"],
                                  ["generate", "--check", "--level", "0"]])
def test_cli_exit_3_when_no_corpus(nowhere, args):
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 3, r.output
    assert "no golden corpus found" in r.output and "integrity" not in r.output


def test_verify_json_when_no_corpus(nowhere):
    r = CliRunner().invoke(main, ["verify", "-b", "numba", "--json"])
    assert r.exit_code == 3
    doc = json.loads(r.stdout)
    assert doc["status"] == "no-corpus" and doc["exit_code"] == 3


def test_golden_check_honours_mxref_golden(tmp_path, monkeypatch):
    (tmp_path / "MANIFEST.json").write_text("{not json")
    monkeypatch.setenv("MXREF_GOLDEN", str(tmp_path))
    r = CliRunner().invoke(main, ["golden", "check"])
    assert r.exit_code == 3 and "not valid JSON" in r.output and str(tmp_path) in r.output


def test_golden_path(tmp_path, monkeypatch):
    monkeypatch.delenv("MXREF_GOLDEN", raising=False)
    r = CliRunner().invoke(main, ["golden", "path"])
    assert r.exit_code == 0 and Path(r.stdout.strip()) == golden_root()
    _fake_corpus(tmp_path)
    monkeypatch.setenv("MXREF_GOLDEN", str(tmp_path))
    r = CliRunner().invoke(main, ["golden", "path", "--json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["golden"] == str(tmp_path) and doc["found_by"] == "MXREF_GOLDEN"


def test_bundled_expectations():
    d = expectations_dir()
    assert d is not None and (d / "torchao.toml").is_file()
    assert expectations_file("torchao") == d / "torchao.toml"
    assert expectations_file("ml_dtypes.toml") == d / "ml_dtypes.toml"
    assert expectations_file("no-such-stack") is None


def test_verify_expectations_by_bundled_name(monkeypatch):
    """--expectations NAME reads the bundled manifest when NAME is not a file."""
    from mxref.cli.verify import _expectations_path

    assert _expectations_path("torchao") == str(expectations_file("torchao"))
    assert _expectations_path("my.toml") == "my.toml"       # not bundled: left as given
    assert _expectations_path(None) is None


def test_package_data_ships_the_whole_corpus():
    """Every file of golden/ and conformance/expectations/ matches pyproject's package-data
    globs of the data packages it maps them to (scripts/wheel_check.sh checks the built wheel)."""
    import fnmatch
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    repo = REPO_GOLDEN.parent
    cfg = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    for pkg, folder in cfg["package-dir"].items():
        globs = cfg["package-data"][pkg]
        files = [p.relative_to(repo / folder).as_posix() for p in (repo / folder).rglob("*")
                 if p.is_file()]
        assert files, folder
        missed = [f for f in files
                  if not any(fnmatch.fnmatch(f, g) or fnmatch.fnmatch(f, g.replace("**/", ""))
                             for g in globs)]
        assert not missed, (pkg, missed[:5])
    assert "setup.py" in {p.name for p in repo.iterdir()}   # lists the two data packages
    assert '"mxref._corpus"' in (repo / "setup.py").read_text()
