"""memplan.remat as a library: input errors name the input, INFEASIBLE is a result, the whole-call
time limit holds, and memplan.solve dispatches to it (issue 17)."""
from __future__ import annotations

import inspect
import time

import pytest

import memplan
from memplan import remat
from memplan.baselines.remat_exhaustive import exhaustive_remat
from memplan.baselines.remat_rotor import persistent
from memplan.models.chain import random_chain
from memplan.models.remat import simulate_remat
from memplan.models.solution import InputError, Solution, Status

from conftest import MiB

#: paper 004's toy chain: the minimum feasible memory (peak of recompute-all), as printed before issue 17
TOY_MIN = 86109061


@pytest.fixture(scope="module")
def toy():
    return memplan.load_instance("paper004_table2")[0]


def test_signature_follows_the_front_end_contract():
    params = list(inspect.signature(remat.solve).parameters.values())
    assert [p.name for p in params] == ["chain", "memory", "method", "time_limit", "gap", "threads", "slots",
                                        "exact", "solver_log", "progress"]
    assert all(p.kind == p.KEYWORD_ONLY for p in params[1:])
    assert params[6].default is None            # slots: the problem's choice, resolved inside
    assert remat.PROBLEM == "remat" and remat.DEFAULT_METHOD == "rotor"
    assert remat.METHODS == ["rotor", "rotor-floating", "sequential", "revolve", "store-all", "recompute-all",
                             "remat-milp", "checkmate", "checkmate-lp"]
    assert not hasattr(remat, "gantt")          # no timeline: the CLI refuses --gantt


def test_memplan_solve_gives_the_paper_value():
    sol = memplan.solve(memplan.load_instance("paper004_table2"), "remat", method="rotor", memory="90MiB")
    assert isinstance(sol, Solution) and sol.status == Status.OPTIMAL
    assert sol.objective == pytest.approx(0.04742)           # paper 004, section 3.2: 47.42 ms
    assert sol.peak_memory == pytest.approx(86.75 * MiB) and sol.peak_memory <= 90 * MiB
    assert type(sol.objective) is float and type(sol.peak_memory) is float
    assert sol.memory_limit == 90 * MiB and sol.times["total"] >= sol.times["dp"]


@pytest.mark.parametrize("kwargs, names, hint", [
    (dict(memory=None), "memory", "required"),
    (dict(memory="-5MiB"), "memory", "negative"),
    (dict(memory="90 parsecs"), "memory", "not understood"),
    (dict(memory=0), "memory", "positive"),
    (dict(memory="90MiB", method="rotr"), "method", "did you mean 'rotor'"),
    (dict(memory="90MiB", method="remat_milp"), "method", "did you mean 'remat-milp'"),
    (dict(memory="90MiB", slots=0), "slots", ">= 1"),
    (dict(memory="90MiB", slots=2.5), "slots", "whole number"),
    (dict(memory="90MiB", threads=0), "threads", ">= 1"),
    (dict(memory="90MiB", gap=-1e-3), "gap", "out of range"),
    (dict(memory="90MiB", exact=True), "exact", "integer sizes"),
    (dict(memory="90MiB", exact="yes"), "exact", "True or False"),
    (dict(memory="90MiB", time_limit=-1), "time_limit", "positive"),
    (dict(memory="90MiB", method="rotor-floating", slots=10**7), "slots", "use slots <="),
])
def test_input_errors_name_the_input(toy, kwargs, names, hint):
    with pytest.raises(InputError) as e:
        remat.solve(toy, **kwargs)
    msg = str(e.value)
    assert msg.startswith("remat: ") and names in msg and hint in msg
    assert "\n" not in msg


def test_memory_missing_through_memplan_solve(toy):
    with pytest.raises(InputError, match="memory is required"):
        memplan.solve(toy, "remat", method="rotor")            # a bare Chain has no platform memory


def test_not_a_chain():
    with pytest.raises(InputError, match="chain must be a Chain"):
        remat.solve("paper004_table2", memory="90MiB")


