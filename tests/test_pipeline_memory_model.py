"""Issue 18 item 4: the pipeline's memory model counts what autograd keeps (``memory_model="autograd"``,
the default of ``memplan.pipeline.solve``), the paper's model stays available (``"paper"``).

The acceptance check profiles ResNet-18 with ``memplan profile``'s code path on CPU and compares, for
every contiguous stage, the bytes the default model keeps per in-flight mini-batch with the bytes
autograd saves for that stage's forward pass, measured with the profiler's saved-tensor hooks.
"""
import json

import numpy as np
import pytest

from memplan.baselines.pipeline import pipedream_points
from memplan.baselines.pipeline_exhaustive import exhaustive_search
from memplan.formulations.pipeline_cyclic import solve_cyclic
from memplan.formulations.pipeline_ilp import build_model, check_values, start_values
from memplan.models.chain import Chain, random_chain
from memplan.models.pipeline import Pattern, autograd_stored_bytes, simulate_pattern, task_data
from memplan.models.solution import InputError, Status
from memplan.pipeline import baseline_points, report, solve

BW = 5.0


def test_paper_model_stores_the_input_and_autograd_model_abar():
    c = Chain.from_stages(uf=[1.0, 1.0], ub=[1.0, 1.0], wa=[1.0, 2.0, 4.0], wabar=[1.0, 3.0, 7.0],
                          weights=[0.0, 0.0], loss={"wabar": 0.5})
    paper, auto = task_data(c, None, "paper"), task_data(c, None, "autograd")
    assert paper.S[1:].tolist() == [1.0, 2.0]           # a^0, a^1
    assert auto.S[1:].tolist() == [3.0, 7.5]            # abar^1, abar^2 + abar of the loss
    assert task_data(c, None).memory_model == "paper"   # the model-level default is unchanged
    # serial pattern on one GPU: F1 F2 B2 B1 back to back; during B_2 (T_3) the GPU holds both
    # stored items and the running task's input delta^2 = A[2] = max(a^2, delta^2) = 4 and output
    # delta^1 = 2
    p = Pattern(gpu=[0, 0, 0, 0], tau=[0, 1, 2, 3], tau_c=[1, 2, 3], T=4)
    assert simulate_pattern(p, paper).peak_memory == pytest.approx(1 + 2 + 4 + 2)
    assert simulate_pattern(p, auto).peak_memory == pytest.approx(3 + 7.5 + 4 + 2)


def test_autograd_bytes_attribute_each_saved_tensor_once():
    # three layers: F_1 saves its input (8 B) and 1 B of its own; F_2 saves its output a^2 (= abar^2,
    # 4 B) and nothing of its input; F_3 saves its input a^2 (the same storage: counted with F_2)
    # and 2 B; the loss saves its input a^3 (3 B).
    c = Chain.from_stages(uf=[1.0] * 3, ub=[1.0] * 3, wa=[8.0, 5.0, 4.0, 3.0], wabar=[8.0, 6.0, 4.0, 5.0],
                          weights=[0.0] * 3)
    c.provenance = {"saved_by_autograd_bytes": [1.0, 4.0, 2.0, 0.0], "saved_input_bytes": [8.0, 0.0, 4.0, 3.0]}
    assert autograd_stored_bytes(c)[1:].tolist() == [9.0, 4.0, 2.0, 3.0]
    assert task_data(c, None, "autograd").S[1:].tolist() == [9.0, 4.0, 5.0]
    c.provenance = {"saved_by_autograd_bytes": [1.0, 4.0, 2.0]}          # incomplete: abar
    assert task_data(c, None, "autograd").S[1:].tolist() == [6.0, 4.0, 5.0]


def test_ilp_memory_rows_equal_the_simulator_under_the_autograd_model():
    c = random_chain(5, 3)
    assert np.any(c.wabar[1:6] > c.wa[1:6])
    td = task_data(c, BW, "autograd")
    checked = 0
    for p in pipedream_points(td, 3, n_batches=60):
        if p.pattern is None:
            continue
        r = simulate_pattern(p.pattern, td)
        ilp = build_model(td, 3, r.peak_memory, Tmax=p.pattern.T * 1.01)
        assert check_values(ilp, start_values(ilp, p.pattern)) == []
        ilp = build_model(td, 3, r.peak_memory * 0.999, Tmax=p.pattern.T * 1.01)
        bad = check_values(ilp, start_values(ilp, p.pattern))
        assert bad and all(b.startswith("c36_memory") for b in bad)
        checked += 1
    assert checked >= 2


@pytest.mark.parametrize("seed,bw,alloc", [(4, 1.0, (0, 1, 1)), (9, 1.0, (0, 0, 1))])
def test_exact_cyclic_memory_equals_exhaustive_front_under_the_autograd_model(seed, bw, alloc):
    c = random_chain(3, seed, integer=True)
    td = task_data(c, bw, "autograd")
    front = exhaustive_search(td, 2, allocs=[alloc]).front()
    assert len(front) >= 2
    for T1, M in front:
        at = solve_cyclic(td, list(alloc), T1 * (1 + 1e-6), 1, M, P=2, time_limit=30, threads=1,
                          memory_model="exact")
        assert at.status == Status.FEASIBLE and at.sim.peak_memory <= M * (1 + 1e-9)
        below = solve_cyclic(td, list(alloc), T1 * (1 - 1e-3), 1, M, P=2, time_limit=30, threads=1,
                             memory_model="exact")
        assert below.status == Status.INFEASIBLE


