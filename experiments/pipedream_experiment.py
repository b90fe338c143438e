"""PipeDream's published profiles, imported, linearized and solved for re-materialization and pipelining.

For every ``*.graph.txt`` in ``../shared/external/pipedream`` (read in place, never copied; where that
folder has none, as in a clone alone, the profiles shipped in ``instances/pipedream``): import with
:func:`models.pipedream.import_graph` at mini-batch ``--batch`` (times and activations rescaled from
128), then

* remat (paper 004): for memory limits at fractions of the way from the smallest feasible memory to
  the store-all peak (:func:`memplan.remat.memory_range`), solve with ``--remat-methods`` (default
  rotor, revolve, sequential) through :func:`memplan.remat.solve`;
* pipeline (paper 003): on ``--gpus`` GPUs with link ``--bandwidth``, solve with
  ``--pipeline-methods`` (default pipedream, gpipe; add ilp for the MILP) at per-GPU memory limits
  at fractions of the way from the smallest to the largest memory of the baselines' simulated points
  (:func:`memplan.pipeline.baseline_points`, computed once per chain), through
  :func:`memplan.pipeline.solve` (``--time-limit`` bounds each call). Two more methods plan the
  profile's DAG rather than the imported chain (issue 30), through :func:`memplan.pipeline.
  solve_graph` on :func:`memplan.models.pipedream.cost_graph`: ``pipedream-dag``, PipeDream's own
  planner over the antichain DAG, and ``ilp-dag``, the ILP on the chain holding the best baseline's
  cuts (never slower than ``pipedream-dag`` nor than PipeDream on the graph's multi-cut chain).
  Their ``L`` is that of the chain their schedule runs on.

Every objective is the simulator's replay of the returned schedule. A solve that raises is recorded
as an ``error`` row with the exception (and listed at the end), never as an infeasible limit. Writes
``OUT/pipedream_remat.csv`` and ``OUT/pipedream_pipeline.csv`` and prints both tables::

    python -m memplan.experiments.pipedream_experiment --batch 32 --out results/pipedream
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from memplan.experiments.cli_checks import (CliError, OneLineParser, fraction_list, output_dir, positive_int,
                                            positive_number, run_script, writing)

DEFAULT_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "external" / "pipedream"
#: PipeDream's profiles shipped with memplan (MIT, origin in its README): the default where
#: :data:`DEFAULT_DIR` has none (a clone without the project's shared folder)
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "instances" / "pipedream"


def default_profiles() -> tuple[Path, list[Path]]:
    """``(folder, its *.graph.txt)``: :data:`DEFAULT_DIR`'s where it has some, else the shipped ones."""
    for d in (DEFAULT_DIR, SHIPPED_DIR):
        found = sorted(d.glob("*.graph.txt"))
        if found:
            return d, found
    return DEFAULT_DIR, []
#: --remat-fractions and --pipeline-fractions when not given
REMAT_FRACTIONS = [0.1, 0.3, 0.6, 1.0]
PIPELINE_FRACTIONS = [0.0, 0.5, 1.0]
#: --gpus, --bandwidth and --time-limit when not given (options of the pipeline solves only: refused where
#: --pipeline-methods is empty, so their parser defaults are None, telling a value given from none)
GPUS, BANDWIDTH, TIME_LIMIT = 4, "12GB/s", 30.0


def remat_rows(chain, methods, fractions, slots: int = 500) -> list[dict]:
    from memplan import remat

    lo, hi = remat.memory_range(chain)
    base = chain.store_all_time()
    rows = []
    for f in fractions:
        mem = lo + f * (hi - lo)
        for m in methods:
            t0 = time.perf_counter()
            try:
                sol = remat.solve(chain, memory=mem, method=m, time_limit=30.0, gap=1e-4, threads=1, slots=slots)
                status, obj, peak, msg = str(sol.status), sol.objective, sol.peak_memory, ""
            except Exception as e:  # a method that cannot handle this point is reported, not fatal
                status, obj, peak, msg = "error", None, None, f"{type(e).__name__}: {e}"
            rows.append({"chain": chain.name, "L": chain.L, "fraction": f, "memory": mem, "method": m,
                         "status": status, "makespan": obj, "peak_memory": peak, "store_all_time": base,
                         "ratio_to_store_all": None if obj is None else obj / base,
                         "min_memory": lo, "store_all_memory": hi, "seconds": time.perf_counter() - t0,
                         "message": msg})
    return rows


#: --pipeline-methods that plan the profile's DAG (memplan.pipeline.solve_graph's method)
GRAPH_METHODS = {"pipedream-dag": "pipedream-dag", "ilp-dag": "ilp"}