def test_exact_needs_integer_bytes_and_a_small_limit():
    c = random_chain(4, 0)
    with pytest.raises(InputError, match="whole number of bytes"):
        remat.solve(c, memory=100.5, exact=True)
    with pytest.raises(InputError, match="would need 6000000 slots"):
        remat.solve(c, memory=6_000_000, exact=True)
    # exact only concerns the DPs: for store-all it is ignored, as before
    assert remat.solve(c, memory=1e9, exact=True, method="store-all").success


@pytest.mark.parametrize("method", ["rotor", "rotor-floating", "revolve", "sequential", "store-all",
                                    "recompute-all", "remat-milp"])
def test_below_the_minimum_is_an_infeasible_solution(toy, method):
    sol = remat.solve(toy, memory="50MiB", method=method, threads=1, time_limit=20)
    assert sol.status == Status.INFEASIBLE and sol.schedule is None and not sol.success
    assert sol.details["min_memory"] == pytest.approx(TOY_MIN, abs=1)
    assert "82.1 MiB" in sol.message
    assert sol.memory_limit == 50 * MiB


def test_the_minimum_memory_is_the_minimum(toy):
    """What INFEASIBLE quotes is right: at the minimum a sequence exists, just below none does."""
    need = remat.memory_range(toy)[0]
    assert need == pytest.approx(TOY_MIN, abs=1)
    assert exhaustive_remat(toy, need) is not None
    assert exhaustive_remat(toy, need * (1 - 1e-6)) is None
    assert remat.solve(toy, memory=need, method="recompute-all").peak_memory == pytest.approx(need)


def test_checkmate_infeasible_states_the_minimum_too():
    c = random_chain(3, 1)
    need = remat.memory_range(c)[0]
    sol = remat.solve(c, memory=need / 2, method="checkmate", threads=1, time_limit=20)
    assert sol.status == Status.INFEASIBLE
    assert sol.details["min_memory"] == need and "minimum feasible memory" in sol.message


def test_methods_on_the_toy_chain(toy):
    """Every method at 90 MiB, replayed. Expected makespans by hand from Table 2 (sum of u_b = 25.1 ms):
    revolve runs the forward steps 12.28 + 6.04 + 6.24 + 3.8 + 1.6 ms, recompute-all 12.28 + 12.28 +
    10.85 + 8.75 + 6.24 + 3.8 + 1.6 ms; rotor is paper 004's 47.42 ms."""
    expect_ms = {"rotor": 47.42, "rotor-floating": 47.42, "revolve": 55.06, "recompute-all": 80.90}
    for method, ms in expect_ms.items():
        sol = remat.solve(toy, memory="90MiB", method=method)
        assert sol.objective * 1e3 == pytest.approx(ms, abs=0.005), method
        rep = simulate_remat(toy, sol.schedule, memory_limit=90 * MiB)
        assert rep.makespan == sol.objective and rep.peak_memory == sol.peak_memory
    seq = remat.solve(toy, memory="100MiB", method="sequential")
    assert seq.details["segments"] == 2 and seq.peak_memory / MiB == pytest.approx(91.66, abs=0.01)
    no = remat.solve(toy, memory="90MiB", method="sequential")       # needs 91.7 MiB, but others fit
    assert no.status == Status.NO_SOLUTION and no.schedule is None and "91.7 MiB" in no.message


def test_report_text(toy):
    sol = remat.solve(toy, memory="90MiB", method="revolve")
    text = remat.report(sol, toy)
    lines = text.splitlines()
    assert lines[0] == "paper004-table2: L = 6, problem remat, method revolve, memory limit 90.0 MiB"
    assert lines[2] == "makespan     55.1 ms  (+47.3% vs store-all 37.4 ms)"
    assert lines[3] == "peak memory  86.8 MiB  (store-all 107.0 MiB)"
    assert lines[-2] == "sequence     (23 operations)"



