"""memplan.compile_under_budget (issue 28, first slice) and the exact partitioner knapsack.

Measured peaks are checked a second time outside the search (profiler_peak on the returned step),
gradients against eager autograd on the same parameters, the refusal's stated minimum by compiling
again at that minimum, and the MILP against brute force and PyTorch's dp_knapsack.
"""
from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import memplan  # noqa: E402
from memplan.formulations.knapsack_milp import knapsack_value, solve_knapsack  # noqa: E402
from memplan.models.memory import profiler_peak  # noqa: E402
from memplan.models.networks.gpt2 import SDPABlock  # noqa: E402


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.GELU(), torch.nn.Linear(128, 32),
                               torch.nn.LayerNorm(32), torch.nn.Linear(32, 128), torch.nn.Tanh(),
                               torch.nn.Linear(128, 8))


def _loss(out, y):
    return torch.nn.functional.mse_loss(out, y)


def _eager_grads(model, x, y):
    for p in model.parameters():
        p.grad = None
    _loss(model(x), y).backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    return grads


def _step_grads(step, model, x, y):
    for p in model.parameters():
        p.grad = None
    step(x, y)
    return [p.grad.detach().clone() for p in model.parameters()]


def _assert_step_grads_match(step, model, x, y, expected):
    """The step's gradients equal ``expected`` (eager autograd's) within float32 rounding; the
    parameters' gradients are cleared afterwards."""
    got = _step_grads(step, model, x, y)
    for p in model.parameters():
        p.grad = None
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def mlp_case():
    model = _mlp()
    x, y = torch.randn(8, 16, 32), torch.randn(8, 16, 8)
    step = memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=_loss, example_targets=(y,),
                                        fractions=(1.0, 0.0), repeats=1, chain=False)
    return model, x, y, step


def test_peak_within_budget_measured_again(mlp_case):
    model, x, y, step = mlp_case
    assert step.budget == 2**30 and step.peak <= step.budget
    # the fastest fitting candidate is chosen (every candidate fits 1 GiB)
    assert all(c.fits for c in step.candidates) and len(step.candidates) == 2
    assert step.fraction == min(step.candidates, key=lambda c: (c.step_time, c.peak)).fraction
    # a second measurement, outside the search, of the returned step (gradients exist, as in the search)
    step(x, y)
    _, peak, _ = profiler_peak(lambda: step(x, y))
    assert 0 < peak <= step.budget
    chosen = next(c for c in step.candidates if c.fraction == step.fraction)
    assert peak == pytest.approx(chosen.peak, rel=0.05)


def test_gradients_equal_eager_autograd(mlp_case):
    model, x, y, step = mlp_case
    expected = _eager_grads(model, x, y)
    _assert_step_grads_match(step, model, x, y, expected)


def test_infeasible_budget_refused_with_the_minimum_and_the_minimum_works(mlp_case):
    model, x, y, step = mlp_case
    smallest = min(c.peak for c in step.candidates)
    with pytest.raises(memplan.InfeasibleError) as info:
        memplan.compile_under_budget(model, (x,), smallest - 1, loss_fn=_loss, example_targets=(y,),
                                     fractions=(1.0, 0.0), repeats=1, chain=False)
    err = info.value
    assert err.minimum == pytest.approx(smallest, rel=0.05)
    assert str(int(err.minimum)) in str(err)
    best = min(err.candidates, key=lambda c: c.peak)
    again = memplan.compile_under_budget(model, (x,), err.minimum, loss_fn=_loss, example_targets=(y,),
                                         fractions=(best.fraction,), repeats=1, chain=False)
    assert again.peak <= err.minimum
    for p in model.parameters():
        p.grad = None


