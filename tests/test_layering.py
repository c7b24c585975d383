"""The import contract between the judge (``mxref/``) and a defendant (``mxkernels/``).

An ``ast`` walk over every source file, counting every import wherever it is written (module
level, inside a function, under ``if TYPE_CHECKING``) and the string targets of
``importlib.import_module("...")`` / ``__import__("...")``:

(a) no file under ``mxref/`` names ``mxkernels``: not in an import, not anywhere in its text
    (a string, a comment, a docstring). Our kernels plug in through the ``mxref.backends`` and
    ``mxref.commands`` entry-point groups, exactly as a third party's would.
(b) no file under ``mxkernels/`` imports the judge's machinery (``mxref.backends``,
    ``mxref.verify``, ``mxref.golden``, ``mxref.leaderboard``, ``mxref.cli``; the protocol module
    ``mxref.backends.base`` is public and allowed), nor a private
    (``_``-prefixed) module or name of mxref: a defendant uses what a stranger could.
(c) no two modules of mxref + mxkernels import each other, and no longer import cycle either
    (strongly connected components of the module graph; an import of a package's own
    ``__init__`` from inside the package, ``from .. import __version__``, is an edge too).

``python tests/test_layering.py [ROOT]`` prints every finding for the tree at ROOT (default:
this checkout), e.g. for an older commit: ``git archive COMMIT mxref mxkernels | tar -x -C DIR``.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JUDGE, DEFENDANT = "mxref", "mxkernels"
#: what a defendant may not import from the judge
JUDGE_MACHINERY = ("mxref.backends", "mxref.verify", "mxref.golden", "mxref.leaderboard",
                   "mxref.cli")
#: ... except the backend protocol itself, which any stranger's backend may subclass
PUBLIC_PROTOCOL = ("mxref.backends.base",)
_NAMES_DEFENDANT = re.compile(rf"\b{DEFENDANT}\b")
_IMPORT_FUNCS = {"import_module", "__import__"}


@dataclass(frozen=True)
class Import:
    """One import written in a file: the absolute module it names, and the names taken from
    it (``from m import a, b``: ("a", "b"); ``import m``: ())."""

    line: int
    module: str
    names: tuple = ()
    how: str = "import"          # "import", "from", or "string" (importlib.import_module)


@dataclass
class Findings:
    names_defendant: list = field(default_factory=list)    # (a): (path, line, text)
    judge_machinery: list = field(default_factory=list)    # (b): (path, line, module)
    private_names: list = field(default_factory=list)      # (b): (path, line, name)
    cycles: list = field(default_factory=list)             # (c): sorted module lists
    mutual: list = field(default_factory=list)             # (c): (module, module) pairs

    def lines(self) -> list[str]:
        out = [f"(a) {p}:{n}: names {DEFENDANT}: {t}" for p, n, t in self.names_defendant]
        out += [f"(b) {p}:{n}: imports {m}" for p, n, m in self.judge_machinery]
        out += [f"(b) {p}:{n}: uses the private {m}" for p, n, m in self.private_names]
        out += [f"(c) {a} <-> {b} import each other" for a, b in self.mutual]
        out += [f"(c) import cycle of {len(c)} modules: {' -> '.join(c)}"
                for c in self.cycles if len(c) > 2]
        return out


# ---- the module table and each file's imports --------------------------------------------------
def modules(root: Path, packages=(JUDGE, DEFENDANT)) -> dict:
    """Dotted module name -> source path, for every .py file of the packages under root."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _package_of(mod: str, path: Path) -> str:
    return mod if path.name == "__init__.py" else mod.rpartition(".")[0]


def _resolve(level: int, target: str | None, mod: str, path: Path) -> str:
    if not level:
        return target or ""
    base = _package_of(mod, path).split(".")
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _string_target(call: ast.Call, mod: str, path: Path) -> str | None:
    """The module named by ``importlib.import_module("x"[, package])`` or ``__import__("x")``."""
    fn = call.func
    name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
    if name not in _IMPORT_FUNCS or not call.args:
        return None
    first = call.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    target = first.value
    if target.startswith("."):
        level = len(target) - len(target.lstrip("."))
        return _resolve(level, target.lstrip(".") or None, mod, path)
    return target


