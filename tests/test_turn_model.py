"""The time model's no-grad forward times and turn cost (Chain.uf_ng, Chain.u_turn; issue 27, item 3):
the simulator charges them as written in models.remat, instance files carry them, the persistent DP
(rotor, revolve) and the baselines' compiled replay plan with them (checked against the exhaustive
search, which charges them move by move, and against the other persistent sequences), the methods
that do not model them plan in the papers' model with no proof claimed, and
InContextTimes.turn_model recovers them from the runs it is given."""
import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memplan import remat
from memplan.baselines import remat_heuristics as H
from memplan.baselines import remat_rotor as rotor
from memplan.baselines.remat_exhaustive import exhaustive_min_memory, exhaustive_remat
from memplan.baselines.remat_heuristics import sequential_schedule, store_all_schedule
from memplan.models.chain import Chain, random_chain
from memplan.models.instance import InstanceError, chain_from_dict, chain_to_dict
from memplan.models.remat import RematSchedule, simulate_remat, store_all_ops, turn_ops, turn_ops_no_grad, turns
from memplan.models.solution import Status

# F_ck^1, stages 2..3 and the loss kept, their backward, one turn, stage 1 again and its backward
SEQ = [("F_ck", 1), ("F_all", 2), ("F_all", 3), ("F_all", 4), ("B", 4), ("B", 3), ("B", 2), ("F_all", 1), ("B", 1)]


def _chain(**kw) -> Chain:
    return Chain.from_stages(uf=[1, 2, 4], ub=[10, 20, 40], wa=[1, 1, 1, 1], loss={"uf": 8, "ub": 16}, **kw)


def test_simulator_charges_no_grad_times_and_turns_by_hand():
    c = _chain(uf_ng=[0.5, 1.5, 3], u_turn=100)
    rep = simulate_remat(c, SEQ)
    # F_ck^1 at its no-grad time, F_all^2,3,4 at uf, B's at ub, F_all^1 after B^2: uf + one turn
    assert rep.makespan == 0.5 + 2 + 4 + 8 + 16 + 40 + 20 + (1 + 100) + 10
    assert rep.recompute_time == 1 + 100                 # the recomputed F_all^1 and the turn it made
    assert simulate_remat(c.papers_times(), SEQ).makespan == 1 + 2 + 4 + 8 + 16 + 40 + 20 + 1 + 10
    # store-all has no turn and no no-grad forward: the papers' time
    assert simulate_remat(c, store_all_ops(3)).makespan == c.store_all_time()


def test_turn_ops_is_valid_with_one_turn_per_stage():
    """turn_ops replays with one turn per stage; its timed no-grad runs are each stage's second of the
    step (the last stage's: the end of the warm-up sweep); the warm-up sweep does not raise the peak
    of a sweep that keeps every output (the calibration's memory is what it was without it)."""
    for L in (1, 2, 3, 7):
        c = random_chain(L, L)
        ops = turn_ops(L)
        assert turns(ops) == L
        rep = simulate_remat(c, ops)
        # every stage twice without a tape but the last (once), every stage and the loss once with one
        assert rep.makespan == pytest.approx(c.store_all_time() + c.uf[1:L + 1].sum() + c.uf[1:L].sum())
        keep_all = [("F_ck", l) for l in range(1, L + 1)] + ops[2 * L - 1:]
        assert rep.peak_memory == simulate_remat(c, keep_all).peak_memory
        at = turn_ops_no_grad(L)
        assert sorted(at) == list(range(1, L + 1))
        for l, k in at.items():
            assert ops[k][1] == l and ops[k][0] in ("F_ck", "F_none")
            runs = [i for i, (op, m) in enumerate(ops) if m == l and op in ("F_ck", "F_none")]
            assert k == (runs[1] if l < L else runs[0]) and len(runs) == (2 if l < L else 1)
    assert turns(SEQ) == 1 and turns(store_all_ops(4)) == 0


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 8), seed=st.integers(0, 10_000), k=st.integers(1, 6), turn=st.floats(0, 50),
       ng=st.floats(0.1, 1.0))
