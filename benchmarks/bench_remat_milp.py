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

``--zoo`` (issue 21, item 1): remat-milp on the zoo's ResNet-50 (L = 39) and ResNet-101 (L = 73)
chains at the middle limit, as ``memplan.remat.solve`` runs it, stopping at a 0.1% gap
(``--gap``) or ``--time-limit`` (default 600 s with ``--zoo``). Printed per chain: the time to
proof (the whole call: MIP start, build, HiGHS), the gap reached after 30/60/120/300/600 s (read
from HiGHS's log), the final gap, and the target (gap <= 0.1% within 10 minutes at L = 73, one
thread). ``--compare-up`` also solves with the dominated ``up`` operations kept
(``prune_up=False``, same MIP start) to show what leaving them out buys.

    python benchmarks/bench_remat_milp.py --zoo                      # L = 39 and 73, 600 s
    python benchmarks/bench_remat_milp.py --zoo --instances resnet101-b8-224-cpu --compare-up

Not part of the test suite.
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
import sys
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


ZOO = ["resnet50-b8-224-cpu", "resnet101-b8-224-cpu"]
TARGET_GAP, TARGET_S, TARGET_L = 1e-3, 600.0, 73
CHECKPOINTS = (30, 60, 120, 300, 600)


def _gap_trace(log_path: str, offset: float) -> list[tuple[float, float]]:
    """(seconds since the call started, relative gap) from the B&B rows of a HiGHS log; ``offset``
    is the time the call spent before HiGHS started (MIP start, build, compile)."""
    import re

    rows = []
    pat = re.compile(r"^\s*[A-Za-z]?\s+\d+\s+\d+\s+\d+\s+[\d.]+%\s+(\S+)\s+(\S+)\s+(\S+)\s.*\s([\d.]+)s\s*$")
    with open(log_path) as f:
        for line in f:
            mt = pat.match(line)
            if not mt:
                continue
            try:
                lb, ub = float(mt.group(1)), float(mt.group(2))
            except ValueError:
                continue
            if ub > 0 and lb > -1e300:
                rows.append((offset + float(mt.group(4)), max(0.0, (ub - lb) / abs(ub))))
    return rows


def _gap_at(trace, t: float):
    seen = [g for (s, g) in trace if s <= t]
    return seen[-1] if seen else None


def run_zoo(instances, time_limit: float, threads: int, gap: float, compare_up: bool) -> pd.DataFrame:
    import os
    import tempfile

    from memplan.formulations.remat_milp import solve_remat_milp
    from memplan.models.instance import load_instance

    persistent(random_chain(3, 0), 1e9)          # numba compile outside the measurements
    rows = []
    for name in instances:
        chain, _ = load_instance(name)
        lo, hi = remat.memory_range(chain)
        memory = (lo + hi) / 2
        variants = [("remat-milp", None)] + ([("keep up", False)] if compare_up else [])
        # the same MIP start for the comparison (computed outside its timing)
        start = remat.solve(chain, memory=memory, method="rotor", time_limit=time_limit) if compare_up else None
        for label, prune in variants:
            fd, log = tempfile.mkstemp(suffix=".log", prefix="bench_remat_milp_")
            os.close(fd)
            t0 = time.perf_counter()
            if prune is None:
                sol = remat.solve(chain, memory=memory, method="remat-milp", time_limit=time_limit,
                                  threads=threads, gap=gap, solver_log=log)
            else:
                sol = solve_remat_milp(chain, memory, time_limit=time_limit, gap=gap, threads=threads,
                                       start=start.schedule, start_source="the persistent DP",
                                       log_file=log, prune_up=False)
            wall = time.perf_counter() - t0
            t = sol.times
            before = sum(t.get(k, 0.0) for k in ("build", "start", "compile"))
            trace = _gap_trace(log, before)
            os.remove(log)
            proven = sol.gap is not None and sol.gap <= gap + 1e-12
            row = {"instance": name, "L": chain.L, "variant": label, "memory_MiB": memory / 2**20,
                   "status": str(sol.status), "makespan": sol.objective, "bound": sol.bound,
                   "gap_%": _pct(sol.gap), "time_to_proof_s": wall if proven else None,
                   "start_s": t.get("start"), "build_s": t.get("build"), "solve_s": t.get("solve"),
                   "up_stages": len(sol.details.get("up_stages", [])) if prune is None else chain.L}
            for c in CHECKPOINTS:
                if c <= time_limit:
                    row[f"gap@{c}s_%"] = _pct(_gap_at(trace, c) if not (proven and wall <= c) else sol.gap)
            rows.append(row)
            print(pd.DataFrame([row]).to_string(index=False, float_format=lambda x: f"{x:.4g}"), flush=True)
    df = pd.DataFrame(rows)
    print()
    print(df.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(f"\ntarget (issue 21): gap <= {100 * TARGET_GAP:.1f}% within {TARGET_S:.0f} s at L = {TARGET_L}, one thread")
    for r in rows:
        if r["variant"] != "remat-milp":
            continue
        ok = r["time_to_proof_s"] is not None and r["time_to_proof_s"] <= TARGET_S and r["gap_%"] <= 100 * TARGET_GAP
        print(f"  L = {r['L']} ({r['instance']}): " + (f"proven in {r['time_to_proof_s']:.0f} s" if r["time_to_proof_s"]
              else f"not proven, gap {r['gap_%']:.3f}% after {time_limit:.0f} s") + (" -- target met" if ok and
              r["L"] >= TARGET_L else " -- TARGET MISSED" if r["L"] >= TARGET_L else ""))
    return df


def main(argv=None) -> int:
    p = OneLineParser(name='bench_remat_milp', description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10, 20, 30, 50])
    p.add_argument("--methods", nargs="+", default=["remat-milp", "checkmate"], choices=SOLVERS)
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--frac", type=float, default=0.5, help="memory limit between min (0) and store-all (1)")
    p.add_argument("--csv", help="also write the table here")
    p.add_argument("--zoo", action="store_true", help="remat-milp on the zoo's ResNet-50/101 chains (issue 21)")
    p.add_argument("--instances", nargs="+", default=ZOO, help="with --zoo: the instances")
    p.add_argument("--gap", type=float, default=TARGET_GAP, help="with --zoo: the MILP's relative gap")
    p.add_argument("--compare-up", action="store_true", help="with --zoo: also solve with prune_up=False")
    a = p.parse_args(argv)
    if a.zoo:
        tl = 600.0 if "--time-limit" not in (argv if argv is not None else __import__("sys").argv) else a.time_limit
        df = run_zoo(a.instances, tl, a.threads, a.gap, a.compare_up)
        if a.csv:
            df.to_csv(a.csv, index=False)
        return 0
    df = run(a.sizes, a.methods, a.time_limit, a.threads, a.seed, a.frac)
    print()
    print(df.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if a.csv:
        df.to_csv(a.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(guarded(main, 'bench_remat_milp'))    # bad input: one line, exit 2