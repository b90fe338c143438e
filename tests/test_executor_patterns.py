"""The executors other than the single-tensor eager chain, on the model patterns users write (batch norm
in training mode, dropout, in-place ReLU, a weight used by two distant stages, frozen layers in the
middle, a block applied twice), each plan that recomputes run and compared with eager autograd on a deep
copy: the loss, the gradients, and the parameters and buffers after the step(s).

- multi-tensor cuts (``linearize_model(cuts="multi")``, :func:`models.runtime.execute` with resident
  tensors): a U-Net-like model whose skips cross several stages. Fixed here: with
  ``nn.ReLU(inplace=True)`` a cut could fall between a batch norm and the ReLU that overwrites its output,
  and the stage's first operation wrote its input, a leaf (``profile_chain`` raised "a leaf Variable that
  requires grad is being used in an in-place operation"; a no-grad forward would have overwritten the
  a^{l-1} its recomputation reads). ``linearize_model`` keeps a value written in place inside its
  writer's stage (:func:`models.graph.written_in_place`), as ``cuts="saved"`` merges such cuts;
- the offloading executors (``BudgetSearch(offload="emulated")``'s chain-offload and chain-joint
  candidates, :mod:`models.runtime_offload`): statistics and masks as eager's (no fix needed);
- compiled stages (``chain-compiled``) whose batch norm is reused by two stages, one recomputed and one
  run once. Fixed here: the recomputed stage's statistics were put back from a copy taken after its
  first run, which lost the later stage's update (``num_batches_tracked`` 1 where eager's is 2, the
  running mean off by 1e-3); now copied before each replay. Over several steps with ``optimizer.step``
  and ``load_state_dict`` between them the statistics stay eager's."""
from __future__ import annotations

import copy
import dataclasses

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_torch_thread")]

nn = torch.nn
F = torch.nn.functional


def _forwards_repeat(ops) -> bool:
    fw = [l for op, l in ops if op != "B"]
    return len(fw) > len(set(fw))


def _assert_like(model, ref, loss, ref_loss, *, exact=False, grads=True):
    """Loss, gradients (bit-identical with ``exact``), parameters and buffers of ``model`` as ``ref``'s."""
    assert float(loss) == pytest.approx(float(ref_loss), rel=1e-5, abs=1e-7)
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7, msg=n)
        if not grads:
            continue
        assert (p.grad is None) == (q.grad is None), n
        if p.grad is not None:
            if exact:
                assert torch.equal(p.grad, q.grad), n
            else:
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=n)
    for (n, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-7, msg=f"buffer {n}")


class _UNetish(nn.Module):
    """Three encoder levels whose outputs (after BN and ReLU, in place or not) are read by the decoder:
    skips crossing several cuts; dropout between levels, the second encoder convolution's weight used
    again near the end (tied), the third encoder level and the bottleneck frozen."""

    def __init__(self, inplace: bool):
        super().__init__()
        c = 4
        self.e1, self.b1 = nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c)
        self.e2, self.b2 = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
        self.e3, self.b3 = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
        self.m, self.bm = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
        self.d3, self.d2, self.d1 = (nn.Conv2d(2 * c, c, 3, padding=1) for _ in range(3))
        self.head = nn.Conv2d(c, 5, 1)
        self.drop = nn.Dropout(0.3)
        self.act = nn.ReLU(inplace=inplace)
        for p in [*self.e3.parameters(), *self.m.parameters()]:
            p.requires_grad_(False)

    def forward(self, x):
        s1 = self.act(self.b1(self.e1(x)))
        s2 = self.act(self.b2(self.e2(self.drop(s1))))
        s3 = self.act(self.b3(self.e3(s2)))
        h = self.act(self.bm(self.m(self.drop(s3))))
        h = self.drop(torch.tanh(self.d3(torch.cat([h, s3], 1))))
        h = torch.tanh(self.d2(torch.cat([h, s2], 1)))
        h = F.conv2d(h, self.e2.weight, self.e2.bias, padding=1)        # tied with e2, far apart
        h = torch.tanh(self.d1(torch.cat([h, s1], 1)))
        return self.head(h).permute(0, 2, 3, 1)


