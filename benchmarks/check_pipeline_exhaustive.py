"""Long cross-check: the pipeline ILP against the exhaustive pattern search on every allocation.

The suite checks L = 2 (bandwidth limit) and L = 3 (no bandwidth limit) on all allocations of 2 GPUs,
and single allocations at L = 3 and 4 (tests/test_pipeline_exhaustive.py). This script runs the
sizes that take minutes: all allocations of L = 4 layers on 2 GPUs without bandwidth limit
(770,000 structures), or L = 3 with a bandwidth limit on the allocations given with ``--allocs``.
Memory limits: ``--points`` values from the smallest memory of any pattern (the exhaustive front's
last point) to the memory of the fastest pattern, plus one just below the smallest (infeasible).

    python benchmarks/check_pipeline_exhaustive.py --layers 4 --seeds 0 1
    python benchmarks/check_pipeline_exhaustive.py --layers 3 --bandwidth 1 --allocs 000 001 011
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
import sys
import time

import numpy as np


def main(argv=None) -> int:
    from memplan.baselines.pipeline_exhaustive import exhaustive_search
    from memplan.formulations.pipeline_ilp import solve_fixed_allocation, solve_ilp, solve_min_memory
    from memplan.models.chain import random_chain
    from memplan.models.pipeline import task_data

    ap = OneLineParser(name='check_pipeline_exhaustive', description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--bandwidth", type=float, default=None, help="bytes/s (default: no limit)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--allocs", nargs="+", default=None, help="e.g. 0011 0101 (default: all)")
    ap.add_argument("--points", type=int, default=6)
    ap.add_argument("--time-limit", type=float, default=300)
    args = ap.parse_args(argv)
    allocs = [tuple(int(ch) for ch in a) for a in args.allocs] if args.allocs else None
    bad = 0
    for seed in args.seeds:
        c = random_chain(args.layers, seed, integer=True)
        td = task_data(c, args.bandwidth)
        t0 = time.perf_counter()
        ex = exhaustive_search(td, args.gpus, allocs=allocs)
        t_ex = time.perf_counter() - t0
        fastest = ex.best(None)
        if allocs is None:   # the smallest memory of any pattern: the ILP's min-memory answer
            _, mres = solve_min_memory(td, args.gpus, time_limit=args.time_limit, threads=1)
            lo = float(mres.objective)
        else:                # the ILP could use other allocations: the oracle's own minimum
            lo = ex.front()[-1][1]
        limits = list(np.linspace(lo, fastest[1].peak_memory, args.points)) + [lo * 0.999]
        print(f"seed {seed}: {len(ex.candidates)} feasible structures in {t_ex:.0f}s")
        for M in limits:
            want = ex.best(M)
            if allocs is None:
                pat, res, _, _ = solve_ilp(td, args.gpus, M, time_limit=args.time_limit, threads=1)
            else:
                best = None
                for a in allocs:
                    p, r = solve_fixed_allocation(td, args.gpus, M, list(a), time_limit=args.time_limit, threads=1)
                    if p is not None and (best is None or p.T < best[0].T):
                        best = (p, r)
                pat, res = best if best else (None, None)
            got = pat.T if pat is not None else None
            exp = want[0].T if want is not None else None
            ok = (got is None and exp is None) or (got is not None and exp is not None
                                                   and abs(got - exp) <= 1e-6 * exp)
            bad += not ok
            print(f"  M = {M:10.4g}  ILP {got!s:>10}  exhaustive {exp!s:>10}  "
                  f"{'agree' if ok else 'DISAGREE'}  ({res.status if res else 'infeasible'})")
    print("all agree" if not bad else f"{bad} disagreements")
    return 1 if bad else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(guarded(main, 'check_pipeline_exhaustive'))    # bad input: one line, exit 2