"""memplan.offload: the front end of the offloading problem (paper 001) -- input checks, outcomes, the
MIP start, the whole-call time limit, the final replay, report and Gantt chart."""
import math
import re
import time

import pytest

import memplan
from memplan import offload
from memplan.baselines import offload as B
from memplan.models.chain import Chain, random_chain
from memplan.models.offload import (lower_bound_value, min_feasible_memory, peak_memory_no_offload,
                                    validate_offload)
from memplan.models.solution import InputError, Status

MiB = 2**20


def hand_chain():
    """x = (4, 1, 1, 0), ex^B_1 = 6, unit times, y = 0: M_peak = 12 (during B_1), minimum feasible 8
    (B_1 holds x_1, x_2 and ex^B_1). At M = 9 and 1 B/s, x_0 must go out and back whole: 4 + 1 + 4 + 1
    = 10 (the optimum, see tests/test_offload.py); Proposition 3 gives max(4, 2 * 3 / 1) = 6."""
    return Chain.from_stages(uf=[1, 1], ub=[1, 1], wa=[4, 1, 1], wd=[0, 0, 0], of=[0, 0], ob=[0, 6])


def random_case(L, seed, frac):
    c = random_chain(L, seed)
    mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
    return c, mf + frac * (mp - mf)


def best_heuristic(c, M, beta):
    sols = [B.greedy(c, M, beta), B.dynprog(c, M, beta), B.vdnn(c, M, beta),
            B.tflms(c, M, beta), B.autoswap(c, M, beta)]
    return min(s.objective for s in sols if s.success)


# ------------------------------------------------------------------------------------------ methods
@pytest.mark.parametrize("method", ["greedy", "dynprog", "milp"])
def test_hand_chain_optimum(method):
    c = hand_chain()
    sol = offload.solve(c, memory=9, bandwidth=1.0, method=method, threads=1, time_limit=20)
    assert sol.success and sol.objective == pytest.approx(10.0)
    assert sol.schedule.offloaded == [0]
    assert sol.peak_memory <= 9 and validate_offload(c, sol.schedule, 9).makespan == sol.objective
    assert sol.memory_limit == 9 and sol.bandwidth == 1.0 and sol.problem == "offload"
    assert sol.bound is not None and 6.0 - 1e-9 <= sol.bound <= 10.0 + 1e-9
    assert sol.times["total"] > 0


def test_milp_proves_the_hand_optimum():
    sol = offload.solve(hand_chain(), memory=9, bandwidth=1.0, method="milp", threads=1)
    assert sol.status == Status.OPTIMAL and sol.bound == pytest.approx(10.0, rel=1e-6)
    assert set(sol.details["heuristics"]) == set(offload.HEURISTICS)
    assert sol.details["heuristics"]["greedy"] == pytest.approx(10.0)
    assert sol.details["start_method"] in offload.HEURISTICS


# small chains and limits where vDNN, TFLMS and AutoSwap all find a schedule (L, seed, fraction of the
# way from the minimum feasible memory to M_peak); their optimum is the exhaustive search's
PEER_CASES = [(3, 1, 0.6), (3, 2, 0.3), (3, 3, 0.3), (3, 4, 0.3)]


@pytest.mark.parametrize("method", ["vdnn", "tflms", "autoswap"])
def test_peers_never_beat_the_optimum(method):
    """On the hand chain (optimum 10, by hand) vDNN and AutoSwap find a valid schedule, no faster;
    TFLMS finds none there (it never delays a computation for memory, and at 9 B the optimum waits
    for x_0's transfers: 4 + 1 + 4 + 1), so for all three the comparison is also made on small random chains against the
    exhaustive search over every offloaded set and transfer orders (equal to the MILP,
    tests/test_offload.py), where each of them does find a schedule."""
    c = hand_chain()
    sol = offload.solve(c, memory=9, bandwidth=1.0, method=method)
    if method == "tflms":
        assert sol.status == Status.NO_SOLUTION and "never delays a computation" in sol.message
    else:
        assert sol.success and validate_offload(c, sol.schedule, 9).makespan == sol.objective >= 10.0 - 1e-9
    for L, seed, frac in PEER_CASES:
        c, M = random_case(L, seed, frac)
        opt = B.exhaustive(c, M, 1.0).objective
        sol = offload.solve(c, memory=M, bandwidth=1.0, method=method)
        assert sol.success, (L, seed, frac, sol.message)
        assert validate_offload(c, sol.schedule, M).makespan == sol.objective >= opt - 1e-9