def test_memplan_knapsack_inside_the_partitioner():
    """solver='memplan' on a tiny GPT block: gradients equal eager, the budget holds, and each knapsack
    the partitioner asked for was solved at least as well as dp_knapsack in PyTorch's model."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(SDPABlock(32, 2), SDPABlock(32, 2))
    x, y = torch.randn(4, 16, 32), torch.randn(4, 16, 32)
    expected = _eager_grads(model, x, y)
    step = memplan.compile_under_budget(model, (x,), "64MiB", loss_fn=_loss, example_targets=(y,),
                                        solver="memplan", fractions=(0.3,), repeats=1, chain=False)
    assert step.peak <= 64 * 2**20
    calls = step.knapsack_calls
    assert calls, "the partitioner did not call memplan's knapsack"
    for c in calls:
        assert c["items"] > 0
        assert c["saved_memory"] <= c["capacity"] + 1e-9
        assert c["recompute_runtime"] <= c["dp_recompute_runtime"] * (1 + 1e-12)
    _assert_step_grads_match(step, model, x, y, expected)


def test_both_knapsacks_compete_on_measured_peaks():
    """solver='both': each fraction compiled with each knapsack; the choice is the fastest fitting
    of all of them, and its knapsack's records are there exactly when memplan's was chosen."""
    torch.manual_seed(2)
    model = torch.nn.Sequential(SDPABlock(32, 2))
    x, y = torch.randn(4, 16, 32), torch.randn(4, 16, 32)
    step = memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=_loss, example_targets=(y,),
                                        solver="both", fractions=(0.3,), repeats=1, chain=False)
    assert [(c.solver, c.fraction) for c in step.candidates] == [("pytorch", 0.3), ("memplan", 0.3)]
    chosen = min(step.candidates, key=lambda c: (c.step_time, c.peak))
    assert step.solver == chosen.solver and step.peak <= 2**30
    assert bool(step.knapsack_calls) == (step.solver == "memplan")
    for p in model.parameters():
        p.grad = None


def test_the_search_leaves_gradients_and_buffers_as_they_were():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4))
    x, y = torch.randn(6, 8), torch.randn(6, 4)
    _loss(model(x), y).backward()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    grads = [p.grad.clone() for p in model.parameters()]
    memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=_loss, example_targets=(y,),
                                 fractions=(1.0,), repeats=1)         # chain plans too (batch norm recomputed)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
    for p, g in zip(model.parameters(), grads):
        torch.testing.assert_close(p.grad, g, rtol=0, atol=0)


def test_time_limit_stops_starting_candidates():
    """A limit shorter than one compile: the first fraction is measured and returned, the others are
    listed as not tried."""
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    x, y = torch.randn(6, 8), torch.randn(6, 4)
    step = memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=_loss, example_targets=(y,),
                                        fractions=(0.5, 1.0, 0.0), repeats=1, time_limit=1e-3)
    assert [c.fraction for c in step.candidates] == [0.5] and step.skipped == [1.0, 0.0]
    assert step.fraction == 0.5 and step.peak <= 2**30
    for p in model.parameters():
        p.grad = None


def test_bad_options_are_refused():
    model = _mlp()
    x, y = torch.randn(2, 32), torch.randn(2, 8)
    with pytest.raises(memplan.InputError, match="backend"):
        memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=_loss, example_targets=(y,), backend="eager")
    with pytest.raises(memplan.InputError, match="solver"):
        memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=_loss, example_targets=(y,), solver="greedy")
    with pytest.raises(memplan.InputError, match="fractions"):
        memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=_loss, example_targets=(y,), fractions=(1.5,))
    with pytest.raises(memplan.InputError, match="time_limit"):
        memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=_loss, example_targets=(y,), time_limit=0)
    with pytest.raises(memplan.InputError, match="progress must be a function"):
        memplan.compile_under_budget(model, (x,), "1GiB", loss_fn=_loss, example_targets=(y,), progress="yes")
    with pytest.raises(memplan.InputError, match="scalar"):
        memplan.compile_under_budget(model, (x,), "1GiB")        # the output is not a loss
    with pytest.raises(memplan.InputError, match="memory '1.5 parsecs' is not understood.*unknown memory unit"):
        memplan.compile_under_budget(model, (x,), "1.5 parsecs", loss_fn=_loss, example_targets=(y,))
    # chain plans only (no fraction), but the model returns its loss: the chain needs loss_fn
    with pytest.raises(memplan.InputError, match="nothing to try.*loss_fn"):
        memplan.compile_under_budget(torch.nn.Sequential(torch.nn.Linear(2, 1)), (torch.randn(1, 2),), "1GiB",
                                     fractions=())


# --- memplan's chain plans (rotor across stages, run eagerly) ---------------------------------------

def _deep_mlp():
    torch.manual_seed(5)
    blocks = [torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.GELU(), torch.nn.Linear(128, 32),
                                  torch.nn.LayerNorm(32)) for _ in range(5)]
    return torch.nn.Sequential(*blocks, torch.nn.Linear(32, 8))


@pytest.fixture(scope="module")
def chain_search():
    from memplan._compile_budget import BudgetSearch

    model = _deep_mlp()
    x, y = torch.randn(16, 16, 32), torch.randn(16, 16, 8)
    search = BudgetSearch(model, (x,), loss_fn=_loss, example_targets=(y,), fractions=(0.1,), repeats=1,
                          compiled_stages=False)      # eager chain plans (compiled ones: test_compiled_stages)
    return model, x, y, search


def test_chain_plans_reach_a_quarter_below_every_fraction_and_train(chain_search):
    """A budget 25% below the smallest peak any fraction measured: PyTorch's knob has nothing there,
    memplan's rotor plan fits (measured again outside the search) and its gradients equal eager's."""
    model, x, y, search = chain_search
    assert search.chain is not None and search.chain_note == ""
    lowest = min(c.peak for c, _, _ in search.compiled)
    budget = int(0.75 * lowest)
    step = search.under(budget)
    assert step.kind == "chain" and step.peak <= budget and step.solver == "rotor"
    assert not any(c.fits for c in step.candidates if c.kind == "compiled")
    expected = _eager_grads(model, x, y)
    step(x, y)                                   # gradients exist, as in the search's window
    for p in model.parameters():
        p.grad.zero_()
    _, peak, _ = profiler_peak(lambda: step(x, y))
    assert peak <= budget
    got = [p.grad.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-6)
    # the plan recomputes: it is not store-all (each stage's forward run once)
    forwards = [op for op in step.choice.ops if op[0] != "B"]
    assert len(forwards) > len({l for _, l in forwards})


def test_eager_chain_plans_measure_what_their_replay_says_on_convolutions():
    """The search measures every candidate with c10's allocator events, which see the scratch
    buffers of the CPU convolutions' backward; the dispatch-mode tracker does not (on the quick
    ResNet-50 one 9 MiB buffer: every eager chain plan measured 9,437,184 bytes, 40-94%, over its
    replay). The eager chain is profiled the same way, so on a small convolutional chain each rotor
    plan's measured peak is its predicted one within a few loss scalars (64 bytes), from the least
    memory to store-all. The executor keeps its CPU generator states outside c10's allocator
    (``models.runtime._Rng``): as 5056-byte tensors, one per replayed segment and the global one put
    aside during a replay, they were up to 2% of these peaks, which no chain models."""
    from memplan._compile_budget import BudgetSearch
    from memplan.remat import memory_range

    torch.manual_seed(3)
    blocks = [torch.nn.Sequential(torch.nn.Conv2d(8 if i else 3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                  torch.nn.ReLU()) for i in range(5)]
    model = torch.nn.Sequential(*blocks, torch.nn.Flatten(), torch.nn.Linear(8 * 16 * 16, 4))
    x, y = torch.randn(2, 3, 16, 16), torch.randn(2, 4)
    search = BudgetSearch(model, (x,), loss_fn=_loss, example_targets=(y,), fractions=(), repeats=1,
                          compiled_stages=False)
    lo, hi = memory_range(search.chain)
    checked = 0
    for f in (0.0, 0.5, 1.0):
        cand = search.chain_plan(lo + f * (hi - lo))
        assert cand is not None
        assert 0 <= cand.peak - cand.predicted_peak <= 64, (f, cand.peak, cand.predicted_peak)
        checked += 1
    assert checked == 3


def test_under_starts_no_measurement_its_time_limit_cannot_finish():
    """``under(budget, time_limit)`` bounds the call: with no time for one more measurement the chain's
    plans for the budget are not solved or measured, and the refusal says they were not tried (not
    "give at least" the compiled peak, which they go below); a budget the measured fraction fits is
    answered with it, measured again (the one measurement always made). With the time, the chain's
    plan fits the budget that was refused."""
    from memplan._compile_budget import BudgetSearch

    model = _deep_mlp()
    x, y = torch.randn(16, 16, 32), torch.randn(16, 16, 8)
    search = BudgetSearch(model, (x,), loss_fn=_loss, example_targets=(y,), fractions=(0.1,), repeats=1,
                          compiled_stages=False)
    lowest = min(c.peak for c, _, _ in search.compiled)
    budget = int(0.75 * lowest)
    with pytest.raises(memplan.InfeasibleError) as info:
        search.under(budget, time_limit=1e-3)
    msg = str(info.value)
    assert "below every peak measured before time_limit=0.001 s stopped the search" in msg
    assert "not tried: chain plans)" in msg and "give at least" not in msg
    assert info.value.minimum == lowest and search.chain_plans == {}
    step = search.under(lowest, time_limit=1e-3)
    assert step.kind == "compiled" and step.peak <= lowest and search.chain_plans == {}
    assert step.untried == ["chain plans"]
    assert "  not solved and measured for this budget (time_limit): chain plans" in step.report().splitlines()
    step = search.under(budget)
    assert step.kind == "chain" and step.peak <= budget
    with pytest.raises(memplan.InputError, match="time_limit must be a positive number"):
        search.under(budget, time_limit=0)
    for p in model.parameters():
        p.grad = None


def test_chain_minimum_refused_below_and_given_at(chain_search):
    """Below the least-memory plan's measured peak the search refuses, stating that peak; at it, the
    step fits."""
    model, x, y, search = chain_search
    least = search.minimum()
    assert least.kind == "chain" and least.peak < min(c.peak for c, _, _ in search.compiled)
    with pytest.raises(memplan.InfeasibleError) as info:
        search.under(least.peak - 1)
    assert info.value.minimum == least.peak and str(least.peak) in str(info.value)
    step = search.under(info.value.minimum)
    assert step.peak <= least.peak
    for p in model.parameters():
        p.grad = None


def test_at_a_fraction_peak_the_choice_is_the_fastest_fitting(chain_search):
    """At the peak fraction 0.1 measured, the answer is the fastest measured of everything that fits
    (the compiled step at 0.1 among them), so never slower than it in the measurements."""
    model, x, y, search = chain_search
    at_one = next(c for c, _, _ in search.compiled if c.fraction == 0.1)
    step = search.under(at_one.peak)
    fitting = [c for c in step.candidates if c.fits]
    assert any(c.kind == "compiled" and c.fraction == 0.1 for c in fitting)
    assert step.choice.step_time == min(c.step_time for c in fitting) <= at_one.step_time
    assert step.peak <= at_one.peak
    for p in model.parameters():
        p.grad = None


# --- the knapsack MILP on its own --------------------------------------------------------------------

def _brute_force(memory, runtimes, cap):
    n = len(memory)
    return min(knapsack_value(memory, runtimes, c)[0] for k in range(n + 1)
               for c in itertools.combinations(range(n), k) if knapsack_value(memory, runtimes, c)[1] <= cap)


def test_knapsack_milp_equals_brute_force_on_tiny_instances():
    rng = random.Random(28)
    for _ in range(25):
        n = rng.randint(1, 9)
        memory = [rng.choice([0.0, rng.random() * 0.6]) for _ in range(n)]
        runtimes = [rng.choice([1.0, 1.0 + rng.random() * 1e3]) for _ in range(n)]
        cap = rng.random()
        res = solve_knapsack(memory, runtimes, cap, time_limit=10, threads=1)
        assert res.saved_memory <= cap + 1e-12
        assert res.recompute_runtime == pytest.approx(_brute_force(memory, runtimes, cap), rel=1e-9, abs=1e-9)
        assert sorted(res.saved + res.recomputed) == list(range(n))


def test_knapsack_tiebreak_saves_the_fewest_bytes_among_the_fastest():
    """Integer runtimes (ties everywhere, as with PyTorch's FLOP estimate): the answer is the
    lexicographic minimum (recompute runtime, then saved size) found by brute force."""
    rng = random.Random(7)
    for _ in range(25):
        n = rng.randint(2, 9)
        memory = [rng.randint(1, 20) / 40 for _ in range(n)]
        runtimes = [float(rng.choice([1, 1, 1, 2, 5])) for _ in range(n)]
        cap = rng.randint(1, 40) / 40
        best = min((knapsack_value(memory, runtimes, c) for k in range(n + 1)
                    for c in itertools.combinations(range(n), k)
                    if knapsack_value(memory, runtimes, c)[1] <= cap), key=lambda v: (round(v[0], 9), v[1]))
        res = solve_knapsack(memory, runtimes, cap, time_limit=10, threads=1)
        assert res.recompute_runtime == pytest.approx(best[0], abs=1e-9)
        assert res.saved_memory == pytest.approx(best[1], abs=1e-9)


def test_knapsack_milp_never_worse_than_dp_knapsack():
    from torch._functorch._activation_checkpointing.knapsack import dp_knapsack

    rng = random.Random(2028)
    for _ in range(30):
        n = rng.randint(5, 40)
        # sizes near dp_knapsack's 1e-4 quantum make its rounding matter
        memory = [rng.random() * rng.choice([1e-4, 1e-2, 0.3]) for _ in range(n)]
        runtimes = [rng.random() * 1e9 for _ in range(n)]
        cap = rng.random() * sum(memory)
        _, dp_saved, _ = dp_knapsack(memory, runtimes, cap)
        dp_r, dp_m = knapsack_value(memory, runtimes, dp_saved)
        res = solve_knapsack(memory, runtimes, cap, start=dp_saved, time_limit=10, threads=1)
        assert res.saved_memory <= cap + 1e-12
        if dp_m <= cap:                    # dp's answer is feasible in the true sizes: never worse
            assert res.recompute_runtime <= dp_r * (1 + 1e-12)


def test_knapsack_milp_where_dp_knapsack_rounding_loses():
    """dp_knapsack rounds sizes to multiples of 1e-4: two items of 0.6e-4 under a capacity of 1.2e-4
    both fit (recompute nothing), but dp sees sizes 1 and capacity 1 and keeps one."""
    from torch._functorch._activation_checkpointing.knapsack import dp_knapsack

    memory, runtimes, cap = [0.6e-4, 0.6e-4], [5.0, 7.0], 1.2e-4
    _, dp_saved, _ = dp_knapsack(memory, runtimes, cap)
    assert knapsack_value(memory, runtimes, dp_saved)[0] == 5.0          # dp keeps the 7, recomputes the 5
    res = solve_knapsack(memory, runtimes, cap, start=dp_saved, time_limit=10, threads=1)
    assert res.saved == [0, 1] and res.recompute_runtime == 0.0 and res.source == "milp"


# --- the peak-aware MILP (memory over time) -----------------------------------------------------------

def _random_timeline(rng, n, T):
    sizes = [float(rng.randint(1, 9)) for _ in range(n)]
    runtimes = [float(rng.choice([1, 1, 2, 5, 30])) for _ in range(n)]
    saved, recomputed = [], []
    for _ in range(n):
        d = rng.randrange(0, T // 2)
        fw = rng.randrange(d, T // 2 + 1)
        b0 = rng.randrange(T // 2, T)
        b1 = rng.randrange(b0, T)
        saved.append([(d, b1)])
        recomputed.append([(d, fw), (b0, b1)])
    fixed = [float(rng.randint(0, 12)) for _ in range(T)]
    return sizes, runtimes, saved, recomputed, fixed


def test_peak_milp_equals_brute_force_and_never_worse_than_its_start():
    """On random timelines: the MILP's recompute runtime is the brute-force optimum among choices whose
    peak (swept over every time point, no segments) is within the start's; its peak is within it."""
    from memplan.formulations.peak_milp import peak_value, solve_peak

    rng = random.Random(2800)
    for _ in range(20):
        n, T = rng.randint(1, 7), rng.randint(4, 14)
        sizes, runtimes, saved, recomputed, fixed = _random_timeline(rng, n, T)
        start = [i for i in range(n) if rng.random() < 0.5]
        cap = peak_value(sizes, saved, recomputed, fixed, start)
        res = solve_peak(sizes, runtimes, saved, recomputed, fixed, start=start, time_limit=10, threads=1)
        assert res.capacity == pytest.approx(cap)
        best = min(sum(r for i, r in enumerate(runtimes) if i not in keep)
                   for k in range(n + 1) for keep in itertools.combinations(range(n), k)
                   if peak_value(sizes, saved, recomputed, fixed, keep) <= cap + 1e-9)
        assert res.recompute_runtime == pytest.approx(best)
        assert res.peak == pytest.approx(peak_value(sizes, saved, recomputed, fixed, res.saved))
        assert res.peak <= cap + 1e-9
        assert res.recompute_runtime <= sum(r for i, r in enumerate(runtimes) if i not in start) + 1e-9


def test_peak_milp_keeps_what_a_knapsack_must_drop():
    """Two tensors of 4 bytes, recomputing either costs 10; the first dies before the second is made.
    A knapsack of capacity 4 over saved bytes keeps one; the peak is 4 either way, so the peak model keeps both."""
    from memplan.formulations.knapsack_milp import solve_knapsack
    from memplan.formulations.peak_milp import solve_peak

    sizes, runtimes = [4.0, 4.0], [10.0, 10.0]
    saved = [[(0, 3)], [(4, 7)]]
    recomputed = [[(0, 0), (3, 3)], [(4, 4), (7, 7)]]
    ks = solve_knapsack(sizes, runtimes, 4.0, time_limit=10, threads=1)
    assert len(ks.saved) == 1 and ks.recompute_runtime == 10.0
    res = solve_peak(sizes, runtimes, saved, recomputed, [0.0] * 8, capacity=4.0, time_limit=10, threads=1)
    assert res.saved == [0, 1] and res.recompute_runtime == 0.0 and res.peak == 4.0


def test_peak_solver_inside_the_partitioner_never_worse_than_dp_knapsack_in_its_model():
    """solver='memplan-peak' on a tiny GPT block: every call's answer has a modelled peak no higher
    and a recompute runtime no larger than dp_knapsack's choice; gradients equal eager; budget kept."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(SDPABlock(32, 2))
    x, y = torch.randn(4, 16, 32), torch.randn(4, 16, 32)
    expected = _eager_grads(model, x, y)
    step = memplan.compile_under_budget(model, (x,), "64MiB", loss_fn=_loss, example_targets=(y,),
                                        solver="memplan-peak", fractions=(0.1,), repeats=1, chain=False)
    calls = step.knapsack_calls
    assert calls and step.peak <= 64 * 2**20
    for c in calls:
        assert c["recompute_runtime"] <= c["dp_recompute_runtime"] * (1 + 1e-12)
        assert c["peak"] <= c["dp_peak"] * (1 + 1e-9)
    _assert_step_grads_match(step, model, x, y, expected)


def test_measured_estimator_times_operations_by_their_size(one_torch_thread):
    """Each aten node is run on real tensors of its shapes: a 256x256x256 matrix product costs more than
    a 256x256x8 one (32x the multiply-adds), a pointwise add costs more than nothing (PyTorch's FLOP
    estimate gives it the floor value 1, as every pointwise operation), and equal signatures are timed
    once."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from memplan.models.op_timing import measured_estimator

    def f(a, b, c, d):
        return torch.mm(a, b), torch.mm(a, c), torch.mm(d, b), a + a

    a, b, c, d = torch.randn(256, 256), torch.randn(256, 256), torch.randn(256, 8), torch.randn(256, 256)
    g = make_fx(f, tracing_mode="fake")(a, b, c, d)
    mms = [n for n in g.graph.nodes if n.target == torch.ops.aten.mm.default]
    add = next(n for n in g.graph.nodes if n.target == torch.ops.aten.add.Tensor)
    est = measured_estimator(repeats=5)   # one thread: it reads the CPU clock, which load does not stretch
    big, small, same = est(mms[0]), est(mms[1]), est(mms[2])
    assert big > 2 * small > 0, (big, small)
    assert same == big and est.timed == 2 and est.calls == 3      # mm(d, b) has mm(a, b)'s signature
    assert est(add) > 0 and est.fallbacks == 0
    with pytest.raises(ValueError, match="repeats"):
        measured_estimator(repeats=0)


def test_measured_runtimes_inside_the_partitioner():
    """runtime_estimator='measured': the partitioner's knapsack weighs timed operations (the estimator is
    called), the step's gradients equal eager autograd's and its peak is within the budget."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(SDPABlock(32, 2), SDPABlock(32, 2))
    x, y = torch.randn(4, 16, 32), torch.randn(4, 16, 32)
    expected = _eager_grads(model, x, y)
    from memplan._compile_budget import BudgetSearch

    search = BudgetSearch(model, (x,), loss_fn=_loss, example_targets=(y,), solver="memplan", fractions=(0.3,),
                          repeats=1, chain=False, runtime_estimator="measured")
    assert search.estimator.calls > 0 and search.estimator.timed > 0 and search.estimator.fallbacks == 0
    step = search.under("64MiB")
    assert step.peak <= 64 * 2**20
    _assert_step_grads_match(step, model, x, y, expected)
    with pytest.raises(memplan.InputError, match="runtime_estimator 'fast' is unknown; use one of flops, measured"):
        memplan.compile_under_budget(model, (x,), "64MiB", loss_fn=_loss, example_targets=(y,),
                                     runtime_estimator="fast")


def test_a_candidate_measured_just_over_the_budget_is_measured_again():
    """A GPU measured one step 0.005% apart in two windows, so a budget set to one window's peak
    refused the very step measured there. Here the search's record of the only candidate is raised
    by 100 bytes, as if its window had measured that much more: a budget 50 bytes above the true peak
    is still met, through a second measurement (traced in ``rechecked``); a candidate recorded more than
    PEAK_RECHECK over the budget is not measured again, and the budget is refused."""
    from memplan._compile_budget import PEAK_RECHECK, BudgetSearch
    from memplan.models.solution import InfeasibleError

    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))
    x, y = torch.randn(32, 16), torch.randn(32, 4)
    search = BudgetSearch(model, (x,), loss_fn=_loss, example_targets=(y,), fractions=(1.0,), repeats=1,
                          chain=False)
    cand = search.compiled[0][0]
    true_peak = cand.peak
    assert true_peak > 0
    cand.peak = true_peak + 100
    step = search.under(true_peak + 50)
    assert step.peak == true_peak and step.fraction == 1.0
    assert search.rechecked == [(cand.label, true_peak + 100, true_peak)]
    assert [c.peak for c in step.candidates] == [true_peak] and step.candidates[0].fits
    cand.peak = int(true_peak * (1 + 2 * PEAK_RECHECK)) + 1
    with pytest.raises(InfeasibleError):
        search.under(true_peak)
    assert search.rechecked == []
    for p in model.parameters():
        p.grad = None


def test_first_fraction_then_chains_then_the_other_fractions(monkeypatch):
    """The order under a time limit: the first fraction is compiled, then the chain is built (with
    one compiled step in hand), then the other fractions while time is left. Here the chain's build
    is made to look as if it spent the whole limit: the chain plans exist, the later fractions are
    listed as not tried, and the answer is still measured within its budget."""
    from memplan._compile_budget import BudgetSearch

    seen = []
    original = BudgetSearch._build_chain

    def build_chain(self):
        seen.append([c.fraction for c, _, _ in self.compiled])
        original(self)
        self.t_start -= 1e4                 # as if the chain had taken far longer than the limit

    monkeypatch.setattr(BudgetSearch, "_build_chain", build_chain)
    model = _deep_mlp()
    x, y = torch.randn(16, 16, 32), torch.randn(16, 16, 8)
    search = BudgetSearch(model, (x,), loss_fn=_loss, example_targets=(y,), fractions=(1.0, 0.5, 0.0), repeats=1,
                          time_limit=600, compiled_stages=False)
    assert seen == [[1.0]]
    assert [c.fraction for c, _, _ in search.compiled] == [1.0] and search.skipped == [0.5, 0.0]
    assert search.chain is not None
    least = search.minimum()
    step = search.under(least.peak)
    assert step.peak <= least.peak
    for p in model.parameters():
        p.grad = None


def _fixed_offload_times(search):
    """The search's offloading chain with times set by formula (1 ms + 1 ms per 100 kB kept, backward
    twice forward; sizes as profiled): the solvers' schedules then do not depend on this machine's
    timings (a converted paper-001 schedule can break the joint model's rules at some timings)."""
    import dataclasses

    stages, loss_stage, holder, chain, views, sf = search._offload
    uf = 1e-3 * (1.0 + chain.wabar / 1e5)
    uf[0] = 0.0
    search._offload = (stages, loss_stage, holder, dataclasses.replace(chain, uf=uf, ub=2 * uf), views, sf)
    search.bandwidth = float(search._offload[3].wabar[1:].sum() / search._offload[3].store_all_time())
    return search._offload[3]


def _emulated_offload_search():
    """A deep MLP's search with offloading emulated on the CPU and the chain's times fixed by formula:
    (model, x, y, eager's gradients, search, chain)."""
    from memplan._compile_budget import BudgetSearch

    model = _deep_mlp()
    x, y = torch.randn(16, 16, 32), torch.randn(16, 16, 8)
    expected = _eager_grads(model, x, y)
    search = BudgetSearch(model, (x,), loss_fn=_loss, example_targets=(y,), fractions=(1.0,), repeats=1,
                          compiled_stages=False, offload="emulated")
    chain = _fixed_offload_times(search)
    return model, x, y, expected, search, chain


def test_offloading_candidates_with_the_host_emulated():
    """offload='emulated' (CPU, the host's bytes invisible to the measurement, as a GPU's would be):
    at a budget between paper 001's minimum and the peak without offloading, DYNPROG's schedule is
    executed and measured within the budget, it moves values, its gradients are eager autograd's, and
    under() can answer with it. Bad offloading options are refused up front."""
    from memplan._compile_budget import BudgetSearch
    from memplan.models.offload import min_feasible_memory, peak_memory_no_offload

    model, x, y, expected, search, chain = _emulated_offload_search()
    lo, hi = min_feasible_memory(chain), peak_memory_no_offload(chain)
    assert lo < hi
    budget = lo + 0.3 * (hi - lo)
    cand = search.offload_fit(budget)
    assert cand is not None and cand.kind == "chain-offload" and len(cand.offloaded) >= 1
    assert cand.peak <= budget and cand.label.startswith("chain store-all, ")
    _assert_step_grads_match(search._runner(cand)[0], model, x, y, expected)
    assert search.offload_fit(hi + 1) is None                 # store-all fits: nothing to offload
    step = search.under(budget)
    assert step.peak <= budget and any(c.kind == "chain-offload" for c in step.candidates)
    for p in model.parameters():
        p.grad = None
    for kw, match in (({"offload": True}, "needs the model on a CUDA device"), ({"offload": "yes"}, "offload must be"),
                      ({"offload": "emulated", "bandwidth": "fast"}, "bandwidth")):
        with pytest.raises(memplan.InputError, match=match):
            BudgetSearch(model, (x,), loss_fn=_loss, example_targets=(y,), fractions=(1.0,), repeats=1, **kw)


def test_offloading_candidates_plan_with_two_measured_speeds():
    """Where both directions of the link were measured (``link001``, set here as CUDA's measurement
    would), DYNPROG's candidate is planned and executed with the two speeds: its schedule replays with
    them within the budget, its replay differs from the one-speed replay of the same schedule, and
    the executed step measures within the budget with eager's gradients."""
    from memplan.models.offload import min_feasible_memory, peak_memory_no_offload
    from memplan.models.remat_offload import simulate_remat_offload

    model, x, y, expected, search, chain = _emulated_offload_search()
    search.link001 = (search.bandwidth, 3 * search.bandwidth)      # prefetches three times faster
    lo, hi = min_feasible_memory(chain), peak_memory_no_offload(chain)
    budget = lo + 0.3 * (hi - lo)
    _, _, solve = search._transfer_solver("chain-offload", chain)
    sched, _, peak = solve(budget)
    two = simulate_remat_offload(chain, sched, search.link001, budget)
    assert two.peak_memory == peak <= budget
    assert two.makespan < simulate_remat_offload(chain, sched, search.bandwidth).makespan
    cand = search.offload_fit(budget)
    assert cand is not None and cand.peak <= budget
    _assert_step_grads_match(search._runner(cand)[0], model, x, y, expected)


def test_saved_offloading_plans_replay_to_their_predicted_peaks(tmp_path):
    """bench_budget --save-offload (what a GPU run leaves for a mispredicted row): the chain and each
    executed transfer schedule written to JSON, loaded back with the instance loader and
    ``RematOffloadSchedule.from_json``, replay to the very peak the search predicted for them, and
    the measured peaks are the candidates' own."""
    import importlib.util
    import json

    from memplan.models.instance import chain_from_dict
    from memplan.models.offload import min_feasible_memory, peak_memory_no_offload
    from memplan.models.remat_offload import RematOffloadSchedule, simulate_remat_offload

    _, _, _, _, search, chain = _emulated_offload_search()
    lo, hi = min_feasible_memory(chain), peak_memory_no_offload(chain)
    made = [c for c in (search.offload_fit(lo + 0.3 * (hi - lo)), search.offload_fit(lo + 0.6 * (hi - lo)))
            if c is not None]
    assert made
    spec = importlib.util.spec_from_file_location("bench_budget", Path(__file__).parents[1] / "benchmarks" / "bench_budget.py")
    bb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bb)
    bb._save_offload(search, tmp_path / "plans.json")
    data = json.loads((tmp_path / "plans.json").read_text())
    loaded, _ = chain_from_dict(data["chain"])
    assert loaded.L == chain.L and list(loaded.wabar) == list(chain.wabar)
    assert len(data["plans"]) == len(search.offload_plans) >= 1
    assert sorted(p["measured_peak"] for p in data["plans"]) == sorted(c.peak for c in made)
    for p in data["plans"]:
        rep = simulate_remat_offload(loaded, RematOffloadSchedule.from_json(p["schedule"]), data["link"])
        assert rep.peak_memory == p["predicted_peak"]


