"""The loss stage over chunks of tokens (models.chunked_loss, issue 28): gradients against eager
autograd of the whole head + loss, the executed peak against the simulator's prediction on the
profiled chain, and the chain's least memory lowered by the bytes the shapes say (the logits, their
log-softmax and their gradients of all tokens at once against those of one chunk)."""
from __future__ import annotations

import copy
import time

import pytest
from conftest import token_loss_case

torch = pytest.importorskip("torch")

from memplan.baselines.remat_min_memory import min_memory_of  # noqa: E402
from memplan.models.chunked_loss import (ChunkedHeadLoss, TokenCrossEntropy, chunk_bounds,  # noqa: E402
                                         chunked_loss_check, linear_head)
from memplan.models.graph import linearize_model  # noqa: E402
from memplan.models.networks import example_input, get_model  # noqa: E402
from memplan.models.profiler import classification_loss, profile_chain  # noqa: E402
from memplan.models.remat import simulate_remat  # noqa: E402
from memplan.models.runtime import execute  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# a vocabulary large against the width, so that the loss stage's backward is the chain's floor
B, T, C, V = 2, 32, 16, 4000
GPT = dict(n_layer=1, n_embd=C, n_head=2, vocab=V, n_ctx=T, dropout=0.0)


def _assert_grads_close(got, ref, rtol=1e-5):
    for (name, g), r in zip(got, ref):
        assert g is not None, name
        err = float((g - r).norm() / r.norm())
        assert err <= rtol, f"{name}: relative error {err:.2e}"


@pytest.mark.parametrize("bias", [False, True])
def test_chunked_stage_gradients_equal_eager_both_paths(bias):
    """Uneven chunks, ignored targets (the mean's denominator is the counted tokens, not the tokens),
    a linear head (in-place weight gradient) and a head that is not one (layer norm + linear, through
    autograd): loss, input gradient and parameter gradients equal the whole stage's."""
    targets, loss, x0 = token_loss_case()
    heads = {"linear": torch.nn.Linear(8, 50, bias=bias),
             "norm+linear": torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.Linear(8, 50, bias=bias))}
    assert linear_head(heads["linear"]) is heads["linear"] and linear_head(heads["norm+linear"]) is None
    for name, head in heads.items():
        ref_head = copy.deepcopy(head)
        x = x0.clone().requires_grad_(True)
        whole = loss(ref_head(x), targets)
        whole.backward()
        xc = x0.clone().requires_grad_(True)
        for p in head.parameters():          # gradients accumulate into what is there
            p.grad = torch.ones_like(p)
        stage = ChunkedHeadLoss(head, loss, 4, targets=lambda: (targets,))
        got = stage(xc)
        got.backward()
        assert float(got.detach()) == pytest.approx(float(whole.detach()), rel=1e-6), name
        _assert_grads_close([("x", xc.grad)], [x.grad])
        _assert_grads_close([(n, p.grad - 1) for n, p in head.named_parameters()],
                            [p.grad for p in ref_head.parameters()])


def test_chunk_bounds_and_refusals():
    assert chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert chunk_bounds(5, 5) == [(k, k + 1) for k in range(5)]
    with pytest.raises(ValueError, match="between 1 and the 3 tokens"):
        chunk_bounds(3, 4)
    # a head that mixes tokens (a sum over them) is refused by the check
    loss = TokenCrossEntropy()
    targets = torch.randint(0, 6, (2, 8))

    class Mix(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 6)

        def forward(self, x):
            return self.lin(x + x.mean(1, keepdim=True))

    head = Mix()
    whole = lambda x: loss(head(x), targets)  # noqa: E731
    why = chunked_loss_check(whole, ChunkedHeadLoss(head, loss, 2, targets=lambda: (targets,)), torch.randn(2, 8, 4))
    assert "differs" in why
    with pytest.raises(TypeError, match="TokenLoss"):
        ChunkedHeadLoss(head, torch.nn.functional.cross_entropy, 2)


