"""The runtime executor: bit-identical gradients to plain autograd under several sequences, and its
measured peak memory on CPU against the simulator's prediction on the profiled chain. The sequences
are the shared ones of memplan.baselines.remat_heuristics (the executor builds none) and those of
memplan.remat.solve."""
import copy
import math
import time

import pytest

torch = pytest.importorskip("torch")

from conftest import zoo_autograd_reference  # noqa: E402

from memplan.models.graph import linearize_model  # noqa: E402
from memplan.models.networks import example_input, get_model  # noqa: E402
from memplan.models.profiler import classification_loss, profile_chain  # noqa: E402
from memplan import remat  # noqa: E402
from memplan.baselines.remat_heuristics import (bisection_schedule, sequential_schedule,  # noqa: E402
                                                store_all_schedule)
from memplan.models.remat import InvalidSequence, simulate_remat  # noqa: E402
from memplan.models.runtime import execute  # noqa: E402

GPT = dict(n_layer=2, n_embd=32, n_head=4, vocab=50, n_ctx=16, dropout=0.1)
CASES = {"resnet18": ({}, (3, 64, 64)), "gpt2": (GPT, (8,))}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _sequences(L):
    return {"store_all": store_all_schedule(L), "sequential": sequential_schedule(L, 3),
            "bisection": bisection_schedule(L)}


def _solver_sequences(chain):
    """Sequences of memplan.remat.solve (paper 004's rotor DP, revolve, sequential checkpointing)
    at a memory limit halfway between the minimum and store-all."""
    lo, hi = remat.memory_range(chain)
    mem = (lo + hi) / 2
    out = {}
    for name in ("rotor", "revolve", "sequential"):
        sol = remat.solve(chain, memory=mem, method=name, slots=200)
        assert sol.success, (name, sol.message)
        out[name] = sol.schedule
    return out


@pytest.fixture(scope="module", params=sorted(CASES))
def setup(request):
    name = request.param
    kw, shape = CASES[name]
    model, x, loss_fn, loss, grads = zoo_autograd_reference(name, kw, shape)
    return name, model, x, loss_fn, loss, grads


def _run(model, x, loss_fn, seq, **kw):
    m = copy.deepcopy(model)
    lm = linearize_model(m, x, loss_fn)
    torch.manual_seed(123)
    res = execute(lm.stages, lm.loss_stage(loss_fn), x, seq, **kw)
    return m, lm, res


@pytest.mark.parametrize("kind", ["store_all", "sequential", "bisection"])
def test_gradients_are_bit_identical(setup, kind):
    name, model, x, loss_fn, loss, grads = setup
    L = linearize_model(copy.deepcopy(model), x).L
    seq = _sequences(L)[kind]
    if kind != "store_all":
        assert seq.count("F_ck") > 0           # the sequence really re-materializes
    m, lm, res = _run(model, x, loss_fn, seq)
    assert res.loss == pytest.approx(loss, rel=0, abs=0)
    for n, p in m.named_parameters():
        assert torch.equal(p.grad, grads[n]), f"{name} {kind}: gradient of {n} differs"


def test_dropout_masks_are_replayed_in_recomputation(setup):
    name, model, x, loss_fn, loss, grads = setup
    if name != "gpt2":
        pytest.skip("only the GPT-2 model has dropout")
    assert any(isinstance(mod, torch.nn.Dropout) and mod.p > 0 for mod in model.modules())
    L = linearize_model(copy.deepcopy(model), x).L
    m, _, _ = _run(model, x, loss_fn, bisection_schedule(L))
    ref = copy.deepcopy(model)
    torch.manual_seed(999)                       # another seed: other masks, other gradients
    loss_fn(ref(x)).backward()
    assert any(not torch.equal(p.grad, q.grad) for p, q in zip(m.parameters(), ref.parameters()))


