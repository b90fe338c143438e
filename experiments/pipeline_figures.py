"""Figures 6-11 of paper 003, in spirit: (memory, period) of PipeDream, GPipe and the ILP, from a table.

A grid and a figure. For one chain (``--instance``, ``--pipedream GRAPH_TXT --batch B`` or
``--random L``), each link bandwidth of ``--bandwidth`` (required unless the instance's platform gives one)
and each P of ``--gpus`` (default 4 and 8): ``--points`` memory limits per GPU between
the smallest memory any pattern may need (at least 0.6 x PipeDream's smallest point) and the largest
memory of PipeDream's simulated points (:func:`memplan.experiments.sweep_engine.memory_range`), and
at each limit every method of ``--methods`` (default ``ilp,pipedream``; ``gpipe``, and ``cyclic``
with ``--periodicity K``), each one :func:`memplan.pipeline.solve` call of the sweep engine with
``--time-limit`` seconds, every phase included. Each point drawn is the replayed (memory, period) of
a returned schedule: PipeDream blue, GPipe orange, ILP red squares, cyclic green. A solve that raises
is an ``error`` row with its message (and the command exits with status 1), never an infeasible
limit. Output: the table under ``<out>/results/`` and as ``<out>/results.csv``, ``<out>/pipeline_<chain>_P<P>.png`` and
``<out>/pipeline_summary.csv`` (ILP / PipeDream at each limit).

    python -m memplan.experiments.pipeline_figures --instance instances/resnet18-b8-224-cpu.json --bandwidth 12GB/s \\
        --gpus 4 8 --time-limit 600
    python -m memplan.experiments.pipeline_figures --pipedream instances/pipedream/resnet18.graph.txt \\
        --batch 8 --bandwidth 12GB/s --gpus 4 8 --points 6 --time-limit 120
    python -m memplan.experiments.pipeline_figures --random 12 --seed 0 --bandwidth 12GB/s --gpus 4 --points 6 \\
        --time-limit 30

As in the serial script it replaces, the ILP never gets worse with more memory and starts from every
baseline pattern that fits: the baseline points of each P are computed once, completely (no time
cut), when the grid is built, and every task of that P takes them (the ``pipedream`` and ``gpipe``
rows are the best of those points within the limit); the ``ilp`` tasks run in parallel, and once
they are back an ILP row whose own pattern is slower than one found at a smaller limit of the same P
takes that pattern and says so (:func:`memplan.experiments.sweep_engine.carry_forward`).
``--time-limit`` bounds each task's solve; the baseline points are not in it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memplan.experiments import figures, sweeps
from memplan.experiments.cli_checks import guarded, positive_int
from memplan.models.solution import InputError


def add_arguments(p: argparse.ArgumentParser) -> None:
    sweeps.add_engine_arguments(p, methods="ilp,pipedream", points=8, time_limit=60.0)
    e = p.add_argument_group("pipeline")
    e.add_argument("--random", type=int, metavar="L", help="use models.chain.random_chain(L, seed, integer=False)")
    e.add_argument("--seed", type=int, default=None, help="--random's seed (default 0)")
    e.add_argument("--gap", type=float, default=None)
    e.add_argument("--threads", type=int, default=None, help="HiGHS threads of the ILP and cyclic (default 1)")
    e.add_argument("--n-batches", type=int, default=500, help="mini-batches of each eager simulation")
    e.add_argument("--periodicity", type=positive_int, default=None, metavar="K",
                   help="also search K-periodic schedules (method cyclic) at every limit, K >= 1 (default: off)")
    e.add_argument("--memory-model", choices=("paper", "autograd"), default="paper",
                   help="stored activations: paper 003's model (default, to reproduce its figures) or what "
                        "autograd keeps")


def grids(args) -> list:
    if args.seed is not None and args.random is None:       # it had been ignored
        raise InputError(f"--seed {args.seed}: the seed of --random's chain, and there is no --random; give "
                         "--random L, or leave --seed out")
    if args.random is not None:
        args.instance = (args.instance or []) + [f"random:{args.random}:{args.seed or 0}"]
    if not args.instance and not args.pipedream:
        raise InputError("one of --instance, --pipedream or --random is required")
    if args.gpus is None:
        args.gpus = ["4", "8"]
    if not args.bandwidth:      # the period depends on the link: never a row computed without one
        for src in sweeps.sources(args):
            sweeps.links([], src, src.load()[1], "the link between GPUs")
    methods = sweeps.split_list(args.methods)
    given = {"threads": args.threads, "gap": args.gap}
    sweeps.tuning("pipeline", methods + (["cyclic"] if args.periodicity is not None else []), given)
    opts = {"n_batches": args.n_batches, "memory_model": args.memory_model,
            **sweeps.tuning("pipeline", methods, {}, {"threads": 1, **{k: v for k, v in given.items() if v is not None}})}
    out = [sweeps.base_grid(args, "pipeline", methods=methods, options=opts)]
    if args.periodicity is not None:
        out.append(sweeps.base_grid(args, "pipeline", methods=["cyclic"],
                                    options={"n_batches": args.n_batches, "memory_model": args.memory_model,
                                             "periodicity": args.periodicity,
                                             **sweeps.tuning("pipeline", ["cyclic"], {},
                                                             {"threads": args.threads or 1})}))
    return out


def default_out(args) -> str:
    return "results/pipeline"


def draw(df, out: Path, args) -> list[Path]:
    return figures.figure_pipeline(df, out)


def summary(df, args) -> None:
    s = figures.pipeline_summary(df)
    if s.empty:
        return
    print(s.to_string(index=False))
    r = s.ilp_over_pipedream.dropna()
    print(f"ILP vs best PipeDream schedule within the same limit: at least as good at "
          f"{int((r <= 1 + 1e-6).sum())}/{len(r)} limits, strictly better at {int((r < 1 - 1e-6).sum())}")
    if "ilp_over_best_baseline" in s:
        b = s.ilp_over_best_baseline.dropna()
        print(f"ILP vs the best baseline row (pipedream, gpipe) at the same limit: above it at "
              f"{int((b > 1 + 1e-9).sum())}/{len(b)} limits")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m memplan.experiments.pipeline_figures", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return guarded(lambda: sweeps.run_experiment(sys.modules[__name__], args), "pipeline_figures")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
