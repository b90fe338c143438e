"""Chain stages compiled by torch.compile inside rotor plans (models.compiled, issue 28): rotor across
stages, the compiler within a stage.

References: eager autograd's gradients; sizes computed by hand for small stages (what the min-cut
partitioner must save, and what eager autograd saves); the dispatch-mode tracker on eager stages (the
profiler method agrees with it field by field); the executed peak of rotor plans against the chain
model's simulated peak. Backend ``aot_eager_decomp_partition`` (the partitioner of ``inductor``,
without Inductor's slow code generation): compiles take about a second per stage here.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memplan.baselines.remat_heuristics import store_all  # noqa: E402
from memplan.baselines.remat_min_memory import min_memory  # noqa: E402
from memplan.baselines.remat_rotor import persistent  # noqa: E402
from memplan.models.compiled import CompiledStage, DispatchModeError, compile_stages, stage_graph_count  # noqa: E402
from memplan.models.graph import linearize_model  # noqa: E402
from memplan.models.memory import TensorMemoryTracker, profiler_peak  # noqa: E402
from memplan.models.profiler import profile_chain, profile_stage  # noqa: E402
from memplan.models.runtime import execute  # noqa: E402

BACKEND = "aot_eager_decomp_partition"
N, D, H = 64, 32, 128


class _ReluMlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w1 = torch.nn.Parameter(torch.randn(D, H, generator=g) / D ** 0.5)
        self.w2 = torch.nn.Parameter(torch.randn(H, D, generator=g) / H ** 0.5)

    def forward(self, x):
        return torch.relu(x @ self.w1) @ self.w2


class _Gate(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x) * torch.sigmoid(x)


def test_hand_sizes_of_compiled_stages_and_the_two_methods_agree_on_eager_ones():
    """float32, x of N x D. ``relu(x @ w1) @ w2``: the output (4ND bytes) and relu's output (4NH),
    which the second matmul's backward needs and no partitioner can recompute without a matmul; eager
    autograd saves the same. ``tanh(x) * sigmoid(x)``: eager autograd saves tanh(x) and sigmoid(x)
    (for the product's backward; their own backwards reuse them), 2 x 4ND beyond the output; the
    compiled stage recomputes both from x, the stage's input (not counted), and keeps its output only."""
    x = torch.randn(N, D)
    for mod, eager_wabar, compiled_wabar in ((_ReluMlp(), 4 * N * (D + H), 4 * N * (D + H)),
                                             (_Gate(), 3 * 4 * N * D, 4 * N * D)):
        (stage,), _ = compile_stages([mod], lambda y: y.sum(), BACKEND)
        comp, _ = profile_stage(stage, x, repeats=0, memory="profiler")
        assert stage_graph_count(stage) == 2          # it ran compiled, with and without autograd
        eager, _ = profile_stage(mod, x, repeats=0, memory="profiler")
        dispatch, _ = profile_stage(mod, x, repeats=0)
        assert comp["wa"] == eager["wa"] == 4 * N * D
        assert comp["wd_in"] == eager["wd_in"] == 4 * N * D
        assert comp["wabar"] == compiled_wabar
        assert eager["wabar"] == eager_wabar
        for k in ("wa", "wabar", "wd_in", "of", "ob"):
            assert eager[k] == dispatch[k], k


def _model_and_loss():
    torch.manual_seed(3)
    blocks = [torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64),
                                  torch.nn.LayerNorm(64)) for _ in range(3)]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(64, 16))
    x, y = torch.randn(8, 64, 64), torch.randn(8, 64, 16)

    def loss(out):
        return torch.nn.functional.mse_loss(out, y)

    return model, x, loss


@pytest.fixture(scope="module")
def compiled_chain():
    model, x, loss = _model_and_loss()
    lm = linearize_model(model, x, loss)
    stages, loss_stage = compile_stages(lm.stages, lm.loss_stage(loss), BACKEND)
    chain = profile_chain(stages, x, loss_stage, repeats=1, memory="profiler")
    return model, x, loss, stages, loss_stage, chain


def _grads(model):
    return [p.grad.detach().clone() for p in model.parameters()]


def test_rotor_plans_over_compiled_stages_give_eager_gradients(compiled_chain):
    """The least-memory plan recomputes forwards (F_ck, F_none without autograd: the compiled inference
    graphs) and runs fused backward groups (consecutive B's: node pre-hooks on the compiled backward
    nodes); its gradients equal eager autograd's within float32 rounding."""
    model, x, loss, stages, loss_stage, chain = compiled_chain
    for p in model.parameters():
        p.grad = None
    loss(model(x)).backward()
    expected = _grads(model)
    sol = persistent(chain, min_memory(chain), time_limit=10)
    ops = [tuple(o) for o in sol.schedule.ops]
    forwards = [l for op, l in ops if op != "B"]
    assert len(forwards) > len(set(forwards))                        # it recomputes
    assert any(op == "F_none" for op, _ in ops)
    assert any(a == "B" and b == "B" for (a, _), (b, _) in zip(ops, ops[1:]))   # a fused group
    for p in model.parameters():
        p.grad = None
    execute(stages, loss_stage, x, ops)
    for e, g in zip(expected, _grads(model)):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    assert all(stage_graph_count(s) >= 1 for s in stages + [loss_stage])
    assert all(isinstance(s, CompiledStage) for s in stages + [loss_stage])


