"""The loss stage over chunks of tokens with each chunk compiled (models.chunked_loss.ChunkedHeadLoss
with a backend; issue 28): gradients against eager autograd of the whole head + loss, the random masks
of a head with dropout replayed in the backward, the measured peak against the whole compiled loss
stage's by the bytes the shapes say, and the budget search's compiled-stage chain with that loss stage.

Backend ``aot_eager_decomp_partition`` (the partitioner Inductor uses, without its slow code generation).
"""
from __future__ import annotations

import copy

import pytest
from conftest import token_loss_case

torch = pytest.importorskip("torch")

from memplan.models.chunked_loss import ChunkedHeadLoss, TokenCrossEntropy, TokenLoss  # noqa: E402
from memplan.models.compiled import DispatchModeError, compile_stages  # noqa: E402
from memplan.models.memory import TensorMemoryTracker, profiler_peak  # noqa: E402
from memplan.models.networks import example_input, get_model  # noqa: E402
from memplan.models.profiler import classification_loss  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BACKEND = "aot_eager_decomp_partition"


def _graphs(stage) -> int:
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return len(_debug_get_cache_entry_list(stage.compiled_chunk._torchdynamo_orig_callable.__code__))


def _rel(g, r) -> float:
    return float((g - r).norm() / r.norm())


@pytest.mark.parametrize("head_kind,in_forward", [("linear", False), ("linear", True), ("norm+linear", False)])
def test_compiled_chunks_give_the_whole_stages_loss_and_gradients(head_kind, in_forward):
    """Uneven chunks (10 tokens in 4: sizes 3, 3, 2, 2, two graphs), ignored targets, a linear head
    (the loss compiled on each chunk's logits, the weight gradient added in place; or every gradient
    taken in the forward and scaled in the backward) and one that is not (layer norm + linear: the
    head and the loss compiled together): loss, input gradient and parameter gradients (the
    backward's incoming gradient 3, not 1) equal eager autograd's of the whole stage; the chunks ran
    compiled code."""
    targets, loss, x0 = token_loss_case()
    head = (torch.nn.Linear(8, 50) if head_kind == "linear"
            else torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.Linear(8, 50)))
    ref_head = copy.deepcopy(head)
    x = x0.clone().requires_grad_(True)
    whole = loss(ref_head(x), targets)
    (3 * whole).backward()
    stage = ChunkedHeadLoss(head, loss, 4, targets=lambda: (targets,), backend=BACKEND, grad_in_forward=in_forward)
    assert (stage.compiled_linear is head) == (head_kind == "linear")
    for p in head.parameters():              # gradients accumulate into what is there
        p.grad = torch.ones_like(p)
    xc = x0.clone().requires_grad_(True)
    got = stage(xc)
    (3 * got).backward()
    assert float(got.detach()) == pytest.approx(float(whole.detach()), rel=1e-6)
    assert _rel(xc.grad, x.grad) <= 1e-5
    for (name, p), r in zip(head.named_parameters(), ref_head.parameters()):
        assert _rel(p.grad - 1, r.grad) <= 1e-5, name
    assert _graphs(stage) == 2               # chunks of 3 and of 2 tokens
    # compiled code does not run under a dispatch mode: refused, as compiled stages are
    with pytest.raises(DispatchModeError, match="profiler"):
        with TensorMemoryTracker():
            stage(x0.clone().requires_grad_(True))


def test_a_head_with_dropout_replays_its_masks_in_the_backward():
    """A head with dropout (p = 0.5): the backward's recomputation draws the masks the forward drew.
    Reference: the same compiled chunk function run from the same random state, chunk after chunk,
    in one autograd graph (the masks of the forward) and back-propagated at once. Without the replay
    the backward would draw other masks and the gradients would differ from the reference's by
    O(1); the masks are really drawn (the loss differs from the head without dropout's)."""
    torch.manual_seed(1)
    loss = TokenCrossEntropy()
    targets = torch.randint(0, 40, (2, 12))
    head = torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Linear(8, 40)).train()
    stage = ChunkedHeadLoss(head, loss, 3, targets=lambda: (targets,), backend=BACKEND)
    x0 = torch.randn(2, 12, 8)
    state = torch.get_rng_state()
    xc = x0.clone().requires_grad_(True)
    got = stage(xc)
    got.backward()
    grads = [p.grad.clone() for p in head.parameters()]
    for p in head.parameters():
        p.grad = None
    torch.set_rng_state(state)
    xr = x0.clone().requires_grad_(True)
    total = sum(stage.compiled_chunk(xr[:, lo:lo + 4], targets[:, lo:lo + 4]) for lo in (0, 4, 8))
    ref = total / targets.numel()
    ref.backward()
    assert float(got.detach()) == pytest.approx(float(ref.detach()), rel=1e-6)
    assert _rel(xc.grad, xr.grad) <= 1e-5
    for g, p in zip(grads, head.parameters()):
        assert _rel(g, p.grad) <= 1e-5
    no_dropout = loss(head[1](x0), targets).detach()
    assert abs(float(no_dropout) - float(got.detach())) > 1e-3


