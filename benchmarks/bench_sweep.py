"""Benchmark of the sweep engine (issue 19): paper 003's Figures 6-11 sweep of ResNet-18 on 1 and 2 workers.

The grid: PipeDream's ResNet-18 profile at mini-batch ``--batch`` (default 8), 4 and 8 GPUs, 12 GB/s,
6 memory limits per GPU count (:func:`memplan.experiments.sweep_engine.memory_range`), methods ilp,
pipedream and gpipe, ``--time-limit`` seconds per task. It runs the grid with ``--workers 1`` (in
process) and ``--workers 2`` (a Dask LocalCluster) into two fresh folders and prints the wall-time
ratio (target >= 1.7x on 2 cores), whether the rows agree (timing columns aside), and, from the
measured task durations, an estimate of the wall time on N workers: greedy longest-first packing of
the durations on N machines, bounded below by the longest task and by the sum / N.

    python benchmarks/bench_sweep.py --pipedream ../shared/external/pipedream/resnet18.graph.txt --batch 8
    python benchmarks/bench_sweep.py --quick       # 2 memory points, 10 s tasks
"""
from __future__ import annotations

import argparse
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pipedream", default=str(DEFAULT))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--bandwidth", default="12GB/s")
    p.add_argument("--gpus", type=int, nargs="+", default=[4, 8])
    p.add_argument("--points", type=int, default=6)
    p.add_argument("--methods", default="ilp,pipedream,gpipe")
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--quick", action="store_true", help="2 memory points, 10 s per task")
    p.add_argument("--keep", help="keep the two result folders under this folder")
    a = p.parse_args(argv)
    if a.quick:
        a.points, a.time_limit = 2, min(a.time_limit, 10.0)
    grid = Grid("pipeline", [Source(a.pipedream, a.batch)], methods=a.methods.split(","), points=a.points,
                bandwidth=[a.bandwidth], gpus=a.gpus, options={"threads": 1}, time_limit=a.time_limit)
    t0 = time.perf_counter()
    tasks, instances = expand([grid])
    print(f"{len(tasks)} tasks ({a.points} limits x {len(a.gpus)} GPU counts x {a.methods}); grid built in "
          f"{time.perf_counter() - t0:.1f}s")
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench_sweep_"))
    res = {}
    for w in (1, 2):
        out = base / f"workers{w}"
        shutil.rmtree(out, ignore_errors=True)
        st = run_sweep(tasks, instances, out, workers=w, progress=False)
        res[w] = (st, read_results(out))
        print(f"--workers {w}: {st.wall:.1f}s wall, {st.solved} tasks, {st.failed} errors")
    diffs = same_rows(res[1][1], res[2][1], rtol=1e-6)
    ratio = res[1][0].wall / res[2][0].wall
    print(f"wall-time ratio 1 / 2 workers: {ratio:.2f}x (target >= 1.7x)")
    print("rows agree (timing columns aside)" if not diffs else f"rows differ at {len(diffs)} values: " + "; ".join(diffs[:5]))
    d = res[1][1]["wall_time"].dropna().tolist()
    print(f"task durations (1 worker): sum {sum(d):.1f}s, longest {max(d):.1f}s, median {sorted(d)[len(d) // 2]:.1f}s")
    for n in (1, 2, 4, 8, 16, 32):
        print(f"  estimated wall on {n:2d} workers: {estimate(d, n):7.1f}s (bound: longest task {max(d):.1f}s, "
              f"sum/N {sum(d) / n:.1f}s)")
    if not a.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if not diffs else 1


if __name__ == "__main__":
    raise SystemExit(main())
