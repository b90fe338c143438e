"""Figures 2 and 3 of paper 001 (activation offloading), as CSV + PNG under ``results/``.

* Figure 2: makespan / LB (Proposition 3) against the memory limit, from the minimum feasible memory
  to ``M_peak`` (no offloading needed), for every method (GREEDY, DYNPROG, vDNN, TFLMS, AutoSwap and,
  on short chains, the exact MILP; its proven bound is written too).
* Figure 3: throughput (samples/s = batch / makespan) against the memory limit for offloading (best
  of the heuristics, and DYNPROG) at 1x, 2x and 3x the bandwidth, and for optimal re-materialization
  (``baselines.remat_rotor.persistent``, paper 004's persistent DP). The two problems count memory the same
  way for activations (paper 001's ``M_GPU`` is the activation budget); the remat DP's own model
  (paper 004) is used for its curve.

Every offloading point is one :func:`memplan.offload.solve` call (``--time-limit`` bounds each call).
A limit where no schedule exists is a NaN point whose ``status`` column says ``infeasible``; any other
error stops the script instead of becoming a silent gap in a curve.

Usage::

    python -m memplan.experiments.offload_figures --instance instances/paper004_table2.json --bandwidth 1GB/s
    python -m memplan.experiments.offload_figures --instance FILE --points 30 --milp-max-L 10 --out results/offload
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

from memplan import offload
from memplan.baselines import remat_rotor as rotor
from memplan.models.offload import lower_bound_value, min_feasible_memory, peak_memory_no_offload
from memplan.models.instance import load_instance
from memplan.models.units import fmt_bandwidth, parse_bandwidth

ALL = ["greedy", "dynprog", "vdnn", "tflms", "autoswap", "milp"]


def _solve(chain, memory, bandwidth, method, args):
    """One :func:`memplan.offload.solve` call: (solution, seconds). Errors propagate; a limit below the
    minimum feasible memory is a Solution with status INFEASIBLE."""
    t0 = time.perf_counter()
    sol = offload.solve(chain, memory=memory, bandwidth=bandwidth, method=method, time_limit=args.time_limit,
                        gap=1e-4, threads=args.threads, slots=args.slots)
    return sol, time.perf_counter() - t0


def figure2(chain, bandwidth, args, out: Path):
    import pandas as pd
    from tqdm import tqdm

    mf, mp = min_feasible_memory(chain), peak_memory_no_offload(chain)
    mems = np.linspace(mf, mp, args.points)
    methods = [m for m in args.methods if m != "milp" or chain.L <= args.milp_max_L]
    rows = []
    for M in tqdm(mems, desc="figure 2", unit="limit"):
        lb = lower_bound_value(chain, M, bandwidth)
        for meth in methods:
            sol, dt = _solve(chain, M, bandwidth, meth, args)
            ok = sol.success
            rows.append({"memory": M, "method": meth, "makespan": sol.objective if ok else math.nan,
                         "lb": lb, "ratio": sol.objective / lb if ok else math.nan,
                         "bound": sol.bound if meth == "milp" and sol.bound is not None else math.nan,
                         "status": str(sol.status), "seconds": dt})
    df = pd.DataFrame(rows)
    df.to_csv(out / "figure2.csv", index=False)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for meth, g in df.groupby("method", sort=False):
        ax.plot(g["memory"] / 2**20, g["ratio"], marker="o", ms=3, label=meth)
    ax.set_xlabel("memory limit (MiB)")
    ax.set_ylabel("makespan / LB")
    ax.set_title(f"{chain.name}: offloading at {bandwidth / 1e9:.3g} GB/s (paper 001, Fig. 2)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "figure2.png", dpi=130)
    plt.close(fig)
    return df


def figure3(chain, bandwidth, args, out: Path, batch: float):
    import pandas as pd
    from tqdm import tqdm

    mf, mp = min_feasible_memory(chain), peak_memory_no_offload(chain)
    lo = min(mf, rotor.min_memory(chain))
    mems = np.linspace(lo, mp, args.points)
    heur = [m for m in args.methods if m != "milp"]
    rows = []
    for M in tqdm(mems, desc="figure 3", unit="limit"):
        for k in (1, 2, 3):
            best, dyn = math.nan, math.nan
            statuses = {}
            for meth in heur:
                sol, _ = _solve(chain, M, k * bandwidth, meth, args)
                statuses[meth] = str(sol.status)
                if sol.success:
                    best = np.nanmin([best, sol.objective])
                    if meth == "dynprog":
                        dyn = sol.objective
            best_status = "feasible" if best == best else "/".join(sorted(set(statuses.values())))
            rows.append({"memory": M, "curve": f"offload best {k}x", "makespan": best,
                         "throughput": batch / best if best == best else math.nan, "status": best_status})
            rows.append({"memory": M, "curve": f"offload dynprog {k}x", "makespan": dyn,
                         "throughput": batch / dyn if dyn == dyn else math.nan,
                         "status": statuses.get("dynprog", "not run")})
        sol = rotor.persistent(chain, M, slots=500)
        mk = sol.objective if sol.success else math.nan
        rows.append({"memory": M, "curve": "remat (rotor)", "makespan": mk,
                     "throughput": batch / mk if mk == mk else math.nan, "status": str(sol.status)})
    df = pd.DataFrame(rows)
    df.to_csv(out / "figure3.csv", index=False)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    styles = {1: "-", 2: "--", 3: ":"}
    for curve, g in df.groupby("curve", sort=False):
        if "dynprog" in curve and not args.show_dynprog:
            continue
        k = int(curve.split()[-1][0]) if curve.startswith("offload") else None
        ax.plot(g["memory"] / 2**20, g["throughput"], styles.get(k, "-"), marker="o" if k is None else None,
                ms=3, label=curve, color="k" if k is None else None)
    ax.set_xlabel("memory limit (MiB)")
    ax.set_ylabel("throughput (samples/s)" if batch != 1 else "throughput (iterations/s)")
    ax.set_title(f"{chain.name}: offloading vs re-materialization (paper 001, Fig. 3)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "figure3.png", dpi=130)
    plt.close(fig)
    return df


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m memplan.experiments.offload_figures", description=__doc__.split("\n\n")[0])
    p.add_argument("--instance", default="instances/paper004_table2.json")
    p.add_argument("--bandwidth", help="link bandwidth (default: the instance's platform, else 12.5GB/s as "
                   "measured in paper 001)")
    p.add_argument("--points", type=int, default=16, help="memory limits per curve (default 16)")
    p.add_argument("--methods", default=",".join(ALL), help="comma-separated subset of " + ",".join(ALL))
    p.add_argument("--milp-max-L", type=int, default=12, help="run the MILP only when L <= this (default 12)")
    p.add_argument("--time-limit", type=float, default=20.0, help="MILP time limit per point (default 20 s)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--slots", type=int, default=100, help="DYNPROG grid M/slots (default 100)")
    p.add_argument("--figures", default="2,3", help="which figures (default 2,3)")
    p.add_argument("--show-dynprog", action="store_true", help="figure 3: also draw DYNPROG alone")
    p.add_argument("--out", default="results/offload", help="output folder (default results/offload)")
    args = p.parse_args(argv)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in args.methods if m not in ALL]
    if bad:
        p.error(f"unknown method(s) {bad}; choose from {ALL}")
    chain, platform = load_instance(args.instance)
    if args.bandwidth:
        bw = parse_bandwidth(args.bandwidth)
    elif platform is not None and platform.bandwidth:
        bw = platform.bandwidth
    else:
        bw = 12.5e9
    batch = float(chain.provenance.get("batch") or 1)
    out = Path(args.out) / chain.name
    out.mkdir(parents=True, exist_ok=True)
    print(f"{chain.name}: L = {chain.L}, bandwidth {fmt_bandwidth(bw)}, output {out}/", file=sys.stderr)
    figs = set(args.figures.split(","))
    if "2" in figs:
        df = figure2(chain, bw, args, out)
        print(df.groupby("method")["ratio"].describe()[["count", "mean", "max"]].round(4).to_string())
    if "3" in figs:
        figure3(chain, bw, args, out, batch)
    print(f"written: {', '.join(str(f) for f in sorted(out.glob('figure*')))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
