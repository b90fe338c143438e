"""Offloading (paper 001): run time of the heuristics against L, and the exact MILP against them.

Part 1 -- DYNPROG (Algorithm 1, default grid M/100, 20000 states per level) and the other heuristics
on seeded random float chains of 50..300 stages, memory 30% of the way from the minimum feasible
memory to M_peak, 12.5 GB/s. Target of issue 5: DYNPROG under 5 s at 300 stages (the paper: < 25 s).

Part 2 -- MILP (Problem 1, any transfer order, MIP start = best heuristic) on integer random chains of
L = 2..10 (bandwidth 1, memory 40% of the way): solve time, status, MILP gap, and each heuristic's
gap to the MILP's best value.

    python benchmarks/bench_offload.py [--quick] [--time-limit 30]
"""
from __future__ import annotations

import argparse
import time

from memplan.baselines import offload as B
from memplan.formulations.offload_milp import solve_offload_milp
from memplan.models.chain import random_chain
from memplan.models.offload import lower_bound_value, min_feasible_memory, peak_memory_no_offload

HEUR = {"greedy": B.greedy, "dynprog": B.dynprog, "vdnn": B.vdnn, "tflms": B.tflms, "autoswap": B.autoswap}


def part1(Ls, frac=0.3, beta=12.5e9):
    print(f"{'L':>4} " + " ".join(f"{h + ' s':>11}{'/LB':>7}" for h in HEUR))
    out = {}
    for L in Ls:
        c = random_chain(L, seed=L, integer=False)
        mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
        M = mf + frac * (mp - mf)
        lb = lower_bound_value(c, M, beta)
        cells = []
        for name, f in HEUR.items():
            t0 = time.perf_counter()
            s = f(c, M, beta)
            dt = time.perf_counter() - t0
            out[(name, L)] = dt
            cells.append(f"{dt:>11.2f}{(s.objective / lb if s.success else float('nan')):>7.3f}")
        print(f"{L:>4} " + " ".join(cells))
    if ("dynprog", 300) in out:
        print(f"DYNPROG at L = 300: {out[('dynprog', 300)]:.2f} s (target < 5 s)")


def part2(Ls, seeds, time_limit, frac=0.4, beta=1.0):
    print(f"\n{'L':>3}{'seed':>5}{'milp s':>9}{'status':>12}{'gap%':>7}{'LB':>8}{'milp':>8} "
          + " ".join(f"{h:>9}" for h in HEUR) + "   (heuristic gap to the MILP, %)")
    for L in Ls:
        for seed in seeds:
            c = random_chain(L, seed)
            mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
            M = mf + frac * (mp - mf)
            hs = {n: f(c, M, beta) for n, f in HEUR.items()}
            ok = [s for s in hs.values() if s.success]
            start = min(ok, key=lambda s: s.objective).schedule if ok else None
            t0 = time.perf_counter()
            m = solve_offload_milp(c, M, beta, start=start, time_limit=time_limit, threads=1)
            dt = time.perf_counter() - t0
            best = m.objective
            gaps = " ".join(f"{(100 * (s.objective / best - 1) if s.success and best else float('nan')):>9.2f}"
                            for s in hs.values())
            g = m.gap
            print(f"{L:>3}{seed:>5}{dt:>9.2f}{str(m.status):>12}{(100 * g if g is not None else float('nan')):>7.2f}"
                  f"{lower_bound_value(c, M, beta):>8.1f}{(best or float('nan')):>8.2f} {gaps}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    ap.add_argument("--time-limit", type=float, default=30.0, help="MILP time limit (default 30 s)")
    args = ap.parse_args()
    part1((50, 100) if args.quick else (50, 100, 200, 300))
    part2((2, 4, 6) if args.quick else (2, 4, 6, 8, 10), (0, 1) if args.quick else (0, 1, 2), args.time_limit)


if __name__ == "__main__":
    main()