def pipeline_rows(chain, methods, fractions, gpus: int, bandwidth: float, time_limit: float,
                  graph=None) -> list[dict]:
    from memplan import pipeline
    from memplan.baselines.pipeline import min_memory_contiguous
    from memplan.models.pipeline import memory_lower_bound, task_data

    rows = []
    try:
        points = pipeline.baseline_points(chain, bandwidth=bandwidth, gpus=gpus)
    except Exception as e:  # reported in the table, the other chains still run
        return [{"chain": chain.name, "L": chain.L, "gpus": gpus, "bandwidth": bandwidth, "fraction": None,
                 "memory": None, "method": "pipedream+gpipe points", "status": "error", "period": None,
                 "bound": None, "throughput_per_s": None, "store_all_time": chain.store_all_time(),
                 "seconds": 0.0, "message": f"{type(e).__name__}: {e}"}]
    # memory range: from the smallest to the largest memory of the simulated baseline points
    lo, hi = min(p.memory for p in points), max(p.memory for p in points)
    td = task_data(chain, bandwidth, "autograd")     # the model of pipeline.solve and baseline_points (their default)
    mlb = memory_lower_bound(td, gpus)
    serial, _ = min_memory_contiguous(td, gpus)
    for f in fractions:
        mem = lo + f * (hi - lo)
        for m in methods:
            t0 = time.perf_counter()
            L = chain.L
            try:
                if m in GRAPH_METHODS:
                    sol, used = pipeline.solve_graph(graph, memory=mem, bandwidth=bandwidth, gpus=gpus,
                                                     method=GRAPH_METHODS[m], time_limit=time_limit, threads=1)
                    L = used.L
                else:
                    sol = pipeline.solve(chain, memory=mem, bandwidth=bandwidth, gpus=gpus, method=m,
                                         time_limit=time_limit, threads=1, points=points)
                status, obj, bound, msg = str(sol.status), sol.objective, sol.bound, ""
            except Exception as e:
                status, obj, bound, msg = "error", None, None, f"{type(e).__name__}: {e}"
            rows.append({"chain": chain.name, "L": L, "gpus": gpus, "bandwidth": bandwidth, "fraction": f,
                         "memory": mem, "method": m, "status": status, "period": obj, "bound": bound,
                         "throughput_per_s": None if not obj else 1.0 / obj,
                         "store_all_time": chain.store_all_time(), "memory_lower_bound": mlb,
                         "serial_contiguous_memory": serial, "seconds": time.perf_counter() - t0,
                         "message": msg})
    return rows


def _methods(text: str, flag: str, known: list[str]) -> list[str]:
    """The methods of a comma-separated ``--*-methods`` option, each one of ``known`` (an unknown one had
    become an error row of every point, after all the others had run, exit status 1)."""
    methods = [m.strip() for m in text.split(",") if m.strip()]
    for m in methods:
        if m not in known:
            raise CliError(f"{flag}: unknown method {m!r}; choose from {', '.join(known)}")
    return methods


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m memplan.experiments.pipedream_experiment", name="pipedream_experiment",
                      description=__doc__.split("\n\n")[0])
    p.add_argument("--profiles", nargs="*", help="graph.txt files (default: all in ../shared/external/pipedream, "
                   "or memplan's shipped instances/pipedream where that folder has none)")
    p.add_argument("--batch", type=positive_int, default=32)
    p.add_argument("--remat-methods", default="rotor,revolve,sequential", help="memplan.remat methods ('' runs none)")
    p.add_argument("--remat-fractions", type=fraction_list, default=None,
                   help="memory limits between the least (0) and store-all (1) (default 0.1,0.3,0.6,1)")
    p.add_argument("--pipeline-methods", default="pipedream,gpipe",
                   help="of pipedream, gpipe, ilp, cyclic, lb (on the imported chain) and pipedream-dag, ilp-dag "
                        "(over the profile's DAG); '' runs none")
    p.add_argument("--pipeline-fractions", type=fraction_list, default=None,
                   help="per-GPU memory limits between the least (0) and the most (1) of the baselines' points "
                        "(default 0,0.5,1)")
    p.add_argument("--gpus", type=positive_int, default=None, help=f"GPUs of the pipeline (default {GPUS})")
    p.add_argument("--bandwidth", default=None, help=f"the links' bandwidth (default {BANDWIDTH}); inf: free "
                   "communications")
    p.add_argument("--time-limit", type=positive_number, default=None,
                   help=f"seconds for each pipeline solve, every phase included (method ilp; default {TIME_LIMIT:g})")
    p.add_argument("--out", default="results/pipedream")
    return p


