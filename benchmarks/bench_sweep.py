"""Benchmark of the sweep engine (issue 19): paper 003's Figures 6-11 sweep of ResNet-18 on 1 and 2 workers.

The grid: PipeDream's ResNet-18 profile at mini-batch ``--batch`` (default 8), 4 and 8 GPUs, 12 GB/s,
6 memory limits per GPU count (:func:`memplan.experiments.sweep_engine.memory_range`), methods ilp,
pipedream and gpipe, ``--time-limit`` seconds per task. It runs the grid with ``--workers 1`` (in
process) and ``--workers 2`` (a Dask LocalCluster) into two fresh folders and prints the wall-time
ratio (target >= 1.7x on 2 cores) with and without the cluster's start-up (starting the workers,
importing the solvers in them) and shut-down, whether the rows agree (timing columns
aside; rows stopped by their time limit in both runs are compared by status only, and the line says
how many), whether an ILP row is ever slower than a baseline row at the same limit, and, from the
measured task durations, an estimate of the wall time on N workers: greedy longest-first packing of
the durations on N machines, bounded below by the longest task and by the sum / N. Every task is
independent (the ILP rows of one GPU count take the better pattern of a smaller limit after the run,
:func:`memplan.experiments.sweep_engine.carry_forward`: the line says how many did).
``--repeat K`` runs the pair K times and prints the spread of the ratio.

The baseline points are computed once, when the grid is built (printed apart): they set the memory
limits, and every task of a GPU count takes them as its ``points``.

    python benchmarks/bench_sweep.py --pipedream ../shared/external/pipedream/resnet18.graph.txt --batch 8
    python benchmarks/bench_sweep.py --quick       # 2 memory points, 10 s tasks
    python benchmarks/bench_sweep.py --quick --repeat 3
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
import sys
import heapq
import shutil
import tempfile
import time
from pathlib import Path

from memplan.experiments.sweep_engine import Grid, Source, expand, read_results, run_sweep, same_rows

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "external" / "pipedream" / "resnet18.graph.txt"


def estimate(durations, n: int) -> float:
    """Longest-processing-time-first makespan of the tasks on ``n`` workers."""
    loads = [0.0] * n
    for d in sorted(durations, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + d)
    return max(loads)


def ilp_above_baselines(df) -> list[str]:
    """Limits where the ILP's row is slower than the best baseline row (pipedream, gpipe)."""
    ok = df[df["objective"].notna()]
    piv = ok.pivot_table(index=["gpus", "memory_limit"], columns="method", values="objective", aggfunc="min")
    base = [m for m in ("pipedream", "gpipe") if m in piv]
    if "ilp" not in piv or not base:
        return []
    best = piv[base].min(axis=1)
    bad = piv[piv["ilp"] > best * (1 + 1e-9)]
    return [f"P={P} M={M:.6g}: ILP {r.ilp:.6g} > baseline {best[(P, M)]:.6g}" for (P, M), r in bad.iterrows()]


def main(argv=None) -> int:
    p = OneLineParser(name='bench_sweep', description=__doc__.split("\n\n")[0])
    p.add_argument("--pipedream", default=str(DEFAULT))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--bandwidth", default="12GB/s")
    p.add_argument("--gpus", type=int, nargs="+", default=[4, 8])
    p.add_argument("--points", type=int, default=6)
    p.add_argument("--methods", default="ilp,pipedream,gpipe")
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--quick", action="store_true", help="2 memory points, 10 s per task")
    p.add_argument("--repeat", type=int, default=1, help="run the 1-vs-2-worker pair this many times")
    p.add_argument("--keep", help="keep the two result folders under this folder")
    a = p.parse_args(argv)
    if a.quick:
        a.points, a.time_limit = 2, min(a.time_limit, 10.0)
    grid = Grid("pipeline", [Source(a.pipedream, a.batch)], methods=a.methods.split(","), points=a.points,
                bandwidth=[a.bandwidth], gpus=a.gpus, options={"threads": 1}, time_limit=a.time_limit)
    t0 = time.perf_counter()
    tasks, instances = expand([grid])
    print(f"{len(tasks)} tasks ({a.points} limits x {len(a.gpus)} GPU counts x {a.methods}); grid and baseline "
          f"points built in {time.perf_counter() - t0:.1f}s (not in the sweeps' times)")
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench_sweep_"))
    ratios, net, all_diffs = [], [], []
    for rep in range(a.repeat):
        res = {}
        for w in (1, 2):
            out = base / f"workers{w}" if a.repeat == 1 else base / f"rep{rep}" / f"workers{w}"
            shutil.rmtree(out, ignore_errors=True)
            st = run_sweep(tasks, instances, out, workers=w, progress=False)
            res[w] = (st, read_results(out))
            print(f"--workers {w}: {st.wall:.1f}s wall (start-up {st.startup:.1f}s, shut-down {st.shutdown:.1f}s), "
                  f"{st.solved} tasks, {st.failed} errors, {st.carried} ILP rows took the pattern of a smaller limit")
        counts: dict = {}
        diffs = same_rows(res[1][1], res[2][1], rtol=1e-6, status_only=("time_limit", "no_solution"), counts=counts)
        all_diffs += diffs
        ratios.append(res[1][0].wall / res[2][0].wall)
        net.append(res[1][0].wall / (res[2][0].wall - res[2][0].startup - res[2][0].shutdown))
        print(f"wall-time ratio 1 / 2 workers: {ratios[-1]:.2f}x with the cluster's start-up and shut-down, "
              f"{net[-1]:.2f}x without (target >= 1.7x)")
        print(("rows agree" if not diffs else f"rows differ at {len(diffs)} values: " + "; ".join(diffs[:5]))
              + f" (timing columns aside; all values compared in {counts.get('all values', 0)} rows, status only "
              f"in {counts.get('status only', 0)} rows stopped by their time limit in both runs)")
        for w in (1, 2):
            above = ilp_above_baselines(res[w][1])
            print(f"--workers {w}: ILP slower than a baseline at the same limit at {len(above)} limits"
                  + (": " + "; ".join(above) if above else ""))
    if a.repeat > 1:
        print(f"ratio over {a.repeat} runs: with start-up min {min(ratios):.2f}x, median "
              f"{sorted(ratios)[len(ratios) // 2]:.2f}x, max {max(ratios):.2f}x; without start-up min "
              f"{min(net):.2f}x, median {sorted(net)[len(net) // 2]:.2f}x, max {max(net):.2f}x")
    df1 = res[1][1]
    d = df1["wall_time"].dropna().tolist()
    print(f"task durations (1 worker): sum {sum(d):.1f}s, longest task {max(d):.1f}s, median {sorted(d)[len(d) // 2]:.1f}s")
    for n in (1, 2, 4, 8, 16, 32):
        print(f"  estimated wall on {n:2d} workers: {estimate(d, n):7.1f}s (bound: longest task {max(d):.1f}s, "
              f"sum/N {sum(d) / n:.1f}s)")
    if not a.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if not all_diffs else 1


if __name__ == "__main__":
    sys.exit(guarded(main, 'bench_sweep'))    # bad input: one line, exit 2