@pytest.fixture(scope="module")
def profiled(setup):
    name, model, x, loss_fn, loss, grads = setup
    lm = linearize_model(copy.deepcopy(model), x, loss_fn)
    chain = profile_chain(lm.stages, x, lm.loss_stage(loss_fn), repeats=1, names=lm.names)
    assert chain.L == lm.L
    return chain


def test_solver_sequences_give_bit_identical_gradients(setup, profiled):
    name, model, x, loss_fn, loss, grads = setup
    seqs = _solver_sequences(profiled)
    for kind, seq in seqs.items():
        m, _, res = _run(model, x, loss_fn, seq, measure_memory=True)
        for n, p in m.named_parameters():
            assert torch.equal(p.grad, grads[n]), f"{name} {kind}: gradient of {n} differs"
        sim = simulate_remat(profiled, seq)
        assert res.peak_memory == pytest.approx(sim.peak_memory, rel=0.10), (name, kind)
    assert seqs["rotor"].count("F_ck") + seqs["rotor"].count("F_none") > 0


def test_measured_peak_memory_matches_the_simulator(setup, profiled):
    name, model, x, loss_fn, loss, grads = setup
    chain = profiled
    for kind, seq in _sequences(chain.L).items():
        sim = simulate_remat(chain, seq)
        _, _, res = _run(model, x, loss_fn, seq, measure_memory=True)
        assert res.peak_memory == pytest.approx(sim.peak_memory, rel=0.10), (name, kind)
        # the traces agree operation by operation, not only at the peak
        for real, pred in zip(res.memory_after, sim.memory_after):
            assert real == pytest.approx(pred, rel=0.10, abs=4096)


def test_less_memory_with_recomputation(setup):
    name, model, x, loss_fn, loss, grads = setup
    L = linearize_model(copy.deepcopy(model), x).L
    peaks = {}
    for kind in ("store_all", "bisection"):
        _, _, res = _run(model, x, loss_fn, _sequences(L)[kind], measure_memory=True)
        peaks[kind] = res.peak_memory
    assert peaks["bisection"] < peaks["store_all"]


def test_invalid_sequence_is_rejected(setup):
    name, model, x, loss_fn, loss, grads = setup
    lm = linearize_model(copy.deepcopy(model), x)
    with pytest.raises(InvalidSequence, match="abar"):
        execute(lm.stages, loss_fn, x, [("F_ck", 1), ("B", 1)])
    with pytest.raises(InvalidSequence, match="a\\^2"):
        execute(lm.stages, loss_fn, x, [("F_none", 1), ("F_none", 3)])
    # the no-grad forwards switch grad mode off for their run: an error there leaves it as it was
    assert torch.is_grad_enabled()
    with torch.no_grad():
        with pytest.raises(InvalidSequence, match="a\\^2"):
            execute(lm.stages, loss_fn, x, [("F_ck", 1), ("F_none", 3)])
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled()


def test_sequences_are_valid_for_the_simulator():
    from memplan.models.chain import random_chain

    for L in (1, 2, 5, 9):
        c = random_chain(L, seed=L)
        for seq in [store_all_schedule(L), bisection_schedule(L)] + [sequential_schedule(L, s) for s in (1, 2, 4)
                                                                      if s <= L]:
            simulate_remat(c, seq)
        assert bisection_schedule(L).count("B") == L + 1
        assert sequential_schedule(c, 1).ops == store_all_schedule(c).ops      # one segment: nothing checkpointed


def test_sequential_is_checkpoint_sequential_for_L5_two_segments():
    """The sequence the issue found the two copies disagreeing on: L = 5, 2 segments. PyTorch cuts
    5 // 2 = 2 modules per segment (stages 1-2 checkpointed, 3-5 normal, the last takes the rest);
    the loss (6) is outside the module list and runs normally."""
    ops = sequential_schedule(5, 2).ops
    assert ops == [("F_ck", 1), ("F_none", 2), ("F_all", 3), ("F_all", 4), ("F_all", 5), ("F_all", 6),
                   ("B", 6), ("B", 5), ("B", 4), ("B", 3), ("F_all", 1), ("F_all", 2), ("B", 2), ("B", 1)]