def test_report_refuses_a_chain_the_solution_was_not_solved_on(toy):
    """A report compares the schedule with the given chain's store-all: on another chain it printed
    '47.4 ms (-99.9% vs store-all 65 s)' and a sequence through stages the chain lacks. Every front end's
    report (and gantt) now refuses a chain other than the one solved, one line naming both chains."""
    import dataclasses
    import json

    sol = remat.solve(toy, memory="90MiB")
    other = random_chain(3, seed=0)
    with pytest.raises(InputError, match=r"^remat: report: this Solution was solved on chain 'paper004-table2' "
                                         r"\(L = 6\), not on the one given, 'random-L3-seed0' \(L = 3\)"):
        remat.report(sol, other)
    slower = dataclasses.replace(toy, uf=toy.uf * 2)        # same name and L, other times
    with pytest.raises(InputError, match="whose times or sizes differ"):
        remat.report(sol, slower)
    # the chain solved, or its Instance, or a fresh load of the same file: reported as before
    assert remat.report(sol, memplan.load_instance("paper004_table2")).splitlines()[2] == \
        "makespan     47.4 ms  (+26.9% vs store-all 37.4 ms)"
    # through memplan.solve and on the other problems, and the record is not written to JSON
    inst = memplan.load_instance("paper004_table2")
    for problem, kw in (("offload", dict(memory="90MiB", bandwidth="1GB/s")),
                        ("remat-offload", dict(memory="90MiB", bandwidth="1GB/s")),
                        ("pipeline", dict(memory="1GiB", bandwidth="1GB/s", gpus=2, time_limit=5))):
        s = memplan.solve(inst, problem, **kw)
        assert memplan.problems[problem].report(s, inst.chain).startswith("paper004-table2: L = 6")
        with pytest.raises(InputError, match="solved on chain 'paper004-table2'"):
            memplan.problems[problem].report(s, other)
        assert "_solved_on" not in json.dumps(s.to_dict())


@pytest.mark.parametrize("module, kw, typo, close", [
    ("remat", {}, "memroy", "memory"), ("offload", dict(memory=30), "bandwith", "bandwidth"),
    ("remat_offload", dict(memory=30), "timelimit", "time_limit"), ("pipeline", dict(memory=30), "gpu", "gpus"),
])
def test_a_misspelt_keyword_names_the_closest(module, kw, typo, close):
    """memplan.solve named the closest option of a misspelt one; the problem modules' solve raised Python's
    bare 'got an unexpected keyword argument' (3.11 names no close match)."""
    mod = getattr(memplan, module)
    with pytest.raises(TypeError, match=rf"^memplan.{module}.solve\(\) got an unexpected keyword argument "
                                        rf"'{typo}' \(did you mean '{close}'\?\); it takes memory, "):
        mod.solve(random_chain(4, seed=0), **kw, **{typo: 1})
    # the signature is still the function's own (memplan.solve reads it), the chain may be a keyword
    assert "chain" in inspect.signature(mod.solve).parameters and "memroy" not in inspect.signature(mod.solve).parameters
    assert remat.solve(chain=random_chain(4, seed=0), memory=1000).success

def test_progress_lines(toy):
    lines: list[str] = []
    remat.solve(toy, memory="90MiB", method="remat-milp", threads=1, progress=lines.append)
    text = "\n".join(lines)
    assert "remat-milp: MIP start: the persistent DP (47.4 ms)" in text
    assert "remat: optimal, makespan 47.4 ms" in lines[-1]
    quiet = remat.solve(toy, memory="90MiB", method="rotor")   # no progress: nothing printed, no error
    assert quiet.success


def test_remat_milp_whole_call_time_limit():
    """A remat-milp solve that cannot finish in 2 s returns in about 2 s with its best schedule."""
    c = random_chain(50, 3, integer=False)
    lo, hi = remat.memory_range(c)
    memory = lo + 0.3 * (hi - lo)
    dp = persistent(c, memory)
    t0 = time.perf_counter()
    sol = remat.solve(c, memory=memory, method="remat-milp", time_limit=2, threads=1)
    wall = time.perf_counter() - t0
    # only the Pyomo build (about 1 s on an idle core) cannot be interrupted: the call may overrun the
    # limit by that build, measured in this very call (3x longer while other work loads the cores), and
    # a little more; an unbounded HiGHS run or DP would take far longer. Under load the call may find
    # that the build alone would overrun what is left and not start it (no "build" time, the MIP start
    # returned)
    assert wall < 2 + sol.times.get("build", 0.0) + 1.0, (wall, sol.times)
    assert sol.status == Status.TIME_LIMIT and sol.schedule is not None
    simulate_remat(c, sol.schedule, memory_limit=memory)
    assert sol.objective <= dp.objective * (1 + 1e-9)          # at least as good as its MIP start
    # HiGHS's bound when it got time to prove one, never below store-all's time (each F and B runs once)
    assert c.store_all_time() <= sol.bound <= sol.objective
    assert sol.times["total"] == pytest.approx(wall, abs=0.2) and sol.details["time_limit"] == 2


