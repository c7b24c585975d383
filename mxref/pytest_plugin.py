"""pytest plugin (entry point ``pytest11: mxref``): gate a kernel repository's CI on the corpus.

    pytest --pyargs mxref.conformance --mxref-backend=triton --mxref-level=1
    pytest --pyargs mxref.conformance --mxref-backend=mypkg.mx:Backend --mxref-format=mxfp4 \\
        --mxref-src-dtype=bfloat16 --mxref-classes=E2,S7

One test per (golden file, coverage class), with ids like
``test_quantize_mx[bf16-mxfp4-ocp-L1-E2]``, all marked ``mx_conformance``; a failure prints
the same mismatch record as ``mxref verify`` and the ``mxref verify`` command lines that
reproduce it and ask which profile the backend implements. Known deviations from
``--mxref-expectations`` become xfail. The filters mirror ``mxref verify``'s: ``--mxref-ops``,
``--mxref-format`` (``-f``), ``--mxref-src-dtype``, ``--mxref-classes``, ``--mxref-profile``,
``--mxref-level``.

Installed, the plugin is loaded into every pytest run of the environment, so it costs nothing
until used: this module imports only pytest; the backend, the corpus and numba are loaded
when a test asks for the ``mx_golden_case`` fixture with ``--mxref-backend`` given. The one
marker it registers is ``mx_conformance`` (generic names such as ``gpu`` are the user's).
"""
from __future__ import annotations

import fnmatch
import shlex
import warnings

import pytest

MARKERS = {
    "mx_conformance": "a golden-corpus conformance case (mxref); select with -m mx_conformance",
}
SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


class MXRelaxedWarning(UserWarning):
    """A conformance case passed only under a relaxation its backend claims (not bit-exact)."""


def pytest_addoption(parser):
    g = parser.getgroup("mxref", "mxref golden-corpus conformance")
    g.addoption("--mxref-backend", default=None, metavar="B",
                help="backend to verify (numba, torch, triton, ..., or package.module:object)")
    g.addoption("--mxref-device", default=None, help="device for backends that take one")
    g.addoption("--mxref-level", default="1", help="golden levels, comma separated (default 1)")
    g.addoption("--mxref-profile", action="append", default=None,
                help="profiles (repeatable; default: those the backend claims)")
    g.addoption("--mxref-ops", action="append", default=None, metavar="OP[,OP]",
                help="golden ops (comma separated, repeatable; like verify's --ops)")
    g.addoption("--mxref-format", action="append", default=None, metavar="F[,F]",
                help="formats (comma separated, repeatable; like verify's -f)")
    g.addoption("--mxref-src-dtype", action="append", default=None, metavar="D[,D]",
                help="source dtypes: float32, bfloat16, float16 (like verify's --src-dtype)")
    g.addoption("--mxref-classes", action="append", default=None, metavar="C[,C]",
                help="coverage classes, e.g. E2,S7 (like verify's --classes)")
    g.addoption("--mxref-files", default=None,
                help="only golden files whose relpath matches one of these globs (comma separated)")
    g.addoption("--mxref-golden", default=None, help="golden corpus directory")
    g.addoption("--mxref-expectations", default=None, help="TOML manifest of known deviations")
    g.addoption("--mxref-timeout", default=600.0, type=float, metavar="SECONDS",
                help="per backend call, as verify's --timeout (0 = no limit)")
    g.addoption("--mxref-in-process", action="store_true", default=False,
                help="run the backend inside pytest's process (debugging), as verify's "
                     "--in-process; by default it runs in a worker process, so an exit, crash "
                     "or hang in the backend fails its cases instead of ending the session")
    g.addoption("--mxref-no-relax", action="store_true", default=False,
                help="bit-exact or nothing, as verify's --no-relax: the backend's claimed "
                     "relaxations are ignored, so a case that fits one fails")


def pytest_configure(config):
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")


