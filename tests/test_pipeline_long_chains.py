"""Pipelines on long chains: the serial-memory table that replaced an O(P L^3) loop, checked against the
loop and a brute force over partitions, and a 1000-stage call that stays within its time limit (the
balancing and cyclic MILPs, whose models cannot be interrupted while they are built, are skipped when
their build does not fit; before, 1000 stages took 57 s at --time-limit 5)."""
import itertools
import math
import time

import pytest

from memplan import pipeline
from memplan.baselines import pipeline as bp
from memplan.models.chain import random_chain
from memplan.models.pipeline import task_data


@pytest.mark.parametrize("L,seed,model", [(6, 1, "autograd"), (9, 2, "paper"), (12, 4, "autograd"), (25, 3, "autograd")])
def test_serial_memory_table_equals_the_loop_and_the_dp_a_brute_force(L, seed, model):
    td = task_data(random_chain(L, seed, integer=False), 1e10, memory_model=model)
    M = bp._serial_stage_memories(td)
    for a in range(1, L + 1):
        for b in range(a, L + 1):
            assert M[a, b] == pytest.approx(bp._serial_stage_memory(td, a, b), rel=1e-12)
    if L > 12:
        return                                # the brute force below is for the small chains
    for P in (1, 2, 3):
        got, stages = bp.min_memory_contiguous(td, P)
        best = min(max(bp._serial_stage_memory(td, b[i] + 1, b[i + 1]) for i in range(k))
                   for k in range(1, P + 1) for cuts in itertools.combinations(range(1, L), k - 1)
                   for b in [[0, *cuts, L]])
        assert got == pytest.approx(best, rel=1e-12)
        assert len(stages) <= P and stages[0][0] == 1 and stages[-1][1] == L
        assert max(bp._serial_stage_memory(td, a, b) for a, b in stages) == pytest.approx(got, rel=1e-12)


def test_a_thousand_stages_answer_within_the_time_limit():
    c = random_chain(1000, 1, integer=False)
    limit = 3.0
    t0 = time.perf_counter()
    sol = pipeline.solve(c, memory=float(c.wabar.sum()), bandwidth=1e10, gpus=4, time_limit=limit)
    elapsed = time.perf_counter() - t0
    assert elapsed <= limit * 1.1 + 1.0, elapsed
    assert sol.schedule is not None and math.isfinite(sol.objective)
