"""Figures 6-11 of paper 003, in spirit: (memory, period) of PipeDream's cloud and of the ILP.

For one chain and each P (default 4 and 8): PipeDream's planner is swept over memory targets and NOAM
values, every partition is simulated with eager 1F1B (``--n-batches``, 500 as in the paper) and
gives a blue point (measured memory, period) (:func:`memplan.pipeline.baseline_points`, once per P);
then :func:`memplan.pipeline.solve` runs method ``ilp`` for a range of memory limits (``--points``
values between the smallest memory any pattern may need and the largest PipeDream memory), with
those points and the patterns found at smaller limits as candidate starts, and gives the red points
(measured memory and period of the replayed pattern). ``--time-limit`` bounds each solve, every phase
included; every row of the CSV records it. A solve that raises is recorded as an ``error`` row with
its message (and makes the script exit with status 1), never as an infeasible limit. Output: ``<out>/<chain>_P<P>.csv`` and ``.png``, and
``<out>/<chain>_summary.csv``.

    python -m memplan.experiments.pipeline_figures --instance instances/resnet18.json --gpus 4 8 --time-limit 600
    python -m memplan.experiments.pipeline_figures --pipedream ../shared/external/pipedream/resnet18.graph.txt \
        --batch 8 --bandwidth 12GB/s --gpus 4 8 --points 6 --time-limit 120
    python -m memplan.experiments.pipeline_figures --random 12 --seed 0 --gpus 4 --points 6 --time-limit 30

With ``--periodicity K`` every limit also gets a green point: the best K-periodic schedule
(:mod:`formulations.pipeline_cyclic`, beyond the paper's patterns) on the ILP's allocation and the best
baseline partitions, and the summary compares the best of both with PipeDream.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def _chain(args):
    from memplan.models.chain import random_chain
    from memplan.models.instance import load_instance

    if args.instance:
        chain, platform = load_instance(args.instance)
        return chain, platform
    if args.pipedream:
        from memplan.models.pipedream import import_graph

        return import_graph(args.pipedream, batch=args.batch), None
    return random_chain(args.random, args.seed, integer=False), None


def run(args) -> list[Path]:
    import pandas as pd
    from tqdm import tqdm

    from memplan import pipeline
    from memplan.baselines.pipeline import best_feasible, pareto
    from memplan.models.pipeline import memory_lower_bound, task_data
    from memplan.models.units import parse_bandwidth

    chain, platform = _chain(args)
    bw = parse_bandwidth(args.bandwidth) if args.bandwidth else (platform.bandwidth if platform else None)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written, summary, errors = [], [], []

    def attempt(what: str, M: float, **kw):
        """One solve; an exception is kept (row status ``error``), reported, and not fatal."""
        try:
            return pipeline.solve(chain, memory=float(M), bandwidth=bw, gpus=P, time_limit=args.time_limit,
                                  threads=args.threads, n_batches=args.n_batches, points=pts, **kw), ""
        except Exception as e:   # noqa: BLE001 - reported in the table and on stderr
            msg = f"{type(e).__name__}: {e}"
            errors.append(f"{chain.name} P={P} {what} at {M:.6g} B: {msg}")
            tqdm.write(f"error: {errors[-1]}", file=sys.stderr)
            return None, msg

    for P in args.gpus:
        t0 = time.perf_counter()
        pts = pipeline.baseline_points(chain, bandwidth=bw, gpus=P, n_batches=args.n_batches, methods=("pipedream",))
        rows = [{"chain": chain.name, "P": P, "method": "pipedream", "memory_limit": p.target,
                 "memory": p.memory, "period": p.period, "status": "simulated", "noam": p.noam,
                 "stages": str(p.stages), "contiguous": True, "time_limit": None, "bound": None,
                 "seconds": None} for p in pts]
        pd_time = time.perf_counter() - t0
        mems = [p.memory for p in pts]
        lo = max(memory_lower_bound(task_data(chain, bw), P), 0.6 * min(mems))
        hi = max(mems)
        limits = np.linspace(lo, hi, args.points)
        found = []     # ILP patterns at smaller limits: valid at this one too, so candidate starts
        for M in tqdm(limits, desc=f"{chain.name} P={P} ILP", unit="limit"):
            t1 = time.perf_counter()
            sol, err = attempt("ilp", M, method="ilp", gap=args.gap, starts=found)
            if sol is not None and sol.schedule is not None:
                found.append(sol.schedule)
            fit = best_feasible(pts, M)
            best_pd = fit.period if fit is not None else None
            rows.append({"chain": chain.name, "P": P, "method": "ilp", "memory_limit": float(M),
                         "memory": sol.peak_memory if sol else None, "period": sol.objective if sol else None,
                         "status": str(sol.status) if sol else "error", "noam": None, "stages": None,
                         "contiguous": sol.details.get("contiguous") if sol else None, "time_limit": args.time_limit,
                         "bound": sol.bound if sol else None, "seconds": time.perf_counter() - t1,
                         "pipedream_best_at_limit": best_pd, "message": sol.message if sol else err})
            entry = None
            if sol is not None and sol.objective is not None and best_pd is not None:
                entry = {"chain": chain.name, "P": P, "memory_limit": float(M), "ilp": sol.objective,
                         "pipedream": best_pd, "ilp_over_pipedream": sol.objective / best_pd,
                         "status": str(sol.status)}
                summary.append(entry)
            if args.periodicity:
                t2 = time.perf_counter()
                allocs = [sol.schedule.layer_gpus()] if sol is not None and sol.schedule is not None else []
                cy, err = attempt(f"cyclic-K{args.periodicity}", M, method="cyclic", periodicity=args.periodicity,
                                  allocations=allocs)
                rows.append({"chain": chain.name, "P": P, "method": f"cyclic-K{args.periodicity}",
                             "memory_limit": float(M), "memory": cy.peak_memory if cy else None,
                             "period": cy.objective if cy else None, "status": str(cy.status) if cy else "error",
                             "noam": None, "stages": None, "contiguous": cy.details.get("contiguous") if cy else None,
                             "time_limit": args.time_limit, "bound": cy.bound if cy else None,
                             "seconds": time.perf_counter() - t2, "pipedream_best_at_limit": best_pd,
                             "message": cy.message if cy else err})
                if entry is not None:
                    obj = cy.objective if cy is not None else None
                    entry["cyclic"] = obj
                    entry["cyclic_over_pipedream"] = obj / best_pd if obj else None
        df = pd.DataFrame(rows)
        csv = out / f"{chain.name}_P{P}.csv"
        df.to_csv(csv, index=False)
        written.append(csv)
        written.append(_plot(df, chain.name, P, out / f"{chain.name}_P{P}.png", pareto(pts)))
        print(f"P={P}: {len(pts)} PipeDream points in {pd_time:.1f}s, {args.points} ILP limits -> {csv}")
    if summary:
        s = pd.DataFrame(summary)
        sp = out / f"{chain.name}_summary.csv"
        s.to_csv(sp, index=False)
        written.append(sp)
        print(s.to_string(index=False))
        r = s.ilp_over_pipedream
        print(f"ILP vs best PipeDream point within the same limit: at least as good at "
              f"{int((r <= 1 + 1e-6).sum())}/{len(r)} limits, strictly better at {int((r < 1 - 1e-6).sum())}")
        if "cyclic_over_pipedream" in s:
            best = s[["ilp", "cyclic"]].min(axis=1) / s.pipedream
            print(f"best of ILP and {args.periodicity}-periodic schedules vs PipeDream: at least as good at "
                  f"{int((best <= 1 + 1e-6).sum())}/{len(best)} limits, strictly better at "
                  f"{int((best < 1 - 1e-6).sum())}")
    args.errors = errors
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    return written


def _plot(df, name, P, path, front):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    pdp = df[df.method == "pipedream"]
    ax.scatter(pdp.memory / 2**30, pdp.period * 1e3, s=12, c="tab:blue", label="PipeDream (eager 1F1B)")
    il = df[(df.method == "ilp") & df.period.notna()]
    ax.scatter(il.memory / 2**30, il.period * 1e3, s=28, c="tab:red", marker="s", label="ILP (replayed)")
    cy = df[df.method.str.startswith("cyclic") & df.period.notna()]
    if len(cy):
        ax.scatter(cy.memory / 2**30, cy.period * 1e3, s=22, c="tab:green", marker="^",
                   label=f"{cy.method.iloc[0]} (replayed)")
    ax.set_xlabel("measured memory per GPU (GiB)")
    ax.set_ylabel("period (ms)")
    tl = il.time_limit.dropna().unique()
    ax.set_title(f"{name}, {P} GPUs" + (f" (ILP time limit {tl[0]:g}s)" if len(tl) else ""))
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m memplan.experiments.pipeline_figures", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--instance", help="instance file")
    src.add_argument("--pipedream", metavar="GRAPH_TXT", help="a PipeDream profile (read in place), e.g. "
                     "../shared/external/pipedream/resnet18.graph.txt")
    src.add_argument("--random", type=int, metavar="L", help="use models.chain.random_chain(L, seed, integer=False)")
    p.add_argument("--batch", type=int, default=None, help="--pipedream: rescale the profile to this batch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpus", type=int, nargs="+", default=[4, 8])
    p.add_argument("--bandwidth", help="link bandwidth (default: the instance's platform; none = free)")
    p.add_argument("--points", type=int, default=8, help="number of ILP memory limits")
    p.add_argument("--time-limit", type=float, default=60.0,
                   help="seconds for each solve (one per memory limit and method), every phase included")
    p.add_argument("--gap", type=float, default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--n-batches", type=int, default=500, help="mini-batches of each eager simulation")
    p.add_argument("--periodicity", type=int, default=0, metavar="K",
                   help="also search K-periodic schedules (method cyclic) at every limit, on the ILP's "
                        "allocation and the best baseline ones (default 0: off)")
    p.add_argument("--out", default="results/pipeline")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    run(args)
    return 1 if getattr(args, "errors", None) else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