class _Recorder(torch.nn.Module):
    """A stage that logs (stage, grad mode) at each call: F_all records the graph, F_ck / F_none do not."""

    def __init__(self, l, log):
        super().__init__()
        self.l, self.log = l, log
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        self.log.append((self.l, torch.is_grad_enabled()))
        return torch.tanh(self.lin(x))


@pytest.mark.parametrize("L,s", [(5, 2), (6, 3), (7, 3), (4, 4), (3, 1)])
def test_sequential_schedule_is_what_checkpoint_sequential_runs(L, s):
    """Run torch.utils.checkpoint.checkpoint_sequential itself (reentrant: checkpointed segments run
    under no_grad, then are recomputed with grad in the backward pass) and compare the order of stage
    calls and their grad mode with the forward operations of sequential_schedule."""
    from torch.utils.checkpoint import checkpoint_sequential

    log = []
    stages = [_Recorder(l, log) for l in range(1, L + 1)]
    x = torch.randn(2, 4, requires_grad=True)
    out = checkpoint_sequential(torch.nn.Sequential(*stages), s, x, use_reentrant=True)
    log.append((L + 1, torch.is_grad_enabled()))       # the loss, applied by the caller
    out.sum().backward()
    expected = [(l, op == "F_all") for op, l in sequential_schedule(L, s) if op != "B"]
    assert log == expected


@pytest.mark.parametrize("setup", ["gpt2", pytest.param("resnet18", marks=pytest.mark.long)], indirect=True)
def test_sequential_replays_with_the_simulated_peak(setup, profiled):
    """The executor runs sequential_schedule for every number of segments with the peak the
    simulator predicts on the profiled chain (and autograd's gradients)."""
    name, model, x, loss_fn, loss, grads = setup
    L = profiled.L
    for s in sorted({1, 2, max(1, round(L ** 0.5)), L}):
        seq = sequential_schedule(profiled, s)
        sim = simulate_remat(profiled, seq)
        m, _, res = _run(model, x, loss_fn, seq, measure_memory=True, fuse_backward=False)
        # the CPU tracker counts the bytes of every live tensor storage and the chain was profiled
        # from the same stages: one backward call per B peaks at the simulated peak to the byte
        assert res.peak_memory == sim.peak_memory, (name, s, res.peak_memory, sim.peak_memory)
        for n, p in m.named_parameters():
            assert torch.equal(p.grad, grads[n]), f"{name} sequential {s}: gradient of {n} differs"
        # fused calls (the default): the same peak to the byte
        m, _, fused = _run(model, x, loss_fn, seq, measure_memory=True)
        assert fused.peak_memory == sim.peak_memory, (name, s, fused.peak_memory, sim.peak_memory)
        for n, p in m.named_parameters():
            assert torch.equal(p.grad, grads[n]), f"{name} fused sequential {s}: gradient of {n} differs"


def _cuda_resnet18():
    """ResNet-18 (batch 2) on the GPU: model, input, loss."""
    kw, shape = CASES["resnet18"]
    torch.manual_seed(0)
    model = get_model("resnet18", **kw).cuda().train()
    return model, example_input("resnet18", 2, shape, device="cuda"), classification_loss()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_profile_and_execute_agree_with_the_simulator():
    """On a GPU: allocator statistics instead of the dispatch tracker; same checks (10% on the peak)."""
    model, x, loss_fn = _cuda_resnet18()
    lm = linearize_model(copy.deepcopy(model), x, loss_fn)
    chain = profile_chain(lm.stages, x, lm.loss_stage(loss_fn), repeats=1, device="cuda", names=lm.names)
    assert chain.provenance["device"].startswith("cuda")
    for kind, seq in _sequences(chain.L).items():
        sim = simulate_remat(chain, seq)
        _, _, res = _run(model, x, loss_fn, seq, measure_memory=True, device="cuda")
        assert res.peak_memory == pytest.approx(sim.peak_memory, rel=0.10), kind


