"""Brute-force check of remat-milp's lower bound (issue 31) on many small drawn chains: longer than the
test suite allows (the tests keep a sample).

Families (seed % 4): 0 = random_chain with forward overheads drawn up to 4x the largest activation
(``wd == wa``); 1 = also gradient sizes drawn apart from the activations'; 2 = as 1 with backward
overheads of 0-2; 3 = as 0 with ``wabar < wa`` at about 30% of the stages. Limits: 0, 5, 15, 30, 50
and 80% of the way from the minimum to store-all. Per (chain, limit), with the exhaustive search
of :mod:`memplan.baselines.remat_exhaustive`:

- ``rewriting``: the optimum without ``up`` on ``relaxed_chain(chain)`` is at most the optimum with
  ``up`` on the chain (rule 3 of :mod:`memplan.baselines.remat_bound`: both rewritings);
- ``dp_bound``: ``floating_bound(chain, M)`` is at most the optimum (the DP's exactness on top);
- ``up_helps``: the optimum without ``up`` is above the optimum; ``tighter``: the relaxation with
  the second rewriting is above the one with the first only (o_f^j lowered to wd^{j-1} + o_b^j).

    nice -n 19 python benchmarks/check_remat_bound_bruteforce.py --chains 600
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import time

import numpy as np

from memplan import remat
from memplan.baselines import remat_bound as B
from memplan.baselines.remat_exhaustive import exhaustive_remat
from memplan.models.chain import random_chain

FRACTIONS = (0.0, 0.05, 0.15, 0.3, 0.5, 0.8)
FAMILIES = {0: "wd == wa, large o_f", 1: "wd drawn, large o_f", 2: "wd drawn, large o_f, o_b 0-2",
            3: "wd == wa, large o_f, wabar < wa at some stages"}


def drawn_chain(seed: int):
    rng = np.random.default_rng(seed + 200000)
    L = int(rng.integers(2, 7))
    c = random_chain(L, seed)
    of, wd, wab, ob = c.of.copy(), c.wd.copy(), c.wabar.copy(), c.ob.copy()
    fam = seed % 4
    for j in range(1, L + 1):
        of[j] = float(rng.integers(0, 4 * int(max(c.wa) + 1)))
        if fam in (1, 2):
            wd[j] = float(rng.integers(1, 3 * int(max(c.wa) + 1)))
        if fam == 2:
            ob[j] = float(rng.integers(0, 3))
        if fam == 3 and rng.random() < 0.3:
            wab[j] = float(rng.integers(1, int(c.wa[j]) + 1))
    return dataclasses.replace(c, of=of, of_all=of, of_ng=of, wd=wd, ob=ob, wabar=wab), fam


def _opt(c, M, up=True):
    r = exhaustive_remat(c, M, up=up)
    return math.inf if r is None else r[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--chains", type=int, default=600)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    stats = {f: dict(pairs=0, rewriting_violations=0, dp_bound_violations=0, up_helps=0, tighter=0)
             for f in FAMILIES}
    for seed in range(a.chains):
        c, fam = drawn_chain(seed)
        rc = B.relaxed_chain(c)
        first = dataclasses.replace(rc, of_all=np.minimum(rc.of_all, np.r_[np.inf, c.wd[:-1] + c.ob[1:]]))
        lo, hi = remat.memory_range(c)
        s = stats[fam]
        for f in FRACTIONS:
            M = math.floor(lo + f * (hi - lo))
            opt = _opt(c, M)
            relaxed = _opt(rc, M, up=False)
            s["pairs"] += 1
            if relaxed > opt + 1e-9:
                s["rewriting_violations"] += 1
                print(f"rewriting violated: seed {seed} L {c.L} M {M}: {relaxed} > {opt}")
            dp = B.floating_bound(c, M).value
            if dp > opt * (1 + 1e-12) + 1e-12:
                s["dp_bound_violations"] += 1
                print(f"dp bound above the optimum: seed {seed} (family {fam}) L {c.L} M {M}: {dp} > {opt}"
                      f" (optimum without up on the chain: {_opt(c, M, up=False)})")
            s["up_helps"] += _opt(c, M, up=False) > opt + 1e-9
            s["tighter"] += relaxed > _opt(first, M, up=False) + 1e-9
    print(f"\n{a.chains} chains (L = 2..6), {len(FRACTIONS)} limits each, {time.perf_counter() - t0:.0f} s")
    print(f"{'family':<48} {'pairs':>6} {'rewriting viol.':>16} {'dp bound viol.':>15} {'up helps':>9} {'tighter':>8}")
    for f, name in FAMILIES.items():
        s = stats[f]
        print(f"{name:<48} {s['pairs']:>6} {s['rewriting_violations']:>16} {s['dp_bound_violations']:>15} "
              f"{s['up_helps']:>9} {s['tighter']:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
