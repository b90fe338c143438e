"""Resident gradients (multi-tensor cuts): made by their last reader's backward, freed by their
producer's (``Chain.resident_grads``), as autograd does; the simulator charges them so, an instance
file keeps them, and a Llama-style stack's and a Transformer's executed store-all are then at plain
autograd's peak (with the cut rule that keeps tensors autograd frees off the cuts)."""
import json
import math
import re

import numpy as np

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memplan.baselines.remat_heuristics import sequential_schedule, store_all_schedule
from memplan.models.chain import Chain
from memplan.models.instance import InstanceError, load_instance, save_instance
from memplan.models.remat import simulate_remat


def _warm_peak(fn, params) -> float:
    """``fn``'s peak by the dispatch tracker on its second run (the first a warm-up), with the weight
    gradients allocated before the window (``step_peak``) and cleared before and after."""
    from memplan.models.memory import step_peak

    fn()
    for p in params:
        p.grad = None
    got = step_peak(fn, params, "cpu")
    for p in params:
        p.grad = None
    return got


def _chain(grads=((2.0, 1, 3),)):
    # L = 3, sizes a = 1 everywhere, abar = 2, delta = a; resident 10 bytes, of which 2 a gradient made
    # in B^3 and freed when B^1 ends
    return Chain.from_stages(uf=[1, 1, 1], ub=[1, 1, 1], wa=[1, 1, 1, 1], wabar=[1, 2, 2, 2],
                             resident=10.0, resident_grads=grads)


def test_hand_example():
    """Store-all F1..F4 B4..B1 with 10 resident bytes, 2 of them the gradient (2, k = 1, r = 3):
    charged 8 up to the end of B^3 (B^3 itself measured with the gradient made inside it, in ob), 10
    from there to the end of B^1, 8 after; paper 004's replay of the same chain without the spans
    charges 10 throughout."""
    c = _chain()
    plain = Chain.from_stages(uf=[1, 1, 1], ub=[1, 1, 1], wa=[1, 1, 1, 1], wabar=[1, 2, 2, 2], resident=10.0)
    seq = store_all_schedule(c)
    got, whole = simulate_remat(c, seq), simulate_remat(plain, seq)
    ops = [tuple(o) for o in seq.ops]
    b3 = ops.index(("B", 3))
    b1 = ops.index(("B", 1))
    # before B^3 ends: 2 bytes less than the whole charge; from its end to B^1's end: the same
    assert [w - g for g, w in zip(got.memory_during[:b3 + 1], whole.memory_during[:b3 + 1])] == [2.0] * (b3 + 1)
    assert got.memory_after[b3:b1] == whole.memory_after[b3:b1]
    assert got.memory_after[b1] == whole.memory_after[b1] - 2.0          # freed with B^1
    assert got.makespan == whole.makespan
    # never above the whole charge, which the solvers plan with
    for k in (2, 3):
        s = sequential_schedule(c, k)
        assert all(g <= w for g, w in zip(simulate_remat(c, s).memory_during,
                                          simulate_remat(plain, s).memory_during))


def _valued(values=((3.0, 1, (3,)), (1.0, 2, ()))):
    # _chain's, with 4 of its resident bytes values with a storage of their own: 3 made by stage 1,
    # read by stage 3 and saved by no backward; 1 made by stage 2 and saved by a backward
    return Chain.from_stages(uf=[1, 1, 1], ub=[1, 1, 1], wa=[1, 1, 1, 1], wabar=[1, 2, 2, 2],
                             resident=10.0, resident_grads=((2.0, 1, 3),), resident_values=values)


@pytest.mark.parametrize("ops,missing_after,missing_during", [
    # store-all: the value read by stage 3 goes after F^3, the saved one after B^2, the gradient
    # comes at the end of B^3 and goes at the end of B^1
    ([("F_all", 1), ("F_all", 2), ("F_all", 3), ("F_all", 4), ("B", 4), ("B", 3), ("B", 2), ("B", 1)],
     [3, 2, 5, 5, 5, 3, 4, 6], [6, 3, 2, 5, 5, 5, 3, 4]),
    # stage 1 again after B^3 (a re-materialization): the value is made again by F_all^1 and goes at
    # once (no reader's forward follows); the saved one, made by F_ck^2, lives through F_all^2 to B^2
    ([("F_ck", 1), ("F_ck", 2), ("F_all", 3), ("F_all", 4), ("B", 4), ("B", 3), ("F_all", 1), ("F_all", 2),
      ("B", 2), ("B", 1)],
     [3, 2, 5, 5, 5, 3, 3, 3, 4, 6], [6, 3, 2, 5, 5, 5, 3, 3, 3, 4])])
