"""Re-materialization memory sweep: throughput against peak memory for every method.

In the style of paper 004's Figures 6-8: for a chain, memory limits equally spaced between the
minimum feasible memory and store-all's peak (:func:`memplan.remat.memory_range`); for each limit
every method of :data:`memplan.remat.METHODS` asked for (rotor, rotor-floating, revolve, ... and the
MILPs), each solved by :func:`memplan.remat.solve`; ``sequential`` is drawn as one cross per number
of segments and store-all as one square. Each point is a schedule the simulator replayed.
Throughput = batch / makespan (the instance's provenance gives the batch; 1 otherwise, i.e.
iterations per second). ``--time-limit`` bounds each solve call.

    memplan sweep remat --instance instances/paper004_table2.json --points 10 --out results/toy
    python -m memplan.experiments.remat_sweep --instance ... (same options)

Writes ``OUT.csv`` (one row per method x limit; re-running with the same OUT resumes, skipping rows
already there) and ``OUT.png``.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from memplan import remat
from memplan.baselines import remat_heuristics as H
from memplan.models.instance import load_chain
from memplan.models.solution import InputError
from memplan.remat import METHODS

COLUMNS = ["instance", "L", "batch", "time_limit", "method", "memory_limit", "status", "makespan",
           "peak_memory", "throughput", "solve_time", "bound", "gap", "limit_exceeded", "param"]
DEFAULT_METHODS = ["rotor", "rotor-floating", "revolve", "recompute-all"]
MILP_METHODS = ["remat-milp", "checkmate", "checkmate-lp"]


def batch_of(chain) -> float:
    b = chain.provenance.get("batch")
    try:
        return float(b) if b else 1.0
    except (TypeError, ValueError):
        return 1.0


def sweep(chain, methods, points: int = 10, *, slots: int | None = None, exact: bool = False,
          time_limit: float | None = 60.0, gap: float | None = 1e-4, threads: int | None = None,
          csv_path: Path | None = None, progress: bool = True) -> pd.DataFrame:
    """Run the sweep; returns the DataFrame (also appended to ``csv_path`` row by row).

    ``slots``, ``exact``, ``time_limit`` (per solve call), ``gap`` and ``threads`` go to
    :func:`memplan.remat.solve`.
    """
    from tqdm import tqdm

    lo, hi = remat.memory_range(chain)
    limits = np.linspace(lo, hi, points)
    batch = batch_of(chain)
    done = set()
    rows: list[dict] = []
    if csv_path is not None and csv_path.exists():
        old = pd.read_csv(csv_path)
        rows = old.to_dict("records")
        done = {(r["method"], round(float(r["memory_limit"]))) for r in rows}

    def record(row):
        row = {c: row.get(c) for c in COLUMNS}
        rows.append(row)
        if csv_path is not None:
            pd.DataFrame([row]).to_csv(csv_path, mode="a", header=not csv_path.exists(), index=False)

    base = dict(instance=chain.name, L=chain.L, batch=batch, time_limit=time_limit)
    options = dict(slots=slots, exact=exact, time_limit=time_limit, gap=gap, threads=threads)
    # memory-independent points: store-all and every segment count of checkpoint_sequential
    if ("store-all", round(hi)) not in done:
        sa = remat.solve(chain, memory=float(hi), method="store-all")
        record({**base, "method": "store-all", "memory_limit": float(hi), "status": str(sa.status),
                "makespan": sa.objective, "peak_memory": sa.peak_memory, "throughput": batch / sa.objective,
                "solve_time": sa.times.get("total"), "param": ""})
    for s, t, peak in H.sequential_points(chain):
        if ("sequential", round(peak)) in done:
            continue
        record({**base, "method": "sequential", "memory_limit": float(peak), "status": "feasible",
                "makespan": t, "peak_memory": peak, "throughput": batch / t, "solve_time": 0.0,
                "param": f"segments={s}"})
        done.add(("sequential", round(peak)))
    todo = [(m, M) for M in limits for m in methods if (m, round(M)) not in done]
    for method, M in tqdm(todo, desc=f"sweep {chain.name}", disable=not progress, unit="run"):
        t0 = time.perf_counter()
        sol = remat.solve(chain, memory=float(M), method=method, **options)
        ok = sol.objective is not None
        record({**base, "method": method, "memory_limit": float(M), "status": str(sol.status),
                "makespan": sol.objective, "peak_memory": sol.peak_memory,
                "throughput": batch / sol.objective if ok else None,
                "solve_time": time.perf_counter() - t0,
                "bound": sol.bound, "gap": sol.gap,
                "limit_exceeded": bool(sol.details.get("limit_exceeded", False)), "param": sol.message[:80]})
    return pd.DataFrame(rows, columns=COLUMNS)


STYLE = {"rotor": ("tab:blue", "^-"), "rotor-floating": ("tab:cyan", "v--"), "revolve": ("tab:green", "o-"),
         "recompute-all": ("tab:gray", "s:"), "remat-milp": ("tab:purple", "D--"),
         "checkmate": ("tab:orange", "P-"), "checkmate-lp": ("tab:brown", "X:")}


def plot(df: pd.DataFrame, path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ok = df[df["makespan"].notna()]
    for method, g in ok.groupby("method"):
        x = g["peak_memory"] / 2**20
        if method == "sequential":
            ax.plot(x, g["throughput"], "x", color="tab:purple", label="sequential (segments)")
        elif method == "store-all":
            ax.plot(x, g["throughput"], "s", color="tab:red", markersize=9, label="store-all (PyTorch)")
        else:
            color, fmt = STYLE.get(method, (None, "o-"))
            g = g.sort_values("memory_limit")
            ax.plot(g["peak_memory"] / 2**20, g["throughput"], fmt, color=color, label=method, markersize=5)
            bad = g[g["limit_exceeded"].fillna(False).astype(bool)]
            if len(bad):   # schedules that break their limit (Checkmate's LP rounding): hollow red rings
                ax.plot(bad["peak_memory"] / 2**20, bad["throughput"], "o", mfc="none", mec="red", markersize=10,
                        label=f"{method}: over its limit")
    unit = "images/s" if df["batch"].iloc[0] != 1 else "iterations/s"
    ax.set_xlabel("peak memory (MiB, replayed)")
    ax.set_ylabel(f"throughput ({unit})")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--instance", required=True, help="instance file")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                   help=f"comma-separated methods (default {','.join(DEFAULT_METHODS)}; MILPs: "
                   f"{','.join(MILP_METHODS)}; 'all' for every method)")
    p.add_argument("--points", type=int, default=10, help="memory limits (default 10, as in paper 004)")
    p.add_argument("--slots", type=int, default=None, help="memory slots of the DPs (default: memplan.remat's, 500)")
    p.add_argument("--exact", action="store_true")
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds per solve call (every phase included)")
    p.add_argument("--gap", type=float, default=1e-4)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", help="output prefix (default results/remat_sweep_<instance>)")
    p.add_argument("--fresh", action="store_true", help="start over instead of resuming OUT.csv")


def run(args: argparse.Namespace) -> int:
    chain = load_chain(args.instance)
    methods = list(METHODS) if args.methods == "all" else [m.strip() for m in args.methods.split(",") if m.strip()]
    methods = [m for m in methods if m not in ("store-all", "sequential")]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise InputError(f"--methods: unknown method(s) {', '.join(unknown)}; available: {', '.join(METHODS)}")
    out = Path(args.out or f"results/remat_sweep_{Path(args.instance).stem}")
    out.parent.mkdir(parents=True, exist_ok=True)
    csv_path = out.with_suffix(".csv")
    if args.fresh and csv_path.exists():
        csv_path.unlink()
    df = sweep(chain, methods, args.points, slots=args.slots, exact=args.exact, time_limit=args.time_limit,
               gap=args.gap, threads=args.threads, csv_path=csv_path)
    plot(df, out.with_suffix(".png"), f"{chain.name} (L={chain.L}): throughput vs memory")
    summary = (df[df["makespan"].notna()].groupby("method")
               .agg(points=("makespan", "size"), best_throughput=("throughput", "max"),
                    min_peak_MiB=("peak_memory", lambda x: x.min() / 2**20)))
    print(summary.round(3).to_string())
    print(f"wrote {csv_path} and {out.with_suffix('.png')}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m memplan.experiments.remat_sweep", description=__doc__.split("\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