def test_joint_candidates_with_the_host_emulated():
    """The joint DP's schedule (recomputation and offloading, parts merged into whole transfers,
    replayed within the limit) at 10% of the way from its least memory to store-all's peak on a small
    GPT-2: executed and measured within the budget, values moved, gradients those of eager autograd
    (dropout's masks replayed in the recomputations), and among under()'s candidates there."""
    from memplan._compile_budget import BudgetSearch
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss

    torch.manual_seed(0)
    model = get_model("gpt2", n_layer=2, n_embd=64, n_head=2, n_ctx=64, vocab=512).train()
    x = example_input("gpt2", 2, (64,), vocab=512)
    loss_fn = classification_loss()
    search = BudgetSearch(model, (x,), loss_fn=loss_fn, fractions=(1.0,), repeats=1, compiled_stages=False,
                          offload="emulated")
    lo, hi, _ = search._transfer_solver("chain-joint", _fixed_offload_times(search))
    budget = lo + 0.1 * (hi - lo)
    cand = search.joint_fit(budget)
    assert cand is not None and cand.kind == "chain-joint" and cand.offloaded and cand.peak <= budget
    assert cand.label.startswith("chain rotor + offloading, ")
    step = search._runner(cand)[0]
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(3)
    loss_fn(model(x)).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(3)
    step(x)
    for e, p in zip(expected, model.parameters()):
        torch.testing.assert_close(p.grad, e, rtol=1e-5, atol=1e-7)
    for p in model.parameters():
        p.grad = None
    answer = search.under(budget)
    assert answer.peak <= budget and any(c.kind == "chain-joint" for c in answer.candidates)
    for p in model.parameters():
        p.grad = None