def test_run_timed_synchronizes_only_when_asked(monkeypatch):
    """``sync=False`` queues a CUDA step without a synchronize (as ``loss.backward()`` returns): the
    executed plans had paid a drained queue per step that PyTorch's contenders did not."""
    from memplan.models import runtime

    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    ran = []
    runtime._run_timed(lambda: ran.append(1), None, "cuda", time.perf_counter, sync=False)
    assert ran == [1] and calls == []
    runtime._run_timed(lambda: ran.append(2), None, "cuda", time.perf_counter)
    assert ran == [1, 2] and calls == ["cuda"]
    runtime._run_timed(lambda: ran.append(3), None, "cpu", time.perf_counter)    # nothing to wait for
    assert calls == ["cuda"]


def test_unsynchronized_execute_gives_the_same_step(setup):
    """``sync=False`` changes nothing on a CPU (nothing is queued): same loss, same gradients."""
    name, model, x, loss_fn, loss, grads = setup
    L = linearize_model(copy.deepcopy(model), x).L
    m, _, res = _run(model, x, loss_fn, sequential_schedule(L, 3), sync=False)
    assert res.loss == loss and res.time > 0 and res.loss_tensor is None
    for n, p in m.named_parameters():
        assert torch.equal(p.grad, grads[n]), f"{name}: gradient of {n} differs"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_unsynchronized_execute_returns_the_loss_as_a_tensor():
    model, x, loss_fn = _cuda_resnet18()
    seq = sequential_schedule(linearize_model(copy.deepcopy(model), x).L, 3)
    m1, _, ref = _run(model, x, loss_fn, seq)
    m2, _, res = _run(model, x, loss_fn, seq, sync=False)
    assert math.isnan(res.loss) and math.isnan(res.time) and float(res.loss_tensor) == ref.loss
    for (n, p), q in zip(m1.named_parameters(), m2.parameters()):
        assert torch.equal(p.grad, q.grad), n


@pytest.mark.parametrize("kind", ["store_all", "sequential", "bisection"])
def test_without_holds_the_same_gradients_and_at_most_the_held_memory(setup, kind):
    """``execute(hold=False)``: the fused groups' a^j and delta^j go when the engine is done with them,
    not when B^j ends. The same gradients, bit for bit; its peak, measured from outside by the same
    tracker as the held run's, is at most that one (the same allocations, some freed sooner). Held
    only where the held run peaks (``holds_at_peak`` of its measured trace): its peak to the byte,
    the same gradients."""
    from memplan.models.profiler import memory_tracker
    from memplan.models.runtime import holds_at_peak

    name, model, x, loss_fn, loss, grads = setup
    L = linearize_model(copy.deepcopy(model), x).L
    seq = _sequences(L)[kind]
    _, _, measured = _run(model, x, loss_fn, seq, measure_memory=True)
    at_peak = holds_at_peak(seq, measured.memory_peak_during)
    assert at_peak and all(("B", l) in seq.ops for l in at_peak)
    peaks = {}
    for hold in (True, False, at_peak):
        m = copy.deepcopy(model)
        lm = linearize_model(m, x, loss_fn)
        for p in m.parameters():
            p.grad = torch.zeros_like(p)            # outside the window, as the executor's measured runs
        with memory_tracker("cpu") as tr:
            torch.manual_seed(123)
            execute(lm.stages, lm.loss_stage(loss_fn), x, seq, hold=hold)
            tr.sync()
            peaks[hold] = float(tr.peak)
        for n, p in m.named_parameters():
            assert torch.equal(p.grad, grads[n]), f"{name} {kind} hold={hold}: gradient of {n} differs"
    assert peaks[False] <= peaks[True], peaks
    assert peaks[at_peak] == peaks[True] == pytest.approx(measured.peak_memory, abs=64), (name, kind, peaks)
    with pytest.raises(ValueError, match="hold=True"):
        execute(lm.stages, lm.loss_stage(loss_fn), x, seq, hold=False, measure_memory=True)