def test_resident_values_are_charged_while_they_live(ops, missing_after, missing_during):
    """Against the whole charge, after and during every operation (hand-counted): the gradient (2) is
    missing but from the end of B^3 to the end of B^1, the value read by stage 3 (3) but from the end
    of F^1 to the end of F^3, the saved value (1) but from the end of its first F^2 to the end of B^2."""
    got = simulate_remat(_valued(), ops)
    whole = simulate_remat(_chain(()), ops)
    assert [w - g for g, w in zip(got.memory_after, whole.memory_after)] == missing_after
    assert [w - g for g, w in zip(got.memory_during, whole.memory_during)] == missing_during


@pytest.mark.parametrize("bad,what", [(((3.0, 1, (1,)),), "1 <= k < r"), (((3.0, 4, ()),), "1 <= k < r"),
                                      (((3.0, 1, (3, 3)),), "give \\(bytes"), (((3.0, 1.5, (3,)),), "give \\(bytes"),
                                      (((20.0, 1, (3,)),), "more than resident")])
def test_bad_values_are_refused(bad, what):
    with pytest.raises(ValueError, match=what):
        _valued(bad)


def test_a_solution_reports_the_replayed_peak_with_values():
    """The front end plans with the whole charge and reports the replay, which charges the values only
    while they live: never above the whole charge, and below it on store-all (the value read by stage 3
    is gone at the peak)."""
    import memplan

    c = _valued()
    sol = memplan.remat.solve(c, memory=30, method="store-all")
    assert sol.peak_memory == simulate_remat(c, sol.schedule).peak_memory < sol.details["peak_memory_whole_resident"]
    assert "Chain.resident_values" in sol.message


@pytest.mark.parametrize("bad,what", [(((2.0, 3, 3),), "0 <= k < r"), (((2.0, 0, 9),), "0 <= k < r"),
                                      (((20.0, 0, 2),), "more than resident"), (((2.0,),), "give (bytes")])
def test_bad_spans_are_refused(bad, what):
    with pytest.raises(ValueError, match=what.replace("(", r"\(")):
        _chain(bad)


def test_an_instance_file_keeps_them_and_names_a_bad_one(tmp_path):
    c = _chain(((2.0, 1, 3), (4.0, 0, 2)))
    path = tmp_path / "c.json"
    save_instance(c, path)
    back, _ = load_instance(path)
    assert back.resident_grads == c.resident_grads
    raw = json.loads(path.read_text())
    raw["resident_grads"] = [[2.0, 3, 1]]
    path.write_text(json.dumps(raw))
    with pytest.raises(InstanceError, match="field 'resident_grads'"):
        load_instance(path)
    raw["resident_grads"] = [[2.0, 1.5, 3]]
    path.write_text(json.dumps(raw))
    with pytest.raises(InstanceError, match=r"field 'resident_grads\[0\]'"):
        load_instance(path)


def test_an_instance_file_keeps_the_values_and_names_a_bad_one(tmp_path):
    c = _valued()
    path = tmp_path / "c.json"
    save_instance(c, path)
    back, _ = load_instance(path)
    assert back.resident_values == c.resident_values
    raw = json.loads(path.read_text())
    for bad, where in [([[1e-6, 1, [1]]], "resident_values[0]"), ([[1e-6, 1.5, [3]]], "resident_values[0]"),
                       ([[1e-6, 1, 3]], "resident_values[0]"), ([[1.0, 1, [3]]], "resident_values"),
                       ("x", "resident_values")]:
        raw["resident_values"] = bad
        path.write_text(json.dumps(raw))
        with pytest.raises(InstanceError, match=f"field '{re.escape(where)}'"):
            load_instance(path)


@pytest.mark.parametrize("name,kw,shape", [
    ("llama", dict(vocab=500, n_ctx=64, n_layer=2, d_model=64, n_head=2), (64,)),
    ("transformer", dict(vocab=500, src_len=32, n_ctx=64, d_model=64, n_head=2, d_ff=128, n_enc=2, n_dec=2), (64,)),
    ("nasnet_a", dict(channels=4, cells=1), (3, 16, 16))])
