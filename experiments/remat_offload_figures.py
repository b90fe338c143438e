"""Re-materialization + offloading (paper 000, section 5): throughput against the memory limit.

For each memory limit between ``--low`` x rotor's minimum feasible memory and the store-all peak,
and each bandwidth ``beta x f`` (f in ``--factors``, default 1, 2, 3), it solves, through the problem
modules (:func:`memplan.solve`),

- ``store-all`` (``memplan.solve(chain, "remat", "store-all")``: no re-materialization; feasible only
  above its peak),
- ``rotor`` -- optimal persistent re-materialization (paper 004; ``memplan.solve(chain, "remat",
  "rotor")``) with the same slots as the joint DP (``rotor-500``: with 500 slots, to show the
  discretization),
- ``offload`` -- offloading only, DYNPROG of paper 001 (``memplan.solve(chain, "offload", "dynprog")``
  with :data:`OFFLOAD_SLOTS` grid slots; its own memory model: output reserved when an operation
  starts),
- ``joint-N`` -- the joint DP of paper 000 (:func:`memplan.remat_offload.solve`, method ``dp``) with N
  memory slots (``--slots``, default 50, 100 and 200, each where its tables fit in 3 GB), and
  ``joint``, the best of them (the discretization matters: each stored value is rounded up to a
  slot, and each level boundary can lose one slot's transfer time ``M / (N beta)``; the CSV keeps
  every N).

A limit where a method has no schedule is a row with status ``infeasible`` and the method's message
(a NaN makespan there is the method's answer, not a failure); any other exception stops the script.
Every makespan is the one replayed by the method's simulator. The CSV (one row per memory, method
and factor) and the PNG (one panel per factor) go to ``--out`` (default ``results/remat_offload``).
Throughput is ``batch / makespan`` (samples/s) when the instance records a batch, else
iterations/s.

Usage::

    python -m memplan.experiments.remat_offload_figures --instance instances/resnet18-b8-224-cpu.json --bandwidth 1GB/s
    memplan sweep remat-offload --instance instances/paper004_table2.json --bandwidth 12GB/s --points 12
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import memplan
from memplan.models.solution import InfeasibleError
from memplan.baselines.remat_heuristics import min_memory, store_all
from memplan.baselines.remat_offload_dp import MAX_TABLE_BYTES, table_bytes
from memplan.models.instance import load_instance
from memplan.models.units import fmt_bandwidth, fmt_memory, parse_bandwidth

#: DYNPROG's state grid for the offloading-only curve (the figures were always made with 100)
OFFLOAD_SLOTS = 100


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--instance", default="instances/paper004_table2.json")
    p.add_argument("--bandwidth", default=None, help="base link bandwidth beta (default: the instance's "
                   "platform, else 12GB/s)")
    p.add_argument("--factors", default="1,2,3", help="bandwidth multipliers (default 1,2,3)")
    p.add_argument("--points", type=int, default=12, help="memory limits (default 12)")
    p.add_argument("--low", type=float, default=0.7, help="lowest limit as a fraction of rotor's minimum")
    p.add_argument("--slots", default="50,100,200", help="memory slots N of the joint DP, comma-separated (one "
                   "curve each, 'joint' is the best of them; values whose tables would exceed 3 GB for this chain "
                   "are skipped); rotor uses the first (default 50,100,200)")
    p.add_argument("--no-offload", action="store_true", help="skip the offloading-only curve")
    p.add_argument("--out", default="results/remat_offload", help="output prefix (CSV + PNG)")


def _run(problem: str, chain, method: str, memory: float, **options):
    """Solve through :func:`memplan.solve`; (solution or None, message, seconds).

    A limit without a schedule is an INFEASIBLE solution, or an :class:`InfeasibleError` from a method
    that raises it (recorded as ``None`` with its message); every other exception propagates.
    """
    t0 = time.perf_counter()
    try:
        sol = memplan.solve(chain, problem, method, memory=memory, time_limit=None, **options)
    except InfeasibleError as e:
        return None, f"InfeasibleError: {e}", time.perf_counter() - t0
    return sol, sol.message, time.perf_counter() - t0


def _row(memory, method, factor, bandwidth, sol, msg, dt) -> dict:
    return dict(memory=memory, method=method, factor=factor, bandwidth=bandwidth,
                makespan=sol.objective if sol is not None and sol.objective is not None else math.nan,
                peak=sol.peak_memory if sol is not None and sol.peak_memory is not None else math.nan,
                status=str(sol.status) if sol is not None else "infeasible", seconds=dt, message=msg)


def run(args: argparse.Namespace) -> int:
    import pandas as pd
    from tqdm import tqdm

    # here, not at the top: `memplan sweep` imports every experiment module, and these load numba

    chain, platform = load_instance(args.instance)
    if args.bandwidth is not None:
        beta = parse_bandwidth(args.bandwidth)
    elif platform is not None and platform.bandwidth:
        beta = platform.bandwidth
    else:
        beta = parse_bandwidth("12GB/s")
    factors = [float(x) for x in str(args.factors).split(",") if x.strip()]
    slot_list = [int(x) for x in str(args.slots).split(",") if x.strip()]
    L = chain.L

    skipped = [n for n in slot_list if table_bytes(L, n) > MAX_TABLE_BYTES]
    slot_list = [n for n in slot_list if n not in skipped] or [50]
    if skipped:
        print(f"joint DP with N = {skipped} skipped: its tables would need more than "
              f"{MAX_TABLE_BYTES / 1e9:.0f} GB for L = {L}", file=sys.stderr)
    batch = chain.provenance.get("batch")
    scale = float(batch) if batch else 1.0
    unit = "samples/s" if batch else "iterations/s"
    sa = store_all(chain)        # the range of limits: up to the store-all peak
    lo = min_memory(chain) * args.low
    hi = sa.peak_memory * 1.02
    mems = [lo + (hi - lo) * k / max(1, args.points - 1) for k in range(args.points)]
    rows = []
    jobs = [(M, f) for M in mems for f in factors]
    for M in tqdm(mems, desc="memory limits"):
        sol, msg, dt = _run("remat", chain, "store-all", M)
        ok = sol is not None and sol.schedule is not None and sol.peak_memory <= M * (1 + 1e-12)
        row = _row(M, "store-all", math.nan, math.nan, sol, msg, dt)
        row.update(makespan=row["makespan"] if ok else math.nan, peak=sa.peak_memory,
                   status="feasible" if ok else "infeasible")
        rows.append(row)
        for name, slots in (("rotor", slot_list[0]), ("rotor-500", 500)):
            rows.append(_row(M, name, math.nan, math.nan, *_run("remat", chain, "rotor", M, slots=slots)))
        for f in factors:
            b = beta * f
            best = None
            for n in slot_list:
                rows.append(_row(M, f"joint-{n}", f, b, *_run("remat-offload", chain, "dp", M, bandwidth=b,
                                                              slots=n)))
                if math.isfinite(rows[-1]["makespan"]) and (best is None or rows[-1]["makespan"] < best["makespan"]):
                    best = dict(rows[-1], method="joint", message=f"best of joint-{n}")
            if not args.no_offload:
                rows.append(_row(M, "offload", f, b, *_run("offload", chain, "dynprog", M, bandwidth=b,
                                                                slots=OFFLOAD_SLOTS)))
            rows.append(best if best is not None else dict(memory=M, method="joint", factor=f, bandwidth=b,
                                                           makespan=math.nan, peak=math.nan, status="infeasible",
                                                           seconds=0.0, message=""))
    df = pd.DataFrame(rows)
    df["throughput"] = scale / df["makespan"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    csv = out.with_suffix(".csv")
    df.to_csv(csv, index=False)
    print(f"{len(jobs)} (memory, factor) points; CSV written to {csv}")

    # sanity summary: the joint DP against rotor (same slots) and offloading only
    j = df[df.method == "joint"].set_index(["memory", "factor"]).makespan
    r = df[df.method == "rotor"].set_index("memory").makespan
    worse_r = sum(1 for (M, f), v in j.items() if math.isfinite(r.get(M, math.nan)) and
                  (not math.isfinite(v) or v > r[M] * (1 + 1e-9)))
    print(f"joint DP worse than rotor (same slots) at {worse_r} points")
    if not args.no_offload:
        o = df[df.method == "offload"].set_index(["memory", "factor"]).makespan
        worse_o = [(M, f) for (M, f), v in o.items() if math.isfinite(v) and
                   (not math.isfinite(j.get((M, f), math.nan)) or j[(M, f)] > v * (1 + 1e-9))]
        print(f"joint DP worse than offloading only at {len(worse_o)} points"
              + (" (discretization of N slots; see the CSV): " + ", ".join(
                  f"{fmt_memory(M)} x{f:g}" for M, f in worse_o[:12]) if worse_o else ""))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(factors), figsize=(5 * len(factors), 4), sharey=True, squeeze=False)
    for ax, f in zip(axes[0], factors):
        styles = [("store-all", "k*--"), ("rotor", "C0-o"), ("rotor-500", "C0:"), ("offload", "C2-s"),
                  ("joint", "C3-^")] + [(f"joint-{n}", f"C{4 + k}:") for k, n in enumerate(slot_list)]
        for name, style in styles:
            d = df[(df.method == name) & ((df.factor == f) | df.factor.isna())]
            if d.empty:
                continue
            ax.plot(d.memory / 2**20, d.throughput, style, label=name, markersize=4)
        ax.set_title(f"beta x{f:g} = {fmt_bandwidth(beta * f)}")
        ax.set_xlabel("memory limit (MiB)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"throughput ({unit})")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{chain.name}: re-materialization + offloading (joint DP N={args.slots}); "
                 f"store-all peak {fmt_memory(sa.peak_memory)}")
    fig.tight_layout()
    png = out.with_suffix(".png")
    fig.savefig(png, dpi=120)
    print(f"figure written to {png}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m memplan.experiments.remat_offload_figures",
                                description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
