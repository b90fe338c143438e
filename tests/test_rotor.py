"""The DPs of paper 004 against the paper's numbers and an exhaustive search."""
import pytest

from memplan.baselines import remat_heuristics as H
from memplan.baselines import remat_rotor as rotor
from memplan.baselines.remat_exhaustive import exhaustive_remat
from memplan.models.chain import Chain, random_chain
from memplan.models.remat import simulate_remat
from memplan.models.solution import Status

from conftest import MiB


def test_toy_90mib_rotor_matches_paper(toy_chain):
    sol = rotor.persistent(toy_chain, 90 * MiB)
    assert sol.status == Status.OPTIMAL
    assert sol.objective == pytest.approx(47.42e-3)
    assert sol.peak_memory / MiB == pytest.approx(86.75)
    assert sol.schedule.notation() == ("F_ck^1 F_∅^2 F_∅^3 F_all^4..F_all^7 B^7..B^4 F_ck^1 F_∅^2 F_all^3 "
                                       "B^3 F_all^1 F_all^2 B^2 B^1")
    fl = rotor.floating(toy_chain, 90 * MiB, slots=200)
    assert fl.objective == pytest.approx(47.42e-3)


def fig4(n):
    """Paper 004, Figure 4: L = n+2, u_f^1 = k, u_f^2 = 2, sizes 3 except a^0 = 0, a^1 = 1, a^L = 4."""
    k, L = n - 2, n + 2
    uf = [0] * L
    uf[0], uf[1] = k, 2
    wa = [3] * (L + 1)
    wa[0], wa[1], wa[L] = 0, 1, 4
    return Chain.from_stages(uf=uf, ub=[0] * L, wa=wa)


@pytest.mark.parametrize("n", [6, 8])
def test_figure4_counter_example(n):
    c = fig4(n)
    fl = rotor.floating(c, 15, exact=True)
    pe = rotor.persistent(c, 15, exact=True)
    assert fl.objective == 2 * n + 2
    assert pe.objective == 3 * n - 2
    # the floating sequence is not memory persistent: a^1 is dropped by F_none^2 before B^2
    ops = fl.schedule.ops
    assert ("F_none", 2) in ops[ops.index(("F_ck", 2)):]


def _limits(c):
    lo, hi = rotor.min_memory(c), H.store_all(c).peak_memory
    return sorted({int(lo), int(lo) + 2, int((lo + hi) / 2), int(hi)})


CASES = [(1 + seed % 6, seed) for seed in range(24)]


@pytest.mark.parametrize("L, seed", CASES)
def test_dps_against_exhaustive(L, seed):
    c = random_chain(L, seed)
    for M in _limits(c):
        best = exhaustive_remat(c, M)
        assert best is not None
        opt, seq = best
        assert simulate_remat(c, seq, M).makespan == pytest.approx(opt)
        fl = rotor.floating(c, M, exact=True)
        pe = rotor.persistent(c, M, exact=True)
        assert fl.objective == pytest.approx(opt)              # Theorem 4.7 + Lemma 4.4
        assert pe.objective >= opt - 1e-9                      # persistent: a restriction
        for sol in (fl, pe):
            assert sol.predicted == pytest.approx(sol.objective)   # DP value = replayed makespan
            assert sol.peak_memory <= M
        for sol in (rotor.revolve(c, M, exact=True), H.sequential(c, M), H.store_all(c, M), H.recompute_all(c, M)):
            if sol.status != Status.INFEASIBLE:
                assert sol.objective >= opt - 1e-9
                assert simulate_remat(c, sol.schedule, M).makespan == pytest.approx(sol.objective)


def test_below_minimum_memory_states_the_minimum():
    c = random_chain(5, 1)
    need = rotor.min_memory(c)
    sol = rotor.persistent(c, need - 1, exact=True)
    assert sol.status == Status.INFEASIBLE and f"{need:.0f} B" in sol.message
    assert exhaustive_remat(c, need - 1) is None          # really nothing fits
    assert exhaustive_remat(c, need) is not None
    assert rotor.persistent(c, need, exact=True).status == Status.OPTIMAL


def test_slots_never_exceed_limit_and_converge():
    c = random_chain(12, 5, integer=False)
    M = (rotor.min_memory(c) + H.store_all(c).peak_memory) / 2
    prev = None
    exact_like = rotor.persistent(c, M, slots=4000).objective
    for S in (50, 200, 1000):
        sol = rotor.persistent(c, M, slots=S)
        assert sol.peak_memory <= M
        assert sol.objective >= exact_like - 1e-12
        if prev is not None:
            assert sol.objective <= prev + 1e-12 or S % 50 != 0
        prev = sol.objective


def test_store_all_and_enough_memory():
    c = random_chain(6, 11)
    sa = H.store_all(c)
    assert sa.objective == pytest.approx(c.store_all_time())
    sol = rotor.persistent(c, sa.peak_memory, exact=True)
    assert sol.objective == pytest.approx(c.store_all_time())


def test_sequential_segments_match_pytorch_cut():
    assert H.segments(10, 3) == [(1, 3), (4, 6), (7, 10)]
    c = random_chain(10, 2)
    pts = H.sequential_points(c)
    assert pts[0][1] == pytest.approx(c.store_all_time())     # 1 segment = store all
    # with s segments every stage outside the last segment is computed twice
    s, t, _ = pts[2]
    last_first = H.segments(10, 3)[-1][0]
    assert t == pytest.approx(c.store_all_time() + sum(c.uf[1:last_first]))