def _split(values) -> list | None:
    """Repeatable, comma-separated option values, as verify's CLI reads them."""
    out = [v.strip() for item in (values or ()) for v in item.split(",") if v.strip()]
    return out or None


class _Session:
    """The backend, the planned files, and one verify run per golden file (cached)."""

    def __init__(self, config):
        from pathlib import Path

        from .backends import get_backend
        from .verify.expectations import load_expectations
        from .verify.run import check_backend
        from .verify.select import default_golden_root, plan_files, select_files

        opt = config.getoption
        self.backend_spec = opt("--mxref-backend")
        self.device = opt("--mxref-device")
        self.golden = opt("--mxref-golden")
        self.ops = _split(opt("--mxref-ops"))
        self.profiles = opt("--mxref-profile")
        self.formats = _split(opt("--mxref-format"))
        self.src_dtypes = _split(opt("--mxref-src-dtype"))
        self.classes = _split(opt("--mxref-classes"))
        self.error = None
        self.files = []
        try:
            try:
                self.levels = tuple(int(v) for v in opt("--mxref-level").split(","))
            except ValueError:
                raise ValueError(f"--mxref-level takes comma-separated integers, got "
                                 f"{opt('--mxref-level')!r}") from None
            self.root = Path(self.golden) if self.golden else default_golden_root()
            self.expectations = load_expectations(opt("--mxref-expectations")) \
                if opt("--mxref-expectations") else None
            if opt("--mxref-in-process"):
                self.backend = get_backend(self.backend_spec, device=self.device)
            else:
                from .verify.isolate import IsolatedBackend
                self.backend = IsolatedBackend(self.backend_spec, self.device,
                                               timeout=opt("--mxref-timeout"))
            if opt("--mxref-no-relax"):
                from .verify.compare import NoRelaxations
                self.backend = NoRelaxations(self.backend)
            check_backend(self.backend)
            _, files = select_files(self.root, levels=self.levels, ops=self.ops,
                                    profiles=self.profiles, formats=self.formats,
                                    src_dtypes=self.src_dtypes, classes=self.classes)
            files, _ = plan_files(self.backend, files, ops=self.ops, profiles=self.profiles,
                                  name=getattr(self.backend, "name", "?"),
                                  claimed_names=list(getattr(self.backend, "profiles", ())))
        except Exception as e:  # noqa: BLE001 - reported as one failing test, never a crash
            self.error = f"{type(e).__name__}: {e}"
            return
        globs = [g for g in (opt("--mxref-files") or "").split(",") if g]
        self.files = [f for f in files if not globs or any(fnmatch.fnmatch(f.relpath, g) for g in globs)]
        self._cache = {}

    def classes_of(self, gf) -> list:
        """The file's coverage classes the run tests (--mxref-classes), in order."""
        return [c for c in sorted(gf.classes) if not self.classes or c in self.classes]

    def _verify_kw(self, gf) -> dict:
        from .formats import FORMATS
        from .ops import OPS
        return {"levels": (gf.level,), "ops": [gf.op],
                "profiles": None if OPS[gf.op].profile_free else [gf.profile],
                "formats": [f for f in gf.fmt.split("+") if f in FORMATS] or None,
                "src_dtypes": [gf.src_dtype]}

    def result(self, gf, cls):
        from .verify.run import verify
        if gf.relpath not in self._cache:
            rep = verify(self.backend, root=self.root, max_errors=1, classes=self.classes,
                         expectations=self.expectations, only={gf.relpath}, **self._verify_kw(gf))
            self._cache = {gf.relpath: rep.cases_by_test}   # keep one file's results alive
        return self._cache[gf.relpath].get((gf.relpath, cls))

    def commands(self, gf, cls) -> tuple:
        """The ``mxref verify`` command lines for one failing (file, class): the one that
        reproduces it, and the one that asks which profile the backend implements (None for
        a profile-free op)."""
        kw = self._verify_kw(gf)
        args = ["mxref", "verify", "-b", self.backend_spec]
        if self.device:
            args += ["--device", self.device]
        if self.golden:
            args += ["--golden", str(self.golden)]
        sel = ["--level", str(gf.level), "--ops", gf.op]
        sel += ["-f", ",".join(kw["formats"])] if kw["formats"] else []
        sel += ["--src-dtype", gf.src_dtype, "--classes", cls]
        if not kw["profiles"]:         # a profile-free op: nothing to detect
            return shlex.join(args + sel), None
        return (shlex.join(args + ["-p", gf.profile] + sel),
                shlex.join(args + ["--detect-profile"] + sel))