def test_executed_peak_is_the_compiled_profiles_replay(compiled_chain):
    """profiler_peak of whole executions (compiled code included) against the simulated peak of the
    chain profiled with the compiled stages, at the least-memory plan, halfway and store-all: within
    a few loss scalars (64 bytes). The executor keeps the CPU generator states of the stages it runs
    more than once (dropout masks are replayed) outside c10's allocator (``models.runtime._Rng``): as
    tensors they were 5056 bytes each, which the chain model leaves out."""
    model, x, loss, stages, loss_stage, chain = compiled_chain
    lo, hi = min_memory(chain), store_all(chain).peak_memory
    assert hi > 1.5 * lo
    for limit in (lo, (lo + hi) / 2, hi):
        sol = persistent(chain, limit, time_limit=10)
        ops = [tuple(o) for o in sol.schedule.ops]
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        execute(stages, loss_stage, x, ops)                          # warm-up
        _, peak, _ = profiler_peak(lambda: execute(stages, loss_stage, x, ops))
        assert 0 <= peak - sol.peak_memory <= 64, (limit, peak, sol.peak_memory)


def test_compiled_stages_refuse_the_dispatch_tracker():
    """torch.compile runs compiled frames eagerly under a dispatch mode: a compiled stage refuses
    to run there (the executor's own measure_memory on CPU uses that tracker), and the profiler's
    option is checked."""
    (stage,), loss_stage = compile_stages([_Gate()], lambda y: y.sum(), BACKEND)
    x = torch.randn(4, 4)
    with pytest.raises(DispatchModeError, match="profiler_peak"):
        with TensorMemoryTracker():
            stage(x)
    with pytest.raises(DispatchModeError):
        execute([stage], loss_stage, x, [("F_all", 1), ("F_all", 2), ("B", 2), ("B", 1)], measure_memory=True)
    with pytest.raises(ValueError, match="memory="):
        profile_stage(stage, x, memory="tracker")


def test_budget_search_keeps_an_eager_loss_stage_dynamo_cannot_capture():
    """A loss with a graph break cannot be compiled with fullgraph: the search's compiled chain keeps
    that loss stage eager (and says so), its plans run and train, measured like every candidate."""
    from memplan._compile_budget import BudgetSearch

    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
    x, y = torch.randn(32, 16), torch.randn(32, 4)

    def loss(out, target):
        torch._dynamo.graph_break()
        return torch.nn.functional.mse_loss(out, target)

    for p in model.parameters():
        p.grad = None
    loss(model(x), y).backward()
    expected = _grads(model)
    search = BudgetSearch(model, (x,), loss_fn=loss, example_targets=(y,), fractions=(), repeats=1,
                          backend=BACKEND)
    assert search.compiled_chain is not None
    assert search.compiled_chain_note.startswith("loss stage eager") and "Unsupported" in search.compiled_chain_note
    cstages, closs = search._cchain[0], search._cchain[1]
    assert all(isinstance(s, CompiledStage) for s in cstages) and not isinstance(closs, CompiledStage)
    least = search.chain_plan(search._cchain[4], compiled=True)
    assert least.kind == "chain-compiled" and least.label.startswith("chain rotor, compiled stages")
    step, _ = search._runner(least)
    for p in model.parameters():
        p.grad = None
    step(x, y)
    for e, g in zip(expected, _grads(model)):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_inductor_stages_compile_without_layout_optimization():
    """Per stage, Inductor's channels-last layout optimization saved converted copies at every cut
    (models.compiled.INDUCTOR_STAGE_OPTIONS): Inductor stages get it off, other backends no options
    (torch.compile refuses options for them). Nothing is compiled here."""
    mods = [torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()]
    ind, ind_loss = compile_stages(mods, lambda y: y.sum(), "inductor")
    assert all(s.options == {"layout_optimization": False} for s in ind + [ind_loss])
    other, _ = compile_stages(mods, lambda y: y.sum(), BACKEND)
    assert all(s.options is None for s in other)


class _Slow(torch.nn.Module):
    """A Linear whose forward also sleeps: a stage that takes a known time to profile."""

    def __init__(self, seconds: float):
        super().__init__()
        self.lin, self.seconds = torch.nn.Linear(8, 8), seconds

    def forward(self, x):
        import time

        time.sleep(self.seconds)
        return self.lin(x)


