"""Keep-or-recompute inside compiled stages (issue 28): rotor across stages, the partitioner at a
budget fraction below 1 within each (``BudgetSearch(stage_fractions=...)``).

References: sizes computed by hand from the shapes (what the min-cut partitioner saves for
``x + fc2(gelu(fc1(x)))`` at fraction 1 and below), eager autograd's gradients, profiler_peak of the
returned step measured again outside the search. Backend ``aot_eager_decomp_partition``.
"""
from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from memplan._compile_budget import BudgetSearch  # noqa: E402
from memplan.baselines.remat_heuristics import store_all  # noqa: E402
from memplan.models.compiled import compile_stages  # noqa: E402
from memplan.models.memory import profiler_peak  # noqa: E402
from memplan.models.profiler import profile_stage  # noqa: E402
from memplan.models.solution import InputError  # noqa: E402

BACKEND = "aot_eager_decomp_partition"
N, D, H = 64, 32, 256           # tokens, width, hidden width: float32, so 4NH bytes per hidden activation
HID = 4 * N * H


class _ResMlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(D, H), torch.nn.Linear(H, D)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(x)))


def _loss(out, y):
    return torch.nn.functional.mse_loss(out, y)


def _grads(model):
    return [p.grad.detach().clone() for p in model.parameters()]


@pytest.fixture(scope="module")
def case():
    torch.manual_seed(0)
    model = torch.nn.Sequential(_ResMlp(), _ResMlp(), _ResMlp(), torch.nn.Linear(D, 8))
    x, y = torch.randn(N, D), torch.randn(N, 8)
    for p in model.parameters():
        p.grad = None
    _loss(model(x), y).backward()
    expected = _grads(model)
    for p in model.parameters():
        p.grad = None
    search = BudgetSearch(model, (x,), loss_fn=_loss, example_targets=(y,), fractions=(), repeats=1,
                          backend=BACKEND, stage_fractions=(1.0, 0.5))
    return model, x, y, expected, search


def _assert_grads(step, model, x, y, expected):
    for p in model.parameters():
        p.grad = None
    step(x, y)
    for e, g in zip(expected, _grads(model)):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    for p in model.parameters():
        p.grad = None


def test_stage_fraction_half_saves_one_hidden_activation_less_per_block(case):
    """Per residual block, at fraction 1 the partitioner saves fc1's output h and gelu(h) (both N x H:
    the second matmul's backward wants gelu(h), GELU's wants h) besides the block's output (4ND);
    at 0.5 its more aggressive min-cut recomputes gelu(h) from h in the backward: F_all keeps exactly
    4NH bytes less, and the backward holds 4NH more for the recomputed gelu(h). The store-all plan's
    measured peak is in the last block's backward, with the three blocks' saved tensors held
    (3 x 4NH less) and gelu(h) recomputed (4NH more): 2 x 4NH below fraction 1's."""
    model, x, y, expected, search = case
    assert search.compiled_chain_note == ""
    full, half = search.compiled_chains[1.0], search.compiled_chains[0.5]
    names = list(full.stage_names)
    blocks = [names.index(b) for b in ("0", "1", "2")]
    for k in blocks:
        assert full.wabar[k] == 4 * N * D + 2 * HID
        assert half.wabar[k] == 4 * N * D + HID
        assert half.ob[k] - full.ob[k] == HID
    others = [k for k in range(len(names)) if k not in blocks]
    assert [full.wabar[k] for k in others] == [half.wabar[k] for k in others]
    # the store-all plan of each chain, measured
    peaks = {}
    for sf, ch in ((1.0, full), (0.5, half)):
        cand = search.chain_plan(store_all(ch).peak_memory, compiled=sf)
        assert all(op != "F_ck" for op, _ in cand.ops)                      # it stores all
        assert cand.stage_fraction == sf
        peaks[sf] = cand.peak
        _assert_grads(search._runner(cand)[0], model, x, y, expected)
    assert abs((peaks[1.0] - peaks[0.5]) - 2 * HID) <= 0.01 * 2 * HID, peaks
    # the 0.5 chain's candidate says how its stages were compiled
    assert "partitioner budget 0.5 (memplan-peak)" in cand.label


