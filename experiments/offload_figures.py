"""Figures 2 and 3 of paper 001 (activation offloading): a grid and two figures drawn from its table.

* Figure 2: makespan / LB (Proposition 3, method ``lb``) against the memory limit, from the minimum
  feasible memory to ``M_peak`` (no offloading needed), for every method (GREEDY, DYNPROG, vDNN, TFLMS,
  AutoSwap and, on short chains, the exact MILP).
* Figure 3: throughput (batch / makespan) against the memory limit for the best offloading heuristic
  at 1x, 2x and 3x the bandwidth, and for optimal re-materialization (``memplan.solve(chain, "remat",
  "rotor", slots=500)``, paper 004's persistent DP; fewer slots, said so, on a chain too long for the
  tables of 500) at the same limits.

The link is each value of ``--bandwidth`` (Figure 2 is drawn at the lowest), or the instance's platform
bandwidth; one of them is required.

Every point is one task of the sweep engine (one :func:`memplan.solve` call, ``--time-limit`` each); a
limit where no schedule exists is status ``infeasible`` (or ``no_solution``), an exception is status
``error`` with its message, never a NaN curve.

Usage::

    memplan sweep offload --instance instances/paper004_table2.json --bandwidth 1GB/s
    python -m memplan.experiments.offload_figures --instance FILE --bandwidth 1GB/s --points 30 --milp-max-L 10 --out results/offload
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from memplan.baselines import remat_rotor
from memplan.experiments import figures, sweeps
from memplan.experiments.cli_checks import guarded, positive_int
from memplan.models.solution import InputError
from memplan.models.units import fmt_bandwidth

ALL = ["greedy", "dynprog", "vdnn", "tflms", "autoswap", "milp"]
#: the memory slots of Figure 3's re-materialization curve (rotor, paper 004's persistent DP)
REMAT_SLOTS = 500
DEFAULT_INSTANCE = "instances/paper004_table2.json"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sweeps.add_engine_arguments(p, methods=",".join(ALL), points=16, time_limit=20.0)
    e = p.add_argument_group("offload")
    e.add_argument("--milp-max-L", type=positive_int, default=12, help="run the MILP only when L <= this (default 12)")
    e.add_argument("--threads", type=int, default=None, help="MILP threads (default 1)")
    e.add_argument("--slots", type=int, default=None, help="DYNPROG grid M/slots (default 100)")
    e.add_argument("--figures", default="2,3", help="which figures (default 2,3)")
    e.add_argument("--show-dynprog", action="store_true", help="figure 3: also draw DYNPROG alone")


def grids(args) -> list:
    from memplan.models.offload import min_feasible_memory, peak_memory_no_offload

    methods = sweeps.split_list(args.methods)
    bad = [m for m in methods if m not in ALL]
    if bad:
        raise InputError(f"--methods: unknown method(s) {', '.join(bad)}; choose from {', '.join(ALL)}")
    figs = set(sweeps.split_list(args.figures))
    if not figs or figs - {"2", "3"}:
        raise InputError(f"--figures: expected 2, 3 or 2,3, got {args.figures!r}")
    if "3" in figs and not [m for m in methods if m != "milp"]:
        # Figure 3 draws the heuristics (the MILP is Figure 2's): its grid had been refused as "methods: an
        # empty list", naming neither option
        raise InputError(f"--methods {args.methods} and --figures {args.figures}: Figure 3 draws the heuristics, not "
                         "the MILP; add one (e.g. --methods milp,dynprog) or give --figures 2")
    flags, defaults = {"threads": args.threads, "slots": args.slots}, {"gap": 1e-4, "threads": 1, "slots": 100}
    sweeps.tuning("offload", methods, flags)              # a flag none of the methods reads: refused
    out = []
    given = sweeps.bandwidths(args)
    for src in sweeps.sources(args, DEFAULT_INSTANCE):
        chain, platform = src.load()
        bws = sweeps.links(given, src, platform)          # Figure 2 is drawn at the lowest
        one = argparse.Namespace(**{**vars(args), "instance": [src.spec] if not src.pipedream else None,
                                    "pipedream": [src.spec] if src.pipedream else None})
        if "2" in figs:
            ms = [m for m in methods if m != "milp" or chain.L <= args.milp_max_L] + ["lb"]
            out.append(sweeps.base_grid(one, "offload", methods=ms, bandwidth=bws,
                                        options=sweeps.tuning("offload", ms, {}, {**defaults, **_set(flags)})))
        if "3" in figs:
            mf, mp = min_feasible_memory(chain), peak_memory_no_offload(chain)
            lo = min(mf, sweeps.rotor_min_memory(args, src, chain))
            mems = [float(m) for m in np.linspace(lo, mp, args.points)] if not args.memory else None
            heur = [m for m in methods if m != "milp"]
            out.append(sweeps.base_grid(one, "offload", methods=heur, memory=mems,
                                        bandwidth=sorted({k * bw for bw in bws for k in (1, 2, 3)}),
                                        options=sweeps.tuning("offload", heur, {}, {**defaults, **_set(flags)})))
            # paper 004's persistent DP at 500 slots; on a chain where its tables would not fit (8.4 GiB at
            # 1500 stages) every remat task was an error row: the most slots that fit instead, said so
            slots = min(REMAT_SLOTS, remat_rotor.max_slots("persistent", chain.L, remat_rotor.PERSISTENT_TABLE_LIMIT))
            if slots < REMAT_SLOTS:
                print(f"Figure 3: rotor with {slots} slots, the most whose DP tables fit in "
                      f"{remat_rotor.PERSISTENT_TABLE_LIMIT / 1e9:.0f} GB for L = {chain.L} ({REMAT_SLOTS} would not)"
                      + ("; no re-materialization curve" if slots < 1 else ""), file=sys.stderr)
            if slots >= 1:
                out.append(sweeps.base_grid(one, "remat", methods=["rotor"], memory=mems, bandwidth=[None],
                                            options={"slots": slots}))
    return out


def _set(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def default_out(args) -> str:
    return "results/offload"


def draw(df, out: Path, args) -> list[Path]:
    paths = figures.figure_offload(df, out, show_dynprog=args.show_dynprog)
    keep = set(sweeps.split_list(args.figures))
    return [p for p in paths if any(p.name.endswith(f"figure{k}.png") for k in keep)]


def summary(df, args) -> None:
    off = df[(df["problem"] == "offload") & df["objective"].notna()]
    lb = df[(df["problem"] == "offload") & (df["method"] == "lb")].set_index(
        ["instance", "bandwidth", "memory_limit"])["bound"]
    if off.empty or lb.empty:
        return
    off = off.join(lb.rename("lb"), on=["instance", "bandwidth", "memory_limit"], how="inner")
    off["ratio"] = off["objective"] / off["lb"]
    off["method"] = figures.curve_labels(off)
    off["bandwidth"] = off["bandwidth"].map(fmt_bandwidth)
    print("makespan / LB (paper 001, Fig. 2) at the limits where the method has a schedule:")
    print(off.groupby(["instance", "bandwidth", "method"]).agg(points=("ratio", "size"), mean=("ratio", "mean"),
                                                               max=("ratio", "max")).round(4).to_string())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m memplan.experiments.offload_figures",
                                description=__doc__.split("\n\n")[0])
    add_arguments(p)
    args = p.parse_args(argv)
    return guarded(lambda: sweeps.run_experiment(sys.modules[__name__], args), "offload_figures")


if __name__ == "__main__":
    sys.exit(main())
