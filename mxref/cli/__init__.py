"""`mxref` command line. Human tables on stdout, `--json` for machines, errors on stderr.

Exit codes: 0 success; 1 the command ran and found differences where the caller asked to
fail on them (`compare --fail-on-diff`, `verify`, `diff`); 2 usage or input errors (click's
convention); 3 the golden corpus is missing or fails an integrity check.

Every subcommand is loaded when it runs or its --help is asked, never before: `mxref --help`
and `mxref --version` import click and nothing of numpy, Numba or torch. The built-in commands
are listed in COMMANDS; other packages add theirs through the entry-point group
``mxref.commands`` (``name = "package.module:click_command"``), exactly as our own training
command does.
"""
from __future__ import annotations

import importlib
import sys

import click

from .. import __version__

ENTRY_POINT_GROUP = "mxref.commands"

#: built-in commands: name -> (module:attribute, one-line help shown by `mxref --help`)
COMMANDS = {
    "formats": ("mxref.cli.reference:formats_cmd", "List block formats and their derived facts."),
    "profiles": ("mxref.cli.reference:profiles_cmd",
                 "List the named semantic profiles, or show every knob of one."),
    "quantize": ("mxref.cli.reference:quantize_cmd",
                 "Quantize INPUT.npy (default: the bundled sample) and write codes and scales."),
    "compare": ("mxref.cli.reference:compare_cmd",
                "Quantize one tensor under several profiles and count how their bits differ."),
    "warmup": ("mxref.cli.reference:warmup_cmd", "Compile every Numba kernel now."),
    "generate": ("mxref.cli.golden:generate_cmd",
                 "Generate golden files and MANIFEST.json, or --check them."),
    "golden": ("mxref.cli.golden:golden_group",
               "The golden corpus: where it is (path), and its integrity (check)."),
    "inspect": ("mxref.cli.golden:inspect_cmd",
                "Show a golden file's schema, metadata, classes and a few decoded rows."),
    "diff": ("mxref.cli.golden:diff_cmd", "Compare two golden files case by case."),
    "verify": ("mxref.cli.verify:verify_cmd",
               "Verify a kernel stack against the golden corpus, bit for bit."),
    "decompose": ("mxref.cli.decompose:decompose_cmd",
                  "Split quantization error into scale bias, deadzone and grid noise."),
    "scan": ("mxref.cli.scan:scan_cmd", "Audit MX/NVFP4 checkpoints: bad scale bytes, scale rule."),
    "leaderboard": ("mxref.leaderboard.cli:leaderboard_group",
                    "Leaderboard records: run, submit, gate, build, reproduce."),
}


def _load(target: str) -> click.Command:
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def _plugins() -> dict:
    """Entry points of group mxref.commands (a name already built in keeps the built-in)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in COMMANDS}


class _LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use (see the module docstring)."""

    def list_commands(self, ctx):
        return list(COMMANDS) + sorted(_plugins())

    def get_command(self, ctx, name):
        if name in COMMANDS:
            return _load(COMMANDS[name][0])
        ep = _plugins().get(name)
        if ep is None:
            return None
        try:
            return ep.load()
        except ImportError as e:
            raise click.ClickException(
                f"command {name!r} (entry point {ep.value}) cannot be imported: "
                f"{type(e).__name__}: {e}. Install what it needs, e.g. pip install 'mxref[all]'")

    def format_commands(self, ctx, formatter):
        rows = [(n, h) for n, (_, h) in COMMANDS.items()]
        rows += [(n, f"(from {ep.value.split(':')[0]})") for n, ep in sorted(_plugins().items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mxref")
def main():
    """mxref: the bit-exact reference for OCP MX formats (MXFP8/6/4, MXINT8) and NVFP4.

    Which bits must a microscaling quantization produce? mxref answers per named profile
    (ocp, rceil, torchao_*, te_*, triton_kernels_*, microxcaling, ...).
    """


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
