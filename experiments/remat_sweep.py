"""Re-materialization memory sweep: throughput against peak memory for every method (a grid and a figure).

In the style of paper 004's Figures 6-8: for a chain, ``--points`` memory limits equally spaced
between the minimum feasible memory and store-all's peak (:func:`memplan.remat.memory_range`), or the
absolute limits of ``--memory``; at each limit every method asked for (rotor, rotor-floating,
revolve, sequential, ... and the MILPs), each one task of the sweep engine
(:mod:`memplan.experiments.sweep_engine`: one :func:`memplan.solve` call with ``--time-limit``).
Throughput = batch / makespan (the instance's provenance gives the batch; 1 otherwise).

    memplan sweep remat --instance instances/paper004_table2.json --points 10 -o results/toy
    python -m memplan.experiments.remat_sweep --instance ... (same options)

Writes, in ``DIR`` (default ``results/remat``, the layout of every sweep): the table under
``DIR/results/`` (Parquet parts; re-running the same command resumes), the same rows as
``DIR/results.csv`` and the figure ``DIR/remat_<instance>.png``
(:func:`memplan.experiments.figures.figure_remat`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memplan import remat
from memplan.experiments import figures, sweeps
from memplan.experiments.cli_checks import guarded
from memplan.models.solution import InputError
from memplan.models.units import fmt_memory

DEFAULT_METHODS = ["rotor", "rotor-floating", "revolve", "recompute-all"]
MILP_METHODS = ["remat-milp", "checkmate", "checkmate-lp"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    sweeps.add_engine_arguments(p, methods=",".join(DEFAULT_METHODS), points=10, time_limit=60.0)
    e = p.add_argument_group("remat")
    e.add_argument("--slots", type=int, default=None, help="memory slots of the DPs (default: memplan.remat's)")
    e.add_argument("--exact", action="store_true", help="DPs: one slot per byte (integer sizes)")
    e.add_argument("--gap", type=float, default=None, help="MILP relative gap (default 1e-4)")
    e.add_argument("--threads", type=int, default=None, help="MILP threads (default 1 per task)")


def grids(args) -> list:
    if not args.instance and not args.pipedream:
        raise InputError("--instance or --pipedream: required (an instance file or a shipped instance's name, or a "
                         "PipeDream graph.txt)")
    methods = list(remat.METHODS) if args.methods == "all" else sweeps.split_list(args.methods)
    unknown = [m for m in methods if m not in remat.METHODS]
    if unknown:
        raise InputError(f"--methods: unknown method(s) {', '.join(unknown)}; available: {', '.join(remat.METHODS)}")
    opts = sweeps.tuning("remat", methods, {"gap": args.gap, "slots": args.slots, "exact": args.exact or None,
                                            "threads": args.threads}, {"gap": 1e-4})
    return [sweeps.base_grid(args, "remat", methods=methods, options=opts)]


def default_out(args) -> str:
    return "results/remat"


def draw(df, out: Path, args) -> list[Path]:
    return figures.figure_remat(df, out)


def summary(df, args) -> None:
    """Per curve: the points within their limit, the best throughput and the least replayed peak.
    Schedules over their limit (status ``limit_exceeded``, Checkmate's rounding) are not plans for it:
    counted on a line of their own, never in the best throughput or least peak."""
    over = df[df["status"] == "limit_exceeded"]
    ok = df[df["objective"].notna() & (df["status"] != "limit_exceeded")].copy()
    if len(over):
        counts = figures.curve_labels(over).value_counts().sort_index()
        print("over their limit (status limit_exceeded, left out below): "
              + ", ".join(f"{m} {n}" for m, n in counts.items()))
    if ok.empty:
        return
    ok["throughput"] = ok["batch"] / ok["objective"]
    ok["method"] = figures.curve_labels(ok)     # a setting swept (--option slots=20,500) is a row of its own
    summary = ok.groupby("method").agg(points=("objective", "size"), best_throughput=("throughput", "max"),
                                       min_peak=("peak_memory", "min"))
    # in units that fit the chain (a random chain's bytes had printed as 0.0 MiB, its throughput as 0.01)
    summary["best_throughput"] = summary["best_throughput"].map(lambda v: f"{v:.4g}/s")
    summary["min_peak"] = summary["min_peak"].map(fmt_memory)
    print(summary.to_string())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m memplan.experiments.remat_sweep", description=__doc__.split("\n")[0])
    add_arguments(p)
    args = p.parse_args(argv)
    return guarded(lambda: sweeps.run_experiment(sys.modules[__name__], args), "remat_sweep")


if __name__ == "__main__":
    raise SystemExit(main())
