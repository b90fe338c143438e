"""The ILP of paper 003 against an exhaustive search over patterns under memory limits.

``baselines.pipeline_exhaustive`` enumerates allocations, orders on every GPU and link and the
mini-batch shifts, solves one LP per structure and replays every optimum in the simulator; it shares
no code with the ILP. Memory limits are taken at every point of the exhaustive (period, memory)
front and just below it, so each limit binds.
"""
import pytest

from memplan.baselines.pipeline_exhaustive import allocations, exhaustive_search
from memplan.formulations.pipeline_ilp import solve_fixed_allocation, solve_ilp
from memplan.models.chain import random_chain
from memplan.models.pipeline import simulate_pattern, task_data


def test_allocations_are_set_partitions():
    # Bell numbers: 4 partitions of 3 layers into <= 2 blocks, 8 of 4 layers, 5 of 3 into <= 3
    assert sorted(allocations(3, 2)) == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]
    assert len(list(allocations(4, 2))) == 8
    assert len(list(allocations(3, 3))) == 5
    assert list(allocations(2, 1)) == [(0, 0)]


def test_exhaustive_one_gpu_is_serial():
    c = random_chain(2, 3, integer=True)
    td = task_data(c, 1.0)
    ex = exhaustive_search(td, 1)
    pat, r = ex.best(None)
    assert pat.T == pytest.approx(td.d[1:].sum())
    # below the smallest memory of any pattern there is none
    mmin = ex.front()[-1][1]
    assert ex.best(mmin * 0.999) is None


def _check_against(ex, solve, chain, bw, P):
    front = ex.front()
    assert len(front) >= 1
    for T, m in front:
        for M in (m, m * 0.999):
            pat, status = solve(M)
            want = ex.best(M)
            if want is None:
                assert pat is None and status == "infeasible", (M, status)
                continue
            assert status == "optimal", (M, status)
            assert pat.T == pytest.approx(want[0].T, rel=1e-6), (M, pat.T, want[0].T)
            r = simulate_pattern(pat, chain, bw, gpus=P)
            assert r.peak_memory <= M * (1 + 1e-6)
            assert r.period == pytest.approx(pat.T, rel=1e-6)
    return front


@pytest.mark.parametrize("L,bw,seed", [(2, 1.0, 0), (2, 1.0, 1), (2, 1.0, 2), (2, 1.0, 3),
                                       pytest.param(3, None, 0, marks=pytest.mark.long),
                                       pytest.param(3, None, 1, marks=pytest.mark.long)])
def test_ilp_equals_exhaustive_under_memory_limits(L, bw, seed):
    c = random_chain(L, seed, integer=True)
    td = task_data(c, bw)
    ex = exhaustive_search(td, 2)

    def solve(M):
        pat, res, _, _ = solve_ilp(td, 2, M, time_limit=60, threads=1)
        return pat, str(res.status)

    _check_against(ex, solve, c, bw, 2)


@pytest.mark.parametrize("L,bw,alloc", [pytest.param(3, 1.0, (0, 0, 1), marks=pytest.mark.long), (4, None, (0, 0, 1, 1))])
def test_fixed_allocation_ilp_equals_exhaustive(L, bw, alloc):
    """Allocations whose whole structure space fits in the suite (the non-contiguous L = 3
    allocation with a bandwidth limit has 7.5 million structures)."""
    c = random_chain(L, 0, integer=True)
    td = task_data(c, bw)
    ex = exhaustive_search(td, 2, allocs=[alloc])

    def solve(M):
        pat, res = solve_fixed_allocation(td, 2, M, list(alloc), time_limit=60, threads=1)
        return pat, str(res.status)

    front = _check_against(ex, solve, c, bw, 2)
    assert len(front) >= 2      # the limit trades period for memory on this chain


@pytest.mark.parametrize("seed", [0, 1])
def test_more_gpus_than_layers_answers_as_the_exhaustive_search_on_all_of_them(seed):
    """``memplan.pipeline.solve`` with gpus > L solves on L GPUs (no stage is replicated). The
    exhaustive search enumerates allocations over all 5 GPUs itself: at every point of its front and
    just below it, the front end's answer has its period (or none), replays within the limit, and
    says that 2 of the 5 GPUs were used."""
    import memplan

    c = random_chain(2, seed, integer=True)
    ex = exhaustive_search(task_data(c, 1.0), 5)
    for T, m in ex.front():
        for M in (m, m * 0.999):
            sol = memplan.pipeline.solve(c, memory=M, bandwidth=1.0, gpus=5, time_limit=30, threads=1,
                                         memory_model="paper")
            want = ex.best(M)
            if want is None:
                assert sol.status == "infeasible", (M, sol.status)
                continue
            assert sol.status == "optimal" and sol.objective == pytest.approx(want[0].T, rel=1e-6), (M, sol.objective)
            r = simulate_pattern(sol.schedule, c, 1.0, gpus=sol.gpus)
            assert r.peak_memory <= M * (1 + 1e-6)
            assert sol.gpus == 2 and sol.details["gpus_given"] == 5 and "5 GPUs given, 2 used" in sol.message


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_below_the_memory_lower_bound_a_tiny_chain_gets_its_exact_minimum(seed):
    """Below the memory lower bound nothing fits; on a chain of a few layers the answer states the
    exact minimum memory of any pattern (the min-memory ILP, a few seconds), which is the smallest
    memory on the exhaustive search's front."""
    import memplan
    from memplan.models.pipeline import memory_lower_bound

    c = random_chain(2, seed, integer=True)
    td = task_data(c, 1.0)
    least = min(m for _, m in exhaustive_search(td, 2).front())
    sol = memplan.pipeline.solve(c, memory=0.5 * memory_lower_bound(td, 2), bandwidth=1.0, gpus=2, time_limit=30,
                                 threads=1, memory_model="paper")
    assert sol.status == "infeasible"
    assert sol.details["min_memory"] == pytest.approx(least, rel=1e-6)
    assert "(proven by the min-memory ILP)" in sol.message
