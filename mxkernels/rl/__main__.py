"""``python -m mxkernels.rl {run,pretrain} --config JSON`` (one arm / one seed's pretraining,
the worker of experiment.run_grid) and ``grid`` / ``compare`` (as ``mxref train rl``)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m mxkernels.rl")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run", "pretrain"):
        p = sub.add_parser(name)
        p.add_argument("--config", required=True, help="RLConfig fields as JSON")
    g = sub.add_parser("grid")
    g.add_argument("--out", required=True)
    g.add_argument("--scale", default="tiny")
    g.add_argument("--seeds", default="0")
    g.add_argument("--arms", default=None, help="comma-separated (default: all)")
    g.add_argument("--jobs", type=int, default=1)
    g.add_argument("--steps", type=int, default=None)
    g.add_argument("--where", default=None)
    g.add_argument("--device", default="auto")
    c = sub.add_parser("compare")
    c.add_argument("root")
    a = ap.parse_args(argv)
    if a.cmd in ("run", "pretrain"):
        from .loop import RLConfig, pretrain, pretrain_file, resolve_device, run

        cfg = RLConfig(**json.loads(a.config))
        if a.cmd == "run":
            run(cfg)
        else:
            pretrain(cfg, pretrain_file(cfg), resolve_device(cfg.device))
        return 0
    from .experiment import DEFAULT_ARMS, compare, markdown, run_grid

    if a.cmd == "grid":
        arms = a.arms.split(",") if a.arms else DEFAULT_ARMS
        seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
        rep = run_grid(arms, seeds, Path(a.out), a.scale, a.jobs, steps=a.steps, where=a.where,
                       device=a.device)
    else:
        rep = compare(Path(a.root))
    sys.stdout.write(markdown(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