def _session(config):
    if not hasattr(config, "_mxref_session"):
        config._mxref_session = _Session(config)
    return config._mxref_session


def pytest_generate_tests(metafunc):
    if "mx_golden_case" not in metafunc.fixturenames:
        return
    op = getattr(metafunc.function, "mx_op", None)
    config = metafunc.config
    if not config.getoption("--mxref-backend"):
        metafunc.parametrize("mx_golden_case", [pytest.param(
            None, marks=pytest.mark.skip(reason="no --mxref-backend given"))], ids=["no-backend"])
        return
    s = _session(config)
    if s.error:
        metafunc.parametrize("mx_golden_case", [("error", s.error)], ids=["mxref-setup-error"])
        return
    params = []
    for gf in s.files:
        if op and gf.op != op:
            continue
        for cls in s.classes_of(gf):
            params.append(pytest.param(
                (gf, cls), id=f"{SHORT.get(gf.src_dtype, gf.src_dtype)}-{gf.fmt}-{gf.profile}-"
                              f"L{gf.level}-{cls}", marks=[pytest.mark.mx_conformance]))
    if not params:
        params = [pytest.param(None, marks=pytest.mark.skip(
            reason=f"nothing selected for op {op} with this backend"))]
    metafunc.parametrize("mx_golden_case", params)


def check_case(request, case):
    """Body of every conformance test: look the case up in the file's verify run."""
    from .verify.report import record_text
    if isinstance(case, tuple) and case[0] == "error":
        pytest.fail(f"mxref conformance cannot run: {case[1]}", pytrace=False)
    gf, cls = case
    s = _session(request.config)
    t = s.result(gf, cls)
    if t is None:
        pytest.fail(f"no verify result for {gf.relpath} class {cls}", pytrace=False)
    if t["status"] in ("fail", "error"):
        again, detect = s.commands(gf, cls)
        how = f"\nreproduce:     {again}" + (
            f"\nwhich profile: {detect}" if detect else
            f"\n({gf.op}'s expected bits do not depend on a profile)")
    if t["status"] == "fail":
        rec = t.get("record")
        pytest.fail(f"{t['mismatched']} of {t['cases']} cases mismatched in {gf.relpath} "
                    f"class {cls}\n" + (record_text(rec) if rec else "") + how, pytrace=False)
    if t["status"] == "error":
        pytest.fail(f"backend error in {gf.relpath} class {cls}: {t.get('reason')}{how}",
                    pytrace=False)
    if t["status"] == "skipped":
        pytest.skip(t.get("reason", "unsupported"))
    if t["status"] == "xfail":
        pytest.xfail(t.get("reason", "known deviation"))
    assert t["status"] == "pass" and t["mismatched"] == 0 and t["errors"] == 0
    if t.get("relaxed"):       # passed under a relaxation the backend claims: say so, not bit-exact
        request.node.user_properties.append(("mxref.relaxed", t["relaxed"]))
        warnings.warn(f"{gf.relpath} class {cls}: {t['relaxed']} of {t['cases']} cases passed "
                      "only under the backend's claimed relaxation (scale one step off, codes "
                      "consistent); not bit-exact", MXRelaxedWarning, stacklevel=1)