def _sq(out):
    return out.square().mean()


@pytest.mark.parametrize("inplace", [True, False], ids=["relu-inplace", "relu"])
def test_multi_cut_plans_train_as_eager(inplace):
    """Multi-tensor cuts on a U-Net-like model (BN, dropout, tied weights, frozen middle): store-all,
    sequential and rotor's least-memory and an intermediate plan give eager's loss, gradients (the same
    dropout masks) and running statistics, and peak where the simulator says, to the byte. With
    ``nn.ReLU(inplace=True)`` the cuts had put a BN's output and the in-place ReLU writing it in two
    stages: profiling the chain raised (the ReLU wrote its stage's input, a leaf that requires grad)."""
    import memplan
    from memplan.baselines.remat_heuristics import sequential_schedule, store_all_schedule
    from memplan.models.graph import linearize_model, written_in_place
    from memplan.models.profiler import profile_chain
    from memplan.models.remat import simulate_remat
    from memplan.models.runtime import execute

    torch.manual_seed(0)
    model = _UNetish(inplace).train()
    x = torch.randn(4, 3, 8, 8)
    lm = linearize_model(model, x, _sq, cuts="multi", max_nodes=1)
    assert lm.residency.resident and lm.L >= 8
    if inplace:
        written = written_in_place(lm.captured)
        assert written
        for g in lm.groups:                       # a value written in place and its writer: one stage
            for v in set(g) & written:
                assert all(u in g for u in lm.captured.graph.successors(v)), v
    ls = lm.loss_stage(_sq)
    chain = profile_chain(lm.stages, x, ls, repeats=1, names=lm.names)
    init = copy.deepcopy(model.state_dict())
    ref = copy.deepcopy(model)
    torch.manual_seed(3)
    ref_loss = _sq(ref(x))
    ref_loss.backward()
    lo, hi = memplan.remat.memory_range(chain)
    seqs = [store_all_schedule(chain), sequential_schedule(chain, 2)] + [
        memplan.remat.solve(chain, memory=lo + f * (hi - lo) + 1, method="rotor", time_limit=10).schedule
        for f in (0.0, 0.5)]
    assert all(_forwards_repeat(s.ops) for s in seqs[1:])
    for seq in seqs:
        model.load_state_dict(init)
        for p in model.parameters():
            p.grad = None
        torch.manual_seed(3)
        r = execute(lm.stages, ls, x, seq, measure_memory=True)
        _assert_like(model, ref, r.loss, ref_loss)
        assert r.peak_memory == simulate_remat(chain, seq).peak_memory


