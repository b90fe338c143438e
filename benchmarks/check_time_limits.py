"""Time limits bound the whole call at every size: every problem and method on long chains.

The chain is paper 004's toy chain with its six layers repeated to L stages (the chains of
``tests/test_long_chains.py``). Every method of every problem is called through the library
(``memplan.solve``) with ``--time-limit`` seconds, and its wall time is measured around the whole
call (the command line adds about a second of imports on top). A row is ``OVER`` when the call took
more than ``limit + slack`` seconds (default slack 0.5 s: one phase's last step, the final replay).
Exit status 1 when a row is over.

The memory limits: 1 GiB per device for the single-device problems (the store-all peak is 2.9 GiB at
L = 300, 9.7 GiB at L = 1000), and the store-all peak of the whole chain per GPU for the pipeline on
4 GPUs (so that a limit below its minimum, refused at once, does not time nothing).

Usage::

    python benchmarks/check_time_limits.py                     # L = 300 and 1000, 5 s
    python benchmarks/check_time_limits.py --stages 1000 --time-limit 3
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import memplan
from memplan.baselines.remat_heuristics import store_all
from memplan.models.instance import chain_from_dict

ROOT = Path(__file__).resolve().parents[1]
GiB = 2**30

CASES = [("remat", m, {}) for m in memplan.remat.METHODS] + \
        [("offload", m, {"bandwidth": 1e9}) for m in memplan.offload.METHODS] + \
        [("remat-offload", m, {"bandwidth": 1e9}) for m in ("dp",)] + \
        [("pipeline", m, {"bandwidth": 1e9, "gpus": 4}) for m in memplan.pipeline.METHODS]


def repeated_toy(L: int):
    """Paper 004's toy chain with its six layers repeated to L stages."""
    src = json.loads((ROOT / "instances" / "paper004_table2.json").read_text())
    layers = src["stages"][1:-1]
    rows = [src["stages"][0]]
    for i in range(L):
        r = dict(layers[i % len(layers)], stage=i + 1)
        r.pop("name", None)
        rows.append(r)
    rows.append(dict(src["stages"][-1], stage=L + 1))
    src.update(name=f"toy-x{L}", stages=rows)
    return chain_from_dict(src, f"toy-x{L}")[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", default="300,1000", help="chain lengths, comma-separated")
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--slack", type=float, default=0.5)
    args = ap.parse_args(argv)
    over = 0
    print(f"{'L':>5} {'problem':<14} {'method':<15} {'wall_s':>7} {'limit_s':>7}  status")
    for L in (int(x) for x in args.stages.split(",")):
        chain = repeated_toy(L)
        memplan.solve(memplan.random_chain(3), "remat", memory=1e9)          # compile the kernels first
        for problem, method, kw in CASES:
            memory = store_all(chain).peak_memory if problem == "pipeline" else 1 * GiB
            t0 = time.perf_counter()
            try:
                sol = memplan.solve(chain, problem, method, memory=memory, time_limit=args.time_limit, **kw)
                status = f"{sol.status}: {sol.message[:90]}"
            except Exception as e:                     # an input error is a row too (exit 2 in the CLI)
                status = f"{type(e).__name__}: {str(e)[:90]}"
            wall = time.perf_counter() - t0
            bad = wall > args.time_limit + args.slack
            over += bad
            print(f"{L:>5} {problem:<14} {method:<15} {wall:7.2f} {args.time_limit:7.1f}  "
                  f"{'OVER ' if bad else ''}{status}", flush=True)
    print(f"rows over the limit (+{args.slack} s): {over}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
