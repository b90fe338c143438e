"""Short time limits: every exact method stays within its limit and never loses to its own baseline.

The guide's two rules, checked together where they pull apart: a time limit bounds the whole call,
and an "optimal" method is never worse than a baseline of the same problem. With a short limit an
exact method splits its time (its start, its bound, its model), while the baseline it is compared
with gets the whole limit. For each instance, memory limit and time limit it solves, side by side,

- remat: ``remat-milp`` against ``rotor``;
- offload: ``milp`` against ``dynprog`` (bandwidth 1 GB/s);
- remat-offload: ``dp`` against ``rotor`` and offloading's ``dynprog`` (1 GB/s);
- pipeline (4 GPUs, 12 GB/s links): ``ilp`` against ``pipedream`` and ``gpipe``;

and prints the exact method's wall time, both objectives and their ratio. ``OVER`` marks a call that
took more than ``limit + slack`` seconds (default slack 0.5 s), ``LOSES`` an exact method slower than
its baseline by more than 1e-7 (relative; replays of one schedule differ by less) while the baseline
has a schedule. Exit status 1 when a row is ``OVER`` or ``LOSES``.

Both sides are time-dependent: rotor and DYNPROG refine their discretization while time allows, so
a baseline given the whole limit can end one refinement further than the same baseline inside an
exact method's call, and the other way round (a ``LOSES`` row that moves between runs is that).

The default instances were not used to tune the shares of the exact methods (tuned on ResNet-101 at
1-5 s and on paper 004's toy chain repeated to 60 stages): the CPU zoo's DenseNet-121, Inception v3
and GPT-2, three H200 chains, and the toy chain repeated to 150 and 300 stages.

Usage::

    python benchmarks/check_short_limits.py                        # limits 1 and 3 s
    python benchmarks/check_short_limits.py --limits 2 --problems remat resnet101-b8-224-cpu
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import memplan
from memplan.baselines.remat_heuristics import store_all
from memplan.models.offload import min_feasible_memory, peak_memory_no_offload
from memplan.models.units import fmt_memory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_time_limits import repeated_toy  # noqa: E402  (the benchmarks' own toy chain builder)

INSTANCES = ["densenet121-b8-224-cpu", "inception_v3-b8-299-cpu", "gpt2-small-b4-s256-cpu",
             "resnet50-b32-224-h200", "gpt2-small-b8-s1024-h200", "resnet18-b8-1000-h200", "toy-x150", "toy-x300"]
#: problem -> (exact method, baselines, keyword arguments)
PAIRS = {"remat": ("remat-milp", ["rotor"], {}),
         "offload": ("milp", ["dynprog"], {"bandwidth": 1e9}),
         "remat-offload": ("dp", [("remat", "rotor"), ("offload", "dynprog")], {"bandwidth": 1e9}),
         "pipeline": ("ilp", ["pipedream", "gpipe"], {"bandwidth": 12e9, "gpus": 4})}


def load(name: str):
    if name.startswith("toy-x"):
        return repeated_toy(int(name[5:]))
    return memplan.load_instance(name)[0]


def memories(chain, problem: str) -> list[float]:
    """Two limits per problem: tight and loose, inside what the problem can do."""
    if problem == "offload":
        lo, hi = min_feasible_memory(chain), peak_memory_no_offload(chain)
        return [lo + 0.1 * (hi - lo), lo + 0.5 * (hi - lo)]
    peak = store_all(chain).peak_memory
    if problem == "pipeline":
        return [0.5 * peak, 1.0 * peak]        # per GPU, 4 GPUs
    return [0.3 * peak, 0.5 * peak]


def _call(chain, problem, method, memory, limit, kw):
    t0 = time.perf_counter()
    try:
        sol = memplan.solve(chain, problem, method, memory=memory, time_limit=limit, **kw)
    except memplan.InputError as e:
        return None, time.perf_counter() - t0, str(e)
    return sol, time.perf_counter() - t0, None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="*", help=f"shipped instance names or toy-xL (default: {' '.join(INSTANCES)})")
    ap.add_argument("--limits", default="1,3", help="time limits in seconds, comma-separated")
    ap.add_argument("--problems", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    ap.add_argument("--slack", type=float, default=0.5)
    args = ap.parse_args(argv)
    limits = [float(x) for x in args.limits.split(",")]
    memplan.solve(memplan.random_chain(3), "remat", memory=1e9)          # compile the kernels first
    bad = 0
    print(f"{'instance':26s} {'problem':13s} {'memory':>10s} {'limit':>5s} {'wall_s':>6s} {'exact':>12s} "
          f"{'best baseline':>14s} {'ratio':>8s}  flags")
    for name in args.instances or INSTANCES:
        chain = load(name)
        for problem in args.problems:
            method, baselines, kw = PAIRS[problem]
            for M in memories(chain, problem):
                for limit in limits:
                    sol, wall, err = _call(chain, problem, method, M, limit, kw)
                    base = []
                    for bl in baselines:
                        bp, bm = (problem, bl) if isinstance(bl, str) else bl
                        bkw = {k: v for k, v in kw.items() if bp != "remat"}
                        b, _, _ = _call(chain, bp, bm, M, limit, bkw)
                        if b is not None and b.success:
                            base.append((b.objective, f"{bm}"))
                    best = min(base) if base else (math.nan, "-")
                    ex = sol.objective if sol is not None and sol.success else math.nan
                    over = wall > limit + args.slack
                    loses = math.isfinite(best[0]) and not (math.isfinite(ex) and ex <= best[0] * (1 + 1e-7))
                    bad += over or loses
                    ratio = ex / best[0] if math.isfinite(ex) and math.isfinite(best[0]) else math.nan
                    status = err or (str(sol.status) if sol is not None else "")
                    print(f"{name:26s} {problem:13s} {fmt_memory(M):>10s} {limit:5.1f} {wall:6.2f} "
                          f"{ex:12.6g} {best[0]:12.6g} {best[1][:9]:>9s} {ratio:9.6f}  "
                          f"{'OVER ' if over else ''}{'LOSES ' if loses else ''}{status}", flush=True)
    print(f"rows OVER (+{args.slack} s) or LOSES: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
