"""Chain plans under ``torch.autocast`` (mixed precision, bfloat16 on the CPU): the profile and the
executor run without autocast's weight cache (``models.runtime.uncached_autocast``), so that a plan
measures what the chain's model predicts, and the backward runs with autocast off, as
``loss.backward()`` after the autocast block."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memplan.baselines.remat_rotor import persistent  # noqa: E402
from memplan.models.graph import linearize_model  # noqa: E402
from memplan.models.memory import profiler_peak  # noqa: E402
from memplan.models.profiler import profile_chain  # noqa: E402
from memplan.models.remat import simulate_remat  # noqa: E402
from memplan.models.runtime import execute  # noqa: E402
from memplan.remat import memory_range  # noqa: E402

F = torch.nn.functional


def _mlp(blocks=4):
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(),
                                                     torch.nn.Linear(256, 128)) for _ in range(blocks)],
                               torch.nn.Linear(128, 10))


def test_plans_under_autocast_measure_what_the_chain_predicts_and_train_as_autograd():
    """With autocast's weight cache (its default) every weight a stage's first forward cast lived to the
    end of the step, seen by no stage's profile: rotor's plans on this MLP measured 1.4-2.0x their
    prediction. Now each plan's measured peak is its replay's (to 1%), the chain records the autocast,
    and the gradients are plain autograd's (forward under autocast, backward after it), bit for bit."""
    model = _mlp()
    x, y = torch.randn(32, 128), torch.randint(0, 10, (32,))

    def loss(out):
        return F.cross_entropy(out, y)

    params = list(model.parameters())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = loss(model(x))
    out.backward()
    ref = [p.grad.clone() for p in params]
    lm = linearize_model(model, x, loss)
    stage = lm.loss_stage(loss)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        chain = profile_chain(lm.stages, x, stage, input_grad=False, memory="profiler", repeats=1)
    assert chain.provenance["autocast"] == "bfloat16" and "without its weight cache" in chain.provenance["autocast_note"]
    lo, hi = memory_range(chain)
    for f in (0.3, 0.6, 1.0):
        sol = persistent(chain, lo + f * (hi - lo))
        predicted = simulate_remat(chain, sol.schedule).peak_memory
        ops = sol.schedule.ops

        def run():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                execute(lm.stages, stage, x, ops, input_grad=False)

        for p in params:
            p.grad = torch.zeros_like(p)
        run()
        _, measured, _ = profiler_peak(run)
        assert measured == pytest.approx(predicted, rel=0.01), (f, measured, predicted)
        for p in params:
            p.grad = None
        run()
        assert all(torch.equal(p.grad, g) for p, g in zip(params, ref))
    assert torch.is_autocast_cache_enabled()            # the caller's setting is back


def test_without_autocast_nothing_changes():
    model = _mlp(2)
    x = torch.randn(8, 128)
    lm = linearize_model(model, x)
    chain = profile_chain(lm.stages, x, lambda o: o.float().pow(2).mean(), input_grad=False, repeats=1)
    assert "autocast" not in chain.provenance


def test_float16_with_a_grad_scaler_inside_the_loss():
    """The README's recipe for float16: the step runs its own backward, so the GradScaler's scaling goes
    inside ``loss_fn``; the chain plan's gradients are then the scaled eager step's, bit for bit."""
    import memplan

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                                      torch.nn.Linear(128, 64)) for _ in range(4)],
                                torch.nn.Linear(64, 10))
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)

    def loss(out, t):
        return scaler.scale(F.cross_entropy(out, t))

    with torch.autocast("cpu", dtype=torch.float16):
        # chain plans only: which candidate is fastest is a measurement, and the recipe is checked on
        # the chain plan (a compiled fraction won it once in a fresh clone's run)
        step = memplan.compile_under_budget(model, (x,), "1MiB", loss_fn=loss, example_targets=(y,),
                                            fractions=(), repeats=1, compiled_stages=False)
    assert step.choice.kind == "chain" and step.peak <= step.budget
    for p in model.parameters():
        p.grad = None
    with torch.autocast("cpu", dtype=torch.float16):
        out = loss(model(x), y)
    out.backward()
    ref = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    with torch.autocast("cpu", dtype=torch.float16):
        step(x, y)
    assert all(torch.equal(p.grad, r) for p, r in zip(model.parameters(), ref))