def test_a_multi_cut_network_runs_as_the_chain_says_and_as_autograd(one_torch_thread, name, kw, shape):
    """A small Llama-style stack, the zoo's encoder-decoder Transformer and a small NASNet-A, cut where
    several tensors cross: store-all, sequential and rotor plans peak where the simulator says
    (dispatch tracker, to the byte), and store-all within 0.5% of plain autograd's peak: the cuts hold
    no tensor that autograd frees in the forward (``multi_cut_groups``' ``unsaved``; cut at the query
    projections they were 2.7% and 7.4% over, and 6% for the stack while every resident gradient was
    made with its tensor, in the forward). NASNet's cuts cannot avoid such tensors: its cell outputs
    (resident, read by the next two cells' ReLUs) go after their last reader's forward
    (``Chain.resident_values``; held to their producer's backward, store-all was 12.8% over autograd
    at 32x32), and store-all is over autograd's peak by at most the a^l tensors that no backward saves
    (0.7% here)."""
    torch = pytest.importorskip("torch")
    import memplan
    from memplan.models.graph import linearize_model
    from memplan.models.memory import grad_input
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss, profile_chain
    from memplan.models.runtime import execute

    torch.manual_seed(0)
    model = get_model(name, **kw).train()
    x = example_input(name, 2, shape, vocab=500, seed=0)
    loss = classification_loss(seed=0)
    lm = linearize_model(model, x, loss, cuts="multi")
    assert lm.residency is not None and lm.residency.resident
    ls = lm.loss_stage(loss)
    chain = profile_chain(lm.stages, x, ls, repeats=1, names=lm.names)
    assert chain.resident_grads and sum(g for g, _, _ in chain.resident_grads) < chain.resident
    if name == "nasnet_a":
        from memplan.models.graph import saved_outputs
        saved = saved_outputs(lm.captured, x, loss)
        unsaved_a = sum(lm.captured.graph.nodes[v]["out_bytes"] for b in lm.residency.boundary[1:] for v in b
                        if v not in saved)
        assert any(rs for _, _, rs in chain.resident_values)        # values let go after their readers
    else:
        unsaved_a = 0
    params = list(model.parameters())

    def peak(fn):
        return _warm_peak(fn, params)

    def ag():
        torch.manual_seed(7)
        loss(model(grad_input(x))).backward()
    ref = peak(ag)
    lo, hi = memplan.remat.memory_range(chain)
    seqs = [store_all_schedule(chain), sequential_schedule(chain, 3),
            memplan.remat.solve(chain, memory=(lo + hi) / 2, method="rotor", time_limit=10).schedule]
    for i, seq in enumerate(seqs):
        def run():
            torch.manual_seed(7)
            execute(lm.stages, ls, x, seq)
        measured = peak(run)
        predicted = simulate_remat(chain, seq).peak_memory
        # to the byte on the stack and NASNet; the Transformer's memory is predicted 1 KiB (0.06%) above the
        # run throughout: stage 1 hands on the target ids as a view of the input, one storage that the
        # chain counts in a^0 and in a^1 (a multi-tensor cut does not merge storage-sharing cuts)
        assert 0 <= predicted - measured <= (1024 if name == "transformer" else 0), (i, measured, predicted)
        if i == 0:
            assert measured <= 1.005 * ref + unsaved_a, (measured, ref, unsaved_a)


def test_a_solution_reports_the_replayed_peak():
    """memplan.remat.solve plans with the whole resident charge (an upper bound) and reports the
    replay's peak, which charges the gradients only while they exist: nothing reported that the
    simulator has not accepted."""
    import memplan

    c = _chain()
    for method in ("rotor", "sequential", "store-all"):
        sol = memplan.remat.solve(c, memory=30, method=method)
        rep = simulate_remat(c, sol.schedule)
        assert sol.peak_memory == rep.peak_memory <= sol.details["peak_memory_whole_resident"] <= 30
        assert "Chain.resident_grads" in sol.message


@pytest.mark.parametrize("method", ["rotor", "sequential", "store-all", "remat-milp"])
def test_never_slower_than_a_baseline_that_fits_in_the_replay(method):
    """The solvers plan with the whole resident charge; the replay charges the gradients and values
    only while they exist, so a baseline may fit where the method's plan is slower or where it found
    nothing. At every limit from below the proven minimum to above store-all, the answer is at least
    as fast as every baseline of the method's class whose replay fits (store-all, recompute-all,
    sequential with 1..L segments, replayed here), and where none fits and nothing was planned, the
    least memory stated is the least baseline's replayed peak, INFEASIBLE only below the whole
    charge's minimum less the spans' bytes."""
    import memplan
    from memplan.baselines.remat_heuristics import recompute_all_schedule
    from memplan.models.solution import Status

    c = _valued()
    base = {"store-all": [store_all_schedule(c)], "sequential": [sequential_schedule(c, k) for k in (1, 2, 3)]}
    scheds = base.get(method, [store_all_schedule(c), recompute_all_schedule(c)] + base["sequential"])
    reps = [simulate_remat(c, s) for s in scheds]
    from memplan.baselines.remat_min_memory import min_memory

    whole_min = min_memory(c.without_resident()) + c.resident    # the solvers' whole charge's minimum
    spans = 2.0 + 3.0 + 1.0
    for memory in range(8, 32):
        sol = memplan.remat.solve(c, memory=float(memory), method=method, time_limit=10)
        fits = [r.makespan for r in reps if r.peak_memory <= memory]
        if sol.schedule is not None and sol.success:
            got = simulate_remat(c, sol.schedule)
            assert got.peak_memory == sol.peak_memory <= memory
            assert sol.objective == got.makespan <= min(fits, default=float("inf")), (memory, sol.message)
        else:
            assert not fits, (memory, sol.status, sol.message)
            assert sol.details["min_memory"] == min(min(r.peak_memory for r in reps), whole_min)
            want = Status.INFEASIBLE if memory < whole_min - spans else Status.NO_SOLUTION
            assert sol.status == want, (memory, sol.status)