def main(argv=None) -> int:
    return run_script(_parser(), _main, argv)


def _main(a: argparse.Namespace) -> int:
    import pandas as pd

    from memplan import pipeline, remat as remat_module
    from memplan.models.pipedream import cost_graph, import_graph
    from memplan.models.units import UnitError, is_free_link, parse_bandwidth

    remat_methods = _methods(a.remat_methods, "--remat-methods", remat_module.METHODS)
    pipeline_methods = _methods(a.pipeline_methods, "--pipeline-methods", pipeline.METHODS + list(GRAPH_METHODS))
    for flag, given, methods in (("--remat-fractions", a.remat_fractions, remat_methods),
                                 ("--pipeline-fractions", a.pipeline_fractions, pipeline_methods)):
        if given is not None and not methods:
            raise CliError(f"{flag}: the memory limits of {flag.replace('fractions', 'methods')}, which is empty; "
                           f"give methods, or leave {flag} out")
    if not remat_methods and not pipeline_methods:
        raise CliError("--remat-methods and --pipeline-methods: both empty, nothing to run; give some methods")
    if not pipeline_methods:
        for flag, given in (("--gpus", a.gpus), ("--bandwidth", a.bandwidth), ("--time-limit", a.time_limit)):
            if given is not None:     # had been accepted and used by nothing
                given = f"{given:g}" if isinstance(given, float) else given
                raise CliError(f"{flag} {given}: an option of the pipeline solves, and --pipeline-methods is "
                               f"empty; give pipeline methods, or leave {flag} out")
    gpus = GPUS if a.gpus is None else a.gpus
    bandwidth = BANDWIDTH if a.bandwidth is None else a.bandwidth
    time_limit = TIME_LIMIT if a.time_limit is None else a.time_limit
    remat_fractions = a.remat_fractions or REMAT_FRACTIONS
    pipeline_fractions = a.pipeline_fractions or PIPELINE_FRACTIONS
    if is_free_link(bandwidth):
        bw = math.inf                      # free communications, as memplan.pipeline reads 'inf'
    else:
        try:
            bw = parse_bandwidth(bandwidth)
        except UnitError as e:
            raise CliError(f"--bandwidth {bandwidth}: {e}") from None
        if not bw > 0:
            raise CliError(f"--bandwidth {bandwidth}: links that carry nothing; give the links' bandwidth, e.g. "
                           "12GB/s, or inf for free communications")
    where, found = default_profiles()
    files = [Path(f) for f in a.profiles] if a.profiles else found
    if not files:
        raise CliError(f"--profiles: no PipeDream profiles found in {DEFAULT_DIR} nor {SHIPPED_DIR}; give "
                       f"graph.txt files")
    if not a.profiles:
        print(f"profiles: {', '.join(f.name for f in files)} (from {where})", file=sys.stderr)
    # every profile read before any solve: a file that cannot be read is one line naming it
    # (models.pipedream's errors), not a traceback after the other profiles' solves
    chains = [(f, import_graph(f, batch=a.batch)) for f in files]
    out = output_dir(a.out, "--out")
    remat, pipe = [], []
    for f, chain in chains:
        print(f"{f.name}: L = {chain.L}", flush=True)
        remat += remat_rows(chain, remat_methods, remat_fractions)
        if pipeline_methods:
            graph = cost_graph(f, batch=a.batch) if set(pipeline_methods) & set(GRAPH_METHODS) else None
            pipe += pipeline_rows(chain, pipeline_methods, pipeline_fractions, gpus, bw, time_limit, graph)
    dr = pd.DataFrame(remat)
    with writing(out / "pipedream_remat.csv"):
        dr.to_csv(out / "pipedream_remat.csv", index=False)
    cols = ["chain", "L", "fraction", "method", "status", "ratio_to_store_all"]
    with pd.option_context("display.width", 160, "display.max_rows", 500):
        if remat:                        # --remat-methods "" runs none
            print(dr[cols].round(4).to_string(index=False))
        if pipe:
            dp = pd.DataFrame(pipe)
            with writing(out / "pipedream_pipeline.csv"):
                dp.to_csv(out / "pipedream_pipeline.csv", index=False)
            print(dp[["chain", "gpus", "fraction", "method", "status", "period", "bound"]].to_string(index=False))
    errors = [r for r in remat + pipe if r["status"] == "error"]
    for r in errors:
        print(f"  error: {r['chain']} {r['method']} at {r['memory']}: {r['message'][:200]}", file=sys.stderr)
    print(f"written {out}/pipedream_remat.csv" + (f" and {out}/pipedream_pipeline.csv" if pipe else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