def test_dps_with_given_slots_keep_the_time_limit(monkeypatch):
    """The DPs with explicit slots keep the call's time limit. rotor-floating (O(S L^5): 1.4 s for its two
    runs at L = 50, 400 slots, 40 s at 1000 slots on ResNet-101): a run its estimate puts beyond
    twice the limit is not started, one that is started stops between two stages at 85% of the
    limit, and either way the persistent DP's schedule, made with what is left, is returned with
    status TIME_LIMIT; a bound run stopped at the limit leaves the plan unproven, without a bound.
    rotor (it cannot stop): not started beyond the limit, its bound skipped beyond what is left.
    The durations are this process's CPU seconds: what the call did, which a loaded machine does not
    stretch (its wall clock had taken 0.8 s for the stopped run's 0.5 s under two CPU hogs)."""
    import memplan.baselines.remat_rotor as rr

    c = random_chain(50, 0, integer=False)
    lo, hi = remat.memory_range(c)
    memory = lo + 0.3 * (hi - lo)
    rr.floating(c, memory, slots=8)                    # load the compiled DP outside the timings
    pers = persistent(c, memory)
    # not started: 4000 slots are about 13 s by the estimate, the limit is 1 s
    t0 = time.process_time()
    sol = remat.solve(c, memory=memory, method="rotor-floating", slots=4000, time_limit=1.0)
    assert time.process_time() - t0 < 1.5
    assert sol.status == Status.TIME_LIMIT and sol.message.startswith(
        "time limit: the floating DP (4000 slots) was not started")
    assert simulate_remat(c, sol.schedule, memory_limit=memory).makespan == pytest.approx(sol.objective)
    assert sol.bound is None and sol.details["candidate"] == "the persistent DP (rotor) with its own slots"
    # the persistent DP cannot stop: with slots its estimate puts beyond the limit it is not started,
    # and its bound run is skipped where the estimate exceeds what is left
    t0 = time.process_time()
    sol = remat.solve(c, memory=memory, method="rotor", slots=100_000, time_limit=1.0)
    assert time.process_time() - t0 < 1.5 and rr.dp_seconds("persistent", c.L, 100_000) > 1.0
    assert sol.status == Status.TIME_LIMIT and sol.message.startswith(
        "time limit: the persistent DP (100000 slots) was not started")
    simulate_remat(c, sol.schedule, memory_limit=memory)
    with monkeypatch.context() as m:
        m.setattr(rr, "dp_seconds", lambda kind, L, slots: 0.999)       # fits once, not twice
        sol = remat.solve(c, memory=memory, method="rotor", slots=200, time_limit=1.0)
    assert sol.status == Status.FEASIBLE and sol.bound is None
    assert "the rounded-down DP (the bound) was not run: about 0.999 s by its estimate" in sol.message
    assert sol.objective == pytest.approx(persistent(c, memory, slots=200).objective)
    # started and stopped: the estimate is made to fit, and 0.05 s is far from the run's 0.7 s
    monkeypatch.setattr(rr, "dp_seconds", lambda kind, L, slots: 0.0)
    t0 = time.process_time()
    sol = remat.solve(c, memory=memory, method="rotor-floating", slots=400, time_limit=0.05)
    assert time.process_time() - t0 < 0.5
    assert sol.status == Status.TIME_LIMIT and "(400 slots) was stopped at stage " in sol.message
    simulate_remat(c, sol.schedule, memory_limit=memory)
    # the bound run stopped: the plan of the first run, FEASIBLE, no bound
    kernel, calls = rr._floating_kernel, []

    def second_stops(*args):
        calls.append(args[-1])
        if len(calls) == 2:
            raise rr.DPStopped(7, c.L + 1)
        return kernel(*args)
    monkeypatch.setattr(rr, "_floating_kernel", second_stops)
    sol = remat.solve(c, memory=memory, method="rotor-floating", slots=50, time_limit=30)
    plan = rr._given(c, memory, "all", "rotor-floating", 50, False, True)        # the same run, no limit
    assert calls[0] is not None and calls[1] is not None        # both runs had a deadline
    assert sol.status == Status.FEASIBLE and sol.bound is None
    assert "the rounded-down DP (the bound) was stopped at the time limit (stopped at stage 7 of 51)" in sol.message
    assert sol.objective == pytest.approx(plan.objective)


