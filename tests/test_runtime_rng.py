"""The executor's RNG replay (models.runtime._Rng): a recomputed stage draws the random numbers its
first run drew, the global generator ends where a plain forward and backward leave it, and a segment
recomputed stage by stage pays its generator reads per segment, not per stage."""
import copy

import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch")

from memplan import remat  # noqa: E402
from memplan.baselines.remat_heuristics import bisection_schedule, sequential_schedule  # noqa: E402
from memplan.models.chain import random_chain  # noqa: E402
from memplan.models.runtime import execute, store_all_ops  # noqa: E402


class Loss(torch.nn.Module):
    def forward(self, y):
        return torch.nn.functional.dropout(y, 0.3).square().sum()      # the loss stage draws too


def _model(L: int, seed: int = 0):
    torch.manual_seed(seed)
    stages = [torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Dropout(0.5), torch.nn.Tanh()) for _ in range(L)]
    return stages, Loss(), torch.randn(3, 6)


def _reference(stages, loss, x, seed):
    """plain autograd on the unsplit model: gradients and the generator's state afterwards"""
    ref = copy.deepcopy(torch.nn.Sequential(*stages))
    torch.manual_seed(seed)
    loss(ref(x.clone().requires_grad_(True))).backward()
    return [p.grad.clone() for p in ref.parameters()], torch.get_rng_state()


def _run(stages, loss, x, seq, seed, **kw):
    for s in stages:
        for p in s.parameters():
            p.grad = None
    torch.manual_seed(seed)
    execute(stages, loss, x, seq, **kw)
    return [p.grad.clone() for s in stages for p in s.parameters()], torch.get_rng_state()


def _check(seq, L, seed, **kw):
    stages, loss, x = _model(L)
    grads, state = _reference(stages, loss, x, seed)
    got, got_state = _run(stages, loss, x, seq, seed, **kw)
    assert all(torch.equal(g, h) for g, h in zip(grads, got))       # the same masks in every recomputation
    assert torch.equal(state, got_state)                              # and the generator where autograd leaves it


@pytest.mark.parametrize("k", [2, 3, 5])
def test_sequential_recomputes_with_the_first_masks(k):
    _check(sequential_schedule(10, k), 10, seed=k)


def test_bisection_and_an_unfused_run_too():
    _check(bisection_schedule(9), 9, seed=4)
    _check(sequential_schedule(9, 3), 9, seed=5, fuse_backward=False)


@settings(max_examples=25, deadline=None)
@given(st.integers(3, 9), st.integers(0, 10_000), st.floats(0.0, 0.9))
def test_any_rotor_sequence_replays_every_stage_exactly(L, seed, f):
    # rotor's sequences on a random chain of the same length: any mix of F_ck, F_none, F_all and B
    c = random_chain(L, seed % 50)
    lo, hi = remat.memory_range(c)
    sol = remat.solve(c, memory=lo + f * (hi - lo), method="rotor", time_limit=10)
    assert sol.success
    _check(sol.schedule, L, seed)


def test_generator_reads_per_segment_not_per_stage(monkeypatch):
    L, k = 40, 4
    stages, loss, x = _model(L)
    calls = {"get": 0, "set": 0}
    get, put = torch.get_rng_state, torch.set_rng_state

    def counting_get():
        calls["get"] += 1
        return get()

    def counting_set(s):
        calls["set"] += 1
        return put(s)

    monkeypatch.setattr(torch, "get_rng_state", counting_get)
    monkeypatch.setattr(torch, "set_rng_state", counting_set)
    execute(stages, loss, x, sequential_schedule(L, k))
    # k - 1 recomputed segments: a save at each one's first stage, a read and a write when its
    # recomputation starts, and the global state written back once per segment (before the next first
    # run or at the end); per stage it would be 4 calls for each of the 30 recomputed stages
    assert calls["get"] <= 2 * (k - 1) and calls["set"] <= 2 * (k - 1), calls
    calls.update(get=0, set=0)
    execute(stages, loss, x, store_all_ops(L))            # nothing recomputed: the generator untouched
    assert calls == {"get": 0, "set": 0}
