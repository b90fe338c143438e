"""Benchmark of the pipeline ILP (paper 003, (1)-(36)): model size, build time, and HiGHS's time to the
first feasible solution, to a solution as good as the best PipeDream point, and to the target gap,
for random chains of L layers on P GPUs (memory limit: the median memory of PipeDream's points). By
default the ILP runs *without* MIP start so that the times say what HiGHS finds by itself
(``--mip-start`` gives it the best baseline pattern); times are read from HiGHS's log.

    python -m benchmarks.bench_pipeline                      # L = 10 20 30, P = 4 8, 60 s each
    python -m benchmarks.bench_pipeline --L 10 --P 4 --time-limit 20
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
import sys
import math
import re
import tempfile
import time
from pathlib import Path

_TIME = re.compile(r"(\d+(?:\.\d+)?)s\s*$")


def incumbents(log_text: str) -> list[tuple[float, float, float]]:
    """(time s, best solution, best bound) of every line of HiGHS's B&B table (model units)."""
    out = []
    for line in log_text.splitlines():
        m = _TIME.search(line)
        if not m or "%" not in line and "Large" not in line:
            continue
        tok = line.split()
        try:
            t = float(m.group(1))
            sol = float(tok[-7])
            bound = float(tok[-8])
        except (ValueError, IndexError):
            continue
        out.append((t, sol, bound))
    return out


def bench_one(L: int, P: int, seed: int, time_limit: float, gap: float, threads: int, bandwidth: float,
              mip_start: bool = False) -> dict:
    from memplan.baselines.pipeline import best_feasible, pipedream_points, start_pattern
    from memplan.formulations.highs_driver import EXACT_TOLERANCES, solve_milp, timed
    from memplan.formulations.pipeline_ilp import build_model, start_values
    from memplan.models.chain import random_chain
    from memplan.models.pipeline import period_lower_bound, simulate_pattern, task_data

    chain = random_chain(L, seed, integer=False)
    td = task_data(chain, bandwidth)
    pts = pipedream_points(td, P, n_batches=200)
    mems = sorted(p.memory for p in pts)
    M = mems[len(mems) // 2]
    pd = best_feasible(pts, M)
    times: dict[str, float] = {}
    with timed(times, "build"):
        start = start_pattern(td, P, M, pts) if mip_start else None
        ilp = build_model(td, P, M, Tmin=period_lower_bound(td, P),
                          Tmax=start.T * (1 + 1e-6) if start is not None else None)
        values = start_values(ilp, start) if start is not None else None
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "highs.log"
        res = solve_milp(ilp.model, time_limit=time_limit, gap=gap, threads=threads, log_file=log, mip_start=values,
                         options=EXACT_TOLERANCES)
        inc = incumbents(log.read_text()) if log.exists() else []
    ts = ilp.ts
    first = next((t for t, s, b in inc if math.isfinite(s)), None)
    pd_level = next((t for t, s, b in inc if math.isfinite(s) and s * ts <= pd.period * (1 + 1e-6)), None)
    at_gap = res.times.get("solve") if res.status.value == "optimal" else None
    period = None
    if res.has_solution:
        pat = ilp.read_pattern()
        period = simulate_pattern(pat, td, gpus=P).period
    return {"L": L, "P": P, "start": mip_start, **res.size, "build_s": times["build"], "compile_s": res.times.get("compile"),
            "solve_s": res.times.get("solve"), "status": str(res.status), "first_feasible_s": first,
            "pipedream_level_s": pd_level, "gap_reached_s": at_gap, "ilp_period": period,
            "pipedream_period": pd.period, "bound": res.bound * ts if res.bound is not None else None,
            "gap": res.gap, "memory_limit": M}


def main(argv=None) -> int:
    import pandas as pd
    from memplan.models.units import parse_bandwidth

    p = OneLineParser(name='bench_pipeline', description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--L", type=int, nargs="+", default=[10, 20, 30])
    p.add_argument("--P", type=int, nargs="+", default=[4, 8])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--gap", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bandwidth", default="12GB/s")
    p.add_argument("--mip-start", action="store_true", help="give HiGHS the best baseline pattern as MIP start")
    p.add_argument("--csv", help="also write the table here")
    a = p.parse_args(argv)
    bw = parse_bandwidth(a.bandwidth)
    rows = []
    for L in a.L:
        for P in a.P:
            t0 = time.perf_counter()
            rows.append(bench_one(L, P, a.seed, a.time_limit, a.gap, a.threads, bw, a.mip_start))
            print(f"L={L} P={P}: {time.perf_counter() - t0:.1f}s", flush=True)
    df = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(df.round(4).to_string(index=False))
    if a.csv:
        df.to_csv(a.csv, index=False)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(guarded(main, 'bench_pipeline'))    # bad input: one line, exit 2