@pytest.fixture(scope="module")
def tiny_gpt2(one_torch_thread):
    torch.manual_seed(0)
    model = get_model("gpt2", **GPT).train()
    x = example_input("gpt2", B, (T,), vocab=V)
    ce = classification_loss()
    ref = copy.deepcopy(model)
    ce(ref(x)).backward()
    chains = {}
    for k in (1, 4):
        m = copy.deepcopy(model)
        lm = linearize_model(m, x, ce)
        assert lm.head is not None
        ls = lm.loss_stage(ce, chunks=k)
        chains[k] = (m, lm, ls, profile_chain(lm.stages, x, ls, repeats=1, names=lm.names, input_grad=False))
    return x, ref, chains


def test_executed_plans_replay_the_simulated_peak_and_train(tiny_gpt2):
    """The least-memory sequence of the chunked chain, and rotor's plan halfway to store-all, run by
    the executor: peak within 1% of the simulator's, gradients equal eager autograd's."""
    from memplan.baselines.remat_rotor import persistent
    from memplan.baselines.remat_heuristics import store_all

    x, ref, chains = tiny_gpt2
    m, lm, ls, chain = chains[4]
    lo = min_memory_of(chain)
    mid = persistent(chain, (lo.value + store_all(chain).peak_memory) / 2)
    assert mid.success
    for sched in (lo.schedule, mid.schedule):
        for p in m.parameters():
            p.grad = None
        res = execute(lm.stages, ls, x, sched.ops, input_grad=False, measure_memory=True)
        sim = simulate_remat(chain, sched)
        assert res.peak_memory == pytest.approx(sim.peak_memory, rel=0.01)
        _assert_grads_close([(n, p.grad) for n, p in m.named_parameters()], [p.grad for p in ref.parameters()])
    # the least-memory plan's peak is the loss stage's backward
    rep = simulate_remat(chain, lo.schedule)
    assert rep.memory_during[lo.schedule.ops.index(("B", chain.L + 1))] == rep.peak_memory


def test_least_memory_lowered_by_the_bytes_of_the_shapes(tiny_gpt2):
    """Without chunks the loss stage's backward holds the log-softmax the cross-entropy saved, its
    gradient and the logits' gradient of all N = B*T tokens: 3 N V float32. With 4 chunks of n = N/4
    tokens: one chunk's recomputed logits, log-softmax and their two gradients (4 n V), plus delta^L
    (N C), allocated before the first chunk. The least memory falls by the difference (both floors
    are the loss stage, over the same stored a^0 and a^L; without chunks its simulated forward, abar
    (the log-softmax) plus o_f (the logits and log-softmax of the forward without grad), ties with
    its backward to a few bytes)."""
    _, _, chains = tiny_gpt2
    N, n = B * T, B * T // 4
    expected = 4 * (3 * N * V - (4 * n * V + N * C))
    m1, m4 = min_memory_of(chains[1][3]), min_memory_of(chains[4][3])
    for mm, chain in ((m1, chains[1][3]), (m4, chains[4][3])):
        rep = simulate_remat(chain, mm.schedule)
        loss_ops = [i for i, op in enumerate(mm.schedule.ops) if op[1] == chain.L + 1]
        assert max(rep.memory_during[i] for i in loss_ops) == rep.peak_memory
    assert m1.value - m4.value == pytest.approx(expected, abs=256)


def _assert_step_trains(step, model, x, ref) -> None:
    """``step(x)`` from no gradients gives eager autograd's (``ref``'s); the gradients are cleared after."""
    for p in model.parameters():
        p.grad = None
    step(x)
    _assert_grads_close([(n, p.grad) for n, p in model.named_parameters()], [p.grad for p in ref.parameters()])
    for p in model.parameters():
        p.grad = None