def test_a_budget_the_least_memory_plan_fits_is_answered_even_when_the_plans_solved_for_it_do_not(monkeypatch):
    """``under`` solves rotor for the budget; where those plans measure above it (a model a few KiB
    short on a tiny chain), the chain's least-memory plan may still fit. It must be answered with that
    plan, not refused with a stated minimum that is within the budget."""
    from memplan._compile_budget import BudgetSearch

    model = _deep_mlp()
    x, y = torch.randn(16, 16, 32), torch.randn(16, 16, 8)
    search = BudgetSearch(model, (x,), loss_fn=_loss, example_targets=(y,), fractions=(), repeats=1,
                          compiled_stages=False)
    monkeypatch.setattr(search, "chain_fit", lambda *a, **k: None)     # no plan solved for the budget fits
    assert search.measured() == []
    least = BudgetSearch.minimum(search)          # measured here only to know the answer; then forgotten
    budget = least.peak + 1024
    search.chain_plans.clear()
    assert search.measured() == []
    step = search.under(budget)
    assert step.kind == "chain" and step.peak <= budget
    for p in model.parameters():
        p.grad = None


def test_chain_plans_for_a_model_returning_a_dict():
    """A model that returns ``{"logits": t, ...}`` (the loss reads ``out["logits"]``) gets chain plans, as
    one returning ``t`` does (before: "the model must return a single tensor", no chain at all); the
    chain plan chosen at a budget below store-all trains to eager autograd's gradients and its
    measured peak is within the budget."""

    class Dict(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _mlp()

        def forward(self, x):
            return {"logits": self.net(x), "tokens": x.shape[1]}

    def loss(out, y):
        assert isinstance(out, dict) and out["tokens"] == 16
        return _loss(out["logits"], y)

    model = Dict()
    x, y = torch.randn(8, 16, 32), torch.randn(8, 16, 8)
    for p in model.parameters():
        p.grad = None
    loss(model(x), y).backward()
    expected = [p.grad.detach().clone() for p in model.parameters()]
    from memplan._compile_budget import BudgetSearch

    search = BudgetSearch(model, (x,), loss_fn=loss, example_targets=(y,), fractions=(), repeats=1,
                          compiled_stages=False)
    assert search.chain_note == "" and search.chain is not None and search.chain.L >= 4
    low = search.under(int(search.minimum().peak))       # the least memory: a chain plan that recomputes
    assert low.choice.kind == "chain" and low.peak <= low.budget
    _assert_step_grads_match(low, model, x, y, expected)


def test_chain_plans_for_a_model_with_a_second_input():
    """``compile_under_budget(model, (x, mask), ...)``: the chain plans read the mask inside their stages
    (before: "need exactly one input tensor", no chain plan); the least-memory chain plan trains to
    eager autograd's gradients on the mask each call is given, not on the example's."""
    from conftest import masked_mlp_case

    from memplan._compile_budget import BudgetSearch

    model, x, y, masks = masked_mlp_case()
    search = BudgetSearch(model, (x, masks[0]), loss_fn=_loss, example_targets=(y,), fractions=(), repeats=1,
                          compiled_stages=False)
    assert search.chain_note == "" and search.chain is not None and search.chain.L >= 4
    low = search.under(int(search.minimum().peak))
    assert low.choice.kind == "chain" and low.peak <= low.budget
    for mask in masks[::-1]:
        for p in model.parameters():
            p.grad = None
        _loss(model(x, mask), y).backward()
        expected = [p.grad.detach().clone() for p in model.parameters()]
        for p in model.parameters():
            p.grad = None
        low(x, mask, y)
        for e, p in zip(expected, model.parameters()):
            torch.testing.assert_close(p.grad, e, rtol=1e-4, atol=1e-6)


def test_an_input_that_is_not_a_tensor_is_a_constant_of_the_chain():
    """A loop count passed beside the input: a proxy cannot stand for it in Python's control flow, so
    the model could not be traced ('Proxy' object cannot be interpreted as an integer: no chain plan).
    It is now fixed at the example's value when the model is traced: the chain plan trains as eager,
    and a call with another value is refused naming the input and both values."""
    from memplan._compile_budget import BudgetSearch

    class Loop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 8)

        def forward(self, x, k):
            h = self.a(x)
            for _ in range(k):
                h = torch.tanh(h)
            return self.b(h)

    torch.manual_seed(0)
    model = Loop()
    x, y = torch.randn(8, 16, 32), torch.randn(8, 16, 8)
    search = BudgetSearch(model, (x, 3), loss_fn=_loss, example_targets=(y,), fractions=(), repeats=1,
                          compiled_stages=False)
    assert search.chain_note == "" and search.chain.L >= 4        # a, three tanh, b
    low = search.under(int(search.minimum().peak))
    for p in model.parameters():
        p.grad = None
    _loss(model(x, 3), y).backward()
    expected = [p.grad.detach().clone() for p in model.parameters()]
    _assert_step_grads_match(lambda xx, yy: low(xx, 3, yy), model, x, y, expected)
    with pytest.raises(memplan.InputError, match=r"input 2 is 4, and the chain was traced with 3"):
        low(x, 4, y)


