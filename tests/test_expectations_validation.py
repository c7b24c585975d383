"""Issue 27 item 6: an expectations entry that cannot match what it says (unknown key, wrong
type, unknown op/class/profile/format/src_dtype) is a typed error naming the entry - exit 2
from the CLI - never an entry that silently matches nothing."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from mxref.cli import main
from mxref.errors import MXRefError
from mxref.golden.manifest import load_manifest
from mxref.verify.expectations import (
    KNOWN_CLASSES,
    ExpectationsError,
    _entry,
    load_expectations,
)
from mxref.verify.select import default_golden_root

REPO = Path(__file__).resolve().parents[1]
OK = 'op = "pack"\nreason = "r"\nlink = "https://example.invalid/1"\n'
GOOD = '[[deviation]]\n' + OK + 'format = "mxfp4"\nclass = "L3"\n'


def _write(tmp_path, body):
    f = tmp_path / "exp.toml"
    f.write_text('backend = "x"\n[[deviation]]\n' + OK + '[[deviation]]\n' + body)
    return f


@pytest.mark.parametrize("body, words", [
    (OK + 'classes = "E2"\n', ["#2", "classes", "'E2'", "list"]),
    (OK + 'classes = []\n', ["#2", "classes"]),
    (OK + 'classes = ["E2", 7]\n', ["#2", "classes"]),
    (OK + 'class = ["E2"]\n', ["#2", "class", "string"]),
    (OK + 'classes = ["E2"]\nclass = "S7"\n', ["#2", "not both"]),
    (OK + 'classes = ["ZZ9"]\n', ["#2", "unknown class", "'ZZ9'"]),
    (OK + 'class = "e2"\n', ["#2", "unknown class", "'e2'"]),
    (OK + 'format = "mxfp5"\n', ["#2", "unknown format", "'mxfp5'"]),
    (OK + 'format = "mxfp4+fp9"\n', ["#2", "unknown format"]),
    (OK + 'format = 4\n', ["#2", "format", "string"]),
    (OK + 'profile = "ocpp"\n', ["#2", "unknown profile", "'ocpp'"]),
    (OK + 'profile = ["ocp"]\n', ["#2", "profile", "string"]),
    (OK + 'src_dtype = "fp32"\n', ["#2", "unknown src_dtype", "'fp32'"]),
    (OK + 'field = 3\n', ["#2", "field", "string"]),
    (OK + 'case_id = true\n', ["#2", "case_id"]),
    (OK + 'case_id = "xyz"\n', ["#2", "case_id", "'xyz'"]),
    (OK + 'case_id = -1\n', ["#2", "case_id"]),
    (OK + 'colour = "red"\n', ["#2", "unknown keys", "colour"]),
    (OK.replace('"pack"', '"packk"'), ["#2", "unknown op", "'packk'"]),
    (OK.replace('"pack"', '["pack"]'), ["#2", "op", "string"]),
    (OK.replace('reason = "r"', 'reason = 1'), ["#2", "reason", "string"]),
])
def test_bad_entry_is_a_typed_error_naming_it(tmp_path, body, words):
    f = _write(tmp_path, body)
    with pytest.raises(ExpectationsError) as ei:
        load_expectations(f)
    assert isinstance(ei.value, MXRefError)
    msg = str(ei.value)
    assert str(f) in msg and "deviation" in msg
    for w in words:
        assert w in msg, (w, msg)


@pytest.mark.parametrize("doc, words", [
    ('deviation = "x"\n', ["deviation", "array of tables"]),
    ('backend = 3\n', ["backend", "string"]),
    ('deviation = ["x"]\n', ["#1", "table"]),
])
def test_bad_top_level_is_a_typed_error(tmp_path, doc, words):
    f = tmp_path / "exp.toml"
    f.write_text(doc)
    with pytest.raises(ExpectationsError) as ei:
        load_expectations(f)
    for w in words:
        assert w in str(ei.value)


def test_cli_exits_2_naming_the_entry(tmp_path):
    f = _write(tmp_path, OK + 'classes = "E2"\n')
    r = CliRunner().invoke(main, ["verify", "-b", "numba", "--level", "0", "--ops", "pack",
                                  "--expectations", str(f)], env={"CI": "true"})
    assert r.exit_code == 2 and "deviation #2" in r.output and "classes" in r.output


def test_good_entries_still_load(tmp_path):
    f = tmp_path / "exp.toml"
    f.write_text(GOOD + '[[deviation]]\n' + OK.replace('"pack"', '"gemm"')
                 + 'format = "mxfp4+mxfp8_e4m3"\ncase_id = "0x00000000000000ff"\n'
                 + 'src_dtype = "bfloat16"\nprofile = "ocp"\nfield = "y"\n'
                 + '[[deviation]]\n' + OK.replace('"pack"', '"rotate"') + 'format = "hadamard"\n')
    devs = load_expectations(f)
    assert devs[0].classes == ("L3",) and devs[1].case_id == 0xFF and devs[2].format == "hadamard"


@pytest.mark.parametrize("name", sorted(p.name for p in
                                         (REPO / "conformance" / "expectations").glob("*.toml")))
def test_bundled_expectations_are_valid(name):
    assert load_expectations(REPO / "conformance" / "expectations" / name)


def test_every_corpus_value_is_accepted():
    """The allow-lists cover the installed corpus: no real class/format/profile is refused."""
    files = load_manifest(default_golden_root())["files"].values()
    for e in files:
        d = {"op": e["op"], "format": e["format"], "profile": e["profile"],
             "src_dtype": e["src_dtype"], "classes": list(e["classes"]), "reason": "r",
             "link": "l"}
        _entry(0, d, "corpus")
    assert {c for e in files for c in e["classes"]} <= KNOWN_CLASSES