def test_makespan_is_papers_plus_turns_plus_no_grad_savings(L, seed, k, turn, ng):
    """On every sequence: makespan = the papers' makespan + u_turn x turns - (uf - uf_ng) over the
    no-grad forwards; the memory is not touched."""
    c = random_chain(L, seed)
    d = dataclasses.replace(c, uf_ng=c.uf * ng, u_turn=turn)
    for seq in (sequential_schedule(c, min(k, L)), store_all_schedule(c)):
        a, b = simulate_remat(c, seq), simulate_remat(d, seq)
        saved = sum(c.uf[l] * (1 - ng) for op, l in seq.ops if op in ("F_ck", "F_none"))
        assert b.makespan == pytest.approx(a.makespan + turn * turns(seq.ops) - saved, abs=1e-9)
        assert b.memory_during == a.memory_during and b.peak_memory == a.peak_memory


def test_instance_files_carry_them_and_refuse_bad_values():
    c = _chain(uf_ng=[0.5, 1.5, 3], u_turn=0.25)
    d = chain_to_dict(c, time_unit="s", memory_unit="B", digits=None)
    assert d["u_turn"] == 0.25 and [r.get("u_f_ng") for r in d["stages"]] == [None, 0.5, 1.5, 3, 8]
    back, _ = chain_from_dict(json.loads(json.dumps(d)), "t.json")
    assert np.array_equal(back.uf_ng, c.uf_ng) and back.u_turn == 0.25 and back.own_times
    plain = chain_to_dict(_chain(), time_unit="s", memory_unit="B")
    assert "u_turn" not in plain and all("u_f_ng" not in r for r in plain["stages"])
    assert chain_from_dict(plain, "t.json")[0].uf_ng is None
    # milliseconds in the file: converted like u_f
    d_ms = chain_to_dict(c, time_unit="ms", memory_unit="B", digits=None)
    back_ms, _ = chain_from_dict(d_ms, "t.json")
    assert back_ms.u_turn == pytest.approx(0.25) and np.allclose(back_ms.uf_ng, c.uf_ng)
    for field, value, where in (("u_turn", -1, "'u_turn'"), ("u_turn", None, "'u_turn'")):
        bad = dict(d, **{field: value})
        with pytest.raises(InstanceError, match=where):
            chain_from_dict(bad, "t.json")
    bad = json.loads(json.dumps(d))
    bad["stages"][2]["u_f_ng"] = -3
    with pytest.raises(InstanceError, match=r"stages\[2\]\.u_f_ng"):
        chain_from_dict(bad, "t.json")
    with pytest.raises(ValueError, match="u_turn"):
        _chain(u_turn=math.inf)


@pytest.mark.parametrize("method", ["rotor-floating", "remat-milp", pytest.param("checkmate", marks=pytest.mark.long)])
def test_methods_without_the_model_plan_in_the_papers_model_and_claim_nothing(method):
    c = random_chain(5, 2)
    d = dataclasses.replace(c, uf_ng=c.uf * 0.5, u_turn=3.0)
    lo, hi = remat.memory_range(c)
    mem = (lo + hi) / 2
    a = remat.solve(c, memory=mem, method=method, time_limit=20)
    b = remat.solve(d, memory=mem, method=method, time_limit=20)
    if b.details.get("candidate") != "rotor":       # else rotor's plan replayed faster (test below)
        assert b.schedule.ops == a.schedule.ops and b.peak_memory == a.peak_memory
    assert b.objective == pytest.approx(simulate_remat(d, b.schedule).makespan)
    assert b.objective <= simulate_remat(d, a.schedule).makespan + 1e-9
    assert b.details["makespan_papers_times"] == pytest.approx(a.objective)
    assert b.status != Status.OPTIMAL and b.bound is None        # nothing proven for this model
    assert "papers' time model" in b.message
    if "recompute_time" in b.details:
        assert b.details["recompute_time"] == pytest.approx(simulate_remat(d, b.schedule).recompute_time)
    if a.status == Status.OPTIMAL:
        assert b.status == Status.FEASIBLE
    # called directly, the solvers and bounds that plan in the papers' time model refuse such a chain
    from memplan.baselines.remat_bound import floating_bound, floating_plan
    from memplan.baselines.remat_variants import persistent_variants
    from memplan.formulations.remat_checkmate import solve_checkmate, solve_checkmate_lp
    from memplan.formulations.remat_milp import solve_remat_milp

    for call in (lambda: rotor.floating(d, mem), lambda: floating_bound(d, mem), lambda: floating_plan(d, mem),
                 lambda: solve_remat_milp(d, mem), lambda: solve_checkmate(d, mem), lambda: solve_checkmate_lp(d, mem),
                 lambda: persistent_variants([d], mem)):
        with pytest.raises(ValueError, match="papers' time model"):
            call()


