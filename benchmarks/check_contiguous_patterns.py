"""Long check: is there a pattern (paper 003's Definition 1) on *any contiguous* allocation at or
below a given period within a memory limit? One exact 1-periodic MILP per partition.

The paper's ILP does not close its gap on ResNet-18 with 8 GPUs in minutes, so at a point where
PipeDream's eager schedule beats the best pattern found (ResNet-18, 8 GPUs, 1.29 GB: PipeDream
4.1155 ms), this script asks the question partition by partition with the exact K = 1 model of
:mod:`formulations.pipeline_cyclic` (memory model ``exact``, checked against the exhaustive search in
the tests), which decides one fixed allocation in about a second.

Partitions into at most P contiguous stages are screened by three necessary conditions before any
MILP: every stage's compute load and every cut's link load (both directions) is at most the
period; and per GPU, weights + buffers + sum_l A[l-1] floor(s_l / T) <= M, where s_l is the time
from the end of F_l to the end of B_l with no waiting at all (at every instant at least
floor(s / T) mini-batches hold a^{l-1}). The answer covers contiguous allocations only (the ILP also
allows non-contiguous ones), and a MILP stopped by its time limit is reported as undecided.

    python benchmarks/check_contiguous_patterns.py --pipedream ../shared/external/pipedream/resnet18.graph.txt \
        --batch 8 --bandwidth 12GB/s --gpus 8 --memory 1294850918.4

Result of that command (2 cores, about 45 min in all; ``--stages 8`` alone took 35 min): of the
280,600 contiguous partitions into at most 8 stages, 7,334 pass the screen (12, 222, 1,492 and 5,608
of 5 to 8 stages) and the exact MILP proves every one of them infeasible at PipeDream's 4.11554 ms
within 1.29 GB, none undecided. So no contiguous allocation has a 1-periodic pattern there: the
paper's ILP cannot match PipeDream's eager schedule at this point unless some non-contiguous
allocation can (the 2-periodic schedules of method ``cyclic`` beat it: 3.978 ms).

With ``--min-memory`` (the same command, ``--jobs 2``: 63 min on 2 cores) the question becomes how
much memory a pattern at PipeDream's period needs: one memory-minimizing K = 1 MILP
(:func:`formulations.pipeline_cyclic.min_memory_at_period`) per partition whose load fits. Of the
7,334 such partitions the least is 1.29747 GB, 0.2% above the 1.29485 GB limit, e.g. stages
(1-4)(5)(6-9)(10-11)(12-17)(18-21)(22)(23); every solve is proven except two that stopped at the 30 s
limit (bound 1.28462 GB; the run above proves both infeasible at 1.29485 GB). PipeDream's own
partition needs 1.461 GB for a pattern at that period, against 1.236 GB for its eager schedule.

With ``--full-ilp SECONDS`` (the same command, ``--full-ilp 2400 --threads 2``) the question is put to
the paper's ILP itself, over every allocation, non-contiguous ones included: memory as objective,
T <= 4.11554 ms, MIP start the 1.29747 GB pattern of ``--start``. In 40 min HiGHS (24,723 nodes) found
nothing below 1.29747 GB and its bound rose to 0.918 GB only: no non-contiguous allocation with a
pattern within the 1.29485 GB limit was found, and none was ruled out.
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
import sys
import itertools
import math
import time


def memory_floor(td, stages, T: float) -> float:
    """A lower bound on the peak memory of any pattern of period T on ``stages`` (inf when a GPU or a
    link is busier than T): per GPU, weights + buffers + sum_l A[l-1] floor(s_l / T) (module
    docstring), the largest over the GPUs."""
    from memplan.baselines.pipeline import partition_period
    from memplan.baselines.pipeline_modular import serial_pattern
    from memplan.models.pipeline import constant_memory, stages_to_layer_gpu

    if partition_period(td, stages) > T:       # busiest GPU or link
        return math.inf
    serial = serial_pattern(td, stages_to_layer_gpu(stages, td.L))   # no waiting at all
    end = [tau + td.d[m] for m, tau in enumerate(serial.tau, start=1)]
    floor = 0.0
    for g, held in constant_memory(td, serial.gpu).items():
        act = sum(td.A[l - 1] * math.floor((end[td.backward(l) - 1] - end[l - 1]) / T + 1e-12)
                  for l in range(1, td.L + 1) if serial.gpu[l - 1] == g)
        floor = max(floor, held["weights"] + held["buffers"] + act)
    return floor


def screen(td, stages, T: float, M: float) -> bool:
    """The necessary conditions of the module docstring (True: a pattern may exist)."""
    return memory_floor(td, stages, T) <= M


_WORK: dict = {}


def _init_worker(td, P, T, time_limit, threads) -> None:
    _WORK.update(td=td, P=P, T=T, time_limit=time_limit, threads=threads)


def _least_one(stages):
    """(replayed memory or None, solver bound, proven?) of one partition, in a worker process."""
    from memplan.formulations.pipeline_cyclic import min_memory_at_period
    from memplan.models.pipeline import stages_to_layer_gpu
    from memplan.models.solution import Status

    w = _WORK
    r, bound = min_memory_at_period(w["td"], stages_to_layer_gpu(stages, w["td"].L), w["T"],
                                    P=w["P"], time_limit=w["time_limit"], threads=w["threads"])
    return (r.sim.peak_memory if r.schedule is not None else None, bound,
            r.status in (Status.OPTIMAL, Status.INFEASIBLE))


def least_memory(td, P: int, T: float, sizes, time_limit: float, threads: int, jobs: int) -> None:
    """``--min-memory``: the least memory of a pattern of period T over every contiguous partition
    into ``sizes`` stages, partitions taken by increasing :func:`memory_floor` (``jobs`` processes)
    and skipped once the floor reaches the best memory found (none of them can do better)."""
    from concurrent.futures import ProcessPoolExecutor

    from tqdm import tqdm

    from memplan.baselines.pipeline import _cuts_to_stages

    L = td.L
    floors = []
    for S in sizes:
        for cuts in itertools.combinations(range(1, L), S - 1):
            st = _cuts_to_stages(cuts, L)
            f = memory_floor(td, st, T)
            if math.isfinite(f):
                floors.append((f, st))
    floors.sort()
    print(f"{len(floors)} partitions have a load within {T * 1e3:.6g} ms")
    best, best_st, unproven, solved = math.inf, None, [], 0
    with ProcessPoolExecutor(jobs, initializer=_init_worker,
                             initargs=(td, P, T, time_limit, threads)) as ex:
        results = ex.map(_least_one, [st for _, st in floors], chunksize=4)
        for (f, st), (mem, bound, proven) in tqdm(zip(floors, results), total=len(floors),
                                                  desc="min-memory K=1 MILPs", unit="partition"):
            if f >= best:
                ex.shutdown(cancel_futures=True)
                break
            solved += 1
            if not proven:
                unproven.append((bound, st))
            if mem is not None and mem < best:
                best, best_st = mem, st
                tqdm.write(f"{best / 1e9:.6g} GB: {st}")
    unproven = [(b, st) for b, st in unproven if b is None or b < best]
    print(f"least memory of a pattern at {T * 1e3:.6g} ms over contiguous partitions into "
          f"{', '.join(map(str, sizes))} stages: {best / 1e9:.6g} GB ({best_st}); {solved} MILPs, "
          + (f"{len(unproven)} not proven (least bound {min(b or 0.0 for b, _ in unproven) / 1e9:.6g} GB)"
             if unproven else "every one proven"))


def full_ilp(td, P: int, T: float, stages, time_limit: float, threads: int, log_file) -> None:
    """``--full-ilp``: the paper's ILP over every allocation, contiguous or not, with the memory as the
    objective and T <= the period (:func:`formulations.pipeline_ilp.solve_min_memory`); MIP start: the
    least-memory pattern of ``stages`` at that period."""
    from memplan.formulations.pipeline_cyclic import min_memory_at_period
    from memplan.formulations.pipeline_ilp import solve_min_memory
    from memplan.models.pipeline import simulate_pattern, stages_to_layer_gpu

    r, _ = min_memory_at_period(td, stages_to_layer_gpu(stages, td.L), T, P=P, time_limit=60, threads=threads)
    if r.schedule is None:
        raise SystemExit(f"no pattern of {stages} at {T * 1e3:.6g} ms ({r.status}: {r.message})")
    start = r.schedule.as_pattern(td)
    print(f"MIP start {stages}: {r.sim.peak_memory / 1e9:.6g} GB at {start.T * 1e3:.6g} ms ({r.status})")
    pat, res = solve_min_memory(td, P, start=start, time_limit=time_limit, threads=threads,
                                Tmax=start.T * (1 + 1e-9), log_file=log_file)
    bound = f"{res.bound / 1e9:.6g} GB" if res.bound is not None else "none"
    if pat is None:
        print(f"full ILP ({res.status}): no pattern; bound {bound}")
        return
    sim = simulate_pattern(pat, td, gpus=P)
    print(f"full ILP ({res.status}, {res.times.get('solve', float('nan')):.0f} s): least memory found "
          f"{sim.peak_memory / 1e9:.6g} GB (replayed, period {sim.period * 1e3:.6g} ms), bound {bound}; "
          f"GPU of each layer {pat.layer_gpus()}")


def _parse_stages(text: str) -> list[tuple[int, int]]:
    """'1-4 5 6-9' -> [(1, 4), (5, 5), (6, 9)]."""
    out = []
    for part in text.replace(",", " ").split():
        a, _, b = part.partition("-")
        out.append((int(a), int(b or a)))
    return out


def main(argv=None) -> int:
    from tqdm import tqdm

    from memplan.baselines.pipeline import _cuts_to_stages, best_feasible, pipedream_points
    from memplan.formulations.pipeline_cyclic import solve_cyclic
    from memplan.models.pipedream import import_graph
    from memplan.models.pipeline import stages_to_layer_gpu, task_data
    from memplan.models.solution import Status
    from memplan.models.units import parse_bandwidth

    ap = OneLineParser(name='check_contiguous_patterns', description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipedream", required=True, help="PipeDream profile (graph.txt)")
    ap.add_argument("--batch", type=float, default=8)
    ap.add_argument("--bandwidth", default="12GB/s")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--memory", type=float, required=True, help="bytes per GPU")
    ap.add_argument("--period", type=float, default=None,
                    help="seconds (default: the best PipeDream point within the memory)")
    ap.add_argument("--time-limit", type=float, default=30, help="seconds per MILP")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--stages", type=int, nargs="*", default=None,
                    help="only partitions with these numbers of stages (default: 1 to --gpus)")
    ap.add_argument("--min-memory", action="store_true",
                    help="instead of deciding --memory, find the least memory of a pattern at the period")
    ap.add_argument("--jobs", type=int, default=1, help="processes for --min-memory")
    ap.add_argument("--full-ilp", type=float, default=None, metavar="SECONDS",
                    help="instead, run the paper's ILP (any allocation, contiguous or not) for SECONDS with the "
                         "memory as objective and the period as a bound, from the pattern of --start")
    ap.add_argument("--start", default="1-4 5 6-9 10-11 12-17 18-21 22 23",
                    help="--full-ilp: the partition of the MIP start (stages as 'first-last', space-separated)")
    ap.add_argument("--log", default=None, help="--full-ilp: HiGHS log file")
    args = ap.parse_args(argv)

    chain = import_graph(args.pipedream, batch=args.batch)
    bw = parse_bandwidth(args.bandwidth)
    td = task_data(chain, bw)
    L, P, M = td.L, args.gpus, args.memory
    T = args.period
    if T is None:
        pd = best_feasible(pipedream_points(td, P), M)
        if pd is None:
            raise SystemExit("no PipeDream point fits in this memory; give --period")
        T = pd.period
        print(f"PipeDream at {M / 1e9:.4g} GB: {T * 1e3:.6g} ms, stages {pd.stages}, NOAM {pd.noam}")
    t0 = time.perf_counter()
    cands = []
    sizes = [S for S in range(1, min(P, L) + 1) if args.stages is None or S in args.stages]
    if args.full_ilp is not None:
        full_ilp(td, P, T, _parse_stages(args.start), args.full_ilp, args.threads, args.log)
        print(f"{time.perf_counter() - t0:.0f} s")
        return 0
    if args.min_memory:
        least_memory(td, P, T, sizes, args.time_limit, args.threads, args.jobs)
        print(f"{time.perf_counter() - t0:.0f} s")
        return 0
    for S in sizes:
        for cuts in itertools.combinations(range(1, L), S - 1):
            if screen(td, _cuts_to_stages(cuts, L), T, M):
                cands.append(cuts)
    total = sum(math.comb(L - 1, S - 1) for S in sizes)
    print(f"{total} contiguous partitions into {', '.join(map(str, sizes))} stages; {len(cands)} pass the screen "
          f"({time.perf_counter() - t0:.1f} s)")
    found, undecided = [], []
    for cuts in tqdm(sorted(cands, key=len), desc="exact K=1 MILPs", unit="partition"):
        st = _cuts_to_stages(cuts, L)
        r = solve_cyclic(td, stages_to_layer_gpu(st, L), T, 1, M, P=P, time_limit=args.time_limit,
                         threads=args.threads, memory_model="exact")
        if r.schedule is not None:
            found.append((st, r.sim.period, r.sim.peak_memory))
            tqdm.write(f"pattern at {r.sim.period * 1e3:.6g} ms, {r.sim.peak_memory / 1e9:.4g} GB: {st}")
        elif r.status != Status.INFEASIBLE:
            undecided.append(st)
            tqdm.write(f"undecided ({r.status}): {st}")
    print(f"period {T * 1e3:.6g} ms, memory {M / 1e9:.4g} GB: {len(found)} partition(s) with a pattern, "
          f"{len(cands) - len(found) - len(undecided)} proven without, {len(undecided)} undecided; "
          f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, 'check_contiguous_patterns'))    # bad input: one line, exit 2