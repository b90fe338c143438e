"""Re-materialization + offloading (paper 000, section 5): throughput against the memory limit.

For each memory limit between ``--low`` x rotor's minimum feasible memory and the store-all peak,
and each bandwidth ``beta x f`` (f in ``--factors``, default 1, 2, 3), it runs

- ``store-all`` (no re-materialization; feasible only above its peak),
- ``rotor`` -- optimal persistent re-materialization (paper 004, ``baselines.remat_rotor.persistent``) with
  the same slots as the joint DP (``rotor-500``: with 500 slots, to show the discretization),
- ``offload`` -- offloading only, DYNPROG of paper 001 (``baselines.offload.dynprog``, its own
  memory model: output reserved when an operation starts),
- ``joint-N`` -- the joint DP of paper 000 (``baselines.remat_offload_dp.solve_joint``) with N memory slots
  (``--slots``, default 50, 100 and 200, each where its tables fit in 3 GB), and ``joint``, the best
  of them (the discretization matters: each stored value is rounded up to a slot, and each level
  boundary can lose one slot's transfer time ``M / (N beta)``; the CSV keeps every N).

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


def _run(fn, *a, **k):
    t0 = time.perf_counter()
    try:
        sol = fn(*a, **k)
    except Exception as e:   # infeasible limits raise in some methods; the row records why
        return None, f"{type(e).__name__}: {e}", time.perf_counter() - t0
    return sol, sol.message, time.perf_counter() - t0


def run(args: argparse.Namespace) -> int:
    import pandas as pd
    from tqdm import tqdm

    from memplan.baselines.remat_offload_dp import solve_joint
    from memplan.baselines.remat_heuristics import store_all
    from memplan.baselines.remat_rotor import min_memory, persistent
    from memplan.models.instance import load_instance
    from memplan.models.units import fmt_bandwidth, fmt_memory, parse_bandwidth

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

    def table_bytes(n):
        return (L * (L + 1) // 2) * (n + 1) ** 2 * 12 + (L + 2) * 2 * sum((n - A + 1) ** 2 for A in range(n + 1)) * 10

    skipped = [n for n in slot_list if table_bytes(n) > 3e9]
    slot_list = [n for n in slot_list if n not in skipped] or [50]
    if skipped:
        print(f"joint DP with N = {skipped} skipped: its tables would need more than 3 GB for L = {L}",
              file=sys.stderr)
    batch = chain.provenance.get("batch")
    scale = float(batch) if batch else 1.0
    unit = "samples/s" if batch else "iterations/s"
    dynprog = None
    if not args.no_offload:
        try:
            from memplan.baselines.offload import dynprog
        except ImportError:
            print("baselines.offload is not available: no offloading-only curve", file=sys.stderr)
    sa = store_all(chain)
    lo = min_memory(chain) * args.low
    hi = sa.peak_memory * 1.02
    mems = [lo + (hi - lo) * k / max(1, args.points - 1) for k in range(args.points)]
    rows = []
    jobs = [(M, f) for M in mems for f in factors]
    for M in tqdm(mems, desc="memory limits"):
        ok = M >= sa.peak_memory * (1 - 1e-12)
        rows.append(dict(memory=M, method="store-all", factor=math.nan, bandwidth=math.nan,
                         makespan=sa.objective if ok else math.nan, peak=sa.peak_memory, status="feasible" if ok
                         else "infeasible", seconds=0.0, message=""))
        for name, slots in (("rotor", slot_list[0]), ("rotor-500", 500)):
            sol, msg, dt = _run(persistent, chain, M, slots=slots)
            rows.append(dict(memory=M, method=name, factor=math.nan, bandwidth=math.nan,
                             makespan=sol.objective if sol is not None and sol.objective is not None else math.nan,
                             peak=sol.peak_memory if sol is not None else math.nan,
                             status=str(sol.status) if sol is not None else "error", seconds=dt, message=msg))
        for f in factors:
            b = beta * f
            methods = [(f"joint-{n}", lambda n=n: solve_joint(chain, M, b, slots=n)) for n in slot_list]
            if dynprog is not None:
                methods.append(("offload", lambda: dynprog(chain, M, b)))
            best = None
            for name, call in methods:
                sol, msg, dt = _run(call)
                rows.append(dict(memory=M, method=name, factor=f, bandwidth=b,
                                 makespan=sol.objective if sol is not None and sol.objective is not None
                                 else math.nan, peak=sol.peak_memory if sol is not None else math.nan,
                                 status=str(sol.status) if sol is not None else "error", seconds=dt,
                                 message=msg))
                if name.startswith("joint-") and sol is not None and sol.objective is not None and (
                        best is None or sol.objective < best["makespan"]):
                    best = dict(rows[-1], method="joint", message=f"best of {name}")
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
    if dynprog is not None:
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