def file_imports(path: Path, mod: str) -> list[Import]:
    """Every import in the file, wherever it is written, with relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [Import(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append(Import(node.lineno, _resolve(node.level, node.module, mod, path),
                              tuple(a.name for a in node.names), "from"))
        elif isinstance(node, ast.Call):
            target = _string_target(node, mod, path)
            if target:
                out.append(Import(node.lineno, target, (), "string"))
    return out


def _edges(imp: Import, known: dict) -> set:
    """The modules of the table an import reaches: ``from pkg import sub`` reaches pkg.sub when
    that is a module, else pkg itself (a name defined in its __init__)."""
    hit = set()
    taken_as_module = False
    for n in imp.names:
        if f"{imp.module}.{n}" in known:
            hit.add(f"{imp.module}.{n}")
            taken_as_module = True
    if imp.module in known and (not imp.names or not taken_as_module or
                                any(f"{imp.module}.{n}" not in known for n in imp.names)):
        hit.add(imp.module)
    return hit


def _within(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _private(imp: Import) -> list[str]:
    """Private mxref modules or names the import uses: mxref._x, ``from mxref.y import _z``."""
    if not _within(imp.module, (JUDGE,)):
        return []
    bad = [imp.module] if any(p.startswith("_") for p in imp.module.split(".")[1:]) else []
    bad += [f"{imp.module}.{n}" for n in imp.names if n.startswith("_") and
            not (n.startswith("__") and n.endswith("__"))]
    return bad


# ---- cycles -------------------------------------------------------------------------------------
def strongly_connected(graph: dict) -> list[list]:
    """Tarjan's algorithm (iterative); components of more than one module, each sorted."""
    index, low, on, stack, comps = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        comps.append(sorted(comp))
    return sorted(comps)


def scan(root: Path) -> Findings:
    """Every violation of (a), (b) and (c) in the tree at root."""
    root = Path(root)
    known = modules(root)
    f = Findings()
    graph = {m: set() for m in known}
    for mod, path in known.items():
        rel = path.relative_to(root).as_posix()
        imports = file_imports(path, mod)
        for imp in imports:
            graph[mod] |= _edges(imp, known) - {mod}
        if _within(mod, (JUDGE,)):
            for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if _NAMES_DEFENDANT.search(text):
                    f.names_defendant.append((rel, n, text.strip()))
        elif _within(mod, (DEFENDANT,)):
            for imp in imports:
                if _within(imp.module, PUBLIC_PROTOCOL):
                    pass
                elif _within(imp.module, JUDGE_MACHINERY):
                    f.judge_machinery.append((rel, imp.line, imp.module))
                else:
                    f.judge_machinery += [(rel, imp.line, f"{imp.module}.{n}") for n in imp.names
                                          if _within(f"{imp.module}.{n}", JUDGE_MACHINERY)]
                f.private_names += [(rel, imp.line, name) for name in _private(imp)]
    # (a) also covers the non-Python files shipped in mxref/ (data, expectations, READMEs)
    for path in sorted((root / JUDGE).rglob("*")):
        if path.suffix == ".py" or not path.is_file() or "__pycache__" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if _NAMES_DEFENDANT.search(line):
                f.names_defendant.append((path.relative_to(root).as_posix(), n, line.strip()))
    f.cycles = strongly_connected(graph)
    f.mutual = sorted((a, b) for a in graph for b in graph[a] if a < b and a in graph[b])
    return f


# ---- the tests ----------------------------------------------------------------------------------
_CURRENT = None


def _current() -> Findings:
    global _CURRENT
    if _CURRENT is None:
        _CURRENT = scan(REPO)
    return _CURRENT


def test_the_judge_never_names_the_defendant():
    bad = _current().names_defendant
    assert not bad, "\n".join(f"{p}:{n}: {t}" for p, n, t in bad)


def test_the_defendant_imports_none_of_the_judges_machinery():
    bad = _current().judge_machinery
    assert not bad, "\n".join(f"{p}:{n}: imports {m}" for p, n, m in bad)


def test_the_defendant_uses_no_private_name_of_the_judge():
    bad = _current().private_names
    assert not bad, "\n".join(f"{p}:{n}: uses {m}" for p, n, m in bad)


def test_no_import_cycles():
    f = _current()
    assert not f.mutual and not f.cycles, "\n".join(f.lines())