def _own_times_chain(L, seed):
    c = random_chain(L, seed, max_size=4, max_time=3)
    return dataclasses.replace(c, uf_ng=np.floor(c.uf * 0.5), u_turn=float(2 * (1 + seed % 3)))


@pytest.mark.parametrize("L, seed", [(2, 0), (3, 1), (4, 2), (4, 5), (5, 3), (5, 6), (6, 4),
                                     pytest.param(6, 7, marks=pytest.mark.long)])
def test_persistent_dp_plans_with_the_time_model(L, seed):
    """The persistent DP charges the no-grad forwards their own time and one turn per split: its value
    is its sequence's replay, never below the exhaustive search over all sequences (which charges
    them move by move), and never above any other persistent sequence that fits: the plan chosen in
    the papers' model, every checkpoint_sequential cut, revolve's."""
    c = _own_times_chain(L, seed)
    lo, hi = exhaustive_min_memory(c)[0], H.store_all(c).peak_memory
    for M in sorted({int(lo), int((2 * lo + hi) / 3), int((lo + hi) / 2), int(hi)}):
        pe = rotor.persistent(c, M, exact=True)
        assert pe.success and pe.status == Status.OPTIMAL
        assert pe.objective == pytest.approx(simulate_remat(c, pe.schedule, M).makespan)
        opt, seq = exhaustive_remat(c, M)
        assert simulate_remat(c, seq, M).makespan == pytest.approx(opt)
        assert pe.objective >= opt - 1e-9
        papers = rotor.persistent(c.papers_times(), M, exact=True)
        assert pe.objective <= simulate_remat(c, papers.schedule).makespan + 1e-9
        rev = rotor.revolve(c, M, exact=True)
        if rev.success:
            assert rev.objective == pytest.approx(simulate_remat(c, rev.schedule).makespan)
            assert pe.objective <= rev.objective + 1e-9
        for k in range(1, L + 1):
            rep = simulate_remat(c, H.sequential_schedule(c, k))
            if rep.peak_memory <= M:
                assert pe.objective <= rep.makespan + 1e-9


def test_the_time_model_changes_plans():
    """Not vacuous: on some of these chains and limits the plan chosen with the no-grad times and the
    turn cost is strictly faster, replayed with them, than the papers' model's plan; the front end's
    rotor is then that plan, proven."""
    better = 0
    for L, seed in [(4, 6), (5, 0), (5, 3), (6, 2)]:
        c = _own_times_chain(L, seed)
        lo, hi = exhaustive_min_memory(c)[0], H.store_all(c).peak_memory
        for M in sorted({int(lo), int((2 * lo + hi) / 3), int((lo + hi) / 2)}):
            own = remat.solve(c, memory=M, method="rotor", exact=True)
            papers = rotor.persistent(c.papers_times(), M, exact=True)
            assert own.status == Status.OPTIMAL and "papers' time model" not in own.message
            better += own.objective < simulate_remat(c, papers.schedule).makespan - 1e-9
    assert better >= 5


