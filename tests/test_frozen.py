"""Fine-tuning with frozen first layers (a frozen backbone under a trained head): where the step asks no
gradient of the network input, nothing needs a gradient below the first trained layer and plain
autograd records no graph there. The chain folds those stages into the first trained one
(``LinearizedModel.fold_frozen_prefix``), and the executor and the profiler run a frozen first part
without a graph (``models.runtime.frozen_prefix``)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memplan.baselines.remat_heuristics import store_all_schedule  # noqa: E402
from memplan.models.graph import linearize_model  # noqa: E402
from memplan.models.memory import step_peak  # noqa: E402
from memplan.models.profiler import profile_chain  # noqa: E402
from memplan.models.remat import simulate_remat, store_all_ops, turn_ops  # noqa: E402
from memplan.models.runtime import execute, frozen_prefix  # noqa: E402

F = torch.nn.functional


def _mlp(frozen: int):
    torch.manual_seed(0)
    m = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
                              for _ in range(5)], torch.nn.Linear(64, 10))
    for p in m[:frozen].parameters():
        p.requires_grad_(False)
    return m


X, Y = torch.randn(32, 64), torch.randint(0, 10, (32,))


def _loss(out):
    return F.cross_entropy(out, Y)


def _offsets(frozen: int, fold: bool) -> dict:
    """Store-all's peak less plain autograd's, held and not, with the chain's L."""
    m = _mlp(frozen)
    lm = linearize_model(m, X, _loss)
    lm = lm.fold_frozen_prefix() if fold else lm
    ls = lm.loss_stage(_loss)
    params = [p for p in m.parameters() if p.requires_grad]
    ag = step_peak(lambda: _loss(m(X)).backward(), params, "cpu")
    out = {"L": lm.L}
    for hold in (True, False):
        out[hold] = step_peak(lambda: execute(lm.stages, ls, X, store_all_ops(lm.L), input_grad=False, hold=hold),
                              params, "cpu") - ag
    return out


def test_folded_frozen_layers_cost_what_autograd_pays():
    """Store-all over the folded chain is as far from plain autograd as on the model without frozen
    layers (the held model's own constant), whatever the number of frozen blocks; unfolded, each frozen
    activation was held until its empty backward step (the offset grew with every frozen block)."""
    base = _offsets(0, fold=True)
    for frozen in (2, 4):
        got = _offsets(frozen, fold=True)
        assert got["L"] == base["L"] - 3 * frozen        # three stages a block (linear, gelu, linear) folded
        assert got[True] == base[True] and got[False] == base[False], (frozen, got, base)
        before = _offsets(frozen, fold=False)
        assert before[True] >= base[True] + frozen * 32 * 128 * 4    # at least a hidden activation a block held
    assert _offsets(5, fold=True)["L"] == 1                          # all frozen: one stage, the head in the loss


def test_frozen_stages_run_without_a_graph_and_the_chain_predicts_it():
    """Unfolded, the executor and the profiler agree: the frozen stages keep only their outputs (no
    graph), each plan's measured peak is its replay's, and the gradients are autograd's."""
    m = _mlp(3)
    lm = linearize_model(m, X, _loss)
    ls = lm.loss_stage(_loss)
    k = frozen_prefix(lm.stages)
    # the cut rule merges the frozen blocks' cuts (autograd saves nothing there): some stages, all frozen
    assert k >= 1 and any(p.requires_grad for p in lm.stages[k].parameters())
    assert not any(p.requires_grad for s in lm.stages[:k] for p in s.parameters())
    params = [p for p in m.parameters() if p.requires_grad]
    _loss(m(X)).backward()
    ref = [p.grad.clone() for p in params]
    chain = profile_chain(lm.stages, X, ls, input_grad=False, repeats=1)
    assert all(chain.wabar[l] == chain.wa[l] for l in range(1, k + 1))     # nothing saved by a frozen stage
    assert all(chain.wd[l] == 0 for l in range(0, k + 1))                  # no gradient below stage k + 1
    for sched in (store_all_schedule(chain), turn_ops(lm.L)):
        ops = sched.ops if hasattr(sched, "ops") else sched
        for p in params:
            p.grad = None
        res = execute(lm.stages, ls, X, ops, input_grad=False, measure_memory=True)
        assert res.peak_memory == pytest.approx(simulate_remat(chain, ops).peak_memory, abs=8)
        assert all(torch.equal(p.grad, g) for p, g in zip(params, ref))