def test_lower_bound_method():
    sol = offload.solve(hand_chain(), memory=9, bandwidth=1.0, method="lb")
    assert sol.schedule is None and sol.objective is None and sol.bound == 6.0
    assert sol.details["to_offload"] == 3.0


def test_nothing_to_offload_needs_no_bandwidth():
    c = hand_chain()
    sol = offload.solve(c, memory=12, method="dynprog")       # M_peak = 12 fits
    assert sol.status == Status.OPTIMAL and sol.objective == 4.0 and sol.schedule.offloaded == []
    assert sol.peak_memory == 12.0 and "nothing to offload" in sol.message and sol.bandwidth is None


def test_default_method_and_slots():
    chain, _ = memplan.load_instance("paper004_table2")
    sol = offload.solve(chain, memory="80MiB", bandwidth="1GB/s")
    assert sol.method == "dynprog" == offload.DEFAULT_METHOD
    assert f"grid {80 * MiB / 500:.4g} B (M/500)" in sol.message    # the command line's grid until now
    sol50 = offload.solve(chain, memory="80MiB", bandwidth="1GB/s", slots=50)
    assert f"grid {80 * MiB / 50:.4g} B (M/50)" in sol50.message
    exact = offload.solve(chain, memory="80MiB", bandwidth="1GB/s", exact=True)
    assert "exact values" in exact.message


def test_memplan_solve_dispatches_here():
    sol = memplan.solve("paper004_table2", "offload", "dynprog", memory="80MiB", bandwidth="1GB/s")
    assert sol.problem == "offload" and sol.memory_limit == 80 * MiB and sol.bandwidth == 1e9
    # three activations: 7.63 + 9.54 + 10.68 MiB >= M_peak - M = 106.99 - 80 MiB (Proposition 2)
    assert sol.schedule.offloaded == [0, 1, 2] and sol.peak_memory <= 80 * MiB
    with pytest.raises(InputError, match="bandwidth"):      # the shipped instance's platform has none
        memplan.solve("paper004_table2", "offload", memory="80MiB")


# ------------------------------------------------------------------------------------------ outcomes
@pytest.mark.parametrize("method", offload.METHODS)
def test_below_minimum_memory_is_an_infeasible_solution(method):
    sol = offload.solve(hand_chain(), memory=7.5, bandwidth=1.0, method=method)
    assert sol.status == Status.INFEASIBLE and not sol.success and sol.schedule is None
    assert sol.details["min_memory"] == 8.0
    assert "minimum feasible memory" in sol.message and "(8 B)" in sol.message


@pytest.mark.parametrize("kwargs, name", [
    ({"bandwidth": "0GB/s"}, "bandwidth"),
    ({"bandwidth": -1}, "bandwidth"),
    ({"bandwidth": "fast"}, "bandwidth"),
    ({"bandwidth": None}, "bandwidth"),                    # offloading is needed (9 < M_peak = 12)
    ({"memory": None}, "memory"),
    ({"memory": "lots"}, "memory"),
    ({"memory": 0}, "memory"),
    ({"method": "nope"}, "method 'nope'"),
    ({"slots": 0}, "slots"),
    ({"slots": 2.5}, "slots"),
    ({"threads": 0}, "threads"),
    ({"gap": -1e-3}, "gap"),
    ({"time_limit": 0}, "time_limit"),
    ({"exact": "no"}, "exact"),                            # bool('no') is True: it had meant exact values
    ({"exact": 2}, "exact"),
])
def test_input_errors_name_the_input(kwargs, name):
    args = {"memory": 9, "bandwidth": 1.0, **kwargs}
    with pytest.raises(InputError, match=name) as e:
        offload.solve(hand_chain(), **args)
    assert str(e.value).startswith("offload: ")


