"""Re-materialization + offloading (paper 000, section 5): throughput against the memory limit.

A grid and a figure. For each memory limit between ``--low`` x rotor's minimum feasible memory (with
``--time-limit``, where computing it would take longer, the least peak of the baselines:
:func:`memplan.experiments.sweeps.rotor_min_memory`) and 1.02 x the store-all peak, and each bandwidth ``beta x f`` (beta each value of ``--bandwidth``, or the
instance's platform bandwidth, one of them required; f in ``--factors``, default 1, 2, 3), the tasks
are (each one :func:`memplan.solve` call of the sweep engine):

- ``store-all`` (``memplan.solve(chain, "remat", "store-all")``: feasible only above its peak),
- ``rotor`` -- optimal persistent re-materialization (paper 004) with the first of ``--slots``, and
  ``rotor-500`` with 500 slots, to show the discretization,
- ``offload`` -- offloading only, DYNPROG of paper 001 (``memplan.solve(chain, "offload", "dynprog")``
  with :data:`OFFLOAD_SLOTS` grid slots; its own memory model),
- ``joint-N`` -- the joint DP of paper 000 (``memplan.solve(chain, "remat-offload", "dp")``) with N
  memory slots (``--slots``, default 50, 100 and 200, each where its tables fit in 3 GB), and
  ``joint``, the best of them (drawn from the table by
  :func:`memplan.experiments.figures.remat_offload_curves`).

A limit where a method has no schedule is status ``infeasible`` with the method's message; an
exception is status ``error`` (never a NaN curve). In ``OUT`` (default ``results/remat-offload``): the
tidy table under ``OUT/results/`` and as ``OUT/results.csv``, the curve table
``OUT/remat_offload_<instance>.csv`` (one row per memory, curve and factor, and per time limit where
``memplan plot`` reads a folder of several runs: ``curve`` then names it, ``joint (time limit 2 s)``)
and the figure ``OUT/remat_offload_<instance>.png`` (one panel per factor). Throughput is
``batch / makespan`` (samples/s) when the instance records a batch, else iterations/s.

Usage::

    python -m memplan.experiments.remat_offload_figures --instance instances/resnet18-b8-224-cpu.json --bandwidth 1GB/s
    memplan sweep remat-offload --instance instances/paper004_table2.json --bandwidth 12GB/s --points 12
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from memplan.baselines import remat_rotor
from memplan.baselines.remat_heuristics import store_all
from memplan.baselines.remat_offload_dp import MAX_TABLE_BYTES, table_bytes
from memplan.experiments import figures, sweeps
from memplan.experiments.cli_checks import guarded
from memplan.models.solution import InputError
from memplan.models.units import fmt_memory

#: DYNPROG's state grid for the offloading-only curve (the figures were always made with 100)
OFFLOAD_SLOTS = 100
DEFAULT_INSTANCE = "instances/paper004_table2.json"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sweeps.add_engine_arguments(p, methods=None, points=12, time_limit=None)
    e = p.add_argument_group("remat-offload")
    e.add_argument("--factors", default="1,2,3", help="bandwidth multipliers (default 1,2,3)")
    e.add_argument("--low", type=float, default=None, help="lowest limit as a fraction of rotor's minimum "
                   "(default 0.7; with --points, not --memory)")
    e.add_argument("--slots", default="50,100,200", help="memory slots N of the joint DP, comma-separated (one "
                   "curve each, 'joint' is the best of them; values whose tables would exceed 3 GB for this chain "
                   "are skipped); rotor uses the first (default 50,100,200)")
    e.add_argument("--no-offload", action="store_true", help="skip the offloading-only curve")


def grids(args) -> list:
    if args.methods:
        raise InputError("--methods: the remat-offload experiment has fixed curves (store-all, rotor, offload, "
                         "joint-N); use memplan sweep --config for another grid")
    try:
        factors = [float(x) for x in sweeps.split_list(args.factors)]
        slot_list = [int(x) for x in sweeps.split_list(args.slots)]
    except ValueError:
        raise InputError(f"--factors/--slots: expected comma-separated numbers, got {args.factors!r} / "
                         f"{args.slots!r}") from None
    if not factors or not slot_list:         # an empty axis would silently become the default
        raise InputError(f"--factors/--slots: give at least one value each, e.g. --factors 1,2,3 --slots 50,100, got "
                         f"{args.factors!r} / {args.slots!r}")
    bad = [f for f in factors if not 0 < f < math.inf]
    if bad:     # 0 reads as no link (re-materialization alone, drawn as no panel); < 0 is no bandwidth
        raise InputError(f"--factors {args.factors}: {bad[0]:g} is not a bandwidth multiplier; give positive "
                         "numbers, e.g. --factors 1,2,3")
    if args.low is not None and args.memory:
        # --memory gives the limits themselves: --low had been ignored
        raise InputError(f"--low {args.low:g} and --memory: --low is the lowest of the limits --points spaces, "
                         "--memory gives the limits; give one of the two")
    args.low = 0.7 if args.low is None else args.low
    if not 0 < args.low < math.inf:
        raise InputError(f"--low {args.low:g}: give the lowest limit as a positive fraction of rotor's minimum "
                         "memory, e.g. --low 0.7")
    given = sweeps.bandwidths(args)
    out = []
    for src in sweeps.sources(args, DEFAULT_INSTANCE):
        chain, platform = src.load()
        betas = sweeps.links(given, src, platform)        # each times every factor
        skipped = [n for n in slot_list if table_bytes(chain.L, n) > MAX_TABLE_BYTES]
        slots = [n for n in slot_list if n not in skipped]
        if not slots:       # was N = 50 instead, unsaid, whose tables are larger still: an error row per task
            fits = 0
            while table_bytes(chain.L, fits + 1) <= MAX_TABLE_BYTES and fits + 1 < min(slot_list):
                fits += 1
            raise InputError(f"--slots {args.slots}: the joint DP's tables would need more than "
                             f"{MAX_TABLE_BYTES / 1e9:.0f} GB for L = {chain.L} ({src.spec}) with each value; "
                             + (f"give N <= {fits}, e.g. --slots {fits}" if fits else
                                "the chain is too long for the joint DP at any N"))
        if skipped:
            print(f"joint DP with N = {skipped} skipped: its tables would need more than "
                  f"{MAX_TABLE_BYTES / 1e9:.0f} GB for L = {chain.L}", file=sys.stderr)
        rotor_slots = sorted({slots[0], 500})
        too_big = [n for n in rotor_slots if remat_rotor.table_bytes("persistent", chain.L, n)
                   > remat_rotor.PERSISTENT_TABLE_LIMIT]
        if too_big:         # rotor-500 on a long chain: an error row at every limit
            print(f"rotor with {too_big[0]} slots skipped: its tables would need more than "
                  f"{remat_rotor.PERSISTENT_TABLE_LIMIT / 1e9:.0f} GB for L = {chain.L}", file=sys.stderr)
            rotor_slots = [n for n in rotor_slots if n not in too_big]
        if args.memory:
            mems = None
        else:
            lo, hi = sweeps.rotor_min_memory(args, src, chain) * args.low, store_all(chain).peak_memory * 1.02
            if not lo < hi:      # --low 5: the grid had run from 430 MB down to store-all's 114 MB
                raise InputError(f"--low {args.low:g}: the lowest limit, {args.low:g} x rotor's minimum memory "
                                 f"({fmt_memory(lo)}), is above the highest, store-all's peak + 2% "
                                 f"({fmt_memory(hi)}) on {chain.name}; give a smaller --low (0.7 by default)")
            mems = [lo + (hi - lo) * k / max(1, args.points - 1) for k in range(args.points)]
        bws = sorted({beta * f for beta in betas for f in factors})
        one = argparse.Namespace(**{**vars(args), "instance": [src.spec] if not src.pipedream else None,
                                    "pipedream": [src.spec] if src.pipedream else None})
        out.append(sweeps.base_grid(one, "remat", methods=["store-all"], memory=mems, bandwidth=[None]))
        if rotor_slots:
            out.append(sweeps.base_grid(one, "remat", methods=["rotor"], memory=mems, bandwidth=[None],
                                        options={"slots": rotor_slots}))
        out.append(sweeps.base_grid(one, "remat-offload", methods=["dp"], memory=mems, bandwidth=bws,
                                    options={"slots": slots}))
        if not args.no_offload:
            out.append(sweeps.base_grid(one, "offload", methods=["dynprog"], memory=mems, bandwidth=bws,
                                        options={"slots": OFFLOAD_SLOTS}))
    return out


def default_out(args) -> str:
    return "results/remat-offload"


def draw(df, out: Path, args) -> list[Path]:
    return figures.figure_remat_offload(df, out)


def summary(df, args) -> None:
    """The joint DP against rotor (same slots) and offloading only; per run where the table holds rows
    of several time limits (each compared with its own run's curves)."""
    cur = figures.remat_offload_curves(df)
    if cur.empty:
        return
    runs = cur["time_limit"].fillna(math.inf)
    several = runs.nunique() > 1
    for t, c in cur.groupby(runs, sort=True):
        head = f"({'no time limit' if t == math.inf else f'time limit {t:g} s'}) " if several else ""
        j = c[c.method == "joint"].set_index(["memory", "factor"]).makespan
        r = c[c.method == "rotor"].set_index("memory").makespan
        worse_r = sum(1 for (M, f), v in j.items() if math.isfinite(r.get(M, math.nan)) and
                      (not math.isfinite(v) or v > r[M] * (1 + 1e-9)))
        print(f"{head}joint DP worse than rotor (same slots) at {worse_r} points")
        o = c[c.method == "offload"].set_index(["memory", "factor"]).makespan
        if len(o):
            worse_o = [(M, f) for (M, f), v in o.items() if math.isfinite(v) and
                       (not math.isfinite(j.get((M, f), math.nan)) or j[(M, f)] > v * (1 + 1e-9))]
            print(f"{head}joint DP worse than offloading only at {len(worse_o)} points"
                  + (" (discretization of N slots; see the CSV): " + ", ".join(
                      f"{fmt_memory(M)} x{f:g}" for M, f in worse_o[:12]) if worse_o else ""))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m memplan.experiments.remat_offload_figures",
                                description=__doc__.split("\n\n")[0])
    add_arguments(p)
    args = p.parse_args(argv)
    return guarded(lambda: sweeps.run_experiment(sys.modules[__name__], args), "remat_offload_figures")


if __name__ == "__main__":
    sys.exit(main())