def test_peak_below_the_whole_compiled_stage_by_the_bytes_of_the_shapes():
    """N = B*T tokens, vocabulary V, float32. The whole loss stage compiled (head + cross-entropy in one
    graph) holds, in its backward, the log-softmax its forward saved, its gradient and the logits'
    gradient of every token: 3 N V floats. In 4 compiled chunks of n = N/4 tokens with this backend (no
    fusion): one chunk's logits, the log-softmax its compiled forward saved, its gradient and the
    logits' gradient: 4 n V. The measured peaks of forward + backward (gradients already allocated)
    differ by 3 N V - 4 n V floats, to 2% (what does not scale with the logits: the input's gradient,
    a chunk's small temporaries). With the gradients taken in the forward, the head's weight and bias
    gradients (V C + V floats) are held besides, to 5%."""
    B, T, C, V = 2, 32, 16, 4000
    torch.manual_seed(2)
    loss = TokenCrossEntropy()
    targets = torch.randint(0, V, (B, T))
    head = torch.nn.Linear(C, V)

    class HeadLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = head

        def forward(self, a):
            return loss(self.head(a), targets)

    _, whole = compile_stages([], HeadLoss(), BACKEND)
    chunked = ChunkedHeadLoss(head, loss, 4, targets=lambda: (targets,), backend=BACKEND)
    fused = ChunkedHeadLoss(head, loss, 4, targets=lambda: (targets,), backend=BACKEND, grad_in_forward=True)
    x0 = torch.randn(B, T, C)

    def run(stage):
        stage(x0.clone().requires_grad_(True)).backward()

    peaks = {}
    for name, stage in (("whole", whole), ("chunked", chunked), ("fused", fused)):
        run(stage)                           # compiles; the gradients exist before the window
        _, peaks[name], _ = profiler_peak(lambda: run(stage))
    N, n = B * T, B * T // 4
    expected = 4 * (3 * N * V - 4 * n * V)
    assert peaks["whole"] - peaks["chunked"] == pytest.approx(expected, rel=0.02)
    assert peaks["whole"] >= 4 * 3 * N * V
    assert peaks["fused"] - peaks["chunked"] == pytest.approx(4 * (V * C + V), rel=0.05)


def test_a_loss_without_chunk_targets_is_not_compiled():
    class Sum(TokenLoss):
        def token_sum(self, chunk, lo, hi, shape):
            return chunk.sum()

        def token_count(self, shape):
            return 1.0

    assert TokenCrossEntropy().compilable and classification_loss().compilable and not Sum().compilable
    with pytest.raises(TypeError, match="chunk_targets"):
        ChunkedHeadLoss(torch.nn.Linear(2, 3), Sum(), 2, backend=BACKEND)
    with pytest.raises(ValueError, match="grad_in_forward"):       # a linear head, compiled, only
        ChunkedHeadLoss(torch.nn.Linear(2, 3), TokenCrossEntropy(), 2, grad_in_forward=True)


# a vocabulary large against the width, so that the whole loss stage's backward is the chain's floor
B, T, C, V = 2, 32, 16, 4000