def test_compiled_replay_charges_them():
    c = _own_times_chain(6, 4)
    for k in range(1, 7):
        seq = H.sequential_schedule(c, k)
        rep = simulate_remat(c, seq)
        assert H.schedule_stats(c, seq) == (rep.makespan, rep.peak_memory)
        assert H.sequential_points(c)[k - 1][1:] == (rep.makespan, rep.peak_memory)
    rep = simulate_remat(c, H.recompute_all_schedule(c))
    assert H.recompute_all_stats(c) == (rep.makespan, rep.peak_memory)


def test_turn_model_recovers_known_times():
    """Synthetic runs: each operation's in-context time is known, the whole untimed runs add a known
    cost per turn; turn_model gives them back (store-all's factor 1: its runs add nothing)."""
    from memplan.models.runtime import InContextTimes

    L = 4
    uf = [0, 1.0, 2.0, 3.0, 4.0, 0.5]
    ub = [0, 2.0, 4.0, 6.0, 8.0, 1.0]
    ng = [0, 0.9, 1.7, 2.5, 3.9]
    turn = 0.3
    sa = [uf[l] if op == "F_all" else ub[l] for op, l in store_all_ops(L)]
    ic = InContextTimes.from_runs([sa, sa, sa], [sum(sa)] * 3, L)
    ops = turn_ops(L)
    at = {k: l for l, k in turn_ops_no_grad(L).items()}
    # the warm-up sweep's other runs (first of the step, slower) are in the whole run, in no model term
    per = [ng[at[k]] if k in at else 7.0 if op in ("F_ck", "F_none") else uf[l] if op == "F_all" else ub[l]
           for k, (op, l) in enumerate(ops)]
    whole = sum(per) + turn * L
    uf_ng, u_turn = ic.turn_model([per, per], [whole, whole + 1.0, whole - 1.0])
    assert uf_ng[1:L + 1] == pytest.approx(ng[1:]) and uf_ng[L + 1] == uf[L + 1]
    assert u_turn == pytest.approx(turn)
    # a run that is faster than its operations: no negative turn
    assert ic.turn_model([per], [sum(per) - 1.0])[1] == 0.0
    with pytest.raises(ValueError, match="operation times"):
        ic.turn_model([per[:-1]], [whole])


def test_profile_chain_calibrates_the_turn_model():
    """profile_chain(turns=True) fills uf_ng (the no-grad forwards' in-context times) and u_turn from
    runs of turn_ops, and says so in the provenance; a plan solved on it replays with them."""
    torch = pytest.importorskip("torch")
    from memplan.models.profiler import profile_chain

    torch.manual_seed(0)
    stages = [torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh()) for _ in range(4)]
    x = torch.randn(8, 32)
    c = profile_chain(stages, x, repeats=3, turns=True)
    assert c.uf_ng is not None and np.all(c.uf_ng[1:5] > 0) and c.u_turn >= 0
    assert c.uf_ng[5] == c.uf[5]                        # the loss stage is never recomputed without a tape
    assert "turn_model" in c.provenance and "turn_ops" in c.provenance["turn_model"]
    assert profile_chain(stages, x, repeats=3).uf_ng is None     # off by default
    with pytest.raises(ValueError, match="in context"):
        profile_chain(stages, x, repeats=3, timing="isolated", turns=True)
    lo, hi = remat.memory_range(c)
    sol = remat.solve(c, memory=(lo + hi) / 2, method="rotor")
    assert sol.objective == pytest.approx(simulate_remat(c, sol.schedule).makespan)