def test_a_u_net_gets_plans_on_multi_tensor_cuts_below_its_single_tensor_floor(one_torch_thread):
    """A U-Net's skips leave few single-tensor cuts (9 stages): the search's chain plans stopped at that
    chain's least (78.0 MiB here; 95.9 MiB at 64x64, 2% below eager's step in bench_budget). The chain
    cut where several tensors cross, sized by c10's events as the eager chain is, reaches lower: its
    least plan measured at its replay's peak to the byte, below every single-tensor plan, answered by
    under() with eager autograd's gradients bit for bit."""
    import copy

    from memplan._compile_budget import BudgetSearch
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss

    torch.manual_seed(0)
    model = get_model("unet").train()
    x = example_input("unet", 2, (3, 32, 32))
    loss_fn = classification_loss()
    ref = copy.deepcopy(model)
    loss_fn(ref(x)).backward()
    search = BudgetSearch(model, (x,), loss_fn=loss_fn, fractions=(), compiled_stages=False, repeats=1)
    assert search._multi is not None and search.multi_note == ""
    single = search.chain_plan(search.chain_minimum)
    least = search.minimum()
    assert least.kind == "chain-multi" and "multi-tensor cuts" in least.label
    assert least.peak == least.predicted_peak and least.peak < single.peak
    step = search.under(least.peak)
    assert step.choice.kind == "chain-multi" and step.peak <= least.peak
    for p in model.parameters():
        p.grad = None
    step(x)
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.equal(p.grad, q.grad), n