def test_unknown_method_lists_the_choices():
    with pytest.raises(InputError, match=r"did you mean 'dynprog'\?.*lb, greedy, dynprog, vdnn, tflms, autoswap, milp"):
        offload.solve(hand_chain(), memory=9, bandwidth=1.0, method="dynprg")


def test_chain_must_be_a_chain():
    with pytest.raises(InputError, match="chain must be a Chain"):
        offload.solve("paper004_table2", memory=9, bandwidth=1.0)


def test_missing_memory_says_the_minimum():
    with pytest.raises(InputError, match="memory is required.*at least 8 B"):
        offload.solve(hand_chain(), memory=None, bandwidth=1.0)


# ---------------------------------------------------------------------------------- time limit
def test_milp_time_limit_bounds_the_whole_call():
    """20 stages at a tight limit: HiGHS cannot close the gap in 3 s, and the call (heuristics, model
    build and compilation, search, replay) still returns within the limit, with a schedule at least
    as good as the best heuristic's, replayed by the validator."""
    c, M = random_case(20, 2, 0.1)
    best = best_heuristic(c, M, 1.0)
    lines = []
    t0 = time.perf_counter()
    sol = offload.solve(c, memory=M, bandwidth=1.0, method="milp", time_limit=3, threads=1, progress=lines.append)
    wall = time.perf_counter() - t0
    assert wall < 4.5 and sol.times["total"] < 4.5
    assert sol.status == Status.TIME_LIMIT and sol.success
    assert sol.objective <= best * (1 + 1e-9)
    rep = validate_offload(c, sol.schedule, M, tol=1e-6)
    assert rep.makespan == sol.objective and rep.peak_memory == sol.peak_memory <= M * (1 + 1e-6)
    assert lower_bound_value(c, M, 1.0) <= sol.bound <= sol.objective * (1 + 1e-9)
    assert sol.details["time_limit"] == 3
    assert any("greedy: makespan" in l for l in lines) and any("MILP: time_limit" in l for l in lines)


def test_time_limit_reached_while_building_keeps_the_start(capfd, monkeypatch):
    """Building the model takes longer than the whole limit (made so by a build that first waits past
    the budget: the array builder is too fast on 40 stages to be cut reliably); the build stops at its
    next budget check, quietly, and the best schedule known is returned (the best heuristic's, or the
    set enumeration's, which runs before the build)."""
    from memplan.formulations import offload_milp

    real = offload_milp.build_offload_arrays
    real_fractional = offload_milp.fractional_bound

    def slow_build(*a, **kw):
        from memplan.models import budget

        while not budget.current().expired():
            time.sleep(0.01)
        return real(*a, **kw)

    monkeypatch.setattr(offload_milp, "build_offload_arrays", slow_build)
    c, M = random_case(40, 0, 0.1)
    best = best_heuristic(c, M, 1.0)
    t0 = time.perf_counter()
    sol = offload.solve(c, memory=M, bandwidth=1.0, method="milp", time_limit=1.5, threads=1)
    assert time.perf_counter() - t0 < 2.5
    assert sol.status == Status.TIME_LIMIT and sol.details["interrupted"] == "build"
    # the best heuristic's schedule, or the set enumeration's (run before the build) when it is better
    if sol.objective == best:
        assert "MIP start" in sol.message
    else:
        assert sol.objective < best and "set enumeration" in sol.message and sol.details["cover"]["sets"] > 0
    # the bound known without the MIP: Proposition 3's or the fractional relaxation's, the larger
    assert sol.bound == max(lower_bound_value(c, M, 1.0), real_fractional(c, M, 1.0) or 0.0)
    validate_offload(c, sol.schedule, M)
    err = capfd.readouterr().err
    assert "Rule failed" not in err and "ERROR" not in err