class _BnDropMLP(nn.Module):
    """Linear, BN, ReLU (in place), dropout blocks; the first block's linear reused after the fifth
    (a weight tied across distant stages); the third block frozen."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(32, 64)
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(64, 64), nn.BatchNorm1d(8), nn.ReLU(inplace=True),
                                                   nn.Dropout(0.3)) for _ in range(6)])
        self.out = nn.Linear(64, 8)
        for p in self.blocks[2].parameters():
            p.requires_grad_(False)

    def forward(self, x):
        h = self.inp(x)
        for i, b in enumerate(self.blocks):
            h = b(h)
            if i == 4:
                h = F.linear(h, self.blocks[0][0].weight, self.blocks[0][0].bias)
        return self.out(h)


def test_offloading_and_joint_plans_train_as_eager():
    """``offload="emulated"``: paper 001's offloading plans and the joint DP's (recomputing and
    offloading, its least-memory plan included) on a model with batch norms, dropout, in-place ReLU, a
    tied weight and a frozen block: eager's loss, gradients (the recomputations replay the masks) and
    running statistics after the step."""
    from memplan._compile_budget import BudgetSearch
    from memplan.models.offload import min_feasible_memory, peak_memory_no_offload

    torch.manual_seed(0)
    model = _BnDropMLP().train()
    x, y = torch.randn(16, 8, 32), torch.randn(16, 8, 8)
    search = BudgetSearch(model, (x,), loss_fn=F.mse_loss, example_targets=(y,), fractions=(), repeats=1,
                          compiled_stages=False, offload="emulated")
    # the chain's times by formula (as tests/test_compile_budget.py): schedules independent of this machine
    stages, loss_stage, holder, chain, views, sf = search._offload
    uf = 1e-3 * (1.0 + chain.wabar / 1e5)
    uf[0] = 0.0
    chain = dataclasses.replace(chain, uf=uf, ub=2 * uf)
    search._offload = (stages, loss_stage, holder, chain, views, sf)
    search.bandwidth = float(chain.wabar[1:].sum() / chain.store_all_time())
    lo, hi = min_feasible_memory(chain), peak_memory_no_offload(chain)
    cands = [search.offload_fit(lo + 0.3 * (hi - lo))]
    jlo, jhi, _ = search._transfer_solver("chain-joint", chain)
    cands += [search.joint_fit(jlo + f * (jhi - jlo) + 1) for f in (0.05, 0.3)]
    assert all(c is not None and c.offloaded for c in cands)
    assert [c.kind for c in cands] == ["chain-offload", "chain-joint", "chain-joint"]
    assert all(_forwards_repeat(c.ops[0]) for c in cands[1:])
    init = copy.deepcopy(model.state_dict())
    for c in cands:
        model.load_state_dict(init)
        for p in model.parameters():
            p.grad = None
        ref = copy.deepcopy(model)
        torch.manual_seed(11)
        ref_loss = F.mse_loss(ref(x), y)
        ref_loss.backward()
        step, _ = search._runner(c)
        torch.manual_seed(11)
        _assert_like(model, ref, step(x, y), ref_loss)


class _Reused(nn.Module):
    """A Linear-BN-ReLU block applied twice, at the start and the end: its batch norm is in two stages."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(32, 64)
        self.shared = nn.Sequential(nn.Linear(64, 64), nn.BatchNorm1d(8), nn.ReLU())
        self.mid = nn.ModuleList([nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(3)])
        self.out = nn.Linear(64, 8)

    def forward(self, x):
        h = self.shared(self.inp(x))
        for m in self.mid:
            h = m(h)
        return self.out(self.shared(h))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager-stages", "compiled-stages"])
def test_a_batch_norm_reused_by_two_stages_counts_both_uses(compiled):
    """The least-memory plan recomputes the first use of the block and runs the second once. With
    compiled stages the recomputed stage's statistics were put back from a copy of its first run's,
    dropping the second use's update (num_batches_tracked 1, eager's 2). Three steps with
    ``optimizer.step`` between them, ``load_state_dict`` (in place, then ``assign=True``: new buffer
    tensors) after the first two: parameters and buffers as eager's."""
    from memplan._compile_budget import BudgetSearch

    torch.manual_seed(0)
    model = _Reused().train()
    x, y = torch.randn(16, 8, 32), torch.randn(16, 8, 8)
    search = BudgetSearch(model, (x,), loss_fn=F.mse_loss, example_targets=(y,), fractions=(), repeats=1,
                          compiled_stages=compiled)
    search.minimum()
    kind = "chain-compiled" if compiled else "chain"
    least = min((c for c in search.measured() if c.kind == kind), key=lambda c: c.peak)
    assert _forwards_repeat(least.ops)
    step, _ = search._runner(least)
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for i in range(3):
        xi, yi = torch.randn(16, 8, 32), torch.randn(16, 8, 8)
        opt.zero_grad()
        ref_opt.zero_grad()
        loss = step(xi, yi)
        ref_loss = F.mse_loss(ref(xi), yi)
        ref_loss.backward()
        _assert_like(model, ref, loss, ref_loss)
        assert int(model.shared[1].num_batches_tracked) == 2 * (i + 1)
        opt.step()
        ref_opt.step()
        _assert_like(model, ref, loss, ref_loss, grads=False)
        if i == 0:
            model.load_state_dict(copy.deepcopy(ref.state_dict()))
        elif i == 1:
            model.load_state_dict({k: v.clone() for k, v in ref.state_dict().items()}, assign=True)
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
