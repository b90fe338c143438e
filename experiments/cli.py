"""The ``memplan`` command line: a thin user of the Python API.

Verbs:
  solve      argparse -> options -> :func:`memplan.solve` -> the problem module's ``report`` (and
             ``gantt`` with ``--gantt``); ``--json`` writes the Solution
  show       print an instance's stage table
  sweep      run an experiment (memory sweep, figures); see ``memplan sweep --help``
  ...        verbs registered by other modules (profile, import-pipedream, run)

The problems are those of :data:`memplan.problems`; every option of ``solve`` maps to the keyword of
the same name of the problem module's ``solve`` (``--time-limit`` -> ``time_limit``), and an option
the chosen problem does not take is an error, not silently ignored. Extra verbs plug in through
:data:`COMMANDS`: modules with ``add_parser(subparsers)`` that sets ``func`` on its parser.

Errors meant for the user (bad input, an infeasible limit) print one line and exit with status 2.
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys
import time

import memplan
from memplan.models.instance import load_instance
from memplan.models.solution import InfeasibleError, Status, instance_record
from memplan.models.units import fmt_bandwidth, fmt_memory, fmt_time

from memplan.experiments import cmd_budget, cmd_profile, figures, sweeps
from memplan.experiments.cli_checks import (CliError, OneLineParser, guarded, image_file, output_file, positive_int,
                                            writing)
from memplan.formulations.highs_driver import silence_banner

#: modules with ``add_parser(subparsers)`` adding verbs (sweep, plot; profile, import-pipedream, run; budget)
COMMANDS = [sweeps, figures, cmd_profile, cmd_budget]

#: ``solve`` options: (flag, keyword of the problem's solve)
SOLVE_OPTIONS = [("--gpus", "gpus"), ("--slots", "slots"), ("--exact", "exact"), ("--time-limit", "time_limit"),
                 ("--gap", "gap"), ("--threads", "threads"), ("--solver-log", "solver_log"),
                 ("--periodicity", "periodicity"), ("--memory-model", "memory_model")]




class _Progress:
    """Progress lines to stderr, held back for the first ``delay`` seconds of a call: a solve that ends
    sooner prints nothing, a long one shows every line (the held-back ones first)."""

    def __init__(self, delay: float = 1.0):
        self.t0 = time.monotonic()
        self.delay = delay
        self.held: list[str] = []

    def __call__(self, line: str) -> None:
        self.held.append(line)
        if time.monotonic() - self.t0 >= self.delay:
            print("\n".join(self.held), file=sys.stderr, flush=True)
            self.held.clear()


def _cmd_solve(args: argparse.Namespace) -> int:
    from memplan._frontend import method_arg, unread_options

    mod = memplan.problems[args.problem]
    # a bad method first: without --memory on an instance with no platform memory, the missing memory was
    # the error named, and a corrected command then failed on the method
    method = method_arg(args.method, mod.METHODS, mod.DEFAULT_METHOD, args.problem)
    params = inspect.signature(mod.solve).parameters
    options = {}
    for flag, key in SOLVE_OPTIONS:
        value = getattr(args, key)
        if value is None or value is False:
            continue
        if key not in params:
            takes = ["--memory"] + (["--bandwidth"] if "bandwidth" in params else []) + [
                f for f, k in SOLVE_OPTIONS if k in params]
            raise CliError(f"{flag} is not an option of --problem {args.problem} (its options: "
                           + ", ".join(takes) + ")")
        options[key] = value
    used = getattr(mod, "OPTIONS_USED", None)
    idle = unread_options(used, [method], [k for _, k in SOLVE_OPTIONS if k in options])
    if idle:              # an option of the problem that this method does not read: refused, not ignored
        key, users = idle[0]
        flag = next(f for f, k in SOLVE_OPTIONS if k == key)
        reads = [f for f, k in SOLVE_OPTIONS if k in used[method]]
        raise CliError(f"{flag} is not read by --method {method} (--problem {args.problem}), which would "
                       f"ignore it: it is for {', '.join(users)}; {method} reads "
                       + (", ".join(reads) if reads else "none of the tuning options") + " (and --time-limit)")
    if args.gantt and not hasattr(mod, "gantt"):
        raise CliError(f"--gantt: --problem {args.problem} has no timeline to draw")
    if args.bandwidth is not None and "bandwidth" not in params:       # said as the other options are
        raise CliError(f"--bandwidth is not an option of --problem {args.problem} (its options: "
                       + ", ".join(["--memory"] + [f for f, k in SOLVE_OPTIONS if k in params]) + ")")
    chain, platform = load_instance(args.instance)
    if args.problem == "remat-offload" and args.bandwidth is None and (platform is None or platform.bandwidth is None):
        # the API reads no bandwidth as "no link"; from the command line a forgotten --bandwidth silently
        # solved re-materialization alone (offload and 'memplan sweep remat-offload' refuse it)
        raise CliError(f"--bandwidth: required for --problem remat-offload ({args.instance} has no platform "
                       "bandwidth); give the host link's, e.g. --bandwidth 12GB/s, or --bandwidth 0 for no link "
                       "(re-materialization alone)")
    plan_chain = chain
    if args.free_backward:
        # plan the executor without holds ('memplan run' runs such an instance so): the chain whose backward
        # overheads are the free replay's (models.remat.free_backward_chain)
        from memplan.models.remat import free_backward_chain

        if args.problem != "remat":
            raise CliError(f"--free-backward is an option of --problem remat only (not {args.problem})")
        try:
            plan_chain = free_backward_chain(chain)
        except (TypeError, ValueError) as e:     # an edited record (stages out of range: IndexError, or wrapped)
            what = str(e) if str(e).startswith("free_backward") else f"free_backward cannot be used ({e})"
            raise CliError(f"--free-backward: {args.instance}: provenance.{what}; profile the network again with "
                           "'memplan profile'") from None
        if plan_chain is chain:
            raise CliError(f"--free-backward: {args.instance} has no free_backward record; profile the network "
                           "again with 'memplan profile' (since 2026-11-29; single-tensor cuts, stages not compiled)")
    # every output is checked (its folder made) before the solve, so a long solve's result is not lost
    for flag, key in (("--json", "json"), ("--gantt", "gantt"), ("--solver-log", "solver_log")):
        if getattr(args, key) is not None:       # an empty name is an error, not 'no file'
            output_file(getattr(args, key), flag)
    if args.gantt is not None:
        image_file(args.gantt, "--gantt")
    if args.quiet:
        silence_banner()
    sol = memplan.solve((plan_chain, platform), args.problem, args.method, memory=args.memory,
                        bandwidth=args.bandwidth, progress=None if args.quiet else _Progress(), **options)
    if args.problem == "remat":
        # the memory model the plan fits in: 'memplan run' runs it in that one (a --free-backward plan run
        # with the holds of paper 004's model peaked over its limit, unsaid)
        sol.details["memory_model"] = "free_backward" if args.free_backward else "paper004"
    if args.json:
        sol.instance = instance_record(chain, args.instance)   # 'memplan run' refuses it on another instance
        sol.write_json(args.json)
    if sol.status == Status.INFEASIBLE:
        raise InfeasibleError(sol.message, sol.details.get("min_memory"))
    print(mod.report(sol, plan_chain))
    if args.gantt:
        if sol.schedule is None:
            print("Gantt chart  not drawn: no schedule")
        else:
            with writing(args.gantt):
                note = mod.gantt(sol, plan_chain, args.gantt)
            print(f"Gantt chart  {args.gantt}" if not note else f"Gantt chart  {note}")
    if args.json:
        print(f"solution written to {args.json}")
    if sol.details.get("limit_exceeded"):
        return 1   # a valid schedule, but over the limit (e.g. Checkmate's LP rounding): not a success
    # the bound-only methods (`lb`) succeed when they produced their bound; any other method succeeds
    # only with a schedule (a no_solution that carries a bound, e.g. an ILP not run, is not a success)
    return 0 if sol.success or (sol.method == "lb" and sol.bound is not None) else 1


def _solution_file(path: str) -> bool:
    """Whether ``path`` is a solution file (``memplan solve --json``): a JSON object with a problem, a
    method and a status, as :meth:`memplan.Solution.to_dict` writes."""
    import json
    from pathlib import Path

    p = Path(path)
    if p.suffix.lower() != ".json" or not p.is_file():
        return False
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False          # not a solution: read as an instance, whose loader names what is wrong
    # an instance file has neither a status nor a method: one that has both is a solution, also where its
    # problem is missing (it had been read as an instance: "field 'method': unknown field")
    return isinstance(data, dict) and "status" in data and ("problem" in data or "method" in data)


def _show_solution(args: argparse.Namespace) -> int:
    """``memplan show SOLUTION.json``: the solution's report on the instance it was solved on (``--chain``,
    else the file its record names), checked to be that chain; without one, its one-line summary."""
    from memplan.models.solution import InputError, chain_fingerprint

    sol = memplan.load_solution(args.instance)
    rec = sol.instance or {}
    where = args.chain or rec.get("file")
    if not where:
        print(repr(sol))
        if sol.message:
            print(f"status       {sol.status}: {sol.message}")
        print("(no instance recorded: give --chain INSTANCE for the full report)")
        return 0
    try:
        chain, _ = load_instance(where)
    except (OSError, ValueError) as e:
        raise InputError(f"{args.instance}: its instance {where} cannot be loaded ({e}); give --chain INSTANCE") from None
    if rec.get("sha256") and chain_fingerprint(chain) != rec["sha256"]:
        raise InputError(f"{args.instance}: solved on {rec.get('name')} (L = {rec.get('L')}), and {where} is another "
                         f"chain ({chain.name}, L = {chain.L}, other sizes or times); give --chain with the instance "
                         "it was solved on")
    print(memplan.problems[sol.problem].report(sol, chain))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    import pandas as pd

    if _solution_file(args.instance):
        return _show_solution(args)
    if args.chain is not None:
        raise CliError(f"--chain {args.chain}: the instance a solution file was solved on, and {args.instance} is "
                       "an instance, not a solution; leave --chain out")
    chain, platform = load_instance(args.instance)
    print(f"{chain.name}: L = {chain.L} stages (+ loss), store-all time {fmt_time(chain.store_all_time())}, "
          f"weights {fmt_memory(chain.total_weights())}")
    if platform is not None:
        print(f"platform: memory {fmt_memory(platform.memory)}, bandwidth {fmt_bandwidth(platform.bandwidth)}, "
              f"{platform.gpus} GPU(s)")
    for k, v in chain.provenance.items():
        print(f"  {k}: {v}")
    if chain.u_turn:
        print(f"  turn cost (a backward step followed by a forward): {fmt_time(chain.u_turn)}")
    df = chain.table()
    for col in ("uf", "uf_ng", "ub"):
        if col in df:
            df[col] = df[col] * 1e3
    for col in ("wa", "wabar", "wd", "of", "of_all", "of_ng", "ob", "weights"):
        df[col] = df[col] / 2**20
    df = df.rename(columns={"uf": "u_f[ms]", "uf_ng": "u_f_ng[ms]", "ub": "u_b[ms]", "wa": "a[MiB]",
                            "wabar": "abar[MiB]", "wd": "delta[MiB]", "of": "o_f[MiB]", "of_all": "o_f_all[MiB]",
                            "of_ng": "o_f_ng[MiB]", "ob": "o_b[MiB]", "weights": "W[MiB]"})
    with pd.option_context("display.max_rows", args.rows, "display.width", 160):
        print(df.round(3).to_string(max_rows=args.rows))
    return 0


#: argparse with one-line errors (the project's rule for bad input), negative numbers read as values
_Parser = OneLineParser


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="memplan", description="Plan memory-constrained training of chains: "
                                "re-materialization, offloading, both, and pipelined model parallelism.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("solve", help="solve one instance", description="Solve one instance file (or a shipped "
                       "instance by name) for one problem and method.")
    s.add_argument("instance", help="instance file (instances/*.json) or a shipped instance's name")
    s.add_argument("--problem", choices=list(memplan.problems), default="remat")
    s.add_argument("--method", help="method (default depends on the problem; see the README)")
    s.add_argument("--memory", help="memory limit, e.g. 90MiB, 1.5GB (default: the instance's platform)")
    s.add_argument("--bandwidth", help="link bandwidth, e.g. 12GB/s (default: the instance's platform); --problem "
                   "offload also takes two, to the host then to the device, e.g. 49GB/s:56GB/s")
    s.add_argument("--gpus", type=int, help="number of GPUs (pipeline; default: the instance's platform, else 1)")
    s.add_argument("--slots", type=int, help="memory discretization of the DPs, used as given (default: the DP "
                   "chooses and refines the grid until the answer is proven or stops changing)")
    s.add_argument("--exact", action="store_true", help="DPs: one slot per byte (integer sizes only)")
    s.add_argument("--time-limit", type=float, help="seconds for the whole call, every phase included "
                   "(default 60)")
    s.add_argument("--gap", type=float, help="MILP relative gap")
    s.add_argument("--threads", type=int, help="MILP threads")
    s.add_argument("--solver-log", help="write the HiGHS log to this file")
    s.add_argument("--periodicity", type=int,
                   help="pipeline --method cyclic: mini-batches per period K (default 2)")
    s.add_argument("--memory-model", choices=("autograd", "paper"), help="pipeline: stored activations per "
                   "layer: what autograd keeps (abar, default) or paper 003's model (its input only)")
    s.add_argument("--free-backward", action="store_true", help="remat: plan the executor without holds, as "
                   "'memplan run' runs an instance whose profile has the free_backward record (each backward "
                   "step's overhead as autograd frees; the same or less memory than paper 004's model)")
    s.add_argument("--json", help="write the Solution as JSON to this file")
    s.add_argument("--gantt", help="write a Gantt chart image (problems with a timeline)")
    s.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    s.set_defaults(func=_cmd_solve)

    sh = sub.add_parser("show", help="print an instance's stage table, or a solution file's report")
    sh.add_argument("instance", help="an instance file or a shipped instance's name, or a solution file "
                                     "(memplan solve --json)")
    sh.add_argument("--rows", type=positive_int, default=60, help="stage rows to print (default 60)")
    sh.add_argument("--chain", default=None, help="a solution file's instance, where the solution records none "
                                                 "or it has moved (default: the file its record names)")
    sh.set_defaults(func=_cmd_show)

    for mod in COMMANDS:
        mod.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if "torch" not in sys.modules:
        # c10's own log lines (the profiler memory method's "Memory block of unknown size was allocated
        # before the profiling started", expected where it measures a step) went to stderr before a
        # one-line error; read by torch when it is imported, so only where it is not yet (a user's
        # own TORCH_CPP_LOG_LEVEL is kept)
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    return guarded(lambda: args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
