"""Benchmark: remat-milp and Checkmate against the chain length L (issue 3).

For each L (default 10, 20, 30, 50) a random chain with realistic float sizes
(``random_chain(L, seed, integer=False)``) at a middle memory limit (halfway between the minimum
feasible memory and store-all's peak), each MILP is built and solved with a time limit (default
60 s). Printed per row: model size as HiGHS sees it (variables, integer variables, constraints,
nonzeros), Pyomo build time, Pyomo -> matrix compile time, HiGHS time, status, replayed makespan,
the MILP's own objective, its dual bound and the gap reached (for Checkmate both in Checkmate's model:
its plan is then converted, which may add recomputations, so makespan >= milp_obj there), and the makespan of the persistent DP (rotor, 500 slots) for reference.
The last column says which share of the wall time went to Pyomo (build + compile).
Each method runs as ``memplan.remat.solve`` runs it (remat-milp with its MIP start from the persistent
DP, whose time is the ``start`` column); ``--time-limit`` bounds each whole call.

    python benchmarks/bench_remat_milp.py                        # L = 10 20 30 50, 60 s, 1 thread
    python benchmarks/bench_remat_milp.py --sizes 10 30 --time-limit 20 --methods remat-milp

Not part of the test suite.
"""
from __future__ import annotations

import argparse
import time

import pandas as pd

from memplan import remat
from memplan.baselines.remat_rotor import persistent
from memplan.models.chain import random_chain

SOLVERS = ["remat-milp", "checkmate", "checkmate-lp"]


def _pct(x):
    return None if x is None else 100 * x


def run(sizes, methods, time_limit: float, threads: int, seed: int, frac: float) -> pd.DataFrame:
    rows = []
    persistent(random_chain(3, 0), 1e9)          # numba compile outside the measurements
    for L in sizes:
        chain = random_chain(L, seed, integer=False)
        lo, hi = remat.memory_range(chain)
        memory = lo + frac * (hi - lo)
        t0 = time.perf_counter()
        dp = persistent(chain, memory)
        dp_time = time.perf_counter() - t0
        for method in methods:
            t0 = time.perf_counter()
            sol = remat.solve(chain, memory=memory, method=method, time_limit=time_limit, threads=threads)
            wall = time.perf_counter() - t0
            size = sol.details.get("model_size", {})
            t = sol.times
            pyomo = t.get("build", 0.0) + t.get("compile", 0.0)
            rows.append({
                "L": L, "method": method, "vars": size.get("variables"), "int": size.get("integer"),
                "cons": size.get("constraints"), "nnz": size.get("nonzeros"),
                "build_s": t.get("build"), "start_s": t.get("start"), "compile_s": t.get("compile"),
                "solve_s": t.get("solve"),
                "status": str(sol.status), "makespan": sol.objective, "milp_obj": sol.predicted,
                "bound": sol.bound if method == "remat-milp" else sol.details.get("milp_bound"),
                "gap_%": _pct(sol.gap if method == "remat-milp" else sol.details.get("milp_gap")),
                "over_limit": bool(sol.details.get("limit_exceeded", False)),
                "rotor": dp.objective, "rotor_s": dp_time,
                "pyomo_share_%": 100 * pyomo / wall if wall else None, "wall_s": wall,
            })
            print(pd.DataFrame([rows[-1]]).to_string(index=False, header=len(rows) == 1,
                                                     float_format=lambda x: f"{x:.4g}"), flush=True)
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10, 20, 30, 50])
    p.add_argument("--methods", nargs="+", default=["remat-milp", "checkmate"], choices=SOLVERS)
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--frac", type=float, default=0.5, help="memory limit between min (0) and store-all (1)")
    p.add_argument("--csv", help="also write the table here")
    a = p.parse_args(argv)
    df = run(a.sizes, a.methods, a.time_limit, a.threads, a.seed, a.frac)
    print()
    print(df.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if a.csv:
        df.to_csv(a.csv, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
