"""The joint re-materialization + offloading simulator and DP (paper 000)."""
import math

import pytest

from memplan.baselines.remat_offload_dp import solve_remat_offload_dp
from memplan.baselines.remat_heuristics import min_memory, store_all
from memplan.baselines.remat_rotor import persistent
from memplan.models.chain import random_chain
from memplan.models.remat import simulate_remat
from memplan.models.remat_offload import (InvalidRematOffloadSchedule, RematOffloadSchedule, Transfer,
                                         simulate_remat_offload)
from memplan.models.solution import Status


def _memories(chain, fracs=(0.0, 0.3, 0.6, 1.0)):
    lo, hi = min_memory(chain), store_all(chain).peak_memory
    return [math.ceil(lo + f * (hi - lo)) for f in fracs]


# ----------------------------------------------------------------------------- simulator
@pytest.mark.parametrize("seed", range(4))
def test_simulator_without_transfers_agrees_with_remat(seed):
    c = random_chain(6, seed)
    for M in _memories(c):
        sol = persistent(c, M, exact=True)
        if sol.schedule is None:
            continue
        a = simulate_remat(c, sol.schedule)
        b = simulate_remat_offload(c, RematOffloadSchedule(sol.schedule.ops), None, M)
        assert b.makespan == pytest.approx(a.makespan, rel=1e-12)
        assert b.peak_memory == pytest.approx(a.peak_memory, rel=1e-12)
        assert b.recompute_time == pytest.approx(a.recompute_time)
        assert b.idle_time == 0.0


def _two_stage():
    from memplan.models.chain import Chain
    # a^0 = 4, a^1 = abar^1 = 2, a^2 = abar^2 = 2, no overheads, uf = 1, ub = 2
    return Chain.from_stages(uf=[1, 1], ub=[2, 2], wa=[4, 2, 2])


def test_simulator_offload_frees_memory_and_prefetch_waits():
    c = _two_stage()
    ops = [("F_all", 1), ("F_all", 2), ("F_all", 3), ("B", 3), ("B", 2), ("B", 1)]
    plain = simulate_remat_offload(c, RematOffloadSchedule(ops), None)
    # B^2 (t = 2..4) holds a^0, abar^1, abar^2, delta^2 and makes delta^1
    assert plain.peak_memory == 4 + 2 + 2 + 2 + 2 and plain.makespan == 6
    # offload a^0 after F^1 (beta = 4 B/s: 1 s, t = 1..2), prefetch it during B^2 (t = 2..3)
    sched = RematOffloadSchedule(ops, transfers=[Transfer("offload", 0, 4.0, 1.0), Transfer("prefetch", 0, 4.0, 2.0)])
    rep = simulate_remat_offload(c, sched, 4.0)
    assert rep.transfer_start == [1.0, 2.0] and rep.transfer_end == [2.0, 3.0]
    assert rep.makespan == plain.makespan and rep.idle_time == 0.0
    assert rep.peak_memory == plain.peak_memory            # the prefetch reserves a^0 while B^2 runs
    # with the prefetch after B^2, B^1 (t = 4) waits for it until 5 and F^2 .. B^2 run without a^0
    late = RematOffloadSchedule(ops, transfers=[Transfer("offload", 0, 4.0, 1.0), Transfer("prefetch", 0, 4.0, 4.0)])
    rep = simulate_remat_offload(c, late, 4.0)
    assert rep.idle_data == pytest.approx(1.0) and rep.idle_time == pytest.approx(1.0)
    assert rep.makespan == pytest.approx(plain.makespan + 1.0)
    # the limit: without the prefetch reservation during B^2 the peak would be lower
    with pytest.raises(InvalidRematOffloadSchedule, match="exceeds the limit"):
        simulate_remat_offload(c, sched, 4.0, memory_limit=plain.peak_memory - 1)


