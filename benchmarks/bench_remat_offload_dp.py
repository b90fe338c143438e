"""Benchmark of the joint re-materialization + offloading DP (paper 000).

1. Run time of :func:`memplan.baselines.remat_offload_dp.solve_remat_offload_dp` against the chain
   length L (up to 100) and the number of memory slots N (50, 100), on random float chains
   (``random_chain(L, integer=False)``) at a memory limit 30% of the way from rotor's minimum to the
   store-all peak, beta = 10 GB/s. The tables use O(L^2 N^2 + L N^3) memory: (L, N) pairs needing
   more than ``--max-gb`` are skipped.
2. The DP's gap to the exhaustive optimum (:mod:`memplan.baselines.remat_offload_exhaustive`) on
   random integer chains with L <= 4 (sizes <= 4, times <= 4), at the rotor minimum and 30% above
   it, beta in {1, 0.5} B/s, in exact mode (one slot per byte). Prints every case and the largest
   gap (the test ``tests/test_remat_offload_exhaustive.py`` uses it).

Usage::

    python -m benchmarks.bench_remat_offload_dp                 # both parts
    python -m benchmarks.bench_remat_offload_dp --part time --Ls 10,25,50,100 --Ns 50,100
    python -m benchmarks.bench_remat_offload_dp --part gap --maxL 4 --seeds 6
"""
from __future__ import annotations

import argparse
import math
import sys
import time


def bench_time(Ls, Ns, max_gb: float) -> None:
    from memplan.baselines.remat_heuristics import min_memory, store_all
    from memplan.baselines.remat_offload_dp import solve_remat_offload_dp, table_bytes
    from memplan.models.chain import random_chain

    print(f"{'L':>4} {'N':>4} {'tables GB':>9} {'DP s':>8} {'total s':>8} {'makespan':>10} {'vs beta=0':>9}")
    for L in Ls:
        c = random_chain(L, 0, integer=False)
        lo, hi = min_memory(c), store_all(c).peak_memory
        M = lo + 0.3 * (hi - lo)
        for N in Ns:
            gb = table_bytes(L, N) / 1e9
            if gb > max_gb:
                print(f"{L:>4} {N:>4} {gb:>9.2f}  skipped (more than --max-gb {max_gb})")
                continue
            sol = solve_remat_offload_dp(c, M, 1e10, slots=N)
            base = solve_remat_offload_dp(c, M, 0.0, slots=N)
            gain = (f"{(1 - sol.objective / base.objective) * 100:8.1f}%" if base.objective else "    n/a")
            print(f"{L:>4} {N:>4} {gb:>9.2f} {sol.times['tables']:>8.2f} {sol.times['total']:>8.2f} "
                  f"{sol.objective:>10.4g} {gain}", flush=True)


def bench_gap(maxL: int, seeds: int, time_limit: float) -> float:
    from memplan.baselines.remat_heuristics import min_memory, store_all
    from memplan.baselines.remat_offload_dp import solve_remat_offload_dp
    from memplan.baselines.remat_offload_exhaustive import solve_exhaustive
    from memplan.models.chain import random_chain
    from memplan.models.solution import Status

    worst = 0.0
    gaps = []
    print(f"{'L':>2} {'seed':>4} {'M':>4} {'beta':>5} {'DP':>6} {'optimum':>8} {'gap':>7} {'search s':>8}")
    for L in range(2, maxL + 1):
        for seed in range(seeds):
            c = random_chain(L, seed, max_size=4, max_time=4)
            lo, hi = min_memory(c), store_all(c).peak_memory
            for M in sorted({math.ceil(lo), math.ceil(lo + 0.3 * (hi - lo))}):
                for beta in (1.0, 0.5):
                    j = solve_remat_offload_dp(c, M, beta, exact=True)
                    t0 = time.perf_counter()
                    e = solve_exhaustive(c, M, beta, upper_bound=j.objective, time_limit=time_limit)
                    dt = time.perf_counter() - t0
                    if e.status != Status.OPTIMAL:
                        print(f"{L:>2} {seed:>4} {M:>4} {beta:>5} {j.objective:>6.1f} {'?':>8} {'?':>7} {dt:>8.1f}"
                              f"  ({e.status}: {e.message})")
                        continue
                    opt = j.objective if e.details.get("proven_optimal_at_upper_bound") else e.objective
                    gap = j.objective / opt - 1
                    gaps.append(gap)
                    worst = max(worst, gap)
                    print(f"{L:>2} {seed:>4} {M:>4} {beta:>5} {j.objective:>6.1f} {opt:>8.1f} {gap * 100:>6.1f}% "
                          f"{dt:>8.1f}", flush=True)
    if gaps:
        mean = sum(gaps) / len(gaps)
        print(f"{len(gaps)} cases solved exactly: DP optimal in {sum(g < 1e-12 for g in gaps)}, mean gap "
              f"{mean * 100:.2f}%, largest gap {worst * 100:.2f}%")
    return worst


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=["time", "gap", "both"], default="both")
    p.add_argument("--Ls", default="10,25,50,75,100")
    p.add_argument("--Ns", default="50,100")
    p.add_argument("--max-gb", type=float, default=2.5)
    p.add_argument("--maxL", type=int, default=4)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--time-limit", type=float, default=60.0, help="per exhaustive search (s)")
    a = p.parse_args(argv)
    if a.part in ("time", "both"):
        bench_time([int(x) for x in a.Ls.split(",")], [int(x) for x in a.Ns.split(",")], a.max_gb)
    if a.part in ("gap", "both"):
        bench_gap(a.maxL, a.seeds, a.time_limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