def test_joint_problem_keeps_the_papers_times_and_says_so():
    """Paper 000's joint model times every forward u_f and charges no turn: a chain with its own times
    gets the plan and makespan of the same chain without them, and the message says they were not used."""
    from memplan import remat_offload

    c = random_chain(4, 3)
    d = dataclasses.replace(c, uf_ng=c.uf * 0.5, u_turn=3.0)
    lo, hi = remat.memory_range(c)
    a = remat_offload.solve(c, memory=(lo + hi) / 2, bandwidth=2.0, time_limit=20)
    b = remat_offload.solve(d, memory=(lo + hi) / 2, bandwidth=2.0, time_limit=20)
    assert b.objective == a.objective and b.peak_memory == a.peak_memory
    assert "not used" in b.message and "u_turn" in b.message


@pytest.mark.parametrize("method", ["rotor-floating", "remat-milp", pytest.param("checkmate", marks=pytest.mark.long)])
def test_methods_without_the_model_are_never_worse_than_rotor(method):
    """rotor plans with the chain's own times; a method that plans without them returns rotor's plan
    where that replays faster, and says so. On these chains the papers' model's plan is slower than
    rotor's at some limits (test_the_time_model_changes_plans), so the switch is exercised."""
    switched = 0
    for L, seed in [(5, 0), (6, 2)]:
        c = _own_times_chain(L, seed)
        lo, hi = exhaustive_min_memory(c)[0], H.store_all(c).peak_memory
        for M in sorted({int(lo), int((2 * lo + hi) / 3), int((lo + hi) / 2)}):
            rot = remat.solve(c, memory=M, method="rotor", exact=True)
            sol = remat.solve(c, memory=M, method=method, time_limit=20)
            if sol.schedule is None:
                continue
            rep = simulate_remat(c, sol.schedule, M)
            assert sol.objective == pytest.approx(rep.makespan) and sol.objective <= rot.objective + 1e-9
            assert sol.status != Status.OPTIMAL
            if sol.details.get("candidate") == "rotor":
                switched += 1
                assert "returned instead" in sol.message
    assert switched >= 1


@settings(max_examples=25, deadline=None, derandomize=True)
@given(L=st.integers(2, 7), seed=st.integers(0, 10_000), ng=st.sampled_from([0.5, 1.0, 2.0, 4.0]),
       turn=st.sampled_from([0.0, 1.0, 5.0]))
def test_rotor_with_automatic_slots_never_loses_to_a_sequential_cut(L, seed, ng, turn):
    """Rotor's candidates (the baselines it must never lose to) are ranked by their makespan on the
    chain as given. The least-memory sequence's used to come from a cache keyed on the papers' times
    (no-grad forwards = uf, no turns), so with slow no-grad forwards or costly turns it looked cheaper
    than it replays and was chosen: at the memory of a checkpoint_sequential cut, rotor answered up to
    17% slower than that cut (random_chain(6, 0), uf_ng = 2 uf, a turn = the mean uf; 42 of the cuts
    of 60 such chains). Here every cut that fits bounds rotor's replayed makespan, and the least-memory
    sequence's makespan is its replay."""
    from memplan.baselines.remat_min_memory import min_memory_of

    c = random_chain(L, seed, integer=False)
    c = dataclasses.replace(c, uf_ng=c.uf * ng, u_turn=float(turn * np.mean(c.uf[1:-1])))
    for cls in ("all", "persistent"):
        mm = min_memory_of(c, cls)
        assert mm.makespan == pytest.approx(simulate_remat(c, mm.schedule).makespan, rel=1e-12)
    for k, mk, peak in H.sequential_points(c):
        sol = remat.solve(c, memory=peak, method="rotor", time_limit=30)
        assert sol.objective == pytest.approx(simulate_remat(c, sol.schedule, peak).makespan, rel=1e-12)
        assert sol.objective <= mk * (1 + 1e-9), (k, mk, sol.objective, sol.message)