def test_remat_milp_out_of_time_before_highs_keeps_the_start():
    """Time runs out while the model is built: no MILP incumbent, the MIP start is returned."""
    c = random_chain(60, 5, integer=False)
    lo, hi = remat.memory_range(c)
    memory = lo + 0.5 * (hi - lo)
    dp = persistent(c, memory, time_limit=2)
    t0 = time.perf_counter()
    sol = remat.solve(c, memory=memory, method="remat-milp", time_limit=0.05, threads=1)
    assert time.perf_counter() - t0 < 3.0
    assert sol.status == Status.TIME_LIMIT and sol.details["returned"] == "mip start"
    simulate_remat(c, sol.schedule, memory_limit=memory)
    assert sol.objective >= dp.bound * (1 - 1e-12)            # the DP's proven lower bound
    assert "returning its MIP start from the persistent DP" in sol.message


def test_sweep_helper_memory_range():
    c = random_chain(5, 2)
    lo, hi = remat.memory_range(c)
    assert exhaustive_remat(c, lo) is not None and exhaustive_remat(c, lo - 1) is None
    assert remat.solve(c, memory=hi, method="store-all").objective == pytest.approx(c.store_all_time())
    assert remat.solve(c, memory=hi - 1, method="store-all").status == Status.NO_SOLUTION
    assert remat.solve(c, memory=lo - 1, method="store-all").status == Status.INFEASIBLE


def test_memory_range_past_its_time_limit_is_a_known_plans_peak():
    """With a time limit the exact minimum (O(L^3)) is not started where it is estimated to take
    longer: the bottom is then the least replayed peak of the baselines (bisection, store-all and
    recompute-all, then checkpoint_sequential while time is left: none here), a limit at which a plan
    fits, never below the exact minimum; the top is store-all's peak either way. On a chain with spans
    bisection is left out: the methods do not compare their plans with it, and its replayed peak was
    below every method's (random span chains: 78 B against the 80 B they reach)."""
    from memplan.baselines import remat_heuristics as H
    from memplan.baselines.remat_min_memory import min_memory

    for L, seed in ((6, 1), (40, 3)):
        c = random_chain(L, seed)
        lo, hi = remat.memory_range(c, time_limit=1e-9)         # nothing uncached is started
        scheds = [H.bisection_schedule(c), H.store_all_schedule(c), H.recompute_all_schedule(c)]
        assert lo == min(simulate_remat(c, s).peak_memory for s in scheds)
        assert hi == simulate_remat(c, H.store_all_schedule(c)).peak_memory
        assert lo >= min_memory(c) and hi == remat.memory_range(c)[1]
        # the exact answer is then cached: the same limit now returns it
        assert remat.memory_range(c, time_limit=1e-9)[0] == min_memory(c) == remat.memory_range(c)[0]
    for bad in (-1, 0, float("nan"), float("inf"), True, "abc", [1]):      # as solve's time_limit
        with pytest.raises(InputError, match="time_limit"):
            remat.memory_range(random_chain(3, 0), time_limit=bad)