def test_search_offers_both_chains_and_fits_a_budget_only_the_half_chain_stores_all_in(case):
    """Candidates come from both compiled chains; the least memory over them is at most the fraction-1
    chain's; a budget between the two store-all peaks is met (measured again outside the search)
    with eager's gradients."""
    model, x, y, expected, search = case
    least = search.minimum()
    sa = {sf: search.chain_plan(store_all(ch).peak_memory, compiled=sf).peak
          for sf, ch in search.compiled_chains.items()}
    kinds = {c.stage_fraction for c in search.measured() if c.kind == "chain-compiled"}
    assert kinds == {1.0, 0.5}
    # minimum() measured each compiled chain's least-memory plan; the least over all is at most fraction 1's
    for sf, c in search._cchains.items():
        assert any(m.kind == "chain-compiled" and m.stage_fraction == sf and m.memory_limit == c[4]
                   for m in search.measured())
    least_full = min(c.peak for c in search.measured() if c.kind == "chain-compiled" and c.stage_fraction == 1.0)
    assert least.peak <= least_full
    budget = (sa[0.5] + sa[1.0]) // 2
    step = search.under(budget)
    assert step.peak <= budget
    for p in model.parameters():                      # the search's window: gradients exist
        p.grad = torch.zeros_like(p)
    step(x, y)
    _, peak, _ = profiler_peak(lambda: step(x, y))
    assert peak <= budget
    _assert_grads(step, model, x, y, expected)
    cands = {c.label for c in step.candidates}
    assert any("partitioner budget 0.5" in c for c in cands)
    assert any(c.startswith("chain rotor, compiled stages, at") for c in cands)


def test_stage_solver_reaches_the_partitioner():
    """At fraction 0.2 the block's knapsack is asked (the partitioner's more aggressive min-cut keeps h,
    half of fraction 1's h and gelu(h): over 0.2). dp_knapsack recomputes h = fc1(x) too: F_all keeps the output only (4ND). The peak-aware
    MILP keeps h (4ND + 4NH): recomputing h does not lower the block's own modelled peak (the backward
    holds h and gelu's gradient together either way), its objective; it was called and recorded."""
    from memplan._compile_budget import memplan_peak_solver

    torch.manual_seed(1)
    x = torch.randn(N, D)
    solver = memplan_peak_solver(time_limit=10)
    got = {}
    for name, cfg in (("pytorch", {"activation_memory_budget": 0.2, "activation_memory_budget_solver": "dp"}),
                      ("memplan-peak", {"activation_memory_budget": 0.2, "activation_memory_budget_solver": solver})):
        (stage,), _ = compile_stages([_ResMlp()], lambda t: t.sum(), BACKEND, tag=f"k28d_{name}", config=cfg)
        v, _ = profile_stage(stage, x, repeats=0, memory="profiler")
        got[name] = v["wabar"]
    assert got["pytorch"] == 4 * N * D
    assert got["memplan-peak"] == 4 * N * D + HID
    assert len(solver.calls) >= 1 and solver.calls[0]["items"] == 1
    assert solver.calls[0]["peak"] <= solver.calls[0]["dp_peak"]


def test_extra_stage_chains_respect_the_time_limit(monkeypatch):
    """An extra compiled chain that would overrun time_limit (elapsed plus the previous chain's build
    time; for the first, the eager chain's profile time plus the first fraction's compile time, here
    none: twice the profile time) less the time kept for measuring plans is not built and the note says
    so. (The chain builds are stubbed: 0.4 s each; 0.2 s kept.)"""
    built = []

    def fake(self, sf=1.0):
        built.append(sf)
        time.sleep(0.4)
        self.compiled_chain_notes[sf] = ""

    monkeypatch.setattr(BudgetSearch, "_build_compiled_chain", fake)
    monkeypatch.setattr(BudgetSearch, "_reserve", lambda self: 0.2)

    def search_with(profile_time):
        search = BudgetSearch.__new__(BudgetSearch)
        search.stage_fractions, search.compiled_chain_notes, search.time_limit = [1.0, 0.5, 0.2], {}, 0.8
        search.profile_time, search.compiled, search.t_start = profile_time, [], time.perf_counter()
        search._build_compiled_chains()
        return search

    search = search_with(0.1)       # 0.2 s estimated for the first: built; 0.4 + 0.4 + 0.2 > 0.8: not the second
    assert built == [1.0]
    assert search.compiled_chain_note == ("stage fraction 0.5: not tried within time_limit=0.8 s; "
                                          "stage fraction 0.2: not tried within time_limit=0.8 s")
    built.clear()
    search = search_with(0.4)       # 0.8 + 0.2 > 0.8: not even the first
    assert built == [] and search.compiled_chain_note.startswith("stage fraction 1: not tried within time_limit")