def test_report_states_the_turns_and_the_papers_makespan_of_the_sequence():
    """The remat report of a chain with its own times says what they charge: SEQ's one turn of 100 and
    the papers' makespan of the same sequence (by hand above: 102, where the chain's own is 201.5), and
    the no-grad forwards' time over F_all's on stages 1..L; a chain in the papers' model has no such
    line."""
    from memplan.models.units import fmt_time

    c = _chain(uf_ng=[0.5, 1.5, 3], u_turn=100)
    sol = remat.solve(c, memory=1e9, method="store-all")
    sol.schedule = RematSchedule(list(SEQ))           # the report reads the sequence it is given
    text = remat.report(sol, c)
    line = next(x for x in text.splitlines() if x.startswith("time model"))
    assert f"{fmt_time(100)} a turn (1 turn here, {fmt_time(100)})" in line
    assert f"would give this sequence {fmt_time(1 + 2 + 4 + 8 + 16 + 40 + 20 + 1 + 10)}" in line
    assert "no-grad forwards at 0.714 x F_all's time" in line           # (0.5 + 1.5 + 3) / (1 + 2 + 4)
    plain = _chain()
    assert "time model" not in remat.report(remat.solve(plain, memory=1e9, method="store-all"), plain)


def test_memplan_run_retimes_the_chain_from_its_rounds():
    """``memplan run`` re-times the stages in its own rounds (store-all with per-operation timers):
    each F_all^l and B^l becomes the median of its times over the runs, scaled to the median run; the
    pace is that chain's store-all time over the profile's, and a turn-model instance's no-grad forward
    times and turn cost are scaled by it. By hand on a chain of 3 stages: every operation took 3x its
    profiled time in two runs and 5x in a third (median 3x)."""
    pytest.importorskip("torch")
    from memplan.experiments.cmd_profile import _retimed_chain

    c = _chain(uf_ng=[0.5, 1.5, 3], u_turn=100)
    ops = store_all_ops(3)
    prof = [c.uf[l] if op == "F_all" else c.ub[l] for op, l in ops]
    runs = [[3 * t for t in prof], [5 * t for t in prof], [3 * t for t in prof]]
    here, pace = _retimed_chain(c, runs)
    assert pace == pytest.approx(3.0)
    assert np.allclose(here.uf, 3 * c.uf) and np.allclose(here.ub, 3 * c.ub)
    assert np.allclose(here.uf_ng, 3 * np.asarray(c.uf_ng)) and here.u_turn == pytest.approx(300)
    assert simulate_remat(here, SEQ).makespan == pytest.approx(3 * simulate_remat(c, SEQ).makespan)
    # the profile is left as it was
    assert simulate_remat(c, SEQ).makespan == 0.5 + 2 + 4 + 8 + 16 + 40 + 20 + (1 + 100) + 10
    # with the runs' whole times (the executor's work between operations included): scaled to their
    # median, 10% above the median sum of the operations here
    total = sum(prof)
    here, pace = _retimed_chain(c, runs, [3.3 * total, 3.3 * total, 9.0 * total])
    assert pace == pytest.approx(3.3)
    assert np.allclose(here.uf, 3.3 * c.uf) and np.allclose(here.ub, 3.3 * c.ub)
    assert here.store_all_time() == pytest.approx(3.3 * c.store_all_time())


def test_profile_whole_runs_are_timed_as_their_plans_are(monkeypatch):
    """time_in_context scales the chain to whole untimed runs taken as executed plans are timed: on
    single-tensor cuts without holds, on multi-tensor cuts with them (there a run without holds calls
    each B through an empty root and store-all takes plain autograd's single call, while every other
    plan takes the held general loop: calibrated so, a 2-layer Llama's chain was 8-9% too fast for them)."""
    torch = pytest.importorskip("torch")
    from memplan.models import runtime
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss

    seen = []
    real = runtime.execute

    def spy(*a, **kw):
        if kw.get("op_times") is None:
            seen.append(kw.get("hold", True))
        return real(*a, **kw)

    monkeypatch.setattr(runtime, "execute", spy)
    torch.manual_seed(0)
    model = get_model("llama", vocab=500, n_ctx=16, n_layer=1, d_model=32, n_head=4).train()
    x = example_input("llama", 2, (16,), vocab=500, seed=0)
    loss = classification_loss(seed=0)
    lm = linearize_model(model, x, loss, cuts="multi")
    assert lm.residency is not None and lm.residency.resident
    runtime.time_in_context(lm.stages, lm.loss_stage(loss), x, runs=2, turns=True)
    assert len(seen) == 6 and all(h is True for h in seen)     # (1 warm-up + 2) x (store-all, turn_ops)
    seen.clear()
    stages = [torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()) for _ in range(3)]
    runtime.time_in_context(stages, lambda y: y.square().sum(), torch.randn(4, 8), runs=2, turns=True)
    assert len(seen) == 6 and all(h is False for h in seen)