def test_multi_cut_store_all_without_holds_is_autograd(one_torch_thread):
    """A multi-tensor chain's store-all sequence run without holds (``hold=False``) is one backward call
    over the stages (``_run_store_all_multi``): gradients bit-identical to plain autograd's, peak at
    most the held run's (which is the chain's); ``fast=False``, ``hold=True`` and a set of held stages
    keep the general loop (whose times the chain has)."""
    torch = pytest.importorskip("torch")
    from memplan.models import runtime
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss
    from memplan.models.remat import store_all_ops

    torch.manual_seed(0)
    model = get_model("nasnet_a", channels=4, cells=1).train()
    x = example_input("nasnet_a", 2, (3, 16, 16), seed=0)
    loss = classification_loss(seed=0)
    lm = linearize_model(model, x, loss, cuts="multi")
    ls = lm.loss_stage(loss)
    ops = store_all_ops(lm.L)
    params = list(model.parameters())
    calls = []
    real = runtime._run_store_all_multi

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    def grads(fn):
        for p in params:
            p.grad = None
        torch.manual_seed(3)
        fn()
        return [p.grad.clone() for p in params]

    def peak(fn):
        return _warm_peak(fn, params)

    ref = grads(lambda: loss(model(x)).backward())
    runtime._run_store_all_multi = spy
    try:
        held = peak(lambda: runtime.execute(lm.stages, ls, x, ops, hold=True))
        loop = peak(lambda: runtime.execute(lm.stages, ls, x, ops, hold=False, fast=False))
        for hold in (frozenset({3}), runtime.Holds([])):
            runtime.execute(lm.stages, ls, x, ops, hold=hold)
        assert not calls
        assert all(torch.equal(a, b) for a, b in zip(ref, grads(lambda: runtime.execute(lm.stages, ls, x, ops,
                                                                                          hold=False))))
        assert peak(lambda: runtime.execute(lm.stages, ls, x, ops, hold=False)) <= held
        assert calls
    finally:
        runtime._run_store_all_multi = real
    assert loop <= held


def test_progress_on_a_resident_chain_ends_with_the_replayed_peak():
    """The inner solve (the chain without its resident tensors) logs its own limit and peak; the
    progress then says what the resident charge took off the limit, and ends with the replayed peak
    the solution reports, not the inner one."""
    import memplan
    from memplan.models.units import fmt_memory

    lines: list[str] = []
    c = _valued()
    sol = memplan.remat.solve(c, memory=30, method="rotor", progress=lines.append)
    assert "holds 10 B of resident tensors" in lines[0] and "planned under 20 B" in lines[0]
    assert lines[-1].endswith(f"peak {fmt_memory(sol.peak_memory)}") and "with the resident tensors" in lines[-1]
    # store-all fits: peak during F^3, a^0 (1) + abar^1, abar^2 (2 + 2) + the value read by stage 3 (3)
    # + the saved value (1) + the resident bytes charged whole (10 - 2 - 3 - 1) + F^3's abar (2) = 15
    assert sol.peak_memory == simulate_remat(c, sol.schedule).peak_memory == 15.0


