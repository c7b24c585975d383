"""`mxref leaderboard`: run suites, submit records under the verified-only rule, gate
regressions, reproduce an entry, build the site.

Exit codes: 0 ok; 1 a record rejected / a regression / not reproduced; 2 usage or bad input;
4 a suite could not run (reproduce: a re-run failed or wrote no matching record).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from ..errors import MXRefError

DEFAULT_STORE = "bench/results/leaderboard"


def command_line() -> list[str]:
    """The running `run` subcommand as a re-runnable argv with every option spelled out
    (defaults included): ``python3 -m mxref.cli leaderboard run ... --out DIR ...``."""
    ctx = click.get_current_context()
    names, c = [], ctx
    while c.parent is not None:         # the subcommand names, not the program's: invoked as
        names.append(c.info_name)       # `python -m mxref.cli`, click's command_path starts
        c = c.parent                    # "python -m mxref.cli", whose tail is not a command
    argv = ["python3", "-m", "mxref.cli"] + names[::-1]
    for p in ctx.command.params:
        if not isinstance(p, click.Option) or p.name == "as_json":
            continue
        v = ctx.params.get(p.name)
        opt = max(p.opts, key=len)
        for x in (v if p.multiple else [v]):
            if x is None or x is False:
                continue
            argv += [opt] if x is True else [opt, str(x)]
    return argv


def _fail(msg, code=2):
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


def _emit(doc, as_json, text):
    if as_json:
        click.echo(json.dumps(doc, indent=1, sort_keys=True))
    else:
        click.echo(text)


@click.group("leaderboard", context_settings={"help_option_names": ["-h", "--help"]})
def leaderboard_group():
    """Verified-only benchmark leaderboard (docs/leaderboard.md)."""


@leaderboard_group.group("run")
def run_group():
    """Run a suite: mxref verify, then the timing, in one job; writes records under --out."""


def _ran(paths, as_json, out):
    _emit({"records": [str(p) for p in paths], "out": str(out)}, as_json,
          "\n".join(f"wrote {p}" for p in paths) +
          f"\n{len(paths)} record(s); next: mxref leaderboard submit {out}")
    if not paths:
        sys.exit(4)


@run_group.command("cpu")
@click.option("--out", "-o", type=click.Path(file_okay=False), required=True)
@click.option("--size", type=click.IntRange(64), default=4096, show_default=True,
              help="Square fp32 input, SIZE x SIZE.")
@click.option("--rounds", type=click.IntRange(3), default=15, show_default=True,
              help="Timed calls per entry (their spread is recorded).")
@click.option("--processes", type=click.IntRange(1), default=3, show_default=True,
              help="Run the benchmark this many times as separate processes; the repeats are "
                   "the rounds of all of them.")
@click.option("--blocks", type=click.IntRange(1), default=3, show_default=True,
              help="Cut each process's rounds into this many contiguous blocks; a repeat is "
                   "one block's median (the rounds are kept as metric.samples).")
@click.option("--json", "as_json", is_flag=True)
def run_cpu_cmd(out, size, rounds, processes, blocks, as_json):
    """The CPU emulator: verify (numba) + pytest-benchmark against torchao, torch, ml_dtypes."""
    from .runners import run_cpu
    try:
        paths = run_cpu(Path(out), size=size, rounds=rounds, command=command_line(),
                        processes=processes, blocks=blocks)
    except MXRefError as e:
        _fail(str(e), 4)
    _ran(paths, as_json, out)


@run_group.command("gpu")
@click.option("--out", "-o", type=click.Path(file_okay=False), required=True)
@click.option("--size", type=click.IntRange(256), default=8192, show_default=True)
@click.option("--repeats", type=click.IntRange(1), default=3, show_default=True,
              help="Independent do_bench medians per kernel.")
@click.option("--level", "levels", multiple=True, type=click.IntRange(0, 3), default=(0, 1),
              show_default=True)
@click.option("--kernel", "kernels", multiple=True, metavar="NAME",
              help="Time only this kernel (its exact entry name; repeatable). Default: every "
                   "kernel. The verify, rooflines and peers run either way.")
@click.option("--processes", type=click.IntRange(1), default=3, show_default=True,
              help="Run the timing this many times as separate processes, one after the "
                   "other; a record's repeats are all of theirs, so its spread covers "
                   "process-to-process variation.")
@click.option("--jobs", "-j", type=click.IntRange(1), default=None,
              help="Verify worker processes (default: half the cores, at most 8).")
@click.option("--backend", "backends", multiple=True, metavar="B",
              help="Also verify and time this stack (any `mxref verify -b` spec, e.g. triton, "
                   "torchao-compiled-rceil; repeatable) on the same workloads as our fast "
                   "kernels: verified in this job, then timed through its timing entry "
                   "(timed_quantize_mx); a stack without one is listed 'not timed'.")
@click.option("--stack-profile", "stack_profiles", multiple=True, metavar="P",
              help="Time the --backend stacks only at these profiles (default: ocp and rceil "
                   "for a stack that claims them, else every profile it claims).")
@click.option("--device", default=None,
              help="Device of the --backend stacks (default cuda). 'cpu' times them on the "
                   "CPU (CPU wall clock; the records say so) and skips the Triton bench, which "
                   "needs a GPU.")
@click.option("--stacks-only", is_flag=True,
              help="Skip the Triton kernel bench; run only the --backend stacks.")
@click.option("--json", "as_json", is_flag=True)
def run_gpu_cmd(out, size, repeats, levels, kernels, processes, jobs, backends, stack_profiles,
                device, stacks_only, as_json):
    """Every Triton kernel (or those given by --kernel): verify (triton backend) +
    bench/gpu_kernels.py, one job; then each --backend stack: verify + timing entry."""
    from .runners import default_jobs, run_gpu
    device = device or "cuda"           # None: not spelt out in the recorded command
    stacks_only = stacks_only or not device.startswith("cuda")
    if stacks_only and not backends:
        _fail("--stacks-only (or --device cpu) needs at least one --backend")
    paths = []
    try:
        if not stacks_only:
            paths += run_gpu(Path(out), size=size, repeats=repeats, levels=levels,
                             command=command_line(), kernels=kernels, processes=processes,
                             jobs=jobs or default_jobs())
        if backends:
            from .stacks import run_stacks
            paths += run_stacks(Path(out), list(backends), size=size, repeats=repeats,
                                levels=levels, command=command_line(), device=device,
                                profiles=stack_profiles, jobs=jobs or default_jobs())
    except MXRefError as e:
        _fail(str(e), 4)
    _ran(paths, as_json, out)


@run_group.command("train")
@click.option("--out", "-o", type=click.Path(file_okay=False), required=True)
@click.option("--model", "-m", default="llama-tiny", show_default=True)
@click.option("--recipes", default="mxfp4-fdw", show_default=True,
              help="Comma-separated recipes (bf16 always runs as the baseline).")
@click.option("--tokens", type=click.IntRange(1), default=65_536, show_default=True)
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True)
@click.option("--device", default="auto", show_default=True)
@click.option("--seq-len", type=click.IntRange(1), default=128, show_default=True)
@click.option("--batch-size", type=click.IntRange(1), default=8, show_default=True)
@click.option("--validate-every", type=click.IntRange(1), default=4, show_default=True)
@click.option("--eval-tokens", type=click.IntRange(1), default=65_536, show_default=True,
              help="Validation tokens of each run's final evaluation (mxref train "
                   "--eval-tokens).")
@click.option("--threads", type=click.IntRange(0), default=1, show_default=True)
@click.option("--block-steps", type=click.IntRange(1), default=5, show_default=True,
              help="Cut the timed steps into blocks of at least this many steps (one block if "
                   "fewer); a repeat is one block's median (the steps are kept as "
                   "metric.samples). The bf16 roofline's steps likewise.")
@click.option("--json", "as_json", is_flag=True)
def run_train_cmd(out, model, recipes, tokens, seed, device, seq_len, batch_size,
                  validate_every, eval_tokens, threads, block_steps, as_json):
    """Training recipes: bf16 and each recipe, same data order, in-run validation on."""
    from .runners import run_train
    try:
        paths = run_train(Path(out), model=model,
                          recipes=[r for r in recipes.split(",") if r], tokens=tokens,
                          seed=seed, device=device, seq_len=seq_len, batch_size=batch_size,
                          validate_every=validate_every, threads=threads,
                          command=command_line(), block_steps=block_steps,
                          eval_tokens=eval_tokens)
    except MXRefError as e:
        _fail(str(e), 4)
    _ran(paths, as_json, out)


@leaderboard_group.command("submit")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--store", type=click.Path(file_okay=False), default=DEFAULT_STORE,
              show_default=True)
@click.option("--allow-dirty", is_flag=True, help="Accept records built from a dirty tree.")
@click.option("--dry-run", is_flag=True, help="Check only; write nothing.")
@click.option("--json", "as_json", is_flag=True)
def submit_cmd(paths, store, allow_dirty, dry_run, as_json):
    """Validate records (schema, hashes, verify status, commit vs files) and accept the good
    ones into STORE. Commits are looked up in the git checkout STORE lives in."""
    from .submit import StorePathError, accept, check_record, record_files, store_repo
    files = record_files(paths)
    if not files:
        _fail("no record files under " + ", ".join(paths))
    repo = store_repo(store)
    rows, lines = [], []
    for p in files:
        v = check_record(p, allow_dirty=allow_dirty, repo=repo)
        if v.ok and not dry_run:
            try:
                stored = str(accept(v, Path(store)))
            except StorePathError as e:         # escapes the store or collides: nothing written
                v.problems.append(str(e))
        row = {"path": str(p), "accepted": v.ok, "problems": v.problems,
               "warnings": v.warnings}
        if v.ok and not dry_run:
            row["stored"] = stored
        rows.append(row)
        lines.append(("ACCEPT " if v.ok else "REJECT ") + str(p) +
                     "".join(f"\n    - {x}" for x in v.problems) +
                     "".join(f"\n    ~ {x}" for x in v.warnings))
    n_bad = sum(not r["accepted"] for r in rows)
    rosters = _submit_rosters(paths, store, dry_run, lines)
    _emit({"accepted": len(rows) - n_bad, "rejected": n_bad, "records": rows,
           "rosters": rosters}, as_json,
          "\n".join(lines) + f"\n{len(rows) - n_bad} accepted, {n_bad} rejected"
          + (" (dry run)" if dry_run else ""))
    sys.exit(1 if n_bad else 0)


def _submit_rosters(paths, store, dry_run, lines) -> list[dict]:
    """The stack rosters of the run directories in `paths` (mxref.leaderboard.stacks), checked
    and copied into the store (stacks/<machine>.json) with their verify evidence."""
    from .submit import StorePathError, accept_roster, check_roster, roster_files
    out = []
    for p in roster_files(paths):
        doc, probs, ev = check_roster(p)
        row = {"path": str(p), "accepted": not probs, "problems": probs}
        if not probs and not dry_run:
            try:
                row["stored"] = str(accept_roster(doc, ev, Path(store)))
            except StorePathError as e:
                row["accepted"] = False
                probs.append(str(e))
        lines.append(("ROSTER " if row["accepted"] else "REJECT ROSTER ") + str(p) +
                     "".join(f"\n    - {x}" for x in probs))
        out.append(row)
    return out


@leaderboard_group.command("build")
@click.argument("store", type=click.Path(file_okay=False, exists=True), default=DEFAULT_STORE)
@click.option("--out", "-o", type=click.Path(file_okay=False), default="bench/site",
              show_default=True)
@click.option("--json", "as_json", is_flag=True)
def build_cmd(store, out, as_json):
    """LEADERBOARD.md, index.html (sortable tables, plots) and CSV from the stored records.
    Every record is re-checked; records that fail are listed as rejected, not shown."""
    from .build import build_site
    from .submit import check_record, record_files, store_repo
    good, rejected, evidence = [], [], {}
    repo = store_repo(store)
    for p in record_files([store]):
        v = check_record(p, current_golden=False, allow_dirty=True, repo=repo)
        if v.ok:
            good.append(v.record)
            evidence[v.record["record_sha256"]] = v.evidence
        else:
            rejected.append((str(p), "; ".join(v.problems)))
    from .build import load_history, load_rosters
    res = build_site(good, Path(out), rejected=rejected, rosters=load_rosters(store),
                     history=load_history(store, repo), evidence=evidence)
    _emit({k: (str(v) if isinstance(v, Path) else [str(x) for x in v]
               if isinstance(v, list) else v) for k, v in res.items()}, as_json,
          f"{len(good)} records ({len(rejected)} rejected) -> {out}/")


@leaderboard_group.command("gate")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--baseline", type=click.Path(file_okay=False, exists=True), default=DEFAULT_STORE,
              show_default=True, help="The store holding the baseline records.")
@click.option("--floors", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Run-to-run floor file (default: BASELINE/run_to_run.json when present).")
@click.option("--no-floor", is_flag=True, help="Hold records to their spreads only.")
@click.option("--json", "as_json", is_flag=True)
def gate_cmd(paths, baseline, floors, no_floor, as_json):
    """Fail (exit 1) when a new record's median is worse than the stored baseline of the same
    GPU model / machine and suite version by more than the measured run-to-run spread: the
    larger of the two records' spreads and the store's run-to-run floor."""
    from .floor import FILE_NAME, FloorError, load
    from .gate import gate
    try:
        fl = {} if no_floor else load(floors or Path(baseline) / FILE_NAME)
    except FloorError as e:
        _fail(str(e), 2)
    rows = gate(paths, baseline, fl)
    bad = [r for r in rows if r["status"] in ("regression", "error")]
    lines = []
    for r in rows:
        if "change" in r:
            lines.append(f"{r['status']:<11} {r['entry']} [{r['machine']}]: "
                         f"{r['base_median']:.6g} -> {r['new_median']:.6g} {r['unit']} "
                         f"({r['change']:+.1%} worse; tolerance {r['tolerance']:.1%})")
        else:
            lines.append(f"{r['status']:<11} {r['entry']}: {r.get('reason', '')}")
    _emit({"rows": rows, "regressions": len(bad)}, as_json,
          "\n".join(lines) + f"\n{len(bad)} regression(s) in {len(rows)} record(s)")
    sys.exit(1 if bad else 0)


@leaderboard_group.command("floor")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--quantile", type=click.FloatRange(0, 1, min_open=True), default=0.9,
              show_default=True, help="Which quantile of the entries' run-to-run moves.")
@click.option("--out", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write (merge into) this floor file, e.g. "
                   "bench/results/leaderboard/run_to_run.json. Default: print only.")
@click.option("--json", "as_json", is_flag=True)
def floor_cmd(runs, quantile, out, as_json):
    """Measure the run-to-run floor from RUNS: two or more outputs of the same `leaderboard run`
    command at the same commit, each made in a separate job (another machine lease). Per suite
    and machine, the QUANTILE of the entries' largest relative move of the median between runs.

    Exit 0 written or printed, 2 the runs cannot give a floor (fewer than two, different code,
    a dirty tree, nothing shared)."""
    from .floor import FloorError, load, measure, merge
    try:
        doc = measure(runs, quantile=quantile)
        if out:
            old = None
            if Path(out).is_file():
                load(out)                       # refuses to overwrite a file that is not one
                old = json.loads(Path(out).read_text())
            doc = merge(old, doc)
            Path(out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    except FloorError as e:
        _fail(str(e), 2)
    lines = [f"{f['suite']} on {f['machine']}: floor {f['floor']:.2%} (q{f['quantile']:g} of "
             f"{f['entries']} entries x {f['runs']} runs; median {f['median_diff']:.2%}, max "
             f"{f['max_diff']:.2%})" for f in doc["floors"]]
    _emit(doc, as_json, "\n".join(lines) + (f"\n-> {out}" if out else ""))


@leaderboard_group.command("reproduce")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--slack", type=click.FloatRange(0), default=1.0, show_default=True,
              help="Tolerance = recorded spread x SLACK.")
@click.option("--only-needed", is_flag=True,
              help="Re-run only the entries given, where the command has a filter (run gpu: "
                   "--kernel per entry; run train: --recipes); other commands run as recorded.")
@click.option("--timeout", type=click.FloatRange(1), default=3600, show_default=True,
              help="Seconds per re-run command.")
@click.option("--keep", type=click.Path(file_okay=False), default=None,
              help="Leave each re-run's records in KEEP/run-<i> instead of a temporary directory.")
@click.option("--floors", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Run-to-run floor file (default: the repository's "
                   "bench/results/leaderboard/run_to_run.json when present).")
@click.option("--no-floor", is_flag=True, help="Hold records to their recorded spreads only.")
@click.option("--allow-command", is_flag=True,
              help="Also run sealed records whose command is not of a known form (mxref ..., "
                   "python -m mxref[.cli] ..., python/bash bench|scripts/<script>). Unsealed "
                   "or schema-invalid records are never run.")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
@click.option("--json", "as_json", is_flag=True)
def reproduce_cmd(paths, slack, only_needed, timeout, keep, floors, no_floor, allow_command,
                  quiet, as_json):
    """Re-run the recorded commands of the records in PATHS (files or directories), each
    distinct command once, and check every record's new median is within its recorded spread
    (or the measured run-to-run floor of its suite and machine, when that is larger).

    Only sealed, schema-valid records run, and only commands of known forms unless
    --allow-command; never through a shell.

    Exit 0 every record reproduced, 1 some did not, 4 some could not be compared (a command
    failed or wrote no matching record), 2 bad input or a refused record (nothing was run)."""
    from .floor import FILE_NAME, FloorError, load
    from .record import REPO
    from .reproduce import ReproduceError, exit_code, reproduce_records

    try:
        fl = {} if no_floor else load(floors or REPO / DEFAULT_STORE / FILE_NAME)
    except FloorError as e:
        _fail(str(e), 2)
    t0 = time.monotonic()

    def say(msg):
        click.echo(msg, err=True)

    def echo(line):                     # the command's output, with the seconds since start
        say(f"    | {time.monotonic() - t0:4.0f} s  {line}")

    try:
        rows, runs = reproduce_records(
            paths, only_needed=only_needed, allow_command=allow_command, slack=slack,
            timeout=timeout, keep=keep,
            progress=None if quiet else say, echo=None if quiet else echo, floors=fl)
    except ReproduceError as e:
        _fail(str(e), 2)
    code = exit_code(rows)
    counts = {s: sum(r["status"] == s for r in rows)
              for s in ("reproduced", "not-reproduced", "error")}
    _emit({"rows": rows, "runs": runs, "slack": slack, "only_needed": only_needed,
           "summary": {"records": len(rows), "commands": len(runs), **counts},
           "exit": code}, as_json,
          reproduce_table(rows) + f"\n{counts['reproduced']} reproduced, "
          f"{counts['not-reproduced']} not reproduced, {counts['error']} error(s) in "
          f"{len(rows)} record(s), {len(runs)} command(s) run")
    sys.exit(code)


def reproduce_table(rows) -> str:
    """One line per record: recorded and new medians, the signed difference, the tolerance
    (max(recorded spread, floor) x slack; marked 'f' when the floor decided it), the re-run's
    spread, whether the new median is in the widened
    recorded range, and the verdict; a line under it with the clocks under load of both runs
    where both have them."""
    width = max([len(r["entry"]) for r in rows] + [5])
    head = (f"{'entry':<{width}}  {'recorded':>12}  {'new':>12}  {'diff':>8}  {'tol':>7}  "
            f"{'new rng':>7}  {'range':>5}  status")
    lines = [head, "-" * len(head)]
    for r in rows:
        if r["status"] == "error":
            lines.append(f"{r['entry']:<{width}}  {'':>12}  {'':>12}  {'':>8}  {'':>7}  "
                         f"{'':>7}  {'':>5}  error: {r['reason']}")
            continue
        u = r["unit"] or ""
        lines.append(f"{r['entry']:<{width}}  {r['recorded_median']:>9.4g} {u:<2}  "
                     f"{r['new_median']:>9.4g} {u:<2}  {r['difference']:>+8.2%}  "
                     f"{r['tolerance']:>6.2%}{'f' if r.get('tolerance_from') == 'floor' else ' '}"
                     f"  {r['new_spread']:>7.2%}  "
                     f"{'in' if r['within_range'] else 'out':>5}  {r['status']}")
        if r.get("clocks"):
            lines.append(f"{'':<{width}}  clocks under load: {r['clocks']['note']}")
    lines.append("(a range is (max - min) / median of the repeats; tol = max(recorded range, "
                 "floor) x slack; new rng = the re-run's range; range in/out: the new median "
                 "within the recorded [min, max] widened by new rng)")
    return "\n".join(lines)
