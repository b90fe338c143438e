"""A 6-stage chain on which the floating DP (paper 004, Theorem 4.7) is above the optimum of sequences
without ``up``: found while checking issue 31's bound (``remat_bound``'s rule 3) by brute force.

The gradient sizes differ from the activation sizes (``wd != wa``; the profiled chains differ at
index 0 only, the token ids' gradient). The exhaustive search finds a sequence of 102 without ``up``
at limit 84 (printed below, replayed by the simulator); the floating DP and the persistent DP give
106. ``remat-milp`` used to return 106 as "optimal, proved by the dp bound"; the bound now runs with
wa and wd lowered to their minimum (75 here), and remat-milp proves 102; ``rotor-floating`` returns
its 106 as feasible, not optimal. The optimal sequence recomputes
F^2 and F^3 in phase 5 while a^4 (kept by F_ck^5) is stored, which weak memory persistence
(Definition 4.3) forbids; Lemma 4.4 would move them to phase 4, where F_none^3 then needs
86 > 84 (delta^4 = 31 replaces delta^5 = 21 and a^4 = 2). So Lemma 4.4's "memory not larger" does
not hold when wd^{h-1} > wd^h + ... and the DP is not exact on such chains.

    python benchmarks/counterexample_floating_dp_deltas.py
"""
import dataclasses

import numpy as np

from memplan import remat
from memplan.baselines import remat_bound as B
from memplan.baselines import remat_rotor as R
from memplan.baselines.remat_exhaustive import exhaustive_remat
from memplan.formulations.remat_milp import solve_remat_milp
from memplan.models.chain import random_chain
from memplan.models.remat import simulate_remat


def chain():
    c = random_chain(6, 230)
    f = lambda *v: np.array(v, dtype=float)  # noqa: E731
    return dataclasses.replace(
        c, name="counterexample-wd-neq-wa",
        wa=f(6, 1, 9, 6, 2, 10, 1, 0), wabar=f(6, 5, 13, 6, 12, 14, 11, 0), wd=f(6, 22, 31, 28, 31, 21, 29, 0),
        of=f(0, 0, 21, 33, 24, 5, 43, 0), ob=f(0, 0, 1, 1, 0, 1, 2, 0),
        uf=f(0, 4, 3, 1, 4, 8, 4, 0), ub=f(0, 8, 10, 8, 5, 16, 4, 0))


def main():
    c, M = chain(), 84
    opt, sched = exhaustive_remat(c, M)
    noup, sched_noup = exhaustive_remat(c, M, up=False)
    print("exhaustive (all sequences):", opt, "  without up:", noup,
          " replayed:", simulate_remat(c, sched_noup, memory_limit=M).makespan)
    print("  ", sched_noup.ops)
    print("floating DP (dense, exact):", R.floating(c, M, exact=True).objective,
          "  on step functions:", B.floating_bound(c, M).value,
          "  persistent:", R.persistent(c, M, exact=True).objective)
    print("remat-milp MILP alone:", solve_remat_milp(c, M, threads=1, time_limit=30).objective)
    sol = remat.solve(c, memory=M, method="remat-milp", threads=1, time_limit=30)
    print("remat.solve(remat-milp):", sol.objective, sol.status, "proved_by", sol.details.get("proved_by"))
    fl = remat.solve(c, memory=M, method="rotor-floating")
    print("remat.solve(rotor-floating):", fl.objective, fl.status, "-", fl.message)


if __name__ == "__main__":
    main()
