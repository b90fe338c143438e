"""Paper 001's offloading with a link of two speeds, ``bandwidth=(to the host, to the device)``
(:func:`memplan.models.offload.link_speeds`): offloads last ``|x_j|/beta_out``, prefetches
``|x_j|/beta_in``. Checked by hand on a two-stage chain, against paper 001's own single speed where the
two are equal, and against a second simulator: every schedule the heuristics plan with two speeds,
converted to the joint model, replays in :func:`memplan.models.remat_offload.simulate_remat_offload`
(written apart from paper 001's validator) with the same makespan."""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memplan
from memplan import offload
from memplan.baselines import offload as heur
from memplan.models.chain import Chain
from memplan.models.offload import (InvalidOffloadSchedule, OffloadSchedule, lower_bound_value, min_feasible_memory,
                                    no_wait_schedule, peak_memory_no_offload, validate_offload)
from memplan.models.remat_offload import simulate_remat_offload
from memplan.models.solution import InputError, Status
from memplan.remat_offload import offload_schedule_as_joint

# lower_bound_value's docstring chain: x = (4, 1, 1, 0), unit times, ex^B_1 = 6; M_peak = 12
TWO = dict(uf=[1, 1], ub=[1, 1], wa=[4, 1, 1], wd=[0, 0, 0], of=[0, 0], ob=[0, 6])


def test_lower_bound_by_hand():
    """Proposition 3 with two speeds: the 3 bytes over M = 9 go out at 1 B/s and back at 0.5 B/s."""
    c = Chain.from_stages(**TWO)
    assert lower_bound_value(c, 9, (1.0, 0.5)) == 3 / 1 + 3 / 0.5
    assert lower_bound_value(c, 9, (1.0, 1.0)) == lower_bound_value(c, 9, 1.0) == 6.0
    assert lower_bound_value(c, 12, (1.0, 0.5)) == 4.0          # nothing to move: the compute alone


def test_validator_times_each_direction_by_hand():
    """x_0 (4 B) offloaded at 0 over 2 B/s ends at 2; its prefetch from 2.5 at 4 B/s lasts 1 s, so B_0
    may start at 3.5 and not before; with one speed of 2 B/s it could not start before 4.5."""
    c = Chain.from_stages(**TWO)

    def sched(tB0, bw):
        # F_0, F_1, then the loss F_2 (no duration) at 2; B_2 and B_1 from 2 (B_1 ends at 3)
        return OffloadSchedule(tF=[0, 1, 2], tB=[tB0, 2, 2], offload={0: 0.0}, prefetch={0: 2.5}, bandwidth=bw)

    r = validate_offload(c, sched(3.5, (2.0, 4.0)))
    assert r.makespan == 4.5 and r.link_busy == 2.0 + 1.0
    with pytest.raises(InvalidOffloadSchedule, match="prefetch of x_0 ends at 3.5"):
        validate_offload(c, sched(3.4, (2.0, 4.0)))
    with pytest.raises(InvalidOffloadSchedule, match="prefetch of x_0 ends at 4.5"):
        validate_offload(c, sched(3.5, 2.0))
    # the prefetch may not start before the offload ends, at the speed to the host
    bad = OffloadSchedule(tF=[0, 1, 2], tB=[5, 4, 4], offload={0: 0.0}, prefetch={0: 1.5}, bandwidth=(2.0, 4.0))
    with pytest.raises(InvalidOffloadSchedule, match="before its offload ends"):
        validate_offload(c, bad)
    # the schedule keeps its pair through JSON, and a pair of equal speeds is the single number
    s = sched(3.5, (2.0, 4.0))
    assert OffloadSchedule.from_json(s.to_json()).bandwidth == (2.0, 4.0)
    assert sched(3.5, (2.0, 2.0)).bandwidth == 2.0


chains = st.builds(
    lambda L, seed: memplan.random_chain(L, seed=seed), st.integers(2, 7), st.integers(0, 10_000))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains, st.floats(0.1, 0.9), st.floats(0.2, 5.0))