def _general_then_fast(stages, loss_stage, x, params, hold: bool, seed: int, fuse: bool = True) -> dict:
    """Store-all run twice on the same stages: first through the general loop (the stages' cached
    ``fast_ops`` cleared: the run marks them where it shows one fused group), then as ``execute``
    chooses. Per run: (loss, peak measured from outside by one tracker, parameter gradients, whether
    the stages are marked for the fast path after it). ``fuse``: ``execute``'s ``fuse_backward``
    (False: every B its own call, each stage its own group on the fast path)."""
    from memplan.models import runtime as rt
    from memplan.models.profiler import memory_tracker

    seq = store_all_schedule(len(stages))
    for p in params:
        p.grad = torch.zeros_like(p)          # outside the window, as the executor's measured runs
    got = {}
    for path in ("general", "fast"):
        info = rt._stage_info(list(stages) + [loss_stage])
        if path == "general":
            info.fast_ops = None
        for p in params:
            p.grad.zero_()
        with memory_tracker("cpu") as tr:
            torch.manual_seed(seed)
            res = execute(stages, loss_stage, x, seq, hold=hold, fuse_backward=fuse)
            tr.sync()
            got[path] = (res.loss, float(tr.peak), [p.grad.clone() for p in params], info.fast_ops is not None)
    return got


@pytest.mark.parametrize("hold", [True, False])
def test_store_all_fast_path_runs_what_the_general_loop_runs(setup, hold, monkeypatch):
    """Once a store-all run has shown one fused group, ``execute`` runs store-all without its general
    loop (``_run_store_all``). Against the general loop's run of the same sequence on the same stages:
    the same loss and gradients bit for bit, and the same peak measured from outside by the same
    tracker (the holds let the same tensors go at the same moments; without them, the engine does).
    On the network with a tied weight (GPT-2) the groups are split: the fast path runs them one call
    each, as the general loop does (the splits recorded from the general loop's run)."""
    from memplan.models import runtime as rt

    name, model, x, loss_fn, loss, grads = setup
    calls = []
    fast = rt._run_store_all
    monkeypatch.setattr(rt, "_run_store_all", lambda *a, **k: calls.append(1) or fast(*a, **k))
    m = copy.deepcopy(model)
    lm = linearize_model(m, x, loss_fn)
    stages, loss_stage = lm.stages, lm.loss_stage(loss_fn)
    names, params = zip(*m.named_parameters())
    got = _general_then_fast(stages, loss_stage, x, params, hold, 123)
    info = rt._stage_info(list(stages) + [loss_stage])
    assert got["general"][3] and got["fast"][3]
    assert len(calls) == 1                                     # the second run only
    # GPT-2: stage 1 (the embedding) shares its weight with the loss stage (the head): B^1 in a call
    # of its own, the stage above it (2) reads a detached copy of a^1
    assert info.fast_splits == ((2,) if info.shared else ()), (name, info.fast_splits, info.shared)
    assert got["fast"][0] == got["general"][0]
    assert got["fast"][1] == got["general"][1], (name, hold, got["fast"][1], got["general"][1])
    for n, g_fast, g_general in zip(names, got["fast"][2], got["general"][2]):
        assert torch.equal(g_fast, g_general), n
        assert torch.equal(g_fast, grads[n]), n


