"""The ``memplan`` command line.

Verbs:
  solve      solve one instance for one problem and method; prints a report, ``--json`` writes it
  show       print an instance's stage table
  sweep      run an experiment (memory sweep, figures); see ``memplan sweep --help``
  ...        verbs registered by other modules (profile, import-pipedream)

Problems plug in through :data:`PROBLEMS`: a module with ``METHODS`` (list of names),
``DEFAULT_METHOD``, ``solve(chain, platform, args) -> Solution`` and ``report(solution, chain, args)
-> str``. Extra verbs plug in through :data:`COMMANDS`: a module with ``add_parser(subparsers)`` that
sets ``func`` on its parser. Both are imported lazily so that ``memplan solve --problem remat`` does
not import torch.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

PROBLEMS = {
    "remat": "memplan.experiments.solve_remat",
    "offload": "memplan.experiments.solve_offload",
    "pipeline": "memplan.experiments.solve_pipeline",
    "remat-offload": "memplan.experiments.solve_remat_offload",
}

COMMANDS = [
    "memplan.experiments.sweeps",          # memplan sweep ...
    "memplan.experiments.cmd_profile",     # memplan profile / import-pipedream
]


class CliError(Exception):
    """An error for the user: printed without a traceback, exit status 2."""


def optional_import(modname: str):
    """Import ``modname``; None when that module itself is absent (a missing dependency still raises)."""
    try:
        return importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name == modname:
            return None
        raise


def _problem_module(name: str):
    mod = optional_import(PROBLEMS[name])
    if mod is None:
        raise CliError(f"problem {name!r} is not available in this version of memplan")
    return mod


def _cmd_solve(args: argparse.Namespace) -> int:
    from memplan.models.instance import load_instance
    from memplan.models.units import parse_bandwidth, parse_memory

    chain, platform = load_instance(args.instance)
    if args.memory is not None:
        args.memory = parse_memory(args.memory)
    elif platform is not None and platform.memory is not None:
        args.memory = platform.memory
    if args.bandwidth is not None:
        args.bandwidth = parse_bandwidth(args.bandwidth)
    elif platform is not None and platform.bandwidth is not None:
        args.bandwidth = platform.bandwidth
    if args.gpus is None:
        args.gpus = platform.gpus if platform is not None else None
    mod = _problem_module(args.problem)
    method = args.method or mod.DEFAULT_METHOD
    if method not in mod.METHODS:
        raise CliError(f"unknown method {method!r} for problem {args.problem!r}; choose from "
                       + ", ".join(mod.METHODS))
    args.method = method
    sol = mod.solve(chain, platform, args)
    print(mod.report(sol, chain, args))
    if args.json:
        sol.write_json(args.json)
        print(f"solution written to {args.json}")
    if sol.details.get("limit_exceeded"):
        return 1   # a valid schedule, but over the limit (e.g. Checkmate's LP rounding): not a success
    # a bound-only method (e.g. the offloading lower bound) succeeds when it produced its bound
    return 0 if sol.success or (sol.schedule is None and sol.bound is not None) else 1


def _cmd_show(args: argparse.Namespace) -> int:
    import pandas as pd

    from memplan.models.instance import load_instance
    from memplan.models.units import fmt_bandwidth, fmt_memory, fmt_time

    chain, platform = load_instance(args.instance)
    print(f"{chain.name}: L = {chain.L} stages (+ loss), store-all time {fmt_time(chain.store_all_time())}, "
          f"weights {fmt_memory(chain.total_weights())}")
    if platform is not None:
        print(f"platform: memory {fmt_memory(platform.memory)}, bandwidth {fmt_bandwidth(platform.bandwidth)}, "
              f"{platform.gpus} GPU(s)")
    for k, v in chain.provenance.items():
        print(f"  {k}: {v}")
    df = chain.table()
    for col in ("uf", "ub"):
        df[col] = df[col] * 1e3
    for col in ("wa", "wabar", "wd", "of", "ob", "weights"):
        df[col] = df[col] / 2**20
    df = df.rename(columns={"uf": "u_f[ms]", "ub": "u_b[ms]", "wa": "a[MiB]", "wabar": "abar[MiB]",
                            "wd": "delta[MiB]", "of": "o_f[MiB]", "ob": "o_b[MiB]", "weights": "W[MiB]"})
    with pd.option_context("display.max_rows", args.rows, "display.width", 160):
        print(df.round(3).to_string(max_rows=args.rows))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memplan", description="Plan memory-constrained training of chains: "
                                "re-materialization, offloading, both, and pipelined model parallelism.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("solve", help="solve one instance", description="Solve one instance file.")
    s.add_argument("instance", help="instance file (instances/*.json)")
    s.add_argument("--problem", choices=list(PROBLEMS), default="remat")
    s.add_argument("--method", help="method (default depends on the problem; see the README)")
    s.add_argument("--memory", help="memory limit, e.g. 90MiB, 1.5GB (default: the instance's platform)")
    s.add_argument("--bandwidth", help="link bandwidth, e.g. 12GB/s (default: the instance's platform)")
    s.add_argument("--gpus", type=int, help="number of GPUs (pipeline)")
    s.add_argument("--slots", type=int, default=500, help="memory discretization of the DPs: remat slots (default 500); offload DYNPROG grid M/slots; "
                   "remat-offload: slots of the joint DP")
    s.add_argument("--exact", action="store_true", help="DPs: one slot per byte (integer sizes only)")
    s.add_argument("--time-limit", type=float, default=60.0, help="MILP time limit in seconds (default 60)")
    s.add_argument("--gap", type=float, default=1e-4, help="MILP relative gap (default 1e-4)")
    s.add_argument("--threads", type=int, default=None, help="MILP threads")
    s.add_argument("--solver-log", help="write the HiGHS log to this file")
    s.add_argument("--periodicity", type=int, default=2,
                   help="pipeline --method cyclic: mini-batches per period K (default 2)")
    s.add_argument("--json", help="write the Solution as JSON to this file")
    s.add_argument("--gantt", help="write a Gantt chart image (problems with a timeline)")
    s.add_argument("--verbose", "-v", action="store_true")
    s.set_defaults(func=_cmd_solve)

    sh = sub.add_parser("show", help="print an instance's stage table")
    sh.add_argument("instance")
    sh.add_argument("--rows", type=int, default=60)
    sh.set_defaults(func=_cmd_show)

    for modname in COMMANDS:
        mod = optional_import(modname)
        if mod is not None:
            mod.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from memplan.models.instance import InstanceError
    from memplan.models.solution import InfeasibleError
    from memplan.models.units import UnitError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (CliError, InstanceError, UnitError, InfeasibleError, FileExistsError, FileNotFoundError,
            ValueError) as e:   # models raise ValueError subclasses with messages meant for the user
        print(f"memplan: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # pragma: no cover
        print("memplan: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