def test_simulator_rejects_invalid_transfers():
    c = _two_stage()
    ops = [("F_all", 1), ("F_all", 2), ("F_all", 3), ("B", 3), ("B", 2), ("B", 1)]
    with pytest.raises(InvalidRematOffloadSchedule, match="never entirely prefetched"):
        simulate_remat_offload(c, RematOffloadSchedule(ops, transfers=[Transfer("offload", 0, 4.0, 1.0)]), 4.0)
    with pytest.raises(InvalidRematOffloadSchedule, match="not stored"):
        simulate_remat_offload(c, RematOffloadSchedule(ops, transfers=[Transfer("offload", 2, 2.0, 0.0),
                                                        Transfer("prefetch", 2, 2.0, 3.0)]), 4.0)
    with pytest.raises(InvalidRematOffloadSchedule, match="on the host"):
        simulate_remat_offload(c, RematOffloadSchedule(ops, transfers=[Transfer("prefetch", 0, 4.0, 0.0)]), 4.0)
    # F_none^2 discards a^1 while it is being offloaded
    ops2 = [("F_ck", 1), ("F_none", 2), ("F_all", 3), ("B", 3), ("F_all", 1), ("F_all", 2), ("B", 2), ("B", 1)]
    simulate_remat_offload(c, RematOffloadSchedule(ops2), None)
    with pytest.raises(InvalidRematOffloadSchedule, match="discards value 1"):
        simulate_remat_offload(c, RematOffloadSchedule(ops2, transfers=[Transfer("offload", 1, 2.0, 1.0)]), 1.0)


# ----------------------------------------------------------------------------- the DP
@pytest.mark.parametrize("seed", range(6))
def test_beta_zero_equals_persistent_rotor(seed):
    c = random_chain(7, seed)
    for M in _memories(c, (0.0, 0.2, 0.5, 0.8)):
        r = persistent(c, M, exact=True)
        j = solve_remat_offload_dp(c, M, 0.0, exact=True)
        assert (r.objective is None) == (j.objective is None)
        if r.objective is not None:
            assert j.objective == pytest.approx(r.objective, rel=1e-12)
            assert j.status == Status.OPTIMAL
    # with the same slot rounding on a float chain
    c = random_chain(12, seed, integer=False)
    for M in _memories(c, (0.1, 0.5)):
        r = persistent(c, M, slots=40)
        j = solve_remat_offload_dp(c, M, 0.0, slots=40)
        assert j.objective == pytest.approx(r.objective, rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_enough_memory_equals_store_all(seed):
    c = random_chain(8, seed)
    sa = store_all(c)
    for beta in (0.0, 1.0, 5.0):
        j = solve_remat_offload_dp(c, math.ceil(sa.peak_memory), beta, exact=True)
        assert j.objective == pytest.approx(sa.objective)
        assert j.details["recompute_time"] == 0.0


@pytest.mark.parametrize("seed", range(8))
def test_dp_schedules_replay_to_prediction_under_limit(seed):
    c = random_chain(6, seed)
    for M in _memories(c, (0.0, 0.15, 0.4, 0.7)):
        r = persistent(c, M, exact=True)
        for beta in (0.5, 1.0, 3.0):
            j = solve_remat_offload_dp(c, M, beta, exact=True)
            if j.objective is None:
                assert r.objective is None
                continue
            assert j.objective == pytest.approx(j.predicted, rel=1e-9)
            assert j.peak_memory <= M * (1 + 1e-9)
            # offloading never hurts: v = 0 everywhere is the rotor schedule
            if r.objective is not None:
                assert j.objective <= r.objective + 1e-9
            # the simulator agrees when replaying the JSON form
            again = simulate_remat_offload(c, RematOffloadSchedule.from_json(j.schedule.to_json()), beta, M)
            assert again.makespan == pytest.approx(j.objective, rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_dp_float_chain_with_slots(seed):
    c = random_chain(15, seed, integer=False)
    M = _memories(c, (0.15,))[0]
    base = persistent(c, M, slots=30)
    for beta in (2e9, 1.2e10):
        j = solve_remat_offload_dp(c, M, beta, slots=30)
        assert j.objective == pytest.approx(j.predicted, rel=1e-9)
        assert j.peak_memory <= M * (1 + 1e-9)
        assert j.objective <= base.objective * (1 + 1e-12)


def test_offloading_helps_when_memory_is_tight():
    """Below rotor's minimum (rounded) memory, offloading can still find a schedule or a faster one."""
    c = random_chain(6, 4)
    M = _memories(c, (0.1,))[0]
    r = persistent(c, M, exact=True)
    j = solve_remat_offload_dp(c, M, 4.0, exact=True)
    assert j.objective < r.objective
    assert j.details["offloaded"]