@pytest.mark.parametrize("kw, match", [
    (dict(stage_fractions=()), "stage_fractions"),
    (dict(stage_fractions=(1.0, 1.5)), "stage_fractions"),
    (dict(stage_fractions=(0.5, 0.5)), "stage_fractions"),
    (dict(stage_fractions=0.5), "stage_fractions"),
    (dict(stage_solver="greedy"), "stage_solver 'greedy' is unknown; use one of pytorch, memplan, memplan-peak"),
])
def test_bad_stage_options_are_refused(kw, match):
    model = torch.nn.Linear(4, 4)
    with pytest.raises(InputError, match=match):
        BudgetSearch(model, (torch.randn(2, 4),), fractions=(), **kw)       # refused before any work


def test_a_partitioner_budget_per_stage(case):
    """Stages drawn from both compiled chains in one plan (kind chain-mixed): the last block compiled at
    fraction 1 (no recomputation in its backward), the others at 0.5. In the store-all plan the peak is
    in the last block's backward with every block's saved tensors held: 2 x 4NH below fraction 1's (the
    first two blocks save one hidden activation less each), as the all-0.5 chain, while the last block's
    backward recomputes nothing. The measured peak follows the mixed chain's model as the single chains'
    do (the two single chains' store-all peaks, measured in the same way, bracket it), with eager's
    gradients; and the per-stage DP's model time is never above either chain's rotor time."""
    from memplan.baselines.remat_rotor import persistent
    from memplan.baselines.remat_variants import mixed_chain, persistent_variants
    from memplan.models.remat import simulate_remat

    model, x, y, expected, search = case
    full, half = search.compiled_chains[1.0], search.compiled_chains[0.5]
    names = list(full.stage_names)
    last = names.index("2")
    per_stage = tuple(1.0 if l == last else 0.5 for l in range(1, full.L + 2))
    mixed = mixed_chain([full, half], [0] + [0 if f == 1.0 else 1 for f in per_stage])
    ops = tuple(tuple(o) for o in store_all(mixed).schedule.ops)
    predicted = simulate_remat(mixed, list(ops)).peak_memory
    src = {v[0]: v for v in search._mixed_sources() if v[4] == 1}          # whole loss stages by fraction
    stages = [src[f][1][l] for l, f in enumerate(per_stage[:-1])]
    cand = search._mixed_candidate(ops, per_stage, stages, src[per_stage[-1]], predicted, predicted, 0.0, mixed)
    assert cand.kind == "chain-mixed" and "partitioner budget per stage" in cand.label
    assert mixed.wabar[last] == full.wabar[last] and mixed.ob[last] == full.ob[last]
    assert mixed.wabar[names.index("0")] == half.wabar[names.index("0")]
    sa = {sf: search.chain_plan(store_all(ch).peak_memory, compiled=sf).peak for sf, ch in ((1.0, full), (0.5, half))}
    assert abs((sa[1.0] - cand.peak) - 2 * HID) <= 0.01 * 2 * HID, (sa, cand.peak)
    assert abs(cand.peak - predicted) <= 0.02 * predicted
    _assert_grads(search._runner(cand)[0], model, x, y, expected)
    # the DP: at the mixed store-all peak it is at least as fast in the model as rotor on either chain
    plan = persistent_variants([full, half], predicted)
    for ch in (full, half):
        sol = persistent(ch, predicted, slots=500)
        if sol.success:
            assert plan.value <= sol.objective * (1 + 1e-9)


def test_per_stage_fit_lowers_on_excess_and_uses_slack(case, monkeypatch):
    """mixed_fit, as chain_fit: a plan measured over the budget is solved again lower by the excess;
    one that leaves more than 1% of the budget is solved again with that slack added, and the faster
    fitting plan is returned (the per-stage plans measured here are stand-ins: peak and time by limit)."""
    from memplan._compile_budget import Candidate

    _, _, _, _, search = case
    asked = []
    plans = {1000.0: (1010, 1.0), 990.0: (950, 1.0), 1040.0: (995, 0.9)}   # limit -> (measured peak, time)

    def fake(limit):
        asked.append(limit)
        peak, t = plans[limit]
        return Candidate("rotor", float("nan"), peak, t, [t], 0.0, kind="chain-mixed", memory_limit=limit)

    monkeypatch.setattr(search, "mixed_plan", fake)
    monkeypatch.setattr(search, "_moffset", 0.0)
    got = search.mixed_fit(1000)
    assert asked == [1000.0, 990.0, 1040.0]             # over by 10: lower by 10; 50 of slack: up by 50
    assert got.memory_limit == 1040.0 and got.peak <= 1000
    plans[1040.0] = (995, 1.1)                          # the slack plan is slower: the first fitting one
    assert search.mixed_fit(1000).memory_limit == 990.0