def test_memory_range_is_the_replayed_range_on_a_chain_with_spans():
    """With spans, the solvers' whole charge overstates both ends: store-all replays at 15 B
    (hand-counted in the test above) where the whole charge says 19 (9 + 10), and sequential(3) fits in 13 B
    where the whole charge's minimum is 16. The range is then (13, 15): a plan at its bottom, store-all
    at its top and not below it."""
    import dataclasses

    import memplan
    from memplan.baselines.remat_heuristics import recompute_all_schedule

    c = _valued()
    whole = dataclasses.replace(c, resident_grads=(), resident_values=())     # charged whole, as the solvers plan
    assert memplan.remat.memory_range(whole) == (16.0, 19.0)
    lo, hi = memplan.remat.memory_range(c)
    assert (lo, hi) == (13.0, 15.0)
    assert simulate_remat(c, sequential_schedule(c, 3)).peak_memory == 13.0
    assert simulate_remat(c, recompute_all_schedule(c)).peak_memory == 13.0
    bottom = memplan.remat.solve(c, memory=lo, method="rotor", time_limit=10)
    assert bottom.success and bottom.peak_memory <= lo
    top = memplan.remat.solve(c, memory=hi, method="store-all", time_limit=10)
    assert top.success and top.objective == simulate_remat(c, store_all_schedule(c)).makespan
    assert not memplan.remat.solve(c, memory=hi - 0.5, method="store-all", time_limit=10).success


@given(seed=st.integers(0, 10**6), L=st.integers(2, 5), frac=st.floats(0.0, 1.2),
       method=st.sampled_from(["rotor", "sequential", "store-all", "revolve"]))
@settings(max_examples=40, deadline=None, derandomize=True)
def test_resident_spans_solutions_replay_and_beat_every_fitting_baseline(seed, L, frac, method):
    """Random chains with resident gradients and values (random producers, readers, saved or not), at
    limits from below the whole charge's minimum to above store-all: a plan is what the replay says
    (peak and makespan, within the limit) and at least as fast as every baseline of the method's class
    whose replay fits; no plan only where none fits, INFEASIBLE only below the whole minimum less the
    spans' bytes, and the least memory stated is enough for some baseline."""
    import dataclasses

    from memplan import remat
    from memplan.baselines.remat_heuristics import recompute_all_schedule
    from memplan.baselines.remat_min_memory import min_memory
    from memplan.models.chain import random_chain
    from memplan.models.solution import Status

    rng = np.random.default_rng(seed)
    base = random_chain(L, seed)
    grads, values = [], []
    for _ in range(int(rng.integers(1, 4))):
        k = int(rng.integers(1, L))                       # producer 1..L-1, readers k+1..L+1
        readers = sorted(set(int(r) for r in rng.integers(k + 1, L + 2, size=int(rng.integers(1, 3)))))
        grads.append((float(rng.integers(1, 5)), k, readers[-1]))
        values.append((float(rng.integers(1, 5)), k, tuple(readers) if rng.random() < 0.5 else ()))
    whole = sum(g for g, _, _ in grads) + sum(b for b, _, _ in values) + float(rng.integers(0, 4))
    c = dataclasses.replace(base, resident=whole, resident_grads=grads, resident_values=values)
    lo = min_memory(c.without_resident()) + c.resident          # the whole charge's minimum
    hi = remat.memory_range(c)[1]
    spans = sum(g for g, _, _ in grads) + sum(b for b, _, _ in values)     # charged only while they exist
    memory = (lo - spans) + frac * (max(hi, lo) - (lo - spans))
    sol = remat.solve(c, memory=memory, method=method, time_limit=10)
    seqs = {"store-all": [store_all_schedule(c)], "sequential": [sequential_schedule(c, k) for k in range(1, L + 1)]}
    scheds = seqs.get(method, [store_all_schedule(c), recompute_all_schedule(c)] + seqs["sequential"])
    reps = [simulate_remat(c, s) for s in scheds]
    fits = [r.makespan for r in reps if r.peak_memory <= memory * (1 + 1e-9)]
    if sol.success:
        got = simulate_remat(c, sol.schedule)
        assert sol.peak_memory == got.peak_memory <= memory * (1 + 1e-9)
        assert sol.objective == pytest.approx(got.makespan, rel=1e-12)
        assert sol.objective <= min(fits, default=math.inf) * (1 + 1e-9)
    else:
        assert not fits
        assert sol.status in (Status.INFEASIBLE, Status.NO_SOLUTION)
        if sol.status == Status.INFEASIBLE:
            assert memory < lo - spans + 1e-9
        assert any(r.peak_memory <= sol.details["min_memory"] * (1 + 1e-9) for r in reps) or \
            sol.details["min_memory"] == lo
    # the replayed range: a plan at its bottom (no more than the whole minimum, at least the proven
    # bound), store-all exactly at its top
    bottom, top = remat.memory_range(c)
    assert lo - spans - 1e-9 <= bottom <= min(lo, top)
    assert top == simulate_remat(c, store_all_schedule(c)).peak_memory
    assert remat.solve(c, memory=bottom, method="rotor", time_limit=10).success
