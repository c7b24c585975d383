"""`mxref verify`: hold a kernel stack to the golden corpus (the work is in mxref.verify; this
module only parses options and maps outcomes to exit codes, importing nothing heavy at load)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from ..errors import MXRefError
from .common import (
    OutputPathError,
    distinct_outputs,
    prepare_output,
    split_values,
    stdout_to_stderr,
    write_atomic,
)


def _verify_exit(code: int, msg: str, as_json: bool, status: str):
    from ..verify.run import SCHEMA
    if as_json:
        click.echo(json.dumps({"schema": SCHEMA, "status": status, "exit_code": code,
                               "error": msg}, indent=2))
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


@click.command("verify")
@click.option("-b", "--backend", "backend_spec", metavar="B",
              help="numba, torch, triton, rocm, ml_dtypes, torchao[-rceil|-ceil|-even], "
                   "transformer_engine, gfloat, fouroversix, nv-host[-rceil], amd-host, an "
                   "entry point of group mxref.backends, or package.module:object.")
@click.option("--device", default=None, help="Device for backends that take one (torch: cuda, cuda:1, ...).")
@click.option("--golden", "root", type=click.Path(file_okay=False), default=None,
              help="Golden corpus directory (default: $MXREF_GOLDEN, else the corpus installed "
                   "with mxref; `mxref golden path` prints which).")
@click.option("--suite", default=None, metavar="S[@VERSION]", help="Require this suite (mx-core).")
@click.option("-p", "--profile", "profiles", multiple=True, metavar="P",
              help="Profiles to verify (default: every profile the backend claims).")
@click.option("--ops", multiple=True, metavar="OP[,OP]",
              help="Golden ops (default: every op the backend implements): the core ops "
                   "quantize_mx, quantize_mx_tensor, quantize_nvfp4, convert, dequantize, pack; "
                   "rotate, quantize_rotated, gemm, rotated_gemm, quantize_mx_sr, "
                   "quantize_nvfp4_sr, mxfp4_to_fp8, fp8_to_mxfp4, reblock, decompose, "
                   "macroblock, outlier_fallback, quantize_4over6.")
@click.option("--classes", multiple=True, metavar="C[,C]", help="Coverage classes, e.g. E2,S7.")
@click.option("-f", "--format", "formats", multiple=True, metavar="F[,F]")
@click.option("--src-dtype", "src_dtypes", multiple=True, metavar="D[,D]",
              help="float32, bfloat16, float16.")
@click.option("--level", "levels", multiple=True, type=click.IntRange(0, 3), default=(1,),
              show_default=True)
@click.option("--max-errors", default=20, show_default=True, type=click.IntRange(0),
              help="Mismatch records listed (0 = all); the counters always cover everything.")
@click.option("--json", "as_json", is_flag=True,
              help="Print exactly one JSON document (mxref-verify/1); whatever the backend "
                   "prints to stdout goes to stderr instead.")
@click.option("--json-out", type=click.Path(dir_okay=False),
              help="Also write the JSON report here. Like every output path, it is checked "
                   "before the run: missing parent directories are created, an unwritable "
                   "path is refused with exit 2; reports are written atomically.")
@click.option("--junit-xml", type=click.Path(dir_okay=False),
              help="JUnit XML, one testcase per (golden file, class).")
@click.option("--expectations", "expectations_path", type=click.Path(dir_okay=False),
              help="TOML manifest of known deviations (reported as XFAIL), or the name of one "
                   "bundled with mxref (torchao, ml_dtypes, gfloat, fouroversix, nv_host).")
@click.option("--strict-xpass", is_flag=True, help="Fail (exit 1) when a known deviation now passes.")
@click.option("--detect-profile", is_flag=True,
              help="Compare the backend's native behaviour with every profile's goldens.")
@click.option("--dump-mismatches", type=click.Path(), metavar="F.arrow|DIR",
              help="Write failing rows with actual_* columns in the golden schema (F.arrow "
                   "for one file, else a directory; created before the run if missing).")
@click.option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(1),
              help="Worker processes: the selection is split into this many shards, each "
                   "verified by its own process; one merged report.")
@click.option("--shard", default=None, metavar="K/N",
              help="Verify only shard K of N (1-based; the split --jobs uses), e.g. to spread "
                   "a CI run over N machines.")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(0),
              metavar="SECONDS",
              help="Per backend call: a call that takes longer is stopped (its worker killed), "
                   "its cases are errors and the run exits 1. 0 = no limit.")
@click.option("--in-process", is_flag=True,
              help="Run the backend inside mxref's own process (debugging: a debugger or "
                   "profiler sees its frames). By default it runs in a worker process, so an "
                   "exit, crash, signal or hang in the backend is a reported error, never a "
                   "pass; in-process, os._exit or a segfault ends mxref too, and --timeout "
                   "does not apply.")
@click.option("--no-relax", is_flag=True,
              help="Bit-exact or nothing: ignore the relaxations the backend claims (e.g. "
                   "scale_step), so a block that fits one is a mismatch (exit 1). The claim is "
                   "still recorded in the report (relaxations_refused).")
@click.option("--no-progress", is_flag=True, help="No progress bar (also off when not a TTY or CI=true).")
@click.option("--list-backends", is_flag=True, help="List known backend names and exit.")
def verify_cmd(backend_spec, device, root, suite, profiles, ops, classes, formats, src_dtypes,
               levels, max_errors, as_json, json_out, junit_xml, expectations_path, strict_xpass,
               detect_profile, dump_mismatches, jobs, shard, timeout, in_process, no_relax,
               no_progress, list_backends):
    """Verify a kernel stack against the golden corpus, bit for bit.

    Exit codes: 0 every selected case bit-exact (expected xfails allowed); 1 mismatches or
    backend errors - a backend that raises, exits, dies on a signal or exceeds --timeout
    included (or XPASS with --strict-xpass); 2 usage; 3 golden corpus not found or failing an
    integrity check; 4 backend unavailable (import failure, no device, or no claimed profile/op
    to run); 5 nothing selected.

    The backend runs in a worker process (see --in-process): mxref compares, applies
    expectations and reports in its own process, and requires every selected case to be
    answered.

    Output paths (--json-out, --junit-xml, --dump-mismatches) are checked before the run:
    missing parent directories are created; a path that cannot be written is refused with
    exit 2 naming it, so a long run never ends in a lost report. A report that still fails to
    be written at the end exits 2.
    """
    from ..backends import BackendUnavailable, UnknownBackendError, get_backend
    from ..backends import list_backends as _lb
    from ..corpus import CorpusNotFoundError, golden_root
    from ..golden.store import GoldenIntegrityError
    from ..verify import ExpectationsError, SelectionError, load_expectations, verify
    from ..verify import detect_profile as _detect
    from ..verify.report import detect_text, text_report
    from ..verify.report import dump_mismatches as _dump
    from ..verify.report import junit_xml as _junit

    if list_backends:
        names = _lb()
        click.echo(json.dumps({"backends": names}) if as_json else "\n".join(names))
        return
    if not backend_spec:
        _verify_exit(2, "missing option --backend (see --list-backends)", as_json, "usage")
    if as_json and json_out == "-":
        _verify_exit(2, "--json already prints to stdout", as_json, "usage")
    ops, classes, formats, src_dtypes = (split_values(v) or None
                                         for v in (ops, classes, formats, src_dtypes))
    shard_kn = None
    if shard is not None:
        k, _, n = shard.partition("/")
        if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
            _verify_exit(2, f"--shard {shard!r}: expected K/N with 1 <= K <= N, e.g. 2/4",
                         as_json, "usage")
        shard_kn = (int(k) - 1, int(n))
    if jobs > 1:
        clash = [o for o, on in (("--detect-profile", detect_profile), ("--junit-xml", junit_xml),
                                 ("--dump-mismatches", dump_mismatches), ("--shard", shard))
                 if on]
        if clash:
            _verify_exit(2, f"--jobs {jobs} cannot be combined with {', '.join(clash)} "
                            "(run those with --jobs 1)", as_json, "usage")
    outputs = [(opt, path, is_dir) for opt, path, is_dir in (
        ("--json-out", json_out, False), ("--junit-xml", junit_xml, False),
        ("--dump-mismatches", dump_mismatches, not str(dump_mismatches or "").endswith(".arrow")))
        if path and not (detect_profile and opt != "--json-out")]
    try:
        distinct_outputs([(opt, path) for opt, path, _ in outputs])
        for opt, path, is_dir in outputs:
            prepare_output(path, opt, directory=is_dir)
    except OutputPathError as e:
        _verify_exit(2, str(e), as_json, "usage")
    try:
        root = golden_root(root)
    except CorpusNotFoundError as e:
        _verify_exit(3, str(e), as_json, "no-corpus")
    show = (not no_progress and sys.stderr.isatty() and os.environ.get("CI", "").lower() != "true")
    try:
        expectations_path = _expectations_path(expectations_path)
        expectations = load_expectations(expectations_path) if expectations_path else None
        with stdout_to_stderr(as_json):    # a backend's import-time prints stay off --json
            if in_process:
                backend = get_backend(backend_spec, device=device)
            else:
                from ..verify.isolate import IsolatedBackend
                backend = IsolatedBackend(backend_spec, device, timeout=timeout)
    except (ExpectationsError, UnknownBackendError) as e:
        _verify_exit(2, str(e), as_json, "usage")
    except BackendUnavailable as e:
        _verify_exit(4, f"backend unavailable: {e}", as_json, "unavailable")
    bar = click.progressbar(length=1, label=f"verify {backend_spec}", file=sys.stderr, hidden=not show)

    def progress(gf, i, n):
        bar.length = n
        bar.update(1)
    dumps = [] if dump_mismatches else None
    try:
        with bar, stdout_to_stderr(as_json):    # the backend's prints must not corrupt --json
            if detect_profile:
                d = _detect(backend, root=root, levels=levels, ops=ops, formats=formats,
                            src_dtypes=src_dtypes, classes=classes,
                            native=profiles[0] if profiles else None, progress=progress)
                code = 0 if d["matches"] else 1
                d["exit_code"] = code
            elif jobs > 1:
                from ..verify.parallel import verify_parallel
                from ..verify.run import check_backend
                from ..verify.select import plan_files, select_files
                check_backend(backend)
                _, sel = select_files(root, levels=levels, ops=ops, profiles=list(profiles) or None,
                                      formats=formats, src_dtypes=src_dtypes, classes=classes,
                                      suite=suite)
                planned, _ = plan_files(backend, sel, ops=ops, profiles=list(profiles) or None,
                                        name=backend_spec,
                                        claimed_names=list(getattr(backend, "profiles", ())))
                bar.length = max(1, len(planned))
                if not in_process:
                    backend.close()     # each shard worker starts its own
                d = verify_parallel(
                    {"backend": backend_spec, "device": device, "root": str(root),
                     "levels": list(levels), "ops": ops, "profiles": list(profiles) or None,
                     "formats": formats, "src_dtypes": src_dtypes, "classes": classes,
                     "suite": suite, "max_errors": max_errors,
                     "expectations_path": expectations_path, "strict_xpass": strict_xpass,
                     "isolate": not in_process, "timeout": timeout, "no_relax": no_relax},
                    jobs, progress=lambda rel, i, n: bar.update(1),
                    planned=[f.relpath for f in planned])
                code = d["exit_code"]
            else:
                rep = verify(backend, root=root, levels=levels, ops=ops, profiles=list(profiles) or None,
                             formats=formats, src_dtypes=src_dtypes, classes=classes, suite=suite,
                             max_errors=max_errors, expectations=expectations,
                             strict_xpass=strict_xpass, progress=progress, dump=dumps,
                             shard=shard_kn, no_relax=no_relax)
                d, code = rep.doc, rep.exit_code
    except SelectionError as e:
        _verify_exit(2, str(e), as_json, "usage")
    except GoldenIntegrityError as e:
        _verify_exit(3, f"golden integrity: {e}", as_json, "integrity")
    except BackendUnavailable as e:
        _verify_exit(4, f"backend unavailable: {e}", as_json, "unavailable")
    except KeyboardInterrupt:
        _verify_exit(130, "interrupted", as_json, "interrupted")
    except MXRefError as e:             # a verify worker died (--jobs)
        _verify_exit(1, str(e), as_json, "error")
    lost = []                           # outputs that failed to be written despite the check
    if detect_profile:
        text = detect_text(d)
    else:
        text = text_report(d)
        if junit_xml:
            try:
                write_atomic(junit_xml, _junit(d, rep.cases_by_test))
            except OSError as e:
                lost.append(f"--junit-xml {junit_xml}: {e}")
        if dumps:
            try:
                d["dumped"] = _dump(root, dumps, Path(dump_mismatches))
            except OSError as e:
                lost.append(f"--dump-mismatches {dump_mismatches}: {e}")
    if lost:
        d["output_errors"] = lost
    if json_out:
        try:
            write_atomic(json_out, (json.dumps(d, indent=1) + "\n").encode())
        except OSError as e:
            lost.append(f"--json-out {json_out}: {e}")
            d["output_errors"] = lost
    click.echo(json.dumps(d, indent=1) if as_json else text)
    if lost:
        for msg in lost:
            click.echo(f"error: report not written: {msg}", err=True)
        sys.exit(2)
    if code == 5:
        click.echo("nothing selected: no golden case matches the filters", err=True)
    elif code == 4:
        click.echo("the backend could run none of the selected cases (all unsupported)", err=True)
    sys.exit(code)


def _expectations_path(given):
    """A path as given, or the bundled manifest of that name (``torchao`` -> torchao.toml)."""
    if not given or Path(given).exists():
        return given
    from ..corpus import expectations_file

    bundled = expectations_file(given)
    return str(bundled) if bundled else given