class _TinyUNet(torch.nn.Module):
    """Two skips concatenated on the way up: cut where several tensors cross, its least memory falls."""

    def __init__(self, c=8, classes=5):
        super().__init__()
        nn = torch.nn

        def cbr(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True))

        self.e1, self.e2, self.e3 = nn.Sequential(cbr(3, c), cbr(c, c)), cbr(c, 2 * c), cbr(2 * c, 4 * c)
        self.up2, self.d2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2), cbr(4 * c, 2 * c)
        self.up1, self.d1 = nn.ConvTranspose2d(2 * c, c, 2, stride=2), cbr(2 * c, c)
        self.head = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        F = torch.nn.functional
        s1 = self.e1(x)
        s2 = self.e2(F.max_pool2d(s1, 2))
        b = self.e3(F.max_pool2d(s2, 2))
        y = self.d2(torch.cat([self.up2(b), s2], 1))
        return self.head(self.d1(torch.cat([self.up1(y), s1], 1)))


def _unet_search(freeze=False):
    from memplan._compile_budget import BudgetSearch

    F = torch.nn.functional
    torch.manual_seed(0)
    model = _TinyUNet().train()
    if freeze:
        model.e1[0][0].weight.requires_grad_(False)
    x, y = torch.rand(2, 3, 32, 32), torch.randint(0, 5, (2, 32, 32))
    return BudgetSearch(model, (x,), loss_fn=F.cross_entropy, example_targets=(y,), fractions=(),
                        compiled_stages=False, repeats=1)


