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

``--chain random`` takes ``memplan.random_chain(L, seed=1, integer=False)`` instead, at 0.6 times
its store-all peak for the single-device problems and 1.3 times the serial memory of the
memory-smallest contiguous partition for the pipeline (the limits of the probe that found, in session
36, remat-offload at L = 3000 taking 2.8-5.3 s for 1 s, the pipeline ILP and cyclic search at L = 3000
on 2 GPUs 2.4-7.4 s for 1 s, and the cyclic search on 100 layers 9.4 s for 5 s; now within the limit).

Usage::

    python benchmarks/check_time_limits.py                     # L = 300 and 1000, 5 s
    python benchmarks/check_time_limits.py --stages 1000 --time-limit 3
    python benchmarks/check_time_limits.py --chain random --stages 3000 --time-limit 1 --gpus 2 --problems remat-offload,pipeline
    python benchmarks/check_time_limits.py --chain random --stages 100 --time-limit 5 --gpus 2,4 --problems pipeline
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
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
    ap = OneLineParser(name='check_time_limits', description=__doc__.splitlines()[0])
    ap.add_argument("--stages", default="300,1000", help="chain lengths, comma-separated")
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--slack", type=float, default=0.5)
    ap.add_argument("--chain", choices=["toy", "random"], default="toy")
    ap.add_argument("--gpus", default="4", help="the pipeline's GPU counts, comma-separated")
    ap.add_argument("--problems", default=",".join(dict.fromkeys(c[0] for c in CASES)),
                    help="problems to run, comma-separated")
    args = ap.parse_args(argv)
    from memplan.baselines.pipeline import min_memory_contiguous
    from memplan.models.pipeline import task_data

    problems = set(args.problems.split(","))
    cases = []
    for problem, method, kw in CASES:
        if problem not in problems:
            continue
        if problem == "pipeline":
            cases += [(problem, method, dict(kw, gpus=int(P))) for P in args.gpus.split(",")]
        else:
            cases.append((problem, method, kw))
    over = 0
    print(f"{'L':>5} {'problem':<14} {'method':<15} {'P':>2} {'wall_s':>7} {'limit_s':>7}  status")
    for L in (int(x) for x in args.stages.split(",")):
        chain = repeated_toy(L) if args.chain == "toy" else memplan.random_chain(L, seed=1, integer=False)
        memplan.solve(memplan.random_chain(3), "remat", memory=1e9)          # compile the kernels first
        peak = store_all(chain).peak_memory
        for problem, method, kw in cases:
            if args.chain == "toy":
                memory = peak if problem == "pipeline" else 1 * GiB
            elif problem == "pipeline":
                memory = 1.3 * min_memory_contiguous(task_data(chain, kw["bandwidth"]), kw["gpus"])[0]
            else:
                memory = 0.6 * peak
            t0 = time.perf_counter()
            try:
                sol = memplan.solve(chain, problem, method, memory=memory, time_limit=args.time_limit, **kw)
                status = f"{sol.status}: {sol.message[:90]}"
            except Exception as e:                     # an input error is a row too (exit 2 in the CLI)
                status = f"{type(e).__name__}: {str(e)[:90]}"
            wall = time.perf_counter() - t0
            bad = wall > args.time_limit + args.slack
            over += bad
            print(f"{L:>5} {problem:<14} {method:<15} {kw.get('gpus', ''):>2} {wall:7.2f} {args.time_limit:7.1f}  "
                  f"{'OVER ' if bad else ''}{status}", flush=True)
    print(f"rows over the limit (+{args.slack} s): {over}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(guarded(main, 'check_time_limits'))    # bad input: one line, exit 2