def test_equal_speeds_are_paper_001s_single_speed(chain, frac, ratio):
    """A pair (b, b) is the paper's beta: every heuristic's makespan is the same as with b alone."""
    lo, hi = min_feasible_memory(chain), peak_memory_no_offload(chain)
    M = lo + frac * (hi - lo)
    b = float(chain.wa.sum()) / float(chain.uf.sum() + chain.ub.sum()) * ratio
    for name in ("greedy", "dynprog", "vdnn", "tflms", "autoswap"):
        one = getattr(heur, name)(chain, M, b)
        pair = getattr(heur, name)(chain, M, (b, b))
        assert one.status == pair.status, name
        if one.success:
            assert pair.objective == one.objective, name
            assert pair.schedule.bandwidth == b


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains, st.floats(0.1, 0.9), st.floats(0.2, 5.0), st.floats(0.25, 4.0))
def test_two_speed_schedules_replay_in_the_joint_simulator(chain, frac, ratio, skew):
    """Every heuristic's schedule planned with (beta_out, beta_in), converted to the joint model,
    replays in the joint simulator with those speeds at paper 001's makespan, and is at least LB; its
    transfers last what each direction allows."""
    lo, hi = min_feasible_memory(chain), peak_memory_no_offload(chain)
    M = lo + frac * (hi - lo)
    b = float(chain.wa.sum()) / float(chain.uf.sum() + chain.ub.sum()) * ratio
    link = (b, b * skew)
    lb = lower_bound_value(chain, M, link)
    for name in ("greedy", "dynprog", "vdnn", "tflms", "autoswap"):
        sol = getattr(heur, name)(chain, M, link)
        if not sol.success:
            continue
        s = sol.schedule
        own = validate_offload(chain, s, M)
        assert own.makespan >= lb * (1 - 1e-9), name
        rep = simulate_remat_offload(chain, offload_schedule_as_joint(chain, s, link), link, M)
        assert rep.makespan == pytest.approx(own.makespan, rel=1e-9), name
        assert own.link_busy == pytest.approx(sum(chain.wabar[j] if j else chain.wa[0] for j in s.offloaded)
                                              * (1 / link[0] + 1 / link[1]), rel=1e-9), name


def test_faster_prefetches_shorten_a_link_bound_schedule():
    """GPT-2 small's H100 profile at 0.1 of its offloading range is bound by the link: with the
    measured speed to the host kept and prefetches 15% faster, GREEDY's makespan falls, by at most
    what the prefetches alone save, and stays at least the two-speed LB."""
    chain = memplan.load_instance("gpt2-small-b8-s1024-h100").chain
    lo, hi = min_feasible_memory(chain), peak_memory_no_offload(chain)
    M = float(int(lo + 0.1 * (hi - lo)))
    b = 49e9
    one = heur.greedy(chain, M, b)
    two = heur.greedy(chain, M, (b, 1.15 * b))
    assert one.success and two.success
    moved = sum(chain.wabar[j] if j else chain.wa[0] for j in two.schedule.offloaded)
    assert two.objective < one.objective
    assert one.objective - two.objective <= moved * (1 / b - 1 / (1.15 * b)) * (1 + 1e-9)
    assert two.objective >= lower_bound_value(chain, M, (b, 1.15 * b))


def test_front_end_takes_two_speeds():
    chain = memplan.load_instance("paper004_table2").chain
    lo, hi = min_feasible_memory(chain), peak_memory_no_offload(chain)
    M = (lo + hi) / 2
    sol = offload.solve(chain, memory=M, bandwidth="1GB/s:2GB/s", method="greedy")
    assert sol.success and sol.bandwidth == (1e9, 2e9)
    assert "1.0 GB/s to the host, 2.0 GB/s to the device" in offload.report(sol, chain)
    same = offload.solve(chain, memory=M, bandwidth=("1GB/s", "1GB/s"), method="greedy")
    assert same.bandwidth == 1e9 and same.objective == offload.solve(chain, memory=M, bandwidth="1GB/s",
                                                                     method="greedy").objective
    # a comma lists the values of a sweep (memplan sweep --bandwidth 1GB/s,2GB/s): here it is refused, with the colon named
    with pytest.raises(InputError, match="with a colon, e.g. '49GB/s:56GB/s'"):
        offload.solve(chain, memory=M, bandwidth="1GB/s,2GB/s", method="greedy")
    with pytest.raises(InputError, match="one bandwidth or two"):
        offload.solve(chain, memory=M, bandwidth=("1GB/s", "2GB/s", "3GB/s"), method="greedy")
    with pytest.raises(InputError, match="bandwidth"):
        offload.solve(chain, memory=M, bandwidth="1GB/s:0GB/s", method="greedy")