def test_a_build_that_cannot_end_in_time_is_not_started(monkeypatch):
    """The model has O(L^2) rows of O(L) terms: on 1000 stages it takes about 20 minutes to build,
    and a 5 s call took 35 s (a constraint family is not interrupted in the middle). A build whose
    least estimated time exceeds what is left is not started: the best schedule known answers at
    once the set enumeration (which then may use the whole limit) is done (status time_limit) with a
    message that says how long the build takes and what to do."""
    from memplan.formulations import offload_milp

    assert offload_milp.build_seconds(1000) >= 1000       # 1.2e-6 s * L^3 (measured: 106 s at L = 400)
    monkeypatch.setattr(offload_milp, "BUILD_SECONDS_PER_L3", 1.0)        # 40 stages now 'take' 64000 s
    c, M = random_case(40, 0, 0.1)
    best = best_heuristic(c, M, 1.0)
    t0 = time.monotonic()
    sol = offload.solve(c, memory=M, bandwidth=1.0, method="milp", time_limit=4, threads=1)
    assert time.monotonic() - t0 < 4 + 0.5
    assert sol.status == Status.TIME_LIMIT and sol.details["interrupted"] == "not built"
    assert "build" not in sol.times and "solve" not in sol.times
    assert re.search(r"building the MILP on L = 40 stages takes at least 6\.4e\+04 s here, more than the [0-9.]+ s "
                     r"left: give a time limit of at least 128000 s, or use method 'dynprog'", sol.message), sol.message
    assert sol.objective <= best * (1 + 1e-9)
    assert validate_offload(c, sol.schedule, M).makespan == sol.objective

@pytest.mark.parametrize("name, L, seed, frac", [("dynprog", 20, 2, 0.3), ("vdnn", 10, 4, 0.99),
                                                  ("tflms", 20, 5, 0.3), ("autoswap", 20, 2, 0.3)])
def test_heuristic_searches_stop_at_their_share(name, L, seed, frac):
    """With no time, each search tries its first candidate only, and what it returns is valid and no
    better than the full search. vDNN's first candidate is its first threshold (one or two sets),
    which frees enough memory only near M_peak: at 99% of it on this chain, its schedule (178) is
    worse than the full scan's (175). TFLMS stops at its first valid configuration anyway, so the
    limit shows only where the first ones do not fit (seed 5): then the stopped search has nothing
    while the full one has a schedule."""
    c, M = random_case(L, seed, frac)
    full = getattr(B, name)(c, M, 1.0)
    cut = getattr(B, name)(c, M, 1.0, time_limit=0.0)
    assert "time limit" not in full.message and "time limit" in cut.message
    assert full.success
    if name == "tflms":
        assert not cut.success
    else:
        assert cut.success
        assert validate_offload(c, cut.schedule, M).makespan == cut.objective >= full.objective * (1 - 1e-9)
    if name == "vdnn":
        tried = [int(re.search(r"best of (\d+) ", s.message).group(1)) for s in (cut, full)]
        assert tried[0] <= 2 < tried[1] and cut.objective > full.objective, tried


def test_heuristic_gets_the_remaining_budget():
    """A heuristic run alone is given what is left of the call's limit (here: all of it)."""
    c, M = random_case(20, 2, 0.3)
    sol = offload.solve(c, memory=M, bandwidth=1.0, method="autoswap", time_limit=30)
    assert "time limit" not in sol.message and sol.details["time_limit"] == 30