def test_a_multi_tensor_chain_left_out_is_said_in_the_report_and_a_refusal(one_torch_thread):
    """Where the search did not build the chain on multi-tensor cuts, the user is told: a frozen first
    layer (which that path does not take yet) in the step's report, a time limit in a refusal's list of
    what was not tried (it had named the single-tensor least as the smallest, with nothing on why, where
    the multi-tensor chain fits 16% lower). A network that needs no such chain says nothing of it."""
    frozen = _unet_search(freeze=True)
    assert frozen._multi is None and frozen.multi_note == "not tried with frozen first layers"
    step = frozen.under(frozen.chain_minimum * 1.01)
    assert "chain plans on multi-tensor cuts: not tried with frozen first layers" in step.report()
    # the compiled chain's copy of the eager chain's reason for no chunked loss stage (a raw error of a
    # head that is not a language model's) is the network's, left out as the eager one is; a time limit is said
    import dataclasses

    noisy = dataclasses.replace(step, compiled_loss_chunks_note="no chunked loss stage (the head does not run on "
                                "a chunk of tokens (RuntimeError: Given groups=1, weight of size [2, 64, 1, 1]))")
    assert "chunked loss stage" not in noisy.report().replace("compiled stages: not asked", "")
    timed = dataclasses.replace(step, compiled_loss_chunks_note="no chunked loss stage (not tried within time_limit=2 s)")
    assert "compiled stages, chunked loss stage: no chunked loss stage (not tried within" in timed.report()

    search = _unet_search()
    assert search._multi is not None
    # as _build_multi leaves it where the search's time_limit ran out before it
    search._multi, search.multi_note, search.time_limit = None, "not tried within time_limit=3 s", 3.0
    with pytest.raises(memplan.InfeasibleError, match=r"not tried: chain plans on multi-tensor cuts\)"):
        search.under(search.chain_minimum * 0.99)

    F = torch.nn.functional
    plain = memplan.compile_under_budget(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(),
                                                             torch.nn.Linear(8, 2)),
                                         (torch.randn(4, 8),), "1MiB", loss_fn=F.cross_entropy,
                                         example_targets=(torch.tensor([0, 1, 1, 0]),), fractions=(),
                                         compiled_stages=False)
    assert "multi-tensor" not in plain.report()


def test_a_least_plan_measured_below_its_replay_is_measured_again(one_torch_thread):
    """c10's profiler can miss a block ("Memory block of unknown size was allocated before the profiling
    started"): the third search in a row of a small dict-output model measured its least plan at 147456 B
    of its replay's 278528, and under() then refused that very budget ("every candidate that fitted
    measured above it when run again"; a fresh clone's CI hit it). A chain plan measured 1% or more below
    its replay is measured once more and the larger kept. The miss is intermittent (1 fresh process in 3
    outside pytest, none seen inside): this checks the invariant, it does not reproduce the miss."""
    from memplan._compile_budget import BudgetSearch

    class Dict(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _mlp()

        def forward(self, x):
            return {"logits": self.net(x)}

    torch.manual_seed(0)
    for _ in range(4):
        model = Dict()
        x, y = torch.randn(8, 16, 32), torch.randn(8, 16, 8)
        search = BudgetSearch(model, (x,), loss_fn=lambda out, t: _loss(out["logits"], t), example_targets=(y,),
                              fractions=(), repeats=1, compiled_stages=False)
        least = search.minimum()
        assert least.peak >= least.predicted_peak
        assert search.under(int(least.peak)).peak <= least.peak