def test_solve_defaults_to_autograd_and_says_so():
    c = random_chain(6, 1)
    kw = dict(memory=10**6, bandwidth=BW, gpus=2, method="pipedream", n_batches=60)
    auto, paper = solve(c, **kw), solve(c, memory_model="paper", **kw)
    assert auto.details["memory_model"] == "autograd" and paper.details["memory_model"] == "paper"
    # the same partition replays with more memory when layers keep abar^l instead of a^{l-1}
    st = [tuple(s) for s in paper.details["stages"]]
    from memplan.baselines.pipeline_eager import simulate_eager
    ea = simulate_eager(task_data(c, BW, "autograd"), st, noam=paper.details["noam"], n_batches=60)
    assert ea.peak_memory > paper.peak_memory
    head = report(auto, c).splitlines()[0]
    assert head.endswith("memory model autograd")
    assert report(paper, c).splitlines()[0].endswith("memory model paper")
    assert json.loads(json.dumps(auto.to_dict(), default=str))["details"]["memory_model"] == "autograd"
    with pytest.raises(InputError, match="memory_model='exact'.*'autograd'.*'paper'"):
        solve(c, memory_model="exact", **kw)
    pts = baseline_points(c, bandwidth=BW, gpus=2, n_batches=60, memory_model="paper")
    with pytest.raises(InputError, match=r"points\[0\].*memory_model='paper'"):
        solve(c, memory=10**6, bandwidth=BW, gpus=2, method="pipedream", points=pts)


def test_cli_memory_model_option(tmp_path, capsys):
    from conftest import write_chain_instance
    from memplan.experiments.cli import main

    path = write_chain_instance(random_chain(4, 2), tmp_path / "r4.json")
    out = tmp_path / "sol.json"
    args = ["solve", str(path), "--problem", "pipeline", "--method", "pipedream", "--memory", "1MB",
            "--bandwidth", "5B/s", "--gpus", "2", "--quiet"]
    assert main(args + ["--memory-model", "paper", "--json", str(out)]) == 0
    assert "memory model paper" in capsys.readouterr().out
    assert json.loads(out.read_text())["details"]["memory_model"] == "paper"
    assert main(args) == 0
    assert "memory model autograd" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(args + ["--memory-model", "abar"])
    assert e.value.code == 2


# ------------------------------------------------------------------------------------ acceptance
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def resnet18():
    """ResNet-18 (batch 2, 3x32x32) profiled on CPU as ``memplan profile`` does (profile_model's
    steps: get_model, linearize_model, profile_chain), plus what each layer saves of its input."""
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss, profile_chain

    torch.manual_seed(0)
    model = get_model("resnet18")
    model.train()
    x = example_input("resnet18", 2, (3, 32, 32), seed=0)
    lm = linearize_model(model, x)
    loss = classification_loss(seed=0)
    chain = profile_chain(lm.stages, x, loss, repeats=1, names=lm.names)
    stages = list(lm.stages) + [loss]
    acts = [x]
    with torch.no_grad():
        for s in lm.stages:
            acts.append(s(acts[-1]))
    saved = chain.provenance["saved_by_autograd_bytes"]
    # the profiler records the bytes of its input each F_l saves; check them by a second measurement
    assert chain.provenance["saved_input_bytes"] == [float(_autograd_saves(stages, acts, l, l) - saved[l - 1])
                                                     for l in range(1, chain.L + 2)]
    return chain, stages, acts


def _autograd_saves(stages, acts, l, r):
    """Bytes of the distinct storages autograd saves for the forward pass of stages l..r on a fresh
    input (requires grad), the input included when saved, parameters and buffers excluded."""
    from memplan.models.profiler import saved_tensor_bytes

    xi = acts[l - 1].detach().clone()
    if xi.is_floating_point():
        xi.requires_grad_(True)
    mods = [s for s in stages[l - 1:r] if isinstance(s, torch.nn.Module)]
    skip = [t for m in mods for t in (*m.parameters(), *m.buffers())]

    def fwd():
        y = xi
        for s in stages[l - 1:r]:
            y = s(y)
        return y

    return saved_tensor_bytes(fwd, exclude=skip)[1]


def test_default_model_keeps_what_autograd_keeps_per_stage(resnet18):
    chain, stages, acts = resnet18
    L = chain.L
    auto, paper = task_data(chain, None, "autograd"), task_data(chain, None, "paper")
    wa, wabar, s = chain.wa, chain.wabar, chain.provenance["saved_by_autograd_bytes"]
    clean = boundary = 0
    for l in range(1, L):
        # does F_{l-1} save its own output a^{l-1} (the stage input), so that the model counts it there?
        own = min(wa[l - 1], max(0.0, s[l - 2] + wa[l - 1] - wabar[l - 1])) if l > 1 else 0.0
        shared = min(own, chain.provenance["saved_input_bytes"][l - 1])
        for r in range(l, min(L - 1, l + 8) + 1):
            truth = _autograd_saves(stages, acts, l, r)
            model = float(auto.S[l:r + 1].sum())
            if shared == 0:
                assert model == pytest.approx(truth, rel=0.05), (l, r)
                clean += 1
            else:      # the documented exception: that input is counted once, with layer l-1
                assert model + shared == pytest.approx(truth, rel=0.05), (l, r)
                boundary += 1
    assert clean >= 20 and boundary >= 1
    # the whole network but the classifier, and the paper's model as the issue describes it: far off
    truth = _autograd_saves(stages, acts, 1, L - 1)
    assert float(auto.S[1:L].sum()) == pytest.approx(truth, rel=0.05)
    assert float(paper.S[1:L].sum()) < 0.8 * truth
    assert float(wabar[1:L].sum()) > 1.1 * truth          # abar alone counts outputs nobody saves
