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

3. The zoo's ResNet-101 chain (L = 73, ``instances/resnet101-b8-224-cpu.json``), issue 21 item 3: at a
   memory limit 30% of the way from rotor's minimum to the store-all peak, for each bandwidth and N,
   the DP's run time (target: N = 100 within 10 s on the 2-core machine, NUMBA_NUM_THREADS threads) and,
   with ``--reference``, the previous serial kernels' time on the same inputs (kept in
   ``tests/test_remat_offload_dp_tables.py``), their ratio and a check that the tables are identical.
   It also prints the share of the re-materialization overhead that offloading removes,
   ``(rotor - DP) / (rotor - store-all)`` with rotor = the same DP without a link (paper 004's
   persistent DP with the same N slots), next to paper 000's "about one third". Two bandwidths by
   default: 12 GB/s (PCIe-like) and 100 MB/s: the chain was profiled on a CPU, about 100 times slower
   than the GPUs of paper 000, so 12 GB/s makes transfers nearly free, while 100 MB/s keeps paper
   000's ratio of transfer time to compute time. ``--fracs`` adds other memory limits. "DP s" is the
   wall time of the whole call (tables, rebuild, replay); tables below
   :data:`~memplan.baselines.remat_offload_dp.PARALLEL_WORK` (L = 73: N <= 56) run on one thread.

Usage::

    python -m benchmarks.bench_remat_offload_dp                 # all parts
    python -m benchmarks.bench_remat_offload_dp --part time --Ls 10,25,50,100 --Ns 50,100
    python -m benchmarks.bench_remat_offload_dp --part gap --maxL 4 --seeds 6
    python -m benchmarks.bench_remat_offload_dp --part zoo --zoo-Ns 25,50,100 --bandwidths 12e9,1e8 --reference
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
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


PAPER_SHARE = 1 / 3          # paper 000: offloading removes about one third of the overhead


def _reference_kernels():
    """The previous serial kernels, from the test that keeps them (None outside a checkout)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tests" / "test_remat_offload_dp_tables.py"
    if not path.exists():
        return None
    # under the name pytest gives it, so that numba's cache of its kernels (which records the module)
    # loads here too
    name = "test_remat_offload_dp_tables"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def bench_zoo(instance: str, fracs, bandwidths, Ns, reference: bool) -> None:
    import numpy as np
    from numba import config as numba_config

    from memplan.baselines.remat_heuristics import min_memory, store_all
    from memplan.baselines.remat_offload_dp import RematOffloadDP, solve_remat_offload_dp
    from memplan.models.instance import load_chain

    c = load_chain(instance)
    sa = store_all(c)
    lo, hi = min_memory(c), sa.peak_memory
    ref = _reference_kernels() if reference else None
    if reference and ref is None:
        print("(no tests/test_remat_offload_dp_tables.py here: no reference timing)")
    print(f"{instance}: L = {c.L}, store-all {sa.objective:.4g} s at {hi / 2**20:.1f} MiB, rotor's minimum "
          f"{lo / 2**20:.1f} MiB; DP threads (NUMBA_NUM_THREADS): {numba_config.NUMBA_NUM_THREADS}")
    solve_remat_offload_dp(c, lo + 0.3 * (hi - lo), 1e9, slots=8)       # compile / load outside the timings
    head = (f"{'frac':>5} {'MiB':>7} {'beta':>8} {'N':>4} {'DP s':>7} {'target':>7} {'makespan':>9} {'rotor(N)':>9} "
            f"{'share':>6} {'paper':>6}")
    if ref is not None:
        head += f" {'prev s':>7} {'speedup':>7} {'same':>5}"
    print(head)
    for frac in fracs:
        M = lo + frac * (hi - lo)
        for N in Ns:
            rot = solve_remat_offload_dp(c, M, 0.0, slots=N)
            for beta in bandwidths:
                t0 = time.perf_counter()
                sol = solve_remat_offload_dp(c, M, beta, slots=N)
                wall = time.perf_counter() - t0
                share = ((rot.objective - sol.objective) / (rot.objective - sa.objective)
                         if rot.objective is not None and sol.objective is not None and rot.objective > sa.objective
                         else float("nan"))
                target = ("<=10s" if wall <= 10 else ">10s") if (c.L == 73 and N == 100) else ""
                line = (f"{frac:>5.2f} {M / 2**20:>7.1f} {beta:>8.3g} {N:>4} {wall:>7.2f} {target:>7} "
                        f"{sol.objective if sol.objective is not None else float('nan'):>9.4f} "
                        f"{rot.objective if rot.objective is not None else float('nan'):>9.4f} "
                        f"{share:>6.3f} {PAPER_SHARE:>6.3f}")
                if ref is not None:
                    dp = RematOffloadDP(c, M, beta, slots=N)
                    t0 = time.perf_counter()
                    T, SP, CH, OC, FCH, _ = ref._ref_tables(dp)
                    prev = time.perf_counter() - t0
                    dp.tables()
                    same = (np.array_equal(T, dp.T) and np.array_equal(SP, dp.SP) and np.array_equal(CH, dp.CH)
                            and np.array_equal(OC, dp.OC) and np.array_equal(FCH, dp.FCH))
                    line += f" {prev:>7.2f} {prev / sol.times['tables']:>6.1f}x {str(same):>5}"
                print(line, flush=True)


def main(argv=None) -> int:
    p = OneLineParser(name='bench_remat_offload_dp', description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=["time", "gap", "both", "zoo", "all"], default="all",
                   help="both: time and gap; all: time, gap and zoo")
    p.add_argument("--Ls", default="10,25,50,75,100")
    p.add_argument("--Ns", default="50,100")
    p.add_argument("--max-gb", type=float, default=2.5)
    p.add_argument("--maxL", type=int, default=4)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--time-limit", type=float, default=60.0, help="per exhaustive search (s)")
    p.add_argument("--instance", default="instances/resnet101-b8-224-cpu.json")
    p.add_argument("--fracs", default="0.3", help="memory limits, from rotor's minimum (0) to store-all (1)")
    p.add_argument("--bandwidths", default="12e9,1e8", help="bytes/s")
    p.add_argument("--zoo-Ns", default="25,50,100")
    p.add_argument("--reference", action="store_true", help="also time the previous serial kernels")
    a = p.parse_args(argv)
    if a.part in ("time", "both", "all"):
        bench_time([int(x) for x in a.Ls.split(",")], [int(x) for x in a.Ns.split(",")], a.max_gb)
    if a.part in ("gap", "both", "all"):
        bench_gap(a.maxL, a.seeds, a.time_limit)
    if a.part in ("zoo", "all"):
        bench_zoo(a.instance, [float(x) for x in a.fracs.split(",")], [float(x) for x in a.bandwidths.split(",")],
                  [int(x) for x in a.zoo_Ns.split(",")], a.reference)
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, 'bench_remat_offload_dp'))    # bad input: one line, exit 2