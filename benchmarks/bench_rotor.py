"""Run time of the rotor DPs (paper 004, section 5.3 / Figure 5).

Persistent DP (Algorithm 3) at L = 50, 100, 200, 339 (ResNet-1001's chain length) with 500 slots,
floating DP (Algorithm 1) at L = 20, 40 with 100 slots, on seeded random chains with a memory limit
halfway between the minimum feasible memory and store-all's peak. Target of issue 2: persistent
L = 339 under 10 s on a 2-core machine (the papers' C code: about 8 s for L = 200).

    python benchmarks/bench_rotor.py [--quick]
"""
from __future__ import annotations

import argparse
import time

from memplan.baselines import remat_heuristics as H
from memplan.baselines import remat_rotor as rotor
from memplan.models.chain import random_chain


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    args = ap.parse_args()
    warm = random_chain(5, 0, integer=False)
    rotor.persistent(warm, H.store_all(warm).peak_memory, slots=50)    # compile numba kernels
    rotor.floating(warm, H.store_all(warm).peak_memory, slots=20)
    runs = [("persistent", L, 500) for L in ((50, 100) if args.quick else (50, 100, 200, 339))]
    runs += [("floating", L, 100) for L in ((10, 20) if args.quick else (20, 40))]
    print(f"{'DP':<11}{'L':>5}{'slots':>7}{'seconds':>10}{'makespan/store-all':>20}")
    res = {}
    for kind, L, S in runs:
        c = random_chain(L, seed=L, integer=False)
        M = (rotor.min_memory(c) + H.store_all(c).peak_memory) / 2
        t0 = time.perf_counter()
        sol = (rotor.persistent if kind == "persistent" else rotor.floating)(c, M, slots=S)
        dt = time.perf_counter() - t0
        res[(kind, L)] = dt
        print(f"{kind:<11}{L:>5}{S:>7}{dt:>10.2f}{sol.objective / c.store_all_time():>20.4f}")
    if ("persistent", 339) in res:
        print(f"persistent L=339: {res[('persistent', 339)]:.2f} s = {res[('persistent', 339)] / 10:.2f} x the 10 s target")
    if ("persistent", 200) in res:
        print(f"persistent L=200: {res[('persistent', 200)]:.2f} s = {res[('persistent', 200)] / 8:.2f} x the papers' C code (8 s)")


if __name__ == "__main__":
    main()