def test_profile_chain_stops_at_its_deadline():
    """Past the deadline before a stage, profile_chain raises TimeoutError naming that stage; where the
    next stage, estimated as the slowest so far, would end past it, too; a deadline far ahead changes
    nothing."""
    import time

    torch.manual_seed(0)
    stages = [_Slow(0.3), _Slow(0.0), _Slow(0.0)]
    x = torch.randn(4, 8)
    with pytest.raises(TimeoutError, match="stage 1 of 4 would end past the deadline"):
        profile_chain(stages, x, repeats=1, deadline=time.perf_counter() - 1.0)
    # stage 1 starts before the deadline and its forward alone sleeps past it: stage 2 is not started
    with pytest.raises(TimeoutError, match="stage 2 of 4 would end past the deadline"):
        profile_chain(stages, x, repeats=1, deadline=time.perf_counter() + 0.1)
    # stage 1 ends before the deadline, but one more stage as long would not: stage 2 is not started (it
    # was, and the in-context timing too, which runs stage 1's sleeps several times more past it)
    from memplan.models.profiler import profile_stage

    t0 = time.perf_counter()
    profile_stage(stages[0], x, repeats=0, input_grad=True)       # what profile_chain runs for stage 1
    d1 = time.perf_counter() - t0
    assert d1 >= 0.3
    with pytest.raises(TimeoutError, match="stage 2 of 4 would end past the deadline"):
        profile_chain(stages, x, repeats=1, deadline=time.perf_counter() + 1.5 * d1)
    fast = [_Slow(0.0), _Slow(0.0)]
    free = profile_chain(fast, x, repeats=1)
    bounded = profile_chain(fast, x, repeats=1, deadline=time.perf_counter() + 3600)
    for field in ("wa", "wabar", "wd", "of", "ob"):
        assert list(getattr(bounded, field)) == list(getattr(free, field)), field


def test_budget_search_drops_compiled_stages_not_profiled_within_its_time_limit(monkeypatch):
    """When profiling the compiled stages runs past time_limit, the search keeps no compiled chain, says
    why, does not start again with an eager loss stage, and still answers with its eager chain plans."""
    import memplan.models.profiler as prof
    from memplan._compile_budget import BudgetSearch

    real = prof.profile_chain
    calls = []

    def timing_out(*args, **kw):
        if "compiled" in kw.get("name", ""):          # the compiled stages' chain, not the eager one
            calls.append(kw.get("deadline"))
            raise TimeoutError("profile_chain: past the deadline before stage 2 of 4")
        return real(*args, **kw)

    monkeypatch.setattr(prof, "profile_chain", timing_out)
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
    x, y = torch.randn(32, 16), torch.randn(32, 4)
    search = BudgetSearch(model, (x,), loss_fn=lambda o, t: torch.nn.functional.mse_loss(o, t),
                          example_targets=(y,), fractions=(), repeats=1, backend=BACKEND, time_limit=600)
    # the call's deadline less the two measurements the search keeps for the end (a fraction of a
    # second on this tiny model, more on a loaded machine: 0.49 s seen beside a full test run)
    assert len(calls) == 1 and search.t_start + 590 < calls[0] <= search.t_start + 600
    assert search.compiled_chain is None
    assert search.compiled_chain_note == "not finished within time_limit=600 s (profiling the compiled stages)"
    assert search.chain is not None
    step = search.under(int(search.minimum().peak))
    assert step.choice.kind == "chain" and step.peak <= step.budget
    for p in model.parameters():
        p.grad = None


def test_compiled_chain_plans_of_a_model_with_a_mask_input():
    """A model reading a mask beside its input: the stages read it from the chain's ContextInputs, which
    Dynamo lifts as a graph input (no recompilation when each call brings its own mask). The compiled
    chain's least-memory plan measures its replay's peak and trains to eager autograd's gradients on
    the mask each call is given."""
    from conftest import masked_mlp_case

    from memplan._compile_budget import BudgetSearch

    def loss(out, t):
        return torch.nn.functional.mse_loss(out, t)

    model, x, y, masks = masked_mlp_case()
    search = BudgetSearch(model, (x, masks[0]), loss_fn=loss, example_targets=(y,), fractions=(), repeats=1,
                          backend=BACKEND)
    assert search.compiled_chain_note == "" and search.compiled_chain is not None
    cand = search.chain_plan(search.compiled_chain_minimum, compiled=True)
    assert cand.kind == "chain-compiled" and cand.peak == pytest.approx(cand.predicted_peak, rel=0.01)
    step, _ = search._runner(cand)
    for mask in masks[::-1]:
        for p in model.parameters():
            p.grad = None
        loss(model(x, mask), y).backward()
        ref = [p.grad.clone() for p in model.parameters()]
        for p in model.parameters():
            p.grad = None
        step(x, mask, y)
        for r, p in zip(ref, model.parameters()):
            torch.testing.assert_close(p.grad, r, rtol=1e-4, atol=1e-6)
