"""The CLI package (mxref/cli/) and the lazy top-level package: `--help` and `--version` of
every command import neither Numba nor torch; commands load on first use; `python -m mxref`;
the public API of ``import mxref`` is unchanged."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from mxref.cli import COMMANDS, _LazyGroup, main

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numba", "llvmlite", "torch", "triton", "transformers")

_PROBE = """
import sys
from mxref.cli import main
try:
    main(sys.argv[1:], prog_name="mxref")
except SystemExit as e:
    code = e.code
else:
    code = 0
print("HEAVY", sorted(m for m in {heavy!r} if m in sys.modules), "EXIT", code)
"""


def _heavy_after(*args):
    r = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=HEAVY), *args],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("HEAVY")]
    assert line, r.stdout + r.stderr
    heavy, _, code = line[-1].removeprefix("HEAVY ").rpartition(" EXIT ")
    return eval(heavy), code  # noqa: S307 - our own probe's repr of a list of str


@pytest.mark.parametrize("args", [
    ("--help",), ("--version",), ("verify", "--help"), ("golden", "--help"),
    ("golden", "path", "--help"), ("generate", "--help"), ("decompose", "--help"),
    ("leaderboard", "--help"), ("formats", "--help"),
])
def test_help_imports_no_numba_or_torch(args):
    heavy, code = _heavy_after(*args)
    assert code in ("0", "None") and heavy == [], (args, heavy, code)


def test_train_help_imports_no_numba_or_torch():
    """`train` is not built in: it comes from the mxref.commands entry point (our training
    package registers it exactly as a third party would)."""
    from importlib.metadata import entry_points

    if "train" not in {ep.name for ep in entry_points(group="mxref.commands")}:
        pytest.skip("no train command registered in this environment")
    heavy, code = _heavy_after("train", "--help")
    assert code in ("0", "None") and heavy == [], heavy


def test_import_mxref_is_light():
    code = ("import sys, mxref; assert mxref.__version__; "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_python_dash_m_mxref():
    r = subprocess.run([sys.executable, "-m", "mxref", "--version"], capture_output=True,
                       text=True, cwd="/")
    assert r.returncode == 0 and r.stdout.strip() == "mxref, version 0.1.0", r.stderr
    r = subprocess.run([sys.executable, "-m", "mxref", "formats", "--json"],
                       capture_output=True, text=True, cwd="/")
    assert r.returncode == 0 and json.loads(r.stdout)["schema"] == "mxref-formats/1"


def test_every_builtin_command_loads_under_its_name():
    for name, (target, short) in COMMANDS.items():
        cmd = main.get_command(None, name)
        assert isinstance(cmd, click.Command) and cmd.name == name, (name, target)
        assert short and len(short) < 80, name


def test_help_lists_commands_without_loading_them(monkeypatch):
    loaded = []
    monkeypatch.setattr(_LazyGroup, "get_command",
                        lambda self, ctx, name: loaded.append(name))
    r = CliRunner().invoke(main, ["--help"])
    assert r.exit_code == 0 and loaded == []
    for name in COMMANDS:
        assert f"  {name} " in r.output


class _FakeEntryPoint:
    def __init__(self, name, value, target):
        self.name, self.value, self._target = name, value, target

    def load(self):
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


def test_entry_point_commands_load_lazily(monkeypatch):
    import mxref.cli as cli

    @click.command("hello")
    def hello():
        click.echo("hello from a plugin")

    broken = _FakeEntryPoint("broken", "nopkg.cli:group",
                             ModuleNotFoundError("No module named 'nopkg'"))
    monkeypatch.setattr(cli, "_plugins", lambda: {
        "hello": _FakeEntryPoint("hello", "somepkg.cli:hello", hello), "broken": broken})
    r = CliRunner().invoke(main, ["--help"])
    assert "hello" in r.output and "(from somepkg.cli)" in r.output
    assert CliRunner().invoke(main, ["hello"]).output == "hello from a plugin\n"
    r = CliRunner().invoke(main, ["broken"])
    assert r.exit_code == 1 and "nopkg" in r.output and "cannot be imported" in r.output


def test_decompose_help_names_every_distribution():
    """The --synthetic help lists the distributions without importing mxref.decompose."""
    from mxref.cli.decompose import DISTRIBUTION_NAMES
    from mxref.decompose import DISTRIBUTIONS

    assert tuple(DISTRIBUTION_NAMES) == tuple(DISTRIBUTIONS)


def test_lazy_public_api_unchanged():
    import mxref

    for name in mxref.__all__:
        assert getattr(mxref, name) is not None, name
    import mxref.decompose  # noqa: F401 - binds the submodule on the package ...
    import mxref.rotate  # noqa: F401
    for name in ("quantize", "rotate", "gemm", "rotated_gemm", "decompose"):
        assert callable(getattr(mxref, name)) and not isinstance(getattr(mxref, name),
                                                                  type(sys)), name
    # ... but the name is the function
    assert sys.modules["mxref.decompose"] is not mxref.decompose
    with pytest.raises(AttributeError):
        mxref.no_such_name  # noqa: B018
    assert set(mxref.__all__) <= set(dir(mxref))


def test_generate_without_ml_dtypes_says_what_to_install(monkeypatch):
    """The core install has no ml_dtypes; the corpus generator needs it for bfloat16."""
    import mxref.golden.regenerate as R

    def missing(*a, **k):
        raise ModuleNotFoundError("No module named 'ml_dtypes'", name="ml_dtypes")
    monkeypatch.setattr(R, "regenerate_check", missing)
    r = CliRunner().invoke(main, ["generate", "--check", "--level", "0"])
    assert r.exit_code == 2 and "pip install ml_dtypes" in r.output


_WALK = """
import sys
import click
from mxref.cli import main

def walk(cmd, ctx, path):
    cmd.get_help(ctx)
    yield path
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None:
                yield from walk(sub, click.Context(sub, info_name=name, parent=ctx), path + [name])

ctx = click.Context(main, info_name="mxref")
n = sum(1 for _ in walk(main, ctx, []))
print("WALKED", n, sorted(m for m in {heavy!r} if m in sys.modules))
"""


def test_every_help_of_every_command_imports_no_numba_or_torch():
    r = subprocess.run([sys.executable, "-c", _WALK.format(heavy=HEAVY)], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("WALKED")]
    assert line, r.stdout + r.stderr
    _, n, heavy = line[-1].split(" ", 2)
    assert int(n) > len(COMMANDS) and heavy == "[]", line[-1]