def test_budget_search_chooses_chunks_and_the_least_plan_trains(tiny_gpt2):
    """BudgetSearch's chain plans chunk the loss where it lowers the least memory: the chunk count is
    in the candidate's label, the least plan's measured peak is below the unchunked chain's least
    memory, and its gradients equal eager autograd's. A chain whose loss is not a TokenLoss keeps its
    whole loss stage."""
    from memplan._compile_budget import BudgetSearch

    x, ref, chains = tiny_gpt2
    model = chains[1][0]
    search = BudgetSearch(model, (x,), loss_fn=classification_loss(), fractions=(), repeats=1)
    k = search.loss_chunks
    assert k > 1 and search.loss_chunks_note == ""
    assert search.loss_chunk_minima[k] < search.loss_chunk_minima[1]
    least = search.minimum()
    assert least.loss_chunks == k and f"loss in {k} chunks" in least.label
    assert least.peak < search.loss_chunk_minima[1]
    step = search.under(least.peak)
    _assert_step_trains(step, model, x, ref)

    def mean_loss(out):          # the same loss, but not a TokenLoss: nothing to chunk
        return classification_loss()(out)

    other = BudgetSearch(model, (x,), loss_fn=mean_loss, fractions=(), repeats=1)
    assert other.loss_chunks == 1 and "TokenLoss" in other.loss_chunks_note
    assert other.chain_minimum == pytest.approx(search.loss_chunk_minima[1], rel=0.01)


def test_a_budget_between_gets_the_fewest_chunks_that_reach_it(tiny_gpt2):
    """Every chunk count on the way down to the least-memory one (each lowering the chain's least
    memory by 1% or more) is a chain of its own: at a budget between two counts' least memories rotor
    takes the fastest chain that reaches it, never slower in the model than the least-memory chain's
    plan. With one count per chain the fine-tuned GPT-2 ran its 64-chunk plan, 2.5x slower, at every
    budget between the whole loss stage's least memory and the 64 chunks'. The plan trains."""
    from memplan._compile_budget import BudgetSearch
    from memplan.baselines.remat_rotor import persistent

    x, ref, chains = tiny_gpt2
    model = chains[1][0]
    search = BudgetSearch(model, (x,), loss_fn=classification_loss(), fractions=(), compiled_stages=False,
                          repeats=1)
    minima, k = search.loss_chunk_minima, search.loss_chunks
    expected, prev = [1], minima[1]
    for c in sorted(minima):
        if 1 < c < k and minima[c] <= prev * 0.99:
            expected.append(c)
            prev = minima[c]
    variants = search._variants()
    assert [v[0] for v in variants] == expected + [k] and len(variants) >= 3
    # more chunks, less memory: each chain reaches below the one before it
    lows = [lo for _, _, _, lo in variants]
    assert all(b < a for a, b in zip(lows, lows[1:]))
    budget = (variants[1][3] + variants[0][3]) / 2          # the fewest chunks reach it, the whole stage not
    solved = {c: persistent(chain, budget) for c, _, chain, _ in variants}
    feasible = {c: s.objective for c, s in solved.items() if s.success}
    assert 1 not in feasible and {expected[1], k} <= set(feasible)
    cand = search.chain_plan(budget)
    assert cand.loss_chunks == min(feasible, key=feasible.get)
    assert feasible[cand.loss_chunks] <= feasible[k]
    step = search.under(max(budget, cand.peak))
    _assert_step_trains(step, model, x, ref)
    # past the search's time limit the fewer counts are not profiled, and the note names them
    search._pending_chunks, search._chunked_fewer = expected[1:], []
    search.time_limit, search.t_start = 1.0, time.perf_counter() - 10
    search._build_fewer_chunks()
    assert [v[0] for v in search._variants()] == [1, k]
    assert search.loss_chunks_note == (f"{', '.join(map(str, expected[1:]))} chunks not tried within "
                                       "time_limit=1 s")