def test_the_entry_points_import_nothing_heavy():
    """What mxref loads through its entry-point groups (the backends' module and the ``train``
    command group) imports neither torch nor triton nor transformers until used, so
    ``mxref verify --list-backends`` and ``mxref train --help`` stay fast."""
    code = ("import sys; import mxkernels.backends, mxkernels.loader, mxkernels.training.cli; "
            "from click.testing import CliRunner; from mxref.cli import main; "
            "r = CliRunner().invoke(main, ['train', '--help']); assert r.exit_code == 0, r.output; "
            "assert '--recipe' in r.output; "
            "print(sorted(m for m in ('torch', 'triton', 'transformers') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


# ---- the checker can fail: one planted violation of each kind -----------------------------------
def _plant(root: Path, files: dict) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for pkg in (JUDGE, DEFENDANT):
        if not (root / pkg).is_dir():
            continue
        for d in [root / pkg, *(x for x in (root / pkg).rglob("*") if x.is_dir())]:
            (d / "__init__.py").touch()
    return root


def test_a_clean_tree_has_no_findings(tmp_path):
    root = _plant(tmp_path, {
        "mxref/formats.py": "X = 1\n",
        "mxref/backends/base.py": "from ..formats import X\n",
        "mxkernels/backends.py": "from mxref.formats import X\nfrom mxref.errors import E\n",
        "mxref/errors.py": "class E(Exception):\n    pass\n",
    })
    assert scan(root).lines() == []


def test_planted_violations_are_each_reported(tmp_path):
    root = _plant(tmp_path, {
        # (a) an import, a function-level import, an import_module string, a comment
        "mxref/a.py": "import mxkernels.backends\n",
        "mxref/b.py": "def f():\n    from mxkernels import ops\n",
        "mxref/c.py": "import importlib\n\ndef f():\n"
                      "    return importlib.import_module('mxkernels.loader')\n",
        "mxref/d.py": "X = 1  # see the mxkernels docs\n",
        "mxref/data/notes.txt": "made by mxkernels\n",
        # (b) machinery, at module level, in a function, as a string; a private name
        "mxkernels/k1.py": "from mxref.backends.triton_backend import load_kernels\n",
        "mxkernels/k2.py": "def f():\n    from mxref import verify\n",
        "mxkernels/k3.py": "import importlib\nM = importlib.import_module('mxref.golden.store')\n",
        "mxkernels/k4.py": "from mxref.gemm import _element_table\nimport mxref._kernels\n",
        "mxref/gemm.py": "_element_table = 1\n",
        "mxref/_kernels.py": "",
        "mxref/verify/run.py": "", "mxref/golden/store.py": "",
        "mxref/backends/triton_backend.py": "",
        # (c) a 2-cycle through a function-level import, and a 3-cycle
        "mxkernels/training/trainer.py": "def f():\n    from .experiments import VARIANTS\n",
        "mxkernels/training/experiments.py": "from .trainer import train\n",
        "mxref/p.py": "from . import q\n",
        "mxref/q.py": "from .r import x\n",
        "mxref/r.py": "import mxref.p\nx = 1\n",
    })
    f = scan(root)
    assert {(p, n) for p, n, _ in f.names_defendant} == {
        ("mxref/a.py", 1), ("mxref/b.py", 2), ("mxref/c.py", 4), ("mxref/d.py", 1),
        ("mxref/data/notes.txt", 1)}
    assert {(p, m) for p, _, m in f.judge_machinery} == {
        ("mxkernels/k1.py", "mxref.backends.triton_backend"),
        ("mxkernels/k2.py", "mxref.verify"), ("mxkernels/k3.py", "mxref.golden.store")}
    assert {(p, m) for p, _, m in f.private_names} == {
        ("mxkernels/k4.py", "mxref.gemm._element_table"), ("mxkernels/k4.py", "mxref._kernels")}
    assert f.mutual == [("mxkernels.training.experiments", "mxkernels.training.trainer")]
    assert ["mxref.p", "mxref.q", "mxref.r"] in f.cycles
    assert len(f.lines()) == 5 + 3 + 2 + 1 + 1


def test_package_init_and_submodule_edges(tmp_path):
    """``from . import sub`` reaches the submodule, ``from .. import name`` the package."""
    root = _plant(tmp_path, {
        "mxref/__init__.py": "from .quantize import q\n__version__ = '0'\n",
        "mxref/quantize.py": "from . import __version__\nq = 1\n",
    })
    f = scan(root)
    assert f.mutual == [("mxref", "mxref.quantize")]


if __name__ == "__main__":
    found = scan(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO)
    print("\n".join(found.lines()) or "no findings")
    sys.exit(1 if found.lines() else 0)