# ------------------------------------------------------------------------------------------ report
def test_report_numbers():
    chain, _ = memplan.load_instance("paper004_table2")
    sol = offload.solve(chain, memory="80MiB", bandwidth="1GB/s", method="dynprog")
    text = offload.report(sol, chain)
    lb = lower_bound_value(chain, 80 * MiB, 1e9)
    assert text.splitlines()[0] == "paper004-table2: L = 6 (+ loss), problem offload (paper 001), method dynprog"
    assert "bandwidth 1.0 GB/s" in text and "memory limit 80.0 MiB" in text
    assert f"(ratio to LB {sol.objective / lb:.4f})" in text
    assert "link order   O0 O1 O2 P2 P1 P0" in text and "timeline" in text


def test_report_of_a_bound_and_of_an_infeasible_limit():
    c = hand_chain()
    text = offload.report(offload.solve(c, memory=9, bandwidth=1.0, method="lb"), c)
    assert "to offload   at least 3 B (Proposition 2)" in text and "makespan" not in text
    text = offload.report(offload.solve(c, memory=7, bandwidth=1.0), c)
    assert "status       infeasible: memory limit 7 B is below the minimum feasible memory 8 B" in text


def test_gantt_needs_a_schedule(tmp_path):
    c = hand_chain()
    with pytest.raises(InputError, match="schedule"):
        offload.gantt(offload.solve(c, memory=9, bandwidth=1.0, method="lb"), c, tmp_path / "g.png")
    offload.gantt(offload.solve(c, memory=9, bandwidth=1.0, method="greedy"), c, tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 5_000


def test_a_schedule_replaying_over_the_limit_is_never_reported():
    """DYNPROG and vDNN offload a^L next to GPT-2 small's 4-byte loss at the least feasible memory: their
    schedules replay 4 bytes over the limit, within the replay's tolerance. A reported peak must not
    exceed the limit: the fastest heuristic schedule that fits is returned instead (greedy's here,
    which reaches the same makespan at the limit exactly), named in details, status FEASIBLE."""
    inst = memplan.load_instance("gpt2-small-b4-s256-cpu").chain
    mem = min_feasible_memory(inst)
    greedy = offload.solve(inst, memory=mem, bandwidth=12e9, method="greedy", time_limit=10)
    assert greedy.success and greedy.peak_memory <= mem
    for method in ("dynprog", "vdnn", "milp"):
        sol = offload.solve(inst, memory=mem, bandwidth=12e9, method=method, time_limit=10)
        assert sol.success and sol.peak_memory <= mem, (method, sol.peak_memory - mem)
        assert sol.objective <= greedy.objective * (1 + 1e-12)
        if sol.details.get("candidate"):
            assert sol.status == Status.FEASIBLE and "over the limit" in sol.message


def test_milp_runs_dynprog_as_the_dynprog_method_does(monkeypatch):
    """milp's MIP start: DYNPROG first, with the whole time limit, as method="dynprog" runs it (with a
    share of it, a loaded CPU cut it short and milp returned a start 0.03% slower than DYNPROG alone);
    the other heuristics after it with their share."""
    calls = []
    real = offload._heuristic

    def spy(chain, memory, bandwidth, name, *, time_limit, slots, exact):
        calls.append((name, time_limit))
        return real(chain, memory, bandwidth, name, time_limit=time_limit, slots=slots, exact=exact)

    monkeypatch.setattr(offload, "_heuristic", spy)
    c = random_chain(12, 3)
    lo, hi = min_feasible_memory(c), peak_memory_no_offload(c)
    offload.solve(c, memory=(lo + hi) / 2, bandwidth=1.0, method="milp", time_limit=20)
    assert calls[0][0] == "dynprog" and calls[0][1] > 19.0
    assert [n for n, _ in calls[1:5]] == [n for n in offload.HEURISTICS if n != "dynprog"]
    assert all(t < 3.0 for _, t in calls[1:5])