def test_store_all_fast_path_on_random_chains_of_small_stages():
    """The same property as above on random chains (hypothesis): stages of Linear layers of random
    widths with dropout, tanh, an identity stage that returns its input (a leaf junction, held by a
    tensor hook, where it is the first stage) or a stage that returns a 1-tuple; weights tied between
    stages (the groups split there, as on GPT-2); every B held, none, or some; fused or one call per B
    (every stage its own group). The fast path's loss,
    gradients and peak (one tracker, from outside) are the general loop's."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    class Tup(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return (self.m(x),)

    class Loss(torch.nn.Module):
        def forward(self, y):
            return y.square().mean()

    class Head(torch.nn.Module):
        def __init__(self, lin):
            super().__init__()
            self.lin = lin

        def forward(self, y):
            return self.lin(y).square().mean()

    @settings(max_examples=20, deadline=None)
    @given(widths=st.lists(st.integers(1, 9), min_size=2, max_size=7), kinds=st.lists(st.integers(0, 3), min_size=7,
           max_size=7), hold=st.one_of(st.booleans(), st.frozensets(st.integers(1, 10))),
           ties=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), max_size=2), head=st.booleans(),
           fuse=st.booleans(), seed=st.integers(0, 10_000))
    def check(widths, kinds, hold, ties, head, fuse, seed):
        torch.manual_seed(seed)
        stages = []
        for i, (a, b) in enumerate(zip(widths, widths[1:])):
            lin = torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.Dropout(0.3), torch.nn.Tanh())
            k = kinds[i]
            stages.append(Tup(lin) if k == 1 else lin)
            if k == 2 and a == b:
                stages.append(torch.nn.Identity())
        if kinds[-1] == 3:                      # first: the step's input leaf is the junction
            stages.insert(0, torch.nn.Identity())
        lins = [next((m for m in s.modules() if isinstance(m, torch.nn.Linear)), None) for s in stages]
        for i, j in ties:                       # a later stage uses an earlier one's weight (same shape)
            i, j = sorted((i % len(stages), j % len(stages)))
            if i != j and lins[i] is not None and lins[j] is not None and lins[i].weight.shape == lins[j].weight.shape:
                lins[j].weight = lins[i].weight
        loss = Loss()
        first = next(m for m in lins if m is not None)
        if head:          # the loss reads the first Linear's weight, as GPT-2's head the embedding's
            stages.append(torch.nn.Linear(widths[-1], first.in_features))
            loss = Head(first)
        params = list({id(p): p for s in stages + [loss] for p in s.parameters()}.values())
        got = _general_then_fast(stages, loss, torch.randn(3, widths[0]), params, hold, seed + 1, fuse)
        assert got["general"][3] and got["fast"][3]
        assert got["fast"][0] == got["general"][0] and got["fast"][1] == got["general"][1], got
        assert all(torch.equal(a, b) for a, b in zip(got["fast"][2], got["general"][2]))

    check()


def test_holds_on_some_stages_on_random_chains():
    """``execute(hold=<stages>)`` on random chains (hypothesis: Linear layers of random widths with
    dropout and tanh, a stage returning its input, store-all, sequential or bisection, a random set
    of held stages, through the general loop and store-all's fast path): the same loss and gradients
    as the fully held run, bit for bit; a peak, measured from outside by one tracker, at most the fully
    held run's, and equal to it once the stages where the held run peaks (``holds_at_peak``) are
    among those held."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from memplan.models.profiler import memory_tracker
    from memplan.models.runtime import holds_at_peak

    class Loss(torch.nn.Module):
        def forward(self, y):
            return y.square().mean()

    @settings(max_examples=25, deadline=None)
    @given(widths=st.lists(st.integers(1, 9), min_size=3, max_size=8), kinds=st.lists(st.integers(0, 4), min_size=7,
           max_size=7), kind=st.sampled_from(["store_all", "sequential", "bisection"]), fast=st.booleans(),
           some=st.sets(st.integers(1, 9)), seed=st.integers(0, 10_000))
    def check(widths, kinds, kind, fast, some, seed):
        torch.manual_seed(seed)
        stages = []
        for (a, b), k in zip(zip(widths, widths[1:]), kinds):
            # what a stage saves for its backward decides what the engine keeps without the holds:
            # a Linear its input, tanh its output, dropout its mask only, an identity nothing
            stages.append([lambda: torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.Dropout(0.3), torch.nn.Tanh()),
                           lambda: torch.nn.Linear(a, b),
                           lambda: torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.Tanh()),
                           lambda: torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.Dropout(0.3)),
                           lambda: torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Linear(a, b))][k]())
            if k == 4:
                stages.append(torch.nn.Dropout(0.5))
            if k == 1 and a == b:
                stages.append(torch.nn.Identity())
        L = len(stages)
        seq = (store_all_schedule(L) if kind == "store_all" or L < 3 else
               sequential_schedule(L, 3) if kind == "sequential" else bisection_schedule(L))
        params = [p for s in stages for p in s.parameters()]
        x = torch.randn(3, widths[0])
        for p in params:
            p.grad = torch.zeros_like(p)
        measured = execute(stages, Loss(), x, seq, measure_memory=True)
        at_peak = holds_at_peak(seq, measured.memory_peak_during, slack=8)      # two float32 scalars
        got = {}
        # "peak" also carries each B's headroom: groups with room call their backward directly
        for name, hold in [("all", True), ("some", frozenset(some)), ("some+peak", frozenset(some) | at_peak),
                           ("peak", at_peak)]:
            for p in params:
                p.grad.zero_()
            with memory_tracker("cpu") as tr:
                torch.manual_seed(seed + 1)
                res = execute(stages, Loss(), x, seq, hold=hold, fast=fast)
                tr.sync()
                got[name] = (res.loss, float(tr.peak), [p.grad.clone() for p in params])
        full = got["all"]
        assert full[1] == pytest.approx(measured.peak_memory, abs=64)
        for name, (loss, peak, grads) in got.items():
            assert loss == full[0] and all(torch.equal(a, b) for a, b in zip(grads, full[2])), name
            assert peak <= full[1], (name, peak, full[1])
        assert got["some+peak"][1] == full[1], (sorted(at_peak), got)
        assert got["peak"][1] == full[1], (sorted(at_peak), at_peak.headroom, got)

    check()