def test_memory_range_past_its_time_limit_on_chains_with_spans_is_reached_by_rotor():
    """On random chains with resident spans (gradients and values charged while they exist), the bottom
    past the time limit is never below the unlimited one, and rotor returns a plan there."""
    import dataclasses
    import random

    from memplan.baselines.remat_min_memory import _CACHE

    rng = random.Random(0)
    checked = 0
    for L in (3, 5, 8):
        for seed in range(12):
            base = random_chain(L, seed)
            grads, values, tot = [], [], 0.0
            for _ in range(rng.randint(0, 2)):
                k = rng.randint(0, L)
                g = float(rng.randint(1, 20))
                grads.append((g, k, rng.randint(k + 1, L + 1)))
                tot += g
            for _ in range(rng.randint(1, 3)):
                k = rng.randint(1, L)
                b = float(rng.randint(1, 30))
                values.append((b, k, sorted(rng.sample(range(k + 1, L + 2), rng.randint(0, min(2, L + 1 - k))))))
                tot += b
            try:
                c = dataclasses.replace(base, resident=tot + rng.randint(0, 10), resident_grads=tuple(grads),
                                        resident_values=tuple(values))
            except ValueError:
                continue
            _CACHE.clear()
            lo_fast, hi_fast = remat.memory_range(c, time_limit=1e-9)
            lo, hi = remat.memory_range(c)
            assert lo_fast >= lo and hi_fast == hi
            sol = remat.solve(c, memory=lo_fast, method="rotor", time_limit=10)
            assert sol.success and sol.peak_memory <= lo_fast * (1 + 1e-9)
            checked += 1
    assert checked >= 20


def _resident_chains(n):
    """Random chains with resident gradients and values charged only while they exist."""
    import dataclasses
    import random

    rng = random.Random(1)
    out = []
    while len(out) < n:
        L = rng.randint(3, 8)
        base = random_chain(L, rng.randint(0, 10**6))
        grads = [(float(rng.randint(1, 20)), k, rng.randint(k + 1, L + 1))
                 for k in [rng.randint(0, L) for _ in range(rng.randint(0, 2))]]
        values = [(float(rng.randint(1, 30)), k, sorted(rng.sample(range(k + 1, L + 2), rng.randint(0, min(2, L + 1 - k)))))
                  for k in [rng.randint(1, L) for _ in range(rng.randint(1, 3))]]
        tot = sum(g for g, _, _ in grads) + sum(b for b, _, _ in values)
        try:
            out.append(dataclasses.replace(base, resident=tot + rng.randint(0, 10), resident_grads=tuple(grads),
                                           resident_values=tuple(values)))
        except ValueError:
            continue
    return out


def test_replayed_baselines_and_the_budget_searchs_multi_solve_against_every_baseline_replayed():
    """baselines.remat_heuristics.replayed_baselines (moved from memplan.remat for the budget search's
    chain on multi-tensor cuts): its fastest is the fastest of store-all, recompute-all and every
    checkpoint_sequential cut that the simulator replays within the limit, its least the least replayed
    peak; the search's _multi_solve is never slower than that fastest, nor than rotor's plan, and fits;
    _multi_least is a limit where _multi_solve has a plan."""
    from memplan._compile_budget import _multi_least, _multi_solve
    from memplan.baselines import remat_heuristics as H
    from memplan.baselines.remat_rotor import persistent

    for c in _resident_chains(15):
        reps = {}
        for k in range(1, c.L + 1):
            reps[f"sequential with {k} segment(s)"] = simulate_remat(c, H.sequential_schedule(c, k))
        reps["store-all"] = simulate_remat(c, H.store_all_schedule(c))
        reps["recompute-all"] = simulate_remat(c, H.recompute_all_schedule(c))
        peaks = sorted({r.peak_memory for r in reps.values()})
        for M in peaks[:2] + peaks[-1:]:
            best, least = H.replayed_baselines(c, M)
            fit = {n: r for n, r in reps.items() if r.peak_memory <= M * (1 + 1e-9)}
            assert best[2].makespan == min(r.makespan for r in fit.values()) and best[0] in fit
            assert least[2].peak_memory == peaks[0]
            got = _multi_solve(c, M, None)
            assert got is not None and got[1].peak_memory <= M * (1 + 1e-9)
            assert got[1].makespan == simulate_remat(c, got[0]).makespan <= best[2].makespan
            rotor = persistent(c.without_resident(), M - c.resident) if M > c.resident else None
            if rotor is not None and rotor.success:
                assert got[1].makespan <= simulate_remat(c, rotor.schedule).makespan * (1 + 1e-12)
        lo = _multi_least(c, None)
        assert lo <= peaks[0] and _multi_solve(c, lo, None) is not None