def test_budget_search_plans_compiled_chunks_below_the_whole_compiled_floor():
    """The search's compiled-stage chain gets the chunked loss stage (the eager chain's chunk count;
    the head is linear: the logits recomputed in the backward, and the gradients taken in the
    forward): its least memory is below the whole compiled loss stage's, a measured candidate of kind
    chain-compiled with the chunks in its label reaches below the whole compiled loss stage chain's
    least memory (its loss stage alone holds 3 N V floats there), and at a budget between the two the
    compiled chain's fitting plan and the search's answer measure within it; every compiled chain
    plan measured trains (gradients equal eager autograd's)."""
    from memplan._compile_budget import BudgetSearch

    torch.manual_seed(0)
    model = get_model("gpt2", n_layer=1, n_embd=C, n_head=2, vocab=V, n_ctx=T, dropout=0.0).train()
    x = example_input("gpt2", B, (T,), vocab=V)
    ref = copy.deepcopy(model)
    classification_loss()(ref(x)).backward()
    search = BudgetSearch(model, (x,), loss_fn=classification_loss(), fractions=(), repeats=1, backend=BACKEND)
    k = search.compiled_loss_chunks
    assert k == search.loss_chunks > 1 and search.compiled_loss_chunks_note == ""
    assert [(v[0], v[1].grad_in_forward) for v in search._cvariants()[1:]] == [(k, False), (k, True)]
    whole_min = search._cchain[4]
    assert search.compiled_chain_minimum < whole_min
    # the whole compiled loss stage's floor: what its backward holds, 3 N V floats of logits
    assert whole_min >= 4 * 3 * B * T * V
    search.minimum()
    least = min((c for c in search.measured() if c.kind == "chain-compiled"), key=lambda c: c.peak)
    assert least.loss_chunks == k and least.label.startswith("chain rotor, compiled stages")
    assert f"loss in {k} chunks" in least.label
    assert least.peak < whole_min        # no plan of the whole compiled loss stage's chain gets there
    budget = int((whole_min + least.peak) / 2)
    fit = search.chain_fit(budget, compiled=True)
    assert fit is not None and fit.kind == "chain-compiled" and fit.loss_chunks == k and fit.peak <= budget
    step = search.under(budget)
    assert step.peak <= budget
    for cand in (c for c in search.measured() if c.kind == "chain-compiled"):
        for p in model.parameters():
            p.grad = None
        runner, _ = search._runner(cand)
        runner(x)
        for (name, p), r in zip(model.named_parameters(), ref.parameters()):
            assert _rel(p.grad, r.grad) <= 1e-5, (cand.label, name)
    for p in model.parameters():
        p.grad = None


def test_a_budget_per_stage_with_the_chunked_loss_stage():
    """With stage fractions 1 and 0.5, the per-stage choice also draws the loss stage from the compiled
    chunked ones: a plan whose transformer block runs compiled at 0.5, its other stages at 1 and its
    loss stage in chunks trains (gradients as eager's), measures what the mixed chain's model says
    (2%), and reaches below the whole compiled loss stage's floor."""
    from memplan._compile_budget import BudgetSearch
    from memplan.baselines.remat_heuristics import store_all
    from memplan.baselines.remat_rotor import persistent
    from memplan.baselines.remat_variants import mixed_chain

    torch.manual_seed(0)
    model = get_model("gpt2", n_layer=1, n_embd=C, n_head=2, vocab=V, n_ctx=T, dropout=0.0).train()
    x = example_input("gpt2", B, (T,), vocab=V)
    ref = copy.deepcopy(model)
    classification_loss()(ref(x)).backward()
    search = BudgetSearch(model, (x,), loss_fn=classification_loss(), fractions=(), repeats=1, backend=BACKEND,
                          stage_fractions=(1.0, 0.5))
    src = search._mixed_sources()
    k = search.compiled_loss_chunks
    assert [(v[0], v[4], v[5]) for v in src] == [(1.0, 1, False), (0.5, 1, False), (1.0, k, False), (1.0, k, True)]
    chunked = 2                                           # the chunked loss stage, logits recomputed
    names = list(src[0][3].stage_names)
    block = names.index("blocks.0")
    assign = [0] + [1 if l == block else 0 for l in range(1, len(names) - 1)] + [chunked]
    mixed = mixed_chain([v[3] for v in src], assign)
    sol = store_all(mixed)
    lo_sol = persistent(mixed, float(search._cchain[4]) * 0.999, slots=500)           # below the whole floor
    assert lo_sol.success
    per_stage = tuple(src[v][0] for v in assign[1:])
    stages = [src[v][1][l] for l, v in enumerate(assign[1:-1])]
    for s in (sol, lo_sol):
        ops = tuple(tuple(o) for o in s.schedule.ops)
        cand = search._mixed_candidate(ops, per_stage, stages, src[chunked], s.memory_limit, s.peak_memory, 0.0,
                                       mixed)
        assert cand.loss_chunks == k and f"loss in {k} chunks" in cand.label and "1 at 0.5" in cand.label
        assert abs(cand.peak - s.peak_memory) <= 0.02 * s.peak_memory, (cand.peak, s.peak_memory)
        for p in model.parameters():
            p.grad = None
        search._runner(cand)[0](x)
        for (name, p), r in zip(model.named_parameters(), ref.parameters()):
            assert _rel(p.grad, r.grad) <= 1e-5, (cand.label, name)
    assert cand.peak < search._cchain[4]
    # the per-stage DP's least memory: a plan there, none 1% below, and not above any source's least
    from memplan.baselines.remat_min_memory import min_memory
    from memplan.baselines.remat_variants import persistent_variants

    least = search.mixed_minimum()
    chains = [v[3] for v in src]
    assert persistent_variants(chains, least) is not None and persistent_variants(chains, 0.99 * least) is None
    # (the DP rounds sizes up to 1/500 of the limit: a few values held at once, within 1%)
    assert least <= min(min_memory(c) for c in chains) * 1.01