def test_hold_must_be_a_flag_or_stages():
    from memplan.models.runtime import holds_at_peak

    stages = [torch.nn.Linear(2, 2), torch.nn.Tanh()]
    seq = store_all_schedule(2)
    with pytest.raises(ValueError, match="hold="):
        execute(stages, torch.nn.Identity(), torch.randn(1, 2), seq, hold=["a"])
    with pytest.raises(ValueError, match="hold=True"):
        execute(stages, torch.nn.Identity(), torch.randn(1, 2), seq, hold={1}, measure_memory=True)
    with pytest.raises(ValueError, match="3 memory values for 6"):
        holds_at_peak(seq, [1.0, 2.0, 3.0])
    # the B's within 10% of the largest: B^2 (9.5) and B^3 (10); not the forward at 10
    assert holds_at_peak(seq, [1, 2, 10, 10, 9.5, 3], rel=0.1, slack=0) == {3, 2}
    assert holds_at_peak(seq, [1, 2, 10, 10, 9.5, 3], slack=0) == {3}
    assert holds_at_peak(seq, [1, 2, 10, 10, 9.5, 3], slack=7) == {3, 2, 1}


def test_direct_backward_calls_only_where_the_headroom_allows(monkeypatch):
    """A :class:`Holds` from ``holds_at_peak`` lets an unmeasured run call a fused group's backward
    directly (no Python root), which keeps the group's top output and gradient until the call
    returns. Here ``sequential``(2) on 4 stages puts the peak at B^1, inside the group whose top,
    stage 2, outputs 512 floats a sample: with the true headroom the run takes the root there (its
    peak is the held run's, to the byte) and the direct call in the upper group; told that every B
    has room, it calls both directly and peaks higher by a^2 and delta^2 (the case the check is
    for)."""
    import memplan.models.runtime as rt
    from memplan.models.profiler import memory_tracker
    from memplan.models.runtime import Holds, holds_at_peak

    class Loss(torch.nn.Module):
        def forward(self, y):
            return y.square().mean()

    torch.manual_seed(0)
    stages = [torch.nn.Sequential(torch.nn.Linear(8, 2048), torch.nn.Tanh(), torch.nn.Linear(2048, 8)),
              torch.nn.Linear(8, 512), torch.nn.Sequential(torch.nn.Linear(512, 8), torch.nn.Tanh()),
              torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())]
    params = [p for s in stages for p in s.parameters()]
    x = torch.randn(4, 8)
    seq = sequential_schedule(4, 2)
    for p in params:
        p.grad = torch.zeros_like(p)
    measured = execute(stages, Loss(), x, seq, measure_memory=True)
    during = dict(zip(seq.ops, measured.memory_peak_during))
    assert during[("B", 1)] == measured.peak_memory          # the peak is at B^1, below the group's top
    at_peak = holds_at_peak(seq, measured.memory_peak_during)
    assert at_peak == {1}
    roots = []
    now = [None]
    apply = rt._Seed.apply
    monkeypatch.setattr(rt._Seed, "apply", staticmethod(lambda *a: (roots.append(now[0]), apply(*a))[1]))
    peaks = {}
    for name, hold in [("all", True), ("peak", at_peak), ("told room", Holds(at_peak, {l: 1e12 for l in range(1, 6)}))]:
        for p in params:
            p.grad.zero_()
        now[0] = name
        with memory_tracker("cpu") as tr:
            execute(stages, Loss(), x, seq, hold=hold)
            tr.sync()
            peaks[name] = float(tr.peak)
    assert roots.count("all") == 1 and roots.count("peak") == 1 and roots.count("told room") == 0
    assert peaks["peak"] == peaks["all"] == pytest.approx(measured.peak_memory, abs=16)
    a2 = 4 * 512 * 4                                          # a^2 and delta^2, float32
    assert peaks["told room"] >= peaks["all"] + a2, peaks