def test_in_context_timing_runs_more_rounds_until_the_median_is_known():
    """time_in_context's budget: exactly ``runs`` rounds without it; with it, where the whole runs agree
    (a clock that advances the same for every run), ``runs`` or 6, the fewest with a 95% interval of
    the median; with noisy whole runs, more rounds until ``max_runs`` (the budget being ample), the
    store-all and turn_ops runs alike."""
    torch = pytest.importorskip("torch")
    import itertools
    import random

    from memplan.models.runtime import time_in_context

    stages = [torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()) for _ in range(3)]
    x, loss = torch.randn(4, 8), (lambda y: y.square().sum())
    steady = itertools.count(0.0, 1e-3).__next__                 # every reading 1 ms after the last
    rng = random.Random(0)
    acc = [0.0]

    def noisy():
        acc[0] += rng.choice([1e-3, 5e-3])
        return acc[0]

    assert time_in_context(stages, loss, x, runs=3, turns=True).runs == 3
    # agreeing runs: 6, the fewest with a 95% interval of the median (3 that agree prove little)
    assert time_in_context(stages, loss, x, runs=3, turns=True, clock=steady, budget=60).runs == 6
    assert time_in_context(stages, loss, x, runs=8, turns=True, clock=steady, budget=60).runs == 8
    ic = time_in_context(stages, loss, x, runs=3, turns=True, clock=noisy, budget=60, max_runs=9)
    assert ic.runs == 9 and len(ic.turn_run_times) == 9


@pytest.mark.parametrize("whole_hold", [False, True])
def test_memplan_run_scales_the_retimed_chain_to_untimed_store_all_runs(monkeypatch, whole_hold):
    """memplan run's re-timed chain is scaled to untimed store-all runs of the same rounds, run as the
    profile's whole runs are (held on multi-tensor cuts), not to the per-operation timed runs (their
    timers and the general loop made them 4% longer on a tiny GPT-2)."""
    torch = pytest.importorskip("torch")
    from memplan.experiments.cmd_profile import _time_against_autograd
    from memplan.models import runtime

    seen = []
    real = runtime.execute

    def spy(stages, loss_stage, x, ops, **kw):
        if kw.get("op_times") is None and list(ops) == store_all_ops(len(stages)) and kw.get("hold") is not None:
            seen.append(kw["hold"])
        return real(stages, loss_stage, x, ops, **kw)

    monkeypatch.setattr(runtime, "execute", spy)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()) for _ in range(3)])
    stages = list(model)
    loss = lambda y: y.square().sum()        # noqa: E731
    x = torch.randn(4, 8)
    per_op, whole = [], []
    sched = [("F_ck", 1), ("F_all", 2), ("F_all", 3), ("F_all", 4), ("B", 4), ("B", 3), ("B", 2),
             ("F_all", 1), ("B", 1)]
    _time_against_autograd(stages, loss, model, loss, x, sched, "cpu", 0, 0.05, False, retimed=per_op,
                           retimed_whole=whole, whole_hold=whole_hold)
    assert len(whole) == len(per_op) >= 6 and len(seen) >= len(whole)
    assert all(h is whole_hold for h in seen)
