"""Re-materialization + offloading is never worse than re-materialization alone nor offloading alone.

For every shipped instance (or those given), a few memory limits between the least memory of
re-materialization + offloading and the store-all peak, and the bandwidths 1 KB/s, 20 MB/s and
3 GB/s, it solves

- ``memplan.remat.solve(method="rotor")`` (re-materialization alone),
- ``memplan.offload.solve(method="dynprog")`` (offloading alone, paper 001's own memory model;
  compared only when its schedule also replays with a 1e-12 time tolerance, see ``_strict``),
- ``memplan.remat_offload.solve(method="dp")`` (the portfolio),

and prints one row per case with the three makespans (ms), the portfolio's winning candidate, and
``BAD`` where the portfolio is slower than one of the others (relative 1e-9). Exit status 1 when
any row is BAD.

Usage::

    python benchmarks/check_portfolio.py                       # every instances/*.json, 6 limits
    python benchmarks/check_portfolio.py --points 4 instances/paper004_table2.json
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
import glob
import math
import sys
import time
from pathlib import Path

import memplan
from memplan.baselines.remat_heuristics import store_all
from memplan.baselines.remat_offload_min_memory import min_memory as ro_min_memory
from memplan.models.offload import InvalidOffloadSchedule, validate_offload
from memplan.models.solution import InputError

ROOT = Path(__file__).resolve().parents[1]
BANDWIDTHS = {"1KB/s": 1e3, "20MB/s": 20e6, "3GB/s": 3e9}


def _ms(sol) -> float:
    return sol.objective * 1e3 if sol is not None and sol.success else math.nan


def _strict(chain, sol, M) -> bool:
    """DYNPROG's schedule replayed with a tight time tolerance (validate_offload's default, 1e-7 of
    the makespan, merges instants milliseconds apart on a slow link and can accept a schedule over
    the limit): only then is it compared."""
    if sol is None or not sol.success:
        return False
    try:
        validate_offload(chain, sol.schedule, M, tol=1e-12)
        return True
    except InvalidOffloadSchedule:
        return False


def check(path: str, points: int, time_limit: float) -> list[dict]:
    chain, _ = memplan.load_instance(path)
    hi = store_all(chain).peak_memory
    rows = []
    for bw_name, beta in BANDWIDTHS.items():
        lo = ro_min_memory(chain, beta).value
        for k in range(points):
            M = lo + (hi - lo) * k / max(1, points - 1)
            t0 = time.perf_counter()
            rot = memplan.remat.solve(chain, memory=M, method="rotor", time_limit=time_limit)
            try:
                off = memplan.offload.solve(chain, memory=M, bandwidth=beta, method="dynprog", time_limit=time_limit)
            except InputError:
                off = None
            strict = _strict(chain, off, M)
            ro = memplan.remat_offload.solve(chain, memory=M, bandwidth=beta, time_limit=time_limit)
            r, o, j = _ms(rot), _ms(off if strict else None), _ms(ro)
            bad = [name for name, v in (("rotor", r), ("dynprog", o)) if math.isfinite(v) and
                   not (math.isfinite(j) and j <= v * (1 + 1e-9) + 1e-12)]
            rows.append(dict(instance=Path(path).stem, bandwidth=bw_name, memory_mib=M / 2**20, rotor=r, dynprog=o,
                             remat_offload=j, winner=ro.details.get("candidate", str(ro.status)),
                             dynprog_note="" if strict or off is None or not off.success else
                             f"DYNPROG's {off.objective * 1e3:.6g} ms schedule is over the limit at tol 1e-12",
                             seconds=time.perf_counter() - t0, bad=",".join(bad)))
            row = rows[-1]
            print(f"{row['instance']:28s} {bw_name:>7s} {row['memory_mib']:9.2f} MiB  rotor {r:10.3f}  dynprog "
                  f"{o:10.3f}  remat-offload {j:10.3f}  ({row['winner']}; {row['seconds']:.1f}s)"
                  + (f"  BAD: worse than {row['bad']}" if bad else "")
                  + (f"  [{row['dynprog_note']}]" if row["dynprog_note"] else ""), flush=True)
    return rows


def main(argv=None) -> int:
    p = OneLineParser(name='check_portfolio', description=__doc__.splitlines()[0])
    p.add_argument("instances", nargs="*", help="instance files (default: instances/*.json)")
    p.add_argument("--points", type=int, default=6, help="memory limits per bandwidth (default 6)")
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds per solve call (default 60)")
    args = p.parse_args(argv)
    paths = args.instances or sorted(glob.glob(str(ROOT / "instances" / "*.json")))
    rows = []
    for path in paths:
        rows += check(path, args.points, args.time_limit)
    bad = [r for r in rows if r["bad"]]
    print(f"{len(rows)} cases, {len(bad)} where remat-offload is worse than rotor or DYNPROG")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(guarded(main, 'check_portfolio'))    # bad input: one line, exit 2