def test_allocator_events_see_the_replayed_peak(setup):
    """Measured by c10's allocator events (every CPU allocation: ``runtime_check --memory-method
    profiler``), an executed sequence peaks at the replay of the chain profiled the same way, within a
    few bytes (a loss scalar): the kernels' scratch is in the chain, and the executor's saved RNG
    states, which no chain models, are outside c10's allocator (5056 bytes each as tensors, one per
    replayed segment: up to 5% of the tiny GPT-2's peak)."""
    from memplan.models.memory import step_peak

    name, model, x, loss_fn, loss, grads = setup
    m = copy.deepcopy(model)
    lm = linearize_model(m, x, loss_fn)
    loss_stage = lm.loss_stage(loss_fn)
    chain = profile_chain(lm.stages, x, loss_stage, repeats=1, names=lm.names, memory="profiler")
    params = list(m.parameters())
    L = chain.L
    seqs = {f"sequential({s})": sequential_schedule(chain, s) for s in sorted({2, 3, L})}
    seqs["bisection"] = bisection_schedule(L)
    for kind, seq in seqs.items():
        assert seq.count("F_ck") > 0
        sim = simulate_remat(chain, seq).peak_memory

        def run():
            torch.manual_seed(123)
            execute(lm.stages, loss_stage, x, seq)

        for p in params:
            p.grad = None
        peak = step_peak(run, params, "cpu", method="profiler")
        assert sim <= peak <= sim + 16, (name, kind, peak, sim)
        for n, p in m.named_parameters():
            assert torch.equal(p.grad, grads[n]), f"{name} {kind}: gradient of {n} differs"
    if name == "resnet18":
        # the allocator events see what the dispatch tracker does not: the convolutions' scratch
        assert step_peak(run, params, "cpu", method="profiler") > step_peak(run, params, "cpu") + 2**20