@pytest.mark.parametrize("L, seed, frac", [pytest.param(4, 0, 0.4, marks=pytest.mark.long), pytest.param(4, 1, 0.4, marks=pytest.mark.long), (3, 2, 0.4), (3, 9, 0.7), (3, 6, 0.1), (3, 21, 0.1)])
def test_milp_with_two_speeds_is_the_exhaustive_optimum_or_better(L, seed, frac):
    """The MILP with an offload lasting |x_j|/beta_out and a prefetch |x_j|/beta_in: on tiny chains it
    proves an optimum that is at most the best schedule of every offloaded set and pair of transfer
    orders (paper 001's exhaustive search, no-wait schedules: points of the MILP), at least LB, never
    worse than GREEDY or DYNPROG, and its schedule replays in both simulators with the two speeds.
    With the link-work cut (V1) counting both transfers of a value at twice the offload's time, the
    MILP ends 10% above the exhaustive optimum on random_chain(3, 6) at 0.1 with prefetches four times
    faster: the cut must count each direction's time."""
    from memplan.formulations.offload_milp import solve_offload_milp

    c = memplan.random_chain(L, seed=seed)
    lo, hi = min_feasible_memory(c), peak_memory_no_offload(c)
    M = lo + frac * (hi - lo)
    b = float(c.wa.sum()) / float(c.uf.sum() + c.ub.sum())
    for link in ((b, 4 * b), (3 * b, b)):
        ex = heur.exhaustive(c, M, link)
        sol = offload.solve(c, memory=M, bandwidth=link, method="milp", time_limit=30, threads=1)
        assert ex.success and sol.status == Status.OPTIMAL
        assert sol.objective <= ex.objective * (1 + 1e-9)
        assert sol.objective >= lower_bound_value(c, M, link) * (1 - 1e-9)
        for h in (heur.greedy, heur.dynprog):
            other = h(c, M, link)
            assert not other.success or sol.objective <= other.objective * (1 + 1e-9)
        own = validate_offload(c, sol.schedule, M)
        assert own.makespan == pytest.approx(sol.objective, rel=1e-9)
        rep = simulate_remat_offload(c, offload_schedule_as_joint(c, sol.schedule, link), link, M)
        assert rep.makespan == pytest.approx(own.makespan, rel=1e-9)
        # the reference (Pyomo) model has the same optimum
        ref = solve_offload_milp(c, M, link, threads=1, time_limit=30, formulation="reference",
                                 options={"mip_feasibility_tolerance": 1e-9, "primal_feasibility_tolerance": 1e-9})
        assert ref.status == Status.OPTIMAL and ref.objective == pytest.approx(sol.objective, rel=1e-6)


def test_the_report_and_the_joint_dp_say_what_two_speeds_change(capsys):
    """GREEDY's report does not call its fractional value Theorem 2's optimum with two speeds (the
    theorem is proven for one); the joint DP (paper 000) takes one speed and says so for a pair, on
    the command line too (exit status 2, one line)."""
    from memplan import remat_offload
    from memplan.experiments.cli import main

    chain = memplan.load_instance("paper004_table2").chain
    two = offload.solve(chain, memory="80MiB", bandwidth="1GB/s:2GB/s", method="greedy")
    one = offload.solve(chain, memory="80MiB", bandwidth="1GB/s", method="greedy")
    assert "proves it a bound for one link speed only" in offload.report(two, chain)
    assert "Theorem 2: optimum when activations may be split" in offload.report(one, chain)
    for bw in ("1GB/s:2GB/s", (1e9, 2e9)):
        with pytest.raises(InputError, match="two link speeds; the joint DP takes one"):
            remat_offload.solve(chain, memory="80MiB", bandwidth=bw)
    assert main(["solve", "instances/paper004_table2.json", "--problem", "remat-offload", "--memory", "80MiB",
                 "--bandwidth", "1GB/s:2GB/s"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the joint DP takes one" in err